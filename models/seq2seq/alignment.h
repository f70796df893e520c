// Alignments and attention diagnostics of one translation, from the attention weights decoding
// returns (Hypothesis::attention): hard alignments (Pharaoh "src-tgt" pairs) and soft ones (the
// weight rows), at token or word level, and each output's entropy, each source unit's coverage and
// the attention's distance from the diagonal. docs/outputs.md documents the formats.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "models/seq2seq/decode.h"

namespace seqgrad::models {

// A translation's attention weights with their axes. Row t is the distribution output unit t paid
// over the source, summing to 1. Columns: the source tokens (or words), then "<eos>", which every
// source is encoded with. Rows: the output tokens (or words), then "<eos>" when the hypothesis
// finished (a hypothesis cut at max_len has no <eos> row).
struct AttentionMatrix {
  std::vector<std::string> src, tgt;  // column labels, row labels
  std::vector<float> weights;         // (tgt.size(), src.size()), row-major
  bool finished = true;               // the last row is the output's <eos>

  float at(size_t row, size_t col) const { return weights[row * src.size() + col]; }
  size_t src_units() const { return src.size() - 1; }                 // the columns before the source's <eos>
  size_t tgt_units() const { return tgt.size() - (finished ? 1 : 0); }  // the rows before the output's <eos>
};

// The matrix of one hypothesis: src_tokens as the model read them (without <eos>), tgt_tokens its
// output tokens (Vocab::decode of hyp.tokens). Throws ValueError when the attention rows do not fit
// the tokens (one row per output token, plus <eos> when finished; src_tokens + 1 weights a row).
AttentionMatrix attention_matrix(const std::vector<std::string>& src_tokens,
                                 const std::vector<std::string>& tgt_tokens, const Hypothesis& hyp);

// Subword pieces merged into words (text::merge_pieces: a word starts at a piece beginning with
// "▁"; <eos> stays a word of its own): a word's source columns are summed, so a cell is the
// attention the output paid to the whole word, and its output rows averaged, so each row still sums
// to one. Word-level labels come back unchanged. Only for weights: a sum of pre-softmax energies
// means nothing.
AttentionMatrix merged_into_words(const AttentionMatrix& pieces);

// One Pharaoh pair "src-tgt" (0-based): output unit tgt is aligned to source unit src.
struct AlignmentPoint {
  int64_t src = 0, tgt = 0;
  bool operator==(const AlignmentPoint&) const = default;
};

// The hard alignment: each output unit (the <eos> row left out) aligned to the source unit it
// attends to most, the source's <eos> column left out (a tie goes to the first), so every output unit
// has exactly one source unit and every index names a word. As Marian's `--alignment hard` (its
// argmax per target word), sorted by source, then target.
std::vector<AlignmentPoint> hard_alignment(const AttentionMatrix& m);
// How far two attentions over the same axes (one translation's) align alike: the share of output
// units whose hard alignment (above) is the same source unit in both, in [0, 1]; empty when there
// is no output unit or no source unit to align. A head against its layer's head average, or
// against another model's attention on the same sentence and output. ValueError for other axes.
std::optional<double> alignment_agreement(const AttentionMatrix& a, const AttentionMatrix& b);
// How much two attentions over the same axes (one sentence, one output: a Transformer head replayed
// along the GRU's output against the GRU's attention) put on the same source units: the mean over
// every row t (the <eos> row included) of Σ_s min(a_ts, b_ts) over every column (the source's <eos>
// included). A row's overlap is 1 − the total variation distance of its two distributions: 1 for
// equal rows, 0 for rows on disjoint units; it counts how much weight agrees, not only the argmax
// (alignment_agreement). Empty when there is no row. ValueError for other axes.
std::optional<double> attention_overlap(const AttentionMatrix& a, const AttentionMatrix& b);
// "0-2 1-1 2-0": the pairs as Pharaoh, fast_align and Marian write them.
std::string pharaoh(const std::vector<AlignmentPoint>& pairs);
// The soft alignment as Marian prints it: one group per row (every row and column, <eos> included,
// so each group sums to 1), the row's weights joined by ",", the groups by " ".
std::string soft_alignment_text(const AttentionMatrix& m);

// How a translation's attention behaved (docs/outputs.md, "Attention diagnostics").
struct AttentionDiagnostics {
  // Per row (every output unit, <eos> included): -Σ_s w_s ln w_s over every column, in nats; 0 for
  // a row on one source unit, ln S for a row spread evenly over all S columns.
  std::vector<double> entropy;
  double mean_entropy = 0;  // their mean
  // Per column (every source unit, <eos> included): Σ_t w_ts over every row, the attention the unit
  // received in all (the coverage of Tu et al., 2016, "Modeling Coverage for Neural Machine
  // Translation"); the columns sum to the number of rows. Much more than 1: attended again and
  // again; near 0: left out.
  std::vector<double> coverage;
  // The mean over output units t (the <eos> row left out) of |Σ_s ŵ_ts p_s − q_t|: the distance of
  // the attention-weighted source position from the diagonal, positions relative to the sentence
  // (p_s = (s + ½)/S for S source units, q_t = (t + ½)/T for T output units: each unit's centre
  // when a sentence spans [0, 1]; fast_align's diagonal feature |i/m − j/n|, Dyer et al. 2013,
  // made symmetric). ŵ_t is row t over the source units, the <eos> column left out, renormalised;
  // rows with no weight there are skipped. 0 for monotone attention between sentences of equal
  // length, |n − 1 − 2t|/n per row for a reversal of n units. Empty when no row counts (an empty
  // output).
  std::optional<double> diagonal_distance;
};
AttentionDiagnostics attention_diagnostics(const AttentionMatrix& m);

}  // namespace seqgrad::models
