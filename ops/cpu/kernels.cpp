// CPU kernels for the primitives in core/backend.h (and the optional fused ones).
#include "ops/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include "core/backend_math.h"
#include "core/blas.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/threads.h"
#include "ops/cpu/vec_math.h"

// Compiled once per instruction set (ops/meson.build): SG_CPU_ISA names the namespace, and
// ops/cpu/dispatch.cpp picks the build the CPU can run.
#ifndef SG_CPU_ISA
#define SG_CPU_ISA base
#endif

namespace seqgrad::cpu::SG_CPU_ISA {
namespace {

constexpr int64_t kGrain = 32768;  // elements per thread below which loops stay serial

// ---- strided iteration over N operands with broadcasting (stride 0) and dimension coalescing

template <int N>
struct Loop {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t stride[N][kMaxDims];  // bytes
  char* base[N];
  int64_t numel = 1;
};

// Operand views of `shape`: each tensor's strides, with 0 where it is broadcast.
template <int N>
Loop<N> make_loop(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  Loop<N> L;
  int nd = shape.size();
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *ts[k];
    L.base[k] = static_cast<char*>(t.raw_data());
    int64_t es = static_cast<int64_t>(element_size(t.dtype()));
    int off = nd - t.ndim();
    for (int d = 0; d < nd; ++d) {
      int td = d - off;
      bool broadcast = td < 0 || (t.shape()[td] == 1 && shape[d] != 1);
      L.stride[k][d] = broadcast ? 0 : t.strides()[td] * es;
    }
  }
  // drop size-1 dims, merge dims that are contiguous for every operand
  int out = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    if (out > 0) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k)
        if (L.stride[k][out - 1] != L.stride[k][d] * shape[d]) mergeable = false;
      if (mergeable) {
        L.shape[out - 1] *= shape[d];
        for (int k = 0; k < N; ++k) L.stride[k][out - 1] = L.stride[k][d];
        continue;
      }
    }
    L.shape[out] = shape[d];
    for (int k = 0; k < N; ++k) L.stride[k][out] = L.stride[k][d];
    ++out;
  }
  if (out == 0) {  // a scalar
    L.shape[0] = 1;
    for (int k = 0; k < N; ++k) L.stride[k][0] = 0;
    out = 1;
  }
  L.ndim = out;
  L.numel = shape.numel();
  return L;
}

// Calls inner(ptrs, inner_strides, n) over runs of the innermost dimension, threads splitting the
// flat index range.
template <int N, class Inner>
void run_loop(const Loop<N>& L, Inner&& inner, int64_t grain = kGrain) {
  if (L.numel == 0) return;
  int last = L.ndim - 1;
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = L.stride[k][last];
  parallel_for(L.numel, grain, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % L.shape[d];
      rem /= L.shape[d];
    }
    char* p[N];
    for (int k = 0; k < N; ++k) {
      p[k] = L.base[k];
      for (int d = 0; d <= last; ++d) p[k] += idx[d] * L.stride[k][d];
    }
    for (int64_t i = begin; i < end;) {
      int64_t n = std::min(L.shape[last] - idx[last], end - i);
      inner(p, inner_strides, n);
      i += n;
      idx[last] += n;
      for (int k = 0; k < N; ++k) p[k] += n * inner_strides[k];
      for (int d = last; d > 0 && idx[d] == L.shape[d]; --d) {  // carry
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < N; ++k) p[k] += L.stride[k][d - 1] - L.shape[d] * L.stride[k][d];
      }
    }
  });
}

// out[i] = f(a[i]) with contiguous fast path.
template <class O, class A, class F>
void map1(const Tensor& a, const Tensor& out, F f) {
  auto L = make_loop<2>(out.shape(), {&out, &a});
  run_loop(L, [&](char** p, const int64_t* s, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* x = reinterpret_cast<const A*>(p[1]);
    if (s[0] == sizeof(O) && s[1] == sizeof(A)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]));
    }
  });
}

template <class O, class A, class B, class F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  auto L = make_loop<3>(out.shape(), {&out, &a, &b});
  run_loop(L, [&](char** p, const int64_t* s, int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const A* x = reinterpret_cast<const A*>(p[1]);
    const B* y = reinterpret_cast<const B*>(p[2]);
    if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(O) && s[1] == sizeof(A) && s[2] == 0) {
      const B yv = *y;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(B)) {
      const A xv = *x;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
    }
  });
}

