// The CUDA backend against the CPU backend (the oracle): every primitive of core/backend.h on
// strided, broadcast and edge-case inputs, every op-table row forward and backward (float64), mixed
// precision, random streams (uniform and dropout masks bit for bit), the fused kernels (GRU step,
// additive energies, layer normalisation, cross-entropy, Adam) directly and through their ops and optimizers, device
// movement, errors, and a small GRU + attention model trained a few steps on both devices.
// Without a CUDA device (or in a build without the CUDA backend) it prints why and exits with 77,
// which meson reports as SKIP.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/backend_math.h"
#include "core/device_memory.h"
#include "core/rng.h"
#include "core/serialize.h"
#include "nn/attention_additive.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "ops/ops.h"
#include "ops/quantized.h"
#include "optim/optim.h"
#include "tools/op_cases.h"

using namespace seqgrad;
namespace oc = seqgrad::op_cases;

namespace {

const Device kCuda = Device::cuda(0);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kF64{1e-10, 1e-12};  // CUDA's exp/log/tanh differ from glibc's by an ulp or two;
constexpr Tolerance kF32{1e-4, 1e-5};    // sums are accumulated in another order

// A copy of t on `device` with the same shape, strides and offset (the whole storage is copied), so
// non-contiguous inputs stay non-contiguous; a leaf that requires grad if t does.
Tensor same_layout_on(const Tensor& t, Device device) {
  const Storage& from = *t.impl()->storage;
  auto storage = std::make_shared<Storage>(from.nbytes, device);
  if (from.nbytes > 0) device_memory_for(device, "test").copy(storage->data, device, from.data, from.device, from.nbytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  Tensor out(std::move(impl));
  if (t.requires_grad()) out.requires_grad_();
  return out;
}

Tensor tensor_on(const Tensor& t, Device device) { return same_layout_on(t.detach(), device); }

// `got` (a device tensor) equals `want` (the CPU's) in shape and dtype, and in value within tol
// (NaN matches NaN, infinities match exactly).
void check_same(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& what = "") {
  INFO(what);
  REQUIRE(got.defined());
  CHECK(got.device() == kCuda);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  std::vector<double> g = got.cpu().to_vector<double>(), w = want.to_vector<double>();
  size_t bad = g.size();
  for (size_t i = 0; i < g.size() && bad == g.size(); ++i) {
    bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                (std::isfinite(w[i]) && std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]));
    if (!same) bad = i;
  }
  INFO("shape " << fmt::format("{}", got.shape()) << ", element " << bad << ": cuda "
                << (bad < g.size() ? g[bad] : 0) << " vs cpu " << (bad < g.size() ? w[bad] : 0));
  CHECK(bad == g.size());
}

Tolerance tolerance_for(DType t) { return t == DType::f32 ? kF32 : t == DType::f64 ? kF64 : kExact; }

// Values for every dtype: normal floats, small integers, alternating bools.
Tensor sample(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v(shape.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    double x = normal_at(seed, 0, i);
    v[i] = dtype == DType::i64 ? std::round(3 * x) : dtype == DType::b8 ? (x > 0) : x;
  }
  return from_vector(v, shape, {.dtype = dtype});
}

// (n,) bool: false at every third index (1, 4, ...), the padded rows of the fused-kernel tests.
Tensor padding_mask(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i % 3 != 1;
  return from_vector(v, {n}, {.dtype = DType::b8});
}

// Runs a backend primitive on CPU tensors and on device copies (same layouts), then compares the
// outputs (the tensors at `outputs` in the argument list).
template <class F>
void check_primitive(const std::string& what, const std::vector<Tensor>& cpu_args, const std::vector<int>& outputs,
                     F&& call) {
  std::vector<Tensor> dev_args;
  for (const Tensor& t : cpu_args) dev_args.push_back(t.defined() ? tensor_on(t, kCuda) : Tensor());
  call(backend_for(Device::cpu()), cpu_args);
  call(backend_for(kCuda), dev_args);
  for (int i : outputs) check_same(dev_args[i], cpu_args[i], tolerance_for(cpu_args[i].dtype()), what);
}

}  // namespace

// ---- primitives

TEST_CASE("cuda copy: every dtype pair, strided source and destination") {
  for (DType from : {DType::f32, DType::f64, DType::i64, DType::b8})
    for (DType to : {DType::f32, DType::f64, DType::i64, DType::b8}) {
      Tensor src = sample({6, 5}, from, 1).t();                                    // (5, 6), transposed
      Tensor dst = zeros({5, 12}, {.dtype = to}).slice(1, 0, 12, 2);              // (5, 6), every other column
      check_primitive(fmt::format("{} -> {}", dtype_name(from), dtype_name(to)), {src, dst}, {1},
                      [](Backend& b, const std::vector<Tensor>& t) { b.copy(t[0], t[1]); });
    }
  Tensor big = sample({1 << 20}, DType::f32, 2);
  check_same(big.to(kCuda), big, kExact, "1M floats host -> device");
  check_same(big.to(kCuda).to(DType::f64), big.to(DType::f64), kExact, "device cast");
}

TEST_CASE("cuda fill: every dtype, into a strided view") {
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    Tensor dst = zeros({4, 6}, {.dtype = t}).slice(1, 1, 6, 2);
    check_primitive(dtype_name(t), {dst}, {0}, [](Backend& b, const std::vector<Tensor>& a) { b.fill(a[0], 3.0); });
  }
  check_same(full({3, 3}, -2.5, {.device = kCuda}), full({3, 3}, -2.5), kExact, "full");
  check_same(zeros({0}, {.device = kCuda}), zeros({0}), kExact, "empty");
}

