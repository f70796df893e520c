// Tensor basics: dtypes, factories, views sharing storage, strides, contiguity, broadcasting,
// values (item, to_vector, to(dtype)), in-place ops, printing with elision, and the seeded RNG.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "core/threads.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {
constexpr TensorOptions kF64 = {.dtype = DType::f64};

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double variance_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}
}  // namespace

TEST_CASE("dtypes: sizes, names, and factories in every dtype") {
  CHECK(element_size(DType::f32) == 4);
  CHECK(element_size(DType::f64) == 8);
  CHECK(element_size(DType::i64) == 8);
  CHECK(element_size(DType::b8) == 1);
  CHECK(std::string(dtype_name(DType::b8)) == "bool");
  CHECK(is_floating(DType::f64));
  CHECK_FALSE(is_floating(DType::i64));
  for (DType t : {DType::f32, DType::f64, DType::i64, DType::b8}) {
    CAPTURE(dtype_name(t));
    Tensor z = zeros({2, 3}, {.dtype = t});
    CHECK(z.dtype() == t);
    CHECK(z.shape() == Shape{2, 3});
    CHECK(z.numel() == 6);
    CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
    CHECK(ones({2}, {.dtype = t}).to_vector<double>() == std::vector<double>{1, 1});
  }
  CHECK(full({2}, 2.5, kF64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(full({2}, 2.7, {.dtype = DType::i64}).to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  CHECK_THROWS_WITH_AS(zeros({2}).data<double>(), doctest::Contains("data<float64>: tensor has dtype float32"),
                       DTypeError);
}

TEST_CASE("factories: arange, scalar_tensor, tensor, from_vector, *_like") {
  Tensor a = arange(0, 5);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25, kF64).to_vector<double>() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(arange(5, 0, -2).to_vector<int64_t>() == std::vector<int64_t>{5, 3, 1});
  CHECK_THROWS_WITH_AS(arange(0, 1, 0), doctest::Contains("arange: step must be non-zero"), ValueError);
  Tensor s = scalar_tensor(3.5, kF64);
  CHECK(s.ndim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.dtype() == DType::f32);
  CHECK(t.size(-1) == 3);
  CHECK(t.size(0) == 2);
  CHECK_THROWS_WITH_AS(t.size(2), doctest::Contains("size: dimension 2 out of range for a tensor of 2 dimensions"),
                       IndexError);
  CHECK(from_vector(std::vector<int64_t>{7, 8}, {2}, {.dtype = DType::i64}).to_vector<int64_t>() ==
        std::vector<int64_t>{7, 8});
  CHECK_THROWS_WITH_AS(tensor({1, 2, 3}, {2, 2}), doctest::Contains("from_vector: 3 values cannot fill shape (2, 2)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(empty({2, -1}), doctest::Contains("empty: negative dimension in shape (2, -1)"), ShapeError);
  CHECK(zeros_like(t).shape() == t.shape());
  CHECK(ones_like(t).to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(full_like(t, 4).to_vector<float>() == std::vector<float>(6, 4.0f));
  CHECK(zeros({0, 3}).numel() == 0);
  CHECK(zeros({0, 3}).to_vector<float>().empty());
  // only floating tensors can require grad
  CHECK_THROWS_WITH_AS(zeros({2}, {.dtype = DType::i64}).requires_grad_(),
                       doctest::Contains("requires_grad_: only floating tensors can require gradients, got int64"),
                       DTypeError);
  CHECK_THROWS_AS(zeros({2}, {.dtype = DType::i64, .requires_grad = true}), DTypeError);
}

TEST_CASE("shapes: formatting, strides, broadcasting") {
  CHECK(fmt::format("{}", Shape{2, 3}) == "(2, 3)");
  CHECK(fmt::format("{}", Shape{3}) == "(3,)");
  CHECK(fmt::format("{}", Shape{}) == "()");
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{2, 0}.numel() == 0);
  CHECK(contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  Shape s{2, 4};
  s.insert(1, 3);
  CHECK(s == Shape{2, 3, 4});
  s.erase(0);
  CHECK(s == Shape{3, 4});
  CHECK(broadcast_shapes({2, 1, 3}, {4, 1}, "add") == Shape{2, 4, 3});
  CHECK(broadcast_shapes({}, {5}, "add") == Shape{5});
  CHECK(broadcast_shapes({0, 1}, {1, 3}, "add") == Shape{0, 3});
  CHECK_THROWS_WITH_AS(broadcast_shapes({2, 3}, {3, 2}, "mul"),
                       "mul: shapes (2, 3) and (3, 2) cannot be broadcast together (dimension 0: 2 vs 3)", ShapeError);
  CHECK(wrap_dim(-1, 3, "op") == 2);
  CHECK_THROWS_WITH_AS(wrap_dim(3, 3, "op"), "op: dimension 3 out of range for a tensor of 3 dimensions", IndexError);
}

TEST_CASE("views share storage and its version counter; strides describe them") {
  Tensor x = arange(0, 12, 1, kF64).reshape({3, 4});
  CHECK(x.is_contiguous());
  CHECK(x.strides() == Shape{4, 1});

  Tensor t = x.t();
  CHECK(t.shape() == Shape{4, 3});
  CHECK(t.strides() == Shape{1, 4});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});  // logical order

  Tensor s = x.slice(1, 0, 4, 2);  // columns 0 and 2
  CHECK(s.shape() == Shape{3, 2});
  CHECK(s.strides() == Shape{4, 2});
  CHECK(s.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
  Tensor row = x.select(0, 1);
  CHECK(row.offset() == 4);
  CHECK(row.to_vector<double>() == std::vector<double>{4, 5, 6, 7});
  Tensor e = x.select(0, 0).unsqueeze(0).expand({5, 4});
  CHECK(e.strides() == Shape{0, 1});
  Tensor u = x.unsqueeze(1);
  CHECK(u.shape() == Shape{3, 1, 4});
  CHECK(u.is_contiguous());

  // a write through any view is visible in the others, and bumps the shared version counter
  uint32_t v0 = x.version();
  row.fill_(-1);
  CHECK(x.version() == v0 + 1);
  CHECK(t.version() == v0 + 1);
  CHECK(x.to_vector<double>()[4] == -1);
  CHECK(t.to_vector<double>()[1] == -1);  // t[0][1] = x[1][0]
  s.mul_(10.0);
  CHECK(x.to_vector<double>()[2] == 20);
  CHECK(x.impl()->storage == t.impl()->storage);
  CHECK(x.detach().impl()->storage == x.impl()->storage);
}

TEST_CASE("contiguous, clone, reshape and view: copies only when needed") {
  Tensor x = arange(0, 6, 1, kF64).reshape({2, 3});
  CHECK(x.contiguous().impl() == x.impl());  // already contiguous: the same tensor
  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.impl()->storage != x.impl()->storage);
  CHECK(c.to_vector<double>() == t.to_vector<double>());
  Tensor k = x.clone();
  CHECK(k.impl()->storage != x.impl()->storage);
  k.fill_(7);
  CHECK(x.to_vector<double>()[0] == 0);
  CHECK(x.view({3, 2}).impl()->storage == x.impl()->storage);  // contiguous: a view
  CHECK(t.reshape({6}).impl()->storage != x.impl()->storage);  // transposed: a copy
  CHECK(t.reshape({6}).to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(x.view({-1}).shape() == Shape{6});
  CHECK(x.flatten().shape() == Shape{6});
  CHECK(zeros({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK_THROWS_AS(t.view({6}), ShapeError);
}

TEST_CASE("values: item, to_vector and to(dtype)") {
  Tensor x = tensor({1.5, -2.25, 3}, kF64);
  CHECK(x.select(0, 1).item() == -2.25);
  CHECK(tensor({4}, kF64).item() == 4);
  CHECK_THROWS_WITH_AS(x.item(), doctest::Contains("item: only one-element tensors can be converted to a number, got shape (3,)"),
                       ShapeError);
  CHECK(x.to_vector<int>() == std::vector<int>{1, -2, 3});
  Tensor f = x.to(DType::f32);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.0f});
  CHECK(x.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3});  // truncation toward zero
  CHECK(x.to(DType::b8).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(x.to(DType::f64).impl() == x.impl());  // same dtype: no copy
  CHECK(tensor({0.1}).to(DType::f64).item() == static_cast<double>(0.1f));
  CHECK(x.to(Device::cpu()).impl() == x.impl());
}

TEST_CASE("in-place ops without autograd: values, broadcasting and dtype conversion") {
  Tensor x = zeros({2, 3}, kF64);
  x.fill_(2);
  x.add_(tensor({1, 2, 3}, kF64), 0.5);  // broadcast row, scaled by alpha
  CHECK(x.to_vector<double>() == std::vector<double>{2.5, 3, 3.5, 2.5, 3, 3.5});
  x.mul_(2.0);
  x.mul_(tensor({1, -1}, {2, 1}, kF64));
  CHECK(x.to_vector<double>() == std::vector<double>{5, 6, 7, -5, -6, -7});
  x.clamp_(-5.5, 6.5);
  CHECK(x.to_vector<double>() == std::vector<double>{5, 6, 6.5, -5, -5.5, -5.5});
  x.masked_fill_(tensor({1, 0, 0}, {.dtype = DType::b8}), 0);
  CHECK(x.to_vector<double>() == std::vector<double>{0, 6, 6.5, 0, -5.5, -5.5});
  x.copy_(tensor({1, 2, 3}));  // float32 source, broadcast
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  x.zero_();
  CHECK(x.to_vector<double>() == std::vector<double>(6, 0.0));
  uint32_t v = x.version();
  x.uniform_(-1, 1);
  CHECK(x.version() == v + 1);
  for (double e : x.to_vector<double>()) CHECK((e >= -1 && e < 1));
}

TEST_CASE("printing: values, shape and dtype, eliding long dimensions") {
  CHECK(to_string(tensor({1, 2, 3, 4}, {2, 2})) == "tensor([[1, 2], [3, 4]], shape=(2, 2), dtype=float32)");
  CHECK(to_string(tensor({0.5}, kF64)) == "tensor([0.5], shape=(1,), dtype=float64)");
  CHECK(to_string(scalar_tensor(2.5)) == "tensor(2.5, shape=(), dtype=float32)");
  CHECK(to_string(arange(0, 10)) == "tensor([0, 1, 2, ..., 7, 8, 9], shape=(10,), dtype=int64)");
  CHECK(to_string(arange(0, 7)) == "tensor([0, 1, 2, 3, 4, 5, 6], shape=(7,), dtype=int64)");
  CHECK(to_string(tensor({1, 0}, {.dtype = DType::b8})) == "tensor([true, false], shape=(2,), dtype=bool)");
  CHECK(to_string(zeros({2}, {.requires_grad = true})) == "tensor([0, 0], shape=(2,), dtype=float32, requires_grad=true)");
  CHECK(to_string(Tensor()) == "tensor(undefined)");
  // long rows and long columns are both elided
  std::string big = to_string(arange(0, 100, 1, kF64).reshape({10, 10}));
  CHECK(big.find("tensor([[0, 1, 2, ..., 7, 8, 9], [10, 11, 12, ..., 17, 18, 19], [20, 21, 22, ..., 27, 28, 29], ..., "
                 "[70, 71, 72, ..., 77, 78, 79]") == 0);
  CHECK(big.find("shape=(10, 10), dtype=float64)") != std::string::npos);
  CHECK(fmt::format("{}", tensor({1.25})) == "tensor([1.25], shape=(1,), dtype=float32)");
  CHECK(to_string(tensor({1, 2, 3, 4}, {2, 2}).t()) == "tensor([[1, 3], [2, 4]], shape=(2, 2), dtype=float32)");
}

TEST_CASE("seeded RNG: same seed, same numbers; sane distributions") {
  manual_seed(123);
  Tensor a = rand({1000});
  Tensor n1 = randn({5}, kF64);
  manual_seed(123);
  Tensor b = rand({1000});
  Tensor n2 = randn({5}, kF64);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(n1.to_vector<double>() == n2.to_vector<double>());
  CHECK(rand({1000}).to_vector<float>() != a.to_vector<float>());  // the stream moved on
  manual_seed(124);
  CHECK(rand({1000}).to_vector<float>() != a.to_vector<float>());  // another seed

  manual_seed(1);
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    std::vector<double> u = rand({200000}, {.dtype = t}).to_vector<double>();
    for (double e : {*std::min_element(u.begin(), u.end()), *std::max_element(u.begin(), u.end())})
      CHECK((e >= 0 && e < 1));
    // uniform [0, 1): mean 1/2, variance 1/12; standard errors ~6e-4 and ~2e-4
    CHECK(mean_of(u) == doctest::Approx(0.5).epsilon(0.01));
    CHECK(variance_of(u) == doctest::Approx(1.0 / 12).epsilon(0.02));
    std::vector<double> g = randn({200000}, {.dtype = t}).to_vector<double>();
    CHECK(std::abs(mean_of(g)) < 0.01);
    CHECK(variance_of(g) == doctest::Approx(1.0).epsilon(0.02));
  }
  Tensor x = empty({100000}, kF64);
  x.normal_(3.0, 0.5);
  std::vector<double> v = x.to_vector<double>();
  CHECK(mean_of(v) == doctest::Approx(3.0).epsilon(0.005));
  CHECK(std::sqrt(variance_of(v)) == doctest::Approx(0.5).epsilon(0.02));
}

TEST_CASE("Philox-4x32-10 matches the Random123 known-answer vector for counter 0, key 0") {
  Philox4 r = philox(0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
}

// The CPU kernels draw a block of counters at a time and lay the values out in stream order; a
// value out of place, a block boundary or a thread's share starting at the wrong counter shows here
// (sizes around the 64-value block, both dtypes, one and two threads).
TEST_CASE("rand and dropout draw element i as uniform_at(seed, offset, i), at any size and thread count") {
  const int threads_before = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t n : {1, 3, 63, 64, 65, 1000, 40003}) {
      for (DType dtype : {DType::f32, DType::f64}) {
        INFO("threads ", threads, ", n ", n, ", ", dtype_name(dtype));
        const uint64_t seed = 7, offset = 1001;
        // dropout's threshold and factor in the dtype's precision, as the kernel compares and scales
        const double p_keep = 1.0 - 0.3;
        const double keep = dtype == DType::f32 ? static_cast<float>(p_keep) : p_keep;
        const double scale = dtype == DType::f32 ? static_cast<float>(1.0 / p_keep) : 1.0 / p_keep;
        default_generator().manual_seed(seed);
        default_generator().set_offset(offset);
        std::vector<double> u = rand({n}, {.dtype = dtype}).to_vector<double>();
        default_generator().set_offset(offset);
        std::vector<double> d = dropout(ones({n}, {.dtype = dtype}), 0.3).to_vector<double>();
        int64_t wrong_u = 0, wrong_d = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double want = dtype == DType::f32 ? uniform_at_as<float>(seed, offset, i) : uniform_at_as<double>(seed, offset, i);
          wrong_u += u[i] != want;
          wrong_d += d[i] != (want < keep ? scale : 0.0);
        }
        CHECK(wrong_u == 0);
        CHECK(wrong_d == 0);
      }
    }
  }
  set_num_threads(threads_before);
}

// ---- undefined tensors (issue 14 item 1): every accessor throws an Error naming itself and where
// the tensor came from; nothing dereferences a null TensorImpl.

TEST_CASE("undefined tensor: every accessor of a default-constructed Tensor throws, naming the accessor") {
  const Tensor t;
  CHECK_FALSE(t.defined());
  CHECK(t.why_undefined() == "a default-constructed Tensor holds no data");
  const std::string why = "undefined tensor (a default-constructed Tensor holds no data); test with defined()";
  CHECK_THROWS_WITH_AS(t.shape(), ("shape: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.strides(), ("strides: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.ndim(), ("ndim: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.size(0), ("size: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.numel(), ("numel: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.dtype(), ("dtype: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.device(), ("device: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.offset(), ("offset: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.is_contiguous(), ("is_contiguous: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.version(), ("version: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.bump_version(), ("bump_version: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.data<float>(), ("data: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.raw_data(), ("raw_data: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.item(), ("item: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.to_vector<double>(), ("to_vector: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.requires_grad(), ("requires_grad: " + why).c_str(), Error);
  Tensor mutable_t;
  CHECK_THROWS_WITH_AS(mutable_t.requires_grad_(), ("requires_grad_: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.is_leaf(), ("is_leaf: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.grad_fn(), ("grad_fn: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.grad(), ("grad: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.set_grad(ones({1})), ("set_grad: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.zero_grad(), ("zero_grad: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.detach(), ("detach: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.set_data(ones({1})), ("set_data: " + why).c_str(), Error);
  CHECK_THROWS_WITH_AS(t.backward(), doctest::Contains("backward: called on an undefined tensor"), Error);
}

TEST_CASE("undefined tensor: ops, operators and member shortcuts taking one throw instead of crashing") {
  const Tensor t, x = ones({2});
  const auto undefined = doctest::Contains("undefined tensor (a default-constructed Tensor holds no data");
  CHECK_THROWS_WITH_AS(t + x, undefined, Error);
  CHECK_THROWS_WITH_AS(x * t, undefined, Error);
  CHECK_THROWS_WITH_AS(-t, undefined, Error);
  CHECK_THROWS_WITH_AS(t.sum(), undefined, Error);
  CHECK_THROWS_WITH_AS(t.exp(), undefined, Error);
  CHECK_THROWS_WITH_AS(t.view({2}), undefined, Error);
  CHECK_THROWS_WITH_AS(t.to(DType::f64), undefined, Error);
  CHECK_THROWS_WITH_AS(t.clone(), undefined, Error);
  CHECK_THROWS_WITH_AS(t.contiguous(), undefined, Error);
  CHECK_THROWS_WITH_AS(matmul(t, x), undefined, Error);
  CHECK_THROWS_WITH_AS(softmax(t, 0), undefined, Error);
  CHECK_THROWS_WITH_AS(cat({x, t}, 0), undefined, Error);
  CHECK_THROWS_WITH_AS(zeros_like(t), undefined, Error);
  CHECK(to_string(t) == "tensor(undefined)");  // printing an undefined tensor is fine
}

TEST_CASE("undefined tensor: grad() is undefined before backward and after zero_grad, as in PyTorch") {
  Tensor p = randn({2}).requires_grad_();
  CHECK_FALSE(p.grad().defined());  // PyTorch: p.grad is None before the first backward
  CHECK_THROWS_WITH_AS(p.grad().numel(), doctest::Contains("numel: undefined tensor (it is grad() of a tensor that "
                                                           "has none: grad() is undefined until backward() reaches "
                                                           "the tensor, and again after zero_grad(); call backward() "
                                                           "first); test with defined()"), Error);
  // An op on it names the op and says the same.
  CHECK_THROWS_WITH_AS(p.grad().clone(), doctest::Contains("clone: input is an undefined tensor (it is grad() of a "
                                                           "tensor that has none"), Error);
  (p * p).sum().backward();
  REQUIRE(p.grad().defined());
  CHECK(p.grad().numel() == 2);
  p.zero_grad();  // set_to_none, as PyTorch's default
  CHECK_FALSE(p.grad().defined());
  CHECK_THROWS_WITH_AS(p.grad().item(), doctest::Contains("item: undefined tensor (it is grad() of a tensor that "
                                                          "has none"), Error);

  Tensor plain = randn({2});  // never required grad
  CHECK_THROWS_WITH_AS(plain.grad().shape(), doctest::Contains("shape: undefined tensor (it is grad() of a tensor "
                                                               "that does not require grad: call requires_grad_()"),
                       Error);
  Tensor hidden = p * 2.0;  // a non-leaf keeps no .grad
  (hidden * hidden).sum().backward();
  CHECK_THROWS_WITH_AS(hidden.grad().dtype(), doctest::Contains("dtype: undefined tensor (it is grad() of a non-leaf "
                                                                "tensor: only leaves keep .grad"), Error);
}

TEST_CASE("set_data: a leaf takes new data and keeps its identity, requires_grad and grad") {
  Tensor p = tensor({1, 2, 3}).requires_grad_();
  (p * p).sum().backward();
  Tensor handle = p;  // e.g. what an optimizer holds
  p.set_data(tensor({4, 5}, {.dtype = DType::f64}));
  CHECK(handle.dtype() == DType::f64);
  CHECK(handle.shape() == Shape{2});
  CHECK(handle.to_vector<double>() == std::vector<double>{4, 5});
  CHECK(handle.requires_grad());
  CHECK(handle.grad().to_vector<double>() == std::vector<double>{2, 4, 6});  // kept as it was

  // A backward that saved the old data refuses to run on the new.
  Tensor w = tensor({1, 2}).requires_grad_();
  Tensor y = (w * w).sum();
  w.set_data(tensor({3, 4}));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified by an in-place operation"), Error);

  Tensor non_leaf = w * 2.0;
  CHECK_THROWS_WITH_AS(non_leaf.set_data(ones({2})), doctest::Contains("set_data: only leaf tensors can take new "
                                                                       "data; this (2,) tensor was computed by mul"),
                       Error);
  CHECK_THROWS_WITH_AS(w.set_data(ones({2}, {.dtype = DType::i64})),
                       doctest::Contains("set_data: a tensor that requires grad needs floating data"), DTypeError);
  CHECK_THROWS_WITH_AS(w.set_data(Tensor()), doctest::Contains("set_data: the source is an undefined tensor"), Error);
}
