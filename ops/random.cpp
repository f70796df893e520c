// Random ops, drawn from the seeded counter-based default generator (core/rng.h).
#include "core/rng.h"
#include "ops/detail.h"

namespace seqgrad {

// A float mask of {0, 1 / p_keep} values, each kept with probability p_keep.
Tensor bernoulli_mask(const Shape& shape, double p_keep, TensorOptions options) {
  Tensor u = Tensor::empty(shape, {.dtype = options.dtype, .device = options.device});
  Generator& gen = default_generator();
  backend_for(u).random_uniform(u, 0.0, 1.0, gen.seed(), gen.reserve(u.numel()));
  Tensor keep = lt(u, p_keep);
  Tensor scale = full({}, p_keep > 0 ? 1.0 / p_keep : 0.0, {.dtype = options.dtype, .device = options.device});
  return where(keep, scale.expand(shape), zeros({}, {.dtype = options.dtype, .device = options.device}).expand(shape));
}

// dropout  y = x * mask, mask_i ∈ {0, 1/(1-p)}      dx = dy * mask (through mul)
Tensor dropout(const Tensor& x, double p, bool training) {
  detail::check_floating("dropout", x);
  SG_CHECK_VALUE(p >= 0 && p <= 1, "dropout: probability p = {} not in [0, 1]", p);
  if (!training || p == 0) return x;
  Tensor mask;
  {
    NoGradGuard no_grad;
    mask = bernoulli_mask(x.shape(), 1.0 - p, {.dtype = x.dtype(), .device = x.device()});
  }
  return mul(x, mask);
}

Tensor& Tensor::uniform_(double low, double high) {
  detail::check_inplace("uniform_", *this, GradMode::is_enabled() && requires_grad());
  SG_CHECK_VALUE(low <= high, "uniform_: low {} is greater than high {}", low, high);
  Generator& gen = default_generator();
  backend_for(*this).random_uniform(*this, low, high, gen.seed(), gen.reserve(numel()));
  bump_version();
  return *this;
}

Tensor& Tensor::normal_(double mean, double std) {
  detail::check_inplace("normal_", *this, GradMode::is_enabled() && requires_grad());
  SG_CHECK_VALUE(std >= 0, "normal_: std = {} must be non-negative", std);
  Generator& gen = default_generator();
  backend_for(*this).random_normal(*this, mean, std, gen.seed(), gen.reserve(numel()));
  bump_version();
  return *this;
}

}  // namespace seqgrad
