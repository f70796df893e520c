// Quantized translator checkpoints (models/seq2seq/quantized_checkpoint.h).
#include "models/seq2seq/quantized_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "nn/checkpoint.h"

namespace seqgrad::models {
namespace {

// A tensor's bytes for the checksum, in one piece.
nn::ChecksumSource whole_tensor(const Tensor& t) {
  return {t.dtype(), t.shape(), [&t](const auto& write) {
            const Tensor c = t.detach().cpu().contiguous();
            write(c.raw_data(), static_cast<size_t>(c.numel()) * element_size(c.dtype()));
          }};
}

// An int8 weight's values as float32 for the checksum, kRowsPerPiece rows at a time: no float32
// copy of a whole weight (the largest, decoder.out, would be 14 MB for the default preset).
nn::ChecksumSource int8_as_float(const QuantizedWeight& q) {
  return {DType::f32, {q.rows, q.cols}, [&q](const auto& write) {
            constexpr int64_t kRowsPerPiece = 64;
            const Tensor values = q.int8_values();
            for (int64_t r = 0; r < q.rows; r += kRowsPerPiece) {
              const Tensor piece = values.narrow(0, r, std::min(kRowsPerPiece, q.rows - r)).to(DType::f32);
              write(piece.raw_data(), static_cast<size_t>(piece.numel()) * sizeof(float));
            }
          }};
}

QuantizedWeight parse_int8(const std::string& path, const std::string& name, const safetensors::Entry& values,
                           const safetensors::Entry* scales) {
  SG_CHECK_IO(scales != nullptr, "checkpoint {}: int8 weight '{}' has no scales '{}{}'", path, name, name,
              kScaleSuffix);
  SG_CHECK_IO(values.shape.size() == 2, "checkpoint {}: int8 weight '{}' must be 2-D, got {} dimensions", path, name,
              values.shape.size());
  SG_CHECK_IO(scales->dtype == "F32" && scales->shape.size() == 1,
              "checkpoint {}: scales '{}{}' must be float32 (rows,) or (1,), got {} with {} dimensions", path, name,
              kScaleSuffix, scales->dtype, scales->shape.size());
  try {
    // plain: nn::load_quantized_weights moves a GEMM's weight into the backend's packed layout
    return make_quantized_weight(from_entry(values, name), from_entry(*scales, name + kScaleSuffix), name,
                                 Int8Use::rows);
  } catch (const Error& e) {
    throw IOError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

}  // namespace

void save_quantized_checkpoint(const std::string& path, const TranslationModel& model, const CheckpointInfo& info,
                               const nn::QuantizeOptions& options) {
  const auto quantized = nn::quantized_weights(model);
  SG_CHECK_VALUE(!quantized.empty(), "save_quantized_checkpoint: the model has no quantized weights; run "
                 "nn::quantize_dynamic first");
  nlohmann::json kinds = nlohmann::json::array();
  for (nn::QuantKind kind : options.kinds) kinds.push_back(nn::quant_kind_name(kind));
  std::map<std::string, std::string> metadata = checkpoint_metadata(info);
  metadata[kQuantizedKey] = nlohmann::json{{"scheme", qscheme_name(options.scheme)}, {"kinds", kinds}}.dump();
  CheckpointFile checkpoint;
  for (const auto& [name, t] : model.state_dict()) checkpoint.file.tensors["model." + name] = t;  // float ones
  for (const auto& [name, q] : quantized) checkpoint.quantized.emplace("model." + name, *q);
  metadata[nn::kChecksumKey] = checkpoint_checksum(checkpoint, metadata);
  safetensors::File file{.metadata = metadata, .tensors = {}};
  for (const auto& [name, t] : checkpoint.file.tensors) file.tensors.emplace(name, to_entry(t));
  for (const auto& [name, q] : checkpoint.quantized) {
    file.tensors.emplace(name, to_entry(q.int8_values()));  // I8 (rows, cols)
    file.tensors.emplace(name + kScaleSuffix, to_entry(q.scales));
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  safetensors::save(path, file);  // atomic: tmp + rename
}

CheckpointFile load_checkpoint_file(const std::string& path) {
  safetensors::File raw = safetensors::load(path);
  CheckpointFile out;
  out.file.metadata = std::move(raw.metadata);
  for (const auto& [name, entry] : raw.tensors) {
    if (entry.dtype == "I8") {
      auto scales = raw.tensors.find(name + kScaleSuffix);
      out.quantized.emplace(name, parse_int8(path, name, entry, scales == raw.tensors.end() ? nullptr : &scales->second));
      continue;
    }
    const bool is_scale = name.size() > std::strlen(kScaleSuffix) &&
                          name.ends_with(kScaleSuffix);
    if (is_scale) {
      auto values = raw.tensors.find(name.substr(0, name.size() - std::strlen(kScaleSuffix)));
      if (values != raw.tensors.end()) {
        SG_CHECK_IO(values->second.dtype == "I8", "checkpoint {}: scales '{}' belong to '{}', which is {}, not I8", path,
                    name, values->first, values->second.dtype);
        continue;  // read with its int8 weight
      }
    }
    try {
      out.file.tensors.emplace(name, from_entry(entry, name));
    } catch (const IOError& e) {
      throw IOError(fmt::format("checkpoint {}: '{}': {}", path, name, e.what()));
    }
  }
  const bool marked = out.file.metadata.count(kQuantizedKey) > 0;
  SG_CHECK_IO(marked == !out.quantized.empty(), "checkpoint {}: {}", path,
              marked ? "metadata says it is quantized but it holds no int8 weights"
                     : "it holds int8 weights but its metadata has no 'quantized' entry");
  return out;
}

std::string checkpoint_checksum(const CheckpointFile& checkpoint, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, nn::ChecksumSource> all;
  for (const auto& [name, t] : checkpoint.file.tensors) all.emplace(name, whole_tensor(t));
  for (const auto& [name, q] : checkpoint.quantized) {
    all.emplace(name, int8_as_float(q));
    all.emplace(name + kScaleSuffix, whole_tensor(q.scales));
  }
  return nn::checkpoint_checksum(all, metadata);
}

}  // namespace seqgrad::models
