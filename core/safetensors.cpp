// Reading and writing safetensors files (see core/safetensors.h). The reader treats its input as
// hostile: every length, offset and shape is checked, with overflow-checked arithmetic, before it
// is used, so a corrupt file is an IOError and never an out-of-bounds read or a huge allocation.
#include "core/safetensors.h"

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fileio.h"
#include "core/json.h"

namespace seqgrad::safetensors {
namespace {

using nlohmann::json;

const std::string kMetadataKey = "__metadata__";
constexpr std::size_t kLengthBytes = 8;  // the little-endian u64 in front of the header
// A valid header nests three containers deep: root object, tensor object, shape/offsets array.
constexpr int kMaxContainerDepth = 3;

struct DTypeInfo {
  std::string_view name;
  std::size_t size;
};
// In the reference implementation's alignment order (its Dtype enum). serialize() lays tensors out
// from the end of this list to the start, so each offset is a multiple of its element size.
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
    {"I32", 4}, {"U32", 4}, {"F32", 4},
    {"F64", 8}, {"I64", 8}, {"U64", 8},
}};

// Index of `dtype` in kDTypes, or kDTypes.size() if unknown.
std::size_t dtype_index(std::string_view dtype) {
  auto it = std::find_if(kDTypes.begin(), kDTypes.end(),
                         [&](const DTypeInfo& info) { return info.name == dtype; });
  return static_cast<std::size_t>(it - kDTypes.begin());
}

// numel(shape) × element_size, or nullopt if a dimension is negative or the product overflows.
std::optional<std::uint64_t> byte_count(const std::vector<std::int64_t>& shape,
                                        std::size_t element_size) {
  std::uint64_t total = element_size;
  for (std::int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(total, static_cast<std::uint64_t>(dim), &total))
      return std::nullopt;
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Reading

template <typename... Args>
[[noreturn]] void fail(const std::string& source, fmt::format_string<Args...> problem,
                       Args&&... args) {
  throw IOError(fmt::format("safetensors: '{}': {}", source,
                            fmt::format(problem, std::forward<Args>(args)...)));
}

// One tensor as the header declares it, before its bytes are copied out of the buffer.
struct Slot {
  std::string name;
  Entry entry;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

std::uint64_t read_u64_le(std::string_view bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < kLengthBytes; ++i)
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return value;
}

// Parses the header, rejecting duplicate keys (JSON parsers silently keep one of them, which would
// let two readers disagree about a file) and nesting deeper than a safetensors header can have.
json parse_header_json(std::string_view header, const std::string& source) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows it; raw
  // NUL is never valid JSON, so reject it here.
  if (std::size_t nul = header.find('\0'); nul != std::string_view::npos)
    fail(source, "header is not valid JSON: NUL byte at offset {}", nul);
  std::vector<std::set<std::string>> keys_seen;  // one set per open object
  auto check_event = [&](int depth, json::parse_event_t event, json& parsed) {
    using Event = json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      if (depth >= kMaxContainerDepth)
        fail(source, "header JSON nests deeper than a safetensors header ({} levels)",
             kMaxContainerDepth);
      if (event == Event::object_start) keys_seen.emplace_back();
    } else if (event == Event::object_end) {
      keys_seen.pop_back();
    } else if (event == Event::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!keys_seen.back().insert(key).second) {
        if (depth == 1) fail(source, "tensor '{}' is declared twice in the header", key);
        fail(source, "key \"{}\" appears twice in one header object", key);
      }
    }
    return true;
  };
  try {
    return json::parse(header.begin(), header.end(), check_event);
  } catch (const json::exception& e) {
    fail(source, "header is not valid JSON: {}", e.what());
  }
}

std::map<std::string, std::string> read_metadata(const json& value, const std::string& source) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // the reference writer's "no metadata"
  if (!value.is_object())
    fail(source, "\"{}\" must be an object of strings, got {}", kMetadataKey, value.type_name());
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      fail(source, "\"{}\" value of '{}' must be a string, got {}", kMetadataKey, key,
           item.type_name());
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

const json& require_field(const std::string& name, const json& info, const char* field,
                          const std::string& source) {
  auto it = info.find(field);
  if (it == info.end()) fail(source, "tensor '{}': missing \"{}\"", name, field);
  return *it;
}

