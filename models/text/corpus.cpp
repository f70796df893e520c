// Corpus reading and cleaning, tokenizing/encoding, subsets, and bucketed batching.
#include "models/text/corpus.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fileio.h"

namespace seqgrad::text {

// ---- reading ------------------------------------------------------------------------------------

std::vector<std::string> read_lines(const std::string& path) {
  // read_file: a directory, an unreadable file or one that does not fit in memory is an IOError
  // naming it (an ifstream reads a directory as an empty file).
  const std::string data = read_file(path);
  // Classic Mac OS line endings (CR alone): the whole file would be one line.
  SG_CHECK_IO(data.find('\r') == std::string::npos || data.find('\n') != std::string::npos,
              "read_lines: '{}' ends its lines with CR alone (classic Mac OS endings), not LF or CR LF; "
              "convert it, e.g. tr '\\r' '\\n'", path);

  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < data.size()) {
    std::size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();  // last line without a final newline
    lines.emplace_back(data, start, end - start);
    start = end + 1;
  }
  return lines;
}

std::string ReadReport::summary() const {
  return fmt::format(
      "read {} pairs, kept {}; skipped {} placeholder, {} empty, {} bad-column; re-spaced {} "
      "sentences, trimmed {}, removed {} CR",
      lines, kept, skipped_placeholder, skipped_empty, skipped_bad_columns, sides_respaced,
      sides_trimmed, carriage_returns);
}

namespace {

// Lines from files written on Windows end in CR LF; read_lines() took the LF.
std::string strip_cr(std::string line, ReadReport& report) {
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
    ++report.carriage_returns;
  }
  return line;
}

// Cleans one raw sentence, counting what was changed; path and line only name it in errors.
std::string clean_sentence(const std::string& raw, const std::string& path, int64_t line,
                           ReadReport& report) {
  const auto bad = find_invalid_utf8(raw);
  SG_CHECK_IO(!bad, "{}:{}: invalid UTF-8 at byte {} of the line", path, line, bad.value_or(0));

  // Strip blank code points at both ends, stepping back over UTF-8 continuation bytes at the end.
  std::size_t first = 0, last = raw.size();
  for (std::size_t pos = first; first < last && is_blank(next_code_point(raw, pos));) first = pos;
  while (last > first) {
    std::size_t start = last - 1;
    while (start > first && (static_cast<unsigned char>(raw[start]) & 0xC0) == 0x80) --start;
    std::size_t pos = start;
    if (!is_blank(next_code_point(raw, pos))) break;
    last = start;
  }
  const std::string_view core = std::string_view(raw).substr(first, last - first);
  std::string clean = normalize_spaces(core);
  report.sides_trimmed += (first > 0 || last < raw.size()) ? 1 : 0;
  report.sides_respaced += clean != core ? 1 : 0;
  return clean;
}

void note(ReadReport& report, const std::string& path, int64_t line, std::string_view what) {
  if (report.examples.size() < ReadReport::kMaxExamples)
    report.examples.push_back(fmt::format("{}:{}: {}", path, line, what));
}

bool is_placeholder(const std::string& s, const ReadOptions& options) {
  return std::find(options.placeholders.begin(), options.placeholders.end(), s) !=
         options.placeholders.end();
}

// Applies the skip rules to a cleaned pair; keeps it in `corpus` or counts why not.
void add_pair(SentencePair pair, const std::string& path, int64_t line, const ReadOptions& options,
              ParallelCorpus& corpus) {
  ReadReport& report = corpus.report;
  if (is_placeholder(pair.src, options) || is_placeholder(pair.tgt, options)) {
    ++report.skipped_placeholder;
    const std::string& which = is_placeholder(pair.src, options) ? pair.src : pair.tgt;
    note(report, path, line, fmt::format("placeholder \"{}\", pair skipped", which));
  } else if (pair.src.empty() || pair.tgt.empty()) {
    ++report.skipped_empty;
    note(report, path, line, "empty sentence, pair skipped");
  } else {
    corpus.pairs.push_back(std::move(pair));
    ++report.kept;
  }
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
    fields.emplace_back(line, start, tab - start);
  fields.emplace_back(line, start);
  return fields;
}

}  // namespace

