// CPU GEMM: OpenBLAS for what it can read from the strides (gemv for one-row products), small
// loops for tiny products (as ops/cuda/backend.cpp's cuBLAS calls).
#include <algorithm>
#include <vector>

#include "core/blas.h"
#include "core/half.h"
#include "ops/batch_invariant.h"
#include "ops/cpu/invariant_gemm.h"
#include "ops/cpu/onednn_gemm.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {

// ---- GEMM: read transposes and leading dimensions from the strides

struct MatrixArg {
  blas::Trans trans = blas::Trans::no;
  int64_t ld = 0;
  bool usable = false;
};

MatrixArg as_blas(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (row_stride >= std::max<int64_t>(cols, 1) || rows == 1))
    return {blas::Trans::no, std::max<int64_t>(rows == 1 ? cols : row_stride, 1), true};
  if (row_stride == 1 && (col_stride >= std::max<int64_t>(rows, 1) || cols == 1))
    return {blas::Trans::yes, std::max<int64_t>(cols == 1 ? rows : col_stride, 1), true};
  return {};
}

// A float32 operand rounded to bfloat16 / float16 values (core/half.h, as CUDA rounds its
// operands), held in float32: products of 16-bit values are exact in float32, so a float32 GEMM of
// the rounded operands is the mixed-precision product (16-bit inputs, float32 accumulation).
Tensor rounded_operand(const Tensor& t, GemmPrecision precision) {
  Tensor out = Tensor::empty(t.shape(), {.dtype = DType::f32});
  if (precision == GemmPrecision::bf16) map1<float, float>(t, out, [](float v) { return half::round_bf16(v); });
  else map1<float, float>(t, out, [](float v) { return half::round_f16(v); });
  return out;
}

// One product split across the thread pool: along N (columns of B and C) when N >= M, else along
// M (rows of A and C). Each piece is a single-threaded BLAS call; small products stay whole. Every
// piece packs the whole shared operand (A for an N split) again: about 16/w of the piece's time
// for a piece w columns wide (16 multiply-adds per cycle against ~1 cycle per packed element), so
// pieces are at least kMinPiece wide.
constexpr int64_t kSplitWork = int64_t{1} << 18;  // multiply-adds per piece, at least
constexpr int64_t kMinPiece = 256;

template <class T>
void blas_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) blas::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else blas::dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Tiny products (attention's per-sentence (1, K)·(K, D) and their backward, the d2l preset's
// layers) cost less as plain loops than as a BLAS call each. Row-major operands with element
// strides; the inner loop runs along contiguous memory: C's row (B not transposed) or a dot
// product (B transposed).
constexpr int64_t kTinyWork = 1 << 14;  // multiply-adds per product

template <class T>
void tiny_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t a_rs = ta == blas::Trans::no ? lda : 1, a_cs = ta == blas::Trans::no ? 1 : lda;
  for (int64_t r = 0; r < m; ++r) {
    T* cr = c + r * ldc;
    const T* ar = a + r * a_rs;
    if (tb == blas::Trans::no) {  // c_r = Σ_kk a_r,kk · b_kk (rows of B)
      T acc[256];
      for (int64_t j0 = 0; j0 < n; j0 += 256) {
        const int64_t nj = std::min<int64_t>(256, n - j0);
        std::fill(acc, acc + nj, T(0));
        for (int64_t kk = 0; kk < k; ++kk) {
          const T x = ar[kk * a_cs];
          const T* bk = b + kk * ldb + j0;
#pragma omp simd
          for (int64_t j = 0; j < nj; ++j) acc[j] += x * bk[j];
        }
        for (int64_t j = 0; j < nj; ++j) cr[j0 + j] = alpha * acc[j] + (beta == T(0) ? T(0) : beta * cr[j0 + j]);
      }
    } else {  // c_rj = a_r · b_j (B stored as (N, K) rows)
      for (int64_t j = 0; j < n; ++j) {
        const T* bj = b + j * ldb;
        T acc = 0;
        if (a_cs == 1) {
#pragma omp simd reduction(+ : acc)
          for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk] * bj[kk];
        } else {
          for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk * a_cs] * bj[kk];
        }
        cr[j] = alpha * acc + (beta == T(0) ? T(0) : beta * cr[j]);
      }
    }
  }
}

// One row times a matrix (c (1, n) = a (1, k) · op(B): greedy decoding's every product) as a
// matrix-vector product, split along n across the pool: OpenBLAS 0.3.21's sgemm packs the whole of
// B on every call, which for one row cost more than the product (48% of a greedy decoding step was
// sgemm_incopy, by perf), where gemv reads B once.
template <class T>
void row_gemm(blas::Trans ta, blas::Trans tb, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c) {
  const int64_t inc_a = ta == blas::Trans::no ? 1 : lda;  // a (1, k): a row, or a column of a (k, 1) matrix
  auto gemv = [&](blas::Trans t, int64_t rows, int64_t cols, const T* matrix, T* y) {
    if constexpr (std::is_same_v<T, float>) blas::sgemv(t, rows, cols, alpha, matrix, ldb, a, inc_a, beta, y);
    else blas::dgemv(t, rows, cols, alpha, matrix, ldb, a, inc_a, beta, y);
  };
  parallel_for(n, std::max<int64_t>(kMinPiece, kSplitWork / std::max<int64_t>(k, 1)), [&](int64_t j0, int64_t j1) {
    if (tb == blas::Trans::yes) gemv(blas::Trans::no, j1 - j0, k, b + j0 * ldb, c + j0);  // B (n, k): rows j0..j1 of B·a
    else gemv(blas::Trans::yes, k, j1 - j0, b + j0, c + j0);                              // B (k, n): columns of Bᵀ·a
  }, 16);
}

