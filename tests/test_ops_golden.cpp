// Golden values small enough to derive by hand (each derivation is in a comment), and the
// fused-vs-composed twins: each fused kernel must agree with the composition it replaces.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr TensorOptions kF64 = {.dtype = DType::f64};

Tensor f64(std::initializer_list<double> v, Shape shape) { return tensor(v, shape, kF64); }
Tensor f64(std::initializer_list<double> v) { return tensor(v, kF64); }

void check_same_values(const Tensor& a, const Tensor& b, double tol = 1e-12) { check_values(a, b.to_vector<double>(), tol); }

}  // namespace

TEST_CASE("softmax of [0, ln 2] is [1/3, 2/3]") {
  // exp(0) = 1 and exp(ln 2) = 2, so the normaliser is 3: [1/3, 2/3]. log_softmax = [-ln 3, ln 2 - ln 3].
  Tensor x = f64({0, std::log(2.0)});
  check_values(softmax(x, 0), {1.0 / 3, 2.0 / 3});
  check_values(log_softmax(x, 0), {-std::log(3.0), std::log(2.0) - std::log(3.0)});
  // Shifting every logit by 1000 changes nothing (max-subtraction keeps exp finite).
  check_values(softmax(add(x, 1000.0), 0), {1.0 / 3, 2.0 / 3});
  // A -inf logit gets probability 0: softmax([0, -inf]) = [1, 0].
  check_values(softmax(f64({0, -kInf}), 0), {1, 0});
}

TEST_CASE("softmax gradient by hand") {
  // y = softmax([0, ln 2]) = [1/3, 2/3]; loss = y0, so dy = [1, 0] and
  // dx = y * (dy - Σ dy y) = [1/3 (1 - 1/3), 2/3 (0 - 1/3)] = [2/9, -2/9].
  Tensor x = f64({0, std::log(2.0)}).requires_grad_();
  softmax(x, 0).select(0, 0).backward();
  check_values(x.grad(), {2.0 / 9, -2.0 / 9});
}

TEST_CASE("float32 softmax and log_softmax: near float64's; masked entries appended keep the row's bits") {
  // The float32 rows sum their exps in eight interleaved lanes with a polynomial exp (ops/cpu/rows.cpp):
  // lengths around the lane count and a vocabulary's row, against the same values in float64.
  manual_seed(11);
  for (int64_t n : {1, 7, 8, 9, 23, 8000}) {
    CAPTURE(n);
    const Tensor x = mul(randn({3, n}), 4.0);  // logits spread over about +-12
    const Tensor x64 = x.to(DType::f64);
    // float32's rounding of a sum of n terms, a thousand per lane at n = 8,000: 1e-6 relative, 1e-5 there
    const double tol = n < 100 ? 1e-6 : 1e-5;
    check_values(softmax(x, -1), softmax(x64, -1).to_vector<double>(), tol);
    check_values(log_softmax(x, -1), log_softmax(x64, -1).to_vector<double>(), tol);
    // the same rows with 5 masked (-inf) entries after them, as a source padded to a longer batch's
    // length: the real entries' bits unchanged, the masked ones exactly 0 (-inf in log space)
    const Tensor padded = cat({x, full({3, 5}, -kInf)}, 1);
    for (bool log : {false, true}) {
      CAPTURE(log);
      const Tensor alone = log ? log_softmax(x, -1) : softmax(x, -1);
      const Tensor with_padding = log ? log_softmax(padded, -1) : softmax(padded, -1);
      CHECK(with_padding.narrow(1, 0, n).contiguous().to_vector<float>() == alone.to_vector<float>());
      for (float v : with_padding.narrow(1, n, 5).contiguous().to_vector<float>()) CHECK(v == (log ? -kInf : 0.0));
    }
  }
}

