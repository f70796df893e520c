// LocalAttention (Luong et al. 2015, "local-m" and "local-p"): each query attends only to the keys
// in a window [p - D, p + D] around a centre p, intersected with its valid keys.
//   Position::monotonic   p_i = i, the query's own index (or centres given to attend_at, e.g. the
//                         decoder step t when decoding one query at a time);
//                         weights = softmax over the window's valid keys.
//   Position::predictive  p_i = (len_i - 1) · σ(v_pᵀ tanh(W_p q_i)), a learned real position in
//                         [0, len_i - 1] (len_i = the query's valid length, else K);
//                         weights = softmax over the window's valid keys · exp(-(j - p_i)² / (2σ²)),
//                         σ = D / 2 (not renormalised, as in the paper), so gradients reach W_p and
//                         v_p through the Gaussian.
// The energies come from an additive (default) or scaled-dot scorer. Derivation: docs/attention.md.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/attention_additive.h"
#include "nn/attention_dot.h"

namespace seqgrad::nn {

class LocalAttention : public Attention {
 public:
  enum class Position { monotonic, predictive };
  enum class Score { additive, scaled_dot };
  struct Options {
    int64_t query_size = 0;   // Dq
    int64_t key_size = 0;     // Dk
    int64_t hidden_size = 0;  // A: the additive scorer's and the position network's width
    int64_t window = 2;       // D >= 0 (>= 1 for predictive): keys j with |j - p| <= D
    Position position = Position::monotonic;
    Score score = Score::additive;
    double dropout = 0.0;     // on the attention weights, in [0, 1)
  };
  explicit LocalAttention(Options options);

  // queries (B, Q, Dq), keys (B, K, Dk), values (B, K, Dv), valid_lengths (B,) / (B, Q) -> (B, Q, Dv)
  // prepare(): memory.parts = {the scorer's memory} (the additive scorer projects its keys once).
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;
  // Monotonic attention around given centres: positions (B, Q) (int64 or floating).
  Tensor attend_at(const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lengths,
                   const Tensor& positions) const;
  Tensor attend_at(const Tensor& queries, const AttentionMemory& memory, const Tensor& positions) const;

  // The centres p of the last call (B, Q), in the inputs' floating dtype.
  const Tensor& last_positions() const { return last_positions_; }
  const Options& options() const { return options_; }

  std::unique_ptr<AdditiveAttention> additive;            // Score::additive
  std::unique_ptr<ScaledDotProductAttention> scaled_dot;  // Score::scaled_dot (w_q when Dq != Dk)
  std::unique_ptr<Linear> w_p;                            // predictive: weight (A, Dq), no bias
  std::unique_ptr<Linear> v_p;                            // predictive: weight (1, A), no bias
  Dropout dropout;

 private:
  void prepare_keys(AttentionMemory& memory) const override;
  Tensor attend_window(const Tensor& queries, const AttentionMemory& memory, const Tensor& positions,
                       const Tensor& gaussian) const;
  Options options_;
  mutable Tensor last_positions_;  // (B, Q)
};

}  // namespace seqgrad::nn
