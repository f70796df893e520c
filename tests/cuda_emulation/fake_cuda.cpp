// A test double for machines without a GPU: the CUDA runtime calls, cuBLAS (a column-major reference
// GEMM written from the cuBLAS documentation, which also checks the leading dimensions) and the
// kernel launchers of ops/cuda/kernels.h (sequential ports of the .cu code; the block algorithms of
// reduce, softmax, topk, layer normalisation and cross-entropy and the warp sums of the additive energies are emulated
// thread by thread; the fused kernels call core/fused_math.h as fused.cu does), all on host memory. With it,
// ops/cuda/backend.cpp and memory.cpp run for real: tensor geometry, dtype checks, the cuBLAS
// argument mapping, the caching allocator and its out-of-memory path. The .cu files themselves are
// not exercised: they need a GPU (tests/test_cuda_parity.cpp on a CUDA build). Fresh "device"
// memory is filled with 0xFF bytes (NaN), so a kernel that reads what nobody wrote shows up.
// Keep the ports in step with the .cu code they mirror.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <type_traits>
#include "core/backend_math.h"
#include "core/fused_math.h"
#include "core/half.h"
#include "core/philox.h"
#include "ops/cuda/kernels.h"

extern "C" {
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) {
  if (n > (size_t{1} << 40)) return cudaErrorMemoryAllocation;
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  std::memset(*p, 0xFF, n);  // garbage (NaN patterns) like fresh device memory might hold
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaErrorMemoryAllocation ? "out of memory" : "error"; }
const char* cudaGetErrorName(cudaError_t e) { return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaError"; }
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = reinterpret_cast<cublasHandle_t>(0x1); return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "cublas error"; }
const char* cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_X"; }
}

namespace {
int gemm_calls = 0;
// column-major reference: C = alpha op(A) op(B) + beta C, per the cuBLAS documentation
template <class TA, class TC, class Load>
cublasStatus_t ref_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha, const TA* A,
                        int lda, long long sa, const TA* B, int ldb, long long sb, double beta, TC* C, int ldc,
                        long long sc, int batch, Load load) {
  ++gemm_calls;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int p = 0; p < k; ++p) {
          double a = load(ta == CUBLAS_OP_N ? A[b * sa + i + (long long)p * lda] : A[b * sa + p + (long long)i * lda]);
          double bb = load(tb == CUBLAS_OP_N ? B[b * sb + p + (long long)j * ldb] : B[b * sb + j + (long long)p * ldb]);
          acc += a * bb;
        }
        TC& c = C[b * sc + i + (long long)j * ldc];
        c = static_cast<TC>(alpha * acc + (beta == 0 ? 0.0 : beta * c));
      }
  return CUBLAS_STATUS_SUCCESS;
}
}  // namespace

extern "C" {
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta, float* C, int ldc,
                                         long long sc, int batch) {
  return ref_gemm(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch, [](float v) { return (double)v; });
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sa,
                                         const double* B, int ldb, long long sb, const double* beta, double* C,
                                         int ldc, long long sc, int batch) {
  return ref_gemm(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch, [](double v) { return v; });
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType at, int lda,
                                          long long sa, const void* B, cudaDataType bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType ct, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (at != bt || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  bool bf = at == CUDA_R_16BF;
  if (!bf && at != CUDA_R_16F) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto load = [bf](uint16_t h) { return (double)(bf ? seqgrad::half::bf16_to_float(h) : seqgrad::half::f16_to_float(h)); };
  return ref_gemm(ta, tb, m, n, k, *(const float*)alpha, (const uint16_t*)A, lda, sa, (const uint16_t*)B, ldb, sb,
                  *(const float*)beta, (float*)C, ldc, sc, batch, load);
}
}

