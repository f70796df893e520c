// `seqgrad average`: checkpoint averaging, the element-wise mean of the weights of a run's last
// validation checkpoints (`seqgrad train --keep-checkpoints N`), written as a float checkpoint that
// translate, eval and inspect load (models::average_checkpoints in models/seq2seq/checkpoint.h).
#include <filesystem>

#include <fmt/core.h>

#include "models/seq2seq/checkpoint.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace seqgrad::tools {

int average_main(int argc, char** argv) {
  Args a("average", "Average the weights of translator checkpoints of one architecture and vocabulary (e.g. a\n"
                    "run's last N validations, kept by `seqgrad train --keep-checkpoints N` as\n"
                    "<out>/ckpt-STEP.safetensors). Usage: seqgrad average --out-file F CKPT CKPT...\n"
                    "The output holds the mean weights, the first checkpoint's config and vocabularies and no\n"
                    "optimizer state: translate, eval and inspect load it; train --resume does not.");
  a.option("out-file", "file", "where to write the averaged checkpoint")
      .positional("CKPT", "the checkpoints to average (float, one architecture and vocabulary)");
  if (!a.parse(argc, argv)) return 0;
  const std::vector<std::string>& inputs = a.positionals();
  SG_CHECK_USAGE(a.has("out-file"), "--out-file F is required (where to write the average)");
  SG_CHECK_USAGE(!inputs.empty(), "give the checkpoints to average after the options (seqgrad average "
                 "--out-file F CKPT CKPT...)");
  const std::string out = a.get("out-file");
  for (const std::string& in : inputs) {
    SG_CHECK_IO(std::filesystem::exists(in), "no checkpoint at {}", in);
    SG_CHECK_USAGE(std::filesystem::weakly_canonical(in) != std::filesystem::weakly_canonical(out),
                   "--out-file {} is one of the checkpoints to average; write the average to another file",
                   out);
  }
  models::LoadedCheckpoint average = models::average_checkpoints(inputs);
  models::Seq2Seq model(average.info.config.model);
  models::load_weights(model, average, out);  // every tensor's shape checked against the config
  models::save_checkpoint(out, model, average.info);
  fmt::print("averaged {} checkpoint(s) into {}\n", inputs.size(), out);
  return 0;
}

}  // namespace seqgrad::tools
