#include "models/seq2seq/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include <fmt/core.h>

#include "core/fileio.h"
#include "core/json.h"
#include "core/suggest.h"
#include "models/text/subword.h"

namespace seqgrad::models {

ConfigError::ConfigError(std::string field, std::string value, std::string problem)
    : ValueError(value.empty() ? fmt::format("config field {} {}", field, problem)
                               : fmt::format("config field {} = {} {}", field, value, problem)),
      field_(std::move(field)),
      value_(std::move(value)),
      problem_(std::move(problem)) {}

const char* amp_name(GemmPrecision amp) {
  switch (amp) {
    case GemmPrecision::full: return "off";
    case GemmPrecision::bf16: return "bf16";
    case GemmPrecision::f16: return "fp16";
  }
  return "?";
}

GemmPrecision parse_amp(const std::string& name) {
  for (GemmPrecision p : {GemmPrecision::full, GemmPrecision::bf16, GemmPrecision::f16})
    if (name == amp_name(p)) return p;
  throw ValueError(fmt::format("amp '{}' is not one of: off, bf16, fp16", name));
}

const char* lr_schedule_name(LRSchedule schedule) {
  return schedule == LRSchedule::inverse_sqrt ? "inverse_sqrt" : "step";
}

LRSchedule parse_lr_schedule(const std::string& name) {
  for (LRSchedule s : {LRSchedule::step, LRSchedule::inverse_sqrt})
    if (name == lr_schedule_name(s)) return s;
  throw ValueError(fmt::format("lr_schedule '{}' is not one of: step, inverse_sqrt", name));
}

namespace {

// ---- the table's row builders: one per type, each with its JSON type check and its range

template <class T>
using Access = T& (*)(TrainConfig&);

template <class T>
T& field_of(Access<T> at, const TrainConfig& c) {
  return at(const_cast<TrainConfig&>(c));  // the accessors name a member; reading it does not modify
}

ConfigField row(std::string key, std::string flag, std::string value_name, std::string help, FieldType type) {
  ConfigField f;
  f.key = std::move(key), f.flag = std::move(flag), f.value_name = std::move(value_name), f.help = std::move(help);
  f.type = type;
  return f;
}

[[noreturn]] void wrong_type(const std::string& key, const nlohmann::json& v, const char* expected) {
  throw ConfigError(key, json_preview(v), fmt::format("must be {}", expected));
}

struct IntRange {
  int64_t min = 0, max = std::numeric_limits<int64_t>::max();
};

// An int64_t or uint64_t field (the seed).
template <class T>
ConfigField integer_field(std::string key, std::string flag, std::string help, Access<T> at, IntRange range) {
  ConfigField f = row(key, std::move(flag), "n", std::move(help), FieldType::integer);
  f.get = [at](const TrainConfig& c) { return nlohmann::json(field_of(at, c)); };
  // nlohmann converts 1e300 to an integer with undefined behaviour: only JSON integers that fit are read
  f.set = [at, key](TrainConfig& c, const nlohmann::json& v) {
    const bool fits = std::is_signed_v<T> ? v.is_number_integer() &&
                                                (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX))
                                          : v.is_number_unsigned();
    if (!fits) wrong_type(key, v, std::is_signed_v<T> ? "an integer" : "an integer >= 0");
    at(c) = v.get<T>();
  };
  f.check = [at, range](const TrainConfig& c) -> std::string {
    T v = field_of(at, c);
    if (std::is_unsigned_v<T> || (static_cast<int64_t>(v) >= range.min && static_cast<int64_t>(v) <= range.max))
      return "";
    if (range.max == std::numeric_limits<int64_t>::max()) return fmt::format("must be >= {}", range.min);
    return fmt::format("must be in [{}, {}]", range.min, range.max);
  };
  return f;
}

ConfigField integer(std::string key, std::string flag, std::string help, Access<int64_t> at, IntRange range) {
  return integer_field<int64_t>(std::move(key), std::move(flag), std::move(help), at, range);
}
ConfigField integer(std::string key, std::string flag, std::string help, Access<uint64_t> at, IntRange range) {
  return integer_field<uint64_t>(std::move(key), std::move(flag), std::move(help), at, range);
}

// A real range: [min, max] with either end open; max infinite when absent.
struct RealRange {
  double min = 0, max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;
  std::string text() const {
    if (std::isinf(max)) return fmt::format("must be {} {}", min_open ? ">" : ">=", min);
    return fmt::format("must be in {}{}, {}{}", min_open ? "(" : "[", min, max, max_open ? ")" : "]");
  }
  bool holds(double v) const {
    return std::isfinite(v) && (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
};

ConfigField number(std::string key, std::string flag, std::string help, Access<double> at, RealRange range) {
  ConfigField f = row(key, std::move(flag), "x", std::move(help), FieldType::number);
  f.get = [at](const TrainConfig& c) { return nlohmann::json(field_of(at, c)); };
  f.set = [at, key](TrainConfig& c, const nlohmann::json& v) {
    if (!v.is_number()) wrong_type(key, v, "a number");
    at(c) = v.get<double>();
  };
  f.check = [at, range](const TrainConfig& c) { return range.holds(field_of(at, c)) ? "" : range.text(); };
  return f;
}

ConfigField boolean(std::string key, std::string flag, std::string help, Access<bool> at) {
  ConfigField f = row(key, std::move(flag), "", std::move(help), FieldType::boolean);
  f.get = [at](const TrainConfig& c) { return nlohmann::json(field_of(at, c)); };
  f.set = [at, key](TrainConfig& c, const nlohmann::json& v) {
    if (!v.is_boolean()) wrong_type(key, v, "true or false");
    at(c) = v.get<bool>();
  };
  f.check = [](const TrainConfig&) { return std::string(); };
  return f;
}

// A string; `check` returns "" or the problem.
ConfigField text(std::string key, std::string flag, std::string value_name, std::string help, Access<std::string> at,
                 std::function<std::string(const std::string&)> check) {
  ConfigField f = row(key, std::move(flag), std::move(value_name), std::move(help), FieldType::text);
  f.get = [at](const TrainConfig& c) { return nlohmann::json(field_of(at, c)); };
  f.set = [at, key](TrainConfig& c, const nlohmann::json& v) {
    if (!v.is_string()) wrong_type(key, v, "a string");
    at(c) = v.get<std::string>();
  };
  f.check = [at, check](const TrainConfig& c) { return check(field_of(at, c)); };
  return f;
}

// One of a few names, held as an enum (`name` and `parse` convert; parse throws ValueError).
template <class E>
ConfigField choice(std::string key, std::string flag, std::string value_name, std::string help, Access<E> at,
                   const char* (*name)(E), E (*parse)(const std::string&), std::string choices) {
  ConfigField f = row(key, std::move(flag), std::move(value_name), std::move(help), FieldType::text);
  f.get = [at, name](const TrainConfig& c) { return nlohmann::json(name(field_of(at, c))); };
  f.set = [at, key, parse, choices](TrainConfig& c, const nlohmann::json& v) {
    if (!v.is_string()) wrong_type(key, v, "a string");
    try {
      at(c) = parse(v.get<std::string>());
    } catch (const ValueError&) {
      throw ConfigError(key, json_preview(v), "must be one of: " + choices);
    }
  };
  f.check = [](const TrainConfig&) { return std::string(); };  // parse admitted only valid names
  return f;
}

std::string non_empty(const std::string& s) { return s.empty() ? "must not be empty" : ""; }

std::string check_metric(const std::string& s) {
  return s == "sacrebleu" || s == "chrf" || s == "loss" ? "" : "must be one of: sacrebleu, chrf, loss";
}

// A language names files (data/multi30k/train.de): a short code of letters, digits, '-' and '_',
// so that a checkpoint's config cannot point a path elsewhere ("../../etc").
std::string check_language(const std::string& s) {
  const bool code = !s.empty() && s.size() <= 16 && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
  });
  return code ? "" : "must be a language code of at most 16 letters, digits, '-' or '_'";
}

std::string check_corpus(const std::string& s) {
  std::vector<std::string> names = corpus_names();
  return std::find(names.begin(), names.end(), s) != names.end() ? ""
                                                                   : "must be one of: multi30k, fra-eng, files";
}

std::string check_vocab(const std::string& s) {
  if (s == "word") return "";
  if (s.starts_with(text::kSubwordModelPrefix)) {
    if (s.size() == text::kSubwordModelPrefix.size()) return "must name a SentencePiece model file after spm:";
    return text::subword_supported() ? "" : "this build has no SentencePiece support, needed by spm:MODEL";
  }
  try {
    text::parse_subword_spec(s, "vocab");
  } catch (const ValueError& e) {  // "vocab 'x': expected ...": the field and value are named by the caller
    std::string why = e.what();
    return why.substr(why.find("': ") == std::string::npos ? 0 : why.find("': ") + 3);
  }
  if (!text::subword_supported())
    return "this build has no SentencePiece support (install libsentencepiece-dev and reconfigure with "
           "-Dsentencepiece=enabled), or use vocab word";
  return "";
}

// A split's files: {} for none, {"src", "tgt"} or {"tsv", "src_col", "tgt_col"}.
nlohmann::json files_to_json(const text::CorpusFiles& f) {
  if (f.is_tsv()) return {{"tsv", f.tsv}, {"src_col", f.src_col}, {"tgt_col", f.tgt_col}};
  if (!f.src.empty()) return {{"src", f.src}, {"tgt", f.tgt}};
  return nlohmann::json::object();
}

text::CorpusFiles files_from_json(const nlohmann::json& j, const std::string& key) {
  auto string_at = [&](const char* name) {
    if (!j.contains(name) || !j.at(name).is_string())
      throw ConfigError(key, json_preview(j), fmt::format("needs a string \"{}\"", name));
    return j.at(name).get<std::string>();
  };
  auto column_at = [&](const char* name) {
    if (!j.contains(name) || !j.at(name).is_number_integer() || j.at(name).get<int64_t>() < 0 ||
        j.at(name).get<int64_t>() > 1000)
      throw ConfigError(key, json_preview(j), fmt::format("needs a column number \"{}\" in [0, 1000]", name));
    return j.at(name).get<int64_t>();
  };
  if (!j.is_object()) wrong_type(key, j, "an object");
  text::CorpusFiles f;
  if (j.contains("tsv")) {
    f.tsv = string_at("tsv");
    f.src_col = column_at("src_col");
    f.tgt_col = column_at("tgt_col");
  } else if (j.contains("src") || j.contains("tgt")) {
    f.src = string_at("src");
    f.tgt = string_at("tgt");
  }
  return f;
}

// A split's files of the user's corpus ("files.train"): set by the data flags (--train SRC TGT ...).
ConfigField files(std::string split, std::string help, Access<text::CorpusFiles> at) {
  std::string key = "files." + split;
  ConfigField f = row(key, "", "", std::move(help), FieldType::text);
  f.get = [at](const TrainConfig& c) { return files_to_json(field_of(at, c)); };
  f.set = [at, key](TrainConfig& c, const nlohmann::json& v) { at(c) = files_from_json(v, key); };
  f.check = [](const TrainConfig&) { return std::string(); };
  return f;
}

std::vector<ConfigField> make_table() {
  const int64_t kMaxSize = int64_t{1} << 20;  // a dimension, a count of tokens: far above any translator's
  std::vector<ConfigField> t = {
      text("preset", "", "", "the preset the other fields started from", [](TrainConfig& c) -> auto& { return c.preset; },
           [](const std::string& s) {
             std::vector<std::string> names = preset_names();
             return std::find(names.begin(), names.end(), s) != names.end() ? ""
                                                                            : "must be one of: default, seed, d2l, tiny";
           }),
      // the data
      text("corpus", "", "", "multi30k | fra-eng (bundled, under data_dir) | files (the user's: files.*)",
           [](TrainConfig& c) -> auto& { return c.corpus; }, check_corpus),
      text("src_lang", "src", "lang", "source language (multi30k: de en fr cs; fra-eng: en fr; your files: a name)",
           [](TrainConfig& c) -> auto& { return c.src_lang; }, check_language),
      text("tgt_lang", "tgt", "lang", "target language", [](TrainConfig& c) -> auto& { return c.tgt_lang; },
           check_language),
      text("data_dir", "data-dir", "dir", "folder holding the bundled corpora multi30k/ and fra-eng/",
           [](TrainConfig& c) -> auto& { return c.data_dir; }, non_empty),
      files("train", "your training corpus (corpus files)", [](TrainConfig& c) -> auto& { return c.train_files; }),
      files("valid", "your validation corpus (corpus files)", [](TrainConfig& c) -> auto& { return c.valid_files; }),
      files("test", "your test corpus (corpus files; may be empty)",
            [](TrainConfig& c) -> auto& { return c.test_files; }),
      integer("train_subset", "subset", "use the first n training pairs (0 = all)",
              [](TrainConfig& c) -> auto& { return c.train_subset; }, {.min = 0}),
      integer("shuffle_buffer", "shuffle-buffer", "training pairs held, shuffled and bucketed at once",
              [](TrainConfig& c) -> auto& { return c.shuffle_buffer; }, {.min = 1}),
      integer("max_tokens", "truncate", "keep the first n tokens of each sentence (before <eos>)",
              [](TrainConfig& c) -> auto& { return c.max_tokens; }, {.min = 1, .max = kMaxSize}),
      // the vocabularies
      text("vocab", "vocab", "kind",
           "word | unigram:N | bpe:N | spm:MODEL: lower-cased words, or N SentencePiece pieces (cased) trained on "
           "the training text, or an existing SentencePiece model file for both languages; stored in the checkpoint",
           [](TrainConfig& c) -> auto& { return c.vocab; }, check_vocab),
      boolean("joint_vocab", "joint-vocab", "one subword model for both languages (else one each)",
              [](TrainConfig& c) -> auto& { return c.joint_vocab; }),
      integer("min_freq", "min-freq", "word vocabularies: keep words seen at least n times",
              [](TrainConfig& c) -> auto& { return c.min_freq; }, {.min = 1}),
      // the optimisation
      integer("batch_size", "batch-size", "sentence pairs per batch",
              [](TrainConfig& c) -> auto& { return c.batch_size; }, {.min = 1, .max = kMaxSize}),
      integer("batch_tokens", "batch-tokens",
              "fill each batch to n tokens (pairs x the longest side, <eos> counted) instead of batch-size pairs "
              "(0 = off)", [](TrainConfig& c) -> auto& { return c.batch_tokens; }, {.min = 0}),
      integer("epochs", "epochs", "training epochs (a resumed run may extend them)",
              [](TrainConfig& c) -> auto& { return c.epochs; }, {.min = 1}),
      number("lr", "lr", "Adam learning rate", [](TrainConfig& c) -> auto& { return c.lr; },
             {.min = 0, .min_open = true}),
      choice<LRSchedule>("lr_schedule", "lr-schedule", "kind",
                         "step | inverse_sqrt: the learning rate times lr-gamma every lr-step-size epochs, or "
                         "fairseq's inverse_sqrt per optimizer update: a linear warmup from 0 over warmup-updates "
                         "updates, then lr x sqrt(warmup-updates / update)",
                         [](TrainConfig& c) -> auto& { return c.lr_schedule; }, lr_schedule_name, parse_lr_schedule,
                         "step, inverse_sqrt"),
      integer("step_size", "lr-step-size", "step schedule: multiply the learning rate by lr-gamma every n epochs",
              [](TrainConfig& c) -> auto& { return c.step_size; }, {.min = 1}),
      number("gamma", "lr-gamma", "step schedule: the factor (1 = a constant learning rate)",
             [](TrainConfig& c) -> auto& { return c.gamma; }, {.min = 0, .max = 1, .min_open = true}),
      integer("warmup_updates", "warmup-updates",
              "inverse_sqrt schedule: the optimizer updates of its linear warmup (>= 1; 0 with the step schedule)",
              [](TrainConfig& c) -> auto& { return c.warmup_updates; }, {.min = 0}),
      number("label_smoothing", "label-smoothing", "label smoothing of the cross-entropy (as in PyTorch)",
             [](TrainConfig& c) -> auto& { return c.label_smoothing; }, {.min = 0, .max = 1}),
      number("clip", "clip", "clip the gradients' global 2-norm to x",
             [](TrainConfig& c) -> auto& { return c.clip; }, {.min = 0, .min_open = true}),
      integer("seed", "seed", "random seed (weights, batches, dropout)",
              [](TrainConfig& c) -> auto& { return c.seed; }, {.min = 0}),
      choice<GemmPrecision>("amp", "amp", "mode",
                            "mixed precision: off | bf16 | fp16: the forward pass, loss and evaluations under "
                            "autocast (16-bit GEMM operands, float32 weights and recurrences); fp16 adds loss scaling",
                            [](TrainConfig& c) -> auto& { return c.amp; }, amp_name, parse_amp, "off, bf16, fp16"),
      integer("accum_steps", "accum-steps",
              "gradient accumulation: n batches per optimizer step, equal to one n-times larger batch",
              [](TrainConfig& c) -> auto& { return c.accum_steps; }, {.min = 1, .max = 4096}),
      // the run: validation, early stopping, checkpoints, initial weights
      integer("valid_every", "valid-every", "validate every n optimizer steps (0 = after each epoch)",
              [](TrainConfig& c) -> auto& { return c.valid_every; }, {.min = 0}),
      integer("patience", "patience",
              "early stopping: stop after n validations without a new best (0 = never)",
              [](TrainConfig& c) -> auto& { return c.patience; }, {.min = 0}),
      text("early_stopping_metric", "early-stopping-metric", "metric",
           "sacrebleu | chrf | loss: the validation metric that picks best.safetensors and that patience watches",
           [](TrainConfig& c) -> auto& { return c.early_stopping_metric; }, check_metric),
      integer("keep_checkpoints", "keep-checkpoints",
              "keep the checkpoints of the n best validations by the early-stopping metric as "
              "<out>/ckpt-STEP.safetensors, for `seqgrad average --best n` (0 = none)",
              [](TrainConfig& c) -> auto& { return c.keep_checkpoints; }, {.min = 0, .max = 1000}),
      text("init_from", "init-from", "ckpt",
           "start from this checkpoint's weights and vocabularies (a fresh optimizer; \"\" = none)",
           [](TrainConfig& c) -> auto& { return c.init_from; }, [](const std::string&) { return std::string(); }),
      // the model (models/seq2seq/model.h); the vocabulary sizes and pad id are set from the vocabularies
      integer("model.src_vocab", "", "source vocabulary size (from the vocabulary)",
              [](TrainConfig& c) -> auto& { return c.model.src_vocab; }, {.min = 0}),
      integer("model.tgt_vocab", "", "target vocabulary size (from the vocabulary)",
              [](TrainConfig& c) -> auto& { return c.model.tgt_vocab; }, {.min = 0}),
      integer("model.embed_size", "embed", "embedding size E",
              [](TrainConfig& c) -> auto& { return c.model.embed_size; }, {.min = 1, .max = kMaxSize}),
      integer("model.hidden_size", "hidden", "GRU hidden size H",
              [](TrainConfig& c) -> auto& { return c.model.hidden_size; }, {.min = 1, .max = kMaxSize}),
      integer("model.num_layers", "layers", "GRU layers L",
              [](TrainConfig& c) -> auto& { return c.model.num_layers; }, {.min = 1, .max = 64}),
      integer("model.attention_size", "attention-size", "additive attention's size A (0 = the hidden size)",
              [](TrainConfig& c) -> auto& { return c.model.attention_size; }, {.min = 0, .max = kMaxSize}),
      number("model.dropout", "dropout", "dropout probability",
             [](TrainConfig& c) -> auto& { return c.model.dropout; }, {.min = 0, .max = 1, .max_open = true}),
      choice<AttentionKind>("model.attention", "attention", "kind", "attention: additive | scaled_dot | hybrid",
                            [](TrainConfig& c) -> auto& { return c.model.attention; }, attention_kind_name,
                            parse_attention_kind, "additive, scaled_dot, hybrid"),
      boolean("model.deep_output", "deep-output", "logits from [state; context; embedding], as in the paper",
              [](TrainConfig& c) -> auto& { return c.model.deep_output; }),
      integer("model.pad_id", "", "the padding token's id (the vocabulary's)",
              [](TrainConfig& c) -> auto& { return c.model.pad_id; }, {.min = 0}),
      choice<Architecture>("model.architecture", "architecture", "kind",
                           "gru | transformer: the GRU encoder-decoder with attention, or the Transformer (width "
                           "--hidden, --layers in the encoder and the decoder each)",
                           [](TrainConfig& c) -> auto& { return c.model.architecture; }, architecture_name,
                           parse_architecture, "gru, transformer"),
      integer("model.heads", "heads", "transformer: attention heads (must divide --hidden)",
              [](TrainConfig& c) -> auto& { return c.model.heads; }, {.min = 1, .max = 1024}),
      integer("model.ffn_size", "ffn-size", "transformer: the feed-forward block's inner size (0 = 4 x --hidden)",
              [](TrainConfig& c) -> auto& { return c.model.ffn_size; }, {.min = 0, .max = kMaxSize}),
      boolean("model.norm_first", "norm-first", "transformer: pre-norm layers (else the paper's post-norm)",
              [](TrainConfig& c) -> auto& { return c.model.norm_first; }),
      boolean("model.tie_embeddings", "tie-embeddings",
              "transformer: one matrix for the source and target embeddings and the output projection (needs "
              "--joint-vocab)", [](TrainConfig& c) -> auto& { return c.model.tie_embeddings; }),
      choice<PositionalKind>("model.positional", "positional", "kind",
                             "transformer: sinusoidal | learned position encodings",
                             [](TrainConfig& c) -> auto& { return c.model.positional; }, positional_kind_name,
                             parse_positional_kind, "sinusoidal, learned"),
  };
  // --epochs extends a run and --patience lets one that early stopping ended go on (or stops one sooner)
  for (ConfigField& f : t) f.resumable = f.key == "epochs" || f.key == "data_dir" || f.key == "patience";
  return t;
}

// A checkpoint written before these fields existed has none of them; they keep their defaults.
bool added_later(const std::string& key) {
  static const std::set<std::string> later = {"amp", "shuffle_buffer", "vocab", "joint_vocab", "accum_steps",
                                              "valid_every", "patience", "early_stopping_metric",
                                              "keep_checkpoints", "init_from", "batch_tokens", "lr_schedule",
                                              "warmup_updates", "model.architecture", "model.heads",
                                              "model.ffn_size", "model.norm_first", "model.tie_embeddings",
                                              "model.positional"};
  return later.count(key) > 0 || key.starts_with("files.");
}

// The JSON value at a dotted key ("model.hidden_size"), or nullptr.
const nlohmann::json* value_at(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json* v = &j;
  for (size_t start = 0;;) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!v->is_object() || !v->contains(part)) return nullptr;
    v = &v->at(part);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// " (did you mean K?)": the closest key, or the key whose flag the unknown key spells
// ("lr_step_size" for --lr-step-size: step_size).
std::string nearest_key(const std::string& key) {
  std::vector<std::string> keys;
  for (const ConfigField& f : config_fields()) {
    std::string flag = f.flag;
    std::replace(flag.begin(), flag.end(), '-', '_');
    if (!flag.empty() && (key == flag || key == "model." + flag))
      return fmt::format(" (did you mean {}? --{} sets it)", f.key, f.flag);
    keys.push_back(f.key);
  }
  return did_you_mean(key, keys);
}

// Every key of `j` (nested objects joined with dots, down to a field's key) must be a field's.
void check_known_keys(const nlohmann::json& j, const std::string& prefix) {
  if (!j.is_object()) wrong_type(prefix.empty() ? "config" : prefix, j, "an object");
  for (const auto& [name, value] : j.items()) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (find_config_field(key)) continue;
    if (key == "model" || key == "files") {
      check_known_keys(value, key);
      continue;
    }
    throw ConfigError(key, "", "is not a field of the translator's config" + nearest_key(key));
  }
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> table = make_table();
  return table;
}

