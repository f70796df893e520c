#include "models/seq2seq/trainer.h"

#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>

#include <fmt/core.h>

#include "core/json.h"
#include "core/rng.h"
#include "models/seq2seq/data_parallel.h"
#include "models/seq2seq/transformer.h"
#include "models/text/bleu.h"
#include "models/text/chrf.h"
#include "models/text/tokenizer.h"
#include "ops/bf16_gemm.h"
#include "nn/checkpoint.h"

namespace seqgrad::models {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TrainConfig with_vocab_sizes(TrainConfig c, const text::Vocab& src, const text::Vocab& tgt) {
  c.model.src_vocab = src.size();
  c.model.tgt_vocab = tgt.size();
  return c;
}

// The model's initial weights depend only on the seed: seeded before it is built, and drawn on
// the CPU (the same weights on every device).
std::unique_ptr<TranslationModel> seeded_model(const TrainConfig& c) {
  manual_seed(c.seed);
  return make_translation_model(c.model);
}

// The move to the device, before the optimizer creates its state next to the parameters.
std::vector<Tensor> parameters_on(TranslationModel& model, Device device) {
  model.to(device);
  return model.parameters();
}

// The config's learning-rate schedule over the optimizer's rates: StepLR, or fairseq's inverse_sqrt
// (warming up from fairseq's default warmup_init_lr 0).
std::unique_ptr<optim::LRScheduler> make_scheduler(optim::Optimizer& optimizer, const TrainConfig& c) {
  if (c.lr_schedule == LRSchedule::inverse_sqrt)
    return std::make_unique<optim::InverseSqrtLR>(optimizer,
                                                  optim::InverseSqrtLROptions{.warmup_updates = c.warmup_updates});
  return std::make_unique<optim::StepLR>(optimizer, optim::StepLROptions{.step_size = c.step_size, .gamma = c.gamma});
}

// A train_state field read with its type checked; `fallback` when absent (nullopt: required).
template <typename T>
T field(const nlohmann::json& j, const char* name, const std::string& path, std::optional<T> fallback = {}) {
  if (!j.contains(name)) {
    SG_CHECK_IO(fallback.has_value(), "checkpoint {}: train_state has no '{}'", path, name);
    return *fallback;
  }
  const nlohmann::json& v = j[name];
  bool ok = std::is_floating_point_v<T> ? v.is_number() : std::is_unsigned_v<T> ? v.is_number_unsigned()
                                                                                 : v.is_number_integer();
  SG_CHECK_IO(ok, "checkpoint {}: train_state.{} must be {}, got {}", path, name,
              std::is_floating_point_v<T> ? "a number" : std::is_unsigned_v<T> ? "an integer >= 0" : "an integer",
              json_preview(v));
  return v.get<T>();
}

}  // namespace

namespace {

// kept_checkpoints as [{"step": S, "score": X}, ...] by step.
nlohmann::json kept_checkpoints_json(const TrainState& s) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [step, score] : s.kept_checkpoints) out.push_back({{"step", step}, {"score", score}});
  return out;
}

}  // namespace

nlohmann::json train_state_to_json(const TrainState& s) {
  return {{"epoch", s.epoch},
          {"batch", s.batch},
          {"step", s.step},
          {"early_stopping", s.early_stopping.state_dict().values},
          {"kept_checkpoints", kept_checkpoints_json(s)},
          {"epoch_loss_sum", s.epoch_loss_sum},
          {"epoch_tokens", s.epoch_tokens},
          {"epoch_skipped", s.epoch_skipped},
          {"rng_offset", s.rng_offset}};
}

optim::EarlyStopping early_stopping_for(const TrainConfig& config) {
  const std::string& metric = config.early_stopping_metric;
  return optim::EarlyStopping({.metric = metric,
                               .mode = metric == "loss" ? optim::PlateauMode::min : optim::PlateauMode::max,
                               .patience = config.patience});
}

