// Dynamic int8 quantization (PyTorch's quantize_dynamic arithmetic) and the int8 GEMM under it.
//
// A float32 linear layer y = x·Wᵀ + b becomes, per call:
//   weights (once):   W ≈ s_w[n] · Wq[n, k]          Wq int8, symmetric: s_w = max|W[n, :]| / 127.5
//                                                   (per output channel n, or one s_w per tensor)
//   activations:      x[m] ≈ s_x[m] · (xq[m] - z_x[m])   xq uint8 in [0, q_max]; each row m of x
//                                                   gets s_x[m] and z_x[m] from its own min/max (the
//                                                   range always holds 0), PyTorch's per-call choice
//                                                   applied per row (per token, as CTranslate2 scales)
//   product:          acc[m, n] = Σ_k xq[m, k] · Wq[n, k]               int32, exact
//                     y[m, n] = s_x[m] · s_w[n] · (acc[m, n] - z_x[m] · Σ_k Wq[n, k]) + b[n]    float32
// A row's codes, its exact int32 product and its epilogue read that row alone, so its result is
// the same bit for bit whatever other rows share the call: a sentence's int8 products do not
// depend on the batch it is decoded in. Row m equals PyTorch's quantize_dynamic on row m alone.
// The int32 product is the backend's int8_gemm primitive (core/backend.h; on the CPU oneDNN's
// kernels or the reference loops, chosen in ops/cpu/dispatch.cpp). Its accumulation is exact, so
// every kernel gives the same acc bit for bit (tests/test_ops_quantized.cpp); the float epilogue
// is ours, once. Weights, scales and codes are tensors: int8 values, float32 scales.
//
// reduce_range: CPUs without VNNI multiply u8 × s8 with vpmaddubsw, which adds two products into a
// saturating int16: 255 · 127 · 2 = 64770 > 32767. PyTorch's fbgemm then quantizes activations to
// 7 bits (q_max = 127: 2 · 127 · 128 = 32512 fits). We do the same whenever the GEMM that will run
// could saturate (oneDNN on a CPU without VNNI); the reference loops and VNNI never saturate.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/ops.h"

namespace seqgrad {

// How weight scales are shared: one per output channel (row of W, PyTorch's per_channel_dynamic_qconfig)
// or one for the whole tensor (default_dynamic_qconfig).
enum class QScheme : uint8_t { per_channel, per_tensor };
const char* qscheme_name(QScheme scheme);  // "per_channel", "per_tensor"

// Where an int8 weight is read: by the int8 GEMM (a Linear's or GRU's weight), which may keep it
// in the backend's packed layout only, or row by row (an embedding table), which keeps it plain.
enum class Int8Use : uint8_t { gemm, rows };

// An int8 weight (rows, cols) with float32 scales, symmetric (zero point 0). For a linear layer
// rows = out_features, cols = in_features. It holds its values once: plain, or (Int8Use::gemm on a
// backend with a packed layout) only in that layout, as PyTorch's packed params do.
struct QuantizedWeight {
  int64_t rows = 0, cols = 0;
  QScheme scheme = QScheme::per_channel;
  Tensor values;    // (rows, cols) int8, row-major; undefined when `packed` holds them
  Tensor packed;    // 1-D int8 in the backend's int8_gemm layout (Backend::int8_pack), or undefined
  Tensor scales;    // (rows,) per channel, (1,) per tensor; float32
  Tensor row_sums;  // (rows,) int32, Σ_k values[n, k]: the zero-point correction of the product
  std::string name;  // the module it belongs to, for error messages ("decoder.out")

  float scale(int64_t row) const { return scales.data<float>()[scheme == QScheme::per_channel ? row : 0]; }
  // The plain (rows, cols) int8 values (unpacked from `packed` when that is where they are).
  Tensor int8_values() const;
  // Bytes held by values, packed, scales and row sums.
  int64_t nbytes() const;
};

// Quantizes a float32/float64 (rows, cols) weight: s = max|w| / 127.5 over each row (or the whole
// tensor), q = clamp(round_half_even(w / s), -128, 127); an all-zero row gets s = float32's
// epsilon (its values are 0 either way). Throws naming `name` for a non-2-D, non-floating or
// non-finite weight.
QuantizedWeight quantize_weight(const Tensor& weight, QScheme scheme, const std::string& name,
                                Int8Use use = Int8Use::gemm);

// Builds a QuantizedWeight from int8 values (rows, cols) and float32 scales (a quantized
// checkpoint), checking that they agree: scales (rows,) (per channel) or (1,) (per tensor), each
// finite and positive. Errors name `name`. For Int8Use::gemm the values move into the backend's
// packed layout when it has one.
QuantizedWeight make_quantized_weight(const Tensor& values, const Tensor& scales, const std::string& name,
                                      Int8Use use = Int8Use::gemm);

// s · q as a float32 (rows, cols) tensor.
Tensor dequantize(const QuantizedWeight& w);

// The uint8 affine parameters of one activation row, as PyTorch's ChooseQuantizationParams:
// the range [min(x_min, 0), max(x_max, 0)] maps onto [0, q_max] (q_max 255, or 127 with
// reduce_range); s = range / q_max (0.1 when the range is 0); z = round(-min / s) clamped to it.
struct ActivationParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t q_max = 255;
};
ActivationParams choose_activation_params(float x_min, float x_max, bool reduce_range);

// Whether the CPU's int8 GEMM needs 7-bit activations (oneDNN on a CPU without VNNI), and which
// kernels it runs ("onednn" or "reference"): Backend::int8_gemm_info of the CPU backend.
bool int8_needs_reduce_range();
const char* int8_gemm_backend();

// int32 c (m, n) = a (m, k) uint8 · wᵀ through the backend's int8_gemm primitive; a: (m, cols)
// uint8 contiguous -> (m, rows) int32. Exact.
Tensor int8_gemm(const Tensor& a, const QuantizedWeight& w);
// The oracle: plain loops with int32 accumulation on row-major arrays (ops/cpu/int8_reference.cpp).
void int8_gemm_reference(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c);

// The dynamically quantized linear layer (formula at the top of this file), every row of x
// quantized with its own range.
//   x: (..., cols) float32 on the CPU; w: (out = rows, cols); bias: (out,) float32 or undefined
//   -> y: (..., out) float32.
// Inference only: when grad mode records it (x or bias requires grad), backward throws, naming
// w.name. Errors name the op, the module and the shapes.
Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w, const Tensor& bias);

// The int8 embedding lookup: y[..., e] = s[id] · q[id, e] (s[0] per tensor), the rows gathered in
// int8 and scaled in float32, equal to embedding(dequantize(w), ids). ids: int64 of any shape, each
// in [0, rows) -> (ids..., cols) float32. No gradient (a quantized table is not trained).
Tensor quantized_embedding(const Tensor& ids, const QuantizedWeight& w);

// A GRU layer (ops.h's gru_layer) with W_hh h + b_hh as an int8 product at each step (a GRU after
// nn::quantize_dynamic, nn/quantized.h), gates in float32; inference only.
Tensor gru_layer_quantized(const Tensor& xp, const Tensor& h0, const QuantizedWeight& w_hh, const Tensor& b_hh,
                           const Tensor& keep, Direction direction);

}  // namespace seqgrad