class CpuBackend;
Tensor dense(const Tensor& t);

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void copy(const Tensor& src, const Tensor& dst) override {
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

  void fill(const Tensor& dst, double value) override {
    dispatch_all(dst.dtype(), [&]<class T>() {
      T v = static_cast<T>(value);
      map1<T, T>(dst, dst, [v](T) { return v; });
    });
  }

  // The arithmetic is core/backend_math.h's (shared with CUDA); the switch on the op is hoisted out
  // of the loop so each op's loop vectorises.
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) override {
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

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
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

  void compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
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

  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
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

  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta,
            GemmPrecision precision) override;

  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void softmax_rows(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) override;
  void topk(const Tensor& x, int64_t k, bool largest, const Tensor& values, const Tensor& indices) override;

  // Adam on the CPU is optim's own fused loop (detail::adam_update_fused), not a backend kernel.
  bool supports(FusedOp op) const override { return op != FusedOp::adam_update; }
  void gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h, const Tensor& valid, const Tensor& h_next,
                const Tensor& gates) override;
  void gru_cell_backward(const Tensor& gates, const Tensor& h, const Tensor& valid, const Tensor& dy,
                         const Tensor& dcarry, const Tensor& dxp, const Tensor& dhp, const Tensor& dh) override;
  void additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& scores) override;
  void additive_scores_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& dscores,
                                const Tensor& dqp, const Tensor& dkp, const Tensor& dw) override;
  void cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index,
                          const Tensor& loss, const Tensor& lse) override;
  void cross_entropy_rows_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& dloss, double eps, int64_t ignore_index,
                                   const Tensor& dlogits) override;

  // Random values go to element i in row-major order; a strided output is filled through a dense one.
  // The values of uniform_at / uniform_at_f64 (core/philox.h), but one Philox call per counter for
  // its 4 float (2 double) values, and 16 counters at a time so the rounds vectorise.
  void random_uniform(const Tensor& out_in, double a, double b, uint64_t seed, uint64_t offset) override {
    Tensor out = out_in.is_contiguous() ? out_in : Tensor::empty(out_in.shape(), {.dtype = out_in.dtype()});
    dispatch_floating(out.dtype(), "uniform_", [&]<class T>() {
      constexpr int64_t kPerCounter = std::is_same_v<T, float> ? 4 : 2, kLanes = 16;
      constexpr int64_t kBlock = kPerCounter * kLanes;  // values per block of counters
      T* p = out.data<T>();
      parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t start = begin; start < end; start += kBlock) {  // begin is a multiple of kBlock
          const uint64_t c0 = offset + static_cast<uint64_t>(start / kPerCounter);
          uint32_t w[4][kLanes];
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) {
            Philox4 r = philox(seed, c0 + static_cast<uint64_t>(l));
            w[0][l] = r.v[0], w[1][l] = r.v[1], w[2][l] = r.v[2], w[3][l] = r.v[3];
          }
          const int64_t n = std::min(kBlock, end - start);
          for (int64_t k = 0; k < n; ++k) {
            const int64_t l = k / kPerCounter, j = k % kPerCounter;
            double u;
            if constexpr (std::is_same_v<T, float>) {
              u = static_cast<float>(w[j][l] >> 8) * (1.0f / 16777216.0f);  // 24 bits, as uniform_at
            } else {
              uint64_t bits = (static_cast<uint64_t>(w[2 * j][l]) << 32) | w[2 * j + 1][l];
              u = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits, as uniform_at_f64
            }
            p[start + k] = static_cast<T>(a + (b - a) * u);
          }
        }
      }, kBlock);
    });
    if (!out_in.is_contiguous()) copy(out, out_in);
  }

  void random_normal(const Tensor& out_in, double mean, double stddev, uint64_t seed, uint64_t offset) override {
    Tensor out = out_in.is_contiguous() ? out_in : Tensor::empty(out_in.shape(), {.dtype = out_in.dtype()});
    dispatch_floating(out.dtype(), "normal_", [&]<class T>() {
      T* p = out.data<T>();
      parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(mean + stddev * normal_at(seed, offset, i));
      });
    });
    if (!out_in.is_contiguous()) copy(out, out_in);
  }
};

// ---- reductions