// A JSON array of non-negative integers that fit in 64 bits (negative numbers parse as signed
// integers, fractions and too-large numbers as floats: all rejected here).
std::vector<std::uint64_t> read_unsigned_array(const std::string& name, const json& info,
                                               const char* field, const std::string& source) {
  const json& value = require_field(name, info, field, source);
  if (!value.is_array())
    fail(source, "tensor '{}': \"{}\" must be an array, got {}", name, field, value.type_name());
  std::vector<std::uint64_t> numbers;
  numbers.reserve(value.size());
  for (const json& item : value) {
    if (!item.is_number_unsigned())
      fail(source, "tensor '{}': \"{}\" must hold non-negative integers, got {}", name, field,
           json_preview(item));
    numbers.push_back(item.get<std::uint64_t>());
  }
  return numbers;
}

std::string read_dtype(const std::string& name, const json& info, const std::string& source) {
  const json& value = require_field(name, info, "dtype", source);
  if (!value.is_string())
    fail(source, "tensor '{}': \"dtype\" must be a string, got {}", name, value.type_name());
  std::string dtype = value.get<std::string>();
  if (!dtype_size(dtype)) fail(source, "tensor '{}': unknown dtype \"{}\"", name, dtype);
  return dtype;
}

std::vector<std::int64_t> read_shape(const std::string& name, const json& info,
                                     const std::string& source) {
  std::vector<std::int64_t> shape;
  for (std::uint64_t dim : read_unsigned_array(name, info, "shape", source)) {
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(source, "tensor '{}': dimension {} is too large", name, dim);
    shape.push_back(static_cast<std::int64_t>(dim));
  }
  return shape;
}

// Reads one header entry and checks it on its own: known dtype, sane shape, and an offset span
// that is exactly numel × element size bytes. Placement in the buffer is check_layout's job.
Slot read_tensor(const std::string& name, const json& info, const std::string& source) {
  if (!info.is_object())
    fail(source, "tensor '{}': expected an object with dtype, shape and data_offsets, got {}",
         name, info.type_name());
  Slot slot;
  slot.name = name;
  slot.entry.dtype = read_dtype(name, info, source);
  slot.entry.shape = read_shape(name, info, source);
  std::vector<std::uint64_t> offsets = read_unsigned_array(name, info, "data_offsets", source);
  if (offsets.size() != 2)
    fail(source, "tensor '{}': \"data_offsets\" must be [begin, end], got {} numbers", name,
         offsets.size());
  slot.begin = offsets[0];
  slot.end = offsets[1];
  if (slot.end < slot.begin)
    fail(source, "tensor '{}': data_offsets [{}, {}] end before they begin", name, slot.begin,
         slot.end);
  auto bytes = byte_count(slot.entry.shape, *dtype_size(slot.entry.dtype));
  if (!bytes)
    fail(source, "tensor '{}': shape {} overflows a 64-bit byte count", name, slot.entry.shape);
  if (*bytes != slot.end - slot.begin)
    fail(source, "tensor '{}': dtype {} with shape {} is {} bytes, but data_offsets [{}, {}] span {}",
         name, slot.entry.dtype, slot.entry.shape, *bytes, slot.begin, slot.end,
         slot.end - slot.begin);
  return slot;
}

// The tensors must tile the data buffer exactly: sorted by offset, each begins where the previous
// one ended (no overlap, no hole), and the last ends at the end of the file.
void check_layout(std::vector<Slot>& slots, std::uint64_t buffer_size, const std::string& source) {
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;
  const Slot* previous = nullptr;
  for (const Slot& slot : slots) {
    if (slot.begin < covered)
      fail(source, "tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", slot.name,
           slot.begin, slot.end, previous->name, previous->begin, previous->end);
    if (slot.begin > covered)
      fail(source, "tensor '{}': data_offsets [{}, {}] leave a hole of {} bytes before them",
           slot.name, slot.begin, slot.end, slot.begin - covered);
    covered = slot.end;
    previous = &slot;
  }
  if (covered > buffer_size)
    fail(source, "tensor data ends at byte {} but the data buffer holds only {} bytes (truncated?)",
         covered, buffer_size);
  if (covered < buffer_size)
    fail(source, "the last {} bytes of the data buffer belong to no tensor",
         buffer_size - covered);
}

// ---------------------------------------------------------------------------------------------
// Writing

// One tensor placed in the output: validated, with its byte count and layout rank.
struct Placed {
  const std::string* name;
  const Entry* entry;
  std::uint64_t bytes;
  std::size_t rank;  // index in kDTypes
};

