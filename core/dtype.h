// Element types: float32 and float64 (float64 for gradient checks), int64 indices, bool masks, and
// the integer types of int8 inference (ops/quantized.h): int8 weights, uint8 activation codes and
// their int32 products.
#pragma once
#include <cstddef>
#include <cstdint>

#include <fmt/format.h>

#include "core/error.h"

namespace seqgrad {

enum class DType : uint8_t { f32, f64, i64, b8, i8, u8, i32 };

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::b8: return 1;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::b8: return "bool";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::i32: return "int32";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

// Calls f.template operator()<T>() with T the C++ type of `t`, restricted to floating types.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    default:
      throw DTypeError(fmt::format("{}: expected a floating dtype (float32 or float64), got {}", op,
                                   dtype_name(t)));
  }
}

// Same for every dtype.
template <class F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::b8: return f.template operator()<bool>();
    case DType::i8: return f.template operator()<int8_t>();
    case DType::u8: return f.template operator()<uint8_t>();
    case DType::i32: return f.template operator()<int32_t>();
  }
  return f.template operator()<float>();
}

// Numeric types (everything but bool).
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::i64: return f.template operator()<int64_t>();
    default:
      throw DTypeError(fmt::format("{}: expected a numeric dtype, got {}", op, dtype_name(t)));
  }
}

}  // namespace seqgrad

template <>
struct fmt::formatter<seqgrad::DType> : fmt::formatter<const char*> {
  auto format(seqgrad::DType t, format_context& ctx) const {
    return fmt::formatter<const char*>::format(seqgrad::dtype_name(t), ctx);
  }
};
