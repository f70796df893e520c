// Translating sentences with loaded checkpoints, shared by `seqgrad translate`, `eval`, `attention`
// and `serve`: one path from text to hypotheses, so every command translates alike.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/model.h"

namespace seqgrad::tools {

// Checkpoints' models in eval mode holding their weights (float32 or int8: models::load_weights
// reads both): one, or an ensemble with the same vocabularies. The first checkpoint's vocabularies
// and config serve them all.
struct LoadedModel {
  models::LoadedCheckpoint checkpoint;  // the first checkpoint's metadata (its tensors are in the model)
  std::unique_ptr<models::Seq2Seq> model;
  std::vector<std::unique_ptr<models::Seq2Seq>> ensemble_rest;  // the further checkpoints' models
  // The models to decode with: this one, or the ensemble of all.
  models::Ensemble ensemble() const;
};

struct LoadModelOptions {
  bool allow_missing_checksum = false;  // read a checkpoint written before checksums, unverified
  bool memory_stats = false;            // print on stderr the memory the weights hold
  int64_t beam = 1;                     // refused when wider than the target vocabulary
};
// Loads `paths` (at least one) as one model or an ensemble. Throws IOError for a missing or
// non-safetensors file, UsageError for a beam wider than the target vocabulary (checked before the
// model allocates anything) or, naming both files and the difference, for ensemble members whose
// vocabularies differ.
LoadedModel load_model(const std::vector<std::string>& paths, const LoadModelOptions& options = {});

// One input sentence translated: its tokens and hypotheses (best first), or why it could not be.
struct Translation {
  std::vector<std::string> src_tokens;               // as the model read them (after --truncate)
  std::vector<models::Hypothesis> hyps;              // best first: one, or options.nbest
  std::vector<std::vector<std::string>> out_tokens;  // per hypothesis: its tokens (Vocab::decode)
  bool truncated = false;
  std::string error;  // not empty: nothing was translated
};

// The sentence's source tokens, cut to `max_tokens` (0: not at all), or its error (not UTF-8,
// empty); nothing is decoded yet.
Translation tokenize_source(const models::CheckpointInfo& info, const std::string& sentence, int64_t max_tokens);
// Decodes, as one batch, every translation given that has source tokens and no error, filling its
// hyps and out_tokens: beam search when options.beam_size > 1 (options.nbest hypotheses each), else
// greedy or, with options.sampling, sampling that draws from `sampling` (a Generator seeded with
// options.sampling->seed when null).
void decode_translations(const models::Ensemble& models, const models::CheckpointInfo& info,
                         const std::vector<Translation*>& batch, const models::DecodeOptions& options,
                         Generator* sampling = nullptr);
// Both: tokenizes the sentences, then decodes the good ones as one batch.
std::vector<Translation> translate_batch(const models::Ensemble& models, const models::CheckpointInfo& info,
                                         const std::vector<std::string>& sentences,
                                         const models::DecodeOptions& options, int64_t max_tokens,
                                         Generator* sampling = nullptr);

}  // namespace seqgrad::tools
