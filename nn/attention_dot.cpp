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
    : Attention(std::move(type_name), op),
      dropout({.p = checked(options, op).dropout}),
      options_(options),
      scaled_(scaled) {
  if (options.query_size > 0) {
    w_q = std::make_unique<Quantizable<Linear>>(
        Linear::Options{.in_features = options.query_size, .out_features = options.key_size, .bias = false});
    register_module("w_q", *w_q);
  }
  register_module("dropout", dropout);
}

ScaledDotProductAttention::ScaledDotProductAttention() : ScaledDotProductAttention(Options{}) {}
ScaledDotProductAttention::ScaledDotProductAttention(Options options)
    : DotProductAttention("ScaledDotProductAttention", "scaled_dot_product_attention", options, true) {}

void DotProductAttention::check_sizes(const Tensor& queries, const Tensor& keys) const {
  if (w_q) {
    check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
    check_feature_size(op_, "keys", keys, options_.key_size, "key_size");
  } else {
    SG_CHECK_SHAPE(queries.size(2) == keys.size(2),
                   "{}: queries {} and keys {} need the same feature size (or set query_size and key_size to "
                   "learn a projection)",
                   op_, queries.shape(), keys.shape());
  }
}

Tensor DotProductAttention::scores_of(const Tensor& queries, const Tensor& keys) const {
  Tensor q = w_q ? (*w_q)(queries) : queries;       // (B, Q, Dk)
  Tensor scores = matmul(q, keys.transpose(1, 2));  // (B, Q, K)
  if (scaled_) scores = mul(scores, 1.0 / std::sqrt(static_cast<double>(keys.size(2))));
  return scores;
}

Tensor DotProductAttention::score(const Tensor& queries, const Tensor& keys) const {
  check_attention_args(op_, queries, keys, keys, {});
  check_sizes(queries, keys);
  return scores_of(queries, keys);
}

void DotProductAttention::prepare_keys(AttentionMemory& memory) const {
  if (w_q) check_feature_size(op_, "keys", memory.keys, options_.key_size, "key_size");
}

Tensor DotProductAttention::score(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory);
  check_sizes(queries, memory.keys);
  return scores_of(queries, memory.keys);  // (B, Q, K)
}

Tensor DotProductAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  Tensor scores = score(queries, memory);                       // (B, Q, K)
  Tensor weights = softmax_with_keep(scores, memory.key_keep);      // (B, Q, K)
  keep(scores, weights);
  return matmul(dropout(weights), memory.values);  // (B, Q, Dv)
}

}  // namespace seqgrad::nn
