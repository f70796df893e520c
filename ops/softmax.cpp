// softmax and log_softmax: one fused pass per row (max-subtraction keeps exp() finite).
#include "ops/detail.h"

namespace seqgrad {
namespace {

// Runs the row kernel on `dim` moved last (a view), returning the result in x's layout.
Tensor softmax_kernel(const Tensor& x, int dim, bool log) {
  Tensor xt = x.detach().transpose(dim, -1).contiguous();
  Tensor y = detail::empty_like_shape(xt.shape(), x);
  if (y.numel() > 0) backend_for(x).softmax_rows(xt, y, log);
  return y.transpose(dim, -1);
}

Tensor softmax_backward_fused(const Tensor& y, const Tensor& dy, int dim, bool log) {
  Tensor yt = y.transpose(dim, -1).contiguous(), dyt = dy.transpose(dim, -1).contiguous();
  Tensor dx = detail::empty_like_shape(yt.shape(), y);
  if (dx.numel() > 0) backend_for(y).softmax_rows_backward(yt, dyt, dx, log);
  return dx.transpose(dim, -1);
}

bool recording(const Tensor& a, const Tensor& b) {
  return GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
}

}  // namespace

// softmax  y_i = exp(x_i) / Σ_j exp(x_j)      dx = y * (dy - Σ_j dy_j y_j)
Tensor softmax(const Tensor& x, int64_t dim) {
  detail::check_floating("softmax", x);
  int d = wrap_dim(dim, x.ndim(), "softmax");
  if (x.ndim() == 0) return softmax(x.reshape({1}), 0).reshape({});  // 1, with history (dx = 0)
  Tensor y = softmax_kernel(x, d, false);
  return record("softmax", y, {x}, [d](const Tensor& dy, Grads& g) {
    Tensor yv = g.output();
    if (recording(dy, yv)) g.add(0, mul(yv, sub(dy, sum(mul(dy, yv), {d}, true))));  // composed twin
    else g.add(0, softmax_backward_fused(yv, dy, d, false));
  }, SaveOutput::yes);
}

// log_softmax  y_i = x_i - log Σ_j exp(x_j)   dx = dy - exp(y) * Σ_j dy_j
Tensor log_softmax(const Tensor& x, int64_t dim) {
  detail::check_floating("log_softmax", x);
  int d = wrap_dim(dim, x.ndim(), "log_softmax");
  if (x.ndim() == 0) return log_softmax(x.reshape({1}), 0).reshape({});  // 0, with history (dx = 0)
  Tensor y = softmax_kernel(x, d, true);
  return record("log_softmax", y, {x}, [d](const Tensor& dy, Grads& g) {
    Tensor yv = g.output();
    if (recording(dy, yv)) g.add(0, sub(dy, mul(exp(yv), sum(dy, {d}, true))));  // composed twin
    else g.add(0, softmax_backward_fused(yv, dy, d, true));
  }, SaveOutput::yes);
}

Tensor Tensor::softmax(int64_t dim) const { return seqgrad::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return seqgrad::log_softmax(*this, dim); }

}  // namespace seqgrad
