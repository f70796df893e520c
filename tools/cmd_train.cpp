// `seqgrad train`: trains the seq2seq translator. The loop below is the whole training program;
// it reads like the seeds' PyTorch (forward, loss, backward, clip, step, schedule).
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>

#include <fmt/core.h>

#include "core/device_memory.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "core/threads.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/pipeline.h"
#include "models/text/bleu.h"
#include "optim/optim.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

using models::TrainConfig;
volatile std::sig_atomic_t interrupted = 0;

Args train_args() {
  Args a("train", "Train the seq2seq-with-attention translator (Bahdanau et al. 2015) on Multi30k or fra-eng.");
  a.option("preset", "name", "hyper-parameter preset: default | seed | d2l", "default")
      .option("src", "lang", "source language (multi30k: de en fr cs; fra-eng: en fr)")
      .option("tgt", "lang", "target language")
      .option("data-dir", "dir", "folder holding multi30k/ and fra-eng/", "data")
      .option("out", "dir", "run folder for checkpoints, metrics and heatmaps", "runs/<preset>")
      .option("epochs", "n", "training epochs").option("batch-size", "n", "sentence pairs per batch")
      .option("lr", "x", "Adam learning rate").option("embed", "n", "embedding size E")
      .option("hidden", "n", "GRU hidden size H").option("layers", "n", "GRU layers L")
      .option("dropout", "p", "dropout probability").option("attention", "kind", "additive | scaled_dot | hybrid")
      .option("max-tokens", "n", "truncate sentences to n tokens").option("subset", "n", "use the first n training pairs")
      .option("label-smoothing", "x", "label smoothing").option("clip", "x", "gradient-norm clip")
      .option("beam", "n", "beam size for the final test BLEU", "1")
      .option("seed", "n", "random seed", "0").option("threads", "n", "threads (default: all cores)")
      .option("resume", "", "continue from <out>/last.safetensors")
      .option("device", "name", "cpu | cuda | cuda:N (CUDA needs a build with the CUDA backend and a GPU)", "cpu")
      .option("quiet", "", "no progress bar");
  return a;
}

TrainConfig config_from(const Args& a) {
  TrainConfig c = models::preset(a.get("preset"));
  if (a.has("src")) c.src_lang = a.get("src");
  if (a.has("tgt")) c.tgt_lang = a.get("tgt");
  c.data_dir = a.get("data-dir");
  if (a.has("epochs")) c.epochs = a.get_int("epochs");
  if (a.has("batch-size")) c.batch_size = a.get_int("batch-size");
  if (a.has("lr")) c.lr = a.get_double("lr");
  if (a.has("embed")) c.model.embed_size = a.get_int("embed");
  if (a.has("hidden")) c.model.hidden_size = a.get_int("hidden");
  if (a.has("layers")) c.model.num_layers = a.get_int("layers");
  if (a.has("dropout")) c.model.dropout = a.get_double("dropout");
  if (a.has("attention")) c.model.attention = models::parse_attention_kind(a.get("attention"));
  if (a.has("max-tokens")) c.max_tokens = a.get_int("max-tokens");
  if (a.has("subset")) c.train_subset = a.get_int("subset");
  if (a.has("label-smoothing")) c.label_smoothing = a.get_double("label-smoothing");
  if (a.has("clip")) c.clip = a.get_double("clip");
  c.seed = static_cast<uint64_t>(a.get_int("seed"));
  SG_CHECK_VALUE(c.epochs >= 1 && c.batch_size >= 1 && c.lr > 0, "train: epochs {}, batch size {} and lr {} must be "
                 "positive", c.epochs, c.batch_size, c.lr);
  return c;
}

std::string duration(double seconds) {
  int s = static_cast<int>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

}  // namespace

