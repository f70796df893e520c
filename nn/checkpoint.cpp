// Checkpoints over core/serialize: module state + extras + metadata, with a CRC-32 so that a
// flipped byte anywhere is an error instead of silently different weights.
#include "nn/checkpoint.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/serialize.h"
#include "core/state_dict.h"

namespace seqgrad::nn {
namespace {

using nlohmann::json;

constexpr const char* kFormatKey = "seqgrad.format";
constexpr const char* kFormat = "seqgrad-checkpoint-2";
constexpr const char* kFormatBeforeStateDict = "seqgrad-checkpoint-1";  // the caller's metadata as strings
constexpr const char* kExtraKey = "seqgrad.extra_tensors";
constexpr const char* kValuesKey = "seqgrad.values";  // the extra StateDict's values, one JSON object
constexpr std::string_view kReservedPrefix = "seqgrad.";

// CRC-32 (IEEE 802.3, the zlib/PNG polynomial), one byte at a time.
class Crc32 {
 public:
  void update(const void* data, size_t n) {
    static const std::array<uint32_t, 256> table = [] {
      std::array<uint32_t, 256> t{};
      for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        t[i] = c;
      }
      return t;
    }();
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) crc_ = table[(crc_ ^ p[i]) & 0xFF] ^ (crc_ >> 8);
  }
  void update(std::string_view s) {
    update(s.data(), s.size());
    update("\0", 1);  // separator: ("ab", "c") and ("a", "bc") differ
  }
  uint32_t value() const { return crc_ ^ 0xFFFFFFFFu; }

 private:
  uint32_t crc_ = 0xFFFFFFFFu;
};

}  // namespace

std::string checkpoint_checksum(const std::map<std::string, Tensor>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  std::map<std::string, ChecksumSource> sources;
  for (const auto& [name, t] : tensors)
    sources.emplace(name, ChecksumSource{t.dtype(), t.shape(), [&t = t](const auto& write) {
                                           Tensor c = t.detach().cpu().contiguous();
                                           write(c.raw_data(), static_cast<size_t>(c.numel()) * element_size(c.dtype()));
                                         }});
  return checkpoint_checksum(sources, metadata);
}

std::string checkpoint_checksum(const std::map<std::string, ChecksumSource>& tensors,
                                const std::map<std::string, std::string>& metadata) {
  Crc32 crc;
  for (const auto& [name, source] : tensors) {
    crc.update(name);
    crc.update(dtype_name(source.dtype));
    crc.update(fmt::format("{}", source.shape));
    source.bytes([&](const void* data, size_t bytes) { crc.update(data, bytes); });
  }
  for (const auto& [key, value] : metadata) {
    if (key == kChecksumKey) continue;
    crc.update(key);
    crc.update(value);
  }
  return fmt::format("{:08x}", crc.value());
}

void check_finite_tensors(const std::map<std::string, Tensor>& tensors, const std::string& path) {
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;  // not a structured binding: the lambda captures it (clang < 16)
    const Tensor& t = entry.second;
    if (!t.defined() || !is_floating(t.dtype())) continue;
    Tensor c = t.detach().cpu().contiguous();
    dispatch_floating(c.dtype(), "check_finite_tensors", [&]<class T>() {
      const T* p = c.data<T>();
      int64_t bad = 0, first = -1;
      for (int64_t i = 0, n = c.numel(); i < n; ++i) {
        if (std::isfinite(p[i])) continue;
        if (bad++ == 0) first = i;
      }
      SG_CHECK_IO(bad == 0, "{}: tensor '{}' {} holds {} non-finite value(s), the first {} at flat index {}; the "
                  "weights are unusable (saved after a diverged step?)", path, name, c.shape(), bad,
                  static_cast<double>(p[first]), first);
    });
  }
}