ParallelCorpus read_parallel(const std::string& src_path, const std::string& tgt_path,
                             const ReadOptions& options) {
  std::vector<std::string> src = read_lines(src_path);
  std::vector<std::string> tgt = read_lines(tgt_path);
  SG_CHECK_IO(src.size() == tgt.size(),
              "read_parallel: '{}' has {} lines but '{}' has {}; parallel files must be aligned "
              "line by line",
              src_path, src.size(), tgt_path, tgt.size());
  ParallelCorpus corpus;
  corpus.pairs.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    const auto line = static_cast<int64_t>(i + 1);
    ++corpus.report.lines;
    ReadReport& report = corpus.report;
    SentencePair pair{clean_sentence(strip_cr(std::move(src[i]), report), src_path, line, report),
                      clean_sentence(strip_cr(std::move(tgt[i]), report), tgt_path, line, report)};
    const bool src_bad = pair.src.empty() || is_placeholder(pair.src, options);
    add_pair(std::move(pair), src_bad ? src_path : tgt_path, line, options, corpus);
  }
  return corpus;
}

ParallelCorpus read_tsv_pairs(const std::string& path, int64_t src_col, int64_t tgt_col,
                              const ReadOptions& options) {
  std::vector<std::string> lines = read_lines(path);
  SG_CHECK_VALUE(options.columns >= 0, "read_tsv_pairs: columns = {} must be >= 0",
                 options.columns);
  int64_t columns = options.columns;
  ParallelCorpus corpus;
  corpus.pairs.reserve(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto line = static_cast<int64_t>(i + 1);
    ++corpus.report.lines;
    lines[i] = strip_cr(std::move(lines[i]), corpus.report);
    if (lines[i].empty()) {
      ++corpus.report.skipped_empty;
      note(corpus.report, path, line, "empty line skipped");
      continue;
    }
    std::vector<std::string> fields = split_tabs(lines[i]);
    if (columns == 0) columns = static_cast<int64_t>(fields.size());
    SG_CHECK_VALUE(src_col >= 0 && src_col < columns && tgt_col >= 0 && tgt_col < columns,
                   "read_tsv_pairs: columns src_col = {} and tgt_col = {} must lie in [0, {}) for "
                   "'{}' ({} columns)",
                   src_col, tgt_col, columns, path, columns);
    const auto found = static_cast<int64_t>(fields.size());
    if (found != columns) {
      const std::string what =
          fmt::format("expected {} tab-separated columns, found {}", columns, found);
      SG_CHECK_IO(options.on_bad_line == OnBadLine::skip, "{}:{}: {}", path, line, what);
      ++corpus.report.skipped_bad_columns;
      note(corpus.report, path, line, what + ", line skipped");
      continue;
    }
    SentencePair pair{clean_sentence(fields[src_col], path, line, corpus.report),
                      clean_sentence(fields[tgt_col], path, line, corpus.report)};
    add_pair(std::move(pair), path, line, options, corpus);
  }
  return corpus;
}

// ---- tokens and ids -----------------------------------------------------------------------------

std::vector<TokenizedPair> tokenize_pairs(std::span<const SentencePair> pairs,
                                          const TokenizeOptions& src_options,
                                          const TokenizeOptions& tgt_options) {
  std::vector<TokenizedPair> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs)
    out.push_back({tokenize(p.src, src_options), tokenize(p.tgt, tgt_options)});
  return out;
}

std::vector<std::vector<std::string>> source_side(std::span<const TokenizedPair> pairs) {
  std::vector<std::vector<std::string>> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs) out.push_back(p.src);
  return out;
}

std::vector<std::vector<std::string>> target_side(std::span<const TokenizedPair> pairs) {
  std::vector<std::vector<std::string>> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs) out.push_back(p.tgt);
  return out;
}

namespace {

std::vector<int64_t> encode_side(const std::vector<std::string>& tokens, const Vocab& vocab,
                                 int64_t max_tokens, int64_t& truncated) {
  std::span<const std::string> kept(tokens);
  if (max_tokens > 0 && static_cast<int64_t>(kept.size()) > max_tokens) {
    kept = kept.first(static_cast<std::size_t>(max_tokens));
    ++truncated;
  }
  std::vector<int64_t> ids = vocab.encode(kept);
  ids.push_back(Vocab::kEos);
  return ids;
}

}  // namespace

EncodedCorpus encode_pairs(std::span<const TokenizedPair> pairs, const Vocab& src_vocab,
                           const Vocab& tgt_vocab, const EncodeOptions& options) {
  SG_CHECK_VALUE(options.max_src_tokens >= 0 && options.max_tgt_tokens >= 0,
                 "encode_pairs: max_src_tokens = {} and max_tgt_tokens = {} must be >= 0 (0 = no "
                 "limit)",
                 options.max_src_tokens, options.max_tgt_tokens);
  EncodedCorpus out;
  out.pairs.reserve(pairs.size());
  for (const auto& p : pairs)
    out.pairs.push_back({encode_side(p.src, src_vocab, options.max_src_tokens, out.truncated_src),
                         encode_side(p.tgt, tgt_vocab, options.max_tgt_tokens, out.truncated_tgt)});
  return out;
}

