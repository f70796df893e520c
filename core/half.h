// bfloat16 and float16 as 16-bit patterns, converted from float32 with round to nearest even (the
// IEEE default, what __float2bfloat16_rn / __float2half_rn do). Shared by the CPU (mixed-precision
// GEMM emulation) and CUDA (operands for cuBLAS), so both devices round operands identically.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace seqgrad::half {

SG_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
SG_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16: float32's sign and exponent with 7 mantissa bits. Overflow rounds to ±inf.
SG_HOST_DEVICE inline uint16_t bf16_from_float(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to the even pattern
  return static_cast<uint16_t>(u >> 16);
}
SG_HOST_DEVICE inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// float16: 5 exponent bits (bias 15), 10 mantissa bits; max 65504, subnormals down to 2^-24.
SG_HOST_DEVICE inline uint16_t f16_from_float(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                                               // >= 2^-14: normal
    uint32_t r = a + 0x0FFFu + ((a >> 13) & 1u);                        // ties to even at bit 13
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));     // rebias 127 -> 15
  }
  // subnormal: a multiple of 2^-24 (the scaling is exact; rintf rounds ties to even)
  auto m = static_cast<uint32_t>(rintf(bits_float(a) * 16777216.0f));
  return static_cast<uint16_t>(sign | m);  // m = 1024 is the smallest normal's pattern
}
SG_HOST_DEVICE inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return bits_float(sign | 0x7F800000u | (m << 13));  // inf / NaN
  if (e == 0) {                                                        // zero / subnormal: m · 2^-24
    float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

SG_HOST_DEVICE inline float round_bf16(float f) { return bf16_to_float(bf16_from_float(f)); }
SG_HOST_DEVICE inline float round_f16(float f) { return f16_to_float(f16_from_float(f)); }

}  // namespace seqgrad::half