// Reduces x over the dims where out has size 1 and x does not. The reduced dims are moved
// innermost, so each output element owns one (possibly strided) block: threads split outputs.
void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  int nd = x.ndim();
  std::vector<int> kept, reduced;
  for (int d = 0; d < nd; ++d) (out.shape()[d] == 1 && x.shape()[d] != 1 ? reduced : kept).push_back(d);
  int64_t n_out = out.numel(), n_red = 1;
  for (int d : reduced) n_red *= x.shape()[d];
  // contiguous input reduced over leading dims (bias gradients): accumulate whole rows
  bool prefix = !reduced.empty() && reduced.back() == static_cast<int>(reduced.size()) - 1 &&
                x.is_contiguous() && out.is_contiguous() && op == ReduceOp::sum;
  if (prefix) {
    dispatch_numeric(x.dtype(), "sum", [&]<class T>() {
      const T* px = x.data<T>();
      T* po = out.data<T>();
      parallel_for(n_out, 1024, [&](int64_t begin, int64_t end) {
        std::vector<double> acc(end - begin, 0.0);
        for (int64_t r = 0; r < n_red; ++r) {
          const T* row = px + r * n_out;
#pragma omp simd
          for (int64_t j = begin; j < end; ++j) acc[j - begin] += row[j];
        }
        for (int64_t j = begin; j < end; ++j) po[j] = static_cast<T>(acc[j - begin]);
      });
    });
    return;
  }
  // index arithmetic: output element o -> base offset in x; reduced index r -> offset
  Shape kept_shape, red_shape, kept_stride, red_stride, out_stride;
  for (int d : kept) {
    kept_shape.push_back(x.shape()[d]);
    kept_stride.push_back(x.strides()[d]);
    out_stride.push_back(out.strides()[d]);
  }
  for (int d : reduced) {
    red_shape.push_back(x.shape()[d]);
    red_stride.push_back(x.strides()[d]);
  }
  auto offset_of = [](int64_t flat, const Shape& shape, const Shape& stride) {
    int64_t off = 0;
    for (int d = shape.size() - 1; d >= 0; --d) {
      off += (flat % shape[d]) * stride[d];
      flat /= shape[d];
    }
    return off;
  };
  bool inner_contiguous = red_shape.size() == 1 && red_stride[0] == 1;
  dispatch_all(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw DTypeError("reduce: bool tensors cannot be reduced; convert with to(DType::i64) first");
    } else {
      const T* px = static_cast<const T*>(x.impl()->storage->data) + x.offset();
      parallel_for(n_out, std::max<int64_t>(1, kGrain / std::max<int64_t>(n_red, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          const T* block = px + offset_of(o, kept_shape, kept_stride);
          int64_t out_off = offset_of(o, kept_shape, out_stride);
          auto at = [&](int64_t r) { return inner_contiguous ? block[r] : block[offset_of(r, red_shape, red_stride)]; };
          if (op == ReduceOp::sum) {
            using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
            Acc acc = 0;
            if (inner_contiguous) {
#pragma omp simd reduction(+ : acc)
              for (int64_t r = 0; r < n_red; ++r) acc += block[r];
            } else {
              for (int64_t r = 0; r < n_red; ++r) acc += at(r);
            }
            out.data<T>()[out_off] = static_cast<T>(acc);
          } else if (op == ReduceOp::max || op == ReduceOp::min) {
            T best = at(0);
            for (int64_t r = 1; r < n_red; ++r)
              best = op == ReduceOp::max ? math::max_combine(best, at(r)) : math::min_combine(best, at(r));
            out.data<T>()[out_off] = best;
          } else {  // argmax / argmin: the first index of the extreme value, as PyTorch, where
                    // NaN counts as the extreme (so max(dim) propagates NaN like amax)
            T best = at(0);
            int64_t arg = 0;
            for (int64_t r = 1; r < n_red && best == best; ++r) {
              T v = at(r);
              if (math::arg_better(op == ReduceOp::argmax, v, r, best, arg)) best = v, arg = r;
            }
            out.data<int64_t>()[out_off] = arg;
          }
        }
      });
    }
  });
}

// ---- GEMM: read transposes and leading dimensions from the strides

struct MatrixArg {
  blas::Trans trans = blas::Trans::no;
  int64_t ld = 0;
  bool usable = false;
};

MatrixArg as_blas(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (row_stride >= std::max<int64_t>(cols, 1) || rows == 1))
    return {blas::Trans::no, std::max<int64_t>(rows == 1 ? cols : row_stride, 1), true};
  if (row_stride == 1 && (col_stride >= std::max<int64_t>(rows, 1) || cols == 1))
    return {blas::Trans::yes, std::max<int64_t>(cols == 1 ? rows : col_stride, 1), true};
  return {};
}

