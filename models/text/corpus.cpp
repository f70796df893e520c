// Corpus reading and cleaning, tokenizing/encoding, subsets, and bucketed batching.
#include "models/text/corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

// Cleans one raw sentence, counting what was changed; path, line and the line's byte offset in the
// file only name it in errors.
std::string clean_sentence(const std::string& raw, const std::string& path, int64_t line, int64_t file_offset,
                           ReadReport& report) {
  const auto bad = find_invalid_utf8(raw);
  SG_CHECK_IO(!bad, "{}:{}: invalid UTF-8 at byte {} of the line (byte offset {} in the file); the corpus must be "
              "UTF-8 text (convert it, e.g. iconv -f LATIN1 -t UTF-8)", path, line, bad.value_or(0),
              file_offset + static_cast<int64_t>(bad.value_or(0)));

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

// Applies the skip rules to a cleaned pair: true when it is kept, else counts why not.
bool keep_pair(const SentencePair& pair, const std::string& path, int64_t line, const ReadOptions& options,
               ReadReport& report) {
  if (is_placeholder(pair.src, options) || is_placeholder(pair.tgt, options)) {
    ++report.skipped_placeholder;
    const std::string& which = is_placeholder(pair.src, options) ? pair.src : pair.tgt;
    note(report, path, line, fmt::format("placeholder \"{}\", pair skipped", which));
    return false;
  }
  if (pair.src.empty() || pair.tgt.empty()) {
    ++report.skipped_empty;
    note(report, path, line, "empty sentence, pair skipped");
    return false;
  }
  ++report.kept;
  return true;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
    fields.emplace_back(line, start, tab - start);
  fields.emplace_back(line, start);
  return fields;
}

// One text file read line by line through a FILE*: one line in memory, and the byte offset of each
// line kept so that a reader can seek back to it. Only regular files: a corpus is read again every
// epoch, which a pipe cannot do.
class LineFile {
 public:
  explicit LineFile(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    SG_CHECK_IO(std::filesystem::exists(path_, ec) || ec, "cannot open '{}': no such file", path_);
    check_regular_file(path_);  // a directory or a FIFO: an IOError saying what it is
    file_ = std::fopen(path_.c_str(), "rb");
    SG_CHECK_IO(file_ != nullptr, "cannot open '{}': {}", path_, std::strerror(errno));
  }
  ~LineFile() {
    if (file_) std::fclose(file_);
    std::free(buffer_);
  }
  LineFile(const LineFile&) = delete;
  LineFile& operator=(const LineFile&) = delete;

  // The next line without its '\n' (a final line without one counts); false at the end.
  bool next(std::string& line) {
    errno = 0;
    const ssize_t n = ::getline(&buffer_, &capacity_, file_);
    if (n < 0) {
      SG_CHECK_IO(!std::ferror(file_), "cannot read '{}': {}", path_, std::strerror(errno));
      return false;
    }
    line_start_ = offset_;
    offset_ += n;
    ++line_;
    const bool newline = n > 0 && buffer_[n - 1] == '\n';
    line.assign(buffer_, static_cast<std::size_t>(newline ? n - 1 : n));
    // Classic Mac OS line endings (CR alone): the whole file would be one line.
    SG_CHECK_IO(newline || line_ > 1 || line.find('\r') == std::string::npos,
                "read_lines: '{}' ends its lines with CR alone (classic Mac OS endings), not LF or CR LF; "
                "convert it, e.g. tr '\\r' '\\n'", path_);
    return true;
  }
  void seek(int64_t offset, int64_t line) {
    SG_CHECK_IO(::fseeko(file_, static_cast<off_t>(offset), SEEK_SET) == 0, "cannot seek in '{}' to byte {}: {}",
                path_, offset, std::strerror(errno));
    offset_ = offset;
    line_ = line;
  }
  int64_t offset() const { return offset_; }          // where the next line starts
  int64_t line_start() const { return line_start_; }  // where the last line read started
  int64_t line() const { return line_; }              // lines read
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  char* buffer_ = nullptr;
  std::size_t capacity_ = 0;
  int64_t offset_ = 0, line_start_ = 0, line_ = 0;
};

}  // namespace

bool CorpusFiles::selects(int64_t k) const {
  if (period <= 0) return true;
  const bool listed = std::find(residues.begin(), residues.end(), k % period) != residues.end();
  return listed != exclude;
}

std::string CorpusFiles::describe() const {
  return is_tsv() ? fmt::format("{} (columns {} and {})", tsv, src_col, tgt_col) : fmt::format("{} and {}", src, tgt);
}

struct PairReader::Impl {
  CorpusFiles files;
  ReadOptions options;
  ReadReport report;
  std::unique_ptr<LineFile> src, tgt;  // tgt: aligned files only
  int64_t columns = 0;                 // TSV: the expected column count, once known
  int64_t kept = 0;
  std::string src_line, tgt_line;

