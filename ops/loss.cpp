// Per-target losses over class scores on the last dimension: nll_rows, and cross_entropy_rows,
// a fused op (one kernel per row each way) with its composed twin. nn/loss.cpp adds the
// reductions and the options of torch.nn.functional's losses on top.
#include "ops/detail.h"

namespace seqgrad {
namespace {

// Validates class-index targets against scores (..., C): dtype, shape and range. Returns the
// number of targets that are not ignore_index.
int64_t check_class_targets(const char* op, const Tensor& scores, const Tensor& targets, int64_t ignore_index) {
  SG_CHECK(scores.defined() && targets.defined(), "{}: input or targets is an undefined tensor", op);
  SG_CHECK_DTYPE(is_floating(scores.dtype()), "{}: expected floating scores (float32 or float64), got {} {}", op,
                 scores.dtype(), scores.shape());
  SG_CHECK_SHAPE(scores.ndim() >= 1, "{}: scores must have a class dimension, got a 0-d tensor", op);
  SG_CHECK_DTYPE(targets.dtype() == DType::i64, "{}: targets must be int64 class indices, got {} {}", op,
                 targets.dtype(), targets.shape());
  SG_CHECK_DEVICE(targets.device() == scores.device(), "{}: targets on {} but scores on {}", op, targets.device(),
                  scores.device());
  Shape batch = scores.shape();
  batch.erase(batch.size() - 1);
  SG_CHECK_SHAPE(targets.shape() == batch, "{}: targets {} must match the batch of logits {}", op, targets.shape(),
                 scores.shape());
  const int64_t classes = scores.shape().back();
  int64_t counted = 0;
  for (int64_t y : targets.to_vector<int64_t>()) {
    if (y == ignore_index) continue;
    SG_CHECK_INDEX(y >= 0 && y < classes,
                   "{}: target {} is out of range for {} classes (logits {}; ignore_index is {})", op, y, classes,
                   scores.shape(), ignore_index);
    ++counted;
  }
  return counted;
}

// -scores[..., y] for each target, with ignored targets read at class 0 and then zeroed.
//   scores: (..., C)   targets, ignored: (...)   ->   (...)
Tensor picked_negative(const Tensor& scores, const Tensor& targets, const Tensor& ignored) {
  Tensor safe_targets = where(ignored, zeros_like(targets), targets);          // (...)
  Tensor picked = gather(scores, -1, safe_targets.unsqueeze(-1)).squeeze(-1);  // (...)
  return masked_fill(neg(picked), ignored, 0.0);
}

Tensor cross_entropy_composed_unchecked(const Tensor& logits, const Tensor& targets, double eps,
                                        int64_t ignore_index) {
  const int64_t classes = logits.shape().back();
  Tensor logp = log_softmax(logits, -1);                            // (..., C)
  Tensor ignored = eq(targets, static_cast<double>(ignore_index));  // (...) bool
  Tensor loss = picked_negative(logp, targets, ignored);            // (...) -logp[y]
  if (eps > 0.0) {
    Tensor smooth = masked_fill(neg(sum(logp, {-1})), ignored, 0.0);  // (...) -Σ_c logp[c]
    loss = add(mul(loss, 1.0 - eps), mul(smooth, eps / static_cast<double>(classes)));
  }
  return loss;
}

// The fused kernel on (N, C) rows: loss (N,) forward; dlogits = dloss · (softmax - (1 - ε) onehot
// - ε/C) backward, from the saved per-row log-sum-exp.
Tensor cross_entropy_fused(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index) {
  const int64_t C = logits.shape().back();
  Tensor x = logits.detach().reshape({-1, C}).contiguous(), y = targets.reshape({-1}).contiguous();  // (N, C), (N,)
  const TensorOptions like{.dtype = logits.dtype(), .device = logits.device()};
  Tensor loss = empty(targets.shape(), like), lse = empty({x.size(0)}, like);  // (...), (N,)
  backend_for(logits).cross_entropy_rows(x, y, eps, ignore_index, loss.view({-1}), lse);
  auto composed = [targets, eps, ignore_index](const std::vector<Tensor>& in) {
    return cross_entropy_composed_unchecked(in[0], targets, eps, ignore_index);
  };
  auto backward = [y, lse, eps, ignore_index, C](const std::vector<Tensor>& in, const Tensor& dloss, Grads& g) {
    const Tensor& xv = in[0];
    Tensor dx = empty({y.numel(), C}, {.dtype = xv.dtype(), .device = xv.device()});  // (N, C)
    backend_for(xv).cross_entropy_rows_backward(xv.reshape({-1, C}).contiguous(), y, lse,
                                                dloss.reshape({-1}).contiguous(), eps, ignore_index, dx);
    g.add(0, dx.view(xv.shape()));
  };
  const Tensor inputs[] = {logits};
  return detail::record_fused("cross_entropy", loss, inputs, composed, backward);
}

}  // namespace

void check_label_smoothing(double label_smoothing) {
  SG_CHECK_VALUE(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                 "cross_entropy: label_smoothing = {} not in [0, 1]", label_smoothing);
}

Tensor nll_rows(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index) {
  check_class_targets("nll_loss", log_probs, targets, ignore_index);
  Tensor ignored = eq(targets, static_cast<double>(ignore_index));  // (...) bool
  return picked_negative(log_probs, targets, ignored);
}

// The fused form of cross_entropy_rows_composed: per row one pass forward (max, log-sum-exp, the
// picked and the summed logit) and one backward, instead of log_softmax, gather, a class sum,
// masks and their backward passes over the (N, C) logits. Backends without the kernel use the
// composed form; create_graph differentiates it (record_fused).
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, double label_smoothing,
                          int64_t ignore_index) {
  check_label_smoothing(label_smoothing);
  check_class_targets("cross_entropy", logits, targets, ignore_index);
  if (!backend_for(logits).supports(FusedOp::cross_entropy))
    return cross_entropy_composed_unchecked(logits, targets, label_smoothing, ignore_index);
  return cross_entropy_fused(logits, targets, label_smoothing, ignore_index);
}

Tensor cross_entropy_rows_composed(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                   int64_t ignore_index) {
  check_label_smoothing(label_smoothing);
  check_class_targets("cross_entropy", logits, targets, ignore_index);
  return cross_entropy_composed_unchecked(logits, targets, label_smoothing, ignore_index);
}

}  // namespace seqgrad
