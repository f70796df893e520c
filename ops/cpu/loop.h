// Strided iteration over N operands of one output shape, with broadcasting (stride 0) and
// dimension coalescing (core/broadcast.h), threaded by core/threads.h: the CPU kernels' loops.
#pragma once
#include <algorithm>
#include <array>

#include "core/broadcast.h"
#include "core/threads.h"
#include "ops/cpu/backend.h"

namespace seqgrad::cpu::SG_CPU_ISA {

template <int N>
struct Loop {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t stride[N][kMaxDims];  // bytes
  char* base[N];
  int64_t numel = 1;
};

// Operand views of `shape` in bytes: core/broadcast.h's geometry, each stride times its
// operand's element size.
template <int N>
Loop<N> make_loop(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  const BroadcastGeometry<N> g = broadcast_geometry<N>(shape, ts);
  Loop<N> L;
  L.ndim = g.ndim;
  for (int d = 0; d < g.ndim; ++d) L.shape[d] = g.shape[d];
  for (int k = 0; k < N; ++k) {
    L.base[k] = static_cast<char*>(ts[k]->raw_data());
    const auto es = static_cast<int64_t>(element_size(ts[k]->dtype()));
    for (int d = 0; d < g.ndim; ++d) L.stride[k][d] = g.stride[k][d] * es;
  }
  L.numel = shape.numel();
  return L;
}

// Calls inner(ptrs, inner_strides, n) over runs of the innermost dimension, threads splitting the
// flat index range.
template <int N, class Inner>
void run_loop(const Loop<N>& L, Inner&& inner, int64_t grain = kGrain) {
  if (L.numel == 0) return;
  int last = L.ndim - 1;
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = L.stride[k][last];
  parallel_for(L.numel, grain, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % L.shape[d];
      rem /= L.shape[d];
    }
    char* p[N];
    for (int k = 0; k < N; ++k) {
      p[k] = L.base[k];
      for (int d = 0; d <= last; ++d) p[k] += idx[d] * L.stride[k][d];
    }
    for (int64_t i = begin; i < end;) {
      int64_t n = std::min(L.shape[last] - idx[last], end - i);
      inner(p, inner_strides, n);
      i += n;
      idx[last] += n;
      for (int k = 0; k < N; ++k) p[k] += n * inner_strides[k];
      for (int d = last; d > 0 && idx[d] == L.shape[d]; --d) {  // carry
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) p[k] += L.stride[k][d - 1] - L.shape[d] * L.stride[k][d];
      }
    }
  });
}

// out[i] = f(a[i]) with contiguous fast path.
template <class O, class A, class F>
void map1(const Tensor& a, const Tensor& out, F f) {
  auto L = make_loop<2>(out.shape(), {&out, &a});
  run_loop(L, [&](char** p, const int64_t* s, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* x = reinterpret_cast<const A*>(p[1]);
    if (s[0] == sizeof(O) && s[1] == sizeof(A)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]));
    }
  });
}

template <class O, class A, class B, class F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  auto L = make_loop<3>(out.shape(), {&out, &a, &b});
  run_loop(L, [&](char** p, const int64_t* s, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* x = reinterpret_cast<const A*>(p[1]);
    const B* y = reinterpret_cast<const B*>(p[2]);
    if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == 0) {
      const B yv = *y;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(B)) {
      const A xv = *x;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
    }
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
