// Gradient clipping with PyTorch 1.13's semantics (torch/nn/utils/clip_grad.py).
#pragma once
#include <limits>
#include <vector>

#include "core/tensor.h"

namespace seqgrad::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
// norm_type-norm of all gradients taken together as one vector (norm_type > 0, or kInfNorm for the
// largest absolute value). Parameters without a gradient are skipped; with none at all the result
// is 0. Returns total_norm.
// A non-finite total norm (a NaN or inf gradient) throws when error_if_nonfinite; otherwise the
// gradients are scaled anyway, as PyTorch does: by 0 when the norm is inf (inf entries become NaN)
// and by NaN when it is NaN.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace seqgrad::optim

// Also reachable where PyTorch users look for them (torch.nn.utils.clip_grad_norm_), as in the
// design brief's example: seqgrad::nn::clip_grad_norm_(model.parameters(), 1.0).
namespace seqgrad::nn {
using optim::clip_grad_norm_;
using optim::clip_grad_value_;
}  // namespace seqgrad::nn
