// The batch-invariant float32 GEMM (ops/cpu/invariant_gemm.cpp) under BatchInvariantMode
// (ops/batch_invariant.h): a row's result has the same bits whatever rows share its product (1 to
// 33 rows, the row first, in the middle or last, among different neighbours, on one thread or
// two), a sum over a source padded with zero weights keeps its bits, one key's score keeps its
// bits beside more keys, either layout of B gives the same bits, and every element lies within the float32 bound k·ε·Σ|a·b| of a float64
// reference (ε = 2⁻²⁴; the kernel's sums round at most k times).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "core/threads.h"
#include "ops/batch_invariant.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = dist(gen);
  return from_vector(v, shape).to(DType::f32);
}

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.contiguous().to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// Every element of `got` (n,) against Σ_p a[p]·w[j][p] + bias[j] in float64: a (k,), w (n, k).
void check_reference(const Tensor& got, const Tensor& a, const Tensor& w, const Tensor& bias) {
  const std::vector<double> g = got.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> av = a.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> wv = w.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> bv = bias.defined() ? bias.to(DType::f64).to_vector<double>() : std::vector<double>{};
  const auto n = static_cast<int64_t>(g.size()), k = static_cast<int64_t>(av.size());
  const double eps = std::ldexp(1.0, -24);
  int64_t outside = 0;
  for (int64_t j = 0; j < n; ++j) {
    double sum = bv.empty() ? 0.0 : bv[j], mass = bv.empty() ? 0.0 : std::abs(bv[j]);
    for (int64_t p = 0; p < k; ++p) sum += av[p] * wv[j * k + p], mass += std::abs(av[p] * wv[j * k + p]);
    outside += !(std::abs(g[j] - sum) <= (k + 1) * eps * mass);
  }
  CHECK(outside == 0);
}

// Rows of `pool` in an order where row 0 stands at `position` among m rows (its neighbours taken
// from the others, shifted by `shift` so each size sees different ones).
Tensor rows_with_first_at(const Tensor& pool, int64_t m, int64_t position, int64_t shift) {
  std::vector<int64_t> index;
  const int64_t others = pool.size(0) - 1;
  for (int64_t i = 0, next = 0; i < m; ++i) index.push_back(i == position ? 0 : 1 + (shift + next++) % others);
  return index_select(pool, 0, from_vector(index, {m}, {.dtype = DType::i64}));
}

struct ThreadCount {
  explicit ThreadCount(int n) : before(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(before); }
  int before;
};

}  // namespace

TEST_CASE("under BatchInvariantMode a linear layer's row has the same bits beside any rows (M = 1..33)") {
  // (n, k): one output; a k below one vector; the default preset's decoder; a k with a partial
  // group and enough work to split across threads; k = 1.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 37}, {5, 3}, {768, 256}, {1000, 129}, {24, 1}}) {
    CAPTURE(n);
    CAPTURE(k);
    const Tensor pool = random_tensor({34, k}, static_cast<uint32_t>(n + k));
    const Tensor w = random_tensor({n, k}, 1), bias = random_tensor({n}, 2);
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      ThreadCount thread_count(threads);
      BatchInvariantMode invariant;
      for (const Tensor& b : {bias, Tensor()}) {
        const Tensor alone = linear(pool.narrow(0, 0, 1), w, b);  // (1, n)
        check_reference(alone.select(0, 0), pool.select(0, 0), w, b);
        const std::vector<uint32_t> want = bits(alone);
        int64_t differ = 0;
        for (int64_t m = 1; m <= 33; ++m)
          for (int64_t position : {int64_t{0}, m / 2, m - 1})
            differ += bits(linear(rows_with_first_at(pool, m, position, m), w, b).select(0, position)) != want;
        CHECK(differ == 0);
        // the rows given as a transposed view (copied to dense rows first)
        const Tensor strided = rows_with_first_at(pool, 9, 4, 0).t().contiguous().t();
        CHECK(bits(linear(strided, w, b).select(0, 4)) == want);
      }
    }
  }
}

