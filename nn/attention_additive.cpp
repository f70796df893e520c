// AdditiveAttention: composed from ops (linear, tanh, masked softmax, bmm); autograd supplies the
// backward, whose formulas are written out in docs/attention.md.
#include "nn/attention_additive.h"

#include "core/autograd.h"
#include "core/backend.h"

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

Tensor additive_scores_composed(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v) {
  // features: (B, Q, 1, A) + (B, 1, K, A) -> (B, Q, K, A)
  Tensor features = tanh(add(projected_queries.unsqueeze(2), projected_keys.unsqueeze(1)));
  return linear(features, w_v).squeeze(-1);  // (B, Q, K)
}

// One node with a fused kernel each way: the (B, Q, K, A) features are never stored (backward
// recomputes tanh), and dqp, dkp, dw_v come out of one pass instead of a broadcast add's two
// reductions, tanh's backward and a GEMV. Second order (create_graph) and backends without the
// kernel go through additive_scores_composed.
Tensor additive_scores(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v) {
  const Tensor &qp = projected_queries, &kp = projected_keys;
  SG_CHECK_SHAPE(qp.ndim() == 3 && kp.ndim() == 3 && qp.size(0) == kp.size(0) && qp.size(2) == kp.size(2) &&
                     w_v.ndim() == 2 && w_v.size(0) == 1 && w_v.size(1) == qp.size(2),
                 "additive_scores: expected projected queries (B, Q, A), keys (B, K, A) and w_v (1, A); got {}, {}, {}",
                 qp.shape(), kp.shape(), w_v.shape());
  SG_CHECK_DTYPE(qp.dtype() == kp.dtype() && kp.dtype() == w_v.dtype(), "additive_scores: dtypes {}, {}, {} differ",
                 qp.dtype(), kp.dtype(), w_v.dtype());
  Backend& backend = backend_for(qp);
  if (!backend.supports(FusedOp::additive_scores) || !is_floating(qp.dtype()))
    return additive_scores_composed(qp, kp, w_v);
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  Tensor q = qp.detach().contiguous(), k = kp.detach().contiguous(), w = w_v.detach().contiguous();
  Tensor scores = empty({B, Q, K}, {.dtype = qp.dtype(), .device = qp.device()});  // (B, Q, K)
  backend.additive_scores(q, k, w.view({A}), scores);
  return record("additive_scores", scores, {qp, kp, w_v},
                [qp = save(qp), kp = save(kp), w_v = save(w_v)](const Tensor& ds, Grads& g) {
                  const Tensor &qv = qp.get(), &kv = kp.get(), &wv = w_v.get();
                  if (GradMode::is_enabled()) {  // create_graph: differentiate the composed twin
                    std::vector<Tensor> in{qv, kv, wv}, wanted;
                    std::vector<int> index;
                    for (int i = 0; i < 3; ++i)
                      if (g.needs(i) && in[i].requires_grad()) wanted.push_back(in[i]), index.push_back(i);
                    std::vector<Tensor> grads = autograd::grad({additive_scores_composed(qv, kv, wv)}, wanted, {ds},
                                                               {.retain_graph = true, .create_graph = true,
                                                                .allow_unused = true});
                    for (size_t i = 0; i < index.size(); ++i) g.add(index[i], grads[i]);
                    return;
                  }
                  const TensorOptions like{.dtype = qv.dtype(), .device = qv.device()};
                  Tensor dq = empty(qv.shape(), like), dk = empty(kv.shape(), like), dw = empty(wv.shape(), like);
                  backend_for(qv).additive_scores_backward(qv.contiguous(), kv.contiguous(),
                                                           wv.contiguous().view({wv.size(1)}), ds.contiguous(), dq, dk,
                                                           dw.view({wv.size(1)}));
                  if (g.needs(0)) g.add(0, dq);
                  if (g.needs(1)) g.add(1, dk);
                  if (g.needs(2)) g.add(2, dw);
                });
}

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
  return additive_scores(w_q(queries), w_k(keys), w_v.weight);  // (B, Q, K)
}

Tensor AdditiveAttention::score(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 1);
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  return additive_scores(w_q(queries), memory.projected[0], w_v.weight);  // (B, Q, K)
}

void AdditiveAttention::prepare_keys(AttentionMemory& memory) const {
  memory.projected = {project_keys(memory.keys)};  // (B, K, A)
}

Tensor AdditiveAttention::attend(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 1);
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  return attend_keys(queries, memory.projected[0], memory.values, memory.mask);
}

Tensor AdditiveAttention::attend_projected(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                                           const Tensor& valid_lengths) const {
  Tensor mask = check_attention_args(op_, queries, projected_keys, values, valid_lengths);  // (B, 1 | Q, K)
  check_feature_size(op_, "queries", queries, options_.query_size, "query_size");
  check_feature_size(op_, "projected keys", projected_keys, options_.hidden_size, "hidden_size");
  return attend_keys(queries, projected_keys, values, mask);
}

Tensor AdditiveAttention::attend_keys(const Tensor& queries, const Tensor& projected_keys, const Tensor& values,
                                      const Tensor& mask) const {
  Tensor scores = additive_scores(w_q(queries), projected_keys, w_v.weight);  // (B, Q, K)
  Tensor weights = softmax_with_mask(scores, mask);                           // (B, Q, K)
  keep(scores, weights);
  return matmul(dropout(weights), values);  // (B, Q, Dv)
}

}  // namespace seqgrad::nn
