// The enumerations of the backend primitives (core/backend.h). Kept free of other headers so CUDA
// kernels (compiled by nvcc) can switch on them too.
#pragma once
#include <cstdint>

namespace seqgrad {

enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, tanh, sigmoid, relu, abs, sign, reciprocal,
  clamp,       // min(max(x, p.a), p.b)
  pow_scalar,  // x ^ p.a
  affine,      // p.a * x + p.b
  logical_not,
  // activations and special functions (floating types only)
  log1p, expm1, erf,
  softplus,  // x where p.a * x > p.b, else log(1 + exp(p.a * x)) / p.a  (p.a = beta, p.b = threshold)
  gelu,      // x Φ(x) = x (1 + erf(x / √2)) / 2
  gelu_tanh, // x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2
  log_sigmoid, silu,
};

constexpr const char* unary_op_name(UnaryOp op) {
  constexpr const char* kNames[] = {"neg",  "exp",        "log",   "sqrt",       "tanh",  "sigmoid",    "relu",
                                    "abs",  "sign",       "reciprocal", "clamp", "pow_scalar", "affine",
                                    "logical_not", "log1p", "expm1", "erf", "softplus", "gelu", "gelu_tanh",
                                    "log_sigmoid", "silu"};
  return kNames[static_cast<int>(op)];
}

enum class BinaryOp : uint8_t {
  add, sub, mul, div, pow, maximum, minimum,
  eq, ne, lt, le, gt, ge, logical_and, logical_or,  // bool results
  // fused backward helpers (each has a composed twin in ops/)
  tanh_backward,     // dy * (1 - y^2), with b = y
  sigmoid_backward,  // dy * y * (1 - y), with b = y
  relu_backward,     // dy * (x > 0), with b = x
};

constexpr const char* binary_op_name(BinaryOp op) {
  constexpr const char* kNames[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
                                    "le", "gt", "ge", "logical_and", "logical_or", "tanh_backward",
                                    "sigmoid_backward", "relu_backward"};
  return kNames[static_cast<int>(op)];
}

enum class ReduceOp : uint8_t { sum, max, min, argmax, argmin };

struct UnaryParams {
  double a = 0, b = 0;
};

// The arithmetic of a float32 matrix product: float32 throughout, or each operand rounded to
// bfloat16 / float16 (round to nearest even, core/half.h) with float32 products and accumulation.
// Mixed precision (core/autocast.h) selects the reduced ones; float64 products are always full.
enum class GemmPrecision : uint8_t { full, bf16, f16 };

// Fused kernels a backend may provide besides the primitives (core/backend.h). The op that uses
// one runs its composed twin on a backend without it (each fused op names its twin).
enum class FusedOp : uint8_t {
  gru_cell, cross_entropy, additive_scores, adam_update, additive_attention_chunk,
  int8_gemm,  // the int8 GEMM of dynamic quantization (no composed twin: CPU only)
  layer_norm,
};

constexpr const char* fused_op_name(FusedOp op) {
  constexpr const char* kNames[] = {"gru_cell", "cross_entropy", "additive_scores", "adam_update",
                                    "additive_attention_chunk", "int8_gemm", "layer_norm"};
  return kNames[static_cast<int>(op)];
}

// Which int8 GEMM kernels a backend runs (Backend::int8_gemm_info): their name ("onednn",
// "reference") and whether their u8 · s8 pair sums saturate in int16, which dynamic quantization
// then avoids with 7-bit activations (ops/quantized.h's reduce_range).
struct Int8GemmInfo {
  const char* kernels = "";
  bool saturates = false;
};

// One Adam/AdamW update (Backend::adam_update; the formulas: optim/optimizer.h): the options and
// the 1-based step whose bias corrections apply. decoupled_weight_decay is AdamW's p *= 1 - lr·wd,
// otherwise weight_decay adds wd·p to the gradient (Adam's L2 term).
struct AdamParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false, decoupled_weight_decay = false;
  int64_t step = 1;
};

}  // namespace seqgrad
