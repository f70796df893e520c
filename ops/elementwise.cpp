// Element-wise ops with broadcasting. Broadcast inputs get their gradient summed back to their
// own shape with sum_to (explicitly: there is no implicit reduction anywhere).
#include <cmath>

#include "core/ops_hooks.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

using detail::check_floating;
using detail::check_same;
using detail::unary_kernel;

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const char* name, DType out_dtype) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor y = Tensor::empty(shape, {.dtype = out_dtype, .device = a.device()});
  backend_for(a).binary(op, a, b, y);
  return y;
}

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  return binary_kernel(op, a, b, name, a.dtype());
}

Tensor scalar_like(double v, const Tensor& like) {
  return full({}, v, {.dtype = like.dtype(), .device = like.device()});
}

// The ops core needs (core/ops_hooks.h: gradient accumulation, host reads), registered at start-up.
const bool ops_hooks_registered = [] {
  register_ops_hooks({
      .add = [](const Tensor& a, const Tensor& b) { return add(a, b); },
      .add_inplace = [](const Tensor& acc, const Tensor& g) { backend_for(acc).binary(BinaryOp::add, acc, g, acc); },
      .clone = [](const Tensor& t) { return clone(t); },
      .to_device = [](const Tensor& t, Device device) { return to_device(t, device); },
  });
  return true;
}();

// The gradient maximum and minimum send to one operand: all of dy where it wins, half where the
// two tie, none where it loses (PyTorch's rule; `loses` marks where the other operand wins).
Tensor winner_share(const Tensor& dy, const Tensor& mine, const Tensor& other, const Tensor& loses) {
  Tensor shared = where(eq(mine, other), mul(dy, 0.5), dy);  // broadcast shape
  return masked_fill(shared, loses, 0.0);
}

// maximum (op = BinaryOp::maximum) or minimum of a and b, recorded with winner_share's gradient.
Tensor elementwise_extreme(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same(name, a, b);
  Tensor y = binary_kernel(op, a, b, name);
  const bool larger_wins = op == BinaryOp::maximum;
  return record(name, y, {a, b}, [a = save(a), b = save(b), larger_wins](const Tensor& dy, Grads& g) {
    const Tensor &av = a.get(), &bv = b.get();
    auto loses = [larger_wins](const Tensor& mine, const Tensor& other) {
      return larger_wins ? lt(mine, other) : gt(mine, other);
    };
    if (g.needs(0)) g.add(0, sum_to(winner_share(dy, av, bv, loses(av, bv)), av.shape()));
    if (g.needs(1)) g.add(1, sum_to(winner_share(dy, bv, av, loses(bv, av)), bv.shape()));
  });
}

}  // namespace

namespace detail {
Tensor unary_kernel(UnaryOp op, const Tensor& x, UnaryParams p) {
  Tensor y = empty_like_shape(x.shape(), x);
  backend_for(x).unary(op, x, y, p);
  return y;
}
}  // namespace detail

// add  y = a + b            da = sum_to(dy, a)         db = sum_to(dy, b)
Tensor add(const Tensor& a, const Tensor& b) {
  check_same("add", a, b);
  Tensor y = binary_kernel(BinaryOp::add, a, b, "add");
  return record("add", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& dy, Grads& g) {
    if (g.needs(0)) g.add(0, sum_to(dy, sa));
    if (g.needs(1)) g.add(1, sum_to(dy, sb));
  });
}

// sub  y = a - b            da = sum_to(dy, a)         db = -sum_to(dy, b)
Tensor sub(const Tensor& a, const Tensor& b) {
  check_same("sub", a, b);
  Tensor y = binary_kernel(BinaryOp::sub, a, b, "sub");
  return record("sub", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& dy, Grads& g) {
    if (g.needs(0)) g.add(0, sum_to(dy, sa));
    if (g.needs(1)) g.add(1, neg(sum_to(dy, sb)));
  });
}

// mul  y = a * b            da = sum_to(dy * b, a)     db = sum_to(dy * a, b)
Tensor mul(const Tensor& a, const Tensor& b) {
  check_same("mul", a, b);
  Tensor y = binary_kernel(BinaryOp::mul, a, b, "mul");
  return record("mul", y, {a, b}, [a = save(a), b = save(b)](const Tensor& dy, Grads& g) {
    if (g.needs(0)) g.add(0, sum_to(mul(dy, b.get()), a.get().shape()));
    if (g.needs(1)) g.add(1, sum_to(mul(dy, a.get()), b.get().shape()));
  });
}