// ---- deterministic shuffling --------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

ShuffleRng::ShuffleRng(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t ShuffleRng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t ShuffleRng::below(uint64_t n) {
  SG_CHECK_VALUE(n >= 1, "ShuffleRng::below: n = {} must be >= 1", n);
  // Reject the lowest 2^64 mod n values so every residue is equally likely.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = next();
    if (r >= threshold) return r % n;
  }
}

// ---- subsets ------------------------------------------------------------------------------------

std::vector<int64_t> subset_indices(int64_t n, const SubsetOptions& options) {
  SG_CHECK_VALUE(options.count >= 0 && options.count <= n,
                 "subset: count = {} must lie in [0, {}] (the number of items)", options.count, n);
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options.mode == SubsetMode::random) {
    ShuffleRng rng(options.seed);
    shuffle(order, rng);
  }
  order.resize(static_cast<std::size_t>(options.count));
  std::sort(order.begin(), order.end());
  return order;
}

// ---- batches ------------------------------------------------------------------------------------

namespace {

Batch make_batch(std::span<const EncodedPair> pairs, std::span<const int64_t> rows) {
  Batch b;
  b.batch = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) {
    const EncodedPair& p = pairs[static_cast<std::size_t>(r)];
    b.src_lengths.push_back(static_cast<int64_t>(p.src.size()));
    b.tgt_lengths.push_back(static_cast<int64_t>(p.tgt.size()));
    b.src_len_max = std::max(b.src_len_max, b.src_lengths.back());
    b.tgt_len_max = std::max(b.tgt_len_max, b.tgt_lengths.back());
    b.index.push_back(r);
  }
  const auto S = static_cast<std::size_t>(b.src_len_max),
             T = static_cast<std::size_t>(b.tgt_len_max);
  b.src.assign(rows.size() * S, Vocab::kPad);
  b.tgt_in.assign(rows.size() * T, Vocab::kPad);
  b.tgt_out.assign(rows.size() * T, Vocab::kPad);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const EncodedPair& p = pairs[static_cast<std::size_t>(rows[i])];
    std::copy(p.src.begin(), p.src.end(), b.src.begin() + i * S);
    // Teacher forcing: tgt_in = <bos> y1 .. yn, tgt_out = y1 .. yn <eos>.
    b.tgt_in[i * T] = Vocab::kBos;
    std::copy(p.tgt.begin(), p.tgt.end() - 1, b.tgt_in.begin() + i * T + 1);
    std::copy(p.tgt.begin(), p.tgt.end(), b.tgt_out.begin() + i * T);
  }
  return b;
}

void check_pairs(std::span<const EncodedPair> pairs) {
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const EncodedPair& p = pairs[i];
    SG_CHECK_VALUE(!p.src.empty() && p.src.back() == Vocab::kEos && !p.tgt.empty() &&
                       p.tgt.back() == Vocab::kEos,
                   "make_batches: pair {} must end both sides with <eos> (id {}); use "
                   "encode_pairs() (source has {} ids, target {})",
                   i, Vocab::kEos, p.src.size(), p.tgt.size());
  }
}

}  // namespace

std::vector<Batch> make_batches(std::span<const EncodedPair> pairs, const BatchOptions& options) {
  SG_CHECK_VALUE(options.batch_size >= 1, "make_batches: batch_size = {} must be >= 1",
                 options.batch_size);
  check_pairs(pairs);
  std::vector<int64_t> order(pairs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  ShuffleRng rng(options.seed);
  if (options.shuffle) shuffle(order, rng);
  if (options.bucket_by_length) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const EncodedPair &pa = pairs[static_cast<std::size_t>(a)],
                        &pb = pairs[static_cast<std::size_t>(b)];
      return pa.src.size() != pb.src.size() ? pa.src.size() < pb.src.size()
                                            : pa.tgt.size() < pb.tgt.size();
    });
  }
  const auto size = static_cast<std::size_t>(options.batch_size);
  std::vector<std::size_t> starts;
  for (std::size_t start = 0; start < order.size(); start += size)
    if (!options.drop_last || start + size <= order.size()) starts.push_back(start);
  if (options.shuffle) shuffle(starts, rng);

  std::vector<Batch> batches;
  batches.reserve(starts.size());
  for (std::size_t start : starts) {
    const std::size_t count = std::min(size, order.size() - start);
    batches.push_back(make_batch(pairs, std::span(order).subspan(start, count)));
  }
  return batches;
}

}  // namespace seqgrad::text
