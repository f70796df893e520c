// sacreBLEU-compatible corpus BLEU: the 13a tokenizer, n-gram statistics and BLEU.compute_bleu
// with exp smoothing, written to perform the same floating-point operations in the same order.
#include "models/text/bleu.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.h"
#include "models/text/tokenizer.h"

namespace seqgrad::text {

namespace {

constexpr int kOrder = BleuScore::kMaxOrder;

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

// Python's str.split() with no argument: runs of Unicode whitespace separate, none are kept.
std::vector<std::string_view> split_whitespace(std::string_view s) {
  std::vector<std::string_view> words;
  std::size_t start = std::string_view::npos;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t here = pos;
    if (is_unicode_space(next_code_point(s, pos))) {
      if (start != std::string_view::npos) words.push_back(s.substr(start, here - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = here;
    }
  }
  if (start != std::string_view::npos) words.push_back(s.substr(start));
  return words;
}

// Python's str.rstrip() with no argument.
std::string_view rstrip(std::string_view s) {
  std::size_t end = 0;
  for (std::size_t pos = 0; pos < s.size();)
    if (!is_unicode_space(next_code_point(s, pos))) end = pos;
  return s.substr(0, end);
}

// The characters of 13a's first regex, [\{-\~\[-\` -\&\(-\+\:-\@\/], which get spaces around.
bool is_13a_symbol(unsigned char c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == '/';
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_comma(char c) { return c == '.' || c == ','; }

// re.sub for a two-character pattern (first matches a, second matches b): scans left to right and
// resumes after each match, as Python does. Working on bytes is exact here because every class is
// either ASCII or the complement of an ASCII class, and UTF-8 continuation bytes are never ASCII.
template <class A, class B, class Emit>
std::string sub_pairs(const std::string& s, A a, B b, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i + 1 < s.size() && a(s[i]) && b(s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string join(std::span<const std::string_view> words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += ' ';
    out += words[i];
  }
  return out;
}

struct SegmentStats {
  int64_t hyp_len = 0, ref_len = 0;
  std::array<int64_t, kOrder> correct{}, total{};
};

using NgramCounts = std::unordered_map<std::string, int64_t>;

// All 1..4-grams of a whitespace-split line, keyed by the space-joined words (words hold no
// whitespace, so keys of different orders never collide).
NgramCounts count_ngrams(std::span<const std::string_view> words) {
  NgramCounts counts;
  for (int n = 1; n <= kOrder; ++n) {
    for (std::size_t i = 0; i + n <= words.size(); ++i)
      ++counts[join(words.subspan(i, static_cast<std::size_t>(n)))];
  }
  return counts;
}

std::string preprocess(std::string_view sentence, const BleuOptions& options) {
  const std::string cased = options.lowercase ? to_lower(sentence) : std::string(sentence);
  const std::string_view stripped = rstrip(cased);
  return options.tokenize == BleuTokenize::v13a ? tokenize_13a(stripped) : std::string(stripped);
}

SegmentStats segment_stats(const std::string& hyp, const std::string& ref) {
  const std::vector<std::string_view> hyp_words = split_whitespace(hyp);
  const std::vector<std::string_view> ref_words = split_whitespace(ref);
  const NgramCounts ref_counts = count_ngrams(ref_words);
  SegmentStats stats;
  stats.hyp_len = static_cast<int64_t>(hyp_words.size());
  stats.ref_len = static_cast<int64_t>(ref_words.size());
  for (const auto& [ngram, count] : count_ngrams(hyp_words)) {
    const auto n = static_cast<std::size_t>(std::count(ngram.begin(), ngram.end(), ' '));
    stats.total[n] += count;
    if (const auto it = ref_counts.find(ngram); it != ref_counts.end())
      stats.correct[n] += std::min(count, it->second);
  }
  return stats;
}

// sacrebleu.utils.my_log: log floored at -9999999999 for a zero precision.
double floored_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

// BLEU.compute_bleu with smooth_method="exp", effective_order=False.
BleuScore compute_bleu(const SegmentStats& s) {
  BleuScore out;
  out.correct = s.correct;
  out.total = s.total;
  out.sys_len = s.hyp_len;
  out.ref_len = s.ref_len;
  out.ratio = s.ref_len ? static_cast<double>(s.hyp_len) / static_cast<double>(s.ref_len) : 0.0;
  out.bp = 1.0;
  if (s.hyp_len < s.ref_len)
    out.bp = s.hyp_len > 0
                 ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.hyp_len))
                 : 0.0;
  if (std::all_of(s.correct.begin(), s.correct.end(), [](int64_t c) { return c == 0; })) return out;

  // NIST/mteval smoothing: the k-th order with no match counts as 1 / (2^k * total).
  double smooth = 1.0;
  for (int n = 0; n < kOrder; ++n) {
    if (s.total[n] == 0) break;
    if (s.correct[n] == 0) {
      smooth *= 2;
      out.precisions[n] = 100.0 / (smooth * static_cast<double>(s.total[n]));
    } else {
      out.precisions[n] =
          100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    }
  }
  double log_sum = 0.0;
  for (double p : out.precisions) log_sum += floored_log(p);
  out.score = out.bp * std::exp(log_sum / kOrder);
  return out;
}

void check_utf8(std::span<const std::string> lines, std::string_view what) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto bad = find_invalid_utf8(lines[i]);
    SG_CHECK_VALUE(!bad, "corpus_bleu: {} {} is not valid UTF-8 (byte {})", what, i,
                   bad.value_or(0));
  }
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  std::string s(line);
  replace_all(s, "<skipped>", "");
  replace_all(s, "-\n", "");
  replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replace_all(s, "&quot;", "\"");
    replace_all(s, "&amp;", "&");
    replace_all(s, "&lt;", "<");
    replace_all(s, "&gt;", ">");
  }
  std::string spaced = " ";
  for (char c : s) {
    if (is_13a_symbol(static_cast<unsigned char>(c))) {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  spaced += ' ';
  const auto not_digit = [](char c) { return !is_digit(c); };
  // Period and comma split off unless preceded by a digit, then unless followed by one.
  spaced = sub_pairs(spaced, not_digit, is_period_comma,
                     [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  spaced = sub_pairs(spaced, is_period_comma, not_digit,
                     [](std::string& o, char a, char b) { o += ' ', o += a, o += ' ', o += b; });
  // A dash after a digit splits off ("5-4" -> "5 - 4").
  spaced = sub_pairs(
      spaced, is_digit, [](char c) { return c == '-'; },
      [](std::string& o, char a, char b) { o += a, o += ' ', o += b, o += ' '; });
  return join(split_whitespace(spaced));
}

std::string BleuScore::format() const {
  return fmt::format(
      "BLEU = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len "
      "= {})",
      score, precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio, sys_len,
      ref_len);
}

std::string bleu_signature(const BleuOptions& options) {
  return fmt::format("nrefs:1|case:{}|eff:no|tok:{}|smooth:exp", options.lowercase ? "lc" : "mixed",
                     options.tokenize == BleuTokenize::v13a ? "13a" : "none");
}

BleuScore corpus_bleu(std::span<const std::string> hypotheses,
                      std::span<const std::string> references, const BleuOptions& options) {
  SG_CHECK_VALUE(hypotheses.size() == references.size(),
                 "corpus_bleu: {} hypotheses but {} references; need one reference per hypothesis",
                 hypotheses.size(), references.size());
  SG_CHECK_VALUE(!hypotheses.empty(), "corpus_bleu: no sentences to score");
  check_utf8(hypotheses, "hypothesis");
  check_utf8(references, "reference");
  SegmentStats sum;
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    const SegmentStats s =
        segment_stats(preprocess(hypotheses[i], options), preprocess(references[i], options));
    sum.hyp_len += s.hyp_len;
    sum.ref_len += s.ref_len;
    for (int n = 0; n < kOrder; ++n) {
      sum.correct[n] += s.correct[n];
      sum.total[n] += s.total[n];
    }
  }
  return compute_bleu(sum);
}

BleuScore corpus_bleu_tokens(std::span<const std::vector<std::string>> hypotheses,
                             std::span<const std::vector<std::string>> references) {
  const auto joined = [](std::span<const std::vector<std::string>> sentences) {
    std::vector<std::string> out;
    out.reserve(sentences.size());
    for (const auto& tokens : sentences) {
      std::vector<std::string_view> views(tokens.begin(), tokens.end());
      out.push_back(join(views));
    }
    return out;
  };
  return corpus_bleu(joined(hypotheses), joined(references), {.tokenize = BleuTokenize::none});
}

}  // namespace seqgrad::text