// A float32 operand rounded to bfloat16 / float16 values (core/half.h, as CUDA rounds its
// operands), held in float32: products of 16-bit values are exact in float32, so a float32 GEMM of
// the rounded operands is the mixed-precision product (16-bit inputs, float32 accumulation).
Tensor rounded_operand(const Tensor& t, GemmPrecision precision) {
  Tensor out = Tensor::empty(t.shape(), {.dtype = DType::f32});
  if (precision == GemmPrecision::bf16) map1<float, float>(t, out, [](float v) { return half::round_bf16(v); });
  else map1<float, float>(t, out, [](float v) { return half::round_f16(v); });
  return out;
}

// One product split across the thread pool: along N (columns of B and C) when N >= M, else along
// M (rows of A and C). Each piece is a single-threaded BLAS call; small products stay whole. Every
// piece packs the whole shared operand (A for an N split) again: about 16/w of the piece's time
// for a piece w columns wide (16 multiply-adds per cycle against ~1 cycle per packed element), so
// pieces are at least kMinPiece wide.
constexpr int64_t kSplitWork = int64_t{1} << 18;  // multiply-adds per piece, at least
constexpr int64_t kMinPiece = 256;

template <class T>
void blas_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) blas::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else blas::dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Tiny products (attention's per-sentence (1, K)·(K, D) and their backward, the d2l preset's
// layers) cost less as plain loops than as a BLAS call each. Row-major operands with element
// strides; the inner loop runs along contiguous memory: C's row (B not transposed) or a dot
// product (B transposed).
constexpr int64_t kTinyWork = 1 << 14;  // multiply-adds per product

template <class T>
void tiny_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t a_rs = ta == blas::Trans::no ? lda : 1, a_cs = ta == blas::Trans::no ? 1 : lda;
  for (int64_t r = 0; r < m; ++r) {
    T* cr = c + r * ldc;
    const T* ar = a + r * a_rs;
    if (tb == blas::Trans::no) {  // c_r = Σ_kk a_r,kk · b_kk (rows of B)
      T acc[256];
      for (int64_t j0 = 0; j0 < n; j0 += 256) {
        const int64_t nj = std::min<int64_t>(256, n - j0);
        std::fill(acc, acc + nj, T(0));
        for (int64_t kk = 0; kk < k; ++kk) {
          const T x = ar[kk * a_cs];
          const T* bk = b + kk * ldb + j0;
#pragma omp simd
          for (int64_t j = 0; j < nj; ++j) acc[j] += x * bk[j];
        }
        for (int64_t j = 0; j < nj; ++j) cr[j0 + j] = alpha * acc[j] + (beta == T(0) ? T(0) : beta * cr[j0 + j]);
      }
    } else {  // c_rj = a_r · b_j (B stored as (N, K) rows)
      for (int64_t j = 0; j < n; ++j) {
        const T* bj = b + j * ldb;
        T acc = 0;
        if (a_cs == 1) {
#pragma omp simd reduction(+ : acc)
          for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk] * bj[kk];
        } else {
          for (int64_t kk = 0; kk < k; ++kk) acc += ar[kk * a_cs] * bj[kk];
        }
        cr[j] = alpha * acc + (beta == T(0) ? T(0) : beta * cr[j]);
      }
    }
  }
}

template <class T>
void split_gemm(blas::Trans ta, blas::Trans tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t work = m * n * k;
  if (work < 2 * kSplitWork || std::max(m, n) < 2 * kMinPiece || get_num_threads() <= 1) {
    blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (n >= m) {
    int64_t grain = std::max<int64_t>(kMinPiece, kSplitWork / std::max<int64_t>(m * k, 1));
    parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      const T* bj = tb == blas::Trans::no ? b + j0 : b + j0 * ldb;
      blas_gemm(ta, tb, m, j1 - j0, k, alpha, a, lda, bj, ldb, beta, c + j0, ldc);
    }, 16);
  } else {
    int64_t grain = std::max<int64_t>(kMinPiece, kSplitWork / std::max<int64_t>(n * k, 1));
    parallel_for(m, grain, [&](int64_t i0, int64_t i1) {
      const T* ai = ta == blas::Trans::no ? a + i0 * lda : a + i0;
      blas_gemm(ta, tb, i1 - i0, n, k, alpha, ai, lda, b, ldb, beta, c + i0 * ldc, ldc);
    }, 16);
  }
}

