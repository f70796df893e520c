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

void CpuBackend::softmax_rows(const Tensor& x, const Tensor& out, bool log) {
  int64_t cols = x.shape().back(), rows = x.numel() / std::max<int64_t>(cols, 1);
  dispatch_floating(x.dtype(), "softmax", [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* in = px + r * cols;
        T* o = po + r * cols;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, in[j]);
        if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
        T sum = 0;
        if (log) {
          for (int64_t j = 0; j < cols; ++j) sum += std::exp(in[j] - mx);
          T lse = mx + std::log(sum);
          for (int64_t j = 0; j < cols; ++j) o[j] = in[j] - lse;
        } else {
          for (int64_t j = 0; j < cols; ++j) sum += (o[j] = std::exp(in[j] - mx));
          T inv = T(1) / sum;
          for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
        }
      }
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
      std::iota(order.begin(), order.end(), 0);
      // a strict weak order even with NaN (which compares false with everything: partial_sort
      // with the bare comparison is undefined behaviour): NaN ranks after every number
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t i, int64_t j) {
        const bool nan_i = std::isnan(static_cast<double>(row[i])), nan_j = std::isnan(static_cast<double>(row[j]));
        if (nan_i || nan_j) return nan_i != nan_j ? nan_j : i < j;
        if (row[i] == row[j]) return i < j;
        return largest ? row[i] > row[j] : row[i] < row[j];
      });
      for (int64_t j = 0; j < k; ++j) {
        pv[r * k + j] = row[order[j]];
        pi[r * k + j] = order[j];
      }
    }
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
