// CPU indexing: index_select, index_add, gather, scatter_add (as ops/cuda/index.cu).
#include <tuple>
#include <utility>
#include <vector>

#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {

// ---- indexing

// Views x as (outer, size, inner) around `dim`; returns (outer, inner).
std::pair<int64_t, int64_t> outer_inner(const Tensor& t, int dim) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.shape()[d];
  for (int d = dim + 1; d < t.ndim(); ++d) inner *= t.shape()[d];
  return {outer, inner};
}

void CpuBackend::index_select(const Tensor& x_in, int dim, const Tensor& index, const Tensor& out) {
  Tensor x = dense(x_in);
  int64_t outer, inner;  // not a structured binding: the lambda below captures them (clang < 16)
  std::tie(outer, inner) = outer_inner(x, dim);
  int64_t n_in = x.shape()[dim], n_idx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  size_t es = element_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  parallel_for(outer * n_idx, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t o = r / n_idx, j = r % n_idx;
      std::memcpy(po + (o * n_idx + j) * inner * es, px + (o * n_in + idx[j]) * inner * es, inner * es);
    }
  });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src_in) {
  Tensor src = dense(src_in);
  int64_t outer, inner;  // not a structured binding: the lambda below captures them (clang < 16)
  std::tie(outer, inner) = outer_inner(out, dim);
  int64_t n_out = out.shape()[dim], n_idx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_numeric(out.dtype(), "index_add", [&]<class T>() {
    T* po = out.data<T>();
    const T* ps = src.data<T>();
    // threads split the inner (feature) dimension so repeated ids never race
    parallel_for(inner, 256, [&](int64_t begin, int64_t end) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n_idx; ++j) {
          T* dst = po + (o * n_out + idx[j]) * inner;
          const T* s = ps + (o * n_idx + j) * inner;
#pragma omp simd
          for (int64_t i = begin; i < end; ++i) dst[i] += s[i];
        }
    });
  });
}

// gather / scatter_add: the index may be smaller than x (or out) in the dims other than `dim`, so
// each index element's position is mapped through x's own strides, not through the index's shape.
// Calls f(e, base) for every element e of a contiguous tensor of `shape`, where base is the offset
// of the same multi-index in a tensor of `strides`, with the `dim` coordinate left out.
template <class F>
void for_each_index_position(const Shape& shape, const Shape& strides, int dim, F&& f) {
  int nd = shape.size();
  int64_t index[kMaxDims] = {};
  int64_t base = 0;
  for (int64_t e = 0, n = shape.numel(); e < n; ++e) {
    f(e, base);
    for (int d = nd - 1; d >= 0; --d) {
      int64_t step = d == dim ? 0 : strides[d];
      if (++index[d] < shape[d]) {
        base += step;
        break;
      }
      base -= step * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

void CpuBackend::gather(const Tensor& x_in, int dim, const Tensor& index_in, const Tensor& out) {
  Tensor x = dense(x_in), index = dense(index_in);
  const int64_t* idx = index.data<int64_t>();
  int64_t dim_stride = x.ndim() ? x.strides()[dim] : 0;
  dispatch_all(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_index_position(index.shape(), x.strides(), dim,
                            [&](int64_t e, int64_t base) { po[e] = px[base + idx[e] * dim_stride]; });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index_in, const Tensor& src_in) {
  Tensor index = dense(index_in), src = dense(src_in);
  const int64_t* idx = index.data<int64_t>();
  int64_t dim_stride = out.ndim() ? out.strides()[dim] : 0;
  dispatch_numeric(out.dtype(), "scatter_add", [&]<class T>() {
    T* po = out.data<T>();
    const T* ps = src.data<T>();
    for_each_index_position(index.shape(), out.strides(), dim,
                            [&](int64_t e, int64_t base) { po[base + idx[e] * dim_stride] += ps[e]; });
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