void CpuBackend::gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, double alpha, double beta,
                      GemmPrecision precision) {
  int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a_in.shape()[2];
  bool reduced = precision != GemmPrecision::full && c.dtype() == DType::f32;
  auto prepare = [reduced, precision](const Tensor& t) {
    if (reduced) return rounded_operand(t, precision);
    MatrixArg arg = as_blas(t.shape()[1], t.shape()[2], t.strides()[1], t.strides()[2]);
    return arg.usable ? t : dense(t);
  };
  Tensor a = prepare(a_in), b = prepare(b_in);
  MatrixArg ma = as_blas(m, k, a.strides()[1], a.strides()[2]);
  MatrixArg mb = as_blas(k, n, b.strides()[1], b.strides()[2]);
  SG_ASSERT(c.strides()[2] == 1 || n == 1);  // rows of C are dense (one column: its stride is never read)
  int64_t ldc = std::max<int64_t>(m == 1 ? n : c.strides()[1], 1);
  auto a_stride = a.shape()[0] == 1 ? 0 : a.strides()[0];
  auto b_stride = b.shape()[0] == 1 ? 0 : b.strides()[0];
  dispatch_floating(c.dtype(), "matmul", [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    if (k == 0) {  // BLAS leaves C untouched for k = 0; the product of empty matrices is zero
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < n; ++j) {
            T& cij = pc[i * c.strides()[0] + r * ldc + j];
            cij = beta == 0 ? T(0) : cij * static_cast<T>(beta);  // beta = 0 ignores C (it may be garbage)
          }
      return;
    }
    const int64_t work = m * n * k;
    if (batch > 1 && work < kSplitWork) {  // many small products: whole products per thread
      parallel_for(batch, std::max<int64_t>(1, kSplitWork / std::max<int64_t>(work, 1)), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          auto product = work <= kTinyWork ? tiny_gemm<T> : blas_gemm<T>;
          product(ma.trans, mb.trans, m, n, k, T(alpha), pa + i * a_stride, ma.ld, pb + i * b_stride, mb.ld, T(beta),
                  pc + i * c.strides()[0], ldc);
        }
      });
      return;
    }
    if (batch == 1 && work <= kTinyWork) {
      tiny_gemm(ma.trans, mb.trans, m, n, k, T(alpha), pa, ma.ld, pb, mb.ld, T(beta), pc, ldc);
      return;
    }
    for (int64_t i = 0; i < batch; ++i)
      split_gemm(ma.trans, mb.trans, m, n, k, T(alpha), pa + i * a_stride, ma.ld, pb + i * b_stride, mb.ld, T(beta),
                 pc + i * c.strides()[0], ldc);
  });
}

// ---- indexing

// Views x as (outer, size, inner) around `dim`; returns (outer, inner).
std::pair<int64_t, int64_t> outer_inner(const Tensor& t, int dim) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.shape()[d];
  for (int d = dim + 1; d < t.ndim(); ++d) inner *= t.shape()[d];
  return {outer, inner};
}

void CpuBackend::index_select(const Tensor& x_in, int dim, const Tensor& index, const Tensor& out) {
  Tensor x = dense(x_in);
  int64_t outer, inner;  // not a structured binding: the lambda below captures them (clang < 16)
  std::tie(outer, inner) = outer_inner(x, dim);
  int64_t n_in = x.shape()[dim], n_idx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  size_t es = element_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  parallel_for(outer * n_idx, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t o = r / n_idx, j = r % n_idx;
      std::memcpy(po + (o * n_idx + j) * inner * es, px + (o * n_in + idx[j]) * inner * es, inner * es);
    }
  });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src_in) {
  Tensor src = dense(src_in);
  int64_t outer, inner;  // not a structured binding: the lambda below captures them (clang < 16)
  std::tie(outer, inner) = outer_inner(out, dim);
  int64_t n_out = out.shape()[dim], n_idx = index.numel();
  const int64_t* idx = index.data<int64_t>();
  dispatch_numeric(out.dtype(), "index_add", [&]<class T>() {
    T* po = out.data<T>();
    const T* ps = src.data<T>();
    // threads split the inner (feature) dimension so repeated ids never race
    parallel_for(inner, 256, [&](int64_t begin, int64_t end) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n_idx; ++j) {
          T* dst = po + (o * n_out + idx[j]) * inner;
          const T* s = ps + (o * n_idx + j) * inner;
#pragma omp simd
          for (int64_t i = begin; i < end; ++i) dst[i] += s[i];
        }
    });
  });
}

