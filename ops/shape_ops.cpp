// Shape ops. Views share storage (and its version counter); their gradients undo the view.
#include <algorithm>
#include <numeric>

#include "core/device_memory.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

Tensor make_view(const Tensor& x, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = x.dtype();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// The view of x (shape `shape`) whose dimension d starts at `start` and takes every step-th element.
Tensor slice_view(const Tensor& x, const Shape& shape, int d, int64_t start, int64_t step) {
  Shape strides = x.strides();
  strides[d] *= step;
  return make_view(x, shape, strides, x.offset() + start * x.strides()[d]);
}

// Resolves one -1 entry and checks the element count.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      SG_CHECK_SHAPE(infer == -1, "{}: only one dimension can be -1, got {}", op, shape);
      infer = i;
    } else {
      SG_CHECK_SHAPE(out[i] >= 0, "{}: invalid dimension {} in {}", op, out[i], shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    SG_CHECK_SHAPE(known != 0 && numel % known == 0, "{}: shape {} is invalid for input of size {} (shape {})", op,
                   shape, numel, from);
    out[infer] = numel / known;
  }
  SG_CHECK_SHAPE(out.numel() == numel, "{}: shape {} is invalid for input of size {} (shape {})", op, shape, numel,
                 from);
  return out;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible (the algorithm
// of PyTorch's computeStride: each run of contiguous old dims maps onto a run of new dims).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.resize(new_shape.size());
  if (shape.numel() <= 1 || contiguous_strides(shape) == strides) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.size() - 1;
  int64_t chunk_base = shape.size() ? strides[shape.size() - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

// view  y = x with a new shape (no copy)     dx = dy.reshape(x.shape)
Tensor view(const Tensor& x, const Shape& shape_in) {
  detail::check_defined("view", x);
  Shape shape = infer_shape(shape_in, x.numel(), "view", x.shape());
  Shape strides;
  SG_CHECK_SHAPE(view_strides(x.shape(), x.strides(), shape, strides),
                 "view: size {} is not compatible with input {} of strides {} (use reshape, which copies)", shape,
                 x.shape(), x.strides());
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("view", y, {x}, [in = x.shape()](const Tensor& dy, Grads& g) { g.add(0, dy.reshape(in)); });
}

// reshape: a view when strides allow, else a contiguous copy first.
Tensor reshape(const Tensor& x, const Shape& shape_in) {
  detail::check_defined("reshape", x);
  Shape shape = infer_shape(shape_in, x.numel(), "reshape", x.shape());
  Shape strides;
  if (view_strides(x.shape(), x.strides(), shape, strides)) return view(x, shape);
  return view(contiguous(x), shape);
}

// permute  y = x with dims reordered          dx = dy permuted by the inverse
Tensor permute(const Tensor& x, const Shape& dims) {
  detail::check_defined("permute", x);
  SG_CHECK_SHAPE(dims.size() == x.ndim(), "permute: got {} dims {} for a tensor of shape {}", dims.size(), dims,
                 x.shape());
  Shape shape, strides, inverse;
  inverse.resize(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], x.ndim(), "permute");
    SG_CHECK_SHAPE(!seen[d], "permute: dimension {} repeated in {}", d, dims);
    seen[d] = true;
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
    inverse[d] = i;
  }
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("permute", y, {x}, [inverse](const Tensor& dy, Grads& g) { g.add(0, permute(dy, inverse)); });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  detail::check_defined("transpose", x);
  if (x.ndim() < 2 && (dim0 == 0 || dim0 == -1) && (dim1 == 0 || dim1 == -1)) return x;
  Shape dims;
  for (int i = 0; i < x.ndim(); ++i) dims.push_back(i);
  std::swap(dims[wrap_dim(dim0, x.ndim(), "transpose")], dims[wrap_dim(dim1, x.ndim(), "transpose")]);
  return permute(x, dims);
}

// squeeze(dim): drops a size-1 dim (a no-op otherwise, as in PyTorch)
Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined("squeeze", x);
  if (x.ndim() == 0) return x;
  int d = wrap_dim(dim, x.ndim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(d);
  strides.erase(d);
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("squeeze", y, {x}, [in = x.shape()](const Tensor& dy, Grads& g) { g.add(0, dy.reshape(in)); });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined("unsqueeze", x);
  int d = wrap_dim(dim, x.ndim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  int64_t stride = d < x.ndim() ? x.strides()[d] * x.shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("unsqueeze", y, {x}, [in = x.shape()](const Tensor& dy, Grads& g) { g.add(0, dy.reshape(in)); });
}

// expand  y = x broadcast to shape (stride 0, no copy)     dx = sum_to(dy, x.shape)
Tensor expand(const Tensor& x, const Shape& shape_in) {
  detail::check_defined("expand", x);
  SG_CHECK_SHAPE(shape_in.size() >= x.ndim(), "expand: target {} has fewer dims than the input {}", shape_in,
                 x.shape());
  int lead = shape_in.size() - x.ndim();
  Shape shape = shape_in, strides;
  strides.resize(shape.size());
  for (int d = 0; d < shape.size(); ++d) {
    if (d < lead) {
      SG_CHECK_SHAPE(shape[d] >= 0, "expand: invalid size {} in {}", shape[d], shape_in);
      strides[d] = 0;
      continue;
    }
    int64_t have = x.shape()[d - lead];
    if (shape[d] == -1) shape[d] = have;
    SG_CHECK_SHAPE(have == shape[d] || have == 1,
                   "expand: the expanded size {} must match the existing size {} at dimension {} (input {}, target {})",
                   shape[d], have, d, x.shape(), shape_in);
    strides[d] = have == shape[d] ? x.strides()[d - lead] : 0;
  }
  if (shape == x.shape()) return x;
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("expand", y, {x}, [in = x.shape()](const Tensor& dy, Grads& g) { g.add(0, sum_to(dy, in)); });
}

// slice  y = x[start:end:step] along dim     dx = slice_scatter(dy) into zeros of x's shape
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", x);
  int d = wrap_dim(dim, x.ndim(), "slice");
  SG_CHECK_VALUE(step >= 1, "slice: step must be positive, got {}", step);
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = x.shape();
  shape[d] = (end - start + step - 1) / step;
  Tensor y = slice_view(x, shape, d, start, step);
  return record("slice", y, {x}, [in = x.shape(), d, start, step](const Tensor& dy, Grads& g) {
    // A loop over the steps of a sequence slices one tensor T times: adding each step's gradient
    // into its part of the input's gradient buffer costs O(slice), a scatter into zeros O(input).
    if (Tensor acc = g.accumulator(0); acc.defined()) {
      Tensor part = slice_view(acc, dy.shape(), d, start, step);
      backend_for(acc).binary(BinaryOp::add, part, dy, part);
      return;
    }
    g.add(0, slice_scatter(in, dy, d, start, step));
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", x);
  int d = wrap_dim(dim, x.ndim(), "narrow");
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  SG_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= n,
                 "narrow: start {} + length {} exceeds dimension {} of size {} (shape {})", start, length, dim, n,
                 x.shape());
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  detail::check_defined("select", x);
  int d = wrap_dim(dim, x.ndim(), "select");
  int64_t n = x.shape()[d];
  SG_CHECK_INDEX(index >= -n && index < n, "select: index {} is out of range for dimension {} of size {} (shape {})",
                 index, dim, n, x.shape());
  if (index < 0) index += n;
  return squeeze(slice(x, d, index, index + 1), d);
}

// slice_scatter  y = zeros(shape); y[slice] = src     dsrc = slice(dy)
Tensor slice_scatter(const Shape& shape, const Tensor& src, int64_t dim, int64_t start, int64_t step) {
  Tensor y = zeros(shape, {.dtype = src.dtype(), .device = src.device()});
  int d = wrap_dim(dim, shape.size(), "slice_scatter");
  {
    NoGradGuard no_grad;
    Tensor target = slice(y, d, start, start + step * src.shape()[d], step);
    backend_for(y).copy(src, target);
  }
  return record("slice_scatter", y, {src}, [d, start, step, n = src.shape()[d]](const Tensor& dy, Grads& g) {
    g.add(0, slice(dy, d, start, start + step * n, step));
  });
}

// contiguous / clone  y = a dense copy of x       dx = dy
Tensor clone(const Tensor& x) {
  detail::check_defined("clone", x);
  Tensor y = detail::empty_like_shape(x.shape(), x);
  backend_for(x).copy(x, y);
  return record("clone", y, {x}, [](const Tensor& dy, Grads& g) { g.add(0, dy); });
}

Tensor contiguous(const Tensor& x) {
  detail::check_defined("contiguous", x);
  return x.is_contiguous() ? x : clone(x);
}

// to_dtype  y = x converted       dx = dy converted back (for floating dtypes)
Tensor to_dtype(const Tensor& x, DType dtype) {
  detail::check_defined("to", x);
  if (x.dtype() == dtype) return x;
  Tensor y = Tensor::empty(x.shape(), {.dtype = dtype, .device = x.device()});
  backend_for(x).copy(x, y);
  if (!is_floating(dtype)) return y;
  return record("to", y, {x}, [from = x.dtype()](const Tensor& dy, Grads& g) { g.add(0, to_dtype(dy, from)); });
}

// to_device  y = x copied to `device` (contiguous)       dx = dy copied back to x's device
Tensor to_device(const Tensor& x, Device device) {
  detail::check_defined("to", x);
  if (x.device() == device) return x;
  DeviceMemory& memory = device_memory_for(device.is_cpu() ? x.device() : device, "to");
  if (!device.is_cpu() && !x.device().is_cpu()) device_memory_for(x.device(), "to");
  Tensor src = contiguous(x.detach());  // a dense copy on x's own device when x is a view
  Tensor y = Tensor::empty(x.shape(), {.dtype = x.dtype(), .device = device});
  if (y.numel() > 0)
    memory.copy(y.raw_data(), device, src.raw_data(), x.device(), y.numel() * element_size(y.dtype()));
  if (!is_floating(x.dtype())) return y;
  return record("to", y, {x}, [from = x.device()](const Tensor& dy, Grads& g) { g.add(0, to_device(dy, from)); });
}

// cat  y = [a; b; ...] along dim       d(input i) = dy narrowed to its span
Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  SG_CHECK_VALUE(!xs.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = xs[0];
  detail::check_defined("cat", first);
  int d = wrap_dim(dim, first.ndim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    detail::check_same("cat", first, xs[i]);
    SG_CHECK_SHAPE(xs[i].ndim() == first.ndim(), "cat: tensor {} has shape {}, expected {} dims like {}", i,
                   xs[i].shape(), first.ndim(), first.shape());
    for (int k = 0; k < first.ndim(); ++k)
      SG_CHECK_SHAPE(k == d || xs[i].shape()[k] == first.shape()[k],
                     "cat: sizes must match except in dimension {}: tensor 0 {} vs tensor {} {}", d, first.shape(), i,
                     xs[i].shape());
    shape[d] += xs[i].shape()[d];
  }
  Tensor y = detail::empty_like_shape(shape, first);
  std::vector<int64_t> sizes;
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (const Tensor& x : xs) {
      sizes.push_back(x.shape()[d]);
      if (x.numel() > 0) backend_for(x).copy(x, narrow(y, d, offset, x.shape()[d]));
      offset += x.shape()[d];
    }
  }
  return record("cat", y, std::span<const Tensor>(xs), [d, sizes](const Tensor& dy, Grads& g) {
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (g.needs(static_cast<int>(i))) g.add(static_cast<int>(i), narrow(dy, d, offset, sizes[i]));
      offset += sizes[i];
    }
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  SG_CHECK_VALUE(!xs.empty(), "stack: expected a non-empty list of tensors");
  int d = wrap_dim(dim, xs[0].ndim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < xs.size(); ++i) {
    SG_CHECK_SHAPE(xs[i].shape() == xs[0].shape(), "stack: all tensors must have the same shape: tensor 0 {} vs tensor {} {}",
                   xs[0].shape(), i, xs[i].shape());
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  detail::check_defined("split", x);
  SG_CHECK_VALUE(split_size > 0, "split: split_size must be positive, got {}", split_size);
  int d = wrap_dim(dim, x.ndim(), "split");
  std::vector<Tensor> out;
  for (int64_t start = 0; start < x.shape()[d]; start += split_size)
    out.push_back(narrow(x, d, start, std::min(split_size, x.shape()[d] - start)));
  return out;
}

namespace {

// Halving keeps the backward O(n log n): each narrow/select backward writes a zero tensor the size
// of its input, and the input sums those, so selecting each slice of x directly would cost n
// full-size passes (O(n²)).
void unbind_into(const Tensor& x, int dim, int64_t first, std::vector<Tensor>& slices) {
  const int64_t n = x.shape()[dim];
  if (n <= 2) {
    for (int64_t i = 0; i < n; ++i) slices[first + i] = select(x, dim, i);
    return;
  }
  unbind_into(narrow(x, dim, 0, n / 2), dim, first, slices);
  unbind_into(narrow(x, dim, n / 2, n - n / 2), dim, first + n / 2, slices);
}

}  // namespace

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  detail::check_defined("unbind", x);
  SG_CHECK_SHAPE(x.ndim() > 0, "unbind: expected a tensor with at least one dimension, got a 0-d tensor");
  const int d = wrap_dim(dim, x.ndim(), "unbind");
  std::vector<Tensor> slices(x.shape()[d]);
  unbind_into(x, d, 0, slices);
  return slices;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined("chunk", x);
  SG_CHECK_VALUE(chunks > 0, "chunk: number of chunks must be positive, got {}", chunks);
  int d = wrap_dim(dim, x.ndim(), "chunk");
  return split(x, std::max<int64_t>(1, (x.shape()[d] + chunks - 1) / chunks), d);
}

// ---- Tensor member shortcuts
Tensor Tensor::view(const Shape& s) const { return seqgrad::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return seqgrad::reshape(*this, s); }
Tensor Tensor::permute(const Shape& d) const { return seqgrad::permute(*this, d); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return seqgrad::transpose(*this, a, b); }
Tensor Tensor::t() const {
  SG_CHECK_SHAPE(ndim() <= 2, "t: expects a tensor with <= 2 dimensions, got {}", shape());
  return ndim() < 2 ? *this : seqgrad::transpose(*this, 0, 1);
}
Tensor Tensor::squeeze(int64_t d) const { return seqgrad::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return seqgrad::unsqueeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return seqgrad::expand(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t n) const { return seqgrad::narrow(*this, d, s, n); }
Tensor Tensor::select(int64_t d, int64_t i) const { return seqgrad::select(*this, d, i); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return seqgrad::slice(*this, d, s, e, st); }
std::vector<Tensor> Tensor::chunk(int64_t c, int64_t d) const { return seqgrad::chunk(*this, c, d); }
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const { return seqgrad::split(*this, s, d); }
Tensor Tensor::contiguous() const { return seqgrad::contiguous(*this); }
Tensor Tensor::clone() const { return seqgrad::clone(*this); }
Tensor Tensor::to(DType dtype) const { return seqgrad::to_dtype(*this, dtype); }
Tensor Tensor::to(Device device) const { return seqgrad::to_device(*this, device); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (ndim() == 0) return reshape({1});
  int s = wrap_dim(start_dim, ndim(), "flatten"), e = wrap_dim(end_dim, ndim(), "flatten");
  SG_CHECK_VALUE(s <= e, "flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape shape;
  for (int d = 0; d < s; ++d) shape.push_back(this->shape()[d]);
  int64_t n = 1;
  for (int d = s; d <= e; ++d) n *= this->shape()[d];
  shape.push_back(n);
  for (int d = e + 1; d < ndim(); ++d) shape.push_back(this->shape()[d]);
  return reshape(shape);
}

}  // namespace seqgrad
