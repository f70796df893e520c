// The products CpuBackend::gemm hands to oneDNN (ops/cpu/onednn.h), in a build with it:
//
// Native bf16 GEMMs for Autocast(bf16) on the CPU (core/autocast.h): on a CPU with AVX-512 BF16,
// bf16 products run as oneDNN's bf16 matmul (operands rounded to bfloat16 exactly as the emulation
// rounds them, float32 accumulation and output). Elsewhere, or when disabled, the emulation runs:
// a float32 GEMM of the rounded operands. The two agree to float32 accumulation order: each
// product of two bf16 values is exact in float32, so only the order of the k additions differs,
// |native - emulated| <= 2·k·ε·Σ|a||b| with ε = 2⁻²⁴ (tests/test_ops_bf16_gemm.cpp).
//
// Few-row float32 products (2 to kFewRows rows: a beam's hypotheses against each weight) as
// oneDNN's float32 matmul: OpenBLAS 0.3.21's sgemm packs the whole weight on every call, which
// for five rows cost more than the product (45% of a beam-5 decoding step in sgemm_incopy, by
// perf). One row goes to gemv instead (ops/cpu/gemm.cpp), which is faster still.
//
// Each product is split across seqgrad's pool, oneDNN running each piece on one thread.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace seqgrad::cpu {

// c = alpha · a·b + beta · c for a (batch, m, k), b (batch, k, n), c (batch, m, n) float32 (as
// Backend::gemm) as native bf16 GEMMs. Returns false without touching c when the native path is
// unavailable or disabled; the caller then emulates.
bool native_bf16_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta);

// Whether native bf16 GEMMs run here: oneDNN built in, AVX-512 BF16 present, not disabled by
// set_native_bf16_gemm(false) or SEQGRAD_BF16_GEMM=emulate.
bool native_bf16_gemm_available();
// Turns the native path off (true: back on, where available); for tests and benchmarks that
// compare it with the emulation.
void set_native_bf16_gemm(bool enabled);

// The native path's cache of operands in bf16 (weights, rounded once per optimizer step; see
// Bf16OperandCache in ops/cpu/onednn_gemm.cpp): products that found their operand rounded already
// (hits) or rounded it (misses), and the operands kept with their bytes.
struct Bf16CacheStats {
  int64_t hits = 0, misses = 0, entries = 0;
  size_t bytes = 0;
};
Bf16CacheStats bf16_operand_cache_stats();

// c (m, n, leading dimension ldc) = alpha · a·b + beta · c in float32 through oneDNN, for
// 2 <= m <= kFewRows; a (m, k) row-major with leading dimension lda, b (k, n) read through its
// element strides. Returns false without touching c in a build without oneDNN (the caller then
// runs OpenBLAS). beta = 0 ignores c, as BLAS.
constexpr int64_t kFewRows = 8;
bool few_rows_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                   int64_t b_row, int64_t b_col, float beta, float* c, int64_t ldc);

}  // namespace seqgrad::cpu
