// HybridAttention: ½ (additive + scaled dot), composed from the two modules.
#include "nn/attention_hybrid.h"

namespace seqgrad::nn {

HybridAttention::HybridAttention(Options options)
    : Attention("HybridAttention"),
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

Tensor HybridAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                const Tensor& valid_lengths) const {
  check_attention_args("hybrid_attention", queries, keys, values, valid_lengths);
  Tensor c_add = additive(queries, keys, values, valid_lengths);    // (B, Q, Dv)
  Tensor c_dot = scaled_dot(queries, keys, values, valid_lengths);  // (B, Q, Dv)
  keep({}, mul(add(additive.last_weights(), scaled_dot.last_weights()), 0.5));  // (B, Q, K)
  return mul(add(c_add, c_dot), 0.5);
}

}  // namespace seqgrad::nn
