// Helpers shared by the .cu files: launch geometry, strided offsets, and dispatch on ElemType.
#pragma once
#include <cstdint>

#include "ops/cuda/check.h"
#include "ops/cuda/kernels.h"

namespace seqgrad::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped: each thread then handles several).
inline unsigned blocks_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks));
}

// Kernels with a block per row (softmax, cross-entropy, layer normalisation, ...): threads per
// block (a power of two: block_sum), and blocks for `rows` rows (capped: a block then strides
// over several rows).
constexpr int kRowThreads = 128;
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows < 65536 ? rows : 65536));
}

#define SG_GRID_STRIDE_LOOP(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Element offsets of the N operands for iteration index i.
template <int N>
__device__ inline void offsets_of(const Strided<N>& g, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    int64_t size = g.shape[d];
    int64_t index = i % size;
    i /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += index * g.stride[k][d];
  }
}

// Block-wide sum or max of one value per thread (every thread gets the result); blockDim.x is a
// power of two and scratch holds blockDim.x values.
template <class T>
__device__ inline T block_sum(T v, T* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) scratch[threadIdx.x] += scratch[threadIdx.x + step];
    __syncthreads();
  }
  T total = scratch[0];
  __syncthreads();
  return total;
}

template <class T>
__device__ inline T block_max(T v, T* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) {
      T other = scratch[threadIdx.x + step];
      if (scratch[threadIdx.x] < other) scratch[threadIdx.x] = other;  // std::max's rule
    }
    __syncthreads();
  }
  T best = scratch[0];
  __syncthreads();
  return best;
}

// Sum over the 32 lanes of a warp (every lane of the warp must call it; lane 0 gets the total).
template <class T>
__device__ inline T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Calls f.template operator()<T>() with T the C++ type of `type`.
template <class F>
void dispatch_type(ElemType type, F&& f) {
  switch (type) {
    case ElemType::f32: return f.template operator()<float>();
    case ElemType::f64: return f.template operator()<double>();
    case ElemType::i64: return f.template operator()<int64_t>();
    case ElemType::b8: return f.template operator()<bool>();
  }
}
template <class F>
void dispatch_numeric(ElemType type, F&& f) {  // callers have refused bool
  switch (type) {
    case ElemType::f32: return f.template operator()<float>();
    case ElemType::f64: return f.template operator()<double>();
    default: return f.template operator()<int64_t>();
  }
}
template <class F>
void dispatch_floating(ElemType type, F&& f) {  // callers have refused the others
  if (type == ElemType::f64) return f.template operator()<double>();
  return f.template operator()<float>();
}

}  // namespace seqgrad::cuda
