// sacreBLEU-compatible corpus chrF: character n-gram statistics summed over the corpus, then
// CHRF._compute_f_score, written to perform the same floating-point operations in the same order.
#include "models/text/chrf.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.h"
#include "models/text/tokenizer.h"

namespace seqgrad::text {

namespace {

// The line as code points with Unicode whitespace removed: Python's ''.join(line.split()), so that
// n-grams are of characters (code points), as Python's str slicing counts them.
std::u32string code_points_without_spaces(std::string_view line) {
  std::u32string out;
  for (std::size_t pos = 0; pos < line.size();) {
    const char32_t cp = next_code_point(line, pos);
    if (!is_unicode_space(cp)) out += cp;
  }
  return out;
}

using NgramCounts = std::unordered_map<std::u32string, int64_t>;

NgramCounts char_ngrams(const std::u32string& chars, std::size_t n) {
  NgramCounts counts;
  for (std::size_t i = 0; i + n <= chars.size(); ++i) ++counts[chars.substr(i, n)];
  return counts;
}

// CHRF._get_match_statistics for one order: hypothesis n-grams (0 when the reference has none),
// reference n-grams and clipped matches, added to the corpus totals of `order`.
void add_match_statistics(const NgramCounts& hyp, const NgramCounts& ref, std::size_t order, ChrfScore& totals) {
  int64_t hyp_count = 0, ref_count = 0, match_count = 0;
  for (const auto& [ngram, count] : hyp) {
    hyp_count += count;
    if (const auto it = ref.find(ngram); it != ref.end()) match_count += std::min(count, it->second);
  }
  for (const auto& [ngram, count] : ref) ref_count += count;
  totals.hyp_ngrams[order] += ref.empty() ? 0 : hyp_count;
  totals.ref_ngrams[order] += ref_count;
  totals.matches[order] += match_count;
}

// CHRF._compute_f_score with eps_smoothing=False: precision and recall averaged over the orders
// where both the hypothesis and the reference have n-grams, then one F-beta of the averages.
double f_score(const ChrfScore& s) {
  const double factor = static_cast<double>(s.beta) * static_cast<double>(s.beta);
  double avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (std::size_t i = 0; i < s.matches.size(); ++i) {
    if (s.hyp_ngrams[i] == 0 || s.ref_ngrams[i] == 0) continue;
    avg_prec += static_cast<double>(s.matches[i]) / static_cast<double>(s.hyp_ngrams[i]);
    avg_rec += static_cast<double>(s.matches[i]) / static_cast<double>(s.ref_ngrams[i]);
    ++effective_order;
  }
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0.0) return 0.0;
  double score = (1 + factor) * avg_prec * avg_rec;
  score /= (factor * avg_prec) + avg_rec;
  return 100 * score;
}

void check_utf8(std::span<const std::string> lines, std::string_view what) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto bad = find_invalid_utf8(lines[i]);
    SG_CHECK_VALUE(!bad, "corpus_chrf: {} {} is not valid UTF-8 (byte {})", what, i, bad.value_or(0));
  }
}

}  // namespace

std::string ChrfScore::format() const { return fmt::format("chrF{} = {:.2f}", beta, score); }

std::string chrf_signature(const ChrfOptions& options) {
  return fmt::format("nrefs:1|case:{}|eff:yes|nc:{}|nw:0|space:no", options.lowercase ? "lc" : "mixed",
                     options.char_order);
}

ChrfScore corpus_chrf(std::span<const std::string> hypotheses, std::span<const std::string> references,
                      const ChrfOptions& options) {
  SG_CHECK_VALUE(hypotheses.size() == references.size(),
                 "corpus_chrf: {} hypotheses but {} references; need one reference per hypothesis",
                 hypotheses.size(), references.size());
  SG_CHECK_VALUE(!hypotheses.empty(), "corpus_chrf: no sentences to score");
  SG_CHECK_VALUE(options.char_order >= 1 && options.beta >= 1,
                 "corpus_chrf: char_order = {} and beta = {} must be >= 1", options.char_order, options.beta);
  check_utf8(hypotheses, "hypothesis");
  check_utf8(references, "reference");
  const auto orders = static_cast<std::size_t>(options.char_order);
  ChrfScore out;
  out.beta = options.beta;
  out.hyp_ngrams.assign(orders, 0);
  out.ref_ngrams.assign(orders, 0);
  out.matches.assign(orders, 0);
  auto prepare = [&](const std::string& line) {
    return code_points_without_spaces(options.lowercase ? to_lower(line) : line);
  };
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    const std::u32string hyp = prepare(hypotheses[i]), ref = prepare(references[i]);
    for (std::size_t n = 1; n <= orders; ++n)
      add_match_statistics(char_ngrams(hyp, n), char_ngrams(ref, n), n - 1, out);
  }
  out.score = f_score(out);
  return out;
}

}  // namespace seqgrad::text
