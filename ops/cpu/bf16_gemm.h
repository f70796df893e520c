// Native bf16 GEMMs for Autocast(bf16) on the CPU (core/autocast.h): on a CPU with AVX-512 BF16
// and a build with oneDNN, CpuBackend::gemm hands bf16 products to oneDNN's bf16 matmul (operands
// rounded to bfloat16 exactly as the emulation rounds them, float32 accumulation and output).
// Elsewhere, or when disabled, the emulation runs: a float32 GEMM of the rounded operands.
//
// The two agree to float32 accumulation order: each product of two bf16 values is exact in
// float32, so only the order of the k additions differs, |native - emulated| <= 2·k·ε·Σ|a||b|
// with ε = 2⁻²⁴ (tests/test_ops_autocast.cpp).
#pragma once
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

}  // namespace seqgrad::cpu
