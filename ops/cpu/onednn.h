// oneDNN (Debian libdnnl-dev 2.6) matmuls for the low-precision paths: the u8 × s8 -> s32 int8
// GEMM of ops/quantized.h (as ops/cpu/int8.h's int8_onednn_kernels) and the bf16 × bf16 -> f32
// GEMM of Autocast(bf16). Compiled only when meson finds oneDNN (option `onednn`), which then
// defines SG_ONEDNN for ops/; ops/cpu/dispatch.cpp and the bf16 GEMM guard their calls with it.
// Primitives are created once per shape and cached (creating one costs far more than a decoder
// step's product).
#pragma once
#include <cstdint>

namespace seqgrad::onednn {

// int32 c (m, n) = a (m, k) · bᵀ, b (n, k); all row-major and contiguous. Exact.
void int8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c);

// b (n, k) reordered into the blocked layout oneDNN's int8 kernels read (VNNI groups of 4 k
// values), so that a product does not repack b at every call, as PyTorch prepacks its weights:
// its size in bytes, the packing, and back to the plain layout.
int64_t int8_packed_bytes(int64_t n, int64_t k);
void pack_int8_weights(int64_t n, int64_t k, const int8_t* b, int8_t* packed);
void unpack_int8_weights(int64_t n, int64_t k, const int8_t* packed, int8_t* b);
// int8_gemm with b given packed; exact, the same int32 result.
void int8_gemm_packed(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* packed_b, int32_t* c);

// Whether oneDNN's int8 kernels use VNNI here (vpdpbusd: u8 × s8 products summed in int32, no
// saturation); without it they use vpmaddubsw, whose int16 pair sums saturate (ops/quantized.h).
bool cpu_has_vnni();

// Whether this CPU has native bf16 dot products (AVX-512 BF16) that oneDNN's bf16 matmul uses, and
// whether it also has AMX tiles, which oneDNN's bf16 matmul then uses instead.
bool cpu_has_bf16();
bool cpu_has_amx();

// float32 c (m, n) = a (m, k) · b (k, n) with a and b given by element strides (so transposed
// views need no copy) and already rounded to bfloat16 (the upper 16 bits of each float32):
// products of bf16 values are exact in float32 and accumulate in float32. c is row-major with
// leading dimension ldc. Runs on the calling thread alone (one OpenMP thread): the caller splits
// large products across seqgrad's pool.
void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_row, int64_t a_col,
               const uint16_t* b, int64_t b_row, int64_t b_col, float* c, int64_t ldc);

// The same in float32 (the few-row products of ops/cpu/onednn_gemm.h), on the calling thread alone.
void f32_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
              int64_t b_row, int64_t b_col, float* c, int64_t ldc);

}  // namespace seqgrad::onednn
