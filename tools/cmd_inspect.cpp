// `seqgrad inspect CHECKPOINT`: what a translator checkpoint holds, read without building the model.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "models/seq2seq/trainer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

std::string or_all(int64_t n) { return n > 0 ? fmt::format("{}", n) : "all"; }

// "float32 (24 tensors, 12,345,678 values)" per dtype of the model's weights: the quantization.
std::string weight_dtypes(const models::LoadedCheckpoint& c, int64_t& parameters) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_dtype;  // tensors, values
  parameters = 0;
  for (const auto& [name, t] : c.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    auto& [tensors, values] = by_dtype[dtype_name(t.dtype())];
    ++tensors, values += t.numel();
    parameters += t.numel();
  }
  std::string out;
  for (const auto& [dtype, counts] : by_dtype)
    out += fmt::format("{}{} ({} tensors, {} values)", out.empty() ? "" : ", ", dtype, counts.first, counts.second);
  return out;
}

// The per-epoch lines of the run's metrics.jsonl beside the checkpoint, if there is one.
void print_metrics(const std::filesystem::path& run_dir) {
  std::filesystem::path path = run_dir / "metrics.jsonl";
  std::ifstream in(path);
  if (!in) return;
  fmt::print("epochs ({}):\n  {:>5} {:>10} {:>10} {:>9} {:>9} {:>6} {:>8} {:>8}\n", path.string(), "epoch",
             "train loss", "valid loss", "valid ppl", "sacreBLEU", "chrF", "BLEU tok", "seconds");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json m;
    try {
      m = parse_json(line, path.string());
    } catch (const IOError&) {
      continue;  // a torn last line of a killed run (or one nested too deep to be ours): not an epoch
    }
    if (!m.is_object() || !m.contains("epoch")) continue;
    auto number = [&](const char* key) {
      return m.contains(key) && m[key].is_number() ? m[key].get<double>() : NAN;  // null when not finite
    };
    // runs from before sacreBLEU was the headline logged only the tokenised BLEU, as valid_bleu
    const double tokenized = m.contains("valid_bleu_tokenized") ? number("valid_bleu_tokenized") : number("valid_bleu");
    fmt::print("  {:>5} {:>10.3f} {:>10.3f} {:>9.2f} {:>9.2f} {:>6.2f} {:>8.2f} {:>8.0f}\n", json_preview(m["epoch"]),
               number("train_loss"), number("valid_loss"), number("valid_ppl"), number("valid_sacrebleu"),
               number("valid_chrf"), tokenized, number("seconds"));
  }
}

// The sizes and kinds of the model's architecture, from the model's table: "embed 16, hidden 16,
// layers 1, ..., deep output yes" (the fields set by a flag, named as it; the architecture's only).
std::string model_sizes(const models::Seq2SeqConfig& m) {
  std::string out;
  for (const models::ModelField& f : models::model_fields()) {
    if (f.flag.empty() || f.key == "model.architecture" || !f.applies_to(m.architecture)) continue;
    const nlohmann::json v = f.get(m);
    std::string name = f.flag;
    std::replace(name.begin(), name.end(), '-', ' ');
    const std::string value = v.is_boolean() ? (v.get<bool>() ? "yes" : "no") : v.is_string() ? v.get<std::string>() : v.dump();
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, value);
  }
  return out;
}

}  // namespace

int inspect_main(int argc, char** argv) {
  Args a("inspect", "What a translator checkpoint holds: preset, language pair, vocabularies, model size, training\n"
                    "progress and settings, the weights' dtypes (quantization) and the data it was trained on;\n"
                    "with the run's metrics.jsonl beside it, the per-epoch losses, sacreBLEU, chrF and tokenised BLEU.");
  a.option("checkpoint", "file", "the .safetensors file to describe", "runs/default/best.safetensors")
      .option("json", "", "the config, train state and weights as one JSON object")
      .deprecated_positional("checkpoint");
  if (!a.parse(argc, argv)) return 0;
  const std::string path = a.get("checkpoint");
  SG_CHECK_IO(std::filesystem::exists(path), "no checkpoint at {}", path);
  check_safetensors_file(path);
  models::LoadedCheckpoint c = models::read_checkpoint(path);
  const models::TrainConfig& t = c.info.config;
  const models::Seq2SeqConfig& m = t.model;
  models::TrainState state = models::train_state_from_json(c.info.train_state.values, path);
  state.early_stopping.set_patience(t.patience);  // as a resumed run counts it (a file before format 3 lacks it)
  int64_t parameters = 0;
  std::string dtypes = weight_dtypes(c, parameters);
  if (a.flag("json")) {
    fmt::print("{}\n", nlohmann::json{{"checkpoint", path},
                                      {"bytes", std::filesystem::file_size(path)},
                                      {"parameters", parameters},
                                      {"weights", dtypes},
                                      {"src_vocab", c.info.src_vocab.size()},
                                      {"tgt_vocab", c.info.tgt_vocab.size()},
                                      {"config", t.to_json()},
                                      {"train_state", models::train_state_to_json(state)}}
                            .dump());
    return 0;
  }
  fmt::print("checkpoint: {} ({:.1f} MB)\n", path, std::filesystem::file_size(path) / 1e6);
  fmt::print("preset: {}\n", t.preset);
  fmt::print("languages: {} -> {} ({} corpus)\n", t.src_lang, t.tgt_lang, t.corpus);
  if (t.vocab == "word")
    fmt::print("vocabularies: {} source tokens, {} target tokens (words seen at least {} times, and {} special tokens)\n",
               c.info.src_vocab.size(), c.info.tgt_vocab.size(), t.min_freq, text::Vocab::kNumSpecial);
  else
    fmt::print("vocabularies: SentencePiece {} ({}): {} source pieces, {} target pieces ({} special tokens included), "
               "cased\n", t.vocab, t.joint_vocab ? "one model for both languages" : "one model per language",
               c.info.src_vocab.size(), c.info.tgt_vocab.size(), text::Vocab::kNumSpecial);
  fmt::print("model: {} ({}); {} parameters\n", models::architecture_name(m.architecture), model_sizes(m), parameters);
  fmt::print("weights: {}\n", dtypes);
  fmt::print("trained on: {}, {} training pairs, at most {} tokens per sentence, shuffle buffer {} pairs\n",
             t.corpus == "files" ? models::describe_corpus(t) : fmt::format("{} (data folder {})", t.corpus, t.data_dir),
             or_all(t.train_subset), t.max_tokens, t.shuffle_buffer);
  const optim::EarlyStopping& stopping = state.early_stopping;
  fmt::print("training: epoch {} of {}, step {}, best valid {} {}{}\n", state.epoch, t.epochs, state.step,
             stopping.options().metric, stopping.best() ? fmt::format("{:.4g}", *stopping.best()) : "none yet",
             stopping.should_stop() ? fmt::format(", stopped early ({} validations without improvement)",
                                                  stopping.validations_since_best())
                                    : "");
  fmt::print("config (every field of a {} translator; `seqgrad train --print-config` writes them as JSON):\n",
             models::architecture_name(m.architecture));
  for (const models::ConfigField& f : models::config_fields()) {
    const models::ModelField* model_field = models::find_model_field(f.key);
    if (f.key.starts_with("files.") && t.corpus != "files") continue;
    if (model_field && !model_field->applies_to(m.architecture)) continue;  // the other architecture's
    fmt::print("  {} = {}\n", f.key, f.get(t).dump());
  }
  print_metrics(std::filesystem::path(path).parent_path());
  return 0;
}

}  // namespace seqgrad::tools
