// Losses composed from ops (log_softmax, gather, where, sum). The composed cross_entropy is the
// reference that a fused softmax-CE kernel will be compared against.
#include "nn/loss.h"

#include <cmath>

#include "core/autograd.h"
#include "core/backend.h"

namespace seqgrad::nn {
namespace {

// Validates class-index targets against scores (..., C): dtype, shape and range. Returns the
// number of targets that are not ignore_index.
int64_t check_targets(const char* op, const Tensor& scores, const Tensor& targets, int64_t ignore_index) {
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

// Applies the reduction to per-target losses that are already 0 where ignored.
Tensor reduce_loss(const Tensor& loss, Reduction reduction, int64_t counted) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    // counted == 0 gives sum · (1/0) = 0 · inf = NaN, PyTorch's value; the gradient reaching the
    // per-target losses is then inf, and the where() that zeroed ignored targets stops it (zeros).
    case Reduction::mean: return mul(sum(loss), 1.0 / static_cast<double>(counted));
  }
  return loss;
}

// -scores[..., y] for each target, with ignored targets read at class 0 and then zeroed.
//   scores: (..., C)   targets, ignored: (...)   ->   (...)
Tensor picked_negative(const Tensor& scores, const Tensor& targets, const Tensor& ignored) {
  Tensor safe_targets = where(ignored, zeros_like(targets), targets);       // (...)
  Tensor picked = gather(scores, -1, safe_targets.unsqueeze(-1)).squeeze(-1);  // (...)
  return masked_fill(neg(picked), ignored, 0.0);
}

}  // namespace

namespace {

// Per-row losses (N,) of logits (N, C) in one node (fused kernel each way; see loss.h).
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index) {
  const int64_t N = logits.size(0);
  Tensor x = logits.detach().contiguous(), y = targets.contiguous();
  const TensorOptions like{.dtype = logits.dtype(), .device = logits.device()};
  Tensor loss = empty({N}, like), lse = empty({N}, like);  // (N,), (N,)
  backend_for(logits).cross_entropy_rows(x, y, eps, ignore_index, loss, lse);
  return record("cross_entropy", loss, {logits},
                [logits = save(logits), y, lse, eps, ignore_index](const Tensor& dloss, Grads& g) {
                  const Tensor& xv = logits.get();
                  if (GradMode::is_enabled()) {  // create_graph: differentiate the composed twin
                    Tensor rows = cross_entropy_composed(
                        xv, y, {.label_smoothing = eps, .ignore_index = ignore_index, .reduction = Reduction::none});
                    g.add(0, autograd::grad({rows}, {xv}, {dloss}, {.retain_graph = true, .create_graph = true})[0]);
                    return;
                  }
                  Tensor dx = empty(xv.shape(), {.dtype = xv.dtype(), .device = xv.device()});
                  backend_for(xv).cross_entropy_rows_backward(xv.contiguous(), y, lse, dloss.contiguous(), eps,
                                                              ignore_index, dx);
                  g.add(0, dx);
                });
}

}  // namespace

// The fused form of cross_entropy_composed (below): per row one pass forward (max, log-sum-exp,
// the picked and the summed logit) and one backward, dlogits = dloss · (softmax - (1 - ε) onehot
// - ε/C), instead of log_softmax, gather, a class sum, masks and their backward passes over the
// (N, C) logits. Backends without the kernel and create_graph use the composed form.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  const double eps = options.label_smoothing;
  SG_CHECK_VALUE(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing = {} not in [0, 1]", eps);
  int64_t counted = check_targets("cross_entropy", logits, targets, options.ignore_index);
  if (!backend_for(logits).supports(FusedOp::cross_entropy)) return cross_entropy_composed(logits, targets, options);
  const int64_t classes = logits.shape().back();
  Tensor rows = cross_entropy_rows(logits.reshape({-1, classes}), targets.reshape({-1}), eps, options.ignore_index);
  return reduce_loss(rows.reshape(targets.shape()), options.reduction, counted);
}

Tensor cross_entropy_composed(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  const double eps = options.label_smoothing;
  SG_CHECK_VALUE(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing = {} not in [0, 1]", eps);
  int64_t counted = check_targets("cross_entropy", logits, targets, options.ignore_index);
  const int64_t classes = logits.shape().back();

  Tensor logp = log_softmax(logits, -1);                          // (..., C)
  Tensor ignored = eq(targets, static_cast<double>(options.ignore_index));  // (...) bool
  Tensor loss = picked_negative(logp, targets, ignored);          // (...) -logp[y]
  if (eps > 0.0) {
    Tensor smooth = masked_fill(neg(sum(logp, {-1})), ignored, 0.0);  // (...) -Σ_c logp[c]
    loss = add(mul(loss, 1.0 - eps), mul(smooth, eps / static_cast<double>(classes)));
  }
  return reduce_loss(loss, options.reduction, counted);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options) {
  int64_t counted = check_targets("nll_loss", log_probs, targets, options.ignore_index);
  Tensor ignored = eq(targets, static_cast<double>(options.ignore_index));  // (...) bool
  return reduce_loss(picked_negative(log_probs, targets, ignored), options.reduction, counted);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  SG_CHECK(input.defined() && target.defined(), "mse_loss: input or target is an undefined tensor");
  SG_CHECK_SHAPE(input.shape() == target.shape(), "mse_loss: input {} and target {} must have the same shape",
                 input.shape(), target.shape());
  Tensor diff = sub(input, target);
  Tensor loss = mul(diff, diff);
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}

}  // namespace seqgrad::nn