namespace {

// The early-stopping state: its own checks (optim::EarlyStopping), and what a run's metric
// allows: a known metric, and a best sacreBLEU or chrF in [0, 100].
optim::EarlyStopping early_stopping_from_json(const nlohmann::json& j, const std::string& path) {
  SG_CHECK_IO(j.contains("early_stopping"), "checkpoint {}: train_state has no 'early_stopping'", path);
  optim::EarlyStopping stopping;
  try {
    stopping.load_state_dict(StateDict({}, j["early_stopping"]));
  } catch (const ValueError& e) {
    throw IOError(fmt::format("checkpoint {}: train_state.early_stopping: {}", path, e.what()));
  }
  const std::string& metric = stopping.options().metric;
  SG_CHECK_IO(metric == "sacrebleu" || metric == "chrf" || metric == "loss", "checkpoint {}: train_state."
              "early_stopping.metric must be one of sacrebleu, chrf, loss, got \"{}\"", path, metric);
  const std::optional<double> best = stopping.best();
  const bool percent = metric != "loss";
  SG_CHECK_IO(!best || (*best >= 0 && (!percent || *best <= 100)), "checkpoint {}: train_state.early_stopping.best "
              "= {} must be {} ({})", path, *best, percent ? "in [0, 100]" : "a finite number >= 0", metric);
  return stopping;
}

// kept_checkpoints: [{"step": S, "score": X}, ...], steps in [1, step]; absent before keep-best checkpoints.
std::map<int64_t, double> kept_checkpoints_from_json(const nlohmann::json& j, int64_t last_step,
                                                     const std::string& path) {
  std::map<int64_t, double> out;
  if (!j.contains("kept_checkpoints")) return out;
  const nlohmann::json& kept = j["kept_checkpoints"];
  SG_CHECK_IO(kept.is_array(), "checkpoint {}: train_state.kept_checkpoints must be an array of {{\"step\", "
              "\"score\"}} objects, got {}", path, json_preview(kept));
  for (const nlohmann::json& k : kept) {
    SG_CHECK_IO(k.is_object(), "checkpoint {}: train_state.kept_checkpoints holds {}, expected a {{\"step\", "
                "\"score\"}} object", path, json_preview(k));
    const int64_t step = field<int64_t>(k, "step", path);
    const double score = field<double>(k, "score", path);
    SG_CHECK_IO(step >= 1 && step <= last_step && std::isfinite(score), "checkpoint {}: train_state.kept_checkpoints "
                "holds step {} score {}: expected a step in [1, {}] and a finite score", path, step, score, last_step);
    out[step] = score;
  }
  return out;
}

}  // namespace

TrainState train_state_from_json(const nlohmann::json& j, const std::string& path) {
  SG_CHECK_IO(j.is_object(), "checkpoint {}: train_state must be a JSON object, got {}", path, json_preview(j));
  TrainState s;
  s.epoch = field<int64_t>(j, "epoch", path);
  s.batch = field<int64_t>(j, "batch", path);
  s.step = field<int64_t>(j, "step", path);
  s.epoch_loss_sum = field<double>(j, "epoch_loss_sum", path, 0.0);
  s.epoch_tokens = field<int64_t>(j, "epoch_tokens", path, 0);
  s.epoch_skipped = field<int64_t>(j, "epoch_skipped", path, 0);
  s.rng_offset = field<uint64_t>(j, "rng_offset", path, 0);
  for (auto [name, value] : {std::pair{"epoch", s.epoch}, {"batch", s.batch}, {"step", s.step},
                             {"epoch_tokens", s.epoch_tokens}, {"epoch_skipped", s.epoch_skipped}})
    SG_CHECK_IO(value >= 0, "checkpoint {}: train_state.{} = {} must be >= 0", path, name, value);
  SG_CHECK_IO(std::isfinite(s.epoch_loss_sum) && s.epoch_loss_sum >= 0,
              "checkpoint {}: train_state.epoch_loss_sum = {} must be a finite number >= 0", path, s.epoch_loss_sum);
  s.early_stopping = early_stopping_from_json(j, path);
  s.kept_checkpoints = kept_checkpoints_from_json(j, s.step, path);
  return s;
}

std::string hypothesis_text(const text::Vocab& tgt_vocab, const std::vector<int64_t>& ids) {
  return tgt_vocab.detokenize(tgt_vocab.decode(ids));
}

namespace {

// Where a model's tensors are: a quantized model's float tensors are buffers, in state_dict too.
Device model_device(const nn::Module& model) { return model.state_dict().begin()->second.device(); }

constexpr int64_t kEvalBatch = 128;  // pairs per evaluation batch

}  // namespace

