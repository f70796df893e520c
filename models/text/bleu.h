// Corpus BLEU that reproduces sacreBLEU 2.x (BLEU(), corpus_score) with one reference per
// sentence: 13a tokenization, exponential smoothing, 4-grams, case-sensitive by default.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::text {

enum class BleuTokenize {
  v13a,  // sacreBLEU's default "13a" (mteval-v13a): for detokenized text
  none,  // split on whitespace only: for text already tokenized (e.g. by text::tokenize)
};

struct BleuOptions {
  bool lowercase = false;  // Python's str.lower() before tokenizing (see text::to_lower)
  BleuTokenize tokenize = BleuTokenize::v13a;
};

struct BleuScore {
  static constexpr int kMaxOrder = 4;

  double score = 0;                                   // 0..100
  std::array<double, kMaxOrder> precisions{};         // percent, smoothed as sacreBLEU reports them
  std::array<int64_t, kMaxOrder> correct{}, total{};  // clipped matches and hypothesis n-grams
  double bp = 0;                                      // brevity penalty
  double ratio = 0;                                   // sys_len / ref_len
  int64_t sys_len = 0, ref_len = 0;                   // tokens after tokenization

  // "BLEU = 33.12 65.1/40.2/26.3/17.5 (BP = 1.000 ratio = 1.012 hyp_len = 9 ref_len = 9)",
  // sacreBLEU's score line digit for digit.
  std::string format() const;
};

// sacreBLEU's signature without its version field (this is not sacreBLEU), e.g.
// "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp".
std::string bleu_signature(const BleuOptions& options = {});

// One hypothesis and one reference per sentence, raw lines (no '\n'). Throws ValueError when the
// counts differ, when there are no sentences, or on invalid UTF-8 (naming the sentence).
BleuScore corpus_bleu(std::span<const std::string> hypotheses,
                      std::span<const std::string> references, const BleuOptions& options = {});

// The "tokenized BLEU" tutorials report: token lists (e.g. from text::tokenize, already
// lower-cased) compared as they are; the same as corpus_bleu on space-joined tokens with
// BleuTokenize::none.
BleuScore corpus_bleu_tokens(std::span<const std::vector<std::string>> hypotheses,
                             std::span<const std::vector<std::string>> references);

// sacreBLEU's Tokenizer13a on one line (entities unescaped, punctuation split, spaces collapsed).
std::string tokenize_13a(std::string_view line);

}  // namespace seqgrad::text
