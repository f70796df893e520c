// CPU element-wise primitives: copy, fill, unary, binary (with comparisons) and where, over
// broadcast operands; the arithmetic is core/backend_math.h's, shared with ops/cuda/elementwise.cu.
#include <cstring>

#include "core/backend_math.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.numel() * element_size(src.dtype()));
    return;
  }
  dispatch_all(dst.dtype(), [&]<class D>() {
    dispatch_all(src.dtype(), [&]<class S>() {
      map1<D, S>(src, dst, [](S x) { return static_cast<D>(x); });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&]<class T>() {
    T v = static_cast<T>(value);
    map1<T, T>(dst, dst, [v](T) { return v; });
  });
}

// The arithmetic is core/backend_math.h's (shared with CUDA); the switch on the op is hoisted out
// of the loop so each op's loop vectorises.
void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) {
  if (op == UnaryOp::logical_not) {
    map1<bool, bool>(x, out, [](bool v) { return !v; });
    return;
  }
  dispatch_numeric(x.dtype(), "unary", [&]<class T>() {
    T a = static_cast<T>(p.a), b = static_cast<T>(p.b);
    if (op == UnaryOp::pow_scalar && p.a == 2) return map1<T, T>(x, out, [](T v) { return v * v; });
    math::with_unary_op(op, [&]<UnaryOp Op>() {
      if constexpr (math::unary_supported<Op, T>())
        map1<T, T>(x, out, [a, b](T v) { return math::unary_value<Op>(v, a, b); });
      else
        throw DTypeError(fmt::format("unary: op {} is not supported for {}", unary_op_name(op), x.dtype()));
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (math::is_comparison(op)) return compare(op, a, b, out);
  switch (op) {
    case BinaryOp::logical_and: return map2<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x && y; });
    case BinaryOp::logical_or: return map2<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x || y; });
    default: break;
  }
  dispatch_numeric(out.dtype(), "binary", [&]<class T>() {
    math::with_binary_op(op, [&]<BinaryOp Op>() {
      map2<T, T, T>(a, b, out, [](T x, T y) { return math::binary_value<Op>(x, y); });
    });
  });
}

void CpuBackend::compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), [&]<class T>() {
    switch (op) {
      case BinaryOp::eq: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::eq, x, y); });
      case BinaryOp::ne: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::ne, x, y); });
      case BinaryOp::lt: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::lt, x, y); });
      case BinaryOp::le: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::le, x, y); });
      case BinaryOp::gt: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::gt, x, y); });
      default: return map2<bool, T, T>(a, b, out, [](T x, T y) { return math::compare_value(BinaryOp::ge, x, y); });
    }
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), [&]<class T>() {
    auto L = make_loop<4>(out.shape(), {&out, &cond, &a, &b});
    run_loop(L, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
      }
    });
  });
}

Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  backend().copy(t, out);
  return out;
}

Backend& backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
