// Gradient clipping: one norm over all gradients, then an in-place scale.
#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/threads.h"
#include "ops/ops.h"

namespace seqgrad::optim {
namespace {

// Σ term(g[i]) in double, in blocks summed on the pool whose sums are added in order: the same
// total for any number of threads. Eight accumulators per block let the additions overlap (one
// accumulator chains each addition on the last: that loop took 4% of the seed preset's step, by perf).
template <class T, class Term>
double blocked_sum(const T* g, int64_t n, Term term) {
  constexpr int64_t kBlock = 4096;
  std::vector<double> sums(static_cast<size_t>((n + kBlock - 1) / kBlock));
  parallel_for(static_cast<int64_t>(sums.size()), 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t end = std::min(n, (b + 1) * kBlock);
      double acc[8] = {};
      int64_t i = b * kBlock;
      for (; i + 8 <= end; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += term(static_cast<double>(g[i + j]));
      for (; i < end; ++i) acc[0] += term(static_cast<double>(g[i]));
      sums[b] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
  });
  double total = 0.0;
  for (double s : sums) total += s;
  return total;
}

template <class T>
double partial_norm(const T* g, int64_t n, double norm_type) {
  if (std::isinf(norm_type)) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      double a = std::abs(static_cast<double>(g[i]));
      acc = std::isnan(a) || std::isnan(acc) ? NAN : std::max(acc, a);  // NaN wins, as in torch.max
    }
    return acc;
  }
  if (norm_type == 2.0) return blocked_sum(g, n, [](double v) { return v * v; });
  if (norm_type == 1.0) return blocked_sum(g, n, [](double v) { return std::abs(v); });
  return blocked_sum(g, n, [norm_type](double v) { return std::pow(std::abs(v), norm_type); });
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