Evaluation evaluate(const Ensemble& models, const text::EncodedCorpus& corpus, const text::Vocab& tgt_vocab,
                    const std::vector<text::TokenizedPair>& references, const std::vector<std::string>& raw_references,
                    const DecodeOptions& options) {
  SG_CHECK_VALUE(references.size() == corpus.pairs.size() && raw_references.size() == corpus.pairs.size(),
                 "evaluate: {} pairs but {} tokenized and {} raw references", corpus.pairs.size(), references.size(),
                 raw_references.size());
  Evaluation out;
  out.hypotheses.resize(corpus.pairs.size());
  EvalScope eval(models);
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t tokens = 0;
  const Device device = model_device(models.first());  // batches go where the models are
  Generator sampling(options.sampling ? options.sampling->seed : 0);  // one stream for the corpus
  for (const text::Batch& batch : text::make_batches(corpus.pairs, {.batch_size = kEvalBatch, .shuffle = false})) {
    TensorBatch b = to_tensors(batch, device);
    Tensor logits = models.forward(b.src, b.src_lengths, b.tgt_in);  // (B, T, V)
    Tensor loss = nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}),
                                    {.ignore_index = text::Vocab::kPad, .reduction = nn::Reduction::sum});
    loss_sum += loss.item();
    tokens += b.target_tokens;
    std::vector<Hypothesis> hyps = decode(models, b.src, b.src_lengths, options, &sampling);
    for (size_t i = 0; i < hyps.size(); ++i) out.hypotheses[batch.index[i]] = std::move(hyps[i]);
  }
  out.loss = tokens ? loss_sum / tokens : 0;
  std::vector<std::vector<std::string>> hyp_tokens, ref_tokens;
  for (size_t i = 0; i < corpus.pairs.size(); ++i) {
    hyp_tokens.push_back(tgt_vocab.words(tgt_vocab.decode(out.hypotheses[i].tokens)));
    ref_tokens.push_back(tgt_vocab.words(references[i].tgt));  // subword pieces: compared as words
    out.outputs.push_back(hypothesis_text(tgt_vocab, out.hypotheses[i].tokens));
  }
  if (corpus.pairs.empty()) return out;  // nothing to score (the metrics need a sentence)
  out.sacrebleu = text::corpus_bleu(out.outputs, raw_references).score;
  out.chrf = text::corpus_chrf(out.outputs, raw_references).score;
  out.bleu_tokenized = text::corpus_bleu_tokens(hyp_tokens, ref_tokens).score;
  return out;
}

std::vector<Hypothesis> score_corpus(const Ensemble& models, const text::EncodedCorpus& corpus,
                                     const DecodeOptions& options) {
  std::vector<Hypothesis> out(corpus.pairs.size());
  const Device device = model_device(models.first());
  for (const text::Batch& batch : text::make_batches(corpus.pairs, {.batch_size = kEvalBatch, .shuffle = false})) {
    TensorBatch b = to_tensors(batch, device);
    std::vector<std::vector<int64_t>> targets;
    for (int64_t i : batch.index) {
      const std::vector<int64_t>& tgt = corpus.pairs[i].tgt;
      targets.emplace_back(tgt.begin(), tgt.end() - 1);  // without its <eos>, which score_targets adds
    }
    std::vector<Hypothesis> scored = score_targets(models, b.src, b.src_lengths, targets, options);
    for (size_t i = 0; i < scored.size(); ++i) out[batch.index[i]] = std::move(scored[i]);
  }
  return out;
}

GemmPrecision training_precision(GemmPrecision requested, Device device) {
  if (requested != GemmPrecision::bf16) return requested;
  return bf16_gemm_info(device).preferred ? GemmPrecision::bf16 : GemmPrecision::full;
}

