// Quantized translator checkpoints (`seqgrad quantize`): the float checkpoint's layout and
// metadata, except that each quantized weight "model.X" is stored as I8 (rows, cols) next to its
// float32 scales "model.X_scale" ((rows,) per channel, (1,) per tensor), the metadata key
// "quantized" says how ({"scheme": "per_channel", "kinds": ["Linear", "GRU", "Embedding"]}), and
// the optimizer state is left out (a quantized model is for inference). read_checkpoint reads
// both kinds (load_checkpoint_file below), so translate, eval, attention and bench load either;
// load_weights builds the quantized modules straight from the int8 weights (nn::load_quantized_weights).
// The checkpoint checksum covers the int8 weights as their values in float32.
#pragma once
#include <map>
#include <string>

#include "core/serialize.h"
#include "models/seq2seq/checkpoint.h"
#include "nn/quantized.h"

namespace seqgrad::models {

inline constexpr const char* kQuantizedKey = "quantized";
inline constexpr const char* kScaleSuffix = "_scale";

// Writes `model` (quantized with nn::quantize_dynamic under `options`) as a quantized checkpoint.
void save_quantized_checkpoint(const std::string& path, const TranslationModel& model, const CheckpointInfo& info,
                               const nn::QuantizeOptions& options);

// A checkpoint file with its int8 weights taken apart: `file` holds every other tensor and the
// metadata; `quantized` the int8 weights by full name ("model.decoder.out.weight").
struct CheckpointFile {
  TensorFile file;
  std::map<std::string, QuantizedWeight> quantized;
};

// Reads a float or quantized checkpoint. Throws IOError naming the file and the tensor for an I8
// tensor without its scales, scales without their I8 tensor, or scales whose shape does not fit.
CheckpointFile load_checkpoint_file(const std::string& path);

// The checkpoint checksum (nn::checkpoint_checksum) over file.tensors plus each int8 weight as
// float32 and its scales, made one weight at a time.
std::string checkpoint_checksum(const CheckpointFile& checkpoint, const std::map<std::string, std::string>& metadata);

}  // namespace seqgrad::models
