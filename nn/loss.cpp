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

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  Tensor loss = cross_entropy_rows(logits, targets, options.label_smoothing, options.ignore_index);  // (...)
  return reduce_loss(loss, targets, options.ignore_index, options.reduction);
}

Tensor cross_entropy_composed(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options) {
  Tensor loss = cross_entropy_rows_composed(logits, targets, options.label_smoothing, options.ignore_index);
  return reduce_loss(loss, targets, options.ignore_index, options.reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options) {
  Tensor loss = nll_rows(log_probs, targets, options.ignore_index);  // (...)
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
