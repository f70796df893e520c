// `seqgrad quantize`: a trained translator checkpoint -> a dynamically quantized (int8) one that
// translate, eval, attention and bench load as they load a float32 one (nn/quantized.h,
// models/seq2seq/quantized_checkpoint.h).
#include <filesystem>
#include <memory>

#include <fmt/core.h>

#include "core/threads.h"
#include "models/seq2seq/quantized_checkpoint.h"
#include "models/seq2seq/transformer.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace seqgrad::tools {

int quantize_main(int argc, char** argv) {
  Args a("quantize", "Dynamic int8 quantization of a translator checkpoint, as PyTorch's quantize_dynamic: every\n"
                     "Linear and GRU weight (and by default a GRU translator's embeddings) becomes int8 with\n"
                     "float32 scales; activations are quantized per row at inference. A Transformer's Linear\n"
                     "layers (attention outputs, feed-forward blocks, an untied output layer) become int8, its\n"
                     "embeddings stay float32. The output loads wherever a checkpoint does.");
  a.option("checkpoint", "file", "the float32 checkpoint to quantize", "runs/default/best.safetensors")
      .option("out-file", "file", "where to write the quantized checkpoint (safetensors, I8 weights + F32 scales)")
      .required()
      .deprecated_alias("out", "out-file")
      .option("per-tensor", "", "one scale per weight tensor instead of one per output channel")
      .option("float-embeddings", "", "keep the embedding tables float32 (a larger file; a Transformer's always are)")
      .option("threads", "n", "threads (default: all cores)")
      .quiet_option();  // the summary line
  if (!a.parse(argc, argv)) return 0;
  if (a.has("threads")) set_num_threads(a.get_threads());
  const std::string in = a.get("checkpoint"), out = a.get("out-file");
  SG_CHECK_IO(std::filesystem::exists(in), "quantize: no checkpoint at {}", in);
  SG_CHECK_VALUE(std::filesystem::weakly_canonical(in) != std::filesystem::weakly_canonical(out),
                 "quantize: --out-file {} is the input checkpoint; write the quantized one to another file", out);
  models::LoadedCheckpoint checkpoint = models::read_checkpoint(in);
  SG_CHECK_VALUE(checkpoint.quantized.empty(),
                 "quantize: {} is already quantized; quantize the float32 checkpoint (quantizing twice would round "
                 "the weights twice)",
                 in);
  const bool transformer = checkpoint.info.config.model.architecture == models::Architecture::transformer;
  std::unique_ptr<models::TranslationModel> built;
  {
    nn::init::SkipInitGuard loaded_next;  // every value comes from the checkpoint
    built = models::build_translation_model(checkpoint.info.config.model);
  }
  models::TranslationModel& model = *built;
  models::load_weights(model, checkpoint, in);
  nn::QuantizeOptions options{.kinds = {nn::QuantKind::Linear},
                              .scheme = a.flag("per-tensor") ? QScheme::per_tensor : QScheme::per_channel};
  if (!transformer) options.kinds.push_back(nn::QuantKind::GRU);
  // A Transformer's embeddings stay float32: its tied matrix is the output projection too (a
  // product, as in fairseq, not a Linear that quantize_dynamic could swap)
  if (!transformer && !a.flag("float-embeddings")) options.kinds.push_back(nn::QuantKind::Embedding);
  const std::vector<std::string> names = nn::quantize_dynamic(model, options);
  models::CheckpointInfo info = checkpoint.info;
  models::save_quantized_checkpoint(out, model, info, options);
  const auto in_bytes = std::filesystem::file_size(in), out_bytes = std::filesystem::file_size(out);
  if (!a.flag("quiet"))
    fmt::print("quantized {} weights ({}): {} -> {} ({:.1f} MB -> {:.1f} MB, {:.1f}% of the input file)\n",
             names.size(), qscheme_name(options.scheme), in, out, in_bytes / 1e6, out_bytes / 1e6,
             100.0 * out_bytes / in_bytes);
  return 0;
}

}  // namespace seqgrad::tools
