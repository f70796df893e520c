// Translating with trained checkpoints, as a library: fit's counterpart (models/seq2seq/run.h).
// A Translator loads one checkpoint or an ensemble, of either architecture, float32 or int8, and
// translates sentences with any decode options (greedy, beam with n-best, sampling, penalties);
// each translation carries its tokens, scores, attention rows and, on request, what the explorer
// shows. `seqgrad translate`, `eval`, `attention` and `serve` call it.
//
//   models::Translator translator({"runs/default/best.safetensors"});
//   models::DecodeOptions options = translator.default_options();
//   options.beam_size = 5;
//   for (const models::Translation& t : translator.translate({"Ein Hund rennt."}, options))
//     fmt::print("{}\n", translator.detokenize(t));
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/internals.h"
#include "models/seq2seq/translation_model.h"

namespace seqgrad::models {

// A checkpoint file and the model its weights build (its architecture, float32 or int8), in eval
// mode. IOError for a missing, damaged or ill-fitting file, naming it.
struct LoadedModel {
  LoadedCheckpoint checkpoint;  // its config and vocabularies (the tensors moved into the model)
  std::unique_ptr<TranslationModel> model;
};
LoadedModel load_model(const std::string& path, const ReadCheckpointOptions& options = {});

// One input sentence translated: its tokens and hypotheses (best first), or why it could not be.
struct Translation {
  std::vector<std::string> src_tokens;               // as the model read them (after max_tokens)
  std::vector<Hypothesis> hyps;                      // best first: one, or options.nbest
  std::vector<std::vector<std::string>> out_tokens;  // per hypothesis: its tokens (Vocab::decode)
  bool truncated = false;
  std::string error;  // not empty: nothing was translated
  // translate with `explain`: beam search's record of this sentence's search (beam > 1), and the
  // attention along the best hypothesis (the first model's, for an ensemble): the GRU's energies'
  // terms, or a Transformer's every layer and head
  std::optional<BeamTree> beam_tree;
  std::optional<AttentionInternals> internals;
  std::optional<TransformerInternals> heads;
};

// Tokenizes and encodes the sentences, then decodes the good ones as one batch with the model or
// ensemble (beam search when options.beam_size > 1, with options.nbest hypotheses each). Source
// sentences are cut to `max_tokens` tokens (0: not at all). A sentence that cannot be translated
// has its error set. Sampling (options.sampling) draws from `sampling`, or from a Generator seeded
// with options.sampling->seed when it is null. With `explain`, each translation also gets its beam
// tree and attention internals.
std::vector<Translation> translate_batch(const Ensemble& models, const CheckpointInfo& info,
                                         const std::vector<std::string>& sentences, const DecodeOptions& options,
                                         int64_t max_tokens, Generator* sampling = nullptr, bool explain = false);

// What translate_batch's `explain` adds to a translation searched elsewhere (a continuous search,
// models/seq2seq/continuous_search.h), from its src_tokens and best hypothesis: the attention
// internals along that hypothesis (the first model's), computed one decoder step at a time so that
// a server can interleave them with its search's steps. ValueError for a translation without
// either. `t` must outlive the pass, and the models be in eval mode.
class InternalsPass {
 public:
  InternalsPass(const Ensemble& models, const CheckpointInfo& info, Translation& t, const DecodeOptions& options);
  // One step; false once the translation has its internals (set by the last step).
  bool step();

 private:
  Translation& t_;
  std::unique_ptr<AttentionInternalsPass> gru_;
  std::unique_ptr<TransformerInternalsPass> transformer_;
};

// An output to replay: its target ids (without <bos> and <eos>) and whether it ended with <eos>.
struct ForcedOutput {
  std::vector<int64_t> tokens;
  bool finished = true;
};
// Forced decoding with `explain`'s attention: each sentence's given output (another model's
// translation, say) scored by the models (score_targets: token log-probabilities, the attention rows,
// <eos>'s step only when the output finished) and replayed through the first model for its
// internals, as translate_batch's explain gives them for the model's own output. So two models'
// attention can be compared on the same sentence and the same output tokens.
std::vector<Translation> replay_batch(const Ensemble& models, const CheckpointInfo& info,
                                      const std::vector<std::string>& sentences, const std::vector<ForcedOutput>& outputs,
                                      const DecodeOptions& options, int64_t max_tokens);

class Translator {
 public:
  // One checkpoint, or several decoded as an ensemble that averages their probabilities: they
  // must have the same vocabularies (an IOError names both files and the difference); they may be
  // of different architectures.
  explicit Translator(const std::vector<std::string>& checkpoints, const ReadCheckpointOptions& options = {});

  // The checkpoint's decoding defaults (greedy, at most 2 x its max_tokens + 10 tokens).
  DecodeOptions default_options() const;
  // translate_batch with this translator's models; max_tokens 0 is twice the training truncation,
  // as the commands' --truncate.
  std::vector<Translation> translate(const std::vector<std::string>& sentences, const DecodeOptions& options,
                                     int64_t max_tokens = 0, Generator* sampling = nullptr,
                                     bool explain = false) const;
  // A translation's best hypothesis as text (the vocabulary's detokenizer).
  std::string detokenize(const Translation& translation, size_t hypothesis = 0) const;

  const CheckpointInfo& info() const { return members_.front().checkpoint.info; }  // the first's
  Ensemble ensemble() const;
  size_t size() const { return members_.size(); }

 private:
  std::vector<LoadedModel> members_;
};

}  // namespace seqgrad::models