Trainer::Trainer(TrainConfig config, text::Vocab src_vocab, text::Vocab tgt_vocab, TrainerOptions options)
    : config_(with_vocab_sizes(std::move(config), src_vocab, tgt_vocab)),
      src_vocab_(std::move(src_vocab)),
      tgt_vocab_(std::move(tgt_vocab)),
      precision_(training_precision(config_.amp, options.device)),
      device_(options.device),
      model_(seeded_model(config_)),
      optimizer_(parameters_on(*model_, options.device), {.lr = config_.lr}),
      scheduler_(make_scheduler(optimizer_, config_)),
      // fp16 scales the loss; bf16 has float32's range and needs no scaling (as in PyTorch). A
      // disabled scaler passes everything through.
      scaler_({.init_scale = options.init_loss_scale, .enabled = precision_ == GemmPrecision::f16}),
      loss_options_{.label_smoothing = config_.label_smoothing, .ignore_index = text::Vocab::kPad} {
  model_->train();
  state_.early_stopping = early_stopping_for(config_);
  if (options.communicator && options.communicator->world_size() > 1) {
    ddp_ = std::make_unique<nn::DistributedDataParallel>(*model_, options.communicator, options.data_parallel);
    default_generator().manual_seed(rank_seed(config_.seed, rank()));  // the dropout stream
  }
}

Tensor Trainer::loss(const TensorBatch& b) {
  Autocast autocast(precision_, precision_ != GemmPrecision::full);
  Tensor logits = (*model_)(b.src, b.src_lengths, b.tgt_in);  // (B, T, V)
  return nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}), loss_options_);
}

void Trainer::diverged(const char* what, double value, const std::string& why) {
  default_generator().set_offset(rng_before_step_);  // a run resumed from this state replays the step
  throw DivergenceError(fmt::format("{} is {:.6g} at epoch {} batch {} (step {}){}; stopped before the update", what,
                                    std::isnan(value) ? std::fabs(value) : value,  // "nan", whatever its sign bit
                                    state_.epoch + 1, state_.batch + 1, state_.step + 1, why));
}

StepResult Trainer::forward_backward(const TensorBatch& batch, const Accumulation& accumulation) {
  if (accumulation.first) rng_before_step_ = default_generator().offset();  // the step's start
  const bool no_rows = ddp_ && batch.index.empty();  // a shard of a batch smaller than the job
  Tensor loss = no_rows ? Tensor() : this->loss(batch);
  StepResult r{.loss = no_rows ? 0.0 : loss.item(), .tokens = batch.target_tokens};
  if (ddp_) {  // the global batch's loss (the same on every rank, so they all stop or go on together)
    nn::GlobalMeanLoss global = nn::global_mean_loss(ddp_->communicator(), loss, r.tokens, device_);
    loss = global.local;
    r.loss = global.mean;
    r.tokens = global.count;
  }
  if (!std::isfinite(r.loss)) diverged("loss", r.loss);
  // A uniform prediction costs log(V); far above it, the weights have blown up (a huge lr).
  const double limit = kDivergedLossFactor * std::log(static_cast<double>(config_.model.tgt_vocab));
  if (r.loss > limit)
    diverged("loss", r.loss, fmt::format(", above {} x log(target vocabulary size) = {:.3g}: training diverged (is "
                                         "the learning rate too high?)", kDivergedLossFactor, limit));
  if (accumulation.first) optimizer_.zero_grad();
  if (loss.defined() && accumulation.weight != 1) loss = loss * accumulation.weight;
  // data-parallel: the ranks average the gradients once, in the step's last backward (DDP's no_sync
  // before it), which then averages everything accumulated
  std::optional<nn::DistributedDataParallel::NoSyncGuard> local_only;
  if (ddp_ && !accumulation.last) local_only.emplace(*ddp_);
  if (ddp_) ddp_->prepare_for_backward(loss);  // gradients averaged over ranks as backward runs
  if (loss.defined()) scaler_.scale(loss).backward();  // backward uses the forward's GEMM precision
  if (ddp_) ddp_->finish_gradient_synchronization();
  if (accumulation.last) scaler_.unscale_(optimizer_);  // true gradients from here on (a disabled scaler: nothing)
  return r;
}