// gather / scatter_add: the index may be smaller than x (or out) in the dims other than `dim`, so
// each index element's position is mapped through x's own strides, not through the index's shape.
// Calls f(e, base) for every element e of a contiguous tensor of `shape`, where base is the offset
// of the same multi-index in a tensor of `strides`, with the `dim` coordinate left out.
template <class F>
void for_each_index_position(const Shape& shape, const Shape& strides, int dim, F&& f) {
  int nd = shape.size();
  int64_t index[kMaxDims] = {};
  int64_t base = 0;
  for (int64_t e = 0, n = shape.numel(); e < n; ++e) {
    f(e, base);
    for (int d = nd - 1; d >= 0; --d) {
      int64_t step = d == dim ? 0 : strides[d];
      if (++index[d] < shape[d]) {
        base += step;
        break;
      }
      base -= step * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

void CpuBackend::gather(const Tensor& x_in, int dim, const Tensor& index_in, const Tensor& out) {
  Tensor x = dense(x_in), index = dense(index_in);
  const int64_t* idx = index.data<int64_t>();
  int64_t dim_stride = x.ndim() ? x.strides()[dim] : 0;
  dispatch_all(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_index_position(index.shape(), x.strides(), dim,
                            [&](int64_t e, int64_t base) { po[e] = px[base + idx[e] * dim_stride]; });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index_in, const Tensor& src_in) {
  Tensor index = dense(index_in), src = dense(src_in);
  const int64_t* idx = index.data<int64_t>();
  int64_t dim_stride = out.ndim() ? out.strides()[dim] : 0;
  dispatch_numeric(out.dtype(), "scatter_add", [&]<class T>() {
    T* po = out.data<T>();
    const T* ps = src.data<T>();
    for_each_index_position(index.shape(), out.strides(), dim,
                            [&](int64_t e, int64_t base) { po[base + idx[e] * dim_stride] += ps[e]; });
  });
}

// ---- softmax over contiguous rows; max-subtraction keeps exp() from overflowing

void CpuBackend::softmax_rows(const Tensor& x, const Tensor& out, bool log) {
  int64_t cols = x.shape().back(), rows = x.numel() / std::max<int64_t>(cols, 1);
  dispatch_floating(x.dtype(), "softmax", [&]<class T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* in = px + r * cols;
        T* o = po + r * cols;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, in[j]);
        if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // all -inf: avoid inf - inf
        T sum = 0;
        if (log) {
          for (int64_t j = 0; j < cols; ++j) sum += std::exp(in[j] - mx);
          T lse = mx + std::log(sum);
          for (int64_t j = 0; j < cols; ++j) o[j] = in[j] - lse;
        } else {
          for (int64_t j = 0; j < cols; ++j) sum += (o[j] = std::exp(in[j] - mx));
          T inv = T(1) / sum;
          for (int64_t j = 0; j < cols; ++j) o[j] *= inv;
        }
      }
    });
  });
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy)
void CpuBackend::softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  int64_t cols = y.shape().back(), rows = y.numel() / std::max<int64_t>(cols, 1);
  dispatch_floating(y.dtype(), "softmax_backward", [&]<class T>() {
    const T* py = y.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* yr = py + r * cols;
        const T* g = pdy + r * cols;
        T* o = pdx + r * cols;
        T dot = 0;
        if (log) {
          for (int64_t j = 0; j < cols; ++j) dot += g[j];
          for (int64_t j = 0; j < cols; ++j) o[j] = g[j] - std::exp(yr[j]) * dot;
        } else {
          for (int64_t j = 0; j < cols; ++j) dot += g[j] * yr[j];
          for (int64_t j = 0; j < cols; ++j) o[j] = yr[j] * (g[j] - dot);
        }
      }
    });
  });
}

void CpuBackend::topk(const Tensor& x_in, int64_t k, bool largest, const Tensor& values, const Tensor& indices) {
  Tensor x = dense(x_in);
  int64_t cols = x.shape().back(), rows = x.numel() / std::max<int64_t>(cols, 1);
  dispatch_numeric(x.dtype(), "topk", [&]<class T>() {
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    std::vector<int64_t> order(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * cols;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t i, int64_t j) {
        return largest ? (row[i] > row[j] || (row[i] == row[j] && i < j)) : (row[i] < row[j] || (row[i] == row[j] && i < j));
      });
      for (int64_t j = 0; j < k; ++j) {
        pv[r * k + j] = row[order[j]];
        pi[r * k + j] = order[j];
      }
    }
  });
}

