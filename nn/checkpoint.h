// Checkpoints: a module's parameters and buffers plus an extra StateDict (optimizer, scheduler,
// epoch, ...) in one safetensors file, written atomically and guarded by a checksum.
//
//   StateDict extra;
//   extra.nest("optimizer", opt.state_dict());
//   extra.nest("scheduler", sched.state_dict());
//   extra.values["epoch"] = 7;
//   save_checkpoint("ckpt.safetensors", model, extra);
//   auto ckpt = load_checkpoint("ckpt.safetensors", model);
//   opt.load_state_dict(ckpt.extra.nested("optimizer"));
//
// File layout: module tensors under their state_dict names (a plain safetensors reader, e.g.
// safetensors.torch.load_file, sees the model's weights), extra tensors under their own names,
// and metadata keys "seqgrad.*": the format version, the names of the extra tensors (JSON list),
// the extra values (one JSON object) and a CRC-32 over every name, dtype, shape, value and
// metadata entry. Files of format 1 (before StateDict: the caller's metadata as strings) load too,
// each metadata string becoming a string value of `extra`.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "nn/module.h"

namespace seqgrad::nn {

struct Checkpoint {
  LoadReport report;  // what did not fit the module (non-strict loads)
  StateDict extra;    // save_checkpoint's `extra`: its tensors by the names they were saved as, its values
};

// Writes module.state_dict() plus `extra` to `path`, replacing it atomically. Throws ValueError
// for an extra tensor that is undefined or named like a module tensor.
void save_checkpoint(const std::string& path, const Module& module, const StateDict& extra = {});

// Loads a checkpoint into `module` (values are converted to the module's dtypes). A missing,
// truncated or corrupted file throws IOError naming the path; with strict, missing, unexpected or
// mis-shaped module keys throw ValueError naming every one of them, and nothing is loaded;
// without strict, the matching keys are loaded and the report lists the rest. A plain safetensors
// file without seqgrad's metadata loads too (all of its tensors are taken as module tensors).
// Non-finite values are an IOError (check_finite_tensors).
Checkpoint load_checkpoint(const std::string& path, Module& module, bool strict = true);

// The CRC-32 (8 hex digits) these checkpoints store under "seqgrad.crc32": over every tensor
// (name, dtype, shape, values; names in sorted order) and every metadata entry except that one.
// Other file formats built on safetensors (the translator's, models/seq2seq) use it too.
inline constexpr const char* kChecksumKey = "seqgrad.crc32";
std::string checkpoint_checksum(const std::map<std::string, Tensor>& tensors,
                                const std::map<std::string, std::string>& metadata);
// The same over tensors given piece by piece: each one's dtype and shape, and its row-major bytes
// handed to `write` in any number of pieces (a quantized checkpoint checksums its int8 weights as
// float32, a few rows at a time, without a float32 copy of a whole weight).
struct ChecksumSource {
  DType dtype;
  Shape shape;
  std::function<void(const std::function<void(const void* data, size_t bytes)>& write)> bytes;
};
std::string checkpoint_checksum(const std::map<std::string, ChecksumSource>& tensors,
                                const std::map<std::string, std::string>& metadata);

// Throws IOError naming `path`, the tensor, the first non-finite value and its flat index, and
// how many there are, if a floating tensor holds NaN or infinity. Loaders call it: a NaN weight
// otherwise loads silently and only shows as empty translations or a "loss nan".
void check_finite_tensors(const std::map<std::string, Tensor>& tensors, const std::string& path);

}  // namespace seqgrad::nn
