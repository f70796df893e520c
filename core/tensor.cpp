// Tensor metadata, storage, factories and printing. Math is in ops/.
#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/device_memory.h"
#include "core/ops_hooks.h"
#include "core/rng.h"

namespace seqgrad {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    SG_CHECK_SHAPE(da == db || da == 1 || db == 1,
                   "{}: shapes {} and {} cannot be broadcast together (dimension {}: {} vs {})", op, a,
                   b, i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Storage::Storage(size_t bytes, Device dev) : nbytes(bytes), device(dev) {
  if (!dev.is_cpu()) {  // device memory comes from the backend registered for the device kind
    DeviceMemory& memory = device_memory_for(dev, "storage");
    data = bytes > 0 ? memory.allocate(bytes, dev) : nullptr;
    return;
  }
  data = cpu_memory::allocate(bytes);  // 64-byte aligned for AVX-512, cached for reuse
}

Storage::~Storage() {
  if (device.is_cpu()) cpu_memory::deallocate(data, nbytes);
  else if (data != nullptr) device_memory(device.kind)->deallocate(data, nbytes, device);
}

namespace {
// numel × element size, or a ShapeError when either product overflows: a hostile shape (a
// corrupt config, a crafted file) must not wrap to a small count that sizes a short buffer.
size_t checked_bytes(const Shape& shape, DType dtype) {
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  size_t bytes = element_size(dtype);
  for (int64_t d : shape)
    SG_CHECK_SHAPE(!__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes),
                   "empty: a {} tensor of shape {} needs more bytes than size_t can count", dtype, shape);
  return bytes;
}

// numel, or a ShapeError naming `op` when it overflows int64 (Shape::numel would wrap).
int64_t checked_numel(const Shape& shape, const char* op) {
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    SG_CHECK_SHAPE(!__builtin_mul_overflow(n, d, &n), "{}: shape {} has more elements than int64 can count", op,
                   shape);
  return n;
}

// The storage of a new tensor; an allocation failure names the tensor's shape and dtype.
std::shared_ptr<Storage> allocate_storage(const Shape& shape, TensorOptions options) {
  const size_t bytes = checked_bytes(shape, options.dtype);
  try {
    return std::make_shared<Storage>(bytes, options.device);
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("empty: out of memory allocating {} bytes for a {} tensor of shape {} on {}", bytes,
                            options.dtype, shape, options.device));
  } catch (const Error& e) {
    if (!options.device.is_cpu()) throw;  // the device backends' messages name the tensor already
    throw Error(fmt::format("empty: cannot allocate a {} tensor of shape {}: {}", options.dtype, shape, e.what()));
  }
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape)
    SG_CHECK_SHAPE(d >= 0, "empty: negative dimension in shape {}", shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = allocate_storage(shape, options);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  if (options.requires_grad) {
    SG_CHECK_DTYPE(is_floating(options.dtype), "requires_grad: only floating tensors can require "
                                               "gradients, got {}", options.dtype);
    impl->requires_grad = true;
  }
  return Tensor(std::move(impl));
}

namespace {
constexpr const char* kDefaultConstructed = "a default-constructed Tensor holds no data";
constexpr const char* kGradNotRequired =
    "it is grad() of a tensor that does not require grad: call requires_grad_() on it before backward()";
constexpr const char* kGradOfNonLeaf =
    "it is grad() of a non-leaf tensor: only leaves keep .grad (use autograd::grad for others)";
constexpr const char* kGradNotYet =
    "it is grad() of a tensor that has none: grad() is undefined until backward() reaches the tensor, "
    "and again after zero_grad(); call backward() first";
}  // namespace

std::string_view Tensor::why_undefined() const {
  if (defined()) return {};
  return why_undefined_ != nullptr ? why_undefined_ : kDefaultConstructed;
}

void Tensor::throw_undefined(const char* accessor) const {
  throw Error(fmt::format("{}: undefined tensor ({}); test with defined()", accessor, why_undefined()));
}

Tensor Tensor::grad() const {
  const TensorImpl& impl = checked("grad");
  if (impl.grad != nullptr) return Tensor(impl.grad);
  if (!impl.requires_grad) return Tensor(nullptr, kGradNotRequired);
  return Tensor(nullptr, impl.grad_fn != nullptr ? kGradOfNonLeaf : kGradNotYet);
}

void Tensor::set_data(const Tensor& src) const {
  TensorImpl& impl = checked("set_data");
  SG_CHECK(src.defined(), "set_data: the source is an undefined tensor ({})", src.why_undefined());
  SG_CHECK(impl.grad_fn == nullptr, "set_data: only leaf tensors can take new data; this {} tensor was computed by "
           "{}", impl.shape, impl.grad_fn->name);
  SG_CHECK_DTYPE(!impl.requires_grad || is_floating(src.dtype()), "set_data: a tensor that requires grad needs "
                 "floating data, got {} {}", src.dtype(), src.shape());
  const uint32_t version = impl.storage->version;
  const TensorImpl& from = *src.impl_;
  impl.storage = from.storage;
  impl.shape = from.shape;
  impl.strides = from.strides;
  impl.offset = from.offset;
  impl.dtype = from.dtype;
  impl.is_view = from.is_view || impl.storage.use_count() > 2;  // another tensor still shares it
  // A backward that saved the old data must not read the new: a version past the old one makes
  // SavedTensor::get throw "modified by an in-place operation" instead.
  impl.storage->version = std::max(impl.storage->version, version + 1);
}

int64_t Tensor::size(int64_t dim) const {
  const Shape& shape = checked("size").shape;
  return shape[wrap_dim(dim, shape.size(), "size")];
}

bool Tensor::is_contiguous() const {
  checked("is_contiguous");
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

Tensor& Tensor::requires_grad_(bool on) {
  checked("requires_grad_");
  SG_CHECK(is_leaf() || on, "requires_grad_: can only change requires_grad of leaf tensors");
  SG_CHECK_DTYPE(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require "
                                              "gradients, got {}", dtype());
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  const TensorImpl& self = checked("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = self.storage;
  impl->shape = self.shape;
  impl->strides = self.strides;
  impl->offset = self.offset;
  impl->dtype = self.dtype;
  impl->is_view = true;
  return Tensor(std::move(impl));
}

namespace {

// Calls f(element_offset) for every element in row-major order of a strided CPU tensor.
template <class F>
void for_each_offset(const Tensor& t, F&& f) {
  int n = t.ndim();
  int64_t total = t.numel();
  if (total == 0) return;
  Shape index;
  index.resize(n);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    f(off);
    for (int d = n - 1; d >= 0; --d) {
      if (++index[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= t.strides()[d] * (t.shape()[d] - 1);
      index[d] = 0;
    }
  }
}

double value_at(const Tensor& t, int64_t element) {
  const char* base = static_cast<const char*>(t.impl()->storage->data);
  return dispatch_all(t.dtype(), [&]<class T>() -> double {
    return static_cast<double>(reinterpret_cast<const T*>(base)[element]);
  });
}

}  // namespace

double Tensor::item() const {
  checked("item");
  SG_CHECK_SHAPE(numel() == 1, "item: only one-element tensors can be converted to a number, got shape {}",
                 shape());
  if (device().is_cpu()) return value_at(*this, offset());
  alignas(8) unsigned char value[8];
  device_memory_for(device(), "item").copy(value, Device::cpu(), raw_data(), device(), element_size(dtype()));
  return dispatch_all(dtype(), [&]<class T>() -> double { return static_cast<double>(*reinterpret_cast<T*>(value)); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  checked("to_vector");
  Tensor t = device().is_cpu() ? *this : ops_hooks("to_vector").to_device(detach(), Device::cpu());
  std::vector<T> out;
  out.reserve(t.numel());
  dispatch_all(t.dtype(), [&]<class S>() {
    const S* base = static_cast<const S*>(t.impl()->storage->data) + t.offset();
    for_each_offset(t, [&](int64_t off) { out.push_back(static_cast<T>(base[off])); });
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<int> Tensor::to_vector<int>() const;

// ---- printing

namespace {

void print_scalar(std::string& out, DType dtype, double v) {
  if (dtype == DType::b8) out += v != 0 ? "true" : "false";
  else if (dtype == DType::i64) out += fmt::format("{}", static_cast<int64_t>(v));
  else out += fmt::format("{:.4g}", v);
}

// Prints the block of `values` (row-major) starting at `base` for dimensions dim.., eliding the
// middle of dimensions longer than 2 * kEdge + 1.
void print_block(std::string& out, const Tensor& t, const std::vector<double>& values, int dim,
                 int64_t base) {
  constexpr int64_t kEdge = 3;
  int64_t n = t.shape()[dim], block = 1;
  for (int d = dim + 1; d < t.ndim(); ++d) block *= t.shape()[d];
  std::vector<int64_t> shown;
  for (int64_t i = 0; i < n; ++i)
    if (n <= 2 * kEdge + 1 || i < kEdge || i >= n - kEdge) shown.push_back(i);
  out += '[';
  for (size_t k = 0; k < shown.size(); ++k) {
    if (k > 0) out += shown[k] == shown[k - 1] + 1 ? ", " : ", ..., ";
    if (dim + 1 == t.ndim()) print_scalar(out, t.dtype(), values[base + shown[k]]);
    else print_block(out, t, values, dim + 1, base + shown[k] * block);
  }
  out += ']';
}

}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  std::vector<double> values = t.to_vector<double>();
  if (t.ndim() == 0) {
    print_scalar(out, t.dtype(), values[0]);
  } else {
    print_block(out, t, values, 0, 0);
  }
  out += fmt::format(", shape={}, dtype={}", t.shape(), t.dtype());
  if (!t.device().is_cpu()) out += fmt::format(", device={}", t.device());
  if (t.requires_grad()) out += ", requires_grad=true";
  return out + ")";
}

// ---- the services of ops/ (core/ops_hooks.h)

namespace {
OpsHooks registered_hooks;
}  // namespace

void register_ops_hooks(const OpsHooks& hooks) { registered_hooks = hooks; }

const OpsHooks& ops_hooks(const char* what) {
  SG_CHECK(registered_hooks.add && registered_hooks.add_inplace && registered_hooks.clone && registered_hooks.to_device,
           "core: {} needs the ops library (link seqgrad's ops, or libseqgrad)", what);
  return registered_hooks;
}

// ---- factories (values are computed on the CPU; other devices get them by one copy)

namespace {
Tensor on_device(const Tensor& host, Device device, const char* op) {
  if (device.is_cpu()) return host;
  Tensor t = Tensor::empty(host.shape(), {.dtype = host.dtype(), .device = device});
  if (t.numel() > 0)
    device_memory_for(device, op).copy(t.raw_data(), device, host.raw_data(), Device::cpu(),
                                       t.numel() * element_size(t.dtype()));
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) { return Tensor::empty(shape, options); }

Tensor full(const Shape& shape, double value, TensorOptions options) {
  bool wants_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = Tensor::empty(shape, options);
  dispatch_all(options.dtype, [&]<class T>() {
    T v = static_cast<T>(value);
    if (!options.device.is_cpu()) {  // filled in place on the device
      if (t.numel() > 0) device_memory_for(options.device, "full").fill(t.raw_data(), options.device, &v, sizeof(T), t.numel());
      return;
    }
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = v;
  });
  if (wants_grad) t.requires_grad_();
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  SG_CHECK_VALUE(step != 0, "arange: step must be non-zero");
  SG_CHECK_VALUE((end - start) / step >= 0, "arange: empty or backwards range [{}, {}) with step {}",
                 start, end, step);
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = Tensor::empty({n}, {.dtype = options.dtype});
  dispatch_all(options.dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
  t = on_device(t, options.device, "arange");
  if (options.requires_grad) t.requires_grad_();
  return t;
}

namespace {
template <class Sample>
Tensor random_tensor(const Shape& shape, TensorOptions options, const char* op, Sample sample) {
  Tensor t = Tensor::empty(shape, {.dtype = options.dtype});
  Generator& gen = default_generator();
  uint64_t seed = gen.seed(), first = gen.reserve(t.numel());
  dispatch_floating(options.dtype, op, [&]<class T>() {
    T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      p[i] = static_cast<T>(sample.template operator()<T>(seed, first, i));
  });
  t = on_device(t, options.device, op);
  if (options.requires_grad) t.requires_grad_();
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions options) {
  return random_tensor(shape, options, "rand", []<class T>(uint64_t s, uint64_t f, uint64_t i) -> double {
    if constexpr (std::is_same_v<T, float>) return uniform_at(s, f, i);
    else return uniform_at_f64(s, f, i);
  });
}

Tensor randn(const Shape& shape, TensorOptions options) {
  return random_tensor(shape, options, "randn",
                       []<class T>(uint64_t s, uint64_t f, uint64_t i) -> double { return normal_at(s, f, i); });
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  const int64_t count = checked_numel(shape, "from_vector");
  SG_CHECK_SHAPE(static_cast<int64_t>(values.size()) == count, "from_vector: {} values cannot fill shape {} ({} elements)", values.size(),
                 shape, count);
  Tensor t = Tensor::empty(shape, {.dtype = options.dtype});
  dispatch_all(options.dtype, [&]<class D>() {
    D* p = t.data<D>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<D>(values[i]);
  });
  t = on_device(t, options.device, "from_vector");
  if (options.requires_grad) t.requires_grad_();
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<int>(const std::vector<int>&, const Shape&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);

Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options) {
  return from_vector(std::vector<double>(values), shape, options);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions options) {
  return from_vector(std::vector<double>(values), Shape{static_cast<int64_t>(values.size())}, options);
}

}  // namespace seqgrad
