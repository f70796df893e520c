// The translator's run settings. One table (config_fields()) declares every field once: its JSON
// key, its command-line flag, its type, its valid range and its help line (the model's fields
// come from the model's table, model_config.h). From it come the JSON
// of checkpoints and of `seqgrad train --config FILE` / `--print-config`, validate(), the flags of
// `train` and `compare`, the resume check and `inspect`. Presets give every field its default.
//
//   models::TrainConfig config = models::preset("tiny");   // or models::read_config_file("run.json")
//   config.epochs = 3;
//   config.validate();                                      // ConfigError naming the field and its range
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend_ops.h"
#include "core/error.h"
#include "models/seq2seq/config_table.h"
#include "models/seq2seq/model_config.h"
#include "models/text/corpus.h"

namespace seqgrad::models {

// The learning-rate schedules of TrainConfig::lr_schedule (optim/scheduler.h): StepLR stepped once
// per epoch, or fairseq's inverse_sqrt (optim::InverseSqrtLR) stepped once per optimizer update.
enum class LRSchedule { step, inverse_sqrt };
const char* lr_schedule_name(LRSchedule schedule);      // "step", "inverse_sqrt"
LRSchedule parse_lr_schedule(const std::string& name);  // ValueError naming the choices

struct TrainConfig {
  std::string preset = "default";
  // the data: a bundled corpus under data_dir, or the user's files (corpus "files")
  std::string corpus = "multi30k";
  std::string src_lang = "de", tgt_lang = "en";
  std::string data_dir = "data";
  text::CorpusFiles train_files, valid_files, test_files;  // corpus "files" (absolute; test may be empty)
  int64_t train_subset = 0;          // first N training pairs; 0 = all
  int64_t shuffle_buffer = 200000;   // training pairs held at once (text::StreamingBatches)
  int64_t max_tokens = 20;           // tokens per sentence kept, before <eos>
  // the vocabularies: word (lower-cased words seen min_freq times) | unigram:N | bpe:N (SentencePiece,
  // cased, trained on the training text at the start of a run; joint_vocab: one model for both sides)
  // | spm:MODEL (an existing SentencePiece model file, for both sides)
  std::string vocab = "word";
  bool joint_vocab = false;
  int64_t min_freq = 2;
  // the optimisation: Adam, the learning-rate schedule, label-smoothed cross-entropy, clipping
  int64_t batch_size = 64;
  int64_t batch_tokens = 0;  // > 0: batches filled to n padded tokens instead of batch_size pairs (text::BatchOptions)
  int64_t epochs = 10;
  double lr = 0.005;
  // step: StepLR(step_size, gamma) once per epoch; inverse_sqrt (fairseq's): once per optimizer update,
  // a linear warmup from 0 to lr over warmup_updates updates, then lr * sqrt(warmup_updates / update)
  LRSchedule lr_schedule = LRSchedule::step;
  int64_t step_size = 10;
  double gamma = 0.1;
  int64_t warmup_updates = 0;  // inverse_sqrt: >= 1; step: 0 (it has no warmup)
  double label_smoothing = 0.1;
  double clip = 1.0;
  uint64_t seed = 0;
  GemmPrecision amp = GemmPrecision::full;  // mixed precision of the GEMMs (core/autocast.h)
  int64_t accum_steps = 1;  // batches whose gradients make one optimizer step (one accum_steps-times larger batch)
  // the run (models::fit): validation every valid_every steps (0: after each epoch); the best
  // validation by early_stopping_metric is best.safetensors, and `patience` validations without a
  // new best stop the run (0: never); the best keep_checkpoints validations' checkpoints by
  // early_stopping_metric are kept as ckpt-STEP.safetensors (for `seqgrad average --best N`)
  int64_t valid_every = 0;
  int64_t patience = 0;
  std::string early_stopping_metric = "sacrebleu";  // sacrebleu | chrf (higher is better) | loss (lower)
  int64_t keep_checkpoints = 0;
  std::string init_from;  // a checkpoint whose weights (and vocabularies) a new run starts from; "" = none
  Seq2SeqConfig model;

  nlohmann::json to_json() const;
  // A complete config as to_json() wrote it (a checkpoint's): fields written by older versions
  // may be absent and keep their defaults; unknown keys and wrong types are ConfigErrors.
  static TrainConfig from_json(const nlohmann::json& j);
  // Every field in its range, and the fields consistent with each other; ConfigError otherwise.
  void validate() const;
};

// One row of the table (config_table.h's Field); the model.* rows are the model's table's
// (model_config.h), read and written through TrainConfig::model.
struct ConfigField : Field<TrainConfig> {
  bool resumable = false;  // a resumed run may change it (--epochs extends the run)
};
const std::vector<ConfigField>& config_fields();
// The row with this JSON key, or nullptr.
const ConfigField* find_config_field(std::string_view key);

// Sets the fields `j` names (nested as to_json() writes them; any subset) on `config`. Unknown keys
// are ConfigErrors that suggest the nearest key. Does not validate.
void apply_config_json(TrainConfig& config, const nlohmann::json& j);

// A config file (`seqgrad train --config FILE`): `preset` if given, else the file's "preset" (else
// "default"), then the file's other fields, validated. Errors name the file (and the field).
TrainConfig read_config_file(const std::string& path, const std::string& preset = "");

// Presets: "default" (a good de->en model in minutes), "seed" (the seed recipe: the hyper-parameters
// of the Bahdanau-model PyTorch programs this project started from), "d2l" (d2l.ai's tiny fra-eng
// model) and "tiny" (a usable de->en model in about two minutes, for heatmaps and the tutorials).
// Throws ValueError for other names.
TrainConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// The corpus names TrainConfig::corpus takes: the bundled ones, then "files" (the user's).
std::vector<std::string> corpus_names();
// What a config trains on, for logs and reports: "multi30k", "fra-eng", or the user's files.
std::string describe_corpus(const TrainConfig& config);

// The GEMM precision names of TrainConfig::amp: "off", "bf16", "fp16".
const char* amp_name(GemmPrecision amp);
GemmPrecision parse_amp(const std::string& name);  // ValueError naming the choices

}  // namespace seqgrad::models