TEST_CASE("matmul of small integers") {
  // [[1, 2], [3, 4]] · [[5, 6], [7, 8]] = [[1·5 + 2·7, 1·6 + 2·8], [3·5 + 4·7, 3·6 + 4·8]] = [[19, 22], [43, 50]]
  Tensor a = f64({1, 2, 3, 4}, {2, 2}), b = f64({5, 6, 7, 8}, {2, 2});
  check_values(matmul(a, b), {19, 22, 43, 50});
  // [1, 2, 3] · [4, 5, 6] = 4 + 10 + 18 = 32, a 0-d result
  Tensor dot = matmul(f64({1, 2, 3}), f64({4, 5, 6}));
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item() == 32);
  // [1, 2] · [[5, 6], [7, 8]] = [19, 22]; [[1, 2], [3, 4]] · [1, 1] = [3, 7]
  check_values(matmul(f64({1, 2}), b), {19, 22});
  check_values(matmul(a, f64({1, 1})), {3, 7});
  // float32 too (the same GEMM path, single precision)
  check_values(matmul(a.to(DType::f32), b.to(DType::f32)), {19, 22, 43, 50});
  // d(sum(a·b))/da = ones · bᵀ: each row is [5 + 6, 7 + 8] = [11, 15]
  Tensor ag = a.detach().requires_grad_();
  matmul(ag, b).sum().backward();
  check_values(ag.grad(), {11, 15, 11, 15});
}

TEST_CASE("matmul and broadcasting result shapes") {
  auto z = [](Shape s) { return zeros(s, kF64); };
  CHECK(matmul(z({2, 1, 3, 4}), z({5, 4, 2})).shape() == Shape{2, 5, 3, 2});  // batch (2, 1) x (5,) -> (2, 5)
  CHECK(matmul(z({2, 3, 4}), z({4, 2})).shape() == Shape{2, 3, 2});
  CHECK(matmul(z({3, 4}), z({6, 4, 2})).shape() == Shape{6, 3, 2});
  CHECK(matmul(z({2, 3, 4}), z({4})).shape() == Shape{2, 3});
  CHECK(matmul(z({4}), z({2, 4, 5})).shape() == Shape{2, 5});
  CHECK(add(z({2, 1, 3}), z({4, 1})).shape() == Shape{2, 4, 3});
  CHECK(add(z({}), z({3})).shape() == Shape{3});
  CHECK(mul(z({5, 1}), z({1, 6})).shape() == Shape{5, 6});
  CHECK(where(zeros({3}, {.dtype = DType::b8}), z({2, 1}), z({})).shape() == Shape{2, 3});
  CHECK(broadcast_shapes({1}, {}, "test") == Shape{1});
  // (2, 3) + (3,): row [10, 20, 30] is added to each row
  check_values(add(f64({1, 2, 3, 4, 5, 6}, {2, 3}), f64({10, 20, 30})), {11, 22, 33, 14, 25, 36});
  // and the gradient of the broadcast operand sums over the broadcast rows: [2, 2, 2]
  Tensor b = f64({10, 20, 30}).requires_grad_();
  add(f64({1, 2, 3, 4, 5, 6}, {2, 3}), b).sum().backward();
  check_values(b.grad(), {2, 2, 2});
}

TEST_CASE("logsumexp: hand values, large values, and an all -inf row gives -inf, not NaN") {
  // log(e^0 + e^(ln 3)) = log(1 + 3) = ln 4
  check_values(logsumexp(f64({0, std::log(3.0)}), {0}), {std::log(4.0)});
  // log(2 e^1000) = 1000 + ln 2: no overflow although e^1000 is not representable
  check_values(logsumexp(f64({1000, 1000}), {0}), {1000 + std::log(2.0)});
  // row 0 is entirely -inf: the max used for stabilisation is replaced by 0, so the result is
  // 0 + log(0) = -inf (not -inf - -inf = NaN); row 1 = ln 4 as above
  Tensor y = logsumexp(f64({-kInf, -kInf, 0, std::log(3.0)}, {2, 2}), {1});
  check_values(y, {-kInf, std::log(4.0)});
}