TEST_CASE("cuda unary: every op and dtype, broadcast and transposed inputs") {
  const UnaryOp ops[] = {UnaryOp::neg, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt, UnaryOp::tanh, UnaryOp::sigmoid,
                         UnaryOp::relu, UnaryOp::abs, UnaryOp::sign, UnaryOp::reciprocal, UnaryOp::clamp,
                         UnaryOp::pow_scalar, UnaryOp::affine, UnaryOp::log1p, UnaryOp::expm1, UnaryOp::erf,
                         UnaryOp::softplus, UnaryOp::gelu, UnaryOp::gelu_tanh, UnaryOp::log_sigmoid, UnaryOp::silu};
  for (UnaryOp op : ops)
    for (DType t : {DType::f32, DType::f64, DType::i64}) {
      if (t == DType::i64 && !math::unary_works_on_integers(op)) continue;
      bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::pow_scalar ||
                      op == UnaryOp::log1p;
      Tensor x = sample({4, 5}, t, 3);
      if (positive) x = add(abs(x), 0.5).to(t);
      for (double exponent : {2.0, 0.5}) {
        if (op != UnaryOp::pow_scalar && exponent != 2.0) continue;
        UnaryParams p = op == UnaryOp::clamp ? UnaryParams{-0.5, 0.7} : op == UnaryOp::pow_scalar ? UnaryParams{exponent, 0}
                        : op == UnaryOp::affine ? UnaryParams{1.5, -0.25}
                        : op == UnaryOp::softplus ? UnaryParams{2.0, 1.0}  // beta, threshold: both branches
                                                  : UnaryParams{};
        std::string name = fmt::format("{} {} ^{}", unary_op_name(op), dtype_name(t), exponent);
        check_primitive(name + " transposed", {x.t(), zeros({5, 4}, {.dtype = t})}, {1},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.unary(op, a[0], a[1], p); });
        check_primitive(name + " broadcast", {x.narrow(0, 0, 1).expand({3, 5}), zeros({3, 5}, {.dtype = t})}, {1},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.unary(op, a[0], a[1], p); });
      }
    }
  Tensor mask = sample({7}, DType::b8, 4);
  check_primitive("logical_not", {mask, zeros({7}, {.dtype = DType::b8})}, {1},
                  [](Backend& b, const std::vector<Tensor>& a) { b.unary(UnaryOp::logical_not, a[0], a[1], {}); });
  Tensor special = tensor({kNaN, kInf, -kInf, 0.0, -0.0, 1e-300}, {.dtype = DType::f64});
  check_primitive("relu / abs / sign of NaN and inf", {special, zeros({6}, {.dtype = DType::f64})}, {1},
                  [](Backend& b, const std::vector<Tensor>& a) { b.unary(UnaryOp::relu, a[0], a[1], {}); });
}

TEST_CASE("cuda binary: every op with broadcasting; comparisons on every dtype; logical on bool") {
  const BinaryOp arithmetic[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::pow,
                                 BinaryOp::maximum, BinaryOp::minimum, BinaryOp::tanh_backward,
                                 BinaryOp::sigmoid_backward, BinaryOp::relu_backward};
  for (BinaryOp op : arithmetic)
    for (DType t : {DType::f32, DType::f64, DType::i64}) {
      if (t == DType::i64 && (op == BinaryOp::div || op == BinaryOp::pow)) continue;
      Tensor a = sample({3, 1, 4}, t, 5), b = sample({5, 4}, t, 6);
      if (op == BinaryOp::pow) a = add(abs(a), 0.5).to(t);
      check_primitive(fmt::format("{} {}", binary_op_name(op), dtype_name(t)),
                      {a.expand({3, 5, 4}), b.expand({3, 5, 4}), zeros({3, 5, 4}, {.dtype = t})}, {2},
                      [&](Backend& be, const std::vector<Tensor>& x) { be.binary(op, x[0], x[1], x[2]); });
    }
  for (BinaryOp op : {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt, BinaryOp::ge})
    for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
      Tensor a = sample({4, 6}, t, 7), b = sample({6}, t, 8);
      check_primitive(fmt::format("{} {}", binary_op_name(op), dtype_name(t)),
                      {a, b.expand({4, 6}), zeros({4, 6}, {.dtype = DType::b8})}, {2},
                      [&](Backend& be, const std::vector<Tensor>& x) { be.binary(op, x[0], x[1], x[2]); });
    }
  for (BinaryOp op : {BinaryOp::logical_and, BinaryOp::logical_or}) {
    Tensor a = sample({5, 3}, DType::b8, 9), b = sample({5, 3}, DType::b8, 10);
    check_primitive(binary_op_name(op), {a, b.t().contiguous().t(), zeros({5, 3}, {.dtype = DType::b8})}, {2},
                    [&](Backend& be, const std::vector<Tensor>& x) { be.binary(op, x[0], x[1], x[2]); });
  }
}

TEST_CASE("cuda where: broadcast condition and operands") {
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    Tensor cond = sample({4, 1}, DType::b8, 11), a = sample({4, 5}, t, 12), b = sample({5}, t, 13);
    check_primitive(dtype_name(t), {cond.expand({4, 5}), a, b.expand({4, 5}), zeros({4, 5}, {.dtype = t})}, {3},
                    [](Backend& be, const std::vector<Tensor>& x) { be.where(x[0], x[1], x[2], x[3]); });
  }
}

TEST_CASE("cuda reduce: every op over dim sets, short and long reductions, NaN and ties") {
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin};
  struct Case {
    Shape shape;
    Shape reduced;  // dims to reduce
  };
  const Case cases[] = {{{4, 5, 6}, {0}}, {{4, 5, 6}, {1}}, {{4, 5, 6}, {2}}, {{4, 5, 6}, {0, 2}},
                        {{4, 5, 6}, {0, 1, 2}}, {{3, 1000}, {1}}, {{1000, 3}, {0}}, {{2, 300, 2}, {1}}};
  for (ReduceOp op : ops)
    for (DType t : {DType::f32, DType::f64, DType::i64})
      for (const Case& c : cases) {
        bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
        if (arg && c.reduced.size() != 1) continue;  // arg reductions run over one dim
        Tensor x = sample(c.shape, t, 14);
        Shape out_shape = c.shape;
        for (int64_t d : c.reduced) out_shape[static_cast<int>(d)] = 1;
        Tensor out = zeros(out_shape, {.dtype = arg ? DType::i64 : t});
        check_primitive(fmt::format("op {} {} {} over {}", static_cast<int>(op), dtype_name(t), c.shape, c.reduced),
                        {x, out}, {1}, [&](Backend& b, const std::vector<Tensor>& a) { b.reduce(op, a[0], a[1]); });
        // the same reduction of a transposed input
        Tensor out_t = zeros(out.transpose(0, -1).shape(), {.dtype = out.dtype()});
        check_primitive("transposed", {x.transpose(0, -1), out_t}, {1},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.reduce(op, a[0], a[1]); });
      }
  // NaN propagates through max/min and wins argmax/argmin (the first NaN); ties give the first index
  Tensor x = tensor({1, 3, 3, kNaN, 2, kNaN, 0, 3, 3, 1, 0, 0}, {2, 6}, {.dtype = DType::f64});
  Tensor long_x = cat({sample({2, 400}, DType::f64, 15), x}, 1);  // the block kernel too
  for (const Tensor& in : {x, long_x})
    for (ReduceOp op : ops) {
      Tensor out = zeros({2, 1}, {.dtype = op == ReduceOp::argmax || op == ReduceOp::argmin ? DType::i64 : DType::f64});
      check_primitive(fmt::format("NaN/ties op {} width {}", static_cast<int>(op), in.size(1)), {in, out}, {1},
                      [&](Backend& b, const std::vector<Tensor>& a) { b.reduce(op, a[0], a[1]); });
    }
}

