// `seqgrad average`: checkpoint averaging, the element-wise mean of the weights of translator
// checkpoints (--checkpoint A B ...), or of a run's best N validation checkpoints (--best N RUN_DIR,
// kept by `seqgrad train --keep-checkpoints N`), written as a float checkpoint that translate, eval
// and inspect load (models::average_checkpoints in models/seq2seq/checkpoint.h).
#include <filesystem>

#include <fmt/core.h>

#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/transformer.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace seqgrad::tools {

int average_main(int argc, char** argv) {
  Args a("average", "Average the weights of translator checkpoints of one architecture and vocabulary: the files given\n"
                    "with --checkpoint, or with --best N RUN_DIR the N best validation checkpoints of a run by its\n"
                    "early-stopping metric (RUN_DIR/ckpt-STEP.safetensors, kept by `seqgrad train\n"
                    "--keep-checkpoints N`; their scores are in RUN_DIR/metrics.jsonl). Usage:\n"
                    "  seqgrad average --best 5 runs/seed --out-file avg.safetensors\n"
                    "  seqgrad average --checkpoint A.safetensors B.safetensors --out-file avg.safetensors\n"
                    "The output holds the mean weights, the first checkpoint's config and vocabularies and no\n"
                    "optimizer state: translate, eval and inspect load it; train --resume does not.");
  a.list_option("checkpoint", "file", "the checkpoints to average (float, one architecture and vocabulary; each "
                "ending in .safetensors)", "", [](std::string_view arg) { return arg.ends_with(".safetensors"); })
      .pair_option("best", "n", "run_dir", "average the run's n best validation checkpoints by its early-stopping "
                   "metric (instead of --checkpoint)")
      .option("out-file", "file", "where to write the averaged checkpoint")
      .required()
      .quiet_option()
      .deprecated_positional("checkpoint");
  if (!a.parse(argc, argv)) return 0;
  SG_CHECK_USAGE(a.has("checkpoint") != a.has("best"), "{}", a.has("best")
                     ? "--best and --checkpoint exclude each other (a run's best checkpoints, or the files you name)"
                     : "give the checkpoints to average: --checkpoint A.safetensors B.safetensors, or --best N RUN_DIR");
  std::vector<std::string> inputs;
  if (a.has("best")) {
    const int64_t n = a.get_int("best", 1, 1000);
    try {
      inputs = models::best_checkpoints(a.get_pair("best").second, n);
    } catch (const IOError& e) {
      throw IOError(fmt::format("--best {}: {}", n, e.what()));
    }
  } else {
    inputs = a.get_list("checkpoint");
  }
  const std::string out = a.get("out-file");
  for (const std::string& in : inputs) {
    SG_CHECK_IO(std::filesystem::exists(in), "--checkpoint: no checkpoint at {}", in);
    SG_CHECK_USAGE(std::filesystem::weakly_canonical(in) != std::filesystem::weakly_canonical(out),
                   "--out-file {} is one of the checkpoints to average; write the average to another file",
                   out);
  }
  models::LoadedCheckpoint average = models::average_checkpoints(inputs);
  std::unique_ptr<models::TranslationModel> model = models::build_translation_model(average.info.config.model);
  models::load_weights(*model, average, out);  // every tensor's shape checked against the config
  models::save_checkpoint(out, *model, average.info);
  if (!a.flag("quiet")) {
    fmt::print("averaged {} checkpoint(s) into {}\n", inputs.size(), out);
    if (a.has("best"))
      for (const std::string& in : inputs) fmt::print("  {}\n", in);
  }
  return 0;
}

}  // namespace seqgrad::tools
