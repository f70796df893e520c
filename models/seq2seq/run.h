// The translator's whole training run as a library call: `seqgrad train` and `seqgrad compare`
// are flag parsing around it, and a program gets the same run:
//
//   models::TrainConfig config = models::preset("tiny");               // or read_config_file(path)
//   models::RunData data = models::load_run_data(config);               // corpora, vocabularies
//   models::Trainer trainer(config, data.vocabs.src, data.vocabs.tgt);  // seeded model, Adam, StepLR
//   models::RunResult run = models::fit(trainer, *data.train, data.valid, {.out_dir = "runs/tiny"});
//
// fit() is this loop, one epoch at a time:
//
//   while (trainer.state().epoch < config.epochs) {
//     trainer.train_epoch(train, after_step);        // per step (accum_steps batches): forward, loss,
//                                                    // backward, clip, Adam; StepLR at the end;
//                                                    // after_step false = stop (Ctrl-C)
//     validate();                                     // after the epoch, or every valid_every steps
//   }
//   validate():
//     Evaluation val = trainer.evaluate(valid, ...);  // teacher-forced loss, greedy sacreBLEU and chrF
//     append a line to metrics.jsonl;
//     if (val is the best early_stopping_metric so far) save best.safetensors;
//     if (val is among the best keep_checkpoints so far) save ckpt-STEP.safetensors, deleting the
//                                                    // one it displaces (`seqgrad average --best N`);
//     save last.safetensors;                          // `seqgrad train --resume` continues from it
//     patience validations without a new best: stop (early stopping; the state remembers it)
//
// A fresh run with config.init_from starts from that checkpoint's weights. A non-finite or
// exploding loss stops the run before the update, with the state that produced it saved as
// nan.safetensors (last.safetensors stays the last good checkpoint).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/data.h"
#include "models/seq2seq/trainer.h"

namespace seqgrad::models {

// The validation split as fit() scores it.
struct ValidationSet {
  text::EncodedCorpus corpus;                       // ids, truncated as in training
  std::vector<text::TokenizedPair> references;      // tokens (the tokenised lower-cased BLEU)
  std::vector<std::string> raw_references;          // the sentences as read (sacreBLEU, chrF)
};

// Everything a run reads: the corpora, the vocabularies (given: a resumed run's; else config
// init_from's checkpoint's, or vocab spm:MODEL's model for both languages; else built from the
// training text), the training batches streamed from the files, the validation set.
struct RunData {
  Corpora corpora;
  Vocabularies vocabs;
  std::unique_ptr<text::StreamingBatches> train;
  ValidationSet valid;
};
RunData load_run_data(const TrainConfig& config, std::optional<Vocabularies> vocabs = std::nullopt);

// The decoding of validation and test: at most 2 x max_tokens + 10 tokens (a translation is rarely
// twice its source's length; the source is truncated to max_tokens), greedy or a beam.
DecodeOptions decode_options(const TrainConfig& config, int64_t beam_size = 1);

// One validation, as metrics.jsonl records it: after an epoch (`epoch` epochs done), or in the
// middle of one (valid_every: `batch` batches of epoch `epoch` done).
struct EpochMetrics {
  int64_t epoch = 0, step = 0;
  std::optional<int64_t> batch;          // a validation in the middle of an epoch only
  double train_loss = 0, valid_loss = 0, valid_sacrebleu = 0, valid_chrf = 0, valid_bleu_tokenized = 0;
  double seconds = 0, lr = 0;
  std::optional<int64_t> skipped_steps;  // fp16 only: steps skipped on inf/NaN gradients
  std::optional<double> loss_scale;      // fp16 only
  bool best = false;  // the best early_stopping_metric so far (best.safetensors)
  // the early_stopping_metric's value: valid_sacrebleu, valid_chrf or valid_loss
  double score(const std::string& metric) const;
  nlohmann::json to_json() const;
};

struct RunCallbacks {
  // After every step; false stops the run after it (Ctrl-C): last.safetensors is saved.
  std::function<bool(const StepResult&)> after_step;
  // Before a validation starts (`epoch` counts from 1: the epoch just done, or the one in progress).
  std::function<void(int64_t epoch)> before_validation;
  // After each validation (each epoch's, or every valid_every steps), with its metrics and
  // evaluation, once metrics.jsonl and the checkpoints are written; false stops the run there.
  std::function<bool(const EpochMetrics&, const Evaluation&)> after_epoch;
};

struct RunOptions {
  // best.safetensors, last.safetensors, ckpt-STEP.safetensors, nan.safetensors and metrics.jsonl go
  // here; "" writes nothing (compare's runs). Data-parallel: rank 0 writes.
  std::string out_dir;
  RunCallbacks callbacks;
};

struct RunResult {
  bool completed = false;             // every epoch done, or stopped early; false when a callback stopped the run
  bool stopped_early = false;         // patience ran out (now, or before a resumed run: then nothing trained)
  std::vector<EpochMetrics> epochs;   // the validations this call ran
  std::string best_checkpoint;        // out_dir/best.safetensors once written, else ""
};

// A run folder's `n` best validation checkpoints (<run_dir>/ckpt-STEP.safetensors, kept by config
// field keep_checkpoints) by its early_stopping_metric, best first (a tie: the earlier); each
// checkpoint's score is its step's line in <run_dir>/metrics.jsonl, the metric its config's.
// `seqgrad average --best N RUN_DIR` averages them. IOError naming the folder when it holds fewer
// than n, or a checkpoint has no metrics line.
std::vector<std::string> best_checkpoints(const std::string& run_dir, int64_t n);

// Trains from the trainer's state to config.epochs (a restored trainer continues its run), unless
// early stopping ends it first. Throws DivergenceError when a step diverged, after saving
// nan.safetensors; its message names that file.
RunResult fit(Trainer& trainer, text::BatchSource& train, const ValidationSet& valid, const RunOptions& options = {});

}  // namespace seqgrad::models