// ---- fused GRU step (the math and its derivation: nn/rnn.h; the op: gru_layer in nn/rnn.cpp)

void CpuBackend::gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h, const Tensor& valid,
                          const Tensor& h_next, const Tensor& gates) {
  const int64_t B = h.size(0), H = h.size(1);
  const bool* ok = valid.defined() ? valid.data<bool>() : nullptr;
  dispatch_floating(h.dtype(), "gru_cell", [&]<class T>() {
    const T* px = xp.data<T>();
    const T* pp = hp.data<T>();
    const T* ph = h.data<T>();
    T* pn = h_next.data<T>();
    T* pg = gates.data<T>();
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(8 * H, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* x = px + b * 3 * H;
        const T* p = pp + b * 3 * H;
        const T* hb = ph + b * H;
        T* out = pn + b * H;
        T* g = pg + b * 4 * H;
        if (ok && !ok[b]) {  // padding: the state passes through
          std::copy(hb, hb + H, out);
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          const T r = vec::sigmoid(x[j] + p[j]);
          const T z = vec::sigmoid(x[H + j] + p[H + j]);
          const T hn = p[2 * H + j];
          const T n = vec::tanh(x[2 * H + j] + r * hn);
          out[j] = n + z * (hb[j] - n);
          g[j] = r, g[H + j] = z, g[2 * H + j] = n, g[3 * H + j] = hn;
        }
      }
    });
  });
}

void CpuBackend::gru_cell_backward(const Tensor& gates, const Tensor& h, const Tensor& valid, const Tensor& dy,
                                   const Tensor& dcarry, const Tensor& dxp, const Tensor& dhp, const Tensor& dh) {
  const int64_t B = h.size(0), H = h.size(1);
  const bool* ok = valid.defined() ? valid.data<bool>() : nullptr;
  dispatch_floating(h.dtype(), "gru_cell_backward", [&]<class T>() {
    const T* pg = gates.data<T>();
    const T* ph = h.data<T>();
    const T* pdy = dy.defined() ? dy.data<T>() : nullptr;
    const T* pc = dcarry.data<T>();
    T* pdx = dxp.data<T>();
    T* pdp = dhp.data<T>();
    T* pdh = dh.data<T>();
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(12 * H, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* g = pg + b * 4 * H;
        const T* hb = ph + b * H;
        const T* yb = pdy ? pdy + b * H : nullptr;
        const T* cb = pc + b * H;
        T* dx = pdx + b * 3 * H;
        T* dp = pdp + b * 3 * H;
        T* d = pdh + b * H;
        if (ok && !ok[b]) {  // padding: h_next = h, so h gets all of h_next's gradient
          for (int64_t j = 0; j < H; ++j) d[j] = (yb ? yb[j] : T(0)) + cb[j];
          std::fill(dx, dx + 3 * H, T(0));
          std::fill(dp, dp + 3 * H, T(0));
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          const T gj = (yb ? yb[j] : T(0)) + cb[j];  // dh'
          const T r = g[j], z = g[H + j], n = g[2 * H + j], hn = g[3 * H + j];
          const T dn = gj * (T(1) - z);
          const T dz = gj * (hb[j] - n);
          const T dan = dn * (T(1) - n * n);
          const T daz = dz * z * (T(1) - z);
          const T dar = dan * hn * r * (T(1) - r);
          dx[j] = dar, dx[H + j] = daz, dx[2 * H + j] = dan;
          dp[j] = dar, dp[H + j] = daz, dp[2 * H + j] = dan * r;
          d[j] = gj * z;
        }
      }
    });
  });
}

// ---- fused additive attention energies (the op: additive_scores in nn/attention_additive.cpp)

void CpuBackend::additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& scores) {
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  dispatch_floating(qp.dtype(), "additive_scores", [&]<class T>() {
    const T* pq = qp.data<T>();
    const T* pk = kp.data<T>();
    const T* pw = w.data<T>();
    T* ps = scores.data<T>();
    parallel_for(B * Q, std::max<int64_t>(1, kGrain / std::max<int64_t>(K * A, 1)), [&](int64_t r0, int64_t r1) {
      const T* wv = pw;  // a local copy: the vectoriser cannot hoist loads through the closure
      for (int64_t r = r0; r < r1; ++r) {  // r = b·Q + q
        const int64_t b = r / Q;
        const T* q = pq + r * A;
        for (int64_t k = 0; k < K; ++k) {
          const T* kr = pk + (b * K + k) * A;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t a = 0; a < A; ++a) acc += wv[a] * vec::tanh(q[a] + kr[a]);
          ps[r * K + k] = acc;
        }
      }
    });
  });
}