Placed place(const std::string& name, const Entry& entry) {
  SG_CHECK_VALUE(name != kMetadataKey,
                 "safetensors::serialize: \"{}\" is reserved for metadata and cannot name a tensor",
                 name);
  std::size_t rank = dtype_index(entry.dtype);
  SG_CHECK_VALUE(rank < kDTypes.size(), "safetensors::serialize: tensor '{}': unknown dtype \"{}\"",
                 name, entry.dtype);
  auto bytes = byte_count(entry.shape, kDTypes[rank].size);
  SG_CHECK_VALUE(bytes.has_value(),
                 "safetensors::serialize: tensor '{}': shape {} has a negative dimension or "
                 "overflows a 64-bit byte count",
                 name, entry.shape);
  SG_CHECK_VALUE(*bytes == entry.data.size(),
                 "safetensors::serialize: tensor '{}': dtype {} with shape {} needs {} bytes, but "
                 "data holds {}",
                 name, entry.dtype, entry.shape, *bytes, entry.data.size());
  return {&name, &entry, *bytes, rank};
}

// Descending alignment, then by name (as the reference writer), so data offsets stay aligned.
std::vector<Placed> plan_layout(const File& file) {
  std::vector<Placed> plan;
  plan.reserve(file.tensors.size());
  for (const auto& [name, entry] : file.tensors) plan.push_back(place(name, entry));
  std::stable_sort(plan.begin(), plan.end(),
                   [](const Placed& a, const Placed& b) { return a.rank > b.rank; });
  return plan;
}

// The JSON header, space-padded to a multiple of 8 bytes so the data buffer starts aligned.
std::string header_text(const File& file, const std::vector<Placed>& plan) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header[kMetadataKey] = file.metadata;
  std::uint64_t offset = 0;
  for (const Placed& placed : plan) {
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = placed.entry->dtype;
    info["shape"] = placed.entry->shape;
    info["data_offsets"] = nlohmann::ordered_json::array({offset, offset + placed.bytes});
    header[*placed.name] = std::move(info);
    offset += placed.bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw ValueError(fmt::format(
        "safetensors::serialize: a tensor name or metadata string is not valid UTF-8: {}",
        e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  SG_CHECK_VALUE(text.size() <= kMaxHeaderBytes,
                 "safetensors::serialize: header is {} bytes, over the format's limit of {}",
                 text.size(), kMaxHeaderBytes);
  return text;
}

void append_u64_le(std::string& out, std::uint64_t value) {
  for (std::size_t i = 0; i < kLengthBytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::optional<std::size_t> dtype_size(std::string_view dtype) {
  std::size_t index = dtype_index(dtype);
  if (index == kDTypes.size()) return std::nullopt;
  return kDTypes[index].size;
}

std::string serialize(const File& file) {
  std::vector<Placed> plan = plan_layout(file);
  std::string header = header_text(file, plan);
  std::uint64_t data_bytes = 0;
  for (const Placed& placed : plan) data_bytes += placed.bytes;
  std::string out;
  out.reserve(kLengthBytes + header.size() + data_bytes);
  append_u64_le(out, header.size());
  out += header;
  for (const Placed& placed : plan) out += placed.entry->data;
  return out;
}

File parse(std::string_view bytes, const std::string& source_name) {
  const std::string& source = source_name;
  if (bytes.size() < kLengthBytes)
    fail(source, "file is {} bytes, too short for the 8-byte header length", bytes.size());
  const std::uint64_t header_size = read_u64_le(bytes);
  if (header_size > kMaxHeaderBytes)
    fail(source, "header length {} exceeds the limit of {} bytes", header_size, kMaxHeaderBytes);
  if (header_size > bytes.size() - kLengthBytes)
    fail(source, "header length {} runs past the end of the file ({} bytes; truncated?)",
         header_size, bytes.size());
  std::string_view header = bytes.substr(kLengthBytes, header_size);
  if (header.empty() || header.front() != '{')
    fail(source, "header must be a JSON object starting with '{{'");
  const json root = parse_header_json(header, source);

  File file;
  std::vector<Slot> slots;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey)
      file.metadata = read_metadata(value, source);
    else
      slots.push_back(read_tensor(key, value, source));
  }
  std::string_view buffer = bytes.substr(kLengthBytes + header_size);
  check_layout(slots, buffer.size(), source);
  for (Slot& slot : slots) {
    slot.entry.data.assign(buffer.substr(slot.begin, slot.end - slot.begin));
    file.tensors.emplace(std::move(slot.name), std::move(slot.entry));
  }
  return file;
}

void save(const std::string& path, const File& file) { write_file_atomic(path, serialize(file)); }

File load(const std::string& path) { return parse(read_regular_file(path), path); }

}  // namespace seqgrad::safetensors