// div  y = a / b            da = sum_to(dy / b, a)     db = sum_to(-dy * a / b², b)
Tensor div(const Tensor& a, const Tensor& b) {
  check_same("div", a, b);
  Tensor y = binary_kernel(BinaryOp::div, a, b, "div");
  return record("div", y, {a, b}, [a = save(a), b = save(b)](const Tensor& dy, Grads& g) {
    const Tensor& bv = b.get();
    if (g.needs(0)) g.add(0, sum_to(div(dy, bv), a.get().shape()));
    if (g.needs(1)) g.add(1, sum_to(neg(div(mul(dy, a.get()), mul(bv, bv))), bv.shape()));
  });
}

// pow  y = a ^ b            da = sum_to(dy * b * a^(b-1), a), taken as 0 where b = 0
//                           db = sum_to(dy * y * log(a), b), taken as 0 where a = 0 and b >= 0
// (PyTorch's rules: without them a = 0, b = 0 gives da = 0 * 0^-1 = NaN and db = 1 * log 0 = -inf)
Tensor pow(const Tensor& a, const Tensor& b) {
  check_same("pow", a, b);
  check_floating("pow", a);
  Tensor y = binary_kernel(BinaryOp::pow, a, b, "pow");
  return record("pow", y, {a, b}, [a = save(a), b = save(b)](const Tensor& dy, Grads& g) {
    const Tensor &av = a.get(), &bv = b.get();
    if (g.needs(0)) {
      Tensor da = mul(mul(dy, bv), pow(av, sub(bv, ones_like(bv))));
      g.add(0, sum_to(where(eq(bv, 0.0), zeros_like(da), da), av.shape()));
    }
    if (g.needs(1)) {
      Tensor y = pow(av, bv);
      Tensor safe_log = where(logical_and(eq(av, 0.0), ge(bv, 0.0)), zeros_like(av), log(av));
      g.add(1, sum_to(mul(mul(dy, y), safe_log), bv.shape()));
    }
  });
}

// maximum  y = max(a, b)    minimum  y = min(a, b)    (NaN if either is NaN)
//   da = sum_to(dy, a) where a wins, half of it where a == b, 0 where b wins; db likewise
Tensor maximum(const Tensor& a, const Tensor& b) { return elementwise_extreme("maximum", BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return elementwise_extreme("minimum", BinaryOp::minimum, a, b); }

// add_scalar  y = a + s     da = dy
Tensor add(const Tensor& a, double s) {
  detail::check_defined("add", a);
  Tensor y = unary_kernel(UnaryOp::affine, a, {1.0, s});
  return record("add_scalar", y, {a}, [](const Tensor& dy, Grads& g) { g.add(0, dy); });
}

// mul_scalar  y = a * s     da = dy * s
Tensor mul(const Tensor& a, double s) {
  detail::check_defined("mul", a);
  Tensor y = unary_kernel(UnaryOp::affine, a, {s, 0.0});
  return record("mul_scalar", y, {a}, [s](const Tensor& dy, Grads& g) { g.add(0, mul(dy, s)); });
}

// pow_scalar  y = x ^ p     dx = dy * p * x^(p-1)
Tensor pow(const Tensor& x, double p) {
  check_floating("pow", x);
  Tensor y = unary_kernel(UnaryOp::pow_scalar, x, {p, 0.0});
  return record("pow_scalar", y, {x}, [x = save(x), p](const Tensor& dy, Grads& g) {
    if (p == 0) return g.add(0, zeros_like(dy));
    g.add(0, mul(dy, mul(pow(x.get(), p - 1), p)));
  });
}

// neg  y = -x               dx = -dy
Tensor neg(const Tensor& x) {
  detail::check_defined("neg", x);
  Tensor y = unary_kernel(UnaryOp::neg, x);
  return record("neg", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, neg(dy)); });
}

// exp  y = e^x              dx = dy * y
Tensor exp(const Tensor& x) {
  check_floating("exp", x);
  Tensor y = unary_kernel(UnaryOp::exp, x);
  return record("exp", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, mul(dy, g.output())); },
                SaveOutput::yes);
}

// log  y = ln x             dx = dy / x
Tensor log(const Tensor& x) {
  check_floating("log", x);
  Tensor y = unary_kernel(UnaryOp::log, x);
  return record("log", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) { g.add(0, div(dy, x.get())); });
}

