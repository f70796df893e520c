// MultiLevelAttention: several attentions ("levels", any kinds) over the same queries, keys and
// values; their contexts are concatenated along the feature dimension, so a downstream layer can
// mix, e.g., a sharp scaled-dot view with a smoother additive one.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/attention_base.h"

namespace seqgrad::nn {

class MultiLevelAttention : public Attention {
 public:
  // Takes ownership; registered as submodules "level0", "level1", ... (parameter names like
  // "level0.w_q.weight").
  explicit MultiLevelAttention(std::vector<std::unique_ptr<Attention>> levels);

  // queries (B, Q, Dq), keys (B, K, Dk), values (B, K, Dv), valid_lengths
  //   -> concat(level_0(...), ..., level_{L-1}(...)) (B, Q, Σ_l D_l), D_l = level l's context size
  // last_weights(): the mean of the levels' weights (B, Q, K) (as nn.MultiheadAttention averages
  // heads); last_scores() is undefined. Per level: level(l).last_weights(), .last_scores().
  // prepare(): memory.parts holds each level's memory (each level projects its keys once).
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;

  size_t num_levels() const { return levels_.size(); }
  const Attention& level(size_t l) const;
  Attention& level(size_t l);

 private:
  void prepare_keys(AttentionMemory& memory) const override;
  std::vector<std::unique_ptr<Attention>> levels_;
};

}  // namespace seqgrad::nn