// ---- kernels.h, ported
namespace seqgrad::cuda {
namespace {
template <int N>
void offsets_of(const Strided<N>& g, int64_t i, int64_t (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    int64_t size = g.shape[d];
    int64_t index = i % size;
    i /= size;
    for (int k = 0; k < N; ++k) off[k] += index * g.stride[k][d];
  }
}
template <class F> void dtype(ElemType t, F&& f) {
  switch (t) {
    case ElemType::f32: return f.template operator()<float>();
    case ElemType::f64: return f.template operator()<double>();
    case ElemType::i64: return f.template operator()<int64_t>();
    case ElemType::b8: return f.template operator()<bool>();
  }
}
template <class F> void numeric(ElemType t, F&& f) {
  switch (t) {
    case ElemType::f32: return f.template operator()<float>();
    case ElemType::f64: return f.template operator()<double>();
    default: return f.template operator()<int64_t>();
  }
}
}  // namespace

void copy(ElemType dt, void* dst, ElemType st, const void* src, const Strided<2>& g, int64_t n) {
  dtype(dt, [&]<class D>() { dtype(st, [&]<class S>() {
    for (int64_t i = 0; i < n; ++i) { int64_t o[2]; offsets_of(g, i, o); ((D*)dst)[o[0]] = static_cast<D>(((const S*)src)[o[1]]); }
  }); });
}
void fill(ElemType t, void* dst, double v, const Strided<1>& g, int64_t n) {
  dtype(t, [&]<class T>() { for (int64_t i = 0; i < n; ++i) { int64_t o[1]; offsets_of(g, i, o); ((T*)dst)[o[0]] = static_cast<T>(v); } });
}
void fill_pattern(void* dst, const void* p, size_t e, size_t c) {
  for (size_t i = 0; i < c; ++i) std::memcpy((char*)dst + i * e, p, e);
}
void unary(UnaryOp op, ElemType t, void* out, const void* x, double a, double b, const Strided<2>& g, int64_t n) {
  if (op == UnaryOp::logical_not) {
    for (int64_t i = 0; i < n; ++i) { int64_t o[2]; offsets_of(g, i, o); ((bool*)out)[o[0]] = !((const bool*)x)[o[1]]; }
    return;
  }
  numeric(t, [&]<class T>() {
    for (int64_t i = 0; i < n; ++i) { int64_t o[2]; offsets_of(g, i, o); ((T*)out)[o[0]] = math::unary_value(op, ((const T*)x)[o[1]], (T)a, (T)b); }
  });
}
void binary(BinaryOp op, ElemType t, void* out, const void* a, const void* b, const Strided<3>& g, int64_t n) {
  if (math::is_logical(op)) {
    for (int64_t i = 0; i < n; ++i) { int64_t o[3]; offsets_of(g, i, o); ((bool*)out)[o[0]] = math::logical_value(op, ((const bool*)a)[o[1]], ((const bool*)b)[o[2]]); }
  } else if (math::is_comparison(op)) {
    dtype(t, [&]<class T>() { for (int64_t i = 0; i < n; ++i) { int64_t o[3]; offsets_of(g, i, o); ((bool*)out)[o[0]] = math::compare_value(op, ((const T*)a)[o[1]], ((const T*)b)[o[2]]); } });
  } else {
    numeric(t, [&]<class T>() { for (int64_t i = 0; i < n; ++i) { int64_t o[3]; offsets_of(g, i, o); ((T*)out)[o[0]] = math::binary_value(op, ((const T*)a)[o[1]], ((const T*)b)[o[2]]); } });
  }
}
void where(ElemType t, void* out, const bool* c, const void* a, const void* b, const Strided<4>& g, int64_t n) {
  dtype(t, [&]<class T>() { for (int64_t i = 0; i < n; ++i) { int64_t o[4]; offsets_of(g, i, o); ((T*)out)[o[0]] = c[o[1]] ? ((const T*)a)[o[2]] : ((const T*)b)[o[3]]; } });
}
void round_to_16bit(GemmPrecision p, const float* x, const Strided<2>& g, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) { int64_t o[2]; offsets_of(g, i, o); out[o[0]] = p == GemmPrecision::bf16 ? half::bf16_from_float(x[o[1]]) : half::f16_from_float(x[o[1]]); }
}

