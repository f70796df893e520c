// Indexing kernels: index_select / gather copy elements; index_add / scatter_add accumulate with
// atomicAdd, so repeated indices sum (in an unspecified order: float sums may differ in the last
// bits from the CPU's sequential order).
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

template <class T>
__device__ inline void atomic_accumulate(T* dst, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {  // two's complement: the unsigned add wraps the same way
    atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(dst, v);
  }
}

// Elements moved as raw words of their size (bool 1, float 4, double / int64 8 bytes).
template <class W>
__global__ void index_select_kernel(const W* x, const int64_t* index, W* out, int64_t outer, int64_t n_in,
                                    int64_t n_index, int64_t inner) {
  SG_GRID_STRIDE_LOOP(e, outer * n_index * inner) {
    int64_t i = e % inner, j = (e / inner) % n_index, o = e / (inner * n_index);
    out[e] = x[(o * n_in + index[j]) * inner + i];
  }
}

template <class T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer, int64_t n_out,
                                 int64_t n_index, int64_t inner) {
  SG_GRID_STRIDE_LOOP(e, outer * n_index * inner) {
    int64_t i = e % inner, j = (e / inner) % n_index, o = e / (inner * n_index);
    atomic_accumulate(out + (o * n_out + index[j]) * inner + i, src[e]);
  }
}

// Offset in the data tensor of index element e (see IndexGeometry).
__device__ inline int64_t data_offset(const IndexGeometry& g, const int64_t* index, int64_t e) {
  int64_t off = 0, rest = e;
  for (int d = g.ndim - 1; d >= 0; --d) {
    int64_t coordinate = rest % g.index_shape[d];
    rest /= g.index_shape[d];
    if (d != g.dim) off += coordinate * g.data_stride[d];
  }
  return off + index[e] * (g.ndim > 0 ? g.data_stride[g.dim] : 0);
}

template <class W>
__global__ void gather_kernel(const W* x, const int64_t* index, W* out, IndexGeometry g, int64_t n) {
  SG_GRID_STRIDE_LOOP(e, n) out[e] = x[data_offset(g, index, e)];
}

template <class T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, IndexGeometry g, int64_t n) {
  SG_GRID_STRIDE_LOOP(e, n) atomic_accumulate(out + data_offset(g, index, e), src[e]);
}

template <class F>
void dispatch_word(size_t element_size, F&& f) {
  switch (element_size) {
    case 1: return f.template operator()<uint8_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

}  // namespace

void index_select(size_t element_size, const void* x, const int64_t* index, void* out, int64_t outer, int64_t n_in,
                  int64_t n_index, int64_t inner) {
  int64_t n = outer * n_index * inner;
  if (n == 0) return;
  dispatch_word(element_size, [&]<class W>() {
    index_select_kernel<W><<<blocks_for(n), kThreads>>>(static_cast<const W*>(x), index, static_cast<W*>(out), outer,
                                                        n_in, n_index, inner);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void index_add(ElemType type, void* out, const int64_t* index, const void* src, int64_t outer, int64_t n_out,
               int64_t n_index, int64_t inner) {
  int64_t n = outer * n_index * inner;
  if (n == 0) return;
  dispatch_numeric(type, [&]<class T>() {
    index_add_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(out), index, static_cast<const T*>(src), outer,
                                                     n_out, n_index, inner);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void gather(size_t element_size, const void* x, const int64_t* index, void* out, const IndexGeometry& g, int64_t n) {
  if (n == 0) return;
  dispatch_word(element_size, [&]<class W>() {
    gather_kernel<W><<<blocks_for(n), kThreads>>>(static_cast<const W*>(x), index, static_cast<W*>(out), g, n);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void scatter_add(ElemType type, void* out, const int64_t* index, const void* src, const IndexGeometry& g,
                 int64_t n) {
  if (n == 0) return;
  dispatch_numeric(type, [&]<class T>() {
    scatter_add_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(out), index, static_cast<const T*>(src), g, n);
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
