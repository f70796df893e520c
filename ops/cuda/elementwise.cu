// Element-wise kernels: copy (casting), fill, unary, binary, where, and the 16-bit rounding of GEMM
// operands. One kernel per family switches on the op; the arithmetic is core/backend_math.h's.
#include "core/backend_math.h"
#include "core/half.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

template <class D, class S>
__global__ void copy_kernel(D* dst, const S* src, Strided<2> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    offsets_of(g, i, off);
    dst[off[0]] = static_cast<D>(src[off[1]]);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, T value, Strided<1> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    offsets_of(g, i, off);
    dst[off[0]] = value;
  }
}

template <class T>
__global__ void fill_dense_kernel(T* dst, T value, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) dst[i] = value;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, T* out, const T* x, T a, T b, Strided<2> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    offsets_of(g, i, off);
    out[off[0]] = math::unary_value(op, x[off[1]], a, b);
  }
}

__global__ void logical_not_kernel(bool* out, const bool* x, Strided<2> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    offsets_of(g, i, off);
    out[off[0]] = !x[off[1]];
  }
}

template <class T>
__global__ void binary_kernel(BinaryOp op, T* out, const T* a, const T* b, Strided<3> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    offsets_of(g, i, off);
    out[off[0]] = math::binary_value(op, a[off[1]], b[off[2]]);
  }
}

template <class T>
__global__ void compare_kernel(BinaryOp op, bool* out, const T* a, const T* b, Strided<3> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    offsets_of(g, i, off);
    out[off[0]] = math::compare_value(op, a[off[1]], b[off[2]]);
  }
}

__global__ void logical_kernel(BinaryOp op, bool* out, const bool* a, const bool* b, Strided<3> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    offsets_of(g, i, off);
    out[off[0]] = math::logical_value(op, a[off[1]], b[off[2]]);
  }
}

template <class T>
__global__ void where_kernel(T* out, const bool* cond, const T* a, const T* b, Strided<4> g, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[4];
    offsets_of(g, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

__global__ void round_16bit_kernel(bool bf16, const float* x, Strided<2> g, uint16_t* out, int64_t n) {
  SG_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    offsets_of(g, i, off);
    float v = x[off[1]];
    out[off[0]] = bf16 ? half::bf16_from_float(v) : half::f16_from_float(v);
  }
}

}  // namespace

void copy(ElemType dst_type, void* dst, ElemType src_type, const void* src, const Strided<2>& g, int64_t n) {
  if (n == 0) return;
  dispatch_type(dst_type, [&]<class D>() {
    dispatch_type(src_type, [&]<class S>() {
      copy_kernel<D, S><<<blocks_for(n), kThreads>>>(static_cast<D*>(dst), static_cast<const S*>(src), g, n);
    });
  });
  SG_CUDA_CHECK_LAUNCH();
}

void fill(ElemType type, void* dst, double value, const Strided<1>& g, int64_t n) {
  if (n == 0) return;
  dispatch_type(type, [&]<class T>() {
    fill_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(dst), static_cast<T>(value), g, n);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void fill_pattern(void* dst, const void* pattern, size_t element_size, size_t count) {
  if (count == 0) return;
  auto n = static_cast<int64_t>(count);
  switch (element_size) {
    case 1: {
      SG_CUDA_CHECK(cudaMemsetAsync(dst, *static_cast<const unsigned char*>(pattern), count));
      return;
    }
    case 2: fill_dense_kernel<<<blocks_for(n), kThreads>>>(static_cast<uint16_t*>(dst), *static_cast<const uint16_t*>(pattern), n); break;
    case 4: fill_dense_kernel<<<blocks_for(n), kThreads>>>(static_cast<uint32_t*>(dst), *static_cast<const uint32_t*>(pattern), n); break;
    default: fill_dense_kernel<<<blocks_for(n), kThreads>>>(static_cast<uint64_t*>(dst), *static_cast<const uint64_t*>(pattern), n); break;
  }
  SG_CUDA_CHECK_LAUNCH();
}

void unary(UnaryOp op, ElemType type, void* out, const void* x, double a, double b, const Strided<2>& g,
           int64_t n) {
  if (n == 0) return;
  if (op == UnaryOp::logical_not) {
    logical_not_kernel<<<blocks_for(n), kThreads>>>(static_cast<bool*>(out), static_cast<const bool*>(x), g, n);
  } else {
    dispatch_numeric(type, [&]<class T>() {
      unary_kernel<T><<<blocks_for(n), kThreads>>>(op, static_cast<T*>(out), static_cast<const T*>(x),
                                                   static_cast<T>(a), static_cast<T>(b), g, n);
    });
  }
  SG_CUDA_CHECK_LAUNCH();
}

void binary(BinaryOp op, ElemType in_type, void* out, const void* a, const void* b, const Strided<3>& g,
            int64_t n) {
  if (n == 0) return;
  if (math::is_logical(op)) {
    logical_kernel<<<blocks_for(n), kThreads>>>(op, static_cast<bool*>(out), static_cast<const bool*>(a),
                                                static_cast<const bool*>(b), g, n);
  } else if (math::is_comparison(op)) {
    dispatch_type(in_type, [&]<class T>() {
      compare_kernel<T><<<blocks_for(n), kThreads>>>(op, static_cast<bool*>(out), static_cast<const T*>(a),
                                                     static_cast<const T*>(b), g, n);
    });
  } else {
    dispatch_numeric(in_type, [&]<class T>() {
      binary_kernel<T><<<blocks_for(n), kThreads>>>(op, static_cast<T*>(out), static_cast<const T*>(a),
                                                    static_cast<const T*>(b), g, n);
    });
  }
  SG_CUDA_CHECK_LAUNCH();
}

void where(ElemType type, void* out, const bool* cond, const void* a, const void* b, const Strided<4>& g,
           int64_t n) {
  if (n == 0) return;
  dispatch_type(type, [&]<class T>() {
    where_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(out), cond, static_cast<const T*>(a),
                                                 static_cast<const T*>(b), g, n);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void round_to_16bit(GemmPrecision precision, const float* x, const Strided<2>& g, uint16_t* out, int64_t n) {
  if (n == 0) return;
  round_16bit_kernel<<<blocks_for(n), kThreads>>>(precision == GemmPrecision::bf16, x, g, out, n);
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