// reduce: the serial and the block algorithm (block emulated with 256 sequential "threads")
namespace {
int64_t offset_in(int64_t flat, int nd, const int64_t* shape, const int64_t* stride) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) { off += (flat % shape[d]) * stride[d]; flat /= shape[d]; }
  return off;
}
template <class T> using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
template <class T> struct Partial { Acc<T> sum; T value; int64_t index; };
template <class T> Partial<T> combine(ReduceOp op, Partial<T> p, Partial<T> q) {
  switch (op) {
    case ReduceOp::sum: p.sum += q.sum; return p;
    case ReduceOp::max: p.value = math::max_combine(p.value, q.value); return p;
    case ReduceOp::min: p.value = math::min_combine(p.value, q.value); return p;
    default:
      if (q.index >= 0 && (p.index < 0 || math::arg_better(op == ReduceOp::argmax, q.value, q.index, p.value, p.index))) p.value = q.value, p.index = q.index;
      return p;
  }
}
}  // namespace
void reduce(ReduceOp op, ElemType t, const void* xv, void* out, const ReduceGeometry& g) {
  if (g.n_out == 0 || g.n_reduced == 0) return;
  numeric(t, [&]<class T>() {
    const T* x = (const T*)xv;
    auto element = [&](int64_t r, int64_t base) { T v = x[base + offset_in(r, g.reduced_ndim, g.reduced_shape, g.reduced_stride)]; return Partial<T>{(Acc<T>)v, v, r}; };
    auto write = [&](int64_t off, const Partial<T>& p) {
      if (op == ReduceOp::sum) ((T*)out)[off] = (T)p.sum;
      else if (op == ReduceOp::max || op == ReduceOp::min) ((T*)out)[off] = p.value;
      else ((int64_t*)out)[off] = p.index;
    };
    for (int64_t o = 0; o < g.n_out; ++o) {
      int64_t base = offset_in(o, g.kept_ndim, g.kept_shape, g.kept_stride);
      int64_t out_off = offset_in(o, g.kept_ndim, g.kept_shape, g.out_stride);
      if (g.n_reduced < 256) {
        Partial<T> acc = element(0, base);
        for (int64_t r = 1; r < g.n_reduced; ++r) acc = combine(op, acc, element(r, base));
        write(out_off, acc);
      } else {
        std::vector<Partial<T>> shared(256);
        for (int th = 0; th < 256; ++th) {
          Partial<T> acc{0, T(0), -1}; bool any = false;
          for (int64_t r = th; r < g.n_reduced; r += 256) { auto e = element(r, base); acc = any ? combine(op, acc, e) : e; any = true; }
          shared[th] = acc;
        }
        for (int step = 128; step > 0; step /= 2)
          for (int th = 0; th < step; ++th) shared[th] = combine(op, shared[th], shared[th + step]);
        write(out_off, shared[0]);
      }
    }
  });
}

