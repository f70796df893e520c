// Activations beyond tanh/sigmoid/relu (ops/elementwise.cpp): the sigmoid family (log_sigmoid,
// silu, hardsigmoid, hardswish), softplus, mish and gelu. Forward from kernels (hardswish and mish
// from the others' kernels); backward written with ops, so it runs on every backend and
// differentiates again (second order).
#include <cmath>

#include "ops/detail.h"

namespace seqgrad {

using detail::check_floating;
using detail::unary_kernel;

// log_sigmoid  y = log σ(x) = min(x, 0) - log(1 + e^-|x|)      dx = dy * σ(-x)
Tensor log_sigmoid(const Tensor& x) {
  check_floating("log_sigmoid", x);
  Tensor y = unary_kernel(UnaryOp::log_sigmoid, x);
  return record("log_sigmoid", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    g.add(0, mul(dy, sigmoid(neg(x.get()))));
  });
}

// silu  y = x σ(x)          dx = dy * σ(x) (1 + x (1 - σ(x)))
Tensor silu(const Tensor& x) {
  check_floating("silu", x);
  Tensor y = unary_kernel(UnaryOp::silu, x);
  return record("silu", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    Tensor s = sigmoid(xv);
    g.add(0, mul(dy, mul(s, add(mul(xv, sub(ones_like(s), s)), 1.0))));
  });
}

// hardsigmoid  y = clamp(x / 6 + 1/2, 0, 1)      dx = dy / 6 where -3 < x < 3, else 0 (as torch)
Tensor hardsigmoid(const Tensor& x) {
  check_floating("hardsigmoid", x);
  Tensor y = unary_kernel(UnaryOp::affine, x, {1.0 / 6.0, 0.5});
  backend_for(y).unary(UnaryOp::clamp, y, y, {0.0, 1.0});
  return record("hardsigmoid", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    Tensor inside = logical_and(gt(x.get(), -3.0), lt(x.get(), 3.0));
    g.add(0, where(inside, mul(dy, 1.0 / 6.0), zeros_like(dy)));
  });
}

// hardswish  y = x · hardsigmoid(x)
//   dx = 0 where x < -3, dy where x > 3, else dy (x / 3 + 1/2): the kinks ±3 take the middle
//   branch, as torch's hardswish_backward does
Tensor hardswish(const Tensor& x) {
  check_floating("hardswish", x);
  Tensor y;
  {
    NoGradGuard no_grad;  // the forward, not nodes of their own
    y = mul(x.detach(), hardsigmoid(x.detach()));
  }
  return record("hardswish", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    Tensor slope = where(lt(xv, -3.0), zeros_like(xv), where(gt(xv, 3.0), ones_like(xv), add(mul(xv, 1.0 / 3.0), 0.5)));
    g.add(0, mul(dy, slope));
  });
}

// softplus  y = log(1 + e^(βx)) / β, and y = x where βx > threshold (where the two agree to
// within e^-threshold; also keeps e^(βx) finite)      dx = dy * σ(βx), dy where βx > threshold
Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_floating("softplus", x);
  SG_CHECK_VALUE(beta > 0 && std::isfinite(beta), "softplus: beta = {} must be positive and finite", beta);
  Tensor y = unary_kernel(UnaryOp::softplus, x, {beta, threshold});
  return record("softplus", y, {x}, [x = save(x), beta, threshold](const Tensor& dy, Grads& g) {
    Tensor bx = mul(x.get(), beta);
    g.add(0, where(gt(bx, threshold), dy, mul(dy, sigmoid(bx))));
  });
}

// mish  y = x tanh(softplus(x))      dx = dy * (t + x σ(x) (1 - t²)), t = tanh(softplus(x))
// (softplus at threshold 20: above it softplus(x) = x and t = 1 to double precision, as torch's
// x tanh(log1p(e^x)) gives, without overflowing e^x)
Tensor mish(const Tensor& x) {
  check_floating("mish", x);
  Tensor y;
  {
    NoGradGuard no_grad;  // the forward, not nodes of their own
    y = mul(x.detach(), tanh(softplus(x.detach())));
  }
  return record("mish", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    Tensor t = tanh(softplus(xv));
    g.add(0, mul(dy, add(t, mul(mul(xv, sigmoid(xv)), sub(ones_like(t), mul(t, t))))));
  });
}

namespace {

// gelu'(x) = Φ(x) + x φ(x)   with Φ(x) = (1 + erf(x / √2)) / 2, φ(x) = e^(-x²/2) / √(2π)
Tensor gelu_derivative(const Tensor& x) {
  Tensor cdf = mul(add(erf(mul(x, M_SQRT1_2)), 1.0), 0.5);
  Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 1.0 / std::sqrt(2.0 * M_PI));
  return add(cdf, mul(x, pdf));
}

// With t = tanh(u), u = k (x + c x³), k = √(2/π), c = 0.044715:
//   gelu_tanh'(x) = (1 + t) / 2 + x/2 (1 - t²) k (1 + 3 c x²)
Tensor gelu_tanh_derivative(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  Tensor x2 = mul(x, x);
  Tensor t = tanh(mul(add(x, mul(mul(x2, x), c)), k));
  Tensor left = mul(add(t, 1.0), 0.5);
  Tensor right = mul(mul(mul(x, 0.5), sub(ones_like(t), mul(t, t))), mul(add(mul(x2, 3.0 * c), 1.0), k));
  return add(left, right);
}

}  // namespace

// gelu  y = x Φ(x) = x (1 + erf(x / √2)) / 2                          dx = dy * (Φ(x) + x φ(x))
// approximate = tanh: y = x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2   dx = dy * gelu_tanh'(x)
Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  check_floating("gelu", x);
  const bool use_tanh = approximate == GeluApproximate::tanh;
  Tensor y = unary_kernel(use_tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu, x);
  return record("gelu", y, {x}, [x = save(x), use_tanh](const Tensor& dy, Grads& g) {
    g.add(0, mul(dy, use_tanh ? gelu_tanh_derivative(x.get()) : gelu_derivative(x.get())));
  });
}

}  // namespace seqgrad
