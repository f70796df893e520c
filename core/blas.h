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

void set_num_threads(int n);

// What was loaded and which kernels run, e.g. "libopenblas.so.0 (openmp), core SkylakeX (set by seqgrad)".
std::string describe();

}  // namespace seqgrad::blas
