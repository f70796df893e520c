#include "models/seq2seq/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/core.h>

#include "core/fileio.h"
#include "core/json.h"
#include "models/text/subword.h"

namespace seqgrad::models {

namespace {

// Vocabularies a run takes instead of building them: init_from's (a run that starts from a
// checkpoint's weights needs its vocabularies), or the SentencePiece model of vocab spm:MODEL.
std::optional<Vocabularies> given_vocabularies(const TrainConfig& config) {
  if (!config.init_from.empty()) {
    SG_CHECK_IO(std::filesystem::exists(config.init_from), "config field init_from: no checkpoint at {}",
                config.init_from);
    LoadedCheckpoint from = read_checkpoint(config.init_from);
    return Vocabularies{std::move(from.info.src_vocab), std::move(from.info.tgt_vocab)};
  }
  if (!config.vocab.starts_with(text::kSubwordModelPrefix)) return std::nullopt;
  const std::string path = config.vocab.substr(text::kSubwordModelPrefix.size());
  SG_CHECK_IO(std::filesystem::is_regular_file(path), "config field vocab = spm:{}: no SentencePiece model file at {}",
              path, path);
  try {
    text::Vocab vocab = text::Vocab::from_subword(text::SubwordModel::read(path));
    return Vocabularies{vocab, vocab};
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("config field vocab = spm:{}: {} (seqgrad needs a model with <pad> <bos> <eos> "
                                 "<unk> as pieces 0-3, as `seqgrad train --vocab unigram:N` trains them)", path,
                                 e.what()));
  }
}

}  // namespace

RunData load_run_data(const TrainConfig& config, std::optional<Vocabularies> vocabs) {
  if (!vocabs) vocabs = given_vocabularies(config);
  // One streamed pass over the training split checks it and builds the vocabularies from it (word
  // counts, or a bounded sample for SentencePiece); validation and test are read whole, then
  // tokenized with the vocabularies.
  std::optional<VocabularyBuilder> builder;
  if (!vocabs) builder.emplace(config);
  RunData d;
  d.corpora = load_corpora(config, Splits::all, [&](const text::SentencePair& pair) {
    if (builder) builder->add(pair);
  });
  d.vocabs = vocabs ? std::move(*vocabs) : builder->build();
  builder.reset();  // the word counts or sample of a large corpus: not needed any more
  const text::Vocab &src = d.vocabs.src, &tgt = d.vocabs.tgt;
  SG_CHECK_VALUE(src.size() > text::Vocab::kNumSpecial && tgt.size() > text::Vocab::kNumSpecial,
                 "no word of the {} training pairs occurs {} times or more, so the vocabularies hold only the special "
                 "tokens ({} and {}); train on more pairs (config field train_subset)", d.corpora.train.pairs,
                 config.min_freq, src.size(), tgt.size());
  tokenize_held_splits(d.corpora, src, tgt);
  d.train = std::make_unique<text::StreamingBatches>(d.corpora.train, pair_encoder(src, tgt, config.max_tokens),
                                                     text::BatchOptions{.batch_size = config.batch_size,
                                                                        .batch_tokens = config.batch_tokens});
  const text::EncodeOptions truncate{.max_src_tokens = config.max_tokens, .max_tgt_tokens = config.max_tokens};
  d.valid = {text::encode_pairs(d.corpora.valid, src, tgt, truncate), d.corpora.valid, d.corpora.valid_references};
  return d;
}

DecodeOptions decode_options(const TrainConfig& config, int64_t beam_size) {
  return {.max_len = 2 * config.max_tokens + 10, .beam_size = beam_size};
}

nlohmann::json EpochMetrics::to_json() const {
  nlohmann::json j{{"epoch", epoch},
                   {"step", step},
                   {"train_loss", train_loss},
                   {"valid_loss", valid_loss},
                   {"valid_ppl", std::exp(valid_loss)},
                   {"valid_sacrebleu", valid_sacrebleu},
                   {"valid_chrf", valid_chrf},
                   {"valid_bleu_tokenized", valid_bleu_tokenized},
                   {"seconds", seconds},
                   {"lr", lr}};
  if (batch) j["batch"] = *batch;
  if (skipped_steps) j["skipped_steps"] = *skipped_steps;
  if (loss_scale) j["loss_scale"] = *loss_scale;
  return j;
}

