// Indexing ops. Every index is range-checked at the op boundary, naming the bad index and size.
#include "ops/detail.h"

namespace seqgrad {
namespace {

// Indices are read on the CPU (a device index is copied over first, one synchronising copy), so a
// bad index is an IndexError naming the op, never a fault inside a kernel.
Tensor host_indices(const Tensor& index) {
  return index.device().is_cpu() ? index.contiguous() : to_device(index, Device::cpu());
}

void check_range(const char* op, const Tensor& index, int64_t size, const char* what) {
  Tensor dense = host_indices(index);  // kept alive: for a non-contiguous index this is a copy
  const int64_t* p = dense.data<int64_t>();
  for (int64_t i = 0, n = index.numel(); i < n; ++i)
    SG_CHECK_INDEX(p[i] >= 0 && p[i] < size, "{}: index {} is out of range for {} of size {}", op, p[i], what, size);
}

// repeat_interleave's index along a dimension of size n: i repeated counts[i] times (counts
// holds n values, or one value for every i).
Tensor repeat_index(const std::vector<int64_t>& counts, int64_t n, Device device) {
  std::vector<int64_t> index;
  for (int64_t i = 0; i < n; ++i) index.insert(index.end(), counts[counts.size() == 1 ? 0 : i], i);
  const int64_t total = static_cast<int64_t>(index.size());
  return from_vector(index, {total}, {.dtype = DType::i64}).to(device);
}

// The repeats as host values, checked: int64, 0-D or 1-D with one value or one per element of the
// dimension, none negative.
std::vector<int64_t> checked_repeats(const Tensor& repeats, int64_t n, const Shape& x_shape, int d) {
  detail::check_defined("repeat_interleave", repeats, "repeats");
  SG_CHECK_DTYPE(repeats.dtype() == DType::i64, "repeat_interleave: repeats must be int64, got {} {}",
                 repeats.dtype(), repeats.shape());
  SG_CHECK_SHAPE(repeats.ndim() <= 1 && (repeats.numel() == 1 || repeats.numel() == n),
                 "repeat_interleave: repeats {} must hold one count or one per element of dimension {} (size {}) of "
                 "the input {}",
                 repeats.shape(), d, n, x_shape);
  std::vector<int64_t> counts = host_indices(repeats).to_vector<int64_t>();
  for (int64_t c : counts)
    SG_CHECK_VALUE(c >= 0, "repeat_interleave: repeats must not be negative, got {}", c);
  return counts;
}

}  // namespace

// repeat_interleave  y = x with element i along dim repeated repeats[i] times, in place order
//   (torch.repeat_interleave; without dim, x is flattened first)
//   dx_i = Σ of dy over the copies of i (it is index_select with the index [0, 0, 1, 2, 2, ...])
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim) {
  detail::check_defined("repeat_interleave", x);
  if (!dim) return repeat_interleave(x.reshape({-1}), repeats, 0);
  int d = wrap_dim(*dim, x.ndim(), "repeat_interleave");
  if (x.ndim() == 0) return repeat_interleave(x.reshape({1}), repeats, 0);
  const int64_t n = x.shape()[d];
  std::vector<int64_t> counts = checked_repeats(repeats, n, x.shape(), d);
  return index_select(x, d, repeat_index(counts, n, x.device()));
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  SG_CHECK_VALUE(repeats >= 0, "repeat_interleave: repeats must not be negative, got {}", repeats);
  return repeat_interleave(x, from_vector<int64_t>({repeats}, {}, {.dtype = DType::i64}).to(x.device()), dim);
}

// index_select  y = x[..., index, ...] along dim     dx = index_add(zeros, dim, index, dy)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index_in) {
  detail::check_defined("index_select", x);
  detail::check_index_tensor("index_select", index_in);
  detail::check_device_of("index_select", x, index_in, "index");
  SG_CHECK_SHAPE(index_in.ndim() <= 1, "index_select: index must be 0-D or 1-D, got {}", index_in.shape());
  int d = wrap_dim(dim, x.ndim(), "index_select");
  Tensor index = index_in.reshape({-1}).contiguous();
  check_range("index_select", index, x.shape()[d], fmt::format("dimension {}", d).c_str());
  Shape shape = x.shape();
  shape[d] = index.numel();
  Tensor y = detail::empty_like_shape(shape, x);
  backend_for(x).index_select(x, d, index, y);
  return record("index_select", y, {x}, [d, index, in = x.shape()](const Tensor& dy, Grads& g) {
    g.add(0, index_add(zeros(in, {.dtype = dy.dtype(), .device = dy.device()}), d, index, dy));
  });
}

