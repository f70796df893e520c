// CPU reductions (as ops/cuda/reduce.cu).
#include <algorithm>
#include <limits>
#include <vector>

#include "core/backend_math.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {

// ---- reductions

// Reduces x over the dims where out has size 1 and x does not. The reduced dims are moved
// innermost, so each output element owns one (possibly strided) block: threads split outputs.
namespace {

// argmax of a contiguous float32 row, as the general loop gives it (the first index of the
// largest value; NaN counts as the largest, so the first NaN): a vectorisable pass for the largest
// value and whether there is a NaN, then the first index holding it. A greedy search's pick over
// its 8,000-token rows took 5% of the decoding in the one-element-at-a-time loop.
int64_t argmax_row(const float* row, int64_t n) {
  constexpr int kLanes = 8;
  float m[kLanes];
  bool nan[kLanes] = {};
  std::fill(m, m + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = row[j + l];
      nan[l] = nan[l] || v != v;
      m[l] = m[l] < v ? v : m[l];
    }
  for (; j < n; ++j) nan[0] = nan[0] || row[j] != row[j], m[0] = m[0] < row[j] ? row[j] : m[0];
  bool any_nan = false;
  float best = m[0];
  for (int l = 0; l < kLanes; ++l) any_nan = any_nan || nan[l], best = best < m[l] ? m[l] : best;
  for (int64_t r = 0; r < n; ++r)
    if (any_nan ? row[r] != row[r] : row[r] == best) return r;
  return 0;  // n = 0
}

}  // namespace

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
            if constexpr (std::is_same_v<T, float>) {
              if (op == ReduceOp::argmax && inner_contiguous) {
                out.data<int64_t>()[out_off] = argmax_row(block, n_red);
                continue;
              }
            }
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

}  // namespace seqgrad::cpu::SG_CPU_ISA
