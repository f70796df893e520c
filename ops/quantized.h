// Dynamic int8 quantization (PyTorch's quantize_dynamic arithmetic) and the int8 GEMM under it.
//
// A float32 linear layer y = x·Wᵀ + b becomes, per call:
//   weights (once):   W ≈ s_w[n] · Wq[n, k]          Wq int8, symmetric: s_w = max|W[n, :]| / 127.5
//                                                   (per output channel n, or one s_w per tensor)
//   activations:      x ≈ s_x · (xq - z_x)          xq uint8 in [0, q_max], s_x and z_x from this
//                                                   call's min/max of x (the range always holds 0)
//   product:          acc[m, n] = Σ_k xq[m, k] · Wq[n, k]               int32, exact
//                     y[m, n] = s_x · s_w[n] · (acc[m, n] - z_x · Σ_k Wq[n, k]) + b[n]    float32
// The int32 accumulation is exact, so every int8 GEMM backend (oneDNN, the reference loops) gives
// the same acc bit for bit (tests/test_ops_quantized.cpp); the float epilogue is ours, once.
//
// reduce_range: CPUs without VNNI multiply u8 × s8 with vpmaddubsw, which adds two products into a
// saturating int16: 255 · 127 · 2 = 64770 > 32767. PyTorch's fbgemm then quantizes activations to
// 7 bits (q_max = 127: 2 · 127 · 128 = 32512 fits). We do the same whenever the GEMM that will run
// could saturate (oneDNN on a CPU without VNNI); the reference loops and VNNI never saturate.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace seqgrad {

// How weight scales are shared: one per output channel (row of W, PyTorch's per_channel_dynamic_qconfig)
// or one for the whole tensor (default_dynamic_qconfig).
enum class QScheme : uint8_t { per_channel, per_tensor };
const char* qscheme_name(QScheme scheme);  // "per_channel", "per_tensor"

// An int8 weight (rows, cols) with float32 scales, symmetric (zero point 0). For a linear layer
// rows = out_features, cols = in_features.
struct QuantizedWeight {
  int64_t rows = 0, cols = 0;
  QScheme scheme = QScheme::per_channel;
  std::vector<int8_t> values;   // (rows, cols), row-major
  std::vector<float> scales;    // (rows,) per channel, (1,) per tensor
  std::vector<int32_t> row_sums;  // Σ_k values[n, k]: the zero-point correction of the product
  std::string name;             // the module it belongs to, for error messages ("decoder.out")
  std::shared_ptr<const void> packed;  // values in the int8 GEMM's own layout (oneDNN), or null

  float scale(int64_t row) const { return scales[scheme == QScheme::per_channel ? row : 0]; }
};

// Quantizes a float32/float64 (rows, cols) weight: s = max|w| / 127.5 over each row (or the whole
// tensor), q = clamp(round_half_even(w / s), -128, 127); an all-zero row gets s = 1 (its values
// are 0 either way). Throws naming `name` for a non-2-D, non-floating or non-finite weight.
QuantizedWeight quantize_weight(const Tensor& weight, QScheme scheme, const std::string& name);

// Builds a QuantizedWeight from stored int8 values and scales (a quantized checkpoint), checking
// that the sizes agree: values rows·cols, scales rows (per channel) or 1 (per tensor), each scale
// finite and positive. Errors name `name`.
QuantizedWeight make_quantized_weight(int64_t rows, int64_t cols, std::vector<int8_t> values,
                                      std::vector<float> scales, const std::string& name);

// s · q as a float32 (rows, cols) tensor.
Tensor dequantize(const QuantizedWeight& w);

// The uint8 affine parameters of one activation tensor, as PyTorch's ChooseQuantizationParams:
// the range [min(x_min, 0), max(x_max, 0)] maps onto [0, q_max] (q_max 255, or 127 with
// reduce_range); s = range / q_max (0.1 when the range is 0); z = round(-min / s) clamped to it.
struct ActivationParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t q_max = 255;
};
ActivationParams choose_activation_params(float x_min, float x_max, bool reduce_range);

// Whether the int8 GEMM that runs here needs 7-bit activations (oneDNN on a CPU without VNNI).
bool int8_needs_reduce_range();

// int32 c (m, n) = a (m, k) uint8 · bᵀ with b (n, k) int8, row-major and contiguous. Runs oneDNN's
// int8 matmul when the build has it (SEQGRAD_INT8_GEMM=reference forces the loops), else
// int8_gemm_reference; both are exact.
void int8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c);
// int8_gemm with b = w.values, read from w.packed when make_quantized_weight packed it.
void int8_gemm(int64_t m, const uint8_t* a, const QuantizedWeight& w, int32_t* c);
// The oracle: plain loops with int32 accumulation.
void int8_gemm_reference(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c);
// "onednn" or "reference": the backend int8_gemm uses now.
const char* int8_gemm_backend();

// The dynamically quantized linear layer (formula at the top of this file).
//   x: (..., cols) float32 on the CPU; w: (out = rows, cols); bias: (out,) float32 or undefined
//   -> y: (..., out) float32.
// Inference only: when grad mode records it (x or bias requires grad), backward throws, naming
// w.name. Errors name the op, the module and the shapes.
Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w, const Tensor& bias);

// A GRU layer (ops.h's gru_layer) with W_hh h + b_hh as an int8 product at each step (a GRU after
// nn::quantize_dynamic, nn/quantized.h), gates in float32; inference only.
Tensor gru_layer_quantized(const Tensor& xp, const Tensor& h0, const QuantizedWeight& w_hh, const Tensor& b_hh,
                           const Tensor& valid, Direction direction);

}  // namespace seqgrad
