// The CPU's int8 GEMM kernels behind core/backend.h's int8 primitives: oneDNN's (ops/cpu/onednn.cpp)
// or the reference loops (ops/cpu/int8_reference.cpp). ops/cpu/dispatch.cpp picks one set at
// start-up, where the CPU-feature choices live; the CPU backend's int8 members forward to it.
#pragma once
#include <cstdint>

namespace seqgrad::cpu {

// One set of int8 kernels on contiguous row-major arrays. Every product is exact (int32 sums).
struct Int8Kernels {
  const char* name;  // "onednn" or "reference"
  // Whether gemm sums u8 · s8 pairs in a saturating int16 (oneDNN without VNNI): activations then
  // use 7 bits (ops/quantized.h's reduce_range).
  bool (*saturates)();
  // c (m, n) int32 = a (m, k) uint8 · bᵀ, b (n, k) int8
  void (*gemm)(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c);
  // The bytes of b (n, k) in the layout gemm_packed reads without repacking; 0 when the kernels
  // have no such layout (the plain one is theirs).
  int64_t (*packed_bytes)(int64_t n, int64_t k);
  void (*pack)(int64_t n, int64_t k, const int8_t* b, int8_t* packed);
  void (*unpack)(int64_t n, int64_t k, const int8_t* packed, int8_t* b);
  // gemm with b given packed
  void (*gemm_packed)(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* packed, int32_t* c);
};

// The kernels this process uses (dispatch.cpp): oneDNN's when the build has oneDNN, unless
// SEQGRAD_INT8_GEMM=reference forces the reference loops.
const Int8Kernels& int8_kernels();
// The reference loops: plain int32 accumulation, no packed layout. The oracle of the tests.
const Int8Kernels& int8_reference_kernels();
// oneDNN's int8 matmul with weights prepacked into its blocked layout (ops/cpu/onednn.cpp; only
// in a build with oneDNN).
const Int8Kernels& int8_onednn_kernels();

}  // namespace seqgrad::cpu
