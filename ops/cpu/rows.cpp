// CPU row kernels: softmax and its backward, topk (as ops/cuda/rows.cu).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/cpu/loop.h"
#include "ops/cpu/vec_math.h"

namespace seqgrad::cpu::SG_CPU_ISA {

// ---- softmax over contiguous rows; max-subtraction keeps exp() from overflowing

namespace {

constexpr int kLanes = 8;  // interleaved partial results: an AVX register of floats
constexpr int64_t kSmallTopk = 32;  // topk keeps a sorted list of at most this many, else partial_sort

// exp(d) for d = x - max <= 0, and exactly 0 where vec::exp would clamp (d = -inf: a masked entry
// keeps weight 0, so padding adds nothing to a product's sums). NaN (a NaN entry, or inf - inf in a
// row holding +inf) stays NaN, as std::exp keeps it, so the row's sum and every output are NaN, as
// PyTorch's.
[[gnu::always_inline]] inline float exp_below_max(float d) {
  if (d != d) return d;
  return d < -87.33654f ? 0.0f : vec::exp(d);
}

// The largest of n floats (NaN ignored, as std::max(max, x) ignores it), lane by lane then across.
float row_max(const float* in, int64_t n) {
  float m[kLanes];
  std::fill(m, m + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) m[l] = m[l] < in[j + l] ? in[j + l] : m[l];
  for (; j < n; ++j) m[0] = m[0] < in[j] ? in[j] : m[0];
  float mx = m[0];
  for (int l = 1; l < kLanes; ++l) mx = mx < m[l] ? m[l] : mx;
  return mx;
}

// sum_j exp(in[j] - mx), each exp also stored in out[j] when out is given: eight partial sums
// (lane l adds the terms j ≡ l mod 8 in order of j, the last partial group's included), added as
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). A row's bits are its own, and masked entries
// appended to it (a source padded to a longer batch's length: exp 0) leave every lane as it was.
float sum_exp(const float* in, int64_t n, float mx, float* out) {
  float s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_below_max(in[j + l] - mx);
      if (out != nullptr) out[j + l] = e;
      s[l] += e;
    }
  for (int l = 0; j < n; ++j, ++l) {
    const float e = exp_below_max(in[j] - mx);
    if (out != nullptr) out[j] = e;
    s[l] += e;
  }
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// One float32 row: vec::exp and partial sums (libm's scalar expf and one serial sum were 15-19%
// of a Transformer's decoding, over its 8,000-token output rows).
void softmax_row(const float* in, float* o, int64_t cols, bool log) {
  float mx = row_max(in, cols);
  if (mx == -std::numeric_limits<float>::infinity()) mx = 0;  // all -inf: avoid inf - inf
  if (log) {
    const float lse = mx + std::log(sum_exp(in, cols, mx, nullptr));
    for (int64_t j = 0; j < cols; ++j) o[j] = in[j] - lse;
  } else {
    const float inv = 1.0f / sum_exp(in, cols, mx, o);
    for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
  }
}

// float64 rows: libm and one serial sum (the reference numbers, gradient checks).
void softmax_row(const double* in, double* o, int64_t cols, bool log) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, in[j]);
  if (mx == -std::numeric_limits<double>::infinity()) mx = 0;  // all -inf: avoid inf - inf
  double sum = 0;
  if (log) {
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(in[j] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t j = 0; j < cols; ++j) o[j] = in[j] - lse;
  } else {
    for (int64_t j = 0; j < cols; ++j) sum += (o[j] = std::exp(in[j] - mx));
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
  }
}

}  // namespace

void CpuBackend::softmax_rows(const Tensor& x, const Tensor& out, bool log) {
  int64_t cols = x.shape().back(), rows = x.numel() / std::max<int64_t>(cols, 1);
  dispatch_floating(x.dtype(), "softmax", [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) softmax_row(px + r * cols, po + r * cols, cols, log);
    });
  });
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy)
void CpuBackend::softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  int64_t cols = y.shape().back(), rows = y.numel() / std::max<int64_t>(cols, 1);
  dispatch_floating(y.dtype(), "softmax_backward", [&]<class T>() {
    const T* py = y.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* yr = py + r * cols;
        const T* g = pdy + r * cols;
        T* o = pdx + r * cols;
        T dot = 0;
        if (log) {
          for (int64_t j = 0; j < cols; ++j) dot += g[j];
          for (int64_t j = 0; j < cols; ++j) o[j] = g[j] - std::exp(yr[j]) * dot;
        } else {
          for (int64_t j = 0; j < cols; ++j) dot += g[j] * yr[j];
          for (int64_t j = 0; j < cols; ++j) o[j] = yr[j] * (g[j] - dot);
        }
      }
    });
  });
}

void CpuBackend::topk(const Tensor& x_in, int64_t k, bool largest, const Tensor& values, const Tensor& indices) {
  Tensor x = dense(x_in);
  int64_t cols = x.shape().back(), rows = x.numel() / std::max<int64_t>(cols, 1);
  dispatch_numeric(x.dtype(), "topk", [&]<class T>() {
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    std::vector<int64_t> order(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * cols;
      // a strict weak order even with NaN (which compares false with everything: partial_sort
      // with the bare comparison is undefined behaviour): NaN ranks after every number; ties by index
      auto before = [&](int64_t i, int64_t j) {
        const bool nan_i = std::isnan(static_cast<double>(row[i])), nan_j = std::isnan(static_cast<double>(row[j]));
        if (nan_i || nan_j) return nan_i != nan_j ? nan_j : i < j;
        if (row[i] == row[j]) return i < j;
        return largest ? row[i] > row[j] : row[i] < row[j];
      };
      if (0 < k && k <= kSmallTopk) {  // a beam's 2 x beam of a vocabulary: one pass, each entry against the k-th so far
        order.clear();
        for (int64_t j = 0; j < cols; ++j) {
          if (static_cast<int64_t>(order.size()) == k && !before(j, order.back())) continue;
          if (static_cast<int64_t>(order.size()) == k) order.pop_back();
          order.insert(std::upper_bound(order.begin(), order.end(), j, before), j);
        }
      } else {
        order.resize(cols);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      }
      for (int64_t j = 0; j < k; ++j) {
        pv[r * k + j] = row[order[j]];
        pi[r * k + j] = order[j];
      }
    }
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