TEST_CASE("reductions by hand") {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(sum(x), {21});
  check_values(sum(x, {0}), {5, 7, 9});
  check_values(mean(x, {1}), {2, 5});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  check_values(max(x, 1).values, {3, 6});
  check_values(min(x, 0).values, {1, 2, 3});
  check_values(sum_to(x, {1, 3}), {5, 7, 9});
  // the gradient of max goes to the first maximum only: max([1, 3, 3]) -> dx = [0, 1, 0]
  Tensor t = f64({1, 3, 3}).requires_grad_();
  max(t, 0).values.backward();
  check_values(t.grad(), {0, 1, 0});
  // mean's gradient is 1/n everywhere
  Tensor m = f64({1, 2, 3, 4}).requires_grad_();
  mean(m).backward();
  check_values(m.grad(), {0.25, 0.25, 0.25, 0.25});
}

TEST_CASE("topk ranks NaN after every number, largest and smallest, ties by index") {
  // NaN compares false with everything, so the bare comparison is no strict weak order (undefined
  // behaviour in partial_sort): [nan, 2, nan, 5, 1, nan, 3] ranks its numbers, then its NaNs by index
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = f64({nan, 2, nan, 5, 1, nan, 3});
  auto [high, high_idx] = topk(x, 7);
  CHECK(high_idx.to_vector<int64_t>() == std::vector<int64_t>{3, 6, 1, 4, 0, 2, 5});
  check_values(high.narrow(0, 0, 4), {5, 3, 2, 1});
  auto [low, low_idx] = topk(x, 3, 0, false);
  CHECK(low_idx.to_vector<int64_t>() == std::vector<int64_t>{4, 1, 6});
  // a long row (partial_sort's introsort runs past its insertion sort): every number before any NaN
  std::vector<double> row;
  for (int i = 0; i < 4096; ++i) row.push_back(i % 3 == 0 ? nan : static_cast<double>((i * 7919) % 1000));
  for (bool largest : {true, false}) {
    auto [v, idx] = topk(from_vector(row, {4096}, kF64), 4096, 0, largest);
    const std::vector<double> values = v.to_vector<double>();
    const std::vector<int64_t> where = idx.to_vector<int64_t>();
    const size_t numbers = 4096 - 1366;  // i % 3 == 0 for 1366 of them
    for (size_t j = 0; j < values.size(); ++j) {
      CHECK(std::isnan(values[j]) == (j >= numbers));
      if (j > 0 && j < numbers) CHECK((largest ? values[j - 1] >= values[j] : values[j - 1] <= values[j]));
      if (j > numbers) CHECK(where[j - 1] < where[j]);
    }
  }
  // float32, as decoding's log-probabilities are
  auto [f, f_idx] = topk(f64({nan, -1, nan, -0.5}).to(DType::f32), 2);
  CHECK(f_idx.to_vector<int64_t>() == std::vector<int64_t>{3, 1});
  // a small k (one pass keeping the k best so far) ranks as the whole row's order does: the
  // first k of topk(row, 4096), ties (only 1000 values) by index and NaNs last, both ways
  const Tensor long_row = from_vector(row, {4096}, kF64);
  for (bool largest : {true, false})
    for (int64_t k : {1, 10, 32}) {
      CAPTURE(largest);
      CAPTURE(k);
      auto [small_v, small_idx] = topk(long_row, k, 0, largest);
      auto [all_v, all_idx] = topk(long_row, 4096, 0, largest);
      CHECK(small_idx.to_vector<int64_t>() == all_idx.narrow(0, 0, k).to_vector<int64_t>());
    }
  auto [nan_first, nan_first_idx] = topk(f64({nan, nan, 2, 1}), 3);  // NaNs met first still rank last
  CHECK(nan_first_idx.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 0});
}