void softmax_rows(ElemType t, const void* xv, void* outv, int64_t rows, int64_t cols, bool log) {
  numeric(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T* x = (const T*)xv; T* out = (T*)outv;
      for (int64_t r = 0; r < rows; ++r) {
        const T* in = x + r * cols; T* o = out + r * cols;
        std::vector<T> part(128, -INFINITY);
        for (int th = 0; th < 128; ++th) for (int64_t j = th; j < cols; j += 128) if (part[th] < in[j]) part[th] = in[j];
        for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) if (part[th] < part[th + s]) part[th] = part[th + s];
        T mx = part[0]; if (mx == -INFINITY) mx = 0;
        std::vector<T> sum(128, 0);
        if (log) {
          for (int th = 0; th < 128; ++th) for (int64_t j = th; j < cols; j += 128) sum[th] += std::exp(in[j] - mx);
          for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) sum[th] += sum[th + s];
          T lse = mx + std::log(sum[0]);
          for (int64_t j = 0; j < cols; ++j) o[j] = in[j] - lse;
        } else {
          for (int th = 0; th < 128; ++th) for (int64_t j = th; j < cols; j += 128) sum[th] += (o[j] = std::exp(in[j] - mx));
          for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) sum[th] += sum[th + s];
          T inv = T(1) / sum[0];
          for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
        }
      }
    }
  });
}
void softmax_rows_backward(ElemType t, const void* yv, const void* dyv, void* dxv, int64_t rows, int64_t cols, bool log) {
  numeric(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* y = (const T*)yv + r * cols; const T* g = (const T*)dyv + r * cols; T* o = (T*)dxv + r * cols;
        std::vector<T> part(128, 0);
        for (int th = 0; th < 128; ++th) for (int64_t j = th; j < cols; j += 128) part[th] += log ? g[j] : g[j] * y[j];
        for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) part[th] += part[th + s];
        T dot = part[0];
        for (int64_t j = 0; j < cols; ++j) o[j] = log ? g[j] - std::exp(y[j]) * dot : y[j] * (g[j] - dot);
      }
    }
  });
}
void topk(ElemType t, const void* xv, int64_t rows, int64_t cols, int64_t k, bool largest, void* values, int64_t* indices) {
  numeric(t, [&]<class T>() {
    auto before = [&](T v, int64_t i, T w, int64_t j) { if (v == w) return i < j; return largest ? v > w : v < w; };
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = (const T*)xv + r * cols;
      T pv = 0; int64_t pi = -1;
      for (int64_t p = 0; p < k; ++p) {
        std::vector<T> bv(128, 0); std::vector<int64_t> bi(128, -1);
        for (int th = 0; th < 128; ++th)
          for (int64_t j = th; j < cols; j += 128) {
            T v = row[j];
            if (pi >= 0 && !before(pv, pi, v, j)) continue;
            if (bi[th] < 0 || before(v, j, bv[th], bi[th])) bv[th] = v, bi[th] = j;
          }
        for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th)
          if (bi[th + s] >= 0 && (bi[th] < 0 || before(bv[th + s], bi[th + s], bv[th], bi[th]))) bv[th] = bv[th + s], bi[th] = bi[th + s];
        pv = bv[0]; pi = bi[0];
        ((T*)values)[r * k + p] = pv; indices[r * k + p] = pi;
      }
    }
  });
}
void index_select(size_t es, const void* x, const int64_t* idx, void* out, int64_t outer, int64_t n_in, int64_t n_idx, int64_t inner) {
  for (int64_t e = 0; e < outer * n_idx * inner; ++e) {
    int64_t i = e % inner, j = (e / inner) % n_idx, o = e / (inner * n_idx);
    std::memcpy((char*)out + e * es, (const char*)x + ((o * n_in + idx[j]) * inner + i) * es, es);
  }
}
void index_add(ElemType t, void* out, const int64_t* idx, const void* src, int64_t outer, int64_t n_out, int64_t n_idx, int64_t inner) {
  numeric(t, [&]<class T>() {
    for (int64_t e = 0; e < outer * n_idx * inner; ++e) {
      int64_t i = e % inner, j = (e / inner) % n_idx, o = e / (inner * n_idx);
      ((T*)out)[(o * n_out + idx[j]) * inner + i] += ((const T*)src)[e];
    }
  });
}
namespace {
int64_t data_offset(const IndexGeometry& g, const int64_t* index, int64_t e) {
  int64_t off = 0, rest = e;
  for (int d = g.ndim - 1; d >= 0; --d) { int64_t c = rest % g.index_shape[d]; rest /= g.index_shape[d]; if (d != g.dim) off += c * g.data_stride[d]; }
  return off + index[e] * (g.ndim > 0 ? g.data_stride[g.dim] : 0);
}
}  // namespace
void gather(size_t es, const void* x, const int64_t* idx, void* out, const IndexGeometry& g, int64_t n) {
  for (int64_t e = 0; e < n; ++e) std::memcpy((char*)out + e * es, (const char*)x + data_offset(g, idx, e) * es, es);
}
void scatter_add(ElemType t, void* out, const int64_t* idx, const void* src, const IndexGeometry& g, int64_t n) {
  numeric(t, [&]<class T>() { for (int64_t e = 0; e < n; ++e) ((T*)out)[data_offset(g, idx, e)] += ((const T*)src)[e]; });
}
void random_uniform(ElemType t, void* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset) {
  numeric(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      for (int64_t i = 0; i < n; ++i) {
        double u = std::is_same_v<T, float> ? (double)uniform_at(seed, offset, i) : uniform_at_f64(seed, offset, i);
        ((T*)out)[i] = (T)(a + (b - a) * u);
      }
  });
}
void random_normal(ElemType t, void* out, int64_t n, double mean, double sd, uint64_t seed, uint64_t offset) {
  numeric(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) for (int64_t i = 0; i < n; ++i) ((T*)out)[i] = (T)(mean + sd * normal_at(seed, offset, i));
  });
}
void dropout(ElemType t, const void* x, void* out, int64_t n, double keep, double scale, uint64_t seed, uint64_t offset) {
  numeric(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      for (int64_t i = 0; i < n; ++i)
      {
        const T factor = dropout_factor(uniform_at_as<T>(seed, offset, i), (T)keep, (T)scale);
        ((T*)out)[i] = x ? ((const T*)x)[i] * factor : factor;
      }
  });
}