// index_add  y = x; y[index[j]] += src[j] along dim     dx = dy     dsrc = index_select(dy, dim, index)
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index_in, const Tensor& src) {
  detail::check_same("index_add", x, src);
  detail::check_index_tensor("index_add", index_in);
  detail::check_device_of("index_add", x, index_in, "index");
  int d = wrap_dim(dim, x.ndim(), "index_add");
  Tensor index = index_in.reshape({-1}).contiguous();
  Shape expected = x.shape();
  expected[d] = index.numel();
  SG_CHECK_SHAPE(src.shape() == expected, "index_add: source shape {} != {} (input {}, {} indices)", src.shape(),
                 expected, x.shape(), index.numel());
  check_range("index_add", index, x.shape()[d], fmt::format("dimension {}", d).c_str());
  Tensor y = clone(x.detach());
  backend_for(x).index_add(y, d, index, src);
  return record("index_add", y, {x, src}, [d, index](const Tensor& dy, Grads& g) {
    if (g.needs(0)) g.add(0, dy);
    if (g.needs(1)) g.add(1, index_select(dy, d, index));
  });
}

// gather  y[i][j] = x[i][index[i][j]] (dim 1 shown)     dx = scatter_add(zeros, dim, index, dy)
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("gather", x);
  detail::check_index_tensor("gather", index);
  detail::check_device_of("gather", x, index, "index");
  int d = wrap_dim(dim, x.ndim(), "gather");
  SG_CHECK_SHAPE(index.ndim() == x.ndim(), "gather: index {} must have as many dims as the input {}", index.shape(),
                 x.shape());
  for (int k = 0; k < x.ndim(); ++k)
    SG_CHECK_SHAPE(k == d || index.shape()[k] <= x.shape()[k],
                   "gather: index {} is larger than the input {} in dimension {}", index.shape(), x.shape(), k);
  check_range("gather", index, x.shape()[d], fmt::format("dimension {}", d).c_str());
  Tensor y = detail::empty_like_shape(index.shape(), x);
  if (y.numel() > 0) backend_for(x).gather(x, d, index, y);
  return record("gather", y, {x}, [d, index, in = x.shape()](const Tensor& dy, Grads& g) {
    g.add(0, scatter_add(zeros(in, {.dtype = dy.dtype(), .device = dy.device()}), d, index, dy));
  });
}

// scatter_add  y = x; y[index[i][j]][j] += src[i][j] (dim 0 shown)   dx = dy   dsrc = gather(dy, dim, index)
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_same("scatter_add", x, src);
  detail::check_index_tensor("scatter_add", index);
  detail::check_device_of("scatter_add", x, index, "index");
  int d = wrap_dim(dim, x.ndim(), "scatter_add");
  SG_CHECK_SHAPE(index.shape() == src.shape(), "scatter_add: index {} and source {} must have the same shape",
                 index.shape(), src.shape());
  SG_CHECK_SHAPE(index.ndim() == x.ndim(), "scatter_add: index {} must have as many dims as the input {}",
                 index.shape(), x.shape());
  for (int k = 0; k < x.ndim(); ++k)
    SG_CHECK_SHAPE(k == d || index.shape()[k] <= x.shape()[k],
                   "scatter_add: index {} is larger than the input {} in dimension {}", index.shape(), x.shape(), k);
  check_range("scatter_add", index, x.shape()[d], fmt::format("dimension {}", d).c_str());
  Tensor y = clone(x.detach());
  if (src.numel() > 0) backend_for(x).scatter_add(y, d, index, src);
  return record("scatter_add", y, {x, src}, [d, index](const Tensor& dy, Grads& g) {
    if (g.needs(0)) g.add(0, dy);
    if (g.needs(1)) g.add(1, gather(dy, d, index));
  });
}

// embedding  y[..., :] = weight[ids[...], :]        dweight = index_add of dy rows (padding rows: 0)
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx) {
  detail::check_floating("embedding", weight);
  SG_CHECK_DTYPE(ids.dtype() == DType::i64, "embedding: ids must be int64, got {} {}", ids.dtype(), ids.shape());
  detail::check_device_of("embedding", weight, ids, "ids");
  SG_CHECK_SHAPE(weight.ndim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got {}", weight.shape());
  Tensor flat = ids.reshape({-1}).contiguous();
  Tensor host = host_indices(flat);
  const int64_t* p = host.data<int64_t>();
  for (int64_t i = 0, n = flat.numel(); i < n; ++i)
    SG_CHECK_INDEX(p[i] >= 0 && p[i] < weight.size(0), "embedding: id {} is out of range for a table of {} rows",
                   p[i], weight.size(0));
  Tensor rows = detail::empty_like_shape({flat.numel(), weight.size(1)}, weight);
  backend_for(weight).index_select(weight, 0, flat, rows);
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  Tensor y = rows.view(out_shape);
  return record("embedding", y, {weight}, [flat, padding_idx, in = weight.shape()](const Tensor& dy, Grads& g) {
    Tensor drows = dy.reshape({flat.numel(), in[1]});
    if (padding_idx >= 0) drows = where(ne(flat, static_cast<double>(padding_idx)).unsqueeze(1), drows, zeros_like(drows));
    // Straight into the table's gradient buffer when there is one: O(rows), not O(table) (a decoder
    // looks up one step at a time)
    if (Tensor acc = g.accumulator(0); acc.defined()) {
      backend_for(acc).index_add(acc, 0, flat, drows);
      return;
    }
    g.add(0, index_add(zeros(in, {.dtype = dy.dtype(), .device = dy.device()}), 0, flat, drows));
  });
}

}  // namespace seqgrad
