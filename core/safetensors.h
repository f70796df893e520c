// The Hugging Face safetensors format (https://github.com/huggingface/safetensors): named raw
// tensors plus string metadata. Knows bytes, dtypes and shapes only; no dependency on Tensor.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"key": "value"}, "name": {"dtype": "F32", "shape": [2, 3],
//                                              "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the data buffer. Offsets are relative to the buffer,
// the tensors tile it exactly (no holes, no overlaps), and data is row-major little-endian.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::safetensors {

// Headers above this size are rejected (the reference implementation's limit).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct Entry {
  std::string dtype;                // "F32", "I64", "BOOL", ... (see dtype_size)
  std::vector<std::int64_t> shape;  // {} is a scalar, {0} an empty tensor
  std::string data;                 // raw little-endian row-major bytes: numel × dtype_size
  bool operator==(const Entry&) const = default;
};

struct File {
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object
  std::map<std::string, Entry> tensors;
  bool operator==(const File&) const = default;
};

// Bytes per element of a safetensors dtype name: BOOL, U8, I8, F8_E5M2, F8_E4M3 (1), I16, U16,
// F16, BF16 (2), I32, U32, F32 (4), I64, U64, F64 (8). nullopt for names we do not know.
std::optional<std::size_t> dtype_size(std::string_view dtype);

// The file's bytes. Tensors are laid out as the reference implementation does (descending
// alignment, then by name), so every tensor's data is aligned to its element size. Throws
// ValueError naming the tensor for an unknown dtype, a negative dimension, data whose size is not
// numel × dtype_size, the reserved name "__metadata__", or strings that are not valid UTF-8.
std::string serialize(const File& file);

// Parses and validates a whole file held in memory. Every malformation throws IOError whose
// message names `source_name`, the problem and, where there is one, the tensor.
File parse(std::string_view bytes, const std::string& source_name);

// serialize() written with write_file_atomic(): readers see the old file or the new, never a mix.
void save(const std::string& path, const File& file);

// read_regular_file() then parse(): a FIFO or device is an error, never a blocked read.
File load(const std::string& path);

}  // namespace seqgrad::safetensors
