// One-row products (ops/cpu/gemm.cpp's row_gemm: a matrix-vector product split across the pool,
// greedy decoding's every product) and few-row ones (2 to 8 rows, a beam's: oneDNN's float32 matmul
// where the build has it, ops/cpu/onednn_gemm.h) against plain loops in double: weights given as
// (n, k) rows or as a (k, n) matrix, the rows strided, accumulating into c, float32 and float64.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/blas.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed, DType dtype) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = dist(gen);
  return from_vector(v, shape).to(dtype);
}

// c (m, n) = a (m, k) · b (k, n), in double, with the sum of |a||b| per output (the rounding scale).
struct Reference {
  std::vector<double> value, mass;
};
Reference reference(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to(DType::f64).contiguous().to_vector<double>();
  std::vector<double> bv = b.to(DType::f64).contiguous().to_vector<double>();
  const int64_t m = a.size(0), k = b.size(0), n = b.size(1);
  Reference r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        r.value[i * n + j] += av[i * k + p] * bv[p * n + j];
        r.mass[i * n + j] += std::abs(av[i * k + p] * bv[p * n + j]);
      }
  return r;
}

// Every element within k·ε·Σ|a||b| (ε of the dtype), plus `offset` added on both sides.
void check_row(const Tensor& got, const Reference& want, int64_t k, double eps, const std::vector<double>& offset = {}) {
  std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  REQUIRE(g.size() == want.value.size());
  int64_t outside = 0;
  for (size_t j = 0; j < g.size(); ++j) {
    const double w = want.value[j] + (offset.empty() ? 0.0 : offset[j]);
    outside += !(std::abs(g[j] - w) <= k * eps * (want.mass[j] + 1e-30) + 4 * eps * std::abs(w));
  }
  CHECK(outside == 0);
}

}  // namespace

TEST_CASE("one-row and few-row GEMMs (gemv, oneDNN; split across threads) equal the loops") {
  for (auto [dtype, m] : {std::pair{DType::f32, int64_t{1}}, {DType::f64, int64_t{1}}, {DType::f32, int64_t{5}},
                          {DType::f64, int64_t{5}}, {DType::f32, int64_t{8}}}) {
    CAPTURE(dtype_name(dtype));
    CAPTURE(m);
    const double eps = dtype == DType::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
    const int64_t k = 300, n = 1500;  // large enough for the split path and several pieces
    Tensor a = random_tensor({m, k}, 1, dtype);
    SUBCASE("x · Wᵀ with W stored (n, k): a linear layer") {
      Tensor w = random_tensor({n, k}, 2, dtype);
      check_row(matmul(a, w.t()), reference(a, w.t()), k, eps);
    }
    SUBCASE("x · B with B stored (k, n)") {
      Tensor b = random_tensor({k, n}, 3, dtype);
      check_row(matmul(a, b), reference(a, b), k, eps);
    }
    SUBCASE("the row read with a stride: a column of a (k, 3) matrix, transposed") {
      Tensor cols = random_tensor({k, 3}, 4, dtype), w = random_tensor({n, k}, 5, dtype);
      Tensor row = cols.narrow(1, 1, 1).t();  // (1, k), element stride 3
      check_row(matmul(row, w.t()), reference(row, w.t()), k, eps);
      Tensor wide = random_tensor({m, 2 * k}, 8, dtype);
      Tensor rows = wide.narrow(1, 0, k);  // (m, k), rows 2k apart
      check_row(matmul(rows, w.t()), reference(rows, w.t()), k, eps);
    }
    SUBCASE("accumulating into c (beta = 1)") {
      Tensor b = random_tensor({k, n}, 6, dtype), c = random_tensor({m, n}, 7, dtype);
      std::vector<double> before = c.to(DType::f64).to_vector<double>();
      addmm_(c, a, b);
      check_row(c, reference(a, b), k, eps, before);
    }
  }
}

TEST_CASE("gemv with beta = 0 ignores y, NaN included (as gemm)") {
  std::vector<float> a{1, 2, 3, 4, 5, 6};  // (2, 3) row-major
  std::vector<float> x{1, -1, 2};
  std::vector<float> y(2, std::numeric_limits<float>::quiet_NaN());
  blas::sgemv(blas::Trans::no, 2, 3, 1.0f, a.data(), 3, x.data(), 1, 0.0f, y.data());
  CHECK(y == std::vector<float>{1 - 2 + 6, 4 - 5 + 12});
  std::vector<double> ad(a.begin(), a.end()), xd{1, -1};
  std::vector<double> yd(3, std::numeric_limits<double>::quiet_NaN());
  blas::dgemv(blas::Trans::yes, 2, 3, 2.0, ad.data(), 3, xd.data(), 1, 0.0, yd.data());  // 2 · Aᵀ x
  CHECK(yd == std::vector<double>{2 * (1 - 4), 2 * (2 - 5), 2 * (3 - 6)});
}
