// Tensor: a shared handle over storage + shape + strides + dtype + device, with autograd metadata.
// Views share storage (and its version counter); math lives in ops/ops.h (members here forward to it).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace seqgrad {

struct Node;
struct ValuesIndices;

// A block of memory on one device. `version` counts in-place writes to any view of it, so that
// backward can tell when a tensor it saved was modified after being saved (as PyTorch does).
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  uint32_t version = 0;

  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  bool is_view = false;            // shares storage with another tensor
  std::shared_ptr<Node> grad_fn;   // null for leaves
  std::shared_ptr<TensorImpl> grad;
};

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

struct BackwardOptions {
  bool retain_graph = false;  // keep saved tensors so backward can run again
  bool create_graph = false;  // record the backward pass itself (for higher-order gradients)
};

class Tensor {
 public:
  Tensor() noexcept : why_undefined_(nullptr) {}
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)), why_undefined_(nullptr) {}

  // A fresh contiguous tensor with uninitialised memory.
  static Tensor empty(const Shape& shape, TensorOptions options = {});

  // An undefined tensor (default-constructed, or grad() of a tensor that has none) holds no data:
  // every accessor below throws an Error naming itself and where the tensor came from, never
  // crashes. Test with defined(), as in PyTorch (`p.grad is None`).
  bool defined() const { return impl_ != nullptr; }
  // Why an undefined tensor is undefined ("a default-constructed Tensor", "grad() of ..."), for
  // the errors of ops that check their inputs; empty for a defined tensor.
  std::string_view why_undefined() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata
  const Shape& shape() const { return checked("shape").shape; }
  const Shape& strides() const { return checked("strides").strides; }
  int ndim() const { return checked("ndim").shape.size(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const { return checked("numel").shape.numel(); }
  DType dtype() const { return checked("dtype").dtype; }
  Device device() const { return checked("device").storage->device; }
  int64_t offset() const { return checked("offset").offset; }
  bool is_contiguous() const;
  uint32_t version() const { return checked("version").storage->version; }
  void bump_version() const { ++checked("bump_version").storage->version; }

  // Pointer to element 0 (CPU). T must match dtype().
  template <class T>
  T* data() const {
    const TensorImpl& impl = checked("data");
    SG_CHECK_DTYPE(dtype_of<T>() == impl.dtype, "data<{}>: tensor has dtype {}", dtype_name(dtype_of<T>()),
                   impl.dtype);
    return static_cast<T*>(impl.storage->data) + impl.offset;
  }
  void* raw_data() const {
    const TensorImpl& impl = checked("raw_data");
    return static_cast<char*>(impl.storage->data) + impl.offset * element_size(impl.dtype);
  }

  // ---- values
  double item() const;  // a one-element tensor's value as double
  template <class T>
  std::vector<T> to_vector() const;  // all values in row-major order, converted to T

  // ---- autograd
  bool requires_grad() const { return checked("requires_grad").requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return checked("is_leaf").grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return checked("grad_fn").grad_fn; }
  // The accumulated gradient of a leaf; undefined (test with defined()) before the first
  // backward() that reaches it, after zero_grad(), for a tensor that does not require grad and
  // for a non-leaf, as in PyTorch. Using an undefined grad throws an error that says which.
  Tensor grad() const;
  void set_grad(const Tensor& g) const { checked("set_grad").grad = g.impl_; }
  void zero_grad() const { checked("zero_grad").grad.reset(); }
  Tensor detach() const;  // shares storage, no history
  void backward(const Tensor& grad = {}, BackwardOptions options = {}) const;
  // Makes this tensor hold src's data (storage, shape, strides, dtype, device) while keeping its
  // identity: every handle to it, its requires_grad and its gradient stay (PyTorch's
  // `param.data = src`). For leaves only; this is how Module::to converts parameters in place,
  // so an optimizer built before keeps updating them. Counts as an in-place edit (version).
  void set_data(const Tensor& src) const;

  // ---- conversions and copies (ops/)
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor clone() const;
  Tensor contiguous() const;

  // ---- views (ops/shape_ops.cpp); each shares storage and is differentiable
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;

  // ---- math shortcuts (ops/ops.h has the full list and the formulas)
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;  // values and argmax (ops/ops.h's max)
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor masked_fill(const Tensor& mask, double value) const;

  // ---- in place (bump the version counter; see ops/elementwise.cpp for the autograd rules)
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& clamp_(double min, double max);
  Tensor& uniform_(double low, double high);
  Tensor& normal_(double mean = 0.0, double std = 1.0);

 private:
  // Where an undefined tensor came from, for the error of its accessors (a static string).
  Tensor(std::nullptr_t, const char* why) : why_undefined_(why) {}
  // The one place an accessor reaches the TensorImpl: an undefined tensor throws here. (The
  // handle is const, the TensorImpl it shares is not: const accessors may set grad or version.)
  TensorImpl& checked(const char* accessor) const {
    if (impl_ == nullptr) [[unlikely]] throw_undefined(accessor);
    return *impl_;
  }
  [[noreturn]] void throw_undefined(const char* accessor) const;

  std::shared_ptr<TensorImpl> impl_;
  const char* why_undefined_;  // a static string; null: default-constructed
};

// What max(dim), min(dim) and sort return, as torch's (values, indices) named tuples:
//   auto [values, indices] = max(x, 1);
struct ValuesIndices {
  Tensor values;   // differentiable
  Tensor indices;  // int64
};

// Values printed with shape and dtype, eliding the middle of long dimensions:
//   tensor([[0.1, 0.2], [0.3, 0.4]], shape=(2, 2), dtype=float32)
std::string to_string(const Tensor& t);

// ---- factories
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {.dtype = DType::i64});
Tensor scalar_tensor(double value, TensorOptions options = {});
// Uniform [0, 1) and standard normal values from the seeded counter-based generator (core/rng.h).
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
// From values in row-major order; the shape's element count must match.
// The dtype follows T unless given: float -> float32, double -> float64, integers -> int64, bool.
template <class T>
constexpr DType default_dtype_for() {
  if constexpr (std::is_same_v<T, bool>) return DType::b8;
  else if constexpr (std::is_integral_v<T>) return DType::i64;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else return DType::f32;
}
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                   TensorOptions options = {.dtype = default_dtype_for<T>()});
Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options = {});
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});

}  // namespace seqgrad

template <>
struct fmt::formatter<seqgrad::Tensor> : fmt::formatter<std::string_view> {
  auto format(const seqgrad::Tensor& t, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "{}", seqgrad::to_string(t));
  }
};