TEST_CASE("under BatchInvariantMode attention's weights · values keep their bits over a padded source") {
  // One query's context over its S source positions, alone, then padded to a longer batch's
  // length (zero weights, and values that are not zero there: the mask, not the padding's
  // content, decides) among other sentences: weights (B, 1, S') · values (B, S', D).
  for (auto [s, d] : {std::pair<int64_t, int64_t>{1, 7}, {5, 64}, {17, 512}, {40, 33}}) {
    CAPTURE(s);
    CAPTURE(d);
    const Tensor weights = softmax(random_tensor({1, 1, s}, 3), -1), values = random_tensor({1, s, d}, 4);
    BatchInvariantMode invariant;
    const Tensor alone = matmul(weights, values);  // (1, 1, D)
    check_reference(alone.view({d}), weights.view({s}), values.view({s, d}).t(), Tensor());
    const std::vector<uint32_t> want = bits(alone);
    for (int64_t pad : {1, 7, 30}) {
      CAPTURE(pad);
      const int64_t longer = s + pad;
      const Tensor padded_w = cat({weights, zeros({1, 1, pad})}, 2);
      const Tensor padded_v = cat({values, random_tensor({1, pad, d}, 5)}, 1);
      const Tensor batch_w = cat({softmax(random_tensor({1, 1, longer}, 6), -1), padded_w,
                                  softmax(random_tensor({1, 1, longer}, 7), -1)}, 0);
      const Tensor batch_v = cat({random_tensor({1, longer, d}, 8), padded_v, random_tensor({1, longer, d}, 9)}, 0);
      CHECK(bits(matmul(padded_w, padded_v)) == want);
      // the values laid out as columns (the transpose of (D, S') rows): read as dot products
      CHECK(bits(matmul(padded_w, padded_v.transpose(1, 2).contiguous().transpose(1, 2))) == want);
      CHECK(bits(matmul(batch_w, batch_v).select(0, 1)) == want);
    }
  }
}

TEST_CASE("under BatchInvariantMode a query's score against one key keeps its bits beside more keys") {
  // q · kᵀ over the head dimension d, the keys given as the transpose of their (S, d) rows: one
  // key alone (S = 1), then the same key first among 9, in a batch of 3 sentences.
  for (int64_t d : {1, 8, 20, 64}) {
    CAPTURE(d);
    const Tensor q = random_tensor({1, 1, d}, 10), key = random_tensor({1, 1, d}, 11);
    BatchInvariantMode invariant;
    const Tensor alone = matmul(q, key.transpose(1, 2));  // (1, 1, 1)
    check_reference(alone.view({1}), q.view({d}), key.view({1, d}), Tensor());
    const Tensor keys = cat({key, random_tensor({1, 8, d}, 12)}, 1);  // (1, 9, d)
    const Tensor qs = cat({random_tensor({1, 1, d}, 13), q, random_tensor({1, 1, d}, 14)}, 0);
    const Tensor batch_keys = cat({random_tensor({1, 9, d}, 15), keys, random_tensor({1, 9, d}, 16)}, 0);
    CHECK(bits(matmul(q, keys.transpose(1, 2)).narrow(2, 0, 1)) == bits(alone));
    // kᵀ copied into dense rows (as a batched product's operands may be): read eight columns at a time
    CHECK(bits(matmul(q, keys.transpose(1, 2).contiguous()).narrow(2, 0, 1)) == bits(alone));
    CHECK(bits(matmul(qs, batch_keys.transpose(1, 2)).select(0, 1).narrow(1, 0, 1)) == bits(alone));
  }
}

TEST_CASE("BatchInvariantMode is per scope and per thread; float64 products keep their kernels") {
  CHECK_FALSE(BatchInvariantMode::is_enabled());
  {
    BatchInvariantMode invariant;
    CHECK(BatchInvariantMode::is_enabled());
    {
      BatchInvariantMode off(false);
      CHECK_FALSE(BatchInvariantMode::is_enabled());
    }
    CHECK(BatchInvariantMode::is_enabled());
    bool other_thread = true;
    std::thread([&] { other_thread = BatchInvariantMode::is_enabled(); }).join();
    CHECK_FALSE(other_thread);
    // an empty sum (k = 0) is zero, whatever c held
    CHECK(bits(matmul(zeros({2, 0}), zeros({0, 3}))) == std::vector<uint32_t>(6, 0));
    // float64: the usual kernels, still equal to the reference
    const Tensor a = random_tensor({3, 50}, 17).to(DType::f64), w = random_tensor({20, 50}, 18).to(DType::f64);
    const Tensor y = linear(a, w);
    check_reference(y.select(0, 1).to(DType::f32), a.select(0, 1), w, Tensor());
  }
  CHECK_FALSE(BatchInvariantMode::is_enabled());
}
