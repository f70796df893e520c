// Losses with PyTorch's exact semantics: cross_entropy (label smoothing, ignore_index), nll_loss,
// mse_loss. Composed from differentiable ops, so their gradients come from autograd; cross_entropy
// also has a fused form (the default) next to its composed twin.
//
// Layout: classes are on the LAST dimension by default. logits (..., C) pair with targets (...):
// (N, C) with (N,), (B, T, C) with (B, T), (C,) with a 0-d target. PyTorch puts classes on
// dimension 1 ((N, C, d1, ...) with targets (N, d1, ...)): pass class_dim = 1 for that layout.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace seqgrad::nn {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  double label_smoothing = 0.0;  // in [0, 1]
  int64_t ignore_index = -100;   // targets equal to it add nothing, not even to the mean's count
  Reduction reduction = Reduction::mean;
  int64_t class_dim = -1;  // the dimension of logits holding the classes; 1 is PyTorch's layout
};

struct NLLLossOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  int64_t class_dim = -1;  // as in CrossEntropyOptions
};

// cross_entropy  logits (..., C), targets (...) int64 -> () for mean/sum, (...) for none
//   (or, with class_dim = 1, logits (N, C, d1, ...), targets (N, d1, ...) -> (N, d1, ...) for none)
//   logp     = log_softmax(logits, -1)
//   loss_i   = (1 - ε) · (-logp[i, y_i]) + (ε / C) · Σ_c (-logp[i, c])     (ε = label_smoothing)
//   loss_i   = 0 where y_i == ignore_index
//   mean     = Σ_i loss_i / #{i : y_i != ignore_index}
// The smoothing mass ε is spread over all C classes, the target included (as PyTorch does).
// When every target is ignored the mean is 0/0 = NaN, as in PyTorch, and the gradient is zero.
// Throws for non-int64 targets, targets whose shape is not logits' without the class dimension,
// a target outside [0, C) that is not ignore_index (naming the value and C), and
// label_smoothing outside [0, 1].
// Fused: one kernel per row each way (ops/loss.cpp's cross_entropy_rows); cross_entropy_composed is
// the same loss built from ops (log_softmax, gather, sums), its twin in tests/test_nn_fused.cpp.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});
Tensor cross_entropy_composed(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {});

// nll_loss  log_probs (..., C), targets (...) int64
//   loss_i = -log_probs[i, y_i], 0 where y_i == ignore_index; mean divides by the non-ignored count
//   (NaN when all are ignored, as in PyTorch).
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NLLLossOptions options = {});

// mse_loss  input and target of the same shape:  loss_i = (input_i - target_i)²
//   d input = 2 (input - target) · dy (/ n for mean); target is differentiable too.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace seqgrad::nn
