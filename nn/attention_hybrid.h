// HybridAttention: the mean of an additive and a scaled-dot attention over the same keys and
// values. Both contexts are linear in their weights with the same values, so
//   context = ½ (W_add V + W_dot V) = (½ (W_add + W_dot)) V,
// and last_weights() is that exact mixture ½ (W_add + W_dot), a distribution over keys. There is
// no single energy: last_scores() is undefined; read additive.last_scores() and
// scaled_dot.last_scores().
#pragma once
#include <cstdint>

#include "nn/attention_additive.h"
#include "nn/attention_dot.h"

namespace seqgrad::nn {

class HybridAttention : public Attention {
 public:
  struct Options {
    int64_t query_size = 0;   // Dq
    int64_t key_size = 0;     // Dk; when != Dq the scaled-dot half learns W (Dk × Dq) for queries
    int64_t hidden_size = 0;  // A of the additive half
    double dropout = 0.0;     // on each half's weights
  };
  explicit HybridAttention(Options options);

  // queries (B, Q, Dq), keys (B, K, Dk), values (B, K, Dv), valid_lengths -> (B, Q, Dv)
  // prepare(): memory.parts = {the additive half's memory (keys projected once), the scaled-dot
  // half's}, one mask for both.
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;

  const Options& options() const { return options_; }

  AdditiveAttention additive;
  ScaledDotProductAttention scaled_dot;

 private:
  void prepare_keys(AttentionMemory& memory) const override;
  Options options_;
};

}  // namespace seqgrad::nn
