// HybridAttention: ½ (additive + scaled dot), composed from the two modules.
#include "nn/attention_hybrid.h"

namespace seqgrad::nn {

HybridAttention::HybridAttention(Options options)
    : Attention("HybridAttention", "hybrid_attention"),
      additive({.query_size = options.query_size, .key_size = options.key_size, .hidden_size = options.hidden_size,
                .dropout = options.dropout}),
      scaled_dot(options.query_size != options.key_size
                     ? DotProductAttention::Options{.dropout = options.dropout, .query_size = options.query_size,
                                                    .key_size = options.key_size}
                     : DotProductAttention::Options{.dropout = options.dropout}),
      options_(options) {
  register_module("additive", additive);
  register_module("scaled_dot", scaled_dot);
}

void HybridAttention::prepare_keys(AttentionMemory& memory) const {
  memory.parts = {additive.prepare_part(memory), scaled_dot.prepare_part(memory)};
}

Tensor HybridAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 0, 2);
  Tensor c_add = additive.attend(queries, memory.parts[0]);    // (B, Q, Dv)
  Tensor c_dot = scaled_dot.attend(queries, memory.parts[1]);  // (B, Q, Dv)
  keep({}, mul(add(additive.last_weights(), scaled_dot.last_weights()), 0.5));  // (B, Q, K)
  return mul(add(c_add, c_dot), 0.5);
}

}  // namespace seqgrad::nn