TEST_CASE("cuda gemm: float32/float64, transposed and broadcast operands, alpha/beta, edge shapes") {
  struct Case {
    int64_t batch, m, k, n;
  };
  for (DType t : {DType::f32, DType::f64})
    for (Case c : {Case{1, 3, 4, 5}, Case{4, 7, 16, 9}, Case{2, 1, 8, 6}, Case{3, 5, 8, 1}, Case{2, 64, 130, 33}}) {
      Tensor a = sample({c.batch, c.m, c.k}, t, 16), b = sample({c.batch, c.k, c.n}, t, 17);
      Tensor at = a.transpose(1, 2).contiguous().transpose(1, 2), bt = b.transpose(1, 2).contiguous().transpose(1, 2);
      Tensor a_bcast = a.narrow(0, 0, 1).expand({c.batch, c.m, c.k});
      Tensor c0 = sample({c.batch, c.m, c.n}, t, 18);
      Tensor a_wide = sample({c.batch, c.m, c.k + 3}, t, 37).slice(2, 1, c.k + 1);  // row stride k + 3
      std::string name = fmt::format("{} ({}, {}, {}, {})", dtype_name(t), c.batch, c.m, c.k, c.n);
      for (auto [x, y, label] : {std::tuple{a, b, "plain"}, std::tuple{at, b, "a transposed"},
                                 std::tuple{a, bt, "b transposed"}, std::tuple{at, bt, "both transposed"},
                                 std::tuple{a_bcast, b, "a broadcast"}, std::tuple{a_wide, b, "row stride > k"}})
        check_primitive(name + " " + label, {x, y, c0.clone()}, {2}, [](Backend& be, const std::vector<Tensor>& v) {
          be.gemm(v[0], v[1], v[2], 1.5, 0.5, GemmPrecision::full);
        });
      // an operand that is neither row- nor column-major (copied dense first)
      Tensor odd = sample({c.batch, c.m, 2 * c.k}, t, 19).slice(2, 0, 2 * c.k, 2);
      check_primitive(name + " strided", {odd, b, zeros({c.batch, c.m, c.n}, {.dtype = t})}, {2},
                      [](Backend& be, const std::vector<Tensor>& v) { be.gemm(v[0], v[1], v[2], 1.0, 0.0, GemmPrecision::full); });
    }
  // k = 0: C = beta · C, and beta = 0 ignores whatever C held
  Tensor a = zeros({1, 3, 0}), b = zeros({1, 0, 2});
  Tensor garbage = full({1, 3, 2}, kNaN);
  check_primitive("k = 0, beta = 0", {a, b, garbage}, {2},
                  [](Backend& be, const std::vector<Tensor>& v) { be.gemm(v[0], v[1], v[2], 1.0, 0.0, GemmPrecision::full); });
  check_primitive("k = 0, beta = 2", {a, b, ones({1, 3, 2})}, {2},
                  [](Backend& be, const std::vector<Tensor>& v) { be.gemm(v[0], v[1], v[2], 1.0, 2.0, GemmPrecision::full); });
  // through matmul, with broadcasting batch dims
  Tensor x = sample({2, 1, 5, 6}, DType::f64, 20), y = sample({3, 6, 4}, DType::f64, 21);
  check_same(matmul(x.to(kCuda), y.to(kCuda)), matmul(x, y), kF64, "matmul broadcast");
}

TEST_CASE("cuda gemm under autocast: 16-bit operands rounded as on the CPU, float32 accumulation") {
  for (GemmPrecision precision : {GemmPrecision::bf16, GemmPrecision::f16}) {
    Tensor a = sample({3, 20, 96}, DType::f32, 22), b = sample({96, 40}, DType::f32, 23);
    Tensor a_dev = a.to(kCuda), b_dev = b.to(kCuda);
    Autocast amp(precision);
    // same rounded operands: only the float32 accumulation order differs
    check_same(matmul(a_dev, b_dev), matmul(a, b), {1e-5, 1e-5}, gemm_precision_name(precision));
    check_same(matmul(a_dev, b_dev.t().contiguous().t()), matmul(a, b), {1e-5, 1e-5}, "transposed b");
    check_same(matmul(b_dev.t(), a_dev.select(0, 1).t()), matmul(b.t(), a.select(0, 1).t()), {1e-5, 1e-5},
               "both transposed");
  }
}

TEST_CASE("cuda indexing: index_select, index_add with repeated indices, gather, scatter_add") {
  Tensor idx = tensor({2, 0, 2, 1, 2}, {.dtype = DType::i64});
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    Tensor x = sample({3, 4, 2}, t, 24);
    for (int dim : {0, 1}) {
      Shape out_shape = x.shape();
      out_shape[dim] = idx.numel();
      Tensor index = dim == 0 ? idx : tensor({3, 0, 3, 1, 0}, {.dtype = DType::i64});
      check_primitive(fmt::format("index_select {} dim {}", dtype_name(t), dim),
                      {x.transpose(0, 2).contiguous().transpose(0, 2), index, zeros(out_shape, {.dtype = t})}, {2},
                      [&](Backend& b, const std::vector<Tensor>& a) { b.index_select(a[0], dim, a[1], a[2]); });
      if (t == DType::b8) continue;
      check_primitive(fmt::format("index_add {} dim {}", dtype_name(t), dim), {x.clone(), index, sample(out_shape, t, 25)},
                      {0}, [&](Backend& b, const std::vector<Tensor>& a) { b.index_add(a[0], dim, a[1], a[2]); });
    }
    Tensor gidx = tensor({0, 2, 2, 1, 0, 0}, {2, 3, 1}, {.dtype = DType::i64});
    check_primitive(fmt::format("gather {}", dtype_name(t)), {x, gidx.expand({2, 3, 1}).contiguous(), zeros({2, 3, 1}, {.dtype = t})},
                    {2}, [](Backend& b, const std::vector<Tensor>& a) { b.gather(a[0], 1, a[1], a[2]); });
    if (t == DType::b8) continue;
    check_primitive(fmt::format("scatter_add {}", dtype_name(t)), {x.clone(), gidx, sample({2, 3, 1}, t, 26)}, {0},
                    [](Backend& b, const std::vector<Tensor>& a) { b.scatter_add(a[0], 1, a[1], a[2]); });
  }
  // many updates of the same rows (atomics)
  Tensor rows = from_vector(std::vector<double>(1000, 1.0), {1000}, {.dtype = DType::i64});
  Tensor table = zeros({3, 64}, {.dtype = DType::f64});
  check_primitive("index_add of 1000 equal ids", {table, rows, sample({1000, 64}, DType::f64, 27)}, {0},
                  [](Backend& b, const std::vector<Tensor>& a) { b.index_add(a[0], 0, a[1], a[2]); });
}

