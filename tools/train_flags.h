// The command-line face of the translator's config (models/seq2seq/config.h): the flags of `train`
// and `compare` come from the config table, and a ConfigError comes back naming the flag. This is
// the one place where a config field meets its flag.
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "models/seq2seq/run.h"
#include "tools/args.h"

namespace seqgrad::tools {

// The corpus options of train and compare: --corpus NAME (a bundled corpus), or the user's files
// --train SRC TGT | --train-tsv FILE, --valid SRC TGT | --valid-tsv FILE, and with `test` --test
// SRC TGT | --test-tsv FILE.
struct DataOptions {
  bool test = true;
};
void add_data_options(Args& args, const DataOptions& options = {});

// A split's files from `name` SRC TGT or `tsv_name` FILE, made absolute so that eval and resume
// find them from any folder; nullopt when neither is given, a usage error when both are.
std::optional<text::CorpusFiles> split_flag(const Args& args, const std::string& name, const std::string& tsv_name);

// --preset, --config FILE and one flag per config field that has one (booleans: --name and
// --no-name), with the presets' defaults in the help; the fields named in `except` (JSON keys) are
// left out. Deprecated spellings (--max-tokens for --truncate) still work with a warning.
void add_config_flags(Args& args, const std::set<std::string>& except = {});

// The run's config: --config FILE or the --preset, then `adjust` (a command's own defaults), then
// the data flags and every given config flag, validated. Errors are UsageErrors naming the flag (or
// the config file and field).
models::TrainConfig config_from_flags(const Args& args, const std::function<void(models::TrainConfig&)>& adjust = {});
// `config` (a checkpoint's) with the given config flags applied and validated, as above.
models::TrainConfig apply_config_flags(models::TrainConfig config, const Args& args);

// The flags that set a field, given on the command line: the flag's name and the field.
struct GivenFlag {
  std::string flag;
  const models::ConfigField* field;
};
std::vector<GivenFlag> given_config_flags(const Args& args);

// The source length a trained checkpoint translates by default, in translate, eval, attention and
// train's closing test report: twice its training truncation (config field max_tokens), so that a
// sentence longer than any it was trained on is still read whole up to that length; --truncate N
// changes it.
inline int64_t inference_truncation(const models::TrainConfig& config) { return 2 * config.max_tokens; }
inline constexpr const char* kInferenceTruncateHelp =
    "cut each source sentence to n tokens (pieces for subword vocabularies; translate warns about each one it "
    "cuts); eval also cuts the references its loss is computed on (BLEU and chrF use them whole) (default: twice the "
    "checkpoint's truncation)";

// --threads n (n >= 1), when given.
void apply_threads_flag(const Args& args);

}  // namespace seqgrad::tools
