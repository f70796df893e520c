// Translating sentences with a loaded checkpoint, shared by `seqgrad translate`, `eval`,
// `attention` and `serve`: one path from text to hypotheses, so every command translates alike.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/model.h"

namespace seqgrad::tools {

// A checkpoint's vocabularies and config, and its model in eval mode holding the weights (float32
// or int8: models::load_weights reads both).
struct LoadedModel {
  models::LoadedCheckpoint checkpoint;
  std::unique_ptr<models::Seq2Seq> model;
};

struct LoadModelOptions {
  bool allow_missing_checksum = false;  // read a checkpoint written before checksums, unverified
  bool memory_stats = false;            // print on stderr the memory the weights hold
  int64_t beam = 1;                     // refused when wider than the target vocabulary
};
// Throws IOError for a missing or non-safetensors file, UsageError for a beam wider than the
// target vocabulary (checked before the model allocates anything).
LoadedModel load_model(const std::string& path, const LoadModelOptions& options = {});

// One input sentence: its tokens and hypotheses (best first), or why it could not be translated.
struct Translation {
  std::vector<std::string> src_tokens;
  std::vector<models::Hypothesis> hyps;
  std::vector<std::vector<std::string>> out_tokens;  // per hypothesis
  bool truncated = false;
  std::string error;  // not empty: nothing was translated
};

// The sentence's source tokens, cut to `max_tokens` (0: not at all), or its error (not UTF-8,
// empty); nothing is decoded yet.
Translation tokenize_source(const models::CheckpointInfo& info, const std::string& sentence, int64_t max_tokens);
// Decodes, as one batch, every translation given that has source tokens and no error, filling its
// hyps and out_tokens.
void decode_translations(LoadedModel& l, const std::vector<Translation*>& batch, const models::DecodeOptions& options);
// Both: tokenizes the sentences, then decodes the good ones as one batch.
std::vector<Translation> translate_batch(LoadedModel& l, const std::vector<std::string>& sentences,
                                         const models::DecodeOptions& options, int64_t max_tokens);

}  // namespace seqgrad::tools
