#include "models/seq2seq/alignment.h"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "core/error.h"
#include "models/text/subword.h"

namespace seqgrad::models {

AttentionMatrix attention_matrix(const std::vector<std::string>& src_tokens,
                                 const std::vector<std::string>& tgt_tokens, const Hypothesis& hyp) {
  const size_t rows = tgt_tokens.size() + (hyp.finished ? 1 : 0);
  SG_CHECK_VALUE(hyp.attention.size() == rows, "attention_matrix: {} attention rows for {} output tokens{} "
                 "(one row per token, <eos> included)", hyp.attention.size(), tgt_tokens.size(),
                 hyp.finished ? " and <eos>" : "");
  AttentionMatrix m{.src = src_tokens, .tgt = tgt_tokens, .weights = {}, .finished = hyp.finished};
  m.src.push_back("<eos>");
  if (hyp.finished) m.tgt.push_back("<eos>");
  for (size_t t = 0; t < rows; ++t) {
    SG_CHECK_VALUE(hyp.attention[t].size() == m.src.size(), "attention_matrix: attention row {} has {} weights "
                   "for a source of {} tokens and <eos>", t, hyp.attention[t].size(), src_tokens.size());
    m.weights.insert(m.weights.end(), hyp.attention[t].begin(), hyp.attention[t].end());
  }
  return m;
}

AttentionMatrix merged_into_words(const AttentionMatrix& pieces) {
  const text::MergedPieces cols = text::merge_pieces(pieces.src);
  const text::MergedPieces rows = text::merge_pieces(pieces.tgt);
  AttentionMatrix words{.src = cols.words, .tgt = rows.words, .weights = {}, .finished = pieces.finished};
  std::vector<int> pieces_per_row(rows.words.size(), 0);
  for (int64_t word : rows.word_of_piece) ++pieces_per_row[word];
  words.weights.assign(words.tgt.size() * words.src.size(), 0.0f);
  for (size_t r = 0; r < pieces.tgt.size(); ++r) {
    const auto row = static_cast<size_t>(rows.word_of_piece[r]);
    for (size_t c = 0; c < pieces.src.size(); ++c)  // sum over the word's columns, mean over its rows
      words.weights[row * words.src.size() + cols.word_of_piece[c]] +=
          pieces.at(r, c) / static_cast<float>(pieces_per_row[row]);
  }
  return words;
}

std::vector<AlignmentPoint> hard_alignment(const AttentionMatrix& m) {
  std::vector<AlignmentPoint> pairs;
  if (m.src_units() == 0) return pairs;  // nothing but <eos> to align to
  for (size_t t = 0; t < m.tgt_units(); ++t) {
    size_t best = 0;
    for (size_t s = 1; s < m.src_units(); ++s)
      if (m.at(t, s) > m.at(t, best)) best = s;  // strictly greater: a tie keeps the first
    pairs.push_back({static_cast<int64_t>(best), static_cast<int64_t>(t)});
  }
  std::sort(pairs.begin(), pairs.end(), [](const AlignmentPoint& a, const AlignmentPoint& b) {
    return a.src != b.src ? a.src < b.src : a.tgt < b.tgt;
  });
  return pairs;
}

std::optional<double> alignment_agreement(const AttentionMatrix& a, const AttentionMatrix& b) {
  SG_CHECK_VALUE(a.src == b.src && a.tgt == b.tgt, "alignment_agreement: the attentions have other axes ({} x {} "
                 "and {} x {} units): compare two attentions of one translation", a.tgt.size(), a.src.size(),
                 b.tgt.size(), b.src.size());
  const std::vector<AlignmentPoint> x = hard_alignment(a), y = hard_alignment(b);
  if (x.empty()) return std::nullopt;
  size_t same = 0;  // each output unit has one pair in each
  for (const AlignmentPoint& p : x) same += static_cast<size_t>(std::count(y.begin(), y.end(), p));
  return static_cast<double>(same) / static_cast<double>(x.size());
}

std::optional<double> attention_overlap(const AttentionMatrix& a, const AttentionMatrix& b) {
  SG_CHECK_VALUE(a.src == b.src && a.tgt == b.tgt, "attention_overlap: the attentions have other axes ({} x {} and "
                 "{} x {} units): compare two attentions of one sentence and one output", a.tgt.size(), a.src.size(),
                 b.tgt.size(), b.src.size());
  if (a.tgt.empty()) return std::nullopt;
  double total = 0;  // Σ_t Σ_s min(a_ts, b_ts)
  for (size_t t = 0; t < a.tgt.size(); ++t)
    for (size_t s = 0; s < a.src.size(); ++s) total += std::min<double>(a.at(t, s), b.at(t, s));
  return total / static_cast<double>(a.tgt.size());
}

std::string pharaoh(const std::vector<AlignmentPoint>& pairs) {
  std::string out;
  for (const AlignmentPoint& p : pairs) out += fmt::format("{}{}-{}", out.empty() ? "" : " ", p.src, p.tgt);
  return out;
}

std::string soft_alignment_text(const AttentionMatrix& m) {
  std::string out;
  for (size_t t = 0; t < m.tgt.size(); ++t) {
    if (t > 0) out += ' ';
    for (size_t s = 0; s < m.src.size(); ++s) out += fmt::format("{}{:.4f}", s > 0 ? "," : "", m.at(t, s));
  }
  return out;
}

namespace {

// -Σ w ln w over one row, with 0 ln 0 = 0 (the limit): a weight the softmax rounded to 0 adds nothing.
double entropy_of_row(const AttentionMatrix& m, size_t t) {
  double h = 0;
  for (size_t s = 0; s < m.src.size(); ++s) {
    const double w = m.at(t, s);
    if (w > 0) h -= w * std::log(w);
  }
  return h;
}

// |Σ_s ŵ_ts p_s − q_t| for output unit t, or nothing when the row has no weight on a source unit.
std::optional<double> row_distance_from_diagonal(const AttentionMatrix& m, size_t t) {
  const auto S = static_cast<double>(m.src_units()), T = static_cast<double>(m.tgt_units());
  double mass = 0, position = 0;  // Σ_s w_ts and Σ_s w_ts p_s over the source units
  for (size_t s = 0; s < m.src_units(); ++s) {
    mass += m.at(t, s);
    position += m.at(t, s) * (static_cast<double>(s) + 0.5) / S;
  }
  if (mass <= 0) return std::nullopt;
  return std::abs(position / mass - (static_cast<double>(t) + 0.5) / T);
}

}  // namespace

AttentionDiagnostics attention_diagnostics(const AttentionMatrix& m) {
  AttentionDiagnostics d;
  d.coverage.assign(m.src.size(), 0.0);
  for (size_t t = 0; t < m.tgt.size(); ++t) {
    d.entropy.push_back(entropy_of_row(m, t));
    for (size_t s = 0; s < m.src.size(); ++s) d.coverage[s] += m.at(t, s);
  }
  if (!d.entropy.empty()) {
    for (double h : d.entropy) d.mean_entropy += h;
    d.mean_entropy /= static_cast<double>(d.entropy.size());
  }
  double distance = 0;
  int counted = 0;
  for (size_t t = 0; t < m.tgt_units(); ++t) {
    if (std::optional<double> row = row_distance_from_diagonal(m, t)) distance += *row, ++counted;
  }
  if (counted > 0) d.diagonal_distance = distance / counted;
  return d;
}

}  // namespace seqgrad::models
