// Reductions over any set of dimensions: one thread per output when the reduced blocks are short,
// one block per output (shared-memory tree) when they are long. Sums accumulate in double (integers
// in int64) as on the CPU; max/min/argmax/argmin use core/backend_math.h's NaN and tie rules.
#include "core/backend_math.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

constexpr int64_t kShortReduction = kThreads;  // below this, a thread reduces one output serially

__device__ inline int64_t offset_in(int64_t flat, int ndim, const int64_t* shape, const int64_t* stride) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (flat % shape[d]) * stride[d];
    flat /= shape[d];
  }
  return off;
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// A partial result: the running sum, extreme value, or (value, index) of the best element.
template <class T>
struct Partial {
  Acc<T> sum;
  T value;
  int64_t index;
};

template <class T>
__device__ inline Partial<T> combine(ReduceOp op, Partial<T> p, Partial<T> q) {
  switch (op) {
    case ReduceOp::sum: p.sum += q.sum; return p;
    case ReduceOp::max: p.value = math::max_combine(p.value, q.value); return p;
    case ReduceOp::min: p.value = math::min_combine(p.value, q.value); return p;
    default:
      if (q.index >= 0 && (p.index < 0 || math::arg_better(op == ReduceOp::argmax, q.value, q.index, p.value, p.index)))
        p.value = q.value, p.index = q.index;
      return p;
  }
}

template <class T>
__device__ inline Partial<T> element(const T* x, int64_t r, int64_t base, const ReduceGeometry& g) {
  T v = x[base + offset_in(r, g.reduced_ndim, g.reduced_shape, g.reduced_stride)];
  return {static_cast<Acc<T>>(v), v, r};
}

template <class T>
__device__ inline void write(ReduceOp op, void* out, int64_t off, const Partial<T>& p) {
  if (op == ReduceOp::sum) static_cast<T*>(out)[off] = static_cast<T>(p.sum);
  else if (op == ReduceOp::max || op == ReduceOp::min) static_cast<T*>(out)[off] = p.value;
  else static_cast<int64_t*>(out)[off] = p.index;
}

template <class T>
__global__ void reduce_serial_kernel(ReduceOp op, const T* x, void* out, ReduceGeometry g) {
  SG_GRID_STRIDE_LOOP(o, g.n_out) {
    int64_t base = offset_in(o, g.kept_ndim, g.kept_shape, g.kept_stride);
    Partial<T> acc = element(x, 0, base, g);
    for (int64_t r = 1; r < g.n_reduced; ++r) acc = combine(op, acc, element(x, r, base, g));
    write(op, out, offset_in(o, g.kept_ndim, g.kept_shape, g.out_stride), acc);
  }
}

template <class T>
__global__ void reduce_block_kernel(ReduceOp op, const T* x, void* out, ReduceGeometry g) {
  __shared__ Partial<T> shared[kThreads];
  for (int64_t o = blockIdx.x; o < g.n_out; o += gridDim.x) {
    int64_t base = offset_in(o, g.kept_ndim, g.kept_shape, g.kept_stride);
    Partial<T> acc{0, T(0), -1};  // index -1: empty (no element seen yet)
    bool any = false;
    for (int64_t r = threadIdx.x; r < g.n_reduced; r += blockDim.x) {
      Partial<T> e = element(x, r, base, g);
      acc = any ? combine(op, acc, e) : e;
      any = true;
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    // every thread saw at least one element: n_reduced >= kShortReduction >= blockDim.x
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
      if (threadIdx.x < step) shared[threadIdx.x] = combine(op, shared[threadIdx.x], shared[threadIdx.x + step]);
      __syncthreads();
    }
    if (threadIdx.x == 0) write(op, out, offset_in(o, g.kept_ndim, g.kept_shape, g.out_stride), shared[0]);
    __syncthreads();
  }
}

}  // namespace

void reduce(ReduceOp op, ElemType type, const void* x, void* out, const ReduceGeometry& g) {
  if (g.n_out == 0 || g.n_reduced == 0) return;
  dispatch_numeric(type, [&]<class T>() {
    const T* px = static_cast<const T*>(x);
    if (g.n_reduced < kShortReduction) {
      reduce_serial_kernel<T><<<blocks_for(g.n_out), kThreads>>>(op, px, out, g);
    } else {
      auto blocks = static_cast<unsigned>(g.n_out < 65536 ? g.n_out : 65536);
      reduce_block_kernel<T><<<blocks, kThreads>>>(op, px, out, g);
    }
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