const ConfigField* find_config_field(std::string_view key) {
  for (const ConfigField& f : config_fields())
    if (f.key == key) return &f;
  return nullptr;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const ConfigField& f : config_fields()) {
    if (f.key.starts_with("files.") && corpus != "files") continue;  // only the user's corpus has files
    nlohmann::json* at = &j;
    for (size_t start = 0, dot; (dot = f.key.find('.', start)) != std::string::npos; start = dot + 1)
      at = &(*at)[f.key.substr(start, dot - start)];
    (*at)[f.key.substr(f.key.rfind('.') + 1)] = f.get(*this);
  }
  return j;
}

void apply_config_json(TrainConfig& config, const nlohmann::json& j) {
  check_known_keys(j, "");
  for (const ConfigField& f : config_fields())
    if (const nlohmann::json* v = value_at(j, f.key)) f.set(config, *v);
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  check_known_keys(j, "");
  for (const ConfigField& f : config_fields()) {
    if (value_at(j, f.key) || added_later(f.key)) continue;
    throw ConfigError(f.key, "", "is missing (every config seqgrad writes has it)");
  }
  TrainConfig c;
  apply_config_json(c, j);
  c.validate();
  c.model.validate();
  return c;
}

void TrainConfig::validate() const {
  for (const ConfigField& f : config_fields())
    if (std::string problem = f.check(*this); !problem.empty()) throw ConfigError(f.key, f.get(*this).dump(), problem);
  auto fail = [](const std::string& key, const std::string& value, const std::string& problem) {
    throw ConfigError(key, value, problem);
  };
  if (src_lang == tgt_lang) fail("tgt_lang", nlohmann::json(tgt_lang).dump(), "must differ from src_lang (a translator needs two languages)");
  if (lr_schedule == LRSchedule::inverse_sqrt && warmup_updates < 1)
    fail("warmup_updates", std::to_string(warmup_updates), "must be >= 1 with lr_schedule inverse_sqrt (the "
         "optimizer updates of its linear warmup; fairseq's default is 4000)");
  if (lr_schedule == LRSchedule::step && warmup_updates != 0)
    fail("warmup_updates", std::to_string(warmup_updates), "needs lr_schedule inverse_sqrt (the step schedule has no "
         "warmup: 0 there)");
  if (joint_vocab && vocab == "word")
    fail("joint_vocab", "true", "shares one subword model between the languages: it needs vocab unigram:N or bpe:N, not word");
  for (const auto& [key, lang] : {std::pair{"src_lang", &src_lang}, {"tgt_lang", &tgt_lang}})
    if (corpus == "multi30k" && *lang != "de" && *lang != "en" && *lang != "fr" && *lang != "cs")
      fail(key, nlohmann::json(*lang).dump(), "is not a language of corpus multi30k (de, en, fr, cs)");
  if (corpus == "fra-eng" && !((src_lang == "en" && tgt_lang == "fr") || (src_lang == "fr" && tgt_lang == "en")))
    fail("src_lang", nlohmann::json(src_lang).dump(), fmt::format("does not fit corpus fra-eng: it has the languages en and fr, got {}->{}", src_lang, tgt_lang));
  if (corpus == "files") {
    if (train_files.src.empty() && !train_files.is_tsv())
      fail("files.train", "", "is empty: corpus files needs training files");
    if (valid_files.src.empty() && !valid_files.is_tsv())
      fail("files.valid", "", "is empty: corpus files needs validation files (a validation split picks the best checkpoint)");
  }
}