TEST_CASE("float32 argmax of contiguous rows (the vectorised pass) agrees with float64's loop: ties, NaN, -inf, zeros") {
  // float32 rows of the last dim take a pass of their own (ops/cpu/reduce.cpp); float64 and other
  // layouts the general loop. Each case at lengths around the 8 lanes and a vocabulary's row.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t n : {1, 7, 8, 9, 8000}) {
    CAPTURE(n);
    std::vector<double> ties(n), with_nan(n), all_minus_inf(n, -kInf), zeros(n);
    for (int64_t i = 0; i < n; ++i) {
      ties[i] = static_cast<double>((i * 37) % 11);     // each value again every 11 entries
      with_nan[i] = i % 5 == 3 ? nan : static_cast<double>(i);  // the first NaN wins: index 3
      zeros[i] = i % 2 == 0 ? -0.0 : 0.0;               // -0 == +0: the first index
    }
    for (const std::vector<double>* row : {&ties, &with_nan, &all_minus_inf, &zeros}) {
      const Tensor x64 = from_vector(*row, {1, n}, kF64);
      const double want = argmax(x64, 1).item();
      CHECK(argmax(x64.to(DType::f32), 1).item() == want);
      const Tensor column = x64.to(DType::f32).t();              // (n, 1)
      const Tensor strided = cat({column, column}, 1);             // (n, 2): dim 0 two floats apart
      CHECK(argmax(strided, 0).to_vector<int64_t>() == std::vector<int64_t>(2, static_cast<int64_t>(want)));  // the general loop
    }
    CHECK(argmax(from_vector(with_nan, {1, n}, kF64), 1).item() == static_cast<double>(n > 3 ? 3 : n - 1));
  }
}