void Trainer::optimizer_step(StepResult& r) {
  r.grad_norm = optim::clip_grad_norm_(model_->parameters(), config_.clip);
  if (scaler_.is_enabled()) {
    // fp16: an inf/NaN gradient means the scale was too large; the scaler skips the step and halves
    // the scale (expected now and then, not an error)
    r.skipped = !scaler_.step(optimizer_);
    scaler_.update();
  } else {
    if (!std::isfinite(r.grad_norm)) diverged("gradient norm", r.grad_norm);
    optimizer_.step();
  }
  state_.epoch_loss_sum += r.loss * static_cast<double>(r.tokens);
  state_.epoch_tokens += r.tokens;
  state_.epoch_skipped += r.skipped ? 1 : 0;
  ++state_.step;
  state_.batch += r.batches;
  if (config_.lr_schedule == LRSchedule::inverse_sqrt) scheduler_->step();  // the rate of the next update
}

StepResult Trainer::train_step(const TensorBatch& batch) { return train_step(std::span(&batch, 1)); }

namespace {

// The target tokens of each batch of a step, summed over the ranks when data-parallel (each rank
// holds its shard): one allreduce of the group's counts, on the communicator's device.
std::vector<double> group_tokens(std::span<const TensorBatch> group, nn::DistributedDataParallel* ddp,
                                 Device device) {
  std::vector<double> tokens;
  for (const TensorBatch& b : group) tokens.push_back(static_cast<double>(b.target_tokens));
  if (ddp == nullptr) return tokens;
  Tensor counts = from_vector<double>(tokens, {static_cast<int64_t>(tokens.size())}).to(device);
  ddp->communicator().allreduce(counts);
  return counts.to_vector<double>();
}

}  // namespace

StepResult Trainer::train_step(std::span<const TensorBatch> group) {
  SG_CHECK_VALUE(!group.empty(), "train_step: a step needs at least one batch");
  // loss of the concatenated batch = sum_i (tokens_i / tokens) x mean loss of batch i
  double total = 0;
  std::vector<double> tokens = group.size() > 1 ? group_tokens(group, ddp_.get(), device_) : std::vector<double>{1};
  for (double t : tokens) total += t;
  StepResult step{.batches = static_cast<int64_t>(group.size())};
  double loss_sum = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    const double weight = total > 0 ? tokens[i] / total : 1.0 / static_cast<double>(group.size());
    StepResult r = forward_backward(group[i], {.weight = weight, .first = i == 0, .last = i + 1 == group.size()});
    loss_sum += r.loss * static_cast<double>(r.tokens);
    step.tokens += r.tokens;
    step.loss = r.loss;  // one batch: its loss as it is (no rounding through the sum)
  }
  if (group.size() > 1) step.loss = step.tokens > 0 ? loss_sum / static_cast<double>(step.tokens) : 0.0;
  after_backward();
  optimizer_step(step);
  return step;
}

EpochResult Trainer::train_epoch(const text::EncodedCorpus& train, const AfterStep& after_step) {
  text::MemoryBatches batches(train.pairs, {.batch_size = config_.batch_size, .batch_tokens = config_.batch_tokens});
  return train_epoch(batches, after_step);
}

EpochResult Trainer::train_epoch(text::BatchSource& batches, const AfterStep& after_step) {
  model_->train();
  const int64_t count = batches.batches_per_epoch();
  SG_CHECK_VALUE(state_.batch <= count, "{}: train_state.batch = {} is past the {} batches of epoch {}", resumed_from_,
                 state_.batch, count, state_.epoch + 1);
  batches.start_epoch(epoch_seed(), state_.batch);
  auto start = Clock::now();
  bool stopped = false;  // a stop after the last batch still leaves the epoch open: resuming ends it
  std::vector<TensorBatch> group;
  while (!stopped) {
    auto step_start = Clock::now();
    group.clear();
    while (static_cast<int64_t>(group.size()) < config_.accum_steps) {
      std::optional<text::Batch> batch = batches.next();
      if (!batch) break;
      if (ddp_) *batch = batch_shard(*batch, rank(), world_size());  // this rank's rows of the global batch
      group.push_back(to_tensors(*batch, device_));
    }
    if (group.empty()) break;
    StepResult r = train_step(group);
    r.seconds = seconds_since(step_start);
    stopped = after_step && !after_step(r);
  }
  EpochResult result{.completed = !stopped, .loss = state_.epoch_loss(), .skipped = state_.epoch_skipped,
                     .seconds = seconds_since(start)};
  if (result.completed) {
    if (config_.lr_schedule == LRSchedule::step) scheduler_->step();
    state_.epoch += 1;
    state_.batch = 0;
    state_.epoch_loss_sum = 0;
    state_.epoch_tokens = 0;
    state_.epoch_skipped = 0;
  }
  return result;
}

