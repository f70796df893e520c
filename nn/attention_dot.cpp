// DotProductAttention and ScaledDotProductAttention, composed from ops (bmm, masked softmax).
#include "nn/attention_dot.h"

#include <cmath>

namespace seqgrad::nn {
namespace {

const DotProductAttention::Options& checked(const DotProductAttention::Options& o, const char* op) {
  SG_CHECK_VALUE(o.dropout >= 0 && o.dropout < 1, "{}: dropout = {} not in [0, 1)", op, o.dropout);
  SG_CHECK_VALUE(o.query_size >= 0 && o.key_size >= 0 && (o.query_size > 0) == (o.key_size > 0),
                 "{}: give both query_size and key_size (to project queries into key space) or neither, got "
                 "query_size = {}, key_size = {}",
                 op, o.query_size, o.key_size);
  return o;
}

}  // namespace

DotProductAttention::DotProductAttention() : DotProductAttention(Options{}) {}
DotProductAttention::DotProductAttention(Options options)
    : DotProductAttention("DotProductAttention", "dot_product_attention", options, false) {}

DotProductAttention::DotProductAttention(std::string type_name, const char* op, Options options, bool scaled)
    : Attention(std::move(type_name)),
      dropout({.p = checked(options, op).dropout}),
      op_name_(op),
      options_(options),
      scaled_(scaled) {
  if (options.query_size > 0) {
    w_q = std::make_unique<Linear>(
        Linear::Options{.in_features = options.query_size, .out_features = options.key_size, .bias = false});
    register_module("w_q", *w_q);
  }
  register_module("dropout", dropout);
}

ScaledDotProductAttention::ScaledDotProductAttention() : ScaledDotProductAttention(Options{}) {}
ScaledDotProductAttention::ScaledDotProductAttention(Options options)
    : DotProductAttention("ScaledDotProductAttention", "scaled_dot_product_attention", options, true) {}

Tensor DotProductAttention::score(const Tensor& queries, const Tensor& keys) const {
  check_attention_args(op_name_, queries, keys, keys, {});
  if (w_q) {
    check_feature_size(op_name_, "queries", queries, options_.query_size, "query_size");
    check_feature_size(op_name_, "keys", keys, options_.key_size, "key_size");
  } else {
    SG_CHECK_SHAPE(queries.size(2) == keys.size(2),
                   "{}: queries {} and keys {} need the same feature size (or set query_size and key_size to "
                   "learn a projection)",
                   op_name_, queries.shape(), keys.shape());
  }
  Tensor q = w_q ? (*w_q)(queries) : queries;                // (B, Q, Dk)
  Tensor scores = matmul(q, keys.transpose(1, 2));           // (B, Q, K)
  if (scaled_) scores = mul(scores, 1.0 / std::sqrt(static_cast<double>(keys.size(2))));
  return scores;
}

Tensor DotProductAttention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                    const Tensor& valid_lengths) const {
  Tensor mask = check_attention_args(op_name_, queries, keys, values, valid_lengths);  // (B, 1 | Q, K)
  Tensor scores = score(queries, keys);                                               // (B, Q, K)
  Tensor weights = softmax_with_mask(scores, mask);                                   // (B, Q, K)
  keep(scores, weights);
  return matmul(dropout(weights), values);  // (B, Q, Dv)
}

}  // namespace seqgrad::nn
