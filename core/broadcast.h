// The iteration geometry of N operands over one output shape, written once for both backends
// (the CPU loops in ops/cpu/loop.h, the CUDA kernels' arguments in ops/cuda/backend.cpp): each
// operand's element strides with 0 where it is broadcast, size-1 dimensions dropped, and
// dimensions that are contiguous for every operand merged, so inner loops are as long as they can be.
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace seqgrad {

template <int N>
struct BroadcastGeometry {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};  // in elements; element i of the row-major iteration is at Σ_d index_d · stride[k][d]
};

// Fills any geometry type with the members above (ndim, shape[], stride[N][]), such as CUDA's
// Strided<N>. A 0-d iteration becomes one dimension of size 1 with stride 0.
template <class Geometry, int N>
Geometry broadcast_geometry(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  const int nd = shape.size();
  int64_t stride[N][kMaxDims];
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ts[k];
    const int off = nd - t.ndim();
    for (int d = 0; d < nd; ++d) {
      const int td = d - off;
      const bool broadcast = td < 0 || (t.shape()[td] == 1 && shape[d] != 1);
      stride[k][d] = broadcast ? 0 : t.strides()[td];
    }
  }
  Geometry g{};
  int out = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    if (out > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (g.stride[k][out - 1] != stride[k][d] * shape[d]) mergeable = false;
      if (mergeable) {
        g.shape[out - 1] *= shape[d];
        for (int k = 0; k < N; ++k) g.stride[k][out - 1] = stride[k][d];
        continue;
      }
    }
    g.shape[out] = shape[d];
    for (int k = 0; k < N; ++k) g.stride[k][out] = stride[k][d];
    ++out;
  }
  if (out == 0) {  // a scalar
    g.shape[0] = 1;
    for (int k = 0; k < N; ++k) g.stride[k][0] = 0;
    out = 1;
  }
  g.ndim = out;
  return g;
}

template <int N>
BroadcastGeometry<N> broadcast_geometry(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  return broadcast_geometry<BroadcastGeometry<N>, N>(shape, ts);
}

}  // namespace seqgrad
