// Reductions. Their gradients broadcast dy back over the reduced dimensions.
#include <algorithm>
#include <cmath>

#include "ops/detail.h"

namespace seqgrad {
namespace {

// Sorted, wrapped, de-duplicated dims; empty input means every dim.
Shape normalize_dims(const Shape& dims, int ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    int w = wrap_dim(d, ndim, op);
    SG_CHECK_VALUE(std::find(out.begin(), out.end(), w) == out.end(), "{}: dimension {} appears twice in {}", op,
                   d, dims);
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape keepdim_shape(const Shape& shape, const Shape& dims) {
  Shape out = shape;
  for (int64_t d : dims) out[static_cast<int>(d)] = 1;
  return out;
}

Shape dropped_shape(const Shape& shape, const Shape& dims) {
  Shape out;
  for (int d = 0; d < shape.size(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(shape[d]);
  return out;
}

// Runs the reduce kernel; the result has the keepdim shape.
Tensor reduce_kernel(const char* name, ReduceOp op, const Tensor& x, const Shape& dims, DType out_dtype) {
  Tensor y = Tensor::empty(keepdim_shape(x.shape(), dims), {.dtype = out_dtype, .device = x.device()});
  if (x.numel() == 0) {
    SG_CHECK_SHAPE(op == ReduceOp::sum, "{}: cannot reduce an empty tensor {} (there is no maximum or minimum)",
                   name, x.shape());
    backend_for(x).fill(y, 0.0);
    return y;
  }
  backend_for(x).reduce(op, x, y);
  return y;
}

// dy of a reduction, reshaped to keepdim form and expanded to the input's shape.
Tensor expand_back(const Tensor& dy, const Shape& in_shape, const Shape& dims) {
  return dy.reshape(keepdim_shape(in_shape, dims)).expand(in_shape);
}

}  // namespace

// sum  y = Σ_dims x          dx = dy broadcast back over dims
Tensor sum(const Tensor& x, const Shape& dims_in, bool keepdim) {
  detail::check_defined("sum", x);
  SG_CHECK_DTYPE(x.dtype() != DType::b8, "sum: cannot sum a bool tensor {}; convert it with to(DType::i64)",
                 x.shape());
  Shape dims = normalize_dims(dims_in, x.ndim(), "sum");
  Tensor y = reduce_kernel("sum", ReduceOp::sum, x, dims, x.dtype());
  if (!keepdim) y = y.view(dropped_shape(x.shape(), dims));
  return record("sum", y, {x}, [in_shape = x.shape(), dims](const Tensor& dy, Grads& g) {
    g.add(0, expand_back(dy, in_shape, dims));
  });
}

// mean  y = Σ_dims x / n     dx = dy / n broadcast back over dims
Tensor mean(const Tensor& x, const Shape& dims_in, bool keepdim) {
  detail::check_floating("mean", x);
  Shape dims = normalize_dims(dims_in, x.ndim(), "mean");
  int64_t n = 1;
  for (int64_t d : dims) n *= x.shape()[static_cast<int>(d)];
  return mul(sum(x, dims, keepdim), 1.0 / static_cast<double>(std::max<int64_t>(n, 1)));
}

namespace {

// values = x at `indices` along d (recorded as `op`: max, min, sort)   dx = dy scattered to the indices
Tensor values_at(const char* op, const Tensor& x, int d, const Tensor& indices) {
  Tensor values = gather(x.detach(), d, indices);
  return record(op, values, {x}, [indices, d, in_shape = x.shape()](const Tensor& dy, Grads& g) {
    g.add(0, scatter_add(zeros(in_shape, {.dtype = dy.dtype(), .device = dy.device()}), d, indices, dy));
  });
}

// The values and indices of the max (argop = argmax) or min along dim (the first on ties).
ValuesIndices extreme_along(const char* op, ReduceOp argop, const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined(op, x);
  int d = wrap_dim(dim, x.ndim(), op);
  if (x.ndim() == 0) return extreme_along(op, argop, x.reshape({1}), 0, false);  // (x, 0), as torch
  Tensor idx = reduce_kernel(op, argop, x, {d}, DType::i64);  // keepdim shape
  Tensor values = values_at(op, x, d, idx);
  if (keepdim) return {values, idx};
  return {values.squeeze(d), idx.squeeze(d)};
}

// amax/amin  y = the extreme over dims     dx = dy * [x == y] / #{x == y}: dy shared evenly
// among the elements that attain the extreme (torch.amax's rule)
Tensor extreme_over(const char* op, ReduceOp reduce, const Tensor& x, const Shape& dims_in, bool keepdim) {
  detail::check_defined(op, x);
  SG_CHECK_DTYPE(x.dtype() != DType::b8, "{}: expected a numeric tensor, got bool {}", op, x.shape());
  Shape dims = normalize_dims(dims_in, x.ndim(), op);
  Tensor y = reduce_kernel(op, reduce, x, dims, x.dtype());  // keepdim shape
  if (!keepdim) y = y.view(dropped_shape(x.shape(), dims));
  return record(op, y, {x}, [x = save(x), dims](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    Tensor extreme = g.output().reshape(keepdim_shape(xv.shape(), dims));
    Tensor hit = to_dtype(eq(xv, extreme), dy.dtype());  // x's shape, 1 where x attains the extreme
    Tensor ties = sum(hit, dims, true);                    // keepdim shape, >= 1
    g.add(0, div(mul(expand_back(dy, xv.shape(), dims), hit), ties));
  }, SaveOutput::yes);
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along("max", ReduceOp::argmax, x, dim, keepdim);
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_along("min", ReduceOp::argmin, x, dim, keepdim);
}

// max over all elements  y = x[argmax of the flattened x]   dx = dy at that element
Tensor max(const Tensor& x) {
  detail::check_defined("max", x);
  return max(x.reshape({-1}), 0).values;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return extreme_over("amax", ReduceOp::max, x, dims, keepdim);
}

Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return extreme_over("amin", ReduceOp::min, x, dims, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("argmax", x);
  int d = wrap_dim(dim, x.ndim(), "argmax");
  Tensor y = reduce_kernel("argmax", ReduceOp::argmax, x, {d}, DType::i64);
  return keepdim ? y : y.view(dropped_shape(x.shape(), {d}));
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("argmin", x);
  int d = wrap_dim(dim, x.ndim(), "argmin");
  Tensor y = reduce_kernel("argmin", ReduceOp::argmin, x, {d}, DType::i64);
  return keepdim ? y : y.view(dropped_shape(x.shape(), {d}));
}

// logsumexp  y = m + log Σ exp(x - m), m = max over dims (treated as a constant; rows that are
// all -inf use m = 0 so the result is -inf rather than NaN). Composed, so dx = dy * softmax(x).
Tensor logsumexp(const Tensor& x, const Shape& dims_in, bool keepdim) {
  detail::check_floating("logsumexp", x);
  Shape dims = normalize_dims(dims_in, x.ndim(), "logsumexp");
  Tensor m = amax(x.detach(), dims, true);
  m = where(isfinite(m), m, zeros_like(m));
  Tensor y = add(log(sum(exp(sub(x, m)), dims, true)), m);
  return keepdim ? y : y.reshape(dropped_shape(x.shape(), dims));
}

// sum_to: the reduction that undoes broadcasting from `shape` to x's shape.
Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int lead = x.ndim() - shape.size();
  SG_CHECK_SHAPE(lead >= 0, "sum_to: cannot reduce {} to the larger shape {}", x.shape(), shape);
  Shape dims;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
      continue;
    }
    int64_t target = shape[d - lead];
    SG_CHECK_SHAPE(target == x.shape()[d] || target == 1, "sum_to: shape {} is not a broadcast of {}", x.shape(),
                   shape);
    if (target == 1 && x.shape()[d] != 1) dims.push_back(d);
  }
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  return s.reshape(shape);
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  detail::check_defined("topk", x);
  int d = wrap_dim(dim, x.ndim(), "topk");
  int64_t n = x.ndim() == 0 ? 1 : x.shape()[d];
  SG_CHECK_VALUE(k >= 0 && k <= n, "topk: k = {} out of range for dimension {} of size {} (shape {})", k, dim, n,
                 x.shape());
  Tensor xt = x.detach().transpose(d, -1).contiguous();
  Shape out_shape = xt.shape();
  if (out_shape.size() > 0) out_shape[out_shape.size() - 1] = k;
  Tensor values = detail::empty_like_shape(out_shape, x);
  Tensor indices = Tensor::empty(out_shape, {.dtype = DType::i64, .device = x.device()});
  backend_for(x).topk(xt, k, largest, values, indices);
  return {values.transpose(d, -1).contiguous(), indices.transpose(d, -1).contiguous()};
}

// sort  values = x ordered along dim, indices = where each came from (ties in input order)
//   dx = dy scattered back to the indices (values are gathered from x)
ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  detail::check_defined("sort", x);
  int d = wrap_dim(dim, x.ndim(), "sort");
  if (x.ndim() == 0) return {x.reshape({1}).reshape({}), zeros({}, {.dtype = DType::i64, .device = x.device()})};
  const int64_t n = x.shape()[d];
  SG_CHECK_DTYPE(x.dtype() != DType::b8, "sort: cannot sort a bool tensor {}", x.shape());
  Tensor indices = topk(x.detach(), n, d, descending).second;
  return {values_at("sort", x, d, indices), indices};
}

// ---- Tensor member shortcuts
Tensor Tensor::sum() const { return seqgrad::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return seqgrad::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return seqgrad::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return seqgrad::mean(*this, dims, keepdim); }
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const { return seqgrad::max(*this, dim, keepdim); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const { return seqgrad::min(*this, dim, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return seqgrad::argmax(*this, dim, keepdim); }

}  // namespace seqgrad