  std::optional<SentencePair> next_cleaned();
  std::optional<SentencePair> next_aligned();
  std::optional<SentencePair> next_tsv();
  [[noreturn]] void mismatched_line_counts(bool src_longer);
};

PairReader::PairReader(CorpusFiles files, ReadOptions options) : impl_(std::make_unique<Impl>()) {
  SG_CHECK_VALUE(options.columns >= 0, "read_tsv_pairs: columns = {} must be >= 0", options.columns);
  impl_->files = std::move(files);
  impl_->options = std::move(options);
  impl_->columns = impl_->options.columns;
  const CorpusFiles& f = impl_->files;
  if (f.is_tsv()) {
    SG_CHECK_VALUE(f.src_col >= 0 && f.tgt_col >= 0 && f.src_col != f.tgt_col,
                   "read_tsv_pairs: columns src_col = {} and tgt_col = {} must be distinct and >= 0 for '{}'",
                   f.src_col, f.tgt_col, f.tsv);
    impl_->src = std::make_unique<LineFile>(f.tsv);
  } else {
    impl_->src = std::make_unique<LineFile>(f.src);
    impl_->tgt = std::make_unique<LineFile>(f.tgt);
  }
}

PairReader::~PairReader() = default;
PairReader::PairReader(PairReader&&) noexcept = default;
PairReader& PairReader::operator=(PairReader&&) noexcept = default;

std::optional<SentencePair> PairReader::next() {
  for (;;) {
    std::optional<SentencePair> pair = impl_->next_cleaned();
    if (!pair || impl_->files.selects(impl_->kept++)) return pair;
  }
}

void PairReader::check_aligned_to_end() {
  if (!impl_->tgt) return;
  const Position here = position();
  for (;;) {
    const bool has_src = impl_->src->next(impl_->src_line), has_tgt = impl_->tgt->next(impl_->tgt_line);
    if (has_src != has_tgt) impl_->mismatched_line_counts(has_src);
    if (!has_src) break;
  }
  seek(here);
}

PairReader::Position PairReader::position() const {
  return {.src_offset = impl_->src->offset(), .tgt_offset = impl_->tgt ? impl_->tgt->offset() : 0,
          .line = impl_->src->line(), .kept = impl_->kept};
}

void PairReader::seek(const Position& p) {
  impl_->src->seek(p.src_offset, p.line);
  if (impl_->tgt) impl_->tgt->seek(p.tgt_offset, p.line);
  impl_->kept = p.kept;
}

const ReadReport& PairReader::report() const { return impl_->report; }
const CorpusFiles& PairReader::files() const { return impl_->files; }

std::optional<SentencePair> PairReader::Impl::next_cleaned() {
  return files.is_tsv() ? next_tsv() : next_aligned();
}

void PairReader::Impl::mismatched_line_counts(bool src_longer) {
  LineFile& longer = src_longer ? *src : *tgt;
  while (longer.next(src_longer ? src_line : tgt_line)) {
  }
  const int64_t src_lines = src_longer ? longer.line() : src->line();
  const int64_t tgt_lines = src_longer ? tgt->line() : longer.line();
  throw IOError(fmt::format("read_parallel: '{}' has {} lines but '{}' has {}; parallel files must be aligned line "
                            "by line", files.src, src_lines, files.tgt, tgt_lines));
}

std::optional<SentencePair> PairReader::Impl::next_aligned() {
  for (;;) {
    const bool has_src = src->next(src_line), has_tgt = tgt->next(tgt_line);
    if (has_src != has_tgt) mismatched_line_counts(has_src);
    if (!has_src) return std::nullopt;
    const int64_t line = src->line();
    ++report.lines;
    SentencePair pair{clean_sentence(strip_cr(std::move(src_line), report), files.src, line, src->line_start(),
                                     report),
                      clean_sentence(strip_cr(std::move(tgt_line), report), files.tgt, line, tgt->line_start(),
                                     report)};
    const bool src_bad = pair.src.empty() || is_placeholder(pair.src, options);
    if (keep_pair(pair, src_bad ? files.src : files.tgt, line, options, report)) return pair;
  }
}

std::optional<SentencePair> PairReader::Impl::next_tsv() {
  const std::string& path = files.tsv;
  while (src->next(src_line)) {
    const int64_t line = src->line();
    ++report.lines;
    src_line = strip_cr(std::move(src_line), report);
    if (src_line.empty()) {
      ++report.skipped_empty;
      note(report, path, line, "empty line skipped");
      continue;
    }
    std::vector<std::string> fields = split_tabs(src_line);
    const auto found = static_cast<int64_t>(fields.size());
    std::string what;
    if (found == 1) {
      what = fmt::format("no tab in the line; a tab-separated corpus holds source<TAB>target (columns {} and {})",
                         files.src_col, files.tgt_col);
    } else {
      if (columns == 0) columns = found;
      SG_CHECK_VALUE(files.src_col < columns && files.tgt_col < columns,
                     "read_tsv_pairs: columns src_col = {} and tgt_col = {} must lie in [0, {}) for '{}' ({} columns)",
                     files.src_col, files.tgt_col, columns, path, columns);
      if (found != columns) what = fmt::format("expected {} tab-separated columns, found {}", columns, found);
    }
    if (!what.empty()) {
      SG_CHECK_IO(options.on_bad_line == OnBadLine::skip, "{}:{}: {}", path, line, what);
      ++report.skipped_bad_columns;
      note(report, path, line, what + ", line skipped");
      continue;
    }
    SentencePair pair{clean_sentence(fields[files.src_col], path, line, src->line_start(), report),
                      clean_sentence(fields[files.tgt_col], path, line, src->line_start(), report)};
    if (keep_pair(pair, path, line, options, report)) return pair;
  }
  return std::nullopt;
}

