// CPU layer normalisation over contiguous rows and its backward (as ops/cuda/layer_norm.cu); the
// op and its math: ops/layer_norm.cpp. One task per row: the row is read from memory once and
// its three short loops (mean, variance, output) run in cache; each loop vectorises.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fused_math.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {
namespace {

// Rows per block of the backward: each block sums its rows' dweight and dbias terms, and the
// blocks' partial sums are added in block order. The blocks depend on (N, D) alone, so the result
// has the same bits for any number of threads.
int64_t rows_per_block(int64_t D) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(D, 1)); }

}  // namespace

void CpuBackend::layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                 const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t D = x.shape().back(), N = x.numel() / std::max<int64_t>(D, 1);
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = y.data<T>();
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    const T inv_d = T(1) / static_cast<T>(D), e = static_cast<T>(eps);
    parallel_for(N, rows_per_block(D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* in = px + r * D;
        T* out = py + r * D;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < D; ++j) s += in[j];
        const T mu = s * inv_d;
        T v = 0;  // the centred second pass: no cancellation when |μ| >> σ
#pragma omp simd reduction(+ : v)
        for (int64_t j = 0; j < D; ++j) v += (in[j] - mu) * (in[j] - mu);
        const T rs = T(1) / std::sqrt(v * inv_d + e);
        pm[r] = mu, pr[r] = rs;
        if (pw != nullptr) {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) out[j] = math::layer_norm_value(in[j], mu, rs, pw[j], pb[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) out[j] = math::layer_norm_value(in[j], mu, rs, T(1), T(0));
        }
      }
    });
  });
}

void CpuBackend::layer_norm_rows_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                          const Tensor& dweight, const Tensor& dbias) {
  const int64_t D = x.shape().back(), N = x.numel() / std::max<int64_t>(D, 1);
  const int64_t block = rows_per_block(D), blocks = (N + block - 1) / block;
  const bool want_dw = dweight.defined() && weight.defined(), want_db = dbias.defined();
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    // per block: D partial sums of dy x̂, then D of dy
    std::vector<T> partial((want_dw || want_db) ? static_cast<size_t>(blocks * 2 * D) : 0, T(0));
    const T inv_d = T(1) / static_cast<T>(D);
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        T* part_dw = partial.empty() ? nullptr : partial.data() + blk * 2 * D;
        T* part_db = part_dw == nullptr ? nullptr : part_dw + D;
        for (int64_t r = blk * block; r < std::min(N, (blk + 1) * block); ++r) {
          const T* in = px + r * D;
          const T* g = pdy + r * D;
          T* out = pdx + r * D;
          const T mu = pm[r], rs = pr[r];
          T sg = 0, sgx = 0;  // Σ g and Σ g x̂ with g = dy w
#pragma omp simd reduction(+ : sg, sgx)
          for (int64_t j = 0; j < D; ++j) {
            const T gj = pw != nullptr ? g[j] * pw[j] : g[j];
            sg += gj;
            sgx += gj * (in[j] - mu) * rs;
          }
          const T mean_g = sg * inv_d, mean_gx = sgx * inv_d;
          if (part_dw != nullptr) {  // dx and the block's parameter sums in one pass over the row
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) {
              const T xhat = (in[j] - mu) * rs, gj = pw != nullptr ? g[j] * pw[j] : g[j];
              out[j] = math::layer_norm_grad(gj, xhat, rs, mean_g, mean_gx);
              part_dw[j] += g[j] * xhat;
              part_db[j] += g[j];
            }
          } else {
#pragma omp simd
            for (int64_t j = 0; j < D; ++j) {
              const T gj = pw != nullptr ? g[j] * pw[j] : g[j];
              out[j] = math::layer_norm_grad(gj, (in[j] - mu) * rs, rs, mean_g, mean_gx);
            }
          }
        }
      }
    });
    if (!want_dw && !want_db) return;
    for (int64_t j = 0; j < D; ++j) {  // the blocks' sums in block order
      T sw = 0, sb = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) sw += partial[blk * 2 * D + j], sb += partial[blk * 2 * D + D + j];
      if (want_dw) dweight.data<T>()[j] = sw;
      if (want_db) dbias.data<T>()[j] = sb;
    }
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
