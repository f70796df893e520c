// additive_scores, the energies of additive (Bahdanau) attention: a fused op (one kernel each way)
// with its composed twin. nn/attention_additive.cpp and ops/attention_chunked.cpp call it.
#include "core/autograd.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

void check_additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w_v) {
  detail::check_defined("additive_scores", qp, "projected queries");
  detail::check_defined("additive_scores", kp, "projected keys");
  detail::check_defined("additive_scores", w_v, "w_v");
  SG_CHECK_SHAPE(qp.ndim() == 3 && kp.ndim() == 3 && qp.size(0) == kp.size(0) && qp.size(2) == kp.size(2) &&
                     w_v.ndim() == 2 && w_v.size(0) == 1 && w_v.size(1) == qp.size(2),
                 "additive_scores: expected projected queries (B, Q, A), keys (B, K, A) and w_v (1, A); got {}, {}, {}",
                 qp.shape(), kp.shape(), w_v.shape());
  SG_CHECK_DTYPE(qp.dtype() == kp.dtype() && kp.dtype() == w_v.dtype(), "additive_scores: dtypes {}, {}, {} differ",
                 qp.dtype(), kp.dtype(), w_v.dtype());
}

// The fused backward: dqp, dkp and dw_v from ds (B, Q, K).
void additive_scores_backward(const std::vector<Tensor>& in, const Tensor& ds, Grads& g) {
  detail::AdditiveScoreGrads d = detail::additive_scores_grads(in[0], in[1], in[2], ds);
  if (g.needs(0)) g.add(0, d.dqp);
  if (g.needs(1)) g.add(1, d.dkp);
  if (g.needs(2)) g.add(2, d.dw_v);
}

}  // namespace

namespace detail {

AdditiveScoreGrads additive_scores_grads(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& ds) {
  Backend& backend = backend_for(qp);
  if (backend.supports(FusedOp::additive_scores) && is_floating(qp.dtype())) {
    const int64_t A = w_v.size(1);
    const TensorOptions like{.dtype = qp.dtype(), .device = qp.device()};
    AdditiveScoreGrads d{empty(qp.shape(), like), empty(kp.shape(), like), empty(w_v.shape(), like)};  // as inputs
    backend.additive_scores_backward(qp.contiguous(), kp.contiguous(), w_v.contiguous().view({A}), ds.contiguous(),
                                     d.dqp, d.dkp, d.dw_v.view({A}));
    return d;
  }
  EnableGradGuard grad_mode;
  Tensor q = qp.detach().requires_grad_(), k = kp.detach().requires_grad_(), w = w_v.detach().requires_grad_();
  std::vector<Tensor> d = autograd::grad({additive_scores_composed(q, k, w)}, {q, k, w}, {ds});
  return {d[0], d[1], d[2]};
}

}  // namespace detail

Tensor additive_scores_composed(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v) {
  check_additive_scores(projected_queries, projected_keys, w_v);
  // features: (B, Q, 1, A) + (B, 1, K, A) -> (B, Q, K, A)
  Tensor features = tanh(add(projected_queries.unsqueeze(2), projected_keys.unsqueeze(1)));
  return linear(features, w_v).squeeze(-1);  // (B, Q, K)
}

// One node with a fused kernel each way: the (B, Q, K, A) features are never stored (backward
// recomputes tanh), and dqp, dkp, dw_v come out of one pass instead of a broadcast add's two
// reductions, tanh's backward and a GEMV. Backends without the kernel (and integer inputs) use
// additive_scores_composed; create_graph differentiates it (record_fused).
Tensor additive_scores(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v) {
  const Tensor &qp = projected_queries, &kp = projected_keys;
  check_additive_scores(qp, kp, w_v);
  Backend& backend = backend_for(qp);
  if (!backend.supports(FusedOp::additive_scores) || !is_floating(qp.dtype()))
    return additive_scores_composed(qp, kp, w_v);
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  Tensor q = qp.detach().contiguous(), k = kp.detach().contiguous(), w = w_v.detach().contiguous();
  Tensor scores = empty({B, Q, K}, {.dtype = qp.dtype(), .device = qp.device()});  // (B, Q, K)
  backend.additive_scores(q, k, w.view({A}), scores);
  auto composed = [](const std::vector<Tensor>& in) { return additive_scores_composed(in[0], in[1], in[2]); };
  const Tensor inputs[] = {qp, kp, w_v};
  return detail::record_fused("additive_scores", scores, inputs, composed, additive_scores_backward);
}

}  // namespace seqgrad
