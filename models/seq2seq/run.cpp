#include "models/seq2seq/run.h"

#include <cmath>
#include <filesystem>

#include <fmt/core.h>

#include "core/fileio.h"
#include "core/json.h"

namespace seqgrad::models {

RunData load_run_data(const TrainConfig& config, std::optional<Vocabularies> vocabs) {
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
                                                     text::BatchOptions{.batch_size = config.batch_size});
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
  if (skipped_steps) j["skipped_steps"] = *skipped_steps;
  if (loss_scale) j["loss_scale"] = *loss_scale;
  return j;
}

namespace {

// Keeps the metrics of the first `epochs` epochs: a resumed run validates the later ones again.
void truncate_metrics(const std::string& path, int64_t epochs) {
  if (!std::filesystem::exists(path)) return;
  std::string kept;
  for (const std::string& line : text::read_lines(path)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = parse_json(line, path);
    } catch (const IOError&) {
      continue;  // a torn last line of a killed run
    }
    const nlohmann::json* epoch = j.is_object() && j.contains("epoch") ? &j.at("epoch") : nullptr;
    if (epoch && epoch->is_number_integer() && epoch->get<int64_t>() <= epochs) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

EpochMetrics epoch_metrics(Trainer& trainer, const EpochResult& epoch, const Evaluation& val) {
  EpochMetrics m{.epoch = trainer.state().epoch, .step = trainer.state().step, .train_loss = epoch.loss,
                 .valid_loss = val.loss, .valid_sacrebleu = val.sacrebleu, .valid_chrf = val.chrf,
                 .valid_bleu_tokenized = val.bleu_tokenized, .seconds = epoch.seconds,
                 .lr = trainer.optimizer().lr()};
  if (trainer.scaler().is_enabled()) m.skipped_steps = epoch.skipped, m.loss_scale = trainer.scaler().get_scale();
  return m;
}

}  // namespace

RunResult fit(Trainer& trainer, text::BatchSource& train, const ValidationSet& valid, const RunOptions& options) {
  const RunCallbacks& on = options.callbacks;
  const bool writes = !options.out_dir.empty() && trainer.rank() == 0;
  auto path = [&](const char* name) { return options.out_dir.empty() ? "" : options.out_dir + "/" + name; };
  const std::string best_path = path("best.safetensors"), last_path = path("last.safetensors");
  const std::string nan_path = path("nan.safetensors"), metrics_path = path("metrics.jsonl");
  if (writes) {
    std::filesystem::create_directories(options.out_dir);
    truncate_metrics(metrics_path, trainer.state().epoch);
  }
  RunResult result;
  if (writes && std::filesystem::exists(best_path)) result.best_checkpoint = best_path;
  const DecodeOptions validation = decode_options(trainer.config());
  while (trainer.state().epoch < trainer.config().epochs) {
    EpochResult epoch;
    try {
      epoch = trainer.train_epoch(train, on.after_step);
    } catch (const DivergenceError& e) {
      if (options.out_dir.empty()) throw;
      trainer.save(nan_path);  // the state before the diverged step; last.safetensors stays the last good one
      std::string last = std::filesystem::exists(last_path) ? fmt::format("; the last good checkpoint is {}", last_path)
                                                            : "";
      throw DivergenceError(fmt::format("{} and saved the state that produced it to {}{}", e.what(), nan_path, last));
    }
    if (!epoch.completed) {
      if (!options.out_dir.empty()) trainer.save(last_path);
      return result;
    }
    if (on.before_validation) on.before_validation(trainer.state().epoch);
    Evaluation val = trainer.evaluate(valid.corpus, valid.references, valid.raw_references, validation);
    EpochMetrics metrics = epoch_metrics(trainer, epoch, val);
    metrics.best = val.sacrebleu > trainer.state().best_bleu;
    if (metrics.best) trainer.state().best_bleu = val.sacrebleu;
    if (writes) append_line(metrics_path, metrics.to_json().dump());
    if (!options.out_dir.empty()) {
      if (metrics.best) trainer.save(best_path), result.best_checkpoint = writes ? best_path : "";
      trainer.save(last_path);
    }
    result.epochs.push_back(metrics);
    if (on.after_epoch && !on.after_epoch(metrics, val)) return result;
  }
  result.completed = true;
  return result;
}

}  // namespace seqgrad::models
