// Gradient clipping: one norm over all gradients, then an in-place scale.
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "ops/ops.h"

namespace seqgrad::optim {
namespace {

template <class T>
double partial_norm(const T* g, int64_t n, double norm_type) {
  double acc = 0.0;
  if (std::isinf(norm_type)) {
    for (int64_t i = 0; i < n; ++i) {
      double a = std::abs(static_cast<double>(g[i]));
      acc = std::isnan(a) || std::isnan(acc) ? NAN : std::max(acc, a);  // NaN wins, as in torch.max
    }
  } else if (norm_type == 2.0) {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  } else if (norm_type == 1.0) {
    for (int64_t i = 0; i < n; ++i) acc += std::abs(static_cast<double>(g[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::abs(static_cast<double>(g[i])), norm_type);
  }
  return acc;
}

// Σ |g|^p (or max |g| for the inf norm) of one gradient, accumulated in double.
double partial_norm(const Tensor& grad, double norm_type) {
  Tensor g = grad.device().is_cpu() ? grad.contiguous() : grad.cpu().contiguous();
  return dispatch_floating(g.dtype(), "clip_grad_norm_", [&]<class T>() {
    return partial_norm(g.data<T>(), g.numel(), norm_type);
  });
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  SG_CHECK_VALUE(norm_type > 0.0, "clip_grad_norm_: norm_type = {} must be > 0 (or kInfNorm)", norm_type);
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;

  // total = (Σ_params Σ |g|^p)^(1/p), or max |g| over everything for the inf norm.
  double total = 0.0;
  for (const Tensor& g : grads) {
    double part = partial_norm(g, norm_type);
    total = std::isinf(norm_type) ? (std::isnan(part) || std::isnan(total) ? NAN : std::max(total, part))
                                  : total + part;
  }
  if (!std::isinf(norm_type)) total = norm_type == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / norm_type);

  SG_CHECK_VALUE(!error_if_nonfinite || std::isfinite(total),
                 "clip_grad_norm_: the total norm of order {} of the gradients of {} parameters is {}, so it cannot "
                 "be clipped; pass error_if_nonfinite = false to scale the gradients by it anyway",
                 norm_type, grads.size(), total);
  // clamp(max_norm / (total + 1e-6), max=1) keeps NaN, like torch.clamp.
  double coef = max_norm / (total + 1e-6);
  if (coef > 1.0) coef = 1.0;
  NoGradGuard no_grad;
  for (const Tensor& g : grads) {
    Tensor t = g;
    t.mul_(coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  SG_CHECK_VALUE(clip_value >= 0.0, "clip_grad_value_: clip_value = {} must be >= 0", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace seqgrad::optim
