// The command-line flags that set a TrainConfig, shared by `seqgrad train` and `seqgrad compare`,
// with their one validation: a value is checked once, where it enters, with the flag in the message.
#pragma once
#include <optional>
#include <string>

#include "models/seq2seq/pipeline.h"
#include "tools/args.h"

namespace seqgrad::tools {

// The corpus options of train and compare: --corpus NAME (a bundled corpus), or the user's files
// --train SRC TGT | --train-tsv FILE and the validation split as `valid_flag` SRC TGT |
// --valid-tsv FILE (compare's --valid counts pairs, so it names the files --valid-files), and
// with `test` --test SRC TGT | --test-tsv FILE.
struct DataOptions {
  const char* valid_flag = "valid";
  bool test = true;
};
void add_data_options(Args& args, const DataOptions& options = {});

// A split's files from `name` SRC TGT or `tsv_name` FILE, made absolute so that eval and resume
// find them from any folder; nullopt when neither is given, a usage error when both are.
std::optional<text::CorpusFiles> split_flag(const Args& args, const std::string& name, const std::string& tsv_name);

// `config` with every config flag that `args` declares and the user gave applied, then every field
// checked (ValueError naming the flag and the value).
models::TrainConfig apply_config_flags(models::TrainConfig config, const Args& args);

// --threads n (n >= 1), when given.
void apply_threads_flag(const Args& args);

}  // namespace seqgrad::tools