void save_checkpoint(const std::string& path, const Module& module, const StateDict& extra) {
  std::map<std::string, Tensor> tensors = module.state_dict();
  json extra_names = json::array();
  for (const auto& [name, t] : extra) {
    SG_CHECK_VALUE(!tensors.count(name), "save_checkpoint: extra tensor '{}' has the name of a {} tensor", name,
                   module.type_name());
    SG_CHECK_VALUE(t.defined(), "save_checkpoint: extra tensor '{}' is undefined", name);
    tensors[name] = t.detach();
    extra_names.push_back(name);
  }
  check_state_object(extra.values, "save_checkpoint: extra");
  std::map<std::string, std::string> meta{
      {kFormatKey, kFormat}, {kExtraKey, extra_names.dump()}, {kValuesKey, extra.values.dump()}};
  meta[kChecksumKey] = checkpoint_checksum(tensors, meta);
  save_tensors(path, tensors, meta);
}

namespace {

// The values of a checkpoint's extra StateDict: format 2's JSON object, or the metadata strings
// of format 1 or of a plain safetensors file (the keys not reserved) as string values.
json checkpoint_values(const TensorFile& file, bool before_state_dict, const std::string& path) {
  json values = json::object();
  if (before_state_dict) {
    for (const auto& [key, value] : file.metadata)
      if (key.rfind(kReservedPrefix, 0) != 0) values[key] = value;
    return values;
  }
  auto stored = file.metadata.find(kValuesKey);
  SG_CHECK_IO(stored != file.metadata.end(), "load_checkpoint: {} is corrupted: '{}' is missing", path, kValuesKey);
  values = parse_json(stored->second, fmt::format("load_checkpoint: {} is corrupted: '{}'", path, kValuesKey));
  SG_CHECK_IO(values.is_object(), "load_checkpoint: {} is corrupted: '{}' must be a JSON object, got {}", path,
              kValuesKey, json_preview(values));
  return values;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path, Module& module, bool strict) {
  TensorFile file = load_tensors(path);  // IOError for a missing, truncated or malformed file
  Checkpoint out;
  std::set<std::string> extra_names;
  // A seqgrad checkpoint has all three reserved keys; any one of them alone means a damaged file.
  bool ours = false;
  for (const char* key : {kFormatKey, kExtraKey, kChecksumKey}) ours = ours || file.metadata.count(key);
  bool before_state_dict = false;
  if (ours) {
    auto format = file.metadata.find(kFormatKey);
    SG_CHECK_IO(format != file.metadata.end(), "load_checkpoint: {} is corrupted: '{}' is missing", path, kFormatKey);
    before_state_dict = format->second == kFormatBeforeStateDict;
    SG_CHECK_IO(format->second == kFormat || before_state_dict, "load_checkpoint: {} has format '{}'; this build "
                "reads '{}' and '{}'", path, format->second, kFormat, kFormatBeforeStateDict);
    auto stored = file.metadata.find(kChecksumKey);
    SG_CHECK_IO(stored != file.metadata.end(), "load_checkpoint: {} is corrupted: its checksum entry is missing",
                path);
    std::string computed = checkpoint_checksum(file.tensors, file.metadata);
    SG_CHECK_IO(stored->second == computed,
                "load_checkpoint: {} is corrupted: checksum {} does not match its contents ({})", path,
                stored->second, computed);
    auto extra = file.metadata.find(kExtraKey);
    SG_CHECK_IO(extra != file.metadata.end(), "load_checkpoint: {} is corrupted: '{}' is missing", path, kExtraKey);
    const json names =
        parse_json(extra->second, fmt::format("load_checkpoint: {} is corrupted: '{}'", path, kExtraKey));
    try {
      for (const auto& name : names) extra_names.insert(name.get<std::string>());
    } catch (const json::exception& e) {
      throw IOError(fmt::format("load_checkpoint: {} is corrupted: '{}' is not a JSON list of names ({})", path,
                                kExtraKey, e.what()));
    }
  }
  out.extra.values = checkpoint_values(file, !ours || before_state_dict, path);  // a plain file's metadata: strings
  check_finite_tensors(file.tensors, path);
  StateDict state;
  for (auto& [name, t] : file.tensors) {
    if (extra_names.count(name)) out.extra[name] = t;
    else state[name] = t;
  }
  for (const auto& name : extra_names)
    SG_CHECK_IO(out.extra.count(name), "load_checkpoint: {} is corrupted: extra tensor '{}' is listed but missing",
                path, name);
  try {
    out.report = module.load_state_dict(state, strict);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("load_checkpoint: {} does not fit the model: {}", path, e.what()));
  }
  return out;
}

}  // namespace seqgrad::nn
