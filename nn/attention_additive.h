// AdditiveAttention (Bahdanau et al. 2015): score(q, k) = vᵀ tanh(W_q q + W_k k). The key
// projection can be computed once per batch (project_keys) and reused at every decoder step
// (attend_projected). Derivation, cost and gradients: docs/attention.md.
#pragma once
#include <cstdint>
#include <string>

#include "nn/attention_base.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/quantized.h"

namespace seqgrad::nn {

// The energies are ops/additive_scores.cpp's additive_scores (a fused op, ops/ops.h).

class AdditiveAttention : public Attention {
 public:
  struct Options {
    int64_t query_size = 0;   // Dq
    int64_t key_size = 0;     // Dk (may differ from Dq)
    int64_t hidden_size = 0;  // A, the width of the tanh layer
    double dropout = 0.0;     // on the attention weights, in [0, 1)
  };
  explicit AdditiveAttention(Options options);

  // queries (B, Q, Dq), keys (B, K, Dk), values (B, K, Dv), valid_lengths (B,) / (B, Q) -> (B, Q, Dv)
  //   scores = vᵀ tanh(W_q q + W_k k)   weights = masked_softmax(scores)   context = dropout(weights) · values
  // forward(q, k, v, lengths) = attend(q, prepare(k, v, lengths)); prepare() projects the keys once:
  // memory.projected = {W_k keys (B, K, A)}, so each attend() saves one (B·K·Dk·A) product.
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;

  // W_k keys: (B, K, Dk) -> (B, K, A), the projection prepare() stores.
  Tensor project_keys(const Tensor& keys) const;
  // forward with keys already projected: projected_keys (B, K, A) from project_keys;
  // lengths_or_keep as forward's.
  Tensor attend_projected(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                          const Tensor& lengths_or_keep = {}) const;

  // The unmasked energies vᵀ tanh(W_q q + W_k k): queries (B, Q, Dq), keys (B, K, Dk) -> (B, Q, K).
  Tensor score(const Tensor& queries, const Tensor& keys) const;
  // The same over a prepared memory (keys projected once): queries (B, Q, Dq) -> (B, Q, K).
  Tensor score(const Tensor& queries, const AttentionMemory& memory) const;

  const Options& options() const { return options_; }

  // Quantizable: nn::quantize_dynamic may swap each for a QuantizedLinear (nn/quantized.h).
  Quantizable<Linear> w_q;  // weight (A, Dq), no bias
  Quantizable<Linear> w_k;  // weight (A, Dk), no bias
  Quantizable<Linear> w_v;  // weight (1, A), no bias; enters the energies as a vector (linear_weight)
  Dropout dropout;

 protected:
  // For ChunkedAdditiveAttention: the same parameters under another type name; `op` names the
  // kind in error messages.
  AdditiveAttention(std::string type_name, const char* op, Options options);
  void prepare_keys(AttentionMemory& memory) const override;
  // The part after the checks: queries (B, Q, Dq), projected keys (B, K, A), values (B, K, Dv),
  // key_keep (B, 1 | Q, K) bool (true = attend) or undefined -> context (B, Q, Dv); keeps scores
  // and weights.
  virtual Tensor attend_keys(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                             const Tensor& key_keep) const;

 private:
  Options options_;
};

}  // namespace seqgrad::nn
