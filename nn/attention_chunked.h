// ChunkedAdditiveAttention: exact additive attention that visits the keys in chunks of C with an
// online (log-sum-exp merged) softmax, as FlashAttention does, on the fused energies kernels
// (additive_scores and its backward): neither the (B, Q, K, A) tanh features nor the (B, Q, K)
// scores and weights ever exist, so memory is O(B·Q·(C + A + Dv) + B·K·(A + Dv)), linear in the
// lengths. The result equals AdditiveAttention's (same parameters, same names) to rounding.
// Derivation, and why averaging per-chunk contexts is not attention: docs/attention.md.
#pragma once
#include <cstdint>

#include "nn/attention_additive.h"

namespace seqgrad::nn {

// The fused op. qp (B, Q, A) = W_q q, kp (B, K, A) = W_k k, w_v (1, A), values (B, K, Dv),
// mask bool (B, 1 | Q, K) (true = masked) or undefined -> context (B, Q, Dv).
//   Forward, per chunk J of keys (running max m, normaliser l, weighted sum acc per row):
//     s_J = w_v · tanh(qp + kp_J)   (the fused energies kernel, (B, Q, C) out)   m' = max(m, max_J s)   α = exp(m - m')   p = exp(s_J - m')
//     l = α l + Σ_J p               acc = α acc + (p ∘ drop_J) · values_J        m = m'
//   context = acc / l; log-normaliser L = m + log l is saved. Rows with no valid key give 0.
//   Backward recomputes each chunk's scores from (qp, kp) and L (nothing (B, Q, K)-sized is saved):
//     w_J = exp(s_J - L)   Δ = Σ_v dy ∘ context   dvalues_J = (w_J ∘ drop_J)ᵀ dy
//     ds_J = w_J ∘ (drop_J ∘ (dy · values_Jᵀ) - Δ), then dqp, dkp_J, dw_v from the fused energies
//     backward kernel (one more tanh pass: backward does two, forward one).
// dropout_p > 0 drops weights with a mask regenerated per chunk from the counter-based generator
// (the same mask in backward; equal to AdditiveAttention's draw when chunk_size >= K).
// Double backward (create_graph) throws; use AdditiveAttention for higher-order gradients.
Tensor chunked_additive_attention(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                                  const Tensor& mask, int64_t chunk_size, double dropout_p = 0.0);

class ChunkedAdditiveAttention : public AdditiveAttention {
 public:
  struct Options {
    int64_t query_size = 0;   // Dq
    int64_t key_size = 0;     // Dk
    int64_t hidden_size = 0;  // A
    double dropout = 0.0;     // on the attention weights, in [0, 1)
    int64_t chunk_size = 64;  // C keys per chunk; need not divide K
    // Recompute last_weights()/last_scores() (B, Q, K) after each call for plots; turn off in
    // training to keep memory O(chunk).
    bool keep_weights = true;
  };
  explicit ChunkedAdditiveAttention(Options options);

  const Options& chunked_options() const { return chunked_options_; }

 protected:
  Tensor attend_keys(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                     const Tensor& mask) const override;

 private:
  Options chunked_options_;
};

}  // namespace seqgrad::nn
