// Tensors to and from safetensors files (the byte-level format is core/safetensors.h): checkpoints,
// test fixtures and interchange with PyTorch (safetensors.torch.load_file / save_file).
#pragma once
#include <map>
#include <string>

#include "core/safetensors.h"
#include "core/tensor.h"

namespace seqgrad {

// A loaded file: named tensors (CPU, contiguous, leaves without requires_grad) and the string
// metadata from "__metadata__".
struct TensorFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The safetensors entry of a CPU tensor: dtype F32, F64, I64 or BOOL, shape, and the values in
// row-major order (a non-contiguous tensor or view is written as its contiguous copy, holding only
// the elements it shows). Throws ValueError for an undefined tensor, DeviceError off the CPU.
safetensors::Entry to_entry(const Tensor& t);

// A fresh contiguous CPU tensor holding the entry's values. Throws IOError naming the tensor and
// the dtype for dtypes seqgrad has no type for (F16, BF16, I32, U8, ...), or for more dimensions
// than Shape holds.
Tensor from_entry(const safetensors::Entry& entry, const std::string& name);

// Writes `tensors` and `metadata` to `path` atomically (the old file or the complete new one,
// never a mix). Errors name the tensor.
void save_tensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// Reads a whole safetensors file. Every malformation or unsupported dtype throws IOError naming
// the path (and the tensor).
TensorFile load_tensors(const std::string& path);

}  // namespace seqgrad
