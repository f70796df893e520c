// OpenBLAS, loaded at first use so seqgrad can pick the CPU kernels first: Debian's OpenBLAS
// 0.3.21 does not recognise newer AVX-512 CPUs and falls back to generic SSE3 kernels (~4x
// slower sgemm); where the CPU has AVX-512F and OPENBLAS_CORETYPE is unset we set it to SkylakeX.
#pragma once
#include <cstdint>
#include <string>

namespace seqgrad::blas {

enum class Trans : bool { no, yes };

// C = alpha * op(A) * op(B) + beta * C, row-major; op(A) is (M, K), op(B) is (K, N).
void sgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void dgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// y = alpha * op(A) * x + beta * y, A (M, N) row-major with leading dimension lda; op(A) is A
// (y has M entries) or Aᵀ (y has N). beta = 0 ignores y (it may hold NaN), as for gemm.
void sgemv(Trans ta, int64_t m, int64_t n, float alpha, const float* a, int64_t lda, const float* x, int64_t incx,
           float beta, float* y);
void dgemv(Trans ta, int64_t m, int64_t n, double alpha, const double* a, int64_t lda, const double* x,
           int64_t incx, double beta, double* y);
void set_num_threads(int n);

// What was loaded and which kernels run, e.g. "libopenblas.so.0 (openmp), core SkylakeX (set by seqgrad)".
std::string describe();

}  // namespace seqgrad::blas
