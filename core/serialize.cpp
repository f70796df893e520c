// The Tensor adapter over core/safetensors: dtype mapping and (de)strided copies. Uses only core
// (no ops), so strided tensors are gathered with a plain index walk here.
#include "core/serialize.h"

#include <bit>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/ops_hooks.h"

namespace seqgrad {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps here");

constexpr std::string_view kSupported = "F32, F64, I64, BOOL, I8, U8, I32";

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::b8: return "BOOL";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
  }
  return "?";
}

bool seqgrad_dtype(std::string_view name, DType& out) {
  if (name == "F32") out = DType::f32;
  else if (name == "F64") out = DType::f64;
  else if (name == "I64") out = DType::i64;
  else if (name == "BOOL") out = DType::b8;
  else if (name == "I8") out = DType::i8;
  else if (name == "U8") out = DType::u8;
  else if (name == "I32") out = DType::i32;
  else return false;
  return true;
}

// Copies the elements of a strided tensor into `out` in row-major order (elem bytes each).
void gather_row_major(const Tensor& t, char* out) {
  const size_t elem = element_size(t.dtype());
  const char* base = static_cast<const char*>(t.raw_data());
  const int n = t.ndim();
  const int64_t total = t.numel();
  if (total == 0) return;
  if (t.is_contiguous()) {
    std::memcpy(out, base, static_cast<size_t>(total) * elem);
    return;
  }
  Shape index;
  index.resize(n);
  int64_t offset = 0;  // in elements, relative to t's first element
  for (int64_t i = 0; i < total; ++i) {
    std::memcpy(out + static_cast<size_t>(i) * elem, base + offset * static_cast<int64_t>(elem), elem);
    for (int d = n - 1; d >= 0; --d) {
      if (++index[d] < t.shape()[d]) {
        offset += t.strides()[d];
        break;
      }
      offset -= t.strides()[d] * (t.shape()[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace

safetensors::Entry to_entry(const Tensor& t_in) {
  SG_CHECK_VALUE(t_in.defined(), "to_entry: tensor is undefined");
  const Tensor t = t_in.device().is_cpu() ? t_in : ops_hooks("to_entry").to_device(t_in.detach(), Device::cpu());  // one copy over
  safetensors::Entry entry;
  entry.dtype = safetensors_dtype(t.dtype());
  entry.shape = t.shape().vec();
  entry.data.resize(static_cast<size_t>(t.numel()) * element_size(t.dtype()));
  gather_row_major(t, entry.data.data());
  if (t.dtype() == DType::b8)  // bool storage is one byte, 0 or 1, as safetensors' BOOL
    for (char& c : entry.data) c = c != 0 ? 1 : 0;
  return entry;
}

Tensor from_entry(const safetensors::Entry& entry, const std::string& name) {
  DType dtype{};
  SG_CHECK_IO(seqgrad_dtype(entry.dtype, dtype),
              "tensor '{}' has dtype {}, which seqgrad has no type for (supported: {}); convert it "
              "before saving, e.g. tensor.float() in PyTorch",
              name, entry.dtype, kSupported);
  SG_CHECK_IO(static_cast<int>(entry.shape.size()) <= kMaxDims,
              "tensor '{}' has {} dimensions; seqgrad supports at most {}", name, entry.shape.size(), kMaxDims);
  Shape shape(entry.shape);
  SG_CHECK_IO(entry.data.size() == static_cast<size_t>(shape.numel()) * element_size(dtype),
              "tensor '{}' ({} {}) holds {} bytes, expected {}", name, entry.dtype, shape, entry.data.size(),
              static_cast<size_t>(shape.numel()) * element_size(dtype));
  Tensor t = Tensor::empty(shape, {.dtype = dtype});
  if (dtype == DType::b8) {
    bool* p = t.data<bool>();
    for (size_t i = 0; i < entry.data.size(); ++i) p[i] = entry.data[i] != 0;  // any non-zero byte is true
  } else if (!entry.data.empty()) {
    std::memcpy(t.raw_data(), entry.data.data(), entry.data.size());
  }
  return t;
}

void save_tensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  safetensors::File file;
  file.metadata = metadata;
  for (const auto& [name, t] : tensors) {
    SG_CHECK_VALUE(t.defined(), "save_tensors: '{}': tensor '{}' is undefined", path, name);
    file.tensors.emplace(name, to_entry(t));  // device tensors are copied to the CPU
  }
  safetensors::save(path, file);
}

TensorFile load_tensors(const std::string& path) {
  safetensors::File file = safetensors::load(path);
  TensorFile out;
  out.metadata = std::move(file.metadata);
  for (const auto& [name, entry] : file.tensors) {
    try {
      out.tensors.emplace(name, from_entry(entry, name));
    } catch (const IOError& e) {
      throw IOError(fmt::format("load_tensors: '{}': {}", path, e.what()));
    }
  }
  return out;
}

}  // namespace seqgrad