int train_main(int argc, char** argv) {
  Args args = train_args();
  if (!args.parse(argc, argv)) return 0;
  // --device: a CUDA device must exist in this build and on this machine (a clear DeviceError
  // otherwise). The loop below keeps the model and batches on the CPU: moving them is not wired yet.
  if (Device device = parse_device(args.get("device")); !device.is_cpu()) {
    device_memory_for(device, "train --device");
    throw DeviceError(fmt::format("train --device {}: the training loop does not move the model and batches to "
                                  "the GPU yet; use --device cpu (C++ programs can train on {} with "
                                  "module.to(device))", args.get("device"), device));
  }
  if (args.has("threads")) set_num_threads(static_cast<int>(args.get_int("threads")));
  std::string out_dir = args.get("out") == "runs/<preset>" ? "runs/" + args.get("preset") : args.get("out");
  std::string last_path = out_dir + "/last.safetensors", best_path = out_dir + "/best.safetensors";

  // ---- data and model (a resumed run takes everything from its checkpoint)
  std::optional<models::LoadedCheckpoint> resumed;
  if (args.flag("resume")) {
    SG_CHECK_IO(std::filesystem::exists(last_path), "train --resume: no checkpoint at {}", last_path);
    resumed = models::read_checkpoint(last_path);
  }
  TrainConfig config = resumed ? resumed->info.config : config_from(args);
  manual_seed(config.seed);
  models::Corpora data = models::load_corpora(config);
  fmt::print("data: {} {}->{}: {} train, {} valid, {} test pairs\n{}\n", config.corpus, config.src_lang,
             config.tgt_lang, data.train.size(), data.valid.size(), data.test.size(), data.report);
  text::Vocab src_vocab = resumed ? resumed->info.src_vocab
                                  : text::Vocab::build(text::source_side(data.train), {.min_freq = config.min_freq});
  text::Vocab tgt_vocab = resumed ? resumed->info.tgt_vocab
                                  : text::Vocab::build(text::target_side(data.train), {.min_freq = config.min_freq});
  config.model.src_vocab = src_vocab.size();
  config.model.tgt_vocab = tgt_vocab.size();
  text::EncodeOptions truncate{.max_src_tokens = config.max_tokens, .max_tgt_tokens = config.max_tokens};
  text::EncodedCorpus train = text::encode_pairs(data.train, src_vocab, tgt_vocab, truncate);
  text::EncodedCorpus valid = text::encode_pairs(data.valid, src_vocab, tgt_vocab, truncate);

  models::Seq2Seq model(config.model);
  models::init_xavier(model);
  optim::Adam optimizer(model.parameters(), {.lr = config.lr});
  optim::StepLR scheduler(optimizer, {.step_size = config.step_size, .gamma = config.gamma});
  nlohmann::json state = {{"epoch", 0}, {"batch", 0}, {"step", 0}, {"best_bleu", -1.0}};
  if (resumed) {
    models::load_weights(model, *resumed, last_path);
    restore_training_state(*resumed, optimizer, scheduler);
    state = resumed->info.train_state;
  }
  fmt::print("model: {} parameters, vocab {} -> {}, attention {}\n", model.num_parameters(), src_vocab.size(),
             tgt_vocab.size(), models::attention_kind_name(config.model.attention));

  auto save = [&](const std::string& path) {
    state["rng_offset"] = default_generator().offset();
    state["optimizer"] = optimizer.state_dict().metadata;
    state["scheduler"] = scheduler.state_dict();
    models::save_checkpoint(path, model, {config, src_vocab, tgt_vocab, state}, training_state_tensors(optimizer, scheduler));
  };
  std::signal(SIGINT, [](int) { interrupted = 1; });
  std::filesystem::create_directories(out_dir);
  std::string metrics_path = out_dir + "/metrics.jsonl";
  if (resumed) default_generator().set_offset(state.value("rng_offset", uint64_t{0}));

  // ---- the training loop
  nn::CrossEntropyOptions loss_options{.label_smoothing = config.label_smoothing, .ignore_index = text::Vocab::kPad};
  for (int64_t epoch = state["epoch"]; epoch < config.epochs; ++epoch) {
    model.train();
    std::vector<text::Batch> batches =
        text::make_batches(train.pairs, {.batch_size = config.batch_size, .seed = config.seed + uint64_t(epoch)});
    auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t tokens = 0, done = 0;
    for (int64_t i = state["batch"]; i < static_cast<int64_t>(batches.size()); ++i) {
      models::TensorBatch b = models::to_tensors(batches[i]);
      Tensor logits = model(b.src, b.src_lengths, b.tgt_in);                                   // (B, T, V)
      Tensor loss = nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}), loss_options);
      double value = loss.item();
      if (!std::isfinite(value)) {
        save(last_path);
        throw ValueError(fmt::format("loss is {} at epoch {} batch {} (step {}); checkpoint saved to {}", value, epoch,
                                     i, state["step"].get<int64_t>(), last_path));
      }
      optimizer.zero_grad();
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), config.clip);
      optimizer.step();
      state["step"] = state["step"].get<int64_t>() + 1;
      state["batch"] = i + 1;
      loss_sum += value * b.target_tokens, tokens += b.target_tokens, ++done;
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!args.flag("quiet") && (i % 10 == 0 || i + 1 == static_cast<int64_t>(batches.size())))
        fmt::print(stderr, "\repoch {}/{} batch {}/{} loss {:.3f} {:.0f} tok/s ETA {}   ", epoch + 1, config.epochs,
                   i + 1, batches.size(), loss_sum / tokens, tokens / elapsed,
                   duration(elapsed / done * (batches.size() - i - 1)));
      if (interrupted) {
        save(last_path);
        fmt::print(stderr, "\ninterrupted: saved {} (resume with --resume)\n", last_path);
        return 130;
      }
    }
    scheduler.step();
    state["epoch"] = epoch + 1;
    state["batch"] = 0;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Evaluation val = evaluate(model, valid, tgt_vocab, data.valid, {.beam_size = 1});
    fmt::print(stderr, "\n");
    fmt::print("epoch {}: train loss {:.3f}, valid loss {:.3f}, ppl {:.2f}, BLEU {:.2f}, {:.0f} s\n", epoch + 1,
               tokens ? loss_sum / tokens : 0.0, val.loss, std::exp(val.loss), val.bleu, seconds);
    append_line(metrics_path, nlohmann::json{{"epoch", epoch + 1}, {"step", state["step"]},
                                             {"train_loss", tokens ? loss_sum / tokens : 0.0}, {"valid_loss", val.loss},
                                             {"valid_ppl", std::exp(val.loss)}, {"valid_bleu", val.bleu},
                                             {"seconds", seconds}, {"lr", optimizer.lr()}}
                                  .dump());
    if (val.bleu > state["best_bleu"].get<double>()) {
      state["best_bleu"] = val.bleu;
      save(best_path);
    }
    save(last_path);
  }

  // ---- test BLEU with the best checkpoint, a few translations and their heatmaps
  models::LoadedCheckpoint best = models::read_checkpoint(best_path);
  models::load_weights(model, best, best_path);
  report_test(model, src_vocab, tgt_vocab, data, config, out_dir, args.get_int("beam"));
  return 0;
}

}  // namespace seqgrad::tools
