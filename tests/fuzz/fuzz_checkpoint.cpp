// libFuzzer target: the translator's checkpoint loader (models/seq2seq/checkpoint: read_checkpoint,
// then building the model its config describes and load_weights) and nn::load_checkpoint.
//
// A mutated file almost never keeps a valid CRC, so each input is loaded twice: as it is (the
// checksum must catch it) and, when it parses as safetensors, with its checksum recomputed, so that
// the config, the vocabularies, the train state and the weights behind the checksum get fuzzed too.
#include <memory>
#include <string_view>

#include "core/safetensors.h"
#include "core/serialize.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/transformer.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace seqgrad;

void load_translator(const std::string& path) {
  models::LoadedCheckpoint ckpt = models::read_checkpoint(path, {.allow_missing_checksum = true});
  // the architecture the config names, as models::load_model builds it; its sizes were checked
  // against the file's tensors
  std::unique_ptr<models::TranslationModel> model = models::build_translation_model(ckpt.info.config.model);
  models::load_weights(*model, ckpt, path);
}

// The same file with a correct checksum over its (possibly fuzzed) contents. Written plainly:
// save_tensors() would fsync every input.
void resign(const std::string& from, const std::string& to) {
  TensorFile file = load_tensors(from);
  file.metadata[nn::kChecksumKey] = nn::checkpoint_checksum(file.tensors, file.metadata);
  safetensors::File out{.metadata = file.metadata};
  for (const auto& [name, t] : file.tensors) out.tensors[name] = to_entry(t);
  fuzz::write_scratch(to, safetensors::serialize(out));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string raw = fuzz::scratch_path("ckpt_raw.safetensors");
  static const std::string signed_path = fuzz::scratch_path("ckpt_signed.safetensors");
  fuzz::write_scratch(raw, std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean([&] { load_translator(raw); });
  fuzz::expect_clean([&] {
    nn::Linear linear({.in_features = 2, .out_features = 3});
    (void)nn::load_checkpoint(raw, linear, /*strict=*/false);
  });
  bool parsed = false;
  fuzz::expect_clean([&] {
    resign(raw, signed_path);
    parsed = true;
  });
  if (parsed) fuzz::expect_clean([&] { load_translator(signed_path); });
  return 0;
}
