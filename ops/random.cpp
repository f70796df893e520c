// Random ops, drawn from the seeded counter-based default generator (core/rng.h).
#include "core/rng.h"
#include "ops/detail.h"

namespace seqgrad {

Tensor bernoulli_mask(const Shape& shape, double p_keep, TensorOptions options) {
  Tensor u = Tensor::empty(shape, {.dtype = options.dtype, .device = options.device});
  Generator& gen = default_generator();
  backend_for(u).random_uniform(u, 0.0, 1.0, gen.seed(), gen.reserve(u.numel()));
  Tensor keep = lt(u, p_keep);
  Tensor scale = full({}, p_keep > 0 ? 1.0 / p_keep : 0.0, {.dtype = options.dtype, .device = options.device});
  return where(keep, scale.expand(shape), zeros({}, {.dtype = options.dtype, .device = options.device}).expand(shape));
}

namespace {

void check_dropout(const Tensor& x, double p) {
  detail::check_floating("dropout", x);
  SG_CHECK_VALUE(p >= 0 && p <= 1, "dropout: probability p = {} not in [0, 1]", p);
}

// Backend::dropout draws the mask and scales in one pass. Without autograd that is all (y = x ·
// mask, nothing stored); when recording, the same pass writes the mask itself (x undefined), which
// the backward multiplies dy by: redrawing it there would cost a second Philox pass, the most
// expensive part.
Tensor dropout_draw(const Tensor& x, double p_keep, uint64_t seed, uint64_t offset) {
  Backend& backend = backend_for(x);
  const double scale = p_keep > 0 ? 1.0 / p_keep : 0.0;
  Tensor y = detail::empty_like_shape(x.shape(), x);  // as x
  if (!GradMode::is_enabled() || !x.requires_grad()) {
    if (y.numel() > 0) backend.dropout(x.contiguous(), y, p_keep, scale, seed, offset);
    return y;
  }
  Tensor mask = detail::empty_like_shape(x.shape(), x);  // {0, scale}
  if (mask.numel() > 0) backend.dropout(Tensor(), mask, p_keep, scale, seed, offset);
  if (y.numel() > 0) backend.binary(BinaryOp::mul, x.detach(), mask, y);
  return record("dropout", y, {x}, [mask](const Tensor& dy, Grads& g) { g.add(0, mul(dy, mask)); });
}

}  // namespace

// dropout  y = x * mask, mask_i ∈ {0, 1/(1-p)}      dx = dy * mask
// The draw, the comparison and the scaling are one kernel (dropout_draw), where the composed twin
// dropout_composed writes the uniforms, compares, selects and multiplies; both draw the same
// numbers (the same generator counters), so they agree bit for bit.
Tensor dropout(const Tensor& x, double p, bool training) {
  check_dropout(x, p);
  if (!training || p == 0) return x;
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.reserve(x.numel());
  return dropout_draw(x, 1.0 - p, seed, offset);
}

Tensor dropout_composed(const Tensor& x, double p, bool training) {
  check_dropout(x, p);
  if (!training || p == 0) return x;
  Tensor mask;
  {
    NoGradGuard no_grad;
    mask = bernoulli_mask(x.shape(), 1.0 - p, {.dtype = x.dtype(), .device = x.device()});
  }
  return mul(x, mask);  // dx = dy * mask through mul
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
