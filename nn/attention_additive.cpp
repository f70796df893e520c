// AdditiveAttention: projections (Linear), the fused energies (ops' additive_scores), masked
// softmax and a bmm; the backward's formulas are written out in docs/attention.md.
#include "nn/attention_additive.h"

namespace seqgrad::nn {
namespace {

// Validates the options before any member is built, so errors name the attention, not Linear.
const AdditiveAttention::Options& checked(const AdditiveAttention::Options& o, const char* op) {
  SG_CHECK_VALUE(o.query_size > 0, "{}: query_size = {} must be positive", op, o.query_size);
  SG_CHECK_VALUE(o.key_size > 0, "{}: key_size = {} must be positive", op, o.key_size);
  SG_CHECK_VALUE(o.hidden_size > 0, "{}: hidden_size = {} must be positive", op, o.hidden_size);
  SG_CHECK_VALUE(o.dropout >= 0 && o.dropout < 1, "{}: dropout = {} not in [0, 1)", op, o.dropout);
  return o;
}

}  // namespace

AdditiveAttention::AdditiveAttention(Options options)
    : AdditiveAttention("AdditiveAttention", "additive_attention", options) {}

AdditiveAttention::AdditiveAttention(std::string type_name, const char* op, Options options)
    : Attention(std::move(type_name), op),
      w_q({.in_features = checked(options, op).query_size, .out_features = options.hidden_size, .bias = false}),
      w_k({.in_features = options.key_size, .out_features = options.hidden_size, .bias = false}),
      w_v({.in_features = options.hidden_size, .out_features = 1, .bias = false}),
      dropout({.p = options.dropout}),
      options_(options) {
  register_module("w_q", w_q);
  register_module("w_k", w_k);
  register_module("w_v", w_v);
  register_module("dropout", dropout);
}

Tensor AdditiveAttention::project_keys(const Tensor& keys) const {
  SG_CHECK(keys.defined(), "{}: project_keys: keys are undefined", op_);
  SG_CHECK_SHAPE(keys.ndim() == 3, "{}: project_keys: keys must be 3-D (B, K, Dk), got {}", op_, keys.shape());
  check_feature_size(op_, "keys", keys, options_.key_size, "key_size");
  return w_k(keys);  // (B, K, A)
}

Tensor AdditiveAttention::score(const Tensor& queries, const Tensor& keys) const {
  check_attention_args(op_, queries, keys, keys, {});
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  check_feature_size(op_, "keys", keys, options_.key_size, "key_size");
  return additive_scores(w_q(queries), w_k(keys), linear_weight(w_v));  // (B, Q, K)
}

Tensor AdditiveAttention::score(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 1);
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  return additive_scores(w_q(queries), memory.projected[0], linear_weight(w_v));  // (B, Q, K)
}

void AdditiveAttention::prepare_keys(AttentionMemory& memory) const {
  memory.projected = {project_keys(memory.keys)};  // (B, K, A)
}

Tensor AdditiveAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 1);
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  return attend_keys(queries, memory.projected[0], memory.values, memory.key_keep);
}

Tensor AdditiveAttention::attend_projected(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                                           const Tensor& lengths_or_keep) const {
  Tensor key_keep = check_attention_args(op_, queries, projected_keys, values, lengths_or_keep);  // (B, 1 | Q, K)
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  check_feature_size(op_, "projected keys", projected_keys, options_.hidden_size, "hidden_size");
  return attend_keys(queries, projected_keys, values, key_keep);
}

Tensor AdditiveAttention::attend_keys(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                                      const Tensor& key_keep) const {
  Tensor scores = additive_scores(w_q(queries), projected_keys, linear_weight(w_v));  // (B, Q, K)
  Tensor weights = softmax_with_keep(scores, key_keep);                       // (B, Q, K)
  keep(scores, weights);
  return matmul(dropout(weights), values);  // (B, Q, Dv)
}

}  // namespace seqgrad::nn
