// Losses with torch.nn.functional's reductions and options over ops' per-target losses
// (ops/loss.cpp: cross_entropy_rows, fused, with its composed twin; nll_rows).
#include "nn/loss.h"

namespace seqgrad::nn {
namespace {

// How many targets count toward the mean: those that are not ignore_index (the targets were
// validated by the per-target loss).
int64_t counted_targets(const Tensor& targets, int64_t ignore_index) {
  int64_t counted = 0;
  for (int64_t y : targets.to_vector<int64_t>()) counted += y != ignore_index;
  return counted;
}

// Applies the reduction to per-target losses that are already 0 where ignored.
Tensor reduce_loss(const Tensor& loss, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    // counted == 0 gives sum · (1/0) = 0 · inf = NaN, PyTorch's value; the gradient reaching the
    // per-target losses is then inf, and the where() that zeroed ignored targets stops it (zeros).
    case Reduction::mean:
      return mul(sum(loss), 1.0 / static_cast<double>(counted_targets(targets, ignore_index)));
  }
  return loss;
}

// Scores with the classes moved from class_dim to the last dimension, where the per-target losses
// read them: PyTorch's (N, C, d1, ...) becomes (N, d1, ..., C), a view. Classes already last
// (the (N, C) case included) come back untouched, so the fused loss sees the same tensor.
Tensor classes_last(const char* op, const Tensor& scores, const Tensor& targets, int64_t class_dim) {
  SG_CHECK(scores.defined() && targets.defined(), "{}: input or targets is an undefined tensor", op);
  if (scores.ndim() == 0) return scores;  // the per-target loss names the missing class dimension
  const int c = wrap_dim(class_dim, scores.ndim(), op);
  if (c == scores.ndim() - 1) {
    // The mistake worth a hint: PyTorch's layout passed without class_dim = 1.
    Shape last_batch = scores.shape(), pytorch_batch = scores.shape();
    last_batch.erase(scores.ndim() - 1);
    pytorch_batch.erase(1);
    bool pytorch_layout = scores.ndim() >= 3 && targets.shape() == pytorch_batch && targets.shape() != last_batch;
    SG_CHECK_SHAPE(!pytorch_layout,
                   "{}: targets {} match PyTorch's (N, C, d1, ...) layout of logits {}; pass class_dim = 1 (the "
                   "classes are on the last dimension by default)",
                   op, targets.shape(), scores.shape());
    return scores;
  }
  Shape batch = scores.shape();
  batch.erase(c);
  SG_CHECK_SHAPE(targets.shape() == batch, "{}: targets {} must match logits {} without their class dimension {}: {}",
                 op, targets.shape(), scores.shape(), c, batch);
  Shape order;
  for (int d = 0; d < scores.ndim(); ++d)
    if (d != c) order.push_back(d);
  order.push_back(c);
  return permute(scores, order);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  Tensor x = classes_last("cross_entropy", logits, targets, options.class_dim);               // (..., C)
  Tensor loss = cross_entropy_rows(x, targets, options.label_smoothing, options.ignore_index);  // (...)
  return reduce_loss(loss, targets, options.ignore_index, options.reduction);
}

Tensor cross_entropy_composed(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  Tensor x = classes_last("cross_entropy", logits, targets, options.class_dim);  // (..., C)
  Tensor loss = cross_entropy_rows_composed(x, targets, options.label_smoothing, options.ignore_index);
  return reduce_loss(loss, targets, options.ignore_index, options.reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options) {
  Tensor x = classes_last("nll_loss", log_probs, targets, options.class_dim);  // (..., C)
  Tensor loss = nll_rows(x, targets, options.ignore_index);                    // (...)
  return reduce_loss(loss, targets, options.ignore_index, options.reduction);
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