// sqrt  y = √x              dx = dy / (2 y)
Tensor sqrt(const Tensor& x) {
  check_floating("sqrt", x);
  Tensor y = unary_kernel(UnaryOp::sqrt, x);
  return record("sqrt", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, div(mul(dy, 0.5), g.output())); },
                SaveOutput::yes);
}

// log1p  y = ln(1 + x)      dx = dy / (1 + x)     (exact for tiny x, where log(1 + x) rounds to 0)
Tensor log1p(const Tensor& x) {
  check_floating("log1p", x);
  Tensor y = unary_kernel(UnaryOp::log1p, x);
  return record("log1p", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) { g.add(0, div(dy, add(x.get(), 1.0))); });
}

// expm1  y = e^x - 1        dx = dy * (y + 1)
Tensor expm1(const Tensor& x) {
  check_floating("expm1", x);
  Tensor y = unary_kernel(UnaryOp::expm1, x);
  return record("expm1", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, mul(dy, add(g.output(), 1.0))); },
                SaveOutput::yes);
}

// erf  y = 2/√π ∫₀ˣ e^(-t²) dt     dx = dy * 2/√π e^(-x²)
Tensor erf(const Tensor& x) {
  check_floating("erf", x);
  Tensor y = unary_kernel(UnaryOp::erf, x);
  return record("erf", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    g.add(0, mul(dy, mul(exp(neg(mul(xv, xv))), 2.0 / std::sqrt(M_PI))));
  });
}

// tanh  y = tanh x          dx = dy * (1 - y²)
Tensor tanh(const Tensor& x) {
  check_floating("tanh", x);
  Tensor y = unary_kernel(UnaryOp::tanh, x);
  return record("tanh", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, tanh_backward(dy, g.output())); },
                SaveOutput::yes);
}

// sigmoid  y = 1 / (1 + e^-x)     dx = dy * y * (1 - y)
Tensor sigmoid(const Tensor& x) {
  check_floating("sigmoid", x);
  Tensor y = unary_kernel(UnaryOp::sigmoid, x);
  return record("sigmoid", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, sigmoid_backward(dy, g.output())); },
                SaveOutput::yes);
}

// The fused helpers run one kernel; when the backward is itself being recorded (create_graph)
// the composed twin runs instead, so second derivatives flow through ordinary ops.
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  if (GradMode::is_enabled() && (dy.requires_grad() || y.requires_grad()))
    return mul(dy, sub(ones_like(y), mul(y, y)));
  return binary_kernel(BinaryOp::tanh_backward, dy, y, "tanh_backward");
}

Tensor sigmoid_backward(const Tensor& dy, const Tensor& y) {
  if (GradMode::is_enabled() && (dy.requires_grad() || y.requires_grad()))
    return mul(dy, mul(y, sub(ones_like(y), y)));
  return binary_kernel(BinaryOp::sigmoid_backward, dy, y, "sigmoid_backward");
}

// One pass where the composed form makes three (the comparison, a zero tensor, the selection),
// which took 3% of a Transformer training step in its feed-forward layers.
Tensor relu_backward(const Tensor& dy, const Tensor& x) {
  check_same("relu_backward", dy, x);
  if (GradMode::is_enabled() && (dy.requires_grad() || x.requires_grad()))
    return where(gt(x, 0.0), dy, zeros_like(dy));
  return binary_kernel(BinaryOp::relu_backward, dy, x, "relu_backward");
}

// relu  y = max(x, 0)       dx = dy * (x > 0)
Tensor relu(const Tensor& x) {
  check_floating("relu", x);
  Tensor y = unary_kernel(UnaryOp::relu, x);
  return record("relu", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) { g.add(0, relu_backward(dy, x.get())); });
}

// abs  y = |x|              dx = dy * sign(x)
Tensor abs(const Tensor& x) {
  detail::check_defined("abs", x);
  Tensor y = unary_kernel(UnaryOp::abs, x);
  return record("abs", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    g.add(0, mul(dy, unary_kernel(UnaryOp::sign, x.get())));
  });
}

// clamp  y = min(max(x, lo), hi)     dx = dy where lo <= x <= hi, else 0 (PyTorch's rule)
Tensor clamp(const Tensor& x, double lo, double hi) {
  detail::check_defined("clamp", x);
  SG_CHECK_VALUE(lo <= hi, "clamp: min {} is greater than max {}", lo, hi);
  Tensor y = unary_kernel(UnaryOp::clamp, x, {lo, hi});
  return record("clamp", y, {x}, [x = save(x), lo, hi](const Tensor& dy, Grads& g) {
    Tensor inside = logical_and(ge(x.get(), lo), le(x.get(), hi));
    g.add(0, where(inside, dy, zeros_like(dy)));
  });
}