TrainConfig read_config_file(const std::string& path, const std::string& preset_name) {
  nlohmann::json j = parse_json(read_file(path), fmt::format("config file {}", path));
  try {
    const nlohmann::json* file_preset = value_at(j, "preset");
    if (file_preset && !file_preset->is_string()) wrong_type("preset", *file_preset, "a string");
    TrainConfig c = preset(!preset_name.empty() ? preset_name : file_preset ? file_preset->get<std::string>() : "default");
    if (!preset_name.empty() && j.is_object()) j.erase("preset");  // the caller's preset wins
    apply_config_json(c, j);
    c.validate();
    return c;
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("config file {}: {}", path, e.what()));
  }
}

std::vector<std::string> preset_names() { return {"default", "seed", "d2l", "tiny", "transformer"}; }

TrainConfig preset(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  if (name == "seed") {  // the seed recipe's hyper-parameters, on subword units
    // one 8000-piece unigram model for both languages; 32 pieces hold what 20 words did (Multi30k:
    // 15.2 German and 14.4 English pieces per sentence against 12.6 and 13.1 words). Adam at 0.001,
    // not the recipe's 0.005: on subwords 0.005 diverged after one epoch (docs/results.md).
    c.model = {.embed_size = 256, .hidden_size = 512, .num_layers = 2, .dropout = 0.1};
    c.batch_size = 64, c.max_tokens = 32, c.lr = 0.001, c.epochs = 30, c.step_size = 10, c.gamma = 0.1;
    c.label_smoothing = 0.1, c.clip = 1.0, c.vocab = "unigram:8000", c.joint_vocab = true;
    // early stopping on validation sacreBLEU: both seed runs peaked at epoch 11-13 of the 30, after
    // the learning rate's decay at epoch 10; before it, validation stalled for up to 5 epochs (6-10 at
    // dropout 0.1, 7-10 at 0.3), which patience 3 took for the end (docs/results.md#seed-preset-runs);
    // the schedule is otherwise the seeds'
    c.patience = 6;
  } else if (name == "d2l") {  // d2l.ai chapter 10: 600 fra-eng pairs, 10 steps, E = H = 32
    c.corpus = "fra-eng", c.src_lang = "en", c.tgt_lang = "fr", c.train_subset = 600, c.min_freq = 2, c.vocab = "word";
    c.model = {.embed_size = 32, .hidden_size = 32, .num_layers = 2, .dropout = 0.1, .deep_output = false};
    c.batch_size = 64, c.max_tokens = 10, c.lr = 0.005, c.epochs = 250, c.step_size = 1000, c.gamma = 1.0;
    c.label_smoothing = 0.0;
  } else if (name == "default") {  // a good de->en model in minutes on two cores
    // 4000 unigram pieces per language: a target vocabulary smaller than the 4588 words (min_freq 3)
    // pays for sentences about 15% longer in pieces, so an epoch costs about what it did on words
    c.model = {.embed_size = 128, .hidden_size = 256, .num_layers = 1, .dropout = 0.2, .deep_output = true};
    c.batch_size = 64, c.max_tokens = 32, c.lr = 0.003, c.epochs = 6, c.step_size = 4, c.gamma = 0.3;
    c.label_smoothing = 0.1, c.clip = 1.0, c.min_freq = 3, c.vocab = "unigram:4000";
    c.patience = 2;  // of 6 epochs: two without a new best sacreBLEU end the run
  } else if (name == "tiny") {  // de->en heatmaps worth looking at in about two minutes on two cores
    c.model = {.embed_size = 64, .hidden_size = 128, .num_layers = 1, .dropout = 0.1, .deep_output = true};
    c.train_subset = 12000, c.batch_size = 64, c.max_tokens = 20, c.lr = 0.004, c.epochs = 4, c.step_size = 4;
    c.gamma = 1.0, c.label_smoothing = 0.1, c.clip = 1.0, c.min_freq = 2, c.vocab = "word";
  } else if (name == "transformer") {  // the road's other end: a small Transformer on the same data
    // Transformer-Tiny's shape (Wu, Kong, Kao 2021: 4 + 4 layers of width 128, 4 heads, FFN 256, all
    // embeddings tied over one joint subword vocabulary, label smoothing 0.1, inverse_sqrt warmup),
    // pre-norm (stable with a short warmup) and ~2,500-token batches, so that an epoch is ~190
    // updates on two cores; early stopping on validation sacreBLEU, the best checkpoints kept for
    // `average --best`
    c.model = {.architecture = Architecture::transformer, .embed_size = 128, .hidden_size = 128, .num_layers = 4,
               .dropout = 0.2, .heads = 4, .ffn_size = 256, .norm_first = true, .tie_embeddings = true};
    c.batch_tokens = 2500, c.max_tokens = 32, c.lr = 0.002, c.lr_schedule = LRSchedule::inverse_sqrt;
    c.warmup_updates = 800, c.epochs = 40, c.label_smoothing = 0.1, c.clip = 1.0;
    c.vocab = "unigram:8000", c.joint_vocab = true, c.patience = 5, c.keep_checkpoints = 5;
  } else {
    throw ValueError(fmt::format("unknown preset '{}' (choose one of: default, seed, d2l, tiny, transformer)", name));
  }
  return c;
}

std::vector<std::string> corpus_names() { return {"multi30k", "fra-eng", "files"}; }

std::string describe_corpus(const TrainConfig& c) {
  if (c.corpus != "files") return c.corpus;
  std::string out = fmt::format("train {}, valid {}", c.train_files.describe(), c.valid_files.describe());
  const bool has_test = !c.test_files.src.empty() || c.test_files.is_tsv();
  return out + (has_test ? ", test " + c.test_files.describe() : ", no test split");
}

}  // namespace seqgrad::models