double EpochMetrics::score(const std::string& metric) const {
  if (metric == "chrf") return valid_chrf;
  if (metric == "loss") return valid_loss;
  return valid_sacrebleu;
}

namespace {

// A line of metrics.jsonl as JSON with an integer "step", or nullopt (a torn last line of a killed run).
std::optional<nlohmann::json> metrics_line(const std::string& line, const std::string& path) {
  if (line.empty()) return std::nullopt;
  nlohmann::json j;
  try {
    j = parse_json(line, path);
  } catch (const IOError&) {
    return std::nullopt;
  }
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  return j;
}

// Keeps the metrics of the validations up to `step`: a resumed run runs the later ones again.
void truncate_metrics(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::string kept;
  for (const std::string& line : text::read_lines(path)) {
    std::optional<nlohmann::json> j = metrics_line(line, path);
    if (j && (*j)["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

// The validation checkpoints <dir>/ckpt-STEP.safetensors by step.
std::map<int64_t, std::filesystem::path> step_checkpoints(const std::string& dir) {
  std::map<int64_t, std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("ckpt-") || !name.ends_with(".safetensors")) continue;
    const std::string digits = name.substr(5, name.size() - 5 - std::string(".safetensors").size());
    if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out[std::stoll(digits)] = entry.path();
  }
  return out;
}

// Deletes the validation checkpoints the state does not keep: those the best N have displaced, and
// those after its step (a part of the run that a resumed run does again).
void prune_step_checkpoints(const std::string& dir, const TrainState& state) {
  for (const auto& [step, file] : step_checkpoints(dir))
    if (step > state.step || !state.kept_checkpoints.count(step)) std::filesystem::remove(file);
}

// Whether score a ranks above score b under the early-stopping mode.
bool better(optim::PlateauMode mode, double a, double b) { return mode == optim::PlateauMode::min ? a < b : a > b; }

// The kept checkpoint with the worst score (of equal ones, the latest: the earlier stays).
std::map<int64_t, double>::iterator worst_kept(std::map<int64_t, double>& kept, optim::PlateauMode mode) {
  auto worst = kept.begin();
  for (auto it = kept.begin(); it != kept.end(); ++it)
    if (!better(mode, it->second, worst->second)) worst = it;
  return worst;
}

// Keep-best checkpoints: whether this validation's checkpoint joins the best `keep` kept so far
// (state.kept_checkpoints), ranked by the early-stopping metric's mode, displacing the worst when
// they are full. A tie keeps the earlier.
bool keeps_checkpoint(TrainState& state, double score, int64_t keep) {
  const optim::PlateauMode mode = state.early_stopping.options().mode;
  if (keep <= 0) {
    state.kept_checkpoints.clear();
    return false;
  }
  auto& kept = state.kept_checkpoints;
  kept.erase(kept.upper_bound(state.step - 1), kept.end());  // a resumed run's redone steps
  while (static_cast<int64_t>(kept.size()) > keep) kept.erase(worst_kept(kept, mode));  // keep lowered on resume
  if (static_cast<int64_t>(kept.size()) == keep) {
    auto worst = worst_kept(kept, mode);
    if (!better(mode, score, worst->second)) return false;
    kept.erase(worst);
  }
  kept[state.step] = score;
  return true;
}

using Clock = std::chrono::steady_clock;

// The run's files and the validation that writes them.
class Run {
 public:
  Run(Trainer& trainer, const ValidationSet& valid, const RunOptions& options)
      : trainer_(trainer), valid_(valid), options_(options),
        writes_(!options.out_dir.empty() && trainer.rank() == 0) {}

  std::string path(const std::string& name) const {
    return options_.out_dir.empty() ? "" : options_.out_dir + "/" + name;
  }
  bool saves() const { return !options_.out_dir.empty(); }  // every rank saves (rank 0 writes)
  bool writes() const { return writes_; }

  // Validates now (after an epoch, or mid-epoch after `batch` batches; `trained` is the epoch's
  // training so far), records it and updates the early-stopping state; false when a callback
  // asked to stop.
  bool validate(const EpochResult& trained, std::optional<int64_t> batch, RunResult& result) {
    const RunCallbacks& on = options_.callbacks;
    TrainState& state = trainer_.state();
    const TrainConfig& config = trainer_.config();
    if (on.before_validation) on.before_validation(batch ? state.epoch + 1 : state.epoch);
    Evaluation val = trainer_.evaluate(valid_.corpus, valid_.references, valid_.raw_references,
                                       decode_options(config));
    EpochMetrics m;
    m.epoch = batch ? state.epoch + 1 : state.epoch, m.step = state.step, m.batch = batch;
    m.train_loss = trained.loss, m.valid_loss = val.loss, m.valid_sacrebleu = val.sacrebleu, m.valid_chrf = val.chrf;
    m.valid_bleu_tokenized = val.bleu_tokenized, m.seconds = trained.seconds, m.lr = trainer_.optimizer().lr();
    if (trainer_.scaler().is_enabled()) m.skipped_steps = trained.skipped, m.loss_scale = trainer_.scaler().get_scale();
    const double score = m.score(config.early_stopping_metric);
    m.best = state.early_stopping.update(score).improved;
    if (writes_) append_line(path("metrics.jsonl"), m.to_json().dump());
    const bool kept = keeps_checkpoint(state, score, config.keep_checkpoints);
    if (saves()) {
      if (m.best) {
        trainer_.save(path("best.safetensors"));
        result.best_checkpoint = writes_ ? path("best.safetensors") : "";
      }
      if (kept) trainer_.save(path(fmt::format("ckpt-{}.safetensors", state.step)));
      trainer_.save(path("last.safetensors"));
      if (writes_) prune_step_checkpoints(options_.out_dir, state);
    }
    result.epochs.push_back(m);
    result.stopped_early = state.early_stopping.should_stop();
    return !on.after_epoch || on.after_epoch(m, val);
  }

 private:
  Trainer& trainer_;
  const ValidationSet& valid_;
  const RunOptions& options_;
  bool writes_;
};

// A new run's initial weights from config.init_from (every rank loads them).
void init_from_checkpoint(Trainer& trainer) {
  const std::string& path = trainer.config().init_from;
  if (path.empty() || trainer.state().step > 0 || trainer.state().epoch > 0) return;
  trainer.init_weights_from(read_checkpoint(path), path);
}

}  // namespace

std::vector<std::string> best_checkpoints(const std::string& run_dir, int64_t n) {
  SG_CHECK_IO(std::filesystem::is_directory(run_dir), "{}: no run folder there", run_dir);
  const std::map<int64_t, std::filesystem::path> files = step_checkpoints(run_dir);
  SG_CHECK_IO(static_cast<int64_t>(files.size()) >= n, "{}: the run folder holds {} validation checkpoint(s) "
              "(ckpt-STEP.safetensors), fewer than {}; train with --keep-checkpoints {} (config field "
              "keep_checkpoints) or average fewer", run_dir, files.size(), n, n);
  const std::string metric = read_checkpoint(files.begin()->second.string()).info.config.early_stopping_metric;
  const std::string key = "valid_" + metric;  // valid_sacrebleu, valid_chrf, valid_loss
  const std::string metrics_path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  SG_CHECK_IO(std::filesystem::exists(metrics_path), "{}: no metrics.jsonl there to rank the checkpoints by {}",
              run_dir, key);
  std::map<int64_t, double> scores;  // step -> its validation's score (a resumed run's later line wins)
  for (const std::string& line : text::read_lines(metrics_path))
    if (std::optional<nlohmann::json> j = metrics_line(line, metrics_path); j && (*j).contains(key) && (*j)[key].is_number())
      scores[(*j)["step"].get<int64_t>()] = (*j)[key].get<double>();
  std::vector<std::pair<double, int64_t>> ranked;  // (score, step), the lower the better
  for (const auto& [step, path] : files) {
    auto score = scores.find(step);
    SG_CHECK_IO(score != scores.end(), "{}: {} has no validation line (step {}) in {}", run_dir, path.string(), step,
                metrics_path);
    ranked.emplace_back(metric == "loss" ? score->second : -score->second, step);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> best;
  for (int64_t i = 0; i < n; ++i) best.push_back(files.at(ranked[i].second).string());
  return best;
}

RunResult fit(Trainer& trainer, text::BatchSource& train, const ValidationSet& valid, const RunOptions& options) {
  const RunCallbacks& on = options.callbacks;
  const TrainConfig& config = trainer.config();
  TrainState& state = trainer.state();
  Run run(trainer, valid, options);
  if (run.writes()) {
    std::filesystem::create_directories(options.out_dir);
    truncate_metrics(run.path("metrics.jsonl"), state.step);
    prune_step_checkpoints(options.out_dir, state);
  }
  RunResult result;
  if (run.writes() && std::filesystem::exists(run.path("best.safetensors")))
    result.best_checkpoint = run.path("best.safetensors");
  if (state.early_stopping.should_stop()) {  // a resumed run that early stopping ended: nothing to train
    result.completed = result.stopped_early = true;
    return result;
  }
  init_from_checkpoint(trainer);
  const int64_t batches = train.batches_per_epoch();
  while (state.epoch < config.epochs) {
    // valid_every: validation after every valid_every-th step inside the epoch; one that falls on
    // the epoch's last batch waits for the epoch's end (the scheduler's step), below
    const Clock::time_point start = Clock::now();
    bool stopped_by_validation = false;
    auto after_step = [&](const StepResult& r) {
      if (config.valid_every > 0 && state.step % config.valid_every == 0 && state.batch < batches) {
        const EpochResult so_far{.loss = state.epoch_loss(), .skipped = state.epoch_skipped,
                                 .seconds = std::chrono::duration<double>(Clock::now() - start).count()};
        stopped_by_validation = !run.validate(so_far, state.batch, result) || state.early_stopping.should_stop();
        if (stopped_by_validation) return false;
      }
      return !on.after_step || on.after_step(r);
    };
    EpochResult epoch;
    try {
      epoch = trainer.train_epoch(train, after_step);
    } catch (const DivergenceError& e) {
      if (options.out_dir.empty()) throw;
      const std::string nan_path = run.path("nan.safetensors"), last_path = run.path("last.safetensors");
      trainer.save(nan_path);  // the state before the diverged step; last.safetensors stays the last good one
      std::string last = std::filesystem::exists(last_path) ? fmt::format("; the last good checkpoint is {}", last_path)
                                                            : "";
      throw DivergenceError(fmt::format("{} and saved the state that produced it to {}{}", e.what(), nan_path, last));
    }
    if (!epoch.completed) {
      // a validation stopped it (early stopping, or its callback): last.safetensors is saved
      if (stopped_by_validation) {
        result.completed = state.early_stopping.should_stop();
        return result;
      }
      if (run.saves()) trainer.save(run.path("last.safetensors"));
      return result;
    }
    const bool due = config.valid_every == 0 || state.step % config.valid_every == 0 || state.epoch == config.epochs;
    if (!due) {
      if (run.saves()) trainer.save(run.path("last.safetensors"));  // the epoch's end: resumable from here
      continue;
    }
    if (!run.validate(epoch, std::nullopt, result)) return result;
    if (state.early_stopping.should_stop()) {
      result.completed = true;
      return result;
    }
  }
  result.completed = true;
  return result;
}

}  // namespace seqgrad::models