// where  y = cond ? a : b   da = sum_to(cond ? dy : 0, a)   db = sum_to(cond ? 0 : dy, b)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same("where", a, b);
  SG_CHECK_DTYPE(cond.dtype() == DType::b8, "where: condition must be bool, got {} {}", cond.dtype(), cond.shape());
  detail::check_device_of("where", a, cond, "condition");
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor y = detail::empty_like_shape(shape, a);
  backend_for(a).where(cond, a, b, y);
  return record("where", y, {a, b}, [cond, sa = a.shape(), sb = b.shape()](const Tensor& dy, Grads& g) {
    Tensor zero = zeros_like(dy);
    if (g.needs(0)) g.add(0, sum_to(where(cond, dy, zero), sa));
    if (g.needs(1)) g.add(1, sum_to(where(cond, zero, dy), sb));
  });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_like(b, a)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalar_like(a, b), b); }

// masked_fill  y = mask ? value : x     dx = mask ? 0 : dy
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", x);
  SG_CHECK_DTYPE(mask.dtype() == DType::b8, "masked_fill: mask must be bool, got {} {}", mask.dtype(), mask.shape());
  Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  SG_CHECK_SHAPE(shape == x.shape(), "masked_fill: mask {} must broadcast to the input's shape {}", mask.shape(),
                 x.shape());
  return where(mask, scalar_like(value, x), x);
}

// ---- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

