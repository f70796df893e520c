// Vectorizable float32 exp, sigmoid and tanh for the CPU kernels (libm's are scalar calls: tanh
// alone was a third of the additive attention's time). Range reduction and polynomials after
// Cephes (expf, tanhf); max relative error about 2e-7 for exp and sigmoid, 3e-7 for tanh, against
// libm. float64 keeps std:: (gradient checks and the reference results).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace seqgrad::cpu::vec {

// exp(x) = 2^k · exp(r), k = round(x / ln 2), |r| <= ln 2 / 2; clamped to float's range.
[[gnu::always_inline]] inline float exp(float x) {
  x = x < 88.37f ? x : 88.37f;  // saturates above 88.37 (callers stay below); NaN stays NaN
  x = x > -87.33654f ? x : -87.33654f;
  const float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (x - kf * 0.693359375f) - kf * -2.12194440e-4f;            // Cody-Waite ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(kf) + 127) << 23);  // 2^k, k in [-126, 127]
  return er * scale;
}

[[gnu::always_inline]] inline float sigmoid(float x) { return 1.0f / (1.0f + vec::exp(-x)); }

// tanh: a polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the exp form elsewhere.
[[gnu::always_inline]] inline float tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = vec::exp(2.0f * a);
  const float large = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? small : large;
}

// float64: the standard library, as the composed ops use it.
inline double exp(double x) { return std::exp(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

}  // namespace seqgrad::cpu::vec
