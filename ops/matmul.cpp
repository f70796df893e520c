// Matrix products on the backend GEMM (OpenBLAS, cuBLAS). Transposed operands are passed as strides,
// never copied; under core/autocast.h float32 products round their operands to 16 bits.
#include "core/autocast.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

// a as a 3-D view (batch, rows, cols) over `batch` leading dims: a view when the batch dims
// collapse to one stride (including broadcast stride 0), a copy otherwise.
Tensor as_batch3(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.shape()[t.ndim() - 2]);
  full.push_back(t.shape()[t.ndim() - 1]);
  Tensor e = t.detach().expand(full);
  int nb = batch.size();
  int64_t n = batch.numel();
  // batch dims collapse into one when each stride is the next one's stride times its size
  int64_t stride = 0, inner_stride = 0, inner_size = 0;
  bool collapsible = true, first = true;
  for (int d = nb - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    int64_t s = e.strides()[d];
    if (first) stride = s, first = false;
    else if (s != inner_stride * inner_size) collapsible = false;
    inner_stride = s;
    inner_size = batch[d];
  }
  if (!collapsible) e = e.contiguous(), stride = e.shape()[nb] * e.shape()[nb + 1];
  auto impl = std::make_shared<TensorImpl>(*e.impl());
  impl->shape = {n, full[nb], full[nb + 1]};
  impl->strides = {stride, e.strides()[nb], e.strides()[nb + 1]};
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// The batched product of two tensors of rank >= 2 with broadcast batch dims.
Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Shape ba(std::span<const int64_t>(a.shape().begin(), a.ndim() - 2));
  Shape bb(std::span<const int64_t>(b.shape().begin(), b.ndim() - 2));
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const ShapeError&) {  // restate with the operands' full shapes
    throw ShapeError(fmt::format("matmul: batch dimensions {} and {} cannot be broadcast together: {} @ {}", ba, bb,
                                 a.shape(), b.shape()));
  }
  int64_t m = a.size(-2), n = b.size(-1);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor y = detail::empty_like_shape(out_shape, a);
  if (y.numel() == 0) return y;
  Tensor y3 = y.view({batch.numel(), m, n});
  // float32 products follow the autocast scope (core/autocast.h); float64 ones are always full
  GemmPrecision precision = a.dtype() == DType::f32 ? Autocast::current() : GemmPrecision::full;
  backend_for(a).gemm(as_batch3(a, batch), as_batch3(b, batch), y3, 1.0, 0.0, precision);
  return y;
}

}  // namespace

// matmul  y = a · b (batched, broadcasting batch dims)
//   da = sum_to(dy · bᵀ, a)        db = sum_to(aᵀ · dy, b)
// A 2-D right operand with a batched left one folds the batch into the rows (one big GEMM, and
// db becomes one GEMM instead of a batch of them followed by a sum), as PyTorch does.
Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_same("matmul", a, b);
  detail::check_floating("matmul", a);
  SG_CHECK_SHAPE(a.ndim() >= 1 && b.ndim() >= 1, "matmul: both operands need at least one dimension, got {} @ {}",
                 a.shape(), b.shape());
  if (a.ndim() == 1 && b.ndim() == 1) {
    SG_CHECK_SHAPE(a.size(0) == b.size(0), "matmul: inner dimensions differ: {} @ {}", a.shape(), b.shape());
    return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  }
  if (a.ndim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.ndim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  SG_CHECK_SHAPE(a.size(-1) == b.size(-2), "matmul: inner dimensions differ: {} @ {}", a.shape(), b.shape());
  if (a.ndim() > 2 && b.ndim() == 2) {
    Shape out_shape = a.shape();
    out_shape[out_shape.size() - 1] = b.size(-1);
    return matmul(a.reshape({-1, a.size(-1)}), b).view(out_shape);
  }
  Tensor y = matmul_nd(a, b);
  // backward runs its products at the forward's precision, wherever backward() is called
  return record("matmul", y, {a, b}, [a = save(a), b = save(b), precision = Autocast::current()](const Tensor& dy,
                                                                                                   Grads& g) {
    Autocast scope(precision);
    const Tensor &av = a.get(), &bv = b.get();
    const bool plain = av.ndim() == 2 && bv.ndim() == 2;  // 2-D: add straight into a gradient buffer
    if (g.needs(0)) {
      if (Tensor acc = plain ? g.accumulator(0) : Tensor(); acc.defined()) addmm_(acc, dy, bv.t());
      else g.add(0, sum_to(matmul(dy, bv.transpose(-1, -2)), av.shape()));
    }
    if (g.needs(1)) {
      if (Tensor acc = plain ? g.accumulator(1) : Tensor(); acc.defined()) addmm_(acc, av.t(), dy);
      else g.add(1, sum_to(matmul(av.transpose(-1, -2), dy), bv.shape()));
    }
  });
}

// bmm  y[i] = a[i] · b[i]: (N, M, K) · (N, K, P) -> (N, M, P), no broadcasting
Tensor bmm(const Tensor& a, const Tensor& b) {
  detail::check_same("bmm", a, b);
  SG_CHECK_SHAPE(a.ndim() == 3 && b.ndim() == 3, "bmm: expected 3-D tensors, got {} and {}", a.shape(), b.shape());
  SG_CHECK_SHAPE(a.size(0) == b.size(0), "bmm: batch sizes differ: {} and {}", a.shape(), b.shape());
  SG_CHECK_SHAPE(a.size(2) == b.size(1), "bmm: inner dimensions differ: {} @ {}", a.shape(), b.shape());
  return matmul(a, b);
}