// ---- comparisons
#define SG_COMPARISON(name, op)                                                   \
  Tensor name(const Tensor& a, const Tensor& b) {                                 \
    check_same(#name, a, b);                                                      \
    return binary_kernel(BinaryOp::op, a, b, #name, DType::b8);                   \
  }                                                                               \
  Tensor name(const Tensor& a, double b) { return name(a, scalar_like(b, a)); }
SG_COMPARISON(eq, eq)
SG_COMPARISON(ne, ne)
SG_COMPARISON(lt, lt)
SG_COMPARISON(le, le)
SG_COMPARISON(gt, gt)
SG_COMPARISON(ge, ge)
#undef SG_COMPARISON

Tensor logical_not(const Tensor& x) {
  detail::check_defined("logical_not", x);
  SG_CHECK_DTYPE(x.dtype() == DType::b8, "logical_not: expected bool, got {} {}", x.dtype(), x.shape());
  Tensor y = detail::empty_like_shape(x.shape(), x);
  backend_for(x).unary(UnaryOp::logical_not, x, y, {});
  return y;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_same("logical_and", a, b);
  SG_CHECK_DTYPE(a.dtype() == DType::b8, "logical_and: expected bool, got {}", a.dtype());
  return binary_kernel(BinaryOp::logical_and, a, b, "logical_and");
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_same("logical_or", a, b);
  SG_CHECK_DTYPE(a.dtype() == DType::b8, "logical_or: expected bool, got {}", a.dtype());
  return binary_kernel(BinaryOp::logical_or, a, b, "logical_or");
}

// a ^ b on bools is a != b.
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  check_same("logical_xor", a, b);
  SG_CHECK_DTYPE(a.dtype() == DType::b8, "logical_xor: expected bool, got {}", a.dtype());
  return binary_kernel(BinaryOp::ne, a, b, "logical_xor", DType::b8);
}

// ---- comparison and logical operators (bool results, like torch's)
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
Tensor operator==(double a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(double a, const Tensor& b) { return ne(b, a); }
Tensor operator<(double a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(double a, const Tensor& b) { return ge(b, a); }
Tensor operator>(double a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(double a, const Tensor& b) { return le(b, a); }
Tensor operator~(const Tensor& x) { return logical_not(x); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return logical_xor(a, b); }

// x - x is 0 for finite x and NaN for inf or NaN.
Tensor isfinite(const Tensor& x) {
  NoGradGuard no_grad;
  if (!is_floating(x.dtype())) return full(x.shape(), 1.0, {.dtype = DType::b8, .device = x.device()});
  return eq(sub(x, x), 0.0);
}

// ---- in-place ops

namespace detail {

void check_inplace(const char* op, const Tensor& self, bool recording) {
  if (!recording) return;
  SG_CHECK(!(self.is_leaf() && self.requires_grad()),
           "{}: a leaf tensor that requires grad (shape {}) is used in an in-place operation; do "
           "parameter updates under NoGradGuard",
           op, self.shape());
  SG_CHECK(!self.impl()->is_view,
           "{}: in-place operations on a view of a tensor in the autograd graph are not supported "
           "(shape {}); use the out-of-place op",
           op, self.shape());
}

void commit_inplace(const Tensor& self, const Tensor& result) {
  backend_for(self).copy(result, self);
  self.impl()->grad_fn = result.grad_fn();
  self.impl()->requires_grad = result.requires_grad();
  self.bump_version();
}

}  // namespace detail

namespace {
// Runs an in-place op: directly on the storage when nothing is recorded, else as its
// out-of-place twin whose result and history replace self's. The twin then reads a clone of
// self, because a twin that saves its input for backward (mul, clamp) would otherwise save self,
// whose contents the commit below overwrites.
template <class OutOfPlace>
Tensor& inplace(const char* op, Tensor& self, bool operand_requires_grad, OutOfPlace f) {
  bool recording = GradMode::is_enabled() && (self.requires_grad() || operand_requires_grad);
  detail::check_inplace(op, self, recording);
  Tensor result = f(recording ? clone(self) : self);
  SG_CHECK_SHAPE(result.shape() == self.shape(), "{}: result shape {} does not match the tensor's shape {}", op,
                 result.shape(), self.shape());
  if (recording) {
    detail::commit_inplace(self, result);
  } else {
    backend_for(self).copy(result, self);
    self.bump_version();
  }
  return self;
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  detail::check_inplace("fill_", *this, GradMode::is_enabled() && requires_grad());
  backend_for(*this).fill(*this, value);
  if (!is_leaf()) {  // a constant now: no history
    impl()->grad_fn.reset();
    impl()->requires_grad = false;
  }
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  SG_CHECK_SHAPE(broadcast_shapes(shape(), src.shape(), "copy_") == shape(),
                 "copy_: source shape {} cannot be broadcast to {}", src.shape(), shape());
  Tensor s = src.device() == device() ? src : to_device(src, device());  // across devices, as PyTorch
  s = s.dtype() == dtype() ? s : to_dtype(s, dtype());
  if (!(GradMode::is_enabled() && (requires_grad() || src.requires_grad()))) {
    // nothing to record: the values themselves (a decoder's cache append; self's old contents, even
    // NaN in a fresh buffer, play no part)
    backend_for(*this).copy(s.shape() == shape() ? s : s.expand(shape()), *this);
    bump_version();
    return *this;
  }
  return inplace("copy_", *this, src.requires_grad(), [&](const Tensor& self) { return add(mul(self, 0.0), s); });
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return inplace("add_", *this, other.requires_grad(),
                 [&](const Tensor& self) { return alpha == 1.0 ? add(self, other) : add(self, mul(other, alpha)); });
}

Tensor& Tensor::mul_(const Tensor& other) {
  return inplace("mul_", *this, other.requires_grad(), [&](const Tensor& self) { return mul(self, other); });
}

Tensor& Tensor::mul_(double value) {
  return inplace("mul_", *this, false, [&](const Tensor& self) { return mul(self, value); });
}

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return inplace("masked_fill_", *this, false,
                 [&](const Tensor& self) { return seqgrad::masked_fill(self, mask, value); });
}

Tensor& Tensor::clamp_(double lo, double hi) {
  return inplace("clamp_", *this, false, [&](const Tensor& self) { return seqgrad::clamp(self, lo, hi); });
}

// ---- Tensor member shortcuts
Tensor Tensor::exp() const { return seqgrad::exp(*this); }
Tensor Tensor::log() const { return seqgrad::log(*this); }
Tensor Tensor::sqrt() const { return seqgrad::sqrt(*this); }
Tensor Tensor::tanh() const { return seqgrad::tanh(*this); }
Tensor Tensor::sigmoid() const { return seqgrad::sigmoid(*this); }
Tensor Tensor::relu() const { return seqgrad::relu(*this); }
Tensor Tensor::abs() const { return seqgrad::abs(*this); }
Tensor Tensor::pow(double e) const { return seqgrad::pow(*this, e); }
Tensor Tensor::clamp(double lo, double hi) const { return seqgrad::clamp(*this, lo, hi); }
Tensor Tensor::masked_fill(const Tensor& mask, double v) const { return seqgrad::masked_fill(*this, mask, v); }

}  // namespace seqgrad