TEST_CASE("cuda softmax rows: short and long rows, -inf entries and fully masked rows, backward") {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t cols : {1, 7, 128, 1000, 4099})
      for (bool log : {false, true}) {
        Tensor x = sample({5, cols}, t, 28);
        if (cols > 1) x.select(1, 0).fill_(-kInf);  // a masked key in every row
        x.select(0, 4).fill_(-kInf);                // a fully masked row
        std::string name = fmt::format("{} cols {} log {}", dtype_name(t), cols, log);
        check_primitive(name, {x, zeros({5, cols}, {.dtype = t})}, {1},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.softmax_rows(a[0], a[1], log); });
        Tensor y = log ? log_softmax(sample({5, cols}, t, 29), 1) : softmax(sample({5, cols}, t, 29), 1);
        check_primitive(name + " backward", {y, sample({5, cols}, t, 30), zeros({5, cols}, {.dtype = t})}, {2},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.softmax_rows_backward(a[0], a[1], a[2], log); });
      }
}

TEST_CASE("cuda topk: largest and smallest, ties broken by the smaller index") {
  for (DType t : {DType::f32, DType::f64, DType::i64})
    for (int64_t k : {1, 5, 300})
      for (bool largest : {true, false}) {
        Tensor x = sample({4, 300}, DType::i64, 31).to(t);  // small integers: many ties
        check_primitive(fmt::format("{} k {} largest {}", dtype_name(t), k, largest),
                        {x, zeros({4, k}, {.dtype = t}), zeros({4, k}, {.dtype = DType::i64})}, {1, 2},
                        [&](Backend& b, const std::vector<Tensor>& a) { b.topk(a[0], k, largest, a[1], a[2]); });
      }
}

TEST_CASE("cuda random: the same seed gives the same uniform values (bit for bit) and dropout masks") {
  for (DType t : {DType::f32, DType::f64}) {
    // [0, 1): the Philox words scaled exactly, so bit for bit
    for (Tensor cpu : {zeros({1000, 3}, {.dtype = t}), zeros({30, 20}, {.dtype = t}).t()}) {
      Tensor dev = tensor_on(cpu, kCuda);
      backend_for(Device::cpu()).random_uniform(cpu, 0.0, 1.0, 7, 1234);
      backend_for(kCuda).random_uniform(dev, 0.0, 1.0, 7, 1234);
      check_same(dev, cpu, kExact, fmt::format("uniform [0, 1) {} contiguous {}", dtype_name(t), cpu.is_contiguous()));
    }
    // [a, b): a + (b - a) · u may be one fused multiply-add on the CPU's AVX2 build (the last bit)
    check_primitive(fmt::format("uniform [-2, 3) {}", dtype_name(t)), {zeros({1000, 3}, {.dtype = t})}, {0},
                    [](Backend& b, const std::vector<Tensor>& a) { b.random_uniform(a[0], -2.0, 3.0, 42, 1234); });
    // normal goes through log/cos: equal up to CUDA's last bits
    std::vector<Tensor> cpu{zeros({4097}, {.dtype = t})};
    Tensor dev = zeros({4097}, {.dtype = t, .device = kCuda});
    backend_for(Device::cpu()).random_normal(cpu[0], 1.0, 2.0, 42, 99);
    backend_for(kCuda).random_normal(dev, 1.0, 2.0, 42, 99);
    check_same(dev, cpu[0], t == DType::f32 ? Tolerance{1e-6, 1e-6} : Tolerance{1e-13, 1e-13}, "normal");
  }
  Tensor x = ones({64, 33}, {.dtype = DType::f32});
  manual_seed(5);
  Tensor cpu_mask = dropout(x, 0.3);
  manual_seed(5);
  Tensor dev_mask = dropout(x.to(kCuda), 0.3);
  check_same(dev_mask, cpu_mask, kExact, "dropout mask");
  // the fused mask-and-scale on values, in both precisions, and its backward (the same mask on dy)
  for (DType t : {DType::f32, DType::f64}) {
    Tensor v = randn({37, 29}, {.dtype = t});
    Tensor v_cpu = v.detach().requires_grad_(), v_dev = v.to(kCuda).requires_grad_();
    manual_seed(6);
    Tensor cpu_y = dropout(v_cpu, 0.4);
    manual_seed(6);
    Tensor dev_y = dropout(v_dev, 0.4);
    check_same(dev_y, cpu_y, kExact, fmt::format("dropout values {}", dtype_name(t)));
    Tensor dy = randn({37, 29}, {.dtype = t});
    cpu_y.backward(dy);
    dev_y.backward(dy.to(kCuda));
    check_same(v_dev.grad(), v_cpu.grad(), kExact, fmt::format("dropout gradient {}", dtype_name(t)));
  }
}

// ---- the fused kernels (core/backend.h's optional ones): each kernel directly on CPU and device
// copies of the same inputs, then the ops that use them, forward and backward

// Outputs start as NaN, so a kernel that leaves an element unwritten shows up.
Tensor nan_like(const Shape& shape, DType dtype) { return full(shape, kNaN, {.dtype = dtype}); }