Evaluation Trainer::evaluate(const text::EncodedCorpus& corpus, const std::vector<text::TokenizedPair>& references,
                             const std::vector<std::string>& raw_references, const DecodeOptions& options) {
  Autocast autocast(precision_, precision_ != GemmPrecision::full);
  return models::evaluate(*model_, corpus, tgt_vocab_, references, raw_references, options);
}

StateDict Trainer::state_dict() {
  state_.rng_offset = default_generator().offset();
  StateDict out({}, train_state_to_json(state_));
  out.nest("optimizer", optimizer_.state_dict());
  out.nest("scheduler", scheduler_->state_dict());
  if (scaler_.is_enabled()) out.nest("grad_scaler", scaler_.state_dict());
  return out;
}

void Trainer::save(const std::string& path) {
  if (rank() != 0) return;  // data-parallel: the replicas are equal; rank 0 writes
  save_checkpoint(path, *model_, {config_, src_vocab_, tgt_vocab_, state_dict()});
}

void Trainer::restore(const LoadedCheckpoint& checkpoint, const std::string& path) {
  const StateDict& saved = checkpoint.info.train_state;
  TrainState state = train_state_from_json(saved.values, path);
  SG_CHECK_IO(state.early_stopping.options().metric == config_.early_stopping_metric, "checkpoint {}: train_state."
              "early_stopping.metric is {}, but the run's config field early_stopping_metric is {}", path,
              state.early_stopping.options().metric, config_.early_stopping_metric);
  // patience is resumable: the run's own decides whether it ran out
  state.early_stopping.set_patience(config_.patience);
  load_weights(*model_, checkpoint, path);  // CPU tensors copied onto the model's device
  // The optimizer's, scheduler's and scaler's own checks, with the checkpoint and the field named.
  auto restoring = [&](const char* name, const auto& load) {
    SG_CHECK_IO(saved.has_nested(name), "checkpoint {}: train_state has no {} state to resume from", path, name);
    try {
      load(saved.nested(name));
    } catch (const Error& e) {
      throw IOError(fmt::format("checkpoint {}: train_state.{}: {}", path, name, e.what()));
    }
  };
  restoring("optimizer", [&](const StateDict& s) { optimizer_.load_state_dict(s); });
  restoring("scheduler", [&](const StateDict& s) { scheduler_->load_state_dict(s); });
  if (scaler_.is_enabled()) restoring("grad_scaler", [&](const StateDict& s) { scaler_.load_state_dict(s); });  // --amp fp16
  // a run saves at step boundaries only: accum_steps batches per step (fewer only at an epoch's end)
  SG_CHECK_IO(state.batch <= state.step * config_.accum_steps, "checkpoint {}: train_state.batch = {} exceeds step = "
              "{} x accum_steps = {}", path, state.batch, state.step, config_.accum_steps);
  state_ = state;
  resumed_from_ = "checkpoint " + path;
  default_generator().set_offset(state_.rng_offset);
}

void Trainer::init_weights_from(const LoadedCheckpoint& checkpoint, const std::string& path) {
  for (const auto& [side, mine, theirs] : {std::tuple{"source", &src_vocab_, &checkpoint.info.src_vocab},
                                           {"target", &tgt_vocab_, &checkpoint.info.tgt_vocab}})
    SG_CHECK_IO(mine->to_json() == theirs->to_json(), "init_from {}: its {} vocabulary ({} {} tokens) differs from the "
                "run's ({} {} tokens); a run started from a checkpoint uses its vocabularies", path, side,
                theirs->kind(), theirs->size(), mine->kind(), mine->size());
  const Architecture theirs = checkpoint.info.config.model.architecture, mine = config_.model.architecture;
  SG_CHECK_IO(theirs == mine, "init_from {}: it holds a {} translator (config field model.architecture), but this run "
              "trains a {}; start from a checkpoint of the same architecture", path, architecture_name(theirs),
              architecture_name(mine));
  load_weights(*model_, checkpoint, path);  // other sizes: an error naming the tensor
}

}  // namespace seqgrad::models
