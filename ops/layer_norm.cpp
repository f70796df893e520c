// layer_norm: normalisation over the trailing dimensions, one fused pass per row each way
// (Backend::layer_norm_rows), with its composed twin for second order and backends without it.
#include "ops/detail.h"

namespace seqgrad {
namespace {

constexpr const char* kOp = "layer_norm";

// x (..., normalized_shape), weight and bias normalized_shape or undefined, one dtype and device.
// Returns D, the number of elements of a row.
int64_t check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                         double eps) {
  detail::check_floating(kOp, x);
  const int k = static_cast<int>(normalized_shape.size());
  bool trailing = k >= 1 && k <= x.ndim();
  for (int i = 0; trailing && i < k; ++i) trailing = x.size(x.ndim() - k + i) == normalized_shape[i];
  SG_CHECK_SHAPE(trailing, "{}: normalized_shape {} must be the last dimensions of the input {}", kOp,
                 normalized_shape, x.shape());
  SG_CHECK_SHAPE(normalized_shape.numel() > 0, "{}: normalized_shape {} has no elements to normalise", kOp,
                 normalized_shape);
  SG_CHECK_VALUE(eps >= 0 && std::isfinite(eps), "{}: eps = {} must be finite and >= 0", kOp, eps);
  for (const auto& [t, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    detail::check_same(kOp, x, *t);
    SG_CHECK_SHAPE(t->shape() == normalized_shape, "{}: {} {} must have the normalized_shape {} (input {})", kOp,
                   name, t->shape(), normalized_shape, x.shape());
  }
  return normalized_shape.numel();
}

// The normalised dimensions, counted from the end: (-k, ..., -1).
Shape trailing_dims(size_t k) {
  Shape dims;
  for (int64_t i = -static_cast<int64_t>(k); i < 0; ++i) dims.push_back(i);
  return dims;
}

Tensor layer_norm_composed_unchecked(const Tensor& x, size_t k, const Tensor& weight, const Tensor& bias,
                                     double eps) {
  const Shape dims = trailing_dims(k);
  Tensor mu = mean(x, dims, true);                       // (..., 1, ..., 1)
  Tensor centred = sub(x, mu);                           // x's shape
  Tensor var = mean(mul(centred, centred), dims, true);  // biased, as torch's
  Tensor y = mul(centred, pow(add(var, eps), -0.5));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

// The backend's row kernels on x as (N, D) rows. The kernels take weight and bias both or
// neither, so a lone one is paired with the identity's other half (its gradient is not asked for).
Tensor layer_norm_fused(const Tensor& x, size_t k, int64_t D, const Tensor& weight, const Tensor& bias, double eps) {
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Tensor rows = x.detach().reshape({-1, D}).contiguous();  // (N, D)
  Tensor w = weight.defined() ? weight.detach().reshape({D}).contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().reshape({D}).contiguous() : Tensor();
  if (w.defined() && !b.defined()) b = zeros({D}, like);
  if (b.defined() && !w.defined()) w = ones({D}, like);
  const int64_t N = rows.size(0);
  Tensor y = empty({N, D}, like), mu = empty({N}, like), rstd = empty({N}, like);
  backend_for(x).layer_norm_rows(rows, w, b, eps, y, mu, rstd);
  auto composed = [k, eps](const std::vector<Tensor>& in) {
    return layer_norm_composed_unchecked(in[0], k, in[1], in[2], eps);
  };
  auto backward = [D, mu, rstd](const std::vector<Tensor>& in, const Tensor& dy, Grads& g) {
    const Tensor &xv = in[0], &wv = in[1], &bv = in[2];
    const TensorOptions opts{.dtype = xv.dtype(), .device = xv.device()};
    Tensor dx = empty({mu.numel(), D}, opts);                                                  // (N, D)
    Tensor dw = wv.defined() && g.needs(1) ? empty({D}, opts) : Tensor();                     // (D,)
    Tensor db = bv.defined() && g.needs(2) ? empty({D}, opts) : Tensor();                     // (D,)
    backend_for(xv).layer_norm_rows_backward(xv.reshape({-1, D}).contiguous(),
                                             wv.defined() ? wv.reshape({D}).contiguous() : Tensor(), mu, rstd,
                                             dy.reshape({-1, D}).contiguous(), dx, dw, db);
    g.add(0, dx.view(xv.shape()));
    if (dw.defined()) g.add(1, dw.view(wv.shape()));
    if (db.defined()) g.add(2, db.view(bv.shape()));
  };
  const Tensor inputs[] = {x, weight, bias};
  return detail::record_fused(kOp, y.view(x.shape()), inputs, composed, backward);
}

}  // namespace

// layer_norm  over each row of the D = numel(normalized_shape) trailing elements:
//   μ = mean x   σ² = mean (x - μ)²   r = 1/√(σ² + eps)   x̂ = (x - μ) r   y = x̂ w + b
//   with g = dy w:   dx = r (g - mean g - x̂ mean(g x̂))   dw = Σ_rows dy x̂   db = Σ_rows dy
// Fused: one kernel each way (the backward recomputes x̂ from the saved μ and r). The composed
// twin is the same formula in ops: create_graph differentiates it.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const int64_t D = check_layer_norm(x, normalized_shape, weight, bias, eps);
  if (!backend_for(x).supports(FusedOp::layer_norm))
    return layer_norm_composed_unchecked(x, normalized_shape.size(), weight, bias, eps);
  return layer_norm_fused(x, normalized_shape.size(), D, weight, bias, eps);
}

Tensor layer_norm_composed(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                           double eps) {
  check_layer_norm(x, normalized_shape, weight, bias, eps);
  return layer_norm_composed_unchecked(x, normalized_shape.size(), weight, bias, eps);
}

}  // namespace seqgrad