TEST_CASE("cuda fused gru_cell: forward and backward, padded rows, no dy, odd and long rows") {
  REQUIRE(backend_for(kCuda).supports(FusedOp::gru_cell));
  struct Case {
    int64_t B, H;
  };
  for (DType t : {DType::f32, DType::f64})
    for (Case c : {Case{1, 1}, Case{5, 7}, Case{3, 300}, Case{70, 33}})
      for (bool masked : {false, true}) {
        const int64_t B = c.B, H = c.H;
        std::string name = fmt::format("{} B {} H {} masked {}", dtype_name(t), B, H, masked);
        Tensor xp = sample({B, 3 * H}, t, 40), hp = sample({B, 3 * H}, t, 41), h = sample({B, H}, t, 42);
        Tensor valid = masked ? padding_mask(B) : Tensor();  // every third row is padding
        std::vector<Tensor> cpu{xp, hp, h, valid, nan_like({B, H}, t), zeros({B, 4 * H}, {.dtype = t})};
        check_primitive(name, cpu, {4, 5}, [](Backend& b, const std::vector<Tensor>& a) {
          b.gru_cell(a[0], a[1], a[2], a[3], a[4], a[5]);
        });
        Tensor gates = cpu[5];  // the CPU's [r | z | n | hp_n] (zeros on padded rows, never read there)
        for (bool with_dy : {true, false}) {
          Tensor dy = with_dy ? sample({B, H}, t, 43) : Tensor();
          check_primitive(name + (with_dy ? " backward" : " backward without dy"),
                          {gates, h, valid, dy, sample({B, H}, t, 44), nan_like({B, 3 * H}, t),
                           nan_like({B, 3 * H}, t), nan_like({B, H}, t)},
                          {5, 6, 7}, [](Backend& b, const std::vector<Tensor>& a) {
                            b.gru_cell_backward(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
                          });
        }
      }
}

TEST_CASE("cuda fused additive_scores: forward and backward, masked keys, many keys and features, empty") {
  REQUIRE(backend_for(kCuda).supports(FusedOp::additive_scores));
  struct Case {
    int64_t B, Q, K, A;
  };
  for (DType t : {DType::f32, DType::f64})
    for (Case c : {Case{1, 1, 1, 1}, Case{2, 3, 5, 7}, Case{3, 4, 13, 70}, Case{2, 9, 30, 300}, Case{2, 3, 0, 5},
                   Case{2, 0, 4, 5}}) {
      const int64_t B = c.B, Q = c.Q, K = c.K, A = c.A;
      std::string name = fmt::format("{} B {} Q {} K {} A {}", dtype_name(t), B, Q, K, A);
      Tensor qp = sample({B, Q, A}, t, 45), kp = sample({B, K, A}, t, 46), w = sample({A}, t, 47);
      check_primitive(name, {qp, kp, w, nan_like({B, Q, K}, t)}, {3}, [](Backend& b, const std::vector<Tensor>& a) {
        b.additive_scores(a[0], a[1], a[2], a[3]);
      });
      // dscores as after a masked softmax: the last key of every batch row masked (exactly 0), and
      // one query whose every score gradient is 0
      Tensor ds = sample({B, Q, K}, t, 48);
      if (K > 1) ds.narrow(2, K - 1, 1).fill_(0.0);
      if (Q > 1) ds.select(1, 1).fill_(0.0);
      check_primitive(name + " backward",
                      {qp, kp, w, ds, nan_like({B, Q, A}, t), nan_like({B, K, A}, t), nan_like({A}, t)}, {4, 5, 6},
                      [](Backend& b, const std::vector<Tensor>& a) {
                        b.additive_scores_backward(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
                      });
    }
}

TEST_CASE("cuda fused cross_entropy_rows: smoothing, ignore_index, wide rows, large logits, scalar dloss") {
  REQUIRE(backend_for(kCuda).supports(FusedOp::cross_entropy));
  for (DType t : {DType::f32, DType::f64})
    for (int64_t C : {1, 7, 130, 1000})
      for (double eps : {0.0, 0.1})
        for (int64_t ignore_index : {int64_t{-100}, int64_t{0}}) {
          const int64_t N = 6;
          std::string name = fmt::format("{} C {} eps {} ignore {}", dtype_name(t), C, eps, ignore_index);
          Tensor x = sample({N, C}, t, 49);
          x.select(0, 2).add_(full({C}, t == DType::f64 ? 1e4 : 50.0, {.dtype = t}));  // exp overflows without the max
          std::vector<double> ys;
          for (int64_t r = 0; r < N; ++r) ys.push_back(static_cast<double>((r * 5 + 1) % C));
          ys[3] = static_cast<double>(ignore_index);  // ignored
          if (C > 1) ys[4] = 0;                        // ignored where ignore_index is 0, a class otherwise
          Tensor y = from_vector(ys, {N}, {.dtype = DType::i64});
          std::vector<Tensor> cpu{x, y, nan_like({N}, t), nan_like({N}, t)};
          check_primitive(name, cpu, {2, 3}, [&](Backend& b, const std::vector<Tensor>& a) {
            b.cross_entropy_rows(a[0], a[1], eps, ignore_index, a[2], a[3]);
          });
          Tensor lse = cpu[3];
          for (const Tensor& dloss : {sample({N}, t, 50), full({1}, 0.25, {.dtype = t})})
            check_primitive(fmt::format("{} backward, dloss {}", name, dloss.shape()),
                            {x, y, lse, dloss, nan_like({N, C}, t)}, {4},
                            [&](Backend& b, const std::vector<Tensor>& a) {
                              b.cross_entropy_rows_backward(a[0], a[1], a[2], a[3], eps, ignore_index, a[4]);
                            });
        }
}

TEST_CASE("cuda fused layer_norm_rows: with and without weight, wide rows, a large mean, partial gradients") {
  REQUIRE(backend_for(kCuda).supports(FusedOp::layer_norm));
  for (DType t : {DType::f32, DType::f64})
    for (int64_t D : {1, 7, 130, 1000})
      for (bool affine : {true, false}) {
        const int64_t N = 5;
        std::string name = fmt::format("{} D {} affine {}", dtype_name(t), D, affine);
        Tensor x = sample({N, D}, t, 60);
        // a row whose mean is far from 0 (|μ| >> σ), as large as the dtype's rounding of μ + x allows
        // for the two devices' summation orders to agree within the tolerance
        x.select(0, 3).add_(full({D}, t == DType::f64 ? 1e3 : 10.0, {.dtype = t}));
        Tensor w = affine ? sample({D}, t, 61) : Tensor(), b = affine ? sample({D}, t, 62) : Tensor();
        std::vector<Tensor> cpu{x, w, b, nan_like({N, D}, t), nan_like({N}, t), nan_like({N}, t)};
        check_primitive(name, cpu, {3, 4, 5}, [](Backend& be, const std::vector<Tensor>& a) {
          be.layer_norm_rows(a[0], a[1], a[2], 1e-5, a[3], a[4], a[5]);
        });
        const Tensor mean = cpu[4], rstd = cpu[5], dy = sample({N, D}, t, 63);
        for (bool params : {true, false})
          check_primitive(fmt::format("{} backward, parameter gradients {}", name, params),
                          {x, w, mean, rstd, dy, nan_like({N, D}, t), params ? nan_like({D}, t) : Tensor(),
                           params ? nan_like({D}, t) : Tensor()},
                          params && affine ? std::vector<int>{5, 6, 7} : params ? std::vector<int>{5, 7}
                                                                                : std::vector<int>{5},
                          [](Backend& be, const std::vector<Tensor>& a) {
                            be.layer_norm_rows_backward(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
                          });
      }
}

// The ops on both devices: values and the gradients of every input (f32 and f64).
TEST_CASE("cuda fused ops: gru_layer, layer_norm, additive_scores and cross_entropy forward and backward") {
  for (DType t : {DType::f32, DType::f64}) {
    const Tolerance tol = t == DType::f32 ? Tolerance{2e-4, 2e-5} : kF64;
    auto leaf = [&](const Shape& shape, uint64_t seed) { return mul(sample(shape, t, seed), 0.5).requires_grad_(); };
    auto check_op = [&](const std::string& name, const std::vector<Tensor>& cpu_in, auto&& fn) {
      std::vector<Tensor> dev_in;
      for (const Tensor& x : cpu_in) dev_in.push_back(x.defined() ? same_layout_on(x, kCuda) : Tensor());
      Tensor y_cpu = fn(cpu_in), y_dev = fn(dev_in);
      check_same(y_dev, y_cpu, tol, name + " forward");
      Tensor w = sample(y_cpu.shape(), t, 51);
      sum(mul(y_cpu, w)).backward();
      sum(mul(y_dev, w.to(kCuda))).backward();
      for (size_t i = 0; i < cpu_in.size(); ++i) {
        if (!cpu_in[i].defined() || !cpu_in[i].requires_grad()) continue;
        REQUIRE(dev_in[i].grad().defined());
        check_same(dev_in[i].grad(), cpu_in[i].grad(), tol, fmt::format("{} grad {}", name, i));
      }
    };
    // GRU layer, T 4, B 5, H 6, both directions, with padding (valid) and without
    const int64_t T = 4, B = 5, H = 6;
    Tensor valid = tensor({1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 0, 0}, {T, B}, {.dtype = DType::b8});
    for (nn::Direction dir : {nn::Direction::forward, nn::Direction::reverse})
      for (bool masked : {false, true}) {
        std::vector<Tensor> in{leaf({T, B, 3 * H}, 52), leaf({B, H}, 53), leaf({3 * H, H}, 54), leaf({3 * H}, 55),
                               masked ? valid : Tensor()};
        check_op(fmt::format("gru_layer {} reverse {} masked {}", dtype_name(t), dir == nn::Direction::reverse, masked),
                 in, [&](const std::vector<Tensor>& a) { return gru_layer(a[0], a[1], a[2], a[3], a[4], dir); });
      }
    check_op(fmt::format("layer_norm {}", dtype_name(t)), {leaf({2, 3, 6}, 64), leaf({3, 6}, 65), leaf({3, 6}, 66)},
             [](const std::vector<Tensor>& a) { return layer_norm(a[0], {3, 6}, a[1], a[2]); });
    check_op(fmt::format("additive_scores {}", dtype_name(t)),
             {leaf({3, 4, 9}, 56), leaf({3, 7, 9}, 57), leaf({1, 9}, 58)},
             [](const std::vector<Tensor>& a) { return additive_scores(a[0], a[1], a[2]); });
    Tensor targets = tensor({2, 0, 4, 4, 1, 0}, {2, 3}, {.dtype = DType::i64});
    for (nn::Reduction reduction : {nn::Reduction::mean, nn::Reduction::sum, nn::Reduction::none}) {
      std::vector<Tensor> in{leaf({2, 3, 5}, 59), targets};
      check_op(fmt::format("cross_entropy {} reduction {}", dtype_name(t), static_cast<int>(reduction)), in,
               [&](const std::vector<Tensor>& a) {
                 return nn::cross_entropy(a[0], a[1],
                                          {.label_smoothing = 0.1, .ignore_index = 0, .reduction = reduction});
               });
    }
  }
}

TEST_CASE("cuda fused adam_update: the kernel and Adam/AdamW steps match the CPU kernel") {
  REQUIRE(backend_for(kCuda).supports(FusedOp::adam_update));
  struct Case {
    const char* name;
    AdamParams p;
  };
  const Case cases[] = {
      {"adam", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
      {"adam l2", {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}},
      {"adam l2 amsgrad", {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true}},
      {"adamw", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.05,
                 .decoupled_weight_decay = true}},
      {"adamw amsgrad", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.05, .amsgrad = true,
                         .decoupled_weight_decay = true}},
  };
  for (DType t : {DType::f32, DType::f64})
    for (const Case& c : cases) {
      // the kernel itself against the CPU backend's, 3 steps on an odd-sized parameter
      const Shape shape{37, 29};
      Tensor p_cpu = sample(shape, t, 60), p_dev = p_cpu.to(kCuda);
      std::vector<Tensor> st_cpu, st_dev;
      for (int k = 0; k < 3; ++k) {  // exp_avg, exp_avg_sq, max_exp_avg_sq
        st_cpu.push_back(zeros(shape, {.dtype = t}));
        st_dev.push_back(zeros(shape, {.dtype = t, .device = kCuda}));
      }
      for (int64_t step = 1; step <= 3; ++step) {
        Tensor g = sample(shape, t, 60 + static_cast<uint64_t>(step));
        AdamParams p = c.p;
        p.step = step;
        backend_for(Device::cpu()).adam_update(p_cpu, g, st_cpu[0], st_cpu[1], p.amsgrad ? st_cpu[2] : Tensor(), p);
        backend_for(kCuda).adam_update(p_dev, g.to(kCuda), st_dev[0], st_dev[1], p.amsgrad ? st_dev[2] : Tensor(), p);
      }
      std::string name = fmt::format("{} {}", c.name, dtype_name(t));
      const Tolerance tol = t == DType::f32 ? Tolerance{1e-6, 1e-7} : Tolerance{1e-14, 1e-15};
      check_same(p_dev, p_cpu, tol, name + " param");
      for (int k = 0; k < (c.p.amsgrad ? 3 : 2); ++k) check_same(st_dev[k], st_cpu[k], tol, name + " state");

      // the optimizers: each parameter takes its backend's kernel
      Tensor a = sample({5, 3}, t, 70).requires_grad_(), b = sample({3}, t, 71).requires_grad_();
      Tensor a_dev = a.detach().to(kCuda).requires_grad_(), b_dev = b.detach().to(kCuda).requires_grad_();
      std::unique_ptr<optim::Optimizer> opt_cpu, opt_dev;
      if (c.p.decoupled_weight_decay) {
        optim::AdamWOptions o{.lr = c.p.lr, .betas = {c.p.beta1, c.p.beta2}, .eps = c.p.eps,
                              .weight_decay = c.p.weight_decay, .amsgrad = c.p.amsgrad};
        opt_cpu = std::make_unique<optim::AdamW>(std::vector<Tensor>{a, b}, o);
        opt_dev = std::make_unique<optim::AdamW>(std::vector<Tensor>{a_dev, b_dev}, o);
      } else {
        optim::AdamOptions o{.lr = c.p.lr, .betas = {c.p.beta1, c.p.beta2}, .eps = c.p.eps,
                             .weight_decay = c.p.weight_decay, .amsgrad = c.p.amsgrad};
        opt_cpu = std::make_unique<optim::Adam>(std::vector<Tensor>{a, b}, o);
        opt_dev = std::make_unique<optim::Adam>(std::vector<Tensor>{a_dev, b_dev}, o);
      }
      for (int step = 0; step < 3; ++step) {
        Tensor x = sample({2, 5}, t, 72 + static_cast<uint64_t>(step));
        opt_cpu->zero_grad();
        opt_dev->zero_grad();
        sum(tanh(add(matmul(x, a), b))).backward();
        sum(tanh(add(matmul(x.to(kCuda), a_dev), b_dev))).backward();
        opt_cpu->step();
        opt_dev->step();
      }
      const Tolerance model_tol = t == DType::f32 ? kF32 : kF64;
      check_same(a_dev.detach(), a.detach(), model_tol, name + " optimizer a");
      check_same(b_dev.detach(), b.detach(), model_tol, name + " optimizer b");
    }
}

TEST_CASE("cuda fused kernels: bad operands are errors naming the kernel, the shapes and the device") {
  Backend& be = backend_for(kCuda);
  Tensor h = zeros({2, 3}, {.device = kCuda}), xp = zeros({2, 9}, {.device = kCuda});
  CHECK_THROWS_WITH_AS(be.gru_cell(xp, zeros({2, 8}, {.device = kCuda}), h, Tensor(), zeros({2, 3}, {.device = kCuda}),
                                   zeros({2, 12}, {.device = kCuda})),
                       doctest::Contains("gru_cell: expected xp, hp (B, 3H), h_next (B, H) and gates (B, 4H) for h (B, H) "
                                         "= (2, 3); got xp (2, 9), hp (2, 8)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(be.gru_cell(xp, zeros({2, 9}), h, Tensor(), zeros({2, 3}, {.device = kCuda}),
                                   zeros({2, 12}, {.device = kCuda})),
                       "gru_cell: hp (2, 9) is on cpu, not on a CUDA device", DeviceError);
  CHECK_THROWS_WITH_AS(be.gru_cell(xp, xp, h, ones({3}, {.dtype = DType::b8, .device = kCuda}),
                                   zeros({2, 3}, {.device = kCuda}), zeros({2, 12}, {.device = kCuda})),
                       doctest::Contains("gru_cell: keep must be a dense bool (B,) = (2,), got bool (3,) on cuda:0"),
                       ShapeError);
  Tensor qp = zeros({2, 3, 4}, {.device = kCuda}), kp = zeros({2, 5, 4}, {.device = kCuda});
  CHECK_THROWS_WITH_AS(be.additive_scores(qp, kp, zeros({4}, {.dtype = DType::f64, .device = kCuda}),
                                          zeros({2, 3, 5}, {.device = kCuda})),
                       doctest::Contains("additive_scores: qp and w must have one floating dtype"), DTypeError);
  CHECK_THROWS_WITH_AS(be.additive_scores(qp, zeros({2, 5, 3}, {.device = kCuda}), zeros({4}, {.device = kCuda}),
                                          zeros({2, 3, 5}, {.device = kCuda})),
                       doctest::Contains("additive_scores: expected qp (B, Q, A), kp (B, K, A) and w (A,); got (2, 3, 4), "
                                         "(2, 5, 3), (4,) on cuda:0"),
                       ShapeError);
  Tensor kp_strided = kp.transpose(1, 2).contiguous().transpose(1, 2);
  CHECK_THROWS_WITH_AS(be.additive_scores(qp, kp_strided, zeros({4}, {.device = kCuda}), zeros({2, 3, 5}, {.device = kCuda})),
                       doctest::Contains("additive_scores: kp (2, 5, 4)"), Error);
  Tensor logits = zeros({4, 5}, {.device = kCuda}), rows = zeros({4}, {.device = kCuda});
  CHECK_THROWS_WITH_AS(be.cross_entropy_rows(logits, zeros({4}, {.dtype = DType::i64}), 0.0, -100, rows, rows),
                       "cross_entropy: targets (4,) are on cpu but logits (4, 5) on cuda:0", DeviceError);
  Tensor short_targets = zeros({3}, {.dtype = DType::i64, .device = kCuda});
  CHECK_THROWS_WITH_AS(be.cross_entropy_rows(logits, short_targets, 0.0, -100, rows, rows),
                       "cross_entropy: expected logits (N, C) and targets (N,); got (4, 5) and (3,) on cuda:0",
                       ShapeError);
  Tensor p = zeros({3}, {.device = kCuda});
  CHECK_THROWS_WITH_AS(be.adam_update(p, zeros({4}, {.device = kCuda}), zeros({3}, {.device = kCuda}),
                                      zeros({3}, {.device = kCuda}), Tensor(), {.lr = 1e-3}),
                       "adam_update: grad (4,), exp_avg (3,), exp_avg_sq (3,) must be shaped like the parameter (3,) "
                       "on cuda:0", ShapeError);
  CHECK_THROWS_WITH_AS(be.adam_update(p, p, p, p, Tensor(), {.lr = 1e-3, .amsgrad = true}),
                       "adam_update: max_exp_avg_sq is an undefined tensor", Error);
  // the CPU backend, the oracle, has the kernel too
  CHECK(backend_for(Device::cpu()).supports(FusedOp::adam_update));
}

// ---- every op-table row, forward and backward, in float64

TEST_CASE("cuda op table: every row's output and input gradients match the CPU") {
  for (const oc::OpCase& row : oc::op_cases()) {
    SUBCASE(row.name().c_str()) {
      std::vector<Tensor> cpu_in = oc::make_inputs(row), dev_in;
      for (const Tensor& t : cpu_in) dev_in.push_back(same_layout_on(t, kCuda));
      manual_seed(1234);
      Tensor y_cpu = row.fn(cpu_in);
      manual_seed(1234);
      Tensor y_dev = row.fn(dev_in);
      check_same(y_dev, y_cpu, tolerance_for(y_cpu.dtype()), "forward");
      if (!y_cpu.requires_grad()) continue;
      Tensor w = sample(y_cpu.shape(), y_cpu.dtype(), 35);
      sum(mul(y_cpu, w)).backward();
      sum(mul(y_dev, w.to(kCuda))).backward();
      for (size_t i = 0; i < cpu_in.size(); ++i) {
        if (!cpu_in[i].requires_grad() || !cpu_in[i].grad().defined()) continue;
        REQUIRE(dev_in[i].grad().defined());
        check_same(dev_in[i].grad(), cpu_in[i].grad(), tolerance_for(cpu_in[i].dtype()), fmt::format("grad {}", i));
      }
    }
  }
}

// ---- devices, errors, memory

TEST_CASE("cuda devices: to/cpu/item round trips, mixed-device errors, out of memory") {
  Tensor x = sample({3, 4}, DType::f64, 36);
  Tensor d = x.to(kCuda);
  CHECK(d.device() == kCuda);
  CHECK(d.cpu().to_vector<double>() == x.to_vector<double>());
  CHECK(d.select(0, 2).select(0, 3).item() == x.select(0, 2).select(0, 3).item());
  CHECK(to_string(d).find("device=cuda:0") != std::string::npos);
  CHECK_THROWS_WITH_AS(add(x, d), "add: operands on different devices: (3, 4) on cpu, (3, 4) on cuda:0", DeviceError);
  CHECK_THROWS_WITH_AS(index_select(d, 0, tensor({0}, {.dtype = DType::i64})),
                       doctest::Contains("index_select: index (1,) is on cpu"), DeviceError);
  CHECK_THROWS_WITH_AS(embedding(d, tensor({7}, {.dtype = DType::i64}).to(kCuda)),
                       doctest::Contains("embedding: id 7 is out of range for a table of 3 rows"), IndexError);
  int count = cuda_device_count();
  CHECK_THROWS_WITH_AS(zeros({1}, {.device = Device::cuda(count)}),
                       doctest::Contains(fmt::format("storage: cuda:{} is not available", count).c_str()), DeviceError);
  // 2^45 floats (128 TiB): more than any device has
  CHECK_THROWS_WITH_AS(empty({int64_t{1} << 45}, {.device = kCuda}), doctest::Contains("out of memory allocating"),
                       DeviceError);
  // copies and state across devices: copy_, load_state_dict of a CPU state, saving device tensors
  Tensor host = zeros({3, 4}, {.dtype = DType::f64});
  host.copy_(d);
  CHECK(host.to_vector<double>() == x.to_vector<double>());
  manual_seed(2);
  nn::Linear cpu_layer({.in_features = 3, .out_features = 2});
  nn::Linear dev_layer({.in_features = 3, .out_features = 2});
  dev_layer.to(kCuda);
  dev_layer.load_state_dict(cpu_layer.state_dict());
  for (const auto& [name, p] : dev_layer.named_parameters()) check_same(p, cpu_layer.state_dict().at(name), kExact, name);
  std::string path = "test_cuda_parity_state.safetensors";
  save_tensors(path, {{"weight", dev_layer.parameters()[0]}});
  check_same(load_tensors(path).tensors.at("weight").to(kCuda), cpu_layer.parameters()[0], kExact, "saved from cuda");
  std::remove(path.c_str());

  Tensor after = ones({1000}, {.device = kCuda});  // the device is still usable
  CHECK(sum(after).item() == 1000.0);
  // freed memory is reused: a loop of same-sized temporaries does not grow
  for (int i = 0; i < 100; ++i) after = add(after, 1.0);
  CHECK(after.select(0, 0).item() == 101.0);
}

// ---- a model: what seqgrad train does on a device

TEST_CASE("cuda model: embedding + GRU + additive attention + cross-entropy + Adam, 3 steps on both devices") {
  struct Model {
    nn::Embedding embed{{.num_embeddings = 20, .embedding_dim = 8}};
    nn::GRU gru{{.input_size = 8, .hidden_size = 16, .num_layers = 2, .bidirectional = true, .dropout = 0.1}};
    nn::AdditiveAttention attention{{.query_size = 32, .key_size = 32, .hidden_size = 12}};
    nn::Linear out{{.in_features = 32, .out_features = 20}};
    std::vector<nn::Module*> modules() { return {&embed, &gru, &attention, &out}; }
    std::vector<Tensor> parameters() {
      std::vector<Tensor> all;
      for (nn::Module* m : modules())
        for (const Tensor& p : m->parameters()) all.push_back(p);
      return all;
    }
    Tensor loss(const Tensor& ids, const Tensor& lengths, const Tensor& targets) {
      auto [states, h] = gru(embed(ids), {.lengths = lengths});        // (B, T, 2H)
      Tensor context = attention(states, states, states, lengths);     // (B, T, 2H)
      return nn::cross_entropy(out(context), targets, {.label_smoothing = 0.1, .ignore_index = 0});
    }
  };
  manual_seed(1);
  Model cpu_model;
  manual_seed(1);
  Model dev_model;  // the same initial values
  for (nn::Module* m : dev_model.modules()) m->to(kCuda);
  optim::Adam cpu_opt(cpu_model.parameters(), {.lr = 1e-2}), dev_opt(dev_model.parameters(), {.lr = 1e-2});
  Tensor ids = tensor({3, 4, 5, 6, 0, 7, 8, 9, 0, 0}, {2, 5}, {.dtype = DType::i64});
  Tensor lengths = tensor({4, 3}, {.dtype = DType::i64});
  Tensor targets = tensor({4, 5, 6, 7, 0, 8, 9, 10, 0, 0}, {2, 5}, {.dtype = DType::i64});
  Tensor ids_d = ids.to(kCuda), lengths_d = lengths.to(kCuda), targets_d = targets.to(kCuda);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    manual_seed(100 + step);  // the same dropout masks
    Tensor cpu_loss = cpu_model.loss(ids, lengths, targets);
    manual_seed(100 + step);
    Tensor dev_loss = dev_model.loss(ids_d, lengths_d, targets_d);
    check_same(dev_loss, cpu_loss, kF32, "loss");
    cpu_opt.zero_grad();
    dev_opt.zero_grad();
    cpu_loss.backward();
    dev_loss.backward();
    optim::clip_grad_norm_(cpu_model.parameters(), 1.0);
    optim::clip_grad_norm_(dev_model.parameters(), 1.0);
    cpu_opt.step();
    dev_opt.step();
  }
  std::vector<Tensor> cpu_params = cpu_model.parameters(), dev_params = dev_model.parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) check_same(dev_params[i], cpu_params[i], {1e-3, 1e-4}, "parameter");
}

