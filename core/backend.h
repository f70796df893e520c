// The primitive list every device implements. Ops in ops/ are compositions of these; backward
// formulas are written with ops, so a new device only supplies these kernels.
#pragma once
#include <cstdint>

#include "core/backend_ops.h"
#include "core/tensor.h"

namespace seqgrad {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // memory and layout
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;  // same shape, any strides/dtypes
  virtual void fill(const Tensor& dst, double value) = 0;
  // element-wise; inputs are broadcast views of out's shape (stride 0 where broadcast)
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out has x's rank with size 1 on every reduced dimension
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) = 0;
  // c[i] = alpha * a[i] · b[i] + beta * c[i] over a batch; a: (N, M, K), b: (N, K, N'), c: (N, M, N')
  // given as strided views (transposes are read from the strides, not copied). `precision` other
  // than full applies to float32 only: the operands are rounded first, products accumulate in f32.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta,
                    GemmPrecision precision) = 0;
  // indexing along `dim`
  virtual void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  virtual void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // fused softmax over the last dimension (contiguous rows)
  virtual void softmax_rows(const Tensor& x, const Tensor& out, bool log) = 0;
  virtual void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) = 0;
  virtual void topk(const Tensor& x, int64_t k, bool largest, const Tensor& values,
                    const Tensor& indices) = 0;  // along the last dimension
  // random fill from the counter-based generator: uniform [a, b) or normal(a, b)
  virtual void random_uniform(const Tensor& out, double a, double b, uint64_t seed, uint64_t offset) = 0;
  virtual void random_normal(const Tensor& out, double mean, double stddev, uint64_t seed,
                             uint64_t offset) = 0;
};

Backend& backend_for(Device device);
inline Backend& backend_for(const Tensor& t) { return backend_for(t.device()); }

}  // namespace seqgrad