template <class T>
void split_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 1) {
    row_gemm(ta, tb, n, k, alpha, a, lda, b, ldb, beta, c);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {  // a few rows: oneDNN, which does not pack the weight
    const int64_t b_row = tb == blas::Trans::no ? ldb : 1, b_col = tb == blas::Trans::no ? 1 : ldb;
    if (m <= kFewRows && ta == blas::Trans::no && n * k >= kSplitWork &&
        few_rows_gemm(m, n, k, alpha, a, lda, b, b_row, b_col, beta, c, ldc))
      return;
  }
  const int64_t work = m * n * k;
  if (work < 2 * kSplitWork || std::max(m, n) < 2 * kMinPiece || get_num_threads() <= 1) {
    blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (n >= m) {
    int64_t grain = std::max<int64_t>(kMinPiece, kSplitWork / std::max<int64_t>(m * k, 1));
    parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      const T* bj = tb == blas::Trans::no ? b + j0 : b + j0 * ldb;
      blas_gemm(ta, tb, m, j1 - j0, k, alpha, a, lda, bj, ldb, beta, c + j0, ldc);
    }, 16);
  } else {
    int64_t grain = std::max<int64_t>(kMinPiece, kSplitWork / std::max<int64_t>(n * k, 1));
    parallel_for(m, grain, [&](int64_t i0, int64_t i1) {
      const T* ai = ta == blas::Trans::no ? a + i0 * lda : a + i0;
      blas_gemm(ta, tb, i1 - i0, n, k, alpha, ai, lda, b, ldb, beta, c + i0 * ldc, ldc);
    }, 16);
  }
}

void CpuBackend::gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, double alpha, double beta,
                      GemmPrecision precision) {
  // Autocast(bf16) on a CPU with AVX-512 BF16: oneDNN's bf16 matmul (ops/cpu/onednn_gemm.h)
  if (precision == GemmPrecision::bf16 && native_bf16_gemm(a_in, b_in, c, alpha, beta)) return;
  // Decoding (ops/batch_invariant.h): one kernel for every row count, so a row's bits are its own
  if (precision == GemmPrecision::full && c.dtype() == DType::f32 && BatchInvariantMode::is_enabled()) {
    invariant_gemm(a_in, b_in, c, alpha, beta);
    return;
  }
  int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a_in.shape()[2];
  bool reduced = precision != GemmPrecision::full && c.dtype() == DType::f32;
  auto prepare = [reduced, precision](const Tensor& t) {
    if (reduced) return rounded_operand(t, precision);
    MatrixArg arg = as_blas(t.shape()[1], t.shape()[2], t.strides()[1], t.strides()[2]);
    return arg.usable ? t : dense(t);
  };
  Tensor a = prepare(a_in), b = prepare(b_in);
  MatrixArg ma = as_blas(m, k, a.strides()[1], a.strides()[2]);
  MatrixArg mb = as_blas(k, n, b.strides()[1], b.strides()[2]);
  SG_ASSERT(c.strides()[2] == 1 || n == 1);  // rows of C are dense (one column: its stride is never read)
  int64_t ldc = std::max<int64_t>(m == 1 ? n : c.strides()[1], 1);
  auto a_stride = a.shape()[0] == 1 ? 0 : a.strides()[0];
  auto b_stride = b.shape()[0] == 1 ? 0 : b.strides()[0];
  dispatch_floating(c.dtype(), "matmul", [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    if (k == 0) {  // BLAS leaves C untouched for k = 0; the product of empty matrices is zero
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < n; ++j) {
            T& cij = pc[i * c.strides()[0] + r * ldc + j];
            cij = beta == 0 ? T(0) : cij * static_cast<T>(beta);  // beta = 0 ignores C (it may be garbage)
          }
      return;
    }
    const int64_t work = m * n * k;
    if (batch > 1 && work < kSplitWork) {  // many small products: whole products per thread
      parallel_for(batch, std::max<int64_t>(1, kSplitWork / std::max<int64_t>(work, 1)), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          auto product = work <= kTinyWork ? tiny_gemm<T> : blas_gemm<T>;
          product(ma.trans, mb.trans, m, n, k, T(alpha), pa + i * a_stride, ma.ld, pb + i * b_stride, mb.ld, T(beta),
                  pc + i * c.strides()[0], ldc);
        }
      });
      return;
    }
    if (batch == 1 && work <= kTinyWork) {
      tiny_gemm(ma.trans, mb.trans, m, n, k, T(alpha), pa, ma.ld, pb, mb.ld, T(beta), pc, ldc);
      return;
    }
    for (int64_t i = 0; i < batch; ++i)
      split_gemm(ma.trans, mb.trans, m, n, k, T(alpha), pa + i * a_stride, ma.ld, pb + i * b_stride, mb.ld, T(beta),
                 pc + i * c.strides()[0], ldc);
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
