// Corpus chrF that reproduces sacreBLEU 2.x (CHRF(), corpus_score) with one reference per
// sentence: character n-grams of orders 1..6 with whitespace removed, F-beta with beta = 2, the
// precision and recall of each order averaged over the orders that occur (sacreBLEU's default,
// eps_smoothing=False). Popović (2015), "chrF: character n-gram F-score for automatic MT evaluation".
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace seqgrad::text {

struct ChrfOptions {
  int char_order = 6;      // sacreBLEU's CHRF.CHAR_ORDER
  int beta = 2;            // recall weighs beta times as much as precision
  bool lowercase = false;  // Python's str.lower() first (see text::to_lower)
};

struct ChrfScore {
  double score = 0;  // 0..100
  int beta = 2;
  // Per order n = 1..char_order: hypothesis n-grams, reference n-grams, clipped matches.
  std::vector<int64_t> hyp_ngrams, ref_ngrams, matches;

  // "chrF2 = 58.03", sacreBLEU's score line.
  std::string format() const;
};

// sacreBLEU's chrF signature without its version field, e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no".
std::string chrf_signature(const ChrfOptions& options = {});

// One hypothesis and one reference per sentence, raw detokenised lines. Throws ValueError when the
// counts differ, when there are no sentences, on invalid UTF-8 (naming the sentence) or on options
// out of range.
ChrfScore corpus_chrf(std::span<const std::string> hypotheses, std::span<const std::string> references,
                      const ChrfOptions& options = {});

}  // namespace seqgrad::text