// addmm_  c += a · b, in place: a (M, K), b (K, N), c (M, N) contiguous. Not differentiable; it is
// how backward passes add a product into a gradient buffer (Grads::accumulator) with one GEMM
// (beta = 1) instead of a GEMM into a fresh tensor and an add.
void addmm_(const Tensor& c, const Tensor& a, const Tensor& b) {
  detail::check_same("addmm_", a, b);
  detail::check_same("addmm_", c, a);
  detail::check_floating("addmm_", c);
  SG_CHECK_SHAPE(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2 && a.size(1) == b.size(0) && c.size(0) == a.size(0) &&
                     c.size(1) == b.size(1),
                 "addmm_: expected c (M, N) += a (M, K) · b (K, N), got c {}, a {}, b {}", c.shape(), a.shape(),
                 b.shape());
  SG_CHECK(c.is_contiguous(), "addmm_: c {} must be contiguous", c.shape());
  SG_CHECK(!(GradMode::is_enabled() && (c.requires_grad() || a.requires_grad() || b.requires_grad())),
           "addmm_: not differentiable; call it under NoGradGuard (c {}, a {}, b {})", c.shape(), a.shape(), b.shape());
  if (c.numel() == 0 || a.size(1) == 0) return;
  auto as3 = [](const Tensor& t) { return t.detach().unsqueeze(0); };  // (1, rows, cols) views
  GemmPrecision precision = c.dtype() == DType::f32 ? Autocast::current() : GemmPrecision::full;
  backend_for(c).gemm(as3(a), as3(b), as3(c), 1.0, 1.0, precision);
  c.bump_version();
}

// linear  y = x · Wᵀ + b     x: (..., in), W: (out, in), b: (out)
//   dx = dy · W    dW = dyᵀ · x    db = Σ dy over all but the last dim
// One node rather than matmul(x, W.t()) + b: dW is produced as (out, in) directly, so it adds into
// the parameter's gradient buffer with one GEMM (beta = 1) when one exists; composed through a
// transpose it would be written transposed. The bias is broadcast into y first and the product
// added onto it. tests/test_nn_layers.cpp compares it with its composed twin.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_same("linear", x, weight);
  detail::check_floating("linear", x);
  SG_CHECK_SHAPE(weight.ndim() == 2, "linear: weight must be 2-D (out_features, in_features), got {}", weight.shape());
  SG_CHECK_SHAPE(x.ndim() >= 1 && x.size(-1) == weight.size(1),
                 "linear: input feature size {} != in_features {} (x: {}, weight: {})", x.ndim() ? x.size(-1) : 0,
                 weight.size(1), x.shape(), weight.shape());
  if (bias.defined()) {
    detail::check_same("linear", x, bias);
    SG_CHECK_SHAPE(bias.ndim() == 1 && bias.size(0) == weight.size(0), "linear: bias shape {} != ({},)", bias.shape(),
                   weight.size(0));
  }
  const int64_t in = weight.size(1), out = weight.size(0);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out;
  Tensor y = detail::empty_like_shape(out_shape, x);
  const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  Tensor x2 = x.detach().reshape({1, rows, in});                         // (1, N, in)
  Tensor y2 = y.view({1, rows, out});                                    // (1, N, out)
  Tensor wt = weight.detach().t().unsqueeze(0);                          // (1, in, out), a view
  // float32 products follow the autocast scope (core/autocast.h), as matmul's do
  GemmPrecision precision = x.dtype() == DType::f32 ? Autocast::current() : GemmPrecision::full;
  if (bias.defined()) backend_for(y).copy(bias.detach().expand({1, rows, out}), y2);
  if (y.numel() > 0) {
    if (in == 0) {
      if (!bias.defined()) backend_for(y).fill(y, 0.0);
    } else {
      backend_for(y).gemm(x2, wt, y2, 1.0, bias.defined() ? 1.0 : 0.0, precision);
    }
  }
  const Tensor inputs[] = {x, weight, bias};
  return record("linear", y, std::span<const Tensor>(inputs, bias.defined() ? 3 : 2),
                [x = save(x), weight = save(weight), rows, in, out, has_bias = bias.defined(),
                 precision = Autocast::current()](const Tensor& dy, Grads& g) {
                  Autocast scope(precision);
                  const Tensor &xv = x.get(), &wv = weight.get();
                  Tensor dy2 = dy.reshape({rows, out});  // (N, out)
                  if (g.needs(0)) g.add(0, matmul(dy2, wv).reshape(xv.shape()));
                  if (g.needs(1)) {
                    Tensor x2 = xv.reshape({rows, in});  // (N, in)
                    if (Tensor acc = g.accumulator(1); acc.defined()) addmm_(acc, dy2.t(), x2);
                    else g.add(1, matmul(dy2.t(), x2));
                  }
                  if (has_bias && g.needs(2)) g.add(2, sum(dy2, {0}));
                });
}

Tensor Tensor::matmul(const Tensor& other) const { return seqgrad::matmul(*this, other); }

}  // namespace seqgrad
