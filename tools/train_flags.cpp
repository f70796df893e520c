#include "tools/train_flags.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <fmt/core.h>

#include "core/threads.h"
#include "models/seq2seq/config.h"
#include "models/text/subword.h"

namespace seqgrad::tools {
namespace {

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

}  // namespace

std::optional<text::CorpusFiles> split_flag(const Args& a, const std::string& name, const std::string& tsv_name) {
  const bool aligned = a.is_pair_option(name) && a.has(name), tsv = a.has(tsv_name);
  SG_CHECK_USAGE(!(aligned && tsv), "--{} and --{} exclude each other (two aligned files, or one tab-separated "
                 "file)", name, tsv_name);
  if (!aligned && !tsv) return std::nullopt;
  text::CorpusFiles f;
  if (tsv) {
    f.tsv = absolute(a.get(tsv_name));
  } else {
    auto [src, tgt] = a.get_pair(name);
    f.src = absolute(src), f.tgt = absolute(tgt);
  }
  return f;
}

namespace {

// --corpus NAME (a bundled corpus), or the user's files: --train and --valid (or their -tsv
// forms), --test optional.
void apply_data_flags(models::TrainConfig& c, const Args& a) {
  std::optional<text::CorpusFiles> train = split_flag(a, "train", "train-tsv"),
                                   valid = split_flag(a, "valid", "valid-tsv"),
                                   test = split_flag(a, "test", "test-tsv");
  if (a.has("corpus")) {
    SG_CHECK_USAGE(!train && !valid && !test, "--corpus {} names a bundled corpus; --train, --valid and --test give "
                   "your own files instead: use one or the other", a.get("corpus"));
    const std::vector<std::string> bundled = {"multi30k", "fra-eng"};
    SG_CHECK_USAGE(std::find(bundled.begin(), bundled.end(), a.get("corpus")) != bundled.end(),
                   "--corpus expects multi30k or fra-eng, got '{}'{} (your own files: --train SRC TGT --valid SRC TGT)",
                   a.get("corpus"), did_you_mean(a.get("corpus"), bundled));
    if (a.get("corpus") != c.corpus && a.get("corpus") == "fra-eng" && !a.has("src") && !a.has("tgt"))
      c.src_lang = "en", c.tgt_lang = "fr";  // fra-eng's languages
    if (a.get("corpus") != c.corpus && a.get("corpus") == "multi30k" && !a.has("src") && !a.has("tgt"))
      c.src_lang = "de", c.tgt_lang = "en";
    c.corpus = a.get("corpus");
    return;
  }
  if (!train && !valid && !test) return;
  SG_CHECK_USAGE(train.has_value() || c.corpus == "files", "--{} and --test go with --train: your own corpus "
                 "needs --train SRC_FILE TGT_FILE (or --train-tsv FILE)", "valid");
  SG_CHECK_USAGE(valid.has_value() || c.corpus == "files", "--train needs --{} SRC_FILE TGT_FILE (or --valid-tsv "
                 "FILE): a validation split picks the best checkpoint", "valid");
  if (c.corpus != "files" && !a.has("src") && !a.has("tgt")) c.src_lang = "src", c.tgt_lang = "tgt";
  c.corpus = "files";
  if (train) c.train_files = *train;
  if (valid) c.valid_files = *valid;
  if (test) c.test_files = *test;
}

}  // namespace

void add_data_options(Args& a, const DataOptions& o) {
  a.option("corpus", "name", "bundled corpus under --data-dir: multi30k | fra-eng (default: the preset's)")
      .pair_option("train", "src_file", "tgt_file", "your training corpus: two files aligned by line")
      .option("train-tsv", "file", "your training corpus as one file of source<TAB>target lines")
      .pair_option("valid", "src_file", "tgt_file", "your validation corpus (needed with --train)")
      .option("valid-tsv", "file", "your validation corpus, tab-separated");
  if (o.test)
    a.pair_option("test", "src_file", "tgt_file", "your test corpus (optional; scored after training)")
        .option("test-tsv", "file", "your test corpus, tab-separated");
}

namespace {

// " (presets: default 0.003, seed 0.001, d2l 0.005, tiny 0.004; config key lr)", or " (default: X;
// config key K)" when the presets agree: the flag's defaults and its name in a --config file.
std::string preset_defaults(const models::ConfigField& f) {
  std::vector<std::string> values;
  for (const std::string& name : models::preset_names()) {
    nlohmann::json v = f.get(models::preset(name));
    values.push_back(!v.is_string() ? v.dump() : v.get<std::string>().empty() ? "none" : v.get<std::string>());
  }
  if (std::all_of(values.begin(), values.end(), [&](const std::string& v) { return v == values[0]; }))
    return fmt::format(" (default: {}; config key {})", values[0], f.key);
  std::string out;
  for (size_t i = 0; i < values.size(); ++i)
    out += fmt::format("{}{} {}", i ? ", " : " (presets: ", models::preset_names()[i], values[i]);
  return out + fmt::format("; config key {})", f.key);
}

// A config field's flag value as JSON, for ConfigField::set; "" values are refused by Args.
nlohmann::json flag_value(const Args& a, const models::ConfigField& f) {
  switch (f.type) {
    case models::FieldType::integer: {
      int64_t v = a.get_int(f.flag);
      return v >= 0 ? nlohmann::json(static_cast<uint64_t>(v)) : nlohmann::json(v);
    }
    case models::FieldType::number: return a.get_double(f.flag);
    case models::FieldType::boolean:
      SG_CHECK_USAGE(!(a.has(f.flag) && a.has("no-" + f.flag)), "--{} and --no-{} exclude each other", f.flag, f.flag);
      return a.has(f.flag);
    case models::FieldType::text: return a.get(f.flag);
  }
  return nullptr;
}

// What the user typed: the flag's value, or for a boolean the "no-" of --no-flag.
std::string typed(const Args& a, const models::ConfigField& f) {
  if (f.type != models::FieldType::boolean) return a.get(f.flag);
  return a.has(f.flag) ? "" : "no-";
}

// Runs `apply`; a ConfigError comes back as a UsageError naming the field's flag when it has one.
template <class Apply>
models::TrainConfig with_flag_errors(const Args& a, Apply&& apply) {
  try {
    return apply();
  } catch (const models::ConfigError& e) {
    const models::ConfigField* f = models::find_config_field(e.field());
    if (f == nullptr || f->flag.empty() || !(a.has(f->flag) || a.has("no-" + f->flag))) throw UsageError(e.what());
    if (f->type == models::FieldType::boolean)
      throw UsageError(fmt::format("--{}{} {}", typed(a, *f), f->flag, e.problem()));
    throw UsageError(fmt::format("--{} {}, got {}", f->flag, e.problem(), typed(a, *f)));
  }
}

models::TrainConfig apply_flags(models::TrainConfig c, const Args& a) {
  apply_data_flags(c, a);
  SG_CHECK_USAGE(!a.has("attention") || a.get("attention") != "dot",
                 "--attention dot: the translator's dot-product attention is scaled_dot (scaling by 1/sqrt(d) keeps "
                 "the softmax from saturating); unscaled dot is only in `seqgrad attention demo --attention dot`");
  for (const GivenFlag& g : given_config_flags(a)) g.field->set(c, flag_value(a, *g.field));
  // a preset's joint subword model does not carry over to word vocabularies (the seed preset with
  // `--vocab word`); only an explicit --joint-vocab with word is a contradiction
  if (a.has("vocab") && c.vocab == "word" && !a.has("joint-vocab")) c.joint_vocab = false;
  // likewise a preset's inverse_sqrt warmup does not carry over to `--lr-schedule step`
  if (a.has("lr-schedule") && c.lr_schedule == models::LRSchedule::step && !a.has("warmup-updates"))
    c.warmup_updates = 0;
  // absolute, so that eval and resume find the files from any folder
  c.data_dir = absolute(c.data_dir);
  if (!c.init_from.empty()) c.init_from = absolute(c.init_from);
  if (c.vocab.starts_with(text::kSubwordModelPrefix) && c.vocab.size() > text::kSubwordModelPrefix.size())
    c.vocab = std::string(text::kSubwordModelPrefix) + absolute(c.vocab.substr(text::kSubwordModelPrefix.size()));
  c.validate();
  return c;
}

}  // namespace

void add_config_flags(Args& a, const std::set<std::string>& except) {
  std::string presets;
  for (const std::string& name : models::preset_names()) presets += (presets.empty() ? "" : " | ") + name;
  a.option("preset", "name", "hyper-parameter preset: " + presets, "default")
      .option("config", "file", "a JSON config (any subset of --print-config's fields; its \"preset\" first, then "
              "its fields, then the flags)")
      .option("print-config", "", "print the resolved config as JSON (valid --config input) and exit");
  for (const models::ConfigField& f : models::config_fields()) {
    if (f.flag.empty() || except.count(f.key)) continue;
    a.option(f.flag, f.value_name, f.help + preset_defaults(f)).group("config");
    if (f.type == models::FieldType::boolean) a.option("no-" + f.flag, "", "the opposite of --" + f.flag);
  }
  if (!except.count("max_tokens")) a.deprecated_alias("max-tokens", "truncate");
}

std::vector<GivenFlag> given_config_flags(const Args& a) {
  std::vector<GivenFlag> given;
  for (const models::ConfigField& f : models::config_fields()) {
    if (f.flag.empty() || !a.in_group(f.flag, "config")) continue;
    if (a.has(f.flag) || (f.type == models::FieldType::boolean && a.has("no-" + f.flag))) given.push_back({f.flag, &f});
  }
  return given;
}

models::TrainConfig apply_config_flags(models::TrainConfig config, const Args& a) {
  return with_flag_errors(a, [&] { return apply_flags(std::move(config), a); });
}

models::TrainConfig config_from_flags(const Args& a, const std::function<void(models::TrainConfig&)>& adjust) {
  return with_flag_errors(a, [&] {
    models::TrainConfig base;
    try {
      base = a.has("config") ? models::read_config_file(a.get("config"), a.has("preset") ? a.get("preset") : "")
                             : models::preset(a.get("preset"));
    } catch (const ValueError& e) {
      throw UsageError(e.what());  // the file's field, not a flag: read_config_file named the file and field
    }
    if (adjust) adjust(base);
    return apply_flags(std::move(base), a);
  });
}

void apply_threads_flag(const Args& a) {
  if (a.has("threads")) set_num_threads(a.get_threads());
}

}  // namespace seqgrad::tools
