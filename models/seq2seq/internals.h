// The terms of every attention energy along one translation, for learners who check them by hand
// (the serve explorer's cell details, docs/attention.md's formulas):
//   additive (Bahdanau et al. 2015):  e_ti = vᵀ tanh(W_q s_{t-1} + W_k h_i)
//   scaled dot:                       e_ti = (W_q s_{t-1}) · h_i / √(2H)
//   a_t = softmax(e_t) over the source,  c_t = Σ_i a_ti h_i
// t runs over the output tokens (its <eos> included when finished), i over the source tokens and
// the source's <eos>; s_{t-1} is the decoder's top-layer state before step t, h_i the encoder's
// output at i.
#pragma once
#include <cstdint>
#include <vector>

#include "models/seq2seq/model.h"

namespace seqgrad::models {

struct AttentionInternals {
  AttentionKind kind = AttentionKind::additive;  // hybrid: the terms of its additive half (Hypothesis::energies')
  std::vector<std::vector<float>> query_terms;  // per step t: W_q s_{t-1} (A values; scaled dot: 2H)
  std::vector<std::vector<float>> key_terms;    // per source position i: W_k h_i (A values; scaled dot: h_i, 2H)
  std::vector<float> v;                         // additive: v (A values); scaled dot: empty
  std::vector<std::vector<float>> energies;     // per step t: e_t (S values), as the decoder computed them
  std::vector<std::vector<float>> weights;      // per step t: a_t (S values)
  std::vector<std::vector<float>> contexts;     // per step t: c_t (2H values)
};

// Runs the decoder teacher-forced along `tokens` (the output's ids without <bos> and <eos>; one
// step more, for <eos>, when `finished`) over one sentence src (1, S) (its <eos> included), in
// eval mode under NoGradGuard, and returns each step's terms.
AttentionInternals attention_internals(Seq2Seq& model, const Tensor& src, const std::vector<int64_t>& tokens,
                                       bool finished, int64_t bos_id = 1, int64_t eos_id = 2);

}  // namespace seqgrad::models