ParallelCorpus read_corpus(const CorpusFiles& files, const ReadOptions& options, int64_t max_pairs) {
  PairReader reader(files, options);
  ParallelCorpus corpus;
  for (;;) {
    if (max_pairs > 0 && static_cast<int64_t>(corpus.pairs.size()) == max_pairs) {
      reader.check_aligned_to_end();
      break;
    }
    std::optional<SentencePair> pair = reader.next();
    if (!pair) break;
    corpus.pairs.push_back(std::move(*pair));
  }
  corpus.report = reader.report();
  return corpus;
}

ParallelCorpus read_parallel(const std::string& src_path, const std::string& tgt_path,
                             const ReadOptions& options) {
  CorpusFiles files;
  files.src = src_path, files.tgt = tgt_path;
  return read_corpus(files, options);
}

ParallelCorpus read_tsv_pairs(const std::string& path, int64_t src_col, int64_t tgt_col,
                              const ReadOptions& options) {
  CorpusFiles files;
  files.tsv = path, files.src_col = src_col, files.tgt_col = tgt_col;
  return read_corpus(files, options);
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

namespace {

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

void check_batch_options(const BatchOptions& options) {
  SG_CHECK_VALUE(options.batch_size >= 1, "make_batches: batch_size = {} must be >= 1", options.batch_size);
  SG_CHECK_VALUE(options.batch_tokens >= 0, "make_batches: batch_tokens = {} must be >= 0 (0 = batch_size pairs)",
                 options.batch_tokens);
  if (options.batch_tokens == 0) return;
  SG_CHECK_VALUE(options.bucket_by_length, "make_batches: batch_tokens = {} needs bucket_by_length",
                 options.batch_tokens);
  SG_CHECK_VALUE(!options.drop_last, "make_batches: drop_last applies to sentence batches, not batch_tokens = {}",
                 options.batch_tokens);
}

namespace {

// [begin, end) of each batch along `order`, in order.
using Bounds = std::vector<std::pair<std::size_t, std::size_t>>;

Bounds sentence_bounds(std::size_t n, const BatchOptions& options) {
  const auto size = static_cast<std::size_t>(options.batch_size);
  Bounds bounds;
  for (std::size_t start = 0; start < n; start += size)
    if (!options.drop_last || start + size <= n) bounds.emplace_back(start, std::min(start + size, n));
  return bounds;
}

// Greedy: a pair joins the batch unless rows x longest side would pass the budget; a batch always
// takes its first pair, so a pair longer than the budget forms a batch of its own.
Bounds token_bounds(std::span<const EncodedPair> pairs, const std::vector<int64_t>& order, int64_t budget) {
  Bounds bounds;
  std::size_t begin = 0;
  int64_t longest = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const EncodedPair& p = pairs[static_cast<std::size_t>(order[i])];
    const int64_t side = static_cast<int64_t>(std::max(p.src.size(), p.tgt.size()));
    const int64_t rows = static_cast<int64_t>(i - begin) + 1;
    if (i > begin && std::max(longest, side) * rows > budget) {
      bounds.emplace_back(begin, i);
      begin = i, longest = 0;
    }
    longest = std::max(longest, side);
  }
  if (begin < order.size()) bounds.emplace_back(begin, order.size());
  return bounds;
}

}  // namespace

std::vector<std::vector<int64_t>> plan_batches(std::span<const EncodedPair> pairs, const BatchOptions& options) {
  check_batch_options(options);
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
  Bounds bounds = options.batch_tokens > 0 ? token_bounds(pairs, order, options.batch_tokens)
                                           : sentence_bounds(order.size(), options);
  if (options.shuffle) shuffle(bounds, rng);

  std::vector<std::vector<int64_t>> plan;
  plan.reserve(bounds.size());
  for (const auto& [begin, end] : bounds)
    plan.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin), order.begin() + static_cast<std::ptrdiff_t>(end));
  return plan;
}

std::vector<Batch> make_batches(std::span<const EncodedPair> pairs, const BatchOptions& options) {
  std::vector<Batch> batches;
  for (const std::vector<int64_t>& rows : plan_batches(pairs, options)) batches.push_back(make_batch(pairs, rows));
  return batches;
}

}  // namespace seqgrad::text
