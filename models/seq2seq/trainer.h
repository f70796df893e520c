// The translator's trainer: one training step (forward, label-smoothed loss, backward, clip, Adam),
// one epoch over a batch source, evaluation (loss, sacreBLEU, chrF) and checkpoints that resume a
// run exactly. The run around it (validation each epoch, best/last checkpoints, metrics) is
// models::fit (models/seq2seq/run.h); `seqgrad train`, `compare` and `bench` all use this class.
//
// A step is forward_backward(batch), after_backward(), optimizer_step(). A subclass changes what it
// needs: loss() (another objective), after_backward() (a data-parallel trainer all-reduces the
// gradients there); or a program calls the parts itself. The batches come from a text::BatchSource:
// held in memory (text::MemoryBatches) or streamed from files larger than memory
// (text::StreamingBatches).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/error.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/data.h"
#include "nn/distributed.h"
#include "optim/optim.h"

namespace seqgrad::models {

// Where a run stands. Saved in every checkpoint (its train_state) so that a resumed run continues
// exactly: same batches, same dropout masks, same per-epoch losses.
struct TrainState {
  int64_t epoch = 0;          // epochs completed
  int64_t batch = 0;          // batches of the current epoch done
  int64_t step = 0;           // optimizer steps taken (fp16 steps skipped by the GradScaler included)
  // Early stopping on config field early_stopping_metric with config field patience: fit() feeds
  // it every validation (its best is best.safetensors) and stops when it says so; saved here, a
  // resumed run goes on counting where it was.
  optim::EarlyStopping early_stopping;
  // The validation checkpoints kept (config field keep_checkpoints; fit() keeps them): the best N
  // by the early-stopping metric, step -> score, saved as <out>/ckpt-STEP.safetensors.
  std::map<int64_t, double> kept_checkpoints;
  double epoch_loss_sum = 0;  // the current epoch's sum of loss x target tokens ...
  int64_t epoch_tokens = 0;   // ... and its target tokens, so a resumed epoch reports the same loss
  int64_t epoch_skipped = 0;  // fp16 steps of the current epoch skipped on inf/NaN gradients
  uint64_t rng_offset = 0;    // the default generator's position (dropout masks)

