// ChunkedAdditiveAttention: exact additive attention that visits the keys in chunks of C with an
// online (log-sum-exp merged) softmax, as FlashAttention does: the module over the fused op
// chunked_additive_attention (ops/attention_chunked.cpp; its math in ops/ops.h). Neither the
// (B, Q, K, A) tanh features nor the (B, Q, K) scores and weights ever exist, so memory is linear
// in the lengths. The result equals AdditiveAttention's (same parameters, same names) to rounding.
// Derivation, and why averaging per-chunk contexts is not attention: docs/attention.md.
#pragma once
#include <cstdint>

#include "nn/attention_additive.h"

namespace seqgrad::nn {

class ChunkedAdditiveAttention : public AdditiveAttention {
 public:
  struct Options {
    int64_t query_size = 0;   // Dq
    int64_t key_size = 0;     // Dk
    int64_t hidden_size = 0;  // A
    double dropout = 0.0;     // on the attention weights, in [0, 1)
    int64_t chunk_size = 64;  // C keys per chunk; need not divide K
    // Also build last_weights()/last_scores() (B, Q, K) after each call, for plots: memory
    // quadratic in the lengths again, so off unless asked for.
    bool keep_weights = false;
  };
  explicit ChunkedAdditiveAttention(Options options);

  const Options& chunked_options() const { return chunked_options_; }

 protected:
  Tensor attend_keys(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                     const Tensor& key_keep) const override;

 private:
  Options chunked_options_;
};

}  // namespace seqgrad::nn
