// The arithmetic of the element-wise primitives, defined once for every backend: the CPU loops
// (ops/cpu) and the CUDA kernels (ops/cuda) both call these, so the two compute the same formula
// (the last bit can still differ where CUDA's exp/log/tanh/pow differ from the C library's).
#pragma once
#include <cmath>
#include <type_traits>

#include "core/backend_ops.h"
#include "core/host_device.h"

namespace seqgrad::math {

template <class T>
SG_HOST_DEVICE inline T sigmoid(T x) {  // never exp of a large positive number
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

// Integer tensors support these unary ops; the others need a floating type.
SG_HOST_DEVICE constexpr bool unary_works_on_integers(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign || op == UnaryOp::relu ||
         op == UnaryOp::clamp || op == UnaryOp::affine;
}

// y = op(v) with the op's parameters a, b (UnaryParams); every op but logical_not (bool -> bool).
template <UnaryOp Op, class T>
SG_HOST_DEVICE inline T unary_value(T v, T a, T b) {
  if constexpr (Op == UnaryOp::neg) return -v;
  else if constexpr (Op == UnaryOp::abs) return v < 0 ? -v : v;
  else if constexpr (Op == UnaryOp::sign) return T((v > 0) - (v < 0));
  else if constexpr (Op == UnaryOp::relu) return v > 0 || v != v ? v : T(0);  // NaN stays NaN
  else if constexpr (Op == UnaryOp::clamp) {  // std::min(std::max(v, a), b): NaN stays NaN
    T lo = v < a ? a : v;
    return b < lo ? b : lo;
  } else if constexpr (Op == UnaryOp::affine) return a * v + b;
  else if constexpr (Op == UnaryOp::exp) return std::exp(v);
  else if constexpr (Op == UnaryOp::log) return std::log(v);
  else if constexpr (Op == UnaryOp::sqrt) return std::sqrt(v);
  else if constexpr (Op == UnaryOp::tanh) return std::tanh(v);
  else if constexpr (Op == UnaryOp::sigmoid) return sigmoid(v);
  else if constexpr (Op == UnaryOp::reciprocal) return T(1) / v;
  else if constexpr (Op == UnaryOp::pow_scalar) return a == T(2) ? v * v : std::pow(v, a);
  else if constexpr (Op == UnaryOp::log1p) return std::log1p(v);
  else if constexpr (Op == UnaryOp::expm1) return std::expm1(v);
  else if constexpr (Op == UnaryOp::erf) return std::erf(v);
  else if constexpr (Op == UnaryOp::softplus) return a * v > b ? v : std::log1p(std::exp(a * v)) / a;
  else if constexpr (Op == UnaryOp::gelu) return T(0.5) * v * (T(1) + std::erf(v * T(0.70710678118654752440)));
  else if constexpr (Op == UnaryOp::gelu_tanh) {
    T inner = T(0.79788456080286535588) * (v + T(0.044715) * v * v * v);  // √(2/π) (x + 0.044715 x³)
    return T(0.5) * v * (T(1) + std::tanh(inner));
  } else if constexpr (Op == UnaryOp::log_sigmoid) {  // min(x, 0) - log(1 + e^-|x|): no overflow
    return (v < 0 ? v : T(0)) - std::log1p(std::exp(v < 0 ? v : -v));
  } else if constexpr (Op == UnaryOp::silu) return v * sigmoid(v);
  else return v;  // logical_not is not a value op
}

template <UnaryOp Op, class T>
SG_HOST_DEVICE constexpr bool unary_supported() {
  return Op != UnaryOp::logical_not && (std::is_floating_point_v<T> || unary_works_on_integers(Op));
}

// The same with the op chosen at run time (one CUDA kernel per family switches on it); an
// unsupported (op, type) pair gives 0, and backends refuse it before calling.
template <class T>
SG_HOST_DEVICE inline T unary_value(UnaryOp op, T v, T a, T b) {
  switch (op) {
#define SG_UNARY_CASE(name) \
  case UnaryOp::name:       \
    if constexpr (unary_supported<UnaryOp::name, T>()) return unary_value<UnaryOp::name>(v, a, b); \
    break;
    SG_UNARY_CASE(neg) SG_UNARY_CASE(exp) SG_UNARY_CASE(log) SG_UNARY_CASE(sqrt) SG_UNARY_CASE(tanh)
    SG_UNARY_CASE(sigmoid) SG_UNARY_CASE(relu) SG_UNARY_CASE(abs) SG_UNARY_CASE(sign)
    SG_UNARY_CASE(reciprocal) SG_UNARY_CASE(clamp) SG_UNARY_CASE(pow_scalar) SG_UNARY_CASE(affine)
    SG_UNARY_CASE(log1p) SG_UNARY_CASE(expm1) SG_UNARY_CASE(erf) SG_UNARY_CASE(softplus) SG_UNARY_CASE(gelu)
    SG_UNARY_CASE(gelu_tanh) SG_UNARY_CASE(log_sigmoid) SG_UNARY_CASE(silu)
#undef SG_UNARY_CASE
    default: break;
  }
  return T(0);
}

// Host-side dispatch: calls f.template operator()<Op>() for the op chosen at run time, so a CPU
// loop is compiled once per op (and vectorised) around the same unary_value<Op>.
template <class F>
decltype(auto) with_unary_op(UnaryOp op, F&& f) {
  switch (op) {
#define SG_UNARY_CASE(name) \
  case UnaryOp::name: return f.template operator()<UnaryOp::name>();
    SG_UNARY_CASE(neg) SG_UNARY_CASE(exp) SG_UNARY_CASE(log) SG_UNARY_CASE(sqrt) SG_UNARY_CASE(tanh)
    SG_UNARY_CASE(sigmoid) SG_UNARY_CASE(relu) SG_UNARY_CASE(abs) SG_UNARY_CASE(sign)
    SG_UNARY_CASE(reciprocal) SG_UNARY_CASE(clamp) SG_UNARY_CASE(pow_scalar) SG_UNARY_CASE(affine)
    SG_UNARY_CASE(log1p) SG_UNARY_CASE(expm1) SG_UNARY_CASE(erf) SG_UNARY_CASE(softplus) SG_UNARY_CASE(gelu)
    SG_UNARY_CASE(gelu_tanh) SG_UNARY_CASE(log_sigmoid) SG_UNARY_CASE(silu)
#undef SG_UNARY_CASE
    default: return f.template operator()<UnaryOp::logical_not>();
  }
}

// Arithmetic binary ops (same type in and out).
SG_HOST_DEVICE constexpr bool is_comparison(BinaryOp op) {
  return op == BinaryOp::eq || op == BinaryOp::ne || op == BinaryOp::lt || op == BinaryOp::le ||
         op == BinaryOp::gt || op == BinaryOp::ge;
}
SG_HOST_DEVICE constexpr bool is_logical(BinaryOp op) { return op == BinaryOp::logical_and || op == BinaryOp::logical_or; }

template <BinaryOp Op, class T>
SG_HOST_DEVICE inline T binary_value(T x, T y) {
  if constexpr (Op == BinaryOp::add) return x + y;
  else if constexpr (Op == BinaryOp::sub) return x - y;
  else if constexpr (Op == BinaryOp::mul) return x * y;
  else if constexpr (Op == BinaryOp::div) return x / y;
  else if constexpr (Op == BinaryOp::maximum) return x > y || x != x ? x : y;  // NaN propagates, as torch
  else if constexpr (Op == BinaryOp::minimum) return x < y || x != x ? x : y;
  else if constexpr (Op == BinaryOp::pow) {
    if constexpr (std::is_floating_point_v<T>) return std::pow(x, y);
    else return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  } else if constexpr (Op == BinaryOp::tanh_backward) return x * (T(1) - y * y);  // x = dy, y = tanh output
  else if constexpr (Op == BinaryOp::sigmoid_backward) return x * y * (T(1) - y);  // y = sigmoid output
  else if constexpr (Op == BinaryOp::relu_backward) return y > 0 ? x : T(0);        // y = relu input
  else return T(0);  // comparisons and logical ops have bool results
}

template <class T>
SG_HOST_DEVICE inline T binary_value(BinaryOp op, T x, T y) {
  switch (op) {
#define SG_BINARY_CASE(name) \
  case BinaryOp::name: return binary_value<BinaryOp::name>(x, y);
    SG_BINARY_CASE(add) SG_BINARY_CASE(sub) SG_BINARY_CASE(mul) SG_BINARY_CASE(div) SG_BINARY_CASE(pow)
    SG_BINARY_CASE(maximum) SG_BINARY_CASE(minimum) SG_BINARY_CASE(tanh_backward)
    SG_BINARY_CASE(sigmoid_backward) SG_BINARY_CASE(relu_backward)
#undef SG_BINARY_CASE
    default: return T(0);
  }
}

template <class F>
decltype(auto) with_binary_op(BinaryOp op, F&& f) {  // the arithmetic ops only
  switch (op) {
#define SG_BINARY_CASE(name) \
  case BinaryOp::name: return f.template operator()<BinaryOp::name>();
    SG_BINARY_CASE(sub) SG_BINARY_CASE(mul) SG_BINARY_CASE(div) SG_BINARY_CASE(pow)
    SG_BINARY_CASE(maximum) SG_BINARY_CASE(minimum) SG_BINARY_CASE(tanh_backward)
    SG_BINARY_CASE(sigmoid_backward) SG_BINARY_CASE(relu_backward)
#undef SG_BINARY_CASE
    default: return f.template operator()<BinaryOp::add>();
  }
}

template <class T>
SG_HOST_DEVICE inline bool compare_value(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::eq: return x == y;
    case BinaryOp::ne: return x != y;
    case BinaryOp::lt: return x < y;
    case BinaryOp::le: return x <= y;
    case BinaryOp::gt: return x > y;
    default: return x >= y;
  }
}

SG_HOST_DEVICE inline bool logical_value(BinaryOp op, bool x, bool y) {
  return op == BinaryOp::logical_and ? (x && y) : (x || y);
}

// Reductions: max/min propagate NaN; argmax/argmin give the first index of the extreme value, with
// NaN counting as the extreme (as PyTorch). These combine two partial results, so a parallel
// reduction (any grouping) gives the serial loop's answer: a NaN wins, then the better value, then
// the smaller index.
template <class T>
SG_HOST_DEVICE inline bool is_nan(T v) {
  return v != v;
}
template <class T>
SG_HOST_DEVICE inline T max_combine(T best, T v) {
  return (v > best || is_nan(v)) && !is_nan(best) ? v : best;
}
template <class T>
SG_HOST_DEVICE inline T min_combine(T best, T v) {
  return (v < best || is_nan(v)) && !is_nan(best) ? v : best;
}
// True when (v, i) should replace (best, best_i) for argmax (largest) or argmin.
template <class T>
SG_HOST_DEVICE inline bool arg_better(bool largest, T v, int64_t i, T best, int64_t best_i) {
  if (is_nan(best)) return is_nan(v) && i < best_i;
  if (is_nan(v)) return true;
  if (v == best) return i < best_i;
  return largest ? v > best : v < best;
}

}  // namespace seqgrad::math