  double epoch_loss() const { return epoch_tokens ? epoch_loss_sum / epoch_tokens : 0.0; }
};

// A training step that went wrong: a non-finite loss or gradient norm, or a loss that exploded
// while staying finite. Thrown before the update, with the state left as it was before the step.
class DivergenceError : public ValueError {
 public:
  using ValueError::ValueError;
};

struct StepResult {
  double loss = 0;       // the step's mean label-smoothed loss per target token (all its batches)
  double grad_norm = 0;  // the gradients' global 2-norm before clipping
  int64_t tokens = 0;    // target tokens in the step's batches
  int64_t batches = 1;   // batches in the step (config field accum_steps; fewer at the end of an epoch)
  bool skipped = false;  // fp16: inf/NaN gradients, so the GradScaler skipped the update
  double seconds = 0;    // wall time of the step, batch transfer included (train_epoch)
};

// How a batch's backward joins its step's gradients (gradient accumulation, Trainer::forward_backward).
struct Accumulation {
  double weight = 1;  // the batch's share of the step's target tokens: its loss is scaled by it
  bool first = true;  // the step's first batch: the gradients are zeroed before its backward
  bool last = true;   // the step's last: data-parallel ranks average the sum, fp16 unscales it
};

struct EpochResult {
  bool completed = false;  // false when after_step asked to stop (the state holds the position)
  double loss = 0;         // mean training loss per target token
  int64_t skipped = 0;     // fp16 steps skipped
  double seconds = 0;
};

// Scores of decoded outputs against their references. The headline is sacreBLEU (13a, cased, the
// detokenised output against the raw reference, as translation papers report it), then chrF
// (sacreBLEU's chrF2); the tokenised lower-cased BLEU that tutorials report comes last, for
// comparison with them.
struct Evaluation {
  double loss = 0;            // mean per-token cross-entropy (no label smoothing), teacher forced
  double sacrebleu = 0;       // corpus BLEU, 13a, cased: text::corpus_bleu(outputs, raw references)
  double chrf = 0;            // text::corpus_chrf(outputs, raw references)
  double bleu_tokenized = 0;  // corpus BLEU of the lower-cased words (Vocab::words)
  std::vector<Hypothesis> hypotheses;  // in corpus order
  std::vector<std::string> outputs;    // the hypotheses as detokenised text (hypothesis_text)
};
// The text of a decoded hypothesis: its target tokens, detokenised.
std::string hypothesis_text(const text::Vocab& tgt_vocab, const std::vector<int64_t>& ids);
// Runs on the models' device, under the caller's Autocast scope if any; each model is left in the
// mode (train or eval) it was in. `references` are the tokenized pairs (their targets score the
// tokenised BLEU), `raw_references` the target sentences as read (sacreBLEU and chrF). An
// ensemble's loss is that of its mean probabilities; sampling draws from one Generator seeded with
// options.sampling->seed for the whole corpus.
Evaluation evaluate(const Ensemble& models, const text::EncodedCorpus& corpus, const text::Vocab& tgt_vocab,
                    const std::vector<text::TokenizedPair>& references, const std::vector<std::string>& raw_references,
                    const DecodeOptions& options);
// Forced decoding of a corpus (score_targets): each pair's target scored under the models, in
// corpus order.
std::vector<Hypothesis> score_corpus(const Ensemble& models, const text::EncodedCorpus& corpus,
                                     const DecodeOptions& options);

// A loss above this multiple of log(V_tgt), the loss of a uniform prediction, means training has
// diverged even if it stayed finite (a huge learning rate): stop as for a NaN.
constexpr double kDivergedLossFactor = 4.0;

// The GEMM precision a run asked for `requested` trains with on `device`: bf16 only where its
// products beat float32 ones (ops/bf16_gemm.h; SEQGRAD_BF16_GEMM=native or emulate forces them),
// otherwise float32. fp16 and float32 are kept as asked.
GemmPrecision training_precision(GemmPrecision requested, Device device);

struct TrainerOptions {
  Device device = Device::cpu();  // where the model, optimizer state and batches live
  double init_loss_scale = 65536;  // --amp fp16: the GradScaler's initial scale
  // Data-parallel training over the communicator's ranks (dist::world() under mpirun): rank 0's
  // weights are broadcast, each rank trains on its shard of every batch (models/seq2seq/
  // data_parallel.h) with its own dropout stream, gradients are averaged by
  // nn::DistributedDataParallel, and only rank 0 writes checkpoints. Null or one rank: this process.
  std::shared_ptr<dist::Communicator> communicator;
  nn::DistributedDataParallelOptions data_parallel{};  // buckets and progress of the gradient averaging
};

class Trainer {
 public:
  // A fresh run: the model is built from config.model (vocabulary sizes taken from the vocabularies)
  // after manual_seed(config.seed), xavier-initialised, then moved to the device with Adam and the
  // config's learning-rate schedule (config field lr_schedule).
  Trainer(TrainConfig config, text::Vocab src_vocab, text::Vocab tgt_vocab, TrainerOptions options = {});
  virtual ~Trainer() = default;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The mean label-smoothed loss of a batch (forward only, under the config's autocast).
  // Virtual so that a program can change the objective (add a regulariser; a test injects a NaN).
  virtual Tensor loss(const TensorBatch& batch);
  // One step: forward_backward, after_backward, optimizer_step. Throws DivergenceError before the
  // update when the loss or gradient norm is not finite or the loss exploded.
  StepResult train_step(const TensorBatch& batch);
  // One optimizer step over several batches (gradient accumulation, config field accum_steps):
  // each batch's mean loss is weighted by its share of the group's target tokens (over all ranks
  // when data-parallel), so the step equals one step on the concatenated batch.
  StepResult train_step(std::span<const TensorBatch> group);
  // The first half of a step: loss, backward (weighted, accumulated); after the last batch the
  // gradients are unscaled (fp16) and ready to be reduced. Advances nothing; throws DivergenceError
  // for a bad loss.
  StepResult forward_backward(const TensorBatch& batch, const Accumulation& accumulation = {});
  // The second half: clip, Adam (or the GradScaler's step), the state's counters and a per-update
  // schedule's step (lr_schedule inverse_sqrt; fp16 steps the scaler skipped count too). `result`
  // is forward_backward's, completed with the gradient norm and whether the step was skipped.
  void optimizer_step(StepResult& result);
  // Between the two halves, with the gradients final (unscaled): nothing here; a data-parallel
  // subclass averages them across ranks.
  virtual void after_backward() {}

  // The current epoch's batches (shuffled with epoch_seed()), from state().batch to the end, in
  // steps of config.accum_steps batches, each step followed by after_step; it returns false to stop
  // after that step (Ctrl-C), so a stop always falls on a step's boundary. A completed
  // epoch steps a per-epoch schedule (lr_schedule step) and moves the state to the next epoch.
  using AfterStep = std::function<bool(const StepResult&)>;
  EpochResult train_epoch(text::BatchSource& batches, const AfterStep& after_step = {});
  // The same over pairs in memory: text::MemoryBatches with config.batch_size (or batch_tokens).
  EpochResult train_epoch(const text::EncodedCorpus& train, const AfterStep& after_step = {});
  // The seed of the current epoch's batch order: config.seed + epoch (new batches every epoch).
  uint64_t epoch_seed() const { return config_.seed + static_cast<uint64_t>(state_.epoch); }

  // evaluate() with this trainer's model and target vocabulary, under the config's autocast.
  Evaluation evaluate(const text::EncodedCorpus& corpus, const std::vector<text::TokenizedPair>& references,
                      const std::vector<std::string>& raw_references, const DecodeOptions& options);

  // The run's state as one StateDict: the TrainState's values (train_state_to_json), with the
  // optimizer's, scheduler's and (fp16) GradScaler's states nested as "optimizer", "scheduler"
  // and "grad_scaler"; the RNG position as of now.
  StateDict state_dict();
  // Writes the model, its config and vocabularies and state_dict() (atomically).
  void save(const std::string& path);
  // Continues the run saved in `checkpoint` (read from `path`): weights, optimizer, scheduler,
  // GradScaler, RNG position and a validated state. The config must be the checkpoint's (a resumed
  // run may change only epochs and data_dir).
  void restore(const LoadedCheckpoint& checkpoint, const std::string& path);
  // A new run's initial weights (config field init_from): the model's weights from `checkpoint`
  // (read from `path`), nothing else (the optimizer stays fresh). Its vocabularies must be this
  // trainer's: an IOError says which side differs.
  void init_weights_from(const LoadedCheckpoint& checkpoint, const std::string& path);

  TranslationModel& model() { return *model_; }
  const TrainConfig& config() const { return config_; }
  const TrainState& state() const { return state_; }
  TrainState& state() { return state_; }
  optim::Adam& optimizer() { return optimizer_; }
  const optim::GradScaler& scaler() const { return scaler_; }
  const text::Vocab& src_vocab() const { return src_vocab_; }
  const text::Vocab& tgt_vocab() const { return tgt_vocab_; }
  // The GEMM precision the steps run in: training_precision(config().amp, device).
  GemmPrecision precision() const { return precision_; }
  // This process's rank and the job's size (0 and 1 without a communicator).
  int rank() const { return ddp_ ? ddp_->communicator().rank() : 0; }
  int world_size() const { return ddp_ ? ddp_->communicator().world_size() : 1; }
  const nn::DistributedDataParallel* data_parallel() const { return ddp_.get(); }  // null: one process

 private:
  // Throws DivergenceError naming the step; `why` follows the step in the message.
  [[noreturn]] void diverged(const char* what, double value, const std::string& why = "");

  TrainConfig config_;
  text::Vocab src_vocab_, tgt_vocab_;
  GemmPrecision precision_;
  Device device_;
  std::unique_ptr<TranslationModel> model_;  // the config's architecture
  optim::Adam optimizer_;
  std::unique_ptr<optim::LRScheduler> scheduler_;  // config field lr_schedule: per epoch or per update
  optim::GradScaler scaler_;
  nn::CrossEntropyOptions loss_options_;
  TrainState state_;
  std::unique_ptr<nn::DistributedDataParallel> ddp_;  // data-parallel training only
  uint64_t rng_before_step_ = 0;        // restored on divergence, so that resuming replays the bad step
  std::string resumed_from_ = "train";  // names the checkpoint in errors about the restored state
};

// The early stopping a run's config asks for: its early_stopping_metric (loss: lower is better;
// sacrebleu and chrf: higher) and patience.
optim::EarlyStopping early_stopping_for(const TrainConfig& config);

// The TrainState of a checkpoint's train_state values (read_checkpoint has upgraded older
// layouts), every field checked (type and range); errors name the checkpoint (`path`) and the
// field. The early stopping is the saved one (its patience too: Trainer::restore applies the run's).
TrainState train_state_from_json(const nlohmann::json& j, const std::string& path);
nlohmann::json train_state_to_json(const TrainState& state);

}  // namespace seqgrad::models