// ---- fused.cu
namespace {
template <class F> void floating(ElemType t, F&& f) {
  if (t == ElemType::f64) return f.template operator()<double>();
  return f.template operator()<float>();
}
}  // namespace
void gru_cell(ElemType t, const void* xpv, const void* hpv, const void* hv, const bool* valid, void* outv, void* gv,
              int64_t B, int64_t H) {
  floating(t, [&]<class T>() {
    const T *xp = (const T*)xpv, *hp = (const T*)hpv, *h = (const T*)hv;
    T *out = (T*)outv, *gates = (T*)gv;
    for (int64_t i = 0; i < B * H; ++i) {
      int64_t b = i / H, j = i % H;
      if (valid && !valid[b]) { out[i] = h[i]; continue; }
      const T* x = xp + b * 3 * H; const T* p = hp + b * 3 * H; T* g = gates + b * 4 * H;
      auto s = math::gru_cell_value(x[j], x[H + j], x[2 * H + j], p[j], p[H + j], p[2 * H + j], h[i]);
      out[i] = s.h_next;
      g[j] = s.r, g[H + j] = s.z, g[2 * H + j] = s.n, g[3 * H + j] = p[2 * H + j];
    }
  });
}
void gru_cell_backward(ElemType t, const void* gv, const void* hv, const bool* valid, const void* dyv, const void* cv,
                       void* dxv, void* dpv, void* dhv, int64_t B, int64_t H) {
  floating(t, [&]<class T>() {
    const T *gates = (const T*)gv, *h = (const T*)hv, *dy = (const T*)dyv, *dc = (const T*)cv;
    T *dxp = (T*)dxv, *dhp = (T*)dpv, *dh = (T*)dhv;
    for (int64_t i = 0; i < B * H; ++i) {
      int64_t b = i / H, j = i % H;
      T g = (dy ? dy[i] : T(0)) + dc[i];
      T* dx = dxp + b * 3 * H; T* dp = dhp + b * 3 * H;
      if (valid && !valid[b]) { dh[i] = g; dx[j] = dx[H + j] = dx[2 * H + j] = 0; dp[j] = dp[H + j] = dp[2 * H + j] = 0; continue; }
      const T* gb = gates + b * 4 * H;
      auto d = math::gru_cell_grad(g, gb[j], gb[H + j], gb[2 * H + j], gb[3 * H + j], h[i]);
      dx[j] = d.dar, dx[H + j] = d.daz, dx[2 * H + j] = d.dan;
      dp[j] = d.dar, dp[H + j] = d.daz, dp[2 * H + j] = d.dpn;
      dh[i] = d.dh;
    }
  });
}
void additive_scores(ElemType t, const void* qv, const void* kv, const void* wv, void* sv, int64_t B, int64_t Q,
                     int64_t K, int64_t A) {
  floating(t, [&]<class T>() {
    const T *qp = (const T*)qv, *kp = (const T*)kv, *w = (const T*)wv;
    for (int64_t r = 0; r < B * Q; ++r) {
      int64_t b = r / Q;
      for (int64_t k = 0; k < K; ++k) {
        T lane[32];  // a warp: lane l sums features l, l + 32, ...; then the shuffle-down tree
        for (int l = 0; l < 32; ++l) {
          lane[l] = 0;
          for (int64_t a = l; a < A; a += 32) lane[l] += math::additive_term(qp[r * A + a], kp[(b * K + k) * A + a], w[a]);
        }
        for (int off = 16; off > 0; off /= 2) for (int l = 0; l + off < 32; ++l) lane[l] += lane[l + off];
        ((T*)sv)[r * K + k] = lane[0];
      }
    }
  });
}
void additive_scores_backward(ElemType t, const void* qv, const void* kv, const void* wv, const void* dsv, void* dqv,
                              void* dkv, void* dwv, void* rowsv, int64_t B, int64_t Q, int64_t K, int64_t A) {
  floating(t, [&]<class T>() {
    const T *qp = (const T*)qv, *kp = (const T*)kv, *w = (const T*)wv, *ds = (const T*)dsv;
    T *dqp = (T*)dqv, *dkp = (T*)dkv, *rows = (T*)rowsv;
    for (int64_t r = 0; r < B * Q; ++r)  // pass 1: dqp and dw's per-query partials
      for (int64_t a = 0; a < A; ++a) {
        T dq = 0, dw = 0;
        for (int64_t k = 0; k < K; ++k) {
          T d = ds[r * K + k];
          if (d == T(0)) continue;
          auto g = math::additive_term_grad(d, qp[r * A + a], kp[((r / Q) * K + k) * A + a], w[a]);
          dq += g.dz, dw += g.dw;
        }
        dqp[r * A + a] = dq, rows[r * A + a] = dw;
      }
    for (int64_t r = 0; r < B * K; ++r)  // pass 2: dkp
      for (int64_t a = 0; a < A; ++a) {
        int64_t b = r / K, k = r % K;
        T dk = 0;
        for (int64_t q = 0; q < Q; ++q) {
          T d = ds[(b * Q + q) * K + k];
          if (d == T(0)) continue;
          dk += math::additive_term_grad(d, qp[(b * Q + q) * A + a], kp[r * A + a], w[a]).dz;
        }
        dkp[r * A + a] = dk;
      }
    for (int64_t a = 0; a < A; ++a) {  // pass 3: dw
      T acc = 0;
      for (int64_t r = 0; r < B * Q; ++r) acc += rows[r * A + a];
      ((T*)dwv)[a] = acc;
    }
  });
}
void cross_entropy_rows(ElemType t, const void* xv, const int64_t* y, double eps, int64_t ignore, void* lossv,
                        void* lsev, int64_t N, int64_t C) {
  floating(t, [&]<class T>() {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    for (int64_t r = 0; r < N; ++r) {
      if (y[r] == ignore) {
        ((T*)lossv)[r] = ((T*)lsev)[r] = T(0);
        continue;
      }
      const T* x = (const T*)xv + r * C;
      std::vector<T> mx(128, -INFINITY), sum(128, 0), total(128, 0);  // a block of 128 threads
      for (int th = 0; th < 128; ++th) for (int64_t c = th; c < C; c += 128) if (mx[th] < x[c]) mx[th] = x[c];
      for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) if (mx[th] < mx[th + s]) mx[th] = mx[th + s];
      T m = mx[0] == -INFINITY ? T(0) : mx[0];
      for (int th = 0; th < 128; ++th) for (int64_t c = th; c < C; c += 128) sum[th] += std::exp(x[c] - m), total[th] += x[c];
      for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) sum[th] += sum[th + s], total[th] += total[th + s];
      T l = m + std::log(sum[0]);
      ((T*)lsev)[r] = l;
      ((T*)lossv)[r] = (y[r] >= 0 && y[r] < C) ? math::cross_entropy_loss(l, x[y[r]], total[0], keep, spread) : T(NAN);
    }
  });
}
void cross_entropy_rows_backward(ElemType t, const void* xv, const int64_t* y, const void* lsev, const void* gv,
                                 int64_t g_stride, double eps, int64_t ignore, void* dxv, int64_t N, int64_t C) {
  floating(t, [&]<class T>() {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    for (int64_t i = 0; i < N * C; ++i) {
      int64_t r = i / C, c = i % C;
      ((T*)dxv)[i] = y[r] == ignore ? T(0) : math::cross_entropy_grad(((const T*)gv)[r * g_stride], ((const T*)xv)[i], ((const T*)lsev)[r], c == y[r], keep, spread);
    }
  });
}
// block_sum over a block of 128 threads, thread th holding Σ_{j ≡ th (mod 128)} term(j): the tree of launch.cuh
template <class T, class Term>
T block_sum_128(int64_t D, Term term) {
  std::vector<T> part(128, T(0));
  for (int th = 0; th < 128; ++th) for (int64_t j = th; j < D; j += 128) part[th] += term(j);
  for (int s = 64; s > 0; s /= 2) for (int th = 0; th < s; ++th) part[th] += part[th + s];
  return part[0];
}
void layer_norm_rows(ElemType t, const void* xv, const void* wv, const void* bv, double eps, void* yv, void* mv,
                     void* rv, int64_t N, int64_t D) {
  floating(t, [&]<class T>() {
    const T *w = (const T*)wv, *b = (const T*)bv, inv_d = T(1) / (T)D;
    for (int64_t r = 0; r < N; ++r) {
      const T* x = (const T*)xv + r * D;
      const T mu = block_sum_128<T>(D, [&](int64_t j) { return x[j]; }) * inv_d;
      const T rs = T(1) / std::sqrt(block_sum_128<T>(D, [&](int64_t j) { return (x[j] - mu) * (x[j] - mu); }) * inv_d + (T)eps);
      for (int64_t j = 0; j < D; ++j) ((T*)yv)[r * D + j] = math::layer_norm_value(x[j], mu, rs, w ? w[j] : T(1), b ? b[j] : T(0));
      ((T*)mv)[r] = mu, ((T*)rv)[r] = rs;
    }
  });
}
void layer_norm_rows_backward(ElemType t, const void* xv, const void* wv, const void* mv, const void* rv, const void* gv,
                              void* dxv, void* dwv, void* dbv, int64_t N, int64_t D) {
  floating(t, [&]<class T>() {
    const T *w = (const T*)wv, *m = (const T*)mv, *rstd = (const T*)rv, inv_d = T(1) / (T)D;
    for (int64_t r = 0; r < N; ++r) {
      const T* x = (const T*)xv + r * D;
      const T* g = (const T*)gv + r * D;
      auto gj = [&](int64_t j) { return w ? g[j] * w[j] : g[j]; };
      const T mean_g = block_sum_128<T>(D, gj) * inv_d;
      const T mean_gx = block_sum_128<T>(D, [&](int64_t j) { return gj(j) * (x[j] - m[r]) * rstd[r]; }) * inv_d;
      for (int64_t j = 0; j < D; ++j) ((T*)dxv)[r * D + j] = math::layer_norm_grad(gj(j), (x[j] - m[r]) * rstd[r], rstd[r], mean_g, mean_gx);
    }
    for (int64_t j = 0; j < D; ++j) {  // one thread per column, rows in order
      T sw = 0, sb = 0;
      for (int64_t r = 0; r < N; ++r) {
        const T g = ((const T*)gv)[r * D + j];
        sw += g * (((const T*)xv)[r * D + j] - m[r]) * rstd[r];
        sb += g;
      }
      if (dwv) ((T*)dwv)[j] = sw;
      if (dbv) ((T*)dbv)[j] = sb;
    }
  });
}
void adam_update(ElemType t, void* pv, const void* gv, void* mv, void* vv, void* xv, int64_t n, const AdamParams& s) {
  floating(t, [&]<class T>() {
    const auto c = math::adam_scalars<T>(s);
    const bool decoupled = s.decoupled_weight_decay, coupled = !decoupled && s.weight_decay != 0.0;
    T *p = (T*)pv, *m = (T*)mv, *v = (T*)vv, *vmax = (T*)xv;
    const T* g = (const T*)gv;
    auto run = [&]<bool kD, bool kC, bool kA>() {
      for (int64_t i = 0; i < n; ++i) {
        auto e = math::adam_element<kD, kC, kA>(p[i], g[i], m[i], v[i], kA ? vmax[i] : T(0), c);
        m[i] = e.m, v[i] = e.v, p[i] = e.p;
        if constexpr (kA) vmax[i] = e.vmax;
      }
    };
    if (decoupled) s.amsgrad ? run.template operator()<true, false, true>() : run.template operator()<true, false, false>();
    else if (coupled) s.amsgrad ? run.template operator()<false, true, true>() : run.template operator()<false, true, false>();
    else s.amsgrad ? run.template operator()<false, false, true>() : run.template operator()<false, false, false>();
  });
}
}  // namespace seqgrad::cuda
