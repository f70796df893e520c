// MultiLevelAttention: the levels' contexts, concatenated.
#include "nn/attention_multilevel.h"

#include <string>

namespace seqgrad::nn {

MultiLevelAttention::MultiLevelAttention(std::vector<std::unique_ptr<Attention>> levels)
    : Attention("MultiLevelAttention", "multi_level_attention"), levels_(std::move(levels)) {
  SG_CHECK_VALUE(!levels_.empty(), "multi_level_attention: needs at least one level");
  for (size_t l = 0; l < levels_.size(); ++l) {
    SG_CHECK_VALUE(levels_[l] != nullptr, "multi_level_attention: level {} is null", l);
    register_module("level" + std::to_string(l), *levels_[l]);
  }
}

const Attention& MultiLevelAttention::level(size_t l) const {
  SG_CHECK_INDEX(l < levels_.size(), "multi_level_attention: level {} out of range (there are {})", l, levels_.size());
  return *levels_[l];
}
Attention& MultiLevelAttention::level(size_t l) {
  SG_CHECK_INDEX(l < levels_.size(), "multi_level_attention: level {} out of range (there are {})", l, levels_.size());
  return *levels_[l];
}

void MultiLevelAttention::prepare_keys(AttentionMemory& memory) const {
  for (const auto& level : levels_) memory.parts.push_back(level->prepare_part(memory));
}

Tensor MultiLevelAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 0, levels_.size());
  std::vector<Tensor> contexts;  // (B, Q, D_l) each
  Tensor weights;                // (B, Q, K) running sum
  for (size_t l = 0; l < levels_.size(); ++l) {
    contexts.push_back(levels_[l]->attend(queries, memory.parts[l]));
    const Tensor& w = levels_[l]->last_weights();
    weights = weights.defined() ? add(weights, w) : w;
  }
  keep({}, mul(weights, 1.0 / static_cast<double>(levels_.size())));
  return cat(contexts, 2);  // (B, Q, Σ D_l)
}

}  // namespace seqgrad::nn