void CpuBackend::additive_scores_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& dscores,
                                          const Tensor& dqp, const Tensor& dkp, const Tensor& dw) {
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  dispatch_floating(qp.dtype(), "additive_scores_backward", [&]<class T>() {
    const T* pq = qp.data<T>();
    const T* pk = kp.data<T>();
    const T* pw = w.data<T>();
    const T* pds = dscores.data<T>();
    T* pdq = dqp.data<T>();
    T* pdk = dkp.data<T>();
    std::vector<T> dw_rows(B * A, T(0));  // per batch row, summed below: no races, a fixed order
    std::fill(pdq, pdq + B * Q * A, T(0));
    std::fill(pdk, pdk + B * K * A, T(0));
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(Q * K * A, 1)), [&](int64_t b0, int64_t b1) {
      const T* wv = pw;  // a local copy: the vectoriser cannot hoist loads through the closure
      for (int64_t b = b0; b < b1; ++b) {
        T* dwb = dw_rows.data() + b * A;
        for (int64_t q = 0; q < Q; ++q) {
          const T* qr = pq + (b * Q + q) * A;
          T* dqr = pdq + (b * Q + q) * A;
          for (int64_t k = 0; k < K; ++k) {
            const T d = pds[(b * Q + q) * K + k];
            if (d == T(0)) continue;  // masked keys: their weights, and so ds, are exactly 0
            const T* kr = pk + (b * K + k) * A;
            T* dkr = pdk + (b * K + k) * A;
#pragma omp simd
            for (int64_t a = 0; a < A; ++a) {
              const T f = vec::tanh(qr[a] + kr[a]);  // recomputed instead of saved (B·Q·K·A values)
              const T dz = d * wv[a] * (T(1) - f * f);
              dwb[a] += d * f;
              dqr[a] += dz;
              dkr[a] += dz;
            }
          }
        }
      }
    });
    T* pdw = dw.data<T>();
    for (int64_t a = 0; a < A; ++a) {
      T acc = 0;
      for (int64_t b = 0; b < B; ++b) acc += dw_rows[b * A + a];
      pdw[a] = acc;
    }
  });
}

// ---- fused cross-entropy with label smoothing (the op: cross_entropy in nn/loss.cpp)
// lse = m + log Σ exp(x - m) with m = max x (no overflow);
// loss = (1 - eps)(lse - x_y) + eps/C Σ_c (lse - x_c) = lse - (1 - eps) x_y - eps/C Σ_c x_c.

void CpuBackend::cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index,
                                    const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* py = targets.data<int64_t>();
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    const T* px = logits.data<T>();
    T* pl = loss.data<T>();
    T* pe = lse.data<T>();
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* x = px + r * C;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
        if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
        T sum = 0, total = 0;
#pragma omp simd reduction(+ : sum, total)
        for (int64_t c = 0; c < C; ++c) {
          sum += vec::exp(x[c] - m);
          total += x[c];
        }
        const T l = m + std::log(sum);
        pe[r] = l;
        pl[r] = py[r] == ignore_index ? T(0) : l - keep * x[py[r]] - spread * total;
      }
    });
  });
}

void CpuBackend::cross_entropy_rows_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                             const Tensor& dloss, double eps, int64_t ignore_index,
                                             const Tensor& dlogits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* py = targets.data<int64_t>();
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T* px = logits.data<T>();
    const T* pe = lse.data<T>();
    const T* pg = dloss.data<T>();
    const int64_t g_stride = dloss.numel() == 1 ? 0 : 1;  // a broadcast scalar (mean / sum) or per row
    T* pd = dlogits.data<T>();
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* x = px + r * C;
        T* d = pd + r * C;
        if (py[r] == ignore_index) {
          std::fill(d, d + C, T(0));
          continue;
        }
        const T g = pg[r * g_stride], l = pe[r];
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) d[c] = g * (vec::exp(x[c] - l) - spread);
        d[py[r]] -= g * keep;
      }
    });
  });
}

// A contiguous copy for kernels that need one (no autograd: kernels sit below it).
Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  backend().copy(t, out);
  return out;
}

}  // namespace

Backend& backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