TEST_CASE("argmax ties pick the first index; topk; comparisons") {
  // [[1, 5, 5], [7, 7, 0]]: row 0 ties at 1 and 2 -> 1; row 1 ties at 0 and 1 -> 0
  Tensor x = f64({1, 5, 5, 7, 7, 0}, {2, 3});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  // column-wise argmin of [[1, 5, 5], [7, 7, 0]]: [0, 0, 1]
  CHECK(argmin(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  // top-2 of [3, 1, 4, 1, 5] = 5 (index 4), 4 (index 2); bottom-2 = 1 (index 1), 1 (index 3)
  auto [values, indices] = topk(f64({3, 1, 4, 1, 5}), 2);
  check_values(values, {5, 4});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{4, 2});
  auto [low, low_idx] = topk(f64({3, 1, 4, 1, 5}), 2, 0, false);
  check_values(low, {1, 1});
  CHECK(low_idx.to_vector<int64_t>() == std::vector<int64_t>{1, 3});
  CHECK(indices.dtype() == DType::i64);
  // comparisons give bool tensors and broadcast
  Tensor c = lt(f64({1, 2, 3}, {3, 1}), f64({2, 3}, {1, 2}));  // [[1<2, 1<3], [2<2, 2<3], [3<2, 3<3]]
  CHECK(c.dtype() == DType::b8);
  CHECK(c.to_vector<bool>() == std::vector<bool>{true, true, false, true, false, false});
  CHECK(eq(f64({1, 2}), 2.0).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(ge(f64({1, 2}), 2.0).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(ne(f64({1, 2}), f64({1, 3})).to_vector<bool>() == std::vector<bool>{false, true});
}

TEST_CASE("gradients at conventional points: relu and abs at 0, clamp bounds, pow with base 0") {
  // relu'(0) = 0 and |x|'(0) = sign(0) = 0, as PyTorch
  Tensor x = f64({-1, 0, 2}).requires_grad_();
  relu(x).sum().backward();
  check_values(x.grad(), {0, 0, 1});
  x.zero_grad();
  abs(x).sum().backward();
  check_values(x.grad(), {-1, 0, 1});
  // clamp passes the gradient on its closed interval [lo, hi], bounds included
  Tensor c = f64({-2, -1, 0, 1, 2}).requires_grad_();
  clamp(c, -1, 1).sum().backward();
  check_values(c.grad(), {0, 1, 1, 1, 0});
  // pow(a, b) at a = 0, b = 2: y = 0, dy/da = 2·0 = 0, dy/db = y·ln a = 0·(-inf), taken as 0
  Tensor a = f64({0}).requires_grad_(), b = f64({2}).requires_grad_();
  pow(a, b).sum().backward();
  check_values(a.grad(), {0});
  check_values(b.grad(), {0});
  // sigmoid saturates without NaN
  check_values(sigmoid(f64({-1000, 0, 1000})), {0, 0.5, 1});
}

TEST_CASE("embedding with padding_idx: the padding row gets exactly zero gradient") {
  // ids [[1, 0], [0, 2]] with padding 0: row 1 and row 2 are used once, row 0 twice but masked
  Tensor w = f64({0, 1, 10, 11, 20, 21}, {3, 2}).requires_grad_();
  Tensor ids = tensor({1, 0, 0, 2}, {2, 2}, {.dtype = DType::i64});
  Tensor y = embedding(w, ids, 0);
  CHECK(y.shape() == Shape{2, 2, 2});
  check_values(y, {10, 11, 0, 1, 0, 1, 20, 21});  // the forward still reads row 0
  y.sum().backward();
  check_values(w.grad(), {0, 0, 1, 1, 1, 1});
}

TEST_CASE("dropout: a fixed seed gives the same mask; kept values scale by 1/(1-p)") {
  Tensor x = ones({10000}, kF64);
  manual_seed(42);
  Tensor a = dropout(x, 0.25);
  manual_seed(42);
  Tensor b = dropout(x, 0.25);
  CHECK(a.to_vector<double>() == b.to_vector<double>());
  Tensor c = dropout(x, 0.25);  // the generator moved on: a different mask
  CHECK(c.to_vector<double>() != a.to_vector<double>());
  std::vector<double> v = a.to_vector<double>();
  int kept = 0;
  for (double e : v) {
    CHECK((e == 0 || std::abs(e - 1 / 0.75) < 1e-15));
    kept += e != 0;
  }
  // kept ~ Binomial(10000, 0.75): mean 7500, sd 43; 5 sd either way
  CHECK(kept > 7500 - 217);
  CHECK(kept < 7500 + 217);
  // the gradient is the same mask
  Tensor xg = ones({8}, kF64).requires_grad_();
  manual_seed(7);
  Tensor y = dropout(xg, 0.5);
  y.sum().backward();
  check_same_values(xg.grad(), y.detach());
  CHECK(dropout(x, 0.0).to_vector<double>() == x.to_vector<double>());
}

// ---- fused vs composed twins: the fused kernel (used when backward is not recorded) and the
// composition (used under create_graph) must agree on values.

TEST_CASE("fused vs composed: tanh_backward, sigmoid_backward and relu_backward") {
  manual_seed(11);
  Tensor dy = randn({3, 4}, kF64), y = tanh(randn({3, 4}, kF64));
  Tensor fused, composed;
  {
    NoGradGuard no_grad;
    fused = tanh_backward(dy, y);
  }
  composed = tanh_backward(dy.detach().requires_grad_(), y);  // recording -> composed twin
  CHECK(composed.requires_grad());
  check_same_values(fused, composed);
  check_same_values(fused, mul(dy, sub(ones_like(y), mul(y, y))));  // dy (1 - y²)

  Tensor s = sigmoid(randn({3, 4}, kF64));
  {
    NoGradGuard no_grad;
    fused = sigmoid_backward(dy, s);
  }
  composed = sigmoid_backward(dy.detach().requires_grad_(), s);
  CHECK(composed.requires_grad());
  check_same_values(fused, composed);
  check_same_values(fused, mul(dy, mul(s, sub(ones_like(s), s))));  // dy y (1 - y)

  Tensor x = f64({-2, -0.5, 0, 0.25, 1, 3, -1e-9, 1e-9, -4, 0, 2, -3}, {3, 4});
  {
    NoGradGuard no_grad;
    fused = relu_backward(dy, x);
  }
  composed = relu_backward(dy.detach().requires_grad_(), x);
  CHECK(composed.requires_grad());
  check_same_values(fused, composed);
  const std::vector<double> d = dy.to_vector<double>(), xs = x.to_vector<double>(), got = fused.to_vector<double>();
  for (size_t i = 0; i < d.size(); ++i) CHECK(got[i] == (xs[i] > 0 ? d[i] : 0.0));  // dy where x > 0 (0 at x = 0)
  CHECK_THROWS_WITH_AS(relu_backward(dy, x.to(DType::f32)), doctest::Contains("relu_backward"), Error);
}

TEST_CASE("fused vs composed: tanh and sigmoid values and gradients") {
  manual_seed(12);
  Tensor x = randn({2, 5}, kF64).requires_grad_();
  // tanh x = (e^2x - 1) / (e^2x + 1); sigmoid x = 1 / (1 + e^-x)
  Tensor e2 = exp(mul(x, 2.0));
  check_same_values(tanh(x), (e2 - 1.0) / (e2 + 1.0), 1e-12);
  check_same_values(sigmoid(x), div(ones_like(x), add(exp(neg(x)), 1.0)), 1e-12);
  auto grad_of = [&](Tensor y) { return autograd::grad({y.sum()}, {x})[0]; };
  check_same_values(grad_of(tanh(x)), grad_of((exp(mul(x, 2.0)) - 1.0) / (exp(mul(x, 2.0)) + 1.0)), 1e-12);
  check_same_values(grad_of(sigmoid(x)), grad_of(div(ones_like(x), add(exp(neg(x)), 1.0))), 1e-12);
}

TEST_CASE("fused vs composed: softmax and log_softmax backward, fused path vs create_graph path") {
  manual_seed(13);
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    Tensor x = randn({3, 4}, kF64).requires_grad_();
    Tensor w = randn({3, 4}, kF64);
    for (bool log : {false, true}) {
      CAPTURE(log);
      auto f = [&] { return mul(log ? log_softmax(x, dim) : softmax(x, dim), w).sum(); };
      // plain backward: the backward runs without recording, so the fused kernel runs
      Tensor fused = autograd::grad({f()}, {x})[0];
      CHECK_FALSE(fused.requires_grad());
      // create_graph: the backward is recorded, so the composed twin runs
      Tensor composed = autograd::grad({f()}, {x}, {}, {.create_graph = true})[0];
      CHECK(composed.requires_grad());
      check_same_values(fused, composed, 1e-12);
      // and both equal the fully composed forward: softmax = exp(x - logsumexp(x))
      Tensor lse = logsumexp(x, {dim}, true);
      Tensor reference = log ? sub(x, lse) : exp(sub(x, lse));
      check_same_values(log ? log_softmax(x, dim) : softmax(x, dim), reference, 1e-12);
      Tensor by_composition = autograd::grad({mul(reference, w).sum()}, {x})[0];
      check_same_values(fused, by_composition, 1e-12);
    }
  }
}

TEST_CASE("ties: amax/amin and maximum/minimum split the gradient evenly, max(dim) sends it to the first") {
  // amax([[1, 3, 3, 3], [2, 5, 0, 5]], dim 1) = [3, 5]: three tied 3s share dy = 1 (1/3 each), two
  // tied 5s share dy = 2 (1 each). max(dim) instead sends all of dy to the first maximum.
  Tensor x = f64({1, 3, 3, 3, 2, 5, 0, 5}, {2, 4}).requires_grad_();
  Tensor dy = f64({1, 2});
  amax(x, {1}).backward(dy);
  check_values(x.grad(), {0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1, 0, 1});
  Tensor x2 = f64({1, 3, 3, 3, 2, 5, 0, 5}, {2, 4}).requires_grad_();
  max(x2, 1).values.backward(dy);
  check_values(x2.grad(), {0, 1, 0, 0, 0, 2, 0, 0});
  // amin over everything of [[2, 1], [1, 4]]: the two 1s get 1/2 each
  Tensor x3 = f64({2, 1, 1, 4}, {2, 2}).requires_grad_();
  amin(x3, {}).backward();
  check_values(x3.grad(), {0, 0.5, 0.5, 0});
  // maximum([1, 2, 3], [3, 2, 1]): a wins at 2, ties at 1 (½ each), b wins at 0
  Tensor a = f64({1, 2, 3}).requires_grad_(), b = f64({3, 2, 1}).requires_grad_();
  maximum(a, b).backward(f64({1, 1, 1}));
  check_values(a.grad(), {0, 0.5, 1});
  check_values(b.grad(), {1, 0.5, 0});
  Tensor c = f64({1, 2, 3}).requires_grad_(), d = f64({3, 2, 1}).requires_grad_();
  minimum(c, d).backward(f64({1, 1, 1}));
  check_values(c.grad(), {1, 0.5, 0});
  check_values(d.grad(), {0, 0.5, 1});
}

TEST_CASE("activations by hand: log1p, expm1, erf, softplus, gelu, log_sigmoid, silu, hardsigmoid, hardswish, mish") {
  // log1p(1e-17) = 1e-17 where log(1 + 1e-17) rounds to 0; expm1 likewise
  check_values(log1p(f64({1e-17, std::exp(1.0) - 1})), {1e-17, 1}, 1e-30);
  check_values(expm1(f64({1e-17, std::log(3.0)})), {1e-17, 2}, 1e-15);
  check_values(erf(f64({0, 1e9, -1e9})), {0, 1, -1});
  // softplus(0) = log 2; above the threshold it is x itself; beta 2: log(1 + e^2) / 2 at x = 1
  check_values(softplus(f64({0, 30})), {std::log(2.0), 30});
  check_values(softplus(f64({1}), 2.0), {std::log1p(std::exp(2.0)) / 2});
  // gelu(x) = x Φ(x): gelu(0) = 0, gelu(1) = Φ(1) = (1 + erf(1/√2)) / 2
  check_values(gelu(f64({0, 1})), {0, 0.5 * (1 + std::erf(1 / std::sqrt(2.0)))});
  check_values(gelu(f64({1}), GeluApproximate::tanh), {0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * 1.044715))});
  // log σ(0) = -log 2; log σ(-800) = -800 (no overflow of e^800); silu(0) = 0, silu(x) → x
  check_values(log_sigmoid(f64({0, -800, 800})), {-std::log(2.0), -800, 0});
  check_values(silu(f64({0, 50})), {0, 50});
  check_values(hardsigmoid(f64({-4, 0, 1.5, 3})), {0, 0.5, 0.75, 1});
  // hardswish = x hardsigmoid(x); its slope at the kinks -3 and 3 is torch's middle branch: -1/2, 3/2
  Tensor hs = f64({-4, -3, 1.5, 3, 4}).requires_grad_();
  Tensor hs_y = hardswish(hs);
  check_values(hs_y, {0, 0, 1.125, 3, 4});
  hs_y.backward(ones_like(hs_y));
  check_values(hs.grad(), {0, -0.5, 1, 1.5, 1});
  // mish(0) = 0, mish(1) = tanh(log(1 + e)), mish(x) → x for large x and → 0 for very negative x
  check_values(mish(f64({0, 1, 60, -60})), {0, std::tanh(std::log1p(std::exp(1.0))), 60, -60 * std::tanh(std::log1p(std::exp(-60.0)))});
}

TEST_CASE("structured bindings, sort and repeat_interleave keep the gradient path") {
  // sort([3, 1, 2]) = [1, 2, 3] from [1, 2, 0]: dy = [10, 20, 30] goes back as [30, 10, 20]
  Tensor x = f64({3, 1, 2}).requires_grad_();
  auto [values, indices] = sort(x);
  check_values(values, {1, 2, 3});
  CHECK(indices.dtype() == DType::i64);
  values.backward(f64({10, 20, 30}));
  check_values(x.grad(), {30, 10, 20});
  // repeat_interleave([a, b], [2, 3]) = [a, a, b, b, b]: the gradient sums over the copies
  Tensor y = f64({1, 2}).requires_grad_();
  Tensor r = repeat_interleave(y, tensor({2, 3}, {.dtype = DType::i64}), 0);
  check_values(r, {1, 1, 2, 2, 2});
  r.backward(f64({1, 2, 3, 4, 5}));
  check_values(y.grad(), {3, 12});
}