TEST_CASE("cuda GradScaler: inf gradients on the device skip the step") {
  Tensor p = ones({3}, {.device = kCuda}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 4.0});
  p.set_grad(tensor({4.0, kInf, 4.0}).to(kCuda));
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);
  p.set_grad(tensor({2.0, 2.0, 2.0}).to(kCuda));
  CHECK(scaler.step(opt));
  for (float v : p.cpu().to_vector<float>()) CHECK(v == doctest::Approx(0.9).epsilon(1e-6));
}

TEST_CASE("cuda int8: quantized inference is refused by name (int8 runs on the CPU)") {
  QuantizedWeight w = quantize_weight(tensor({0.5, -1.0, 0.25, 2.0, -0.5, 0.0}, {2, 3}), QScheme::per_channel,
                                      "decoder.out", Int8Use::rows);
  CHECK_FALSE(backend_for(kCuda).supports(FusedOp::int8_gemm));
  CHECK_THROWS_WITH_AS(quantized_linear(zeros({4, 3}).to(kCuda), w, Tensor()),
                       doctest::Contains("quantized_linear (decoder.out): op int8_gemm is not implemented on cuda"),
                       DeviceError);
  CHECK_THROWS_WITH_AS(quantized_embedding(tensor({1}).to(DType::i64).to(kCuda), w),
                       doctest::Contains("the int8 table is on the CPU"), DeviceError);
}

int main(int argc, char** argv) {
  if (!cuda_is_available()) {
    DeviceMemory* memory = device_memory(Device::Kind::cuda);
    std::printf("test_cuda_parity: SKIPPED: %s\n",
                memory ? memory->unavailable_reason() : "this seqgrad build has no CUDA backend");
    return 77;  // meson: skipped
  }
  doctest::Context context(argc, argv);
  return context.run();
}
