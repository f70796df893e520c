// `seqgrad train`: trains the seq2seq translator. The loop below is the whole training program;
// it reads like the seeds' PyTorch (forward, loss, backward, clip, step, schedule).
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include <fmt/core.h>

#include "core/autocast.h"
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
  Args a("train", "Train the seq2seq-with-attention translator (Bahdanau et al. 2015) on Multi30k or fra-eng.\n"
                  "Ctrl-C saves <out>/last.safetensors and exits (130); --resume continues from it exactly.\n"
                  "A NaN or infinite loss or gradient norm stops the run, naming the step, and saves the state\n"
                  "before that step in <out>/nan.safetensors (last.safetensors stays the last good checkpoint);\n"
                  "with --amp fp16 an inf/NaN gradient only skips the step and halves the loss scale.");
  a.option("preset", "name", "hyper-parameter preset: default | seed | d2l", "default")
      .option("src", "lang", "source language (multi30k: de en fr cs; fra-eng: en fr)")
      .option("tgt", "lang", "target language")
      .option("data-dir", "dir", "folder holding multi30k/ and fra-eng/", "data")
      .option("out", "dir", "run folder for checkpoints, metrics and heatmaps", "runs/<preset>")
      .option("epochs", "n", "training epochs (with --resume: may extend the run)")
      .option("batch-size", "n", "sentence pairs per batch")
      .option("lr", "x", "Adam learning rate").option("embed", "n", "embedding size E")
      .option("hidden", "n", "GRU hidden size H").option("layers", "n", "GRU layers L")
      .option("dropout", "p", "dropout probability").option("attention", "kind", "additive | scaled_dot | hybrid")
      .option("max-tokens", "n", "truncate sentences to n tokens").option("subset", "n", "use the first n training pairs")
      .option("label-smoothing", "x", "label smoothing").option("clip", "x", "gradient-norm clip")
      .option("beam", "n", "beam size for the final test BLEU", "1")
      .option("seed", "n", "random seed", "0").option("threads", "n", "threads (default: all cores)")
      .option("resume", "",
              "continue from <out>/last.safetensors with its settings: --epochs may extend\n"
              "                             the run, --data-dir, --beam, --threads, --device and --quiet may\n"
              "                             change, other flags must match the checkpoint's")
      .option("device", "name",
              "cpu | cuda | cuda:N: where the model, optimizer state, batches and\n"
              "                             decoding live (CUDA needs the CUDA backend built and a GPU)", "cpu")
      .option("amp", "mode",
              "mixed precision: off | bf16 | fp16: forward pass, loss and evaluations\n"
              "                             under autocast (16-bit GEMM operands, float32 weights);\n"
              "                             fp16 adds loss scaling (GradScaler)", "off")
      .option("quiet", "", "no progress bar");
  // Test hooks (tests/test_tools_cli.py), left out of --help:
  a.hidden_option("stop-after-steps", "n", "behave exactly like Ctrl-C once the step counter reaches n")
      .hidden_option("nan-at-step", "n", "make the loss of step n (1-based) NaN, to test the non-finite stop")
      .hidden_option("init-loss-scale", "x", "--amp fp16's initial loss scale (default 65536); a huge one forces "
                     "skipped steps");
  return a;
}

// The flags that set TrainConfig fields (besides --preset), with the field each one sets as text, so
// that a resumed run can tell which flags disagree with its checkpoint.
struct ConfigFlag {
  const char* name;
  std::string (*value)(const TrainConfig&);
};
const ConfigFlag kConfigFlags[] = {
    {"src", [](const TrainConfig& c) { return c.src_lang; }},
    {"tgt", [](const TrainConfig& c) { return c.tgt_lang; }},
    {"batch-size", [](const TrainConfig& c) { return fmt::format("{}", c.batch_size); }},
    {"lr", [](const TrainConfig& c) { return fmt::format("{}", c.lr); }},
    {"embed", [](const TrainConfig& c) { return fmt::format("{}", c.model.embed_size); }},
    {"hidden", [](const TrainConfig& c) { return fmt::format("{}", c.model.hidden_size); }},
    {"layers", [](const TrainConfig& c) { return fmt::format("{}", c.model.num_layers); }},
    {"dropout", [](const TrainConfig& c) { return fmt::format("{}", c.model.dropout); }},
    {"attention", [](const TrainConfig& c) { return std::string(models::attention_kind_name(c.model.attention)); }},
    {"max-tokens", [](const TrainConfig& c) { return fmt::format("{}", c.max_tokens); }},
    {"subset", [](const TrainConfig& c) { return fmt::format("{}", c.train_subset); }},
    {"label-smoothing", [](const TrainConfig& c) { return fmt::format("{}", c.label_smoothing); }},
    {"clip", [](const TrainConfig& c) { return fmt::format("{}", c.clip); }},
    {"seed", [](const TrainConfig& c) { return fmt::format("{}", c.seed); }},
    {"amp", [](const TrainConfig& c) { return c.amp; }},
};

// The GEMM precision of an --amp mode (also checks a checkpoint's value).
GemmPrecision amp_precision(const std::string& amp) {
  if (amp == "off") return GemmPrecision::full;
  if (amp == "bf16") return GemmPrecision::bf16;
  if (amp == "fp16") return GemmPrecision::f16;
  throw ValueError(fmt::format("--amp expects off, bf16 or fp16, got '{}'", amp));
}

// `c` with the command line's flags applied, every value checked.
TrainConfig apply_flags(TrainConfig c, const Args& a) {
  if (a.has("src")) c.src_lang = a.get("src");
  if (a.has("tgt")) c.tgt_lang = a.get("tgt");
  if (a.has("data-dir")) c.data_dir = a.get("data-dir");
  if (a.has("epochs")) c.epochs = a.get_int("epochs");
  if (a.has("batch-size")) c.batch_size = a.get_int("batch-size");
  if (a.has("lr")) c.lr = a.get_double("lr");
  if (a.has("embed")) c.model.embed_size = a.get_int("embed");
  if (a.has("hidden")) c.model.hidden_size = a.get_int("hidden");
  if (a.has("layers")) c.model.num_layers = a.get_int("layers");
  if (a.has("dropout")) c.model.dropout = a.get_double("dropout");
  SG_CHECK_USAGE(c.src_lang != c.tgt_lang, "--src and --tgt are both '{}': a translator needs two languages",
                 c.src_lang);
  SG_CHECK_USAGE(a.get("attention") != "dot", "--attention dot: the translator's dot-product attention is scaled_dot "
                 "(scaling by 1/sqrt(d) keeps the softmax from saturating); unscaled dot is only in `seqgrad "
                 "attention demo --kind dot`");
  if (a.has("attention")) c.model.attention = models::parse_attention_kind(a.get("attention"));
  if (a.has("max-tokens")) c.max_tokens = a.get_int("max-tokens");
  if (a.has("subset")) c.train_subset = a.get_int("subset");
  if (a.has("label-smoothing")) c.label_smoothing = a.get_double("label-smoothing");
  if (a.has("clip")) c.clip = a.get_double("clip");
  if (a.has("amp")) c.amp = a.get("amp");
  amp_precision(c.amp);
  if (a.has("seed")) {
    SG_CHECK_VALUE(a.get_int("seed") >= 0, "--seed must be >= 0, got {}", a.get_int("seed"));
    c.seed = static_cast<uint64_t>(a.get_int("seed"));
  }
  // absolute, so that eval and resume find the data from any folder
  c.data_dir = std::filesystem::absolute(c.data_dir).lexically_normal().string();
  SG_CHECK_USAGE(c.epochs >= 1, "--epochs must be >= 1, got {}", c.epochs);
  SG_CHECK_USAGE(c.batch_size >= 1, "--batch-size must be >= 1, got {}", c.batch_size);
  SG_CHECK_USAGE(c.lr > 0, "--lr must be positive, got {}", c.lr);
  SG_CHECK_USAGE(c.max_tokens >= 1, "--max-tokens must be >= 1, got {}", c.max_tokens);
  SG_CHECK_USAGE(c.train_subset >= 0, "--subset must be >= 0 (0 = every pair), got {}", c.train_subset);
  SG_CHECK_USAGE(c.label_smoothing >= 0 && c.label_smoothing < 1, "--label-smoothing must be in [0, 1), got {}",
                 c.label_smoothing);
  SG_CHECK_USAGE(c.clip > 0, "--clip must be positive, got {}", c.clip);
  SG_CHECK_VALUE(c.model.embed_size >= 1 && c.model.hidden_size >= 1 && c.model.num_layers >= 1,
                 "--embed {}, --hidden {} and --layers {} must be >= 1", c.model.embed_size,
                 c.model.hidden_size, c.model.num_layers);
  SG_CHECK_USAGE(c.model.dropout >= 0 && c.model.dropout < 1, "--dropout must be in [0, 1), got {}",
                 c.model.dropout);
  return c;
}

// A resumed run keeps its checkpoint's settings: a flag that asks for something else is an error
// rather than silently ignored (a different vocabulary or architecture cannot load the weights).
void check_resume_flags(const Args& a, const TrainConfig& saved, const std::string& path) {
  SG_CHECK_VALUE(!a.has("preset") || a.get("preset") == saved.preset,
                 "cannot resume: {} was trained with --preset {}, not {}; drop --preset or start a new run in "
                 "another --out folder", path, saved.preset, a.get("preset"));
  TrainConfig requested = apply_flags(saved, a);
  for (const ConfigFlag& f : kConfigFlags)
    SG_CHECK_VALUE(!a.has(f.name) || f.value(requested) == f.value(saved),
                   "cannot resume: {} was trained with --{} {}, not {}; a resumed run keeps its checkpoint's "
                   "settings (drop the flag, or start a new run in another --out folder)", path, f.name,
                   f.value(saved), f.value(requested));
}

std::string duration(double seconds) {
  int s = static_cast<int>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// Ctrl-C: finish the current step, save and exit. A second Ctrl-C quits at once.
void on_sigint(int) {
  interrupted = 1;
  static const char kMessage[] = "\ninterrupt: saving after this step (Ctrl-C again to quit without saving)\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  std::signal(SIGINT, SIG_DFL);
}

// Keeps the metrics of the first `epochs` epochs (a resumed run logs the later ones again).
void truncate_metrics(const std::string& path, int64_t epochs) {
  if (!std::filesystem::exists(path)) return;
  std::string kept;
  for (const std::string& line : text::read_lines(path)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("epoch", int64_t{0}) <= epochs) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

}  // namespace

int train_main(int argc, char** argv) {
  Args args = train_args();
  if (!args.parse(argc, argv)) return 0;
  // --device: a CUDA device must exist in this build and on this machine (a clear DeviceError
  // otherwise), checked before the data is read.
  const Device device = [&] {
    try {
      return parse_device(args.get("device"));
    } catch (const ValueError&) {
      throw UsageError(fmt::format("--device expects cpu, cuda or cuda:N, got '{}'", args.get("device")));
    }
  }();
  if (!device.is_cpu()) device_memory_for(device, "train --device");
  if (args.has("threads")) {
    set_num_threads(args.get_threads());
  }
  const int64_t beam = args.get_int("beam");
  SG_CHECK_USAGE(beam >= 1, "--beam must be >= 1, got {}", beam);
  const int64_t stop_after = args.has("stop-after-steps") ? args.get_int("stop-after-steps") : -1;
  const int64_t nan_at = args.has("nan-at-step") ? args.get_int("nan-at-step") : -1;
  std::string out_dir = args.get("out") == "runs/<preset>" ? "runs/" + args.get("preset") : args.get("out");
  std::string last_path = out_dir + "/last.safetensors", best_path = out_dir + "/best.safetensors";
  std::string nan_path = out_dir + "/nan.safetensors", metrics_path = out_dir + "/metrics.jsonl";

  // ---- data and model (a resumed run takes everything from its checkpoint)
  std::optional<models::LoadedCheckpoint> resumed;
  TrainConfig config;
  if (args.flag("resume")) {
    SG_CHECK_IO(std::filesystem::exists(last_path), "cannot resume: no checkpoint at {} (--out names the run folder)",
                last_path);
    resumed = models::read_checkpoint(last_path);
    check_resume_flags(args, resumed->info.config, last_path);
    // only --epochs and --data-dir can change here
    config = checking_flags([&] { return apply_flags(resumed->info.config, args); });
  } else {
    config = checking_flags([&] { return apply_flags(models::preset(args.get("preset")), args); });
  }
  manual_seed(config.seed);
  models::Corpora data = models::load_corpora(config);
  fmt::print("data: {} {}->{}: {} train, {} valid, {} test pairs\n{}\n", config.corpus, config.src_lang,
             config.tgt_lang, data.train.size(), data.valid.size(), data.test.size(), data.report);
  text::Vocab src_vocab = resumed ? resumed->info.src_vocab
                                  : text::Vocab::build(text::source_side(data.train), {.min_freq = config.min_freq});
  text::Vocab tgt_vocab = resumed ? resumed->info.tgt_vocab
                                  : text::Vocab::build(text::target_side(data.train), {.min_freq = config.min_freq});
  SG_CHECK_VALUE(src_vocab.size() > text::Vocab::kNumSpecial && tgt_vocab.size() > text::Vocab::kNumSpecial,
                 "no word of the {} training pairs occurs {} times or more, so the vocabularies hold only "
                 "the special tokens ({} and {}); train on more pairs (--subset)", data.train.size(), config.min_freq,
                 src_vocab.size(), tgt_vocab.size());
  config.model.src_vocab = src_vocab.size();
  config.model.tgt_vocab = tgt_vocab.size();
  text::EncodeOptions truncate{.max_src_tokens = config.max_tokens, .max_tgt_tokens = config.max_tokens};
  text::EncodedCorpus train = text::encode_pairs(data.train, src_vocab, tgt_vocab, truncate);
  text::EncodedCorpus valid = text::encode_pairs(data.valid, src_vocab, tgt_vocab, truncate);

  models::Seq2Seq model(config.model);
  models::init_xavier(model);  // on the CPU: the same weights on every device
  model.to(device);            // before the optimizer, whose state is created next to the parameters
  optim::Adam optimizer(model.parameters(), {.lr = config.lr});
  optim::StepLR scheduler(optimizer, {.step_size = config.step_size, .gamma = config.gamma});
  // --amp: the precision of the forward pass's GEMMs; fp16 scales the loss (bf16 has float32's range
  // and needs no scaling, as in PyTorch). A disabled scaler passes everything through.
  const GemmPrecision precision = amp_precision(config.amp);
  optim::GradScaler scaler({.init_scale = args.has("init-loss-scale") ? args.get_double("init-loss-scale") : 65536.0,
                            .enabled = precision == GemmPrecision::f16});
  // The resumable position: epoch and batch to start from, steps taken, the best validation BLEU, and
  // the current epoch's running loss, so that a resumed epoch reports the same loss.
  nlohmann::json state = {{"epoch", 0}, {"batch", 0}, {"step", 0}, {"best_bleu", -1.0},
                          {"epoch_loss_sum", 0.0}, {"epoch_tokens", 0}};
  if (resumed) {
    models::load_weights(model, *resumed, last_path);  // CPU tensors copied onto the model's device
    restore_training_state(*resumed, optimizer, scheduler);
    state = resumed->info.train_state;
    SG_CHECK_IO(state.contains("epoch") && state.contains("batch") && state.contains("step"),
                "cannot resume: {} holds no training position (epoch, batch, step)", last_path);
    if (scaler.is_enabled()) {
      SG_CHECK_IO(state.contains("grad_scaler"), "cannot resume: {} holds no GradScaler state (--amp fp16)",
                  last_path);
      scaler.load_state_dict(state["grad_scaler"].get<std::map<std::string, double>>());
    }
  }
  fmt::print("model: {} parameters, vocab {} -> {}, attention {}, device {}, amp {}\n", model.num_parameters(),
             src_vocab.size(), tgt_vocab.size(), models::attention_kind_name(config.model.attention), device,
             config.amp);

  auto save = [&](const std::string& path) {
    state["rng_offset"] = default_generator().offset();
    state["optimizer"] = optimizer.state_dict().metadata;
    state["scheduler"] = scheduler.state_dict();
    if (scaler.is_enabled()) state["grad_scaler"] = scaler.state_dict();
    models::save_checkpoint(path, model, {config, src_vocab, tgt_vocab, state}, training_state_tensors(optimizer, scheduler));
  };
  std::filesystem::create_directories(out_dir);
  if (resumed) {
    default_generator().set_offset(state.value("rng_offset", uint64_t{0}));
    truncate_metrics(metrics_path, state["epoch"].get<int64_t>());
    fmt::print("resuming {} after step {} (epoch {}, batch {})\n", last_path, state["step"].get<int64_t>(),
               state["epoch"].get<int64_t>() + 1, state["batch"].get<int64_t>());
  } else {
    if (std::filesystem::exists(last_path))
      fmt::print("note: starting a new run in {} (its checkpoints and metrics are replaced; --resume continues "
                 "one)\n", out_dir);
    std::filesystem::remove(metrics_path);
    std::filesystem::remove(nan_path);
  }
  interrupted = 0;
  std::signal(SIGINT, on_sigint);
  auto interrupt = [&] {
    save(last_path);
    std::signal(SIGINT, SIG_DFL);
    int64_t epoch = state["epoch"], batch = state["batch"], step = state["step"];
    std::string where = batch == 0 ? fmt::format("after epoch {} (step {})", epoch, step)
                                   : fmt::format("at epoch {}, batch {} (step {})", epoch + 1, batch, step);
    fmt::print(stderr, "\ninterrupted {}: saved {} (continue with --resume)\n", where, last_path);
    return 130;
  };

  // ---- the training loop
  nn::CrossEntropyOptions loss_options{.label_smoothing = config.label_smoothing, .ignore_index = text::Vocab::kPad};
  for (int64_t epoch = state["epoch"]; epoch < config.epochs; ++epoch) {
    model.train();
    std::vector<text::Batch> batches =
        text::make_batches(train.pairs, {.batch_size = config.batch_size, .seed = config.seed + uint64_t(epoch)});
    auto start = std::chrono::steady_clock::now();
    double loss_sum = state.value("epoch_loss_sum", 0.0);
    int64_t tokens = state.value("epoch_tokens", int64_t{0}), done = 0;
    int64_t skipped = state.value("epoch_skipped", int64_t{0});  // fp16 steps skipped on inf/NaN gradients
    // Stops the run on a non-finite loss or gradient norm, before the update: the state saved is
    // the one that produced it, and last.safetensors stays the last good checkpoint.
    uint64_t rng_before_step = default_generator().offset();
    auto stop_non_finite = [&](const char* what, double value, int64_t batch) {
      default_generator().set_offset(rng_before_step);  // so that resuming from it replays this step
      save(nan_path);
      std::string last = std::filesystem::exists(last_path)
                             ? fmt::format("; the last good checkpoint is {}", last_path) : "";
      throw ValueError(fmt::format("{} is {} at epoch {} batch {} (step {}); stopped before the update and saved "
                                   "the state that produced it to {}{}", what,
                                   std::isnan(value) ? std::fabs(value) : value,  // "nan", whatever its sign bit
                                   epoch + 1, batch + 1,
                                   state["step"].get<int64_t>() + 1, nan_path, last));
    };
    for (int64_t i = state["batch"]; i < static_cast<int64_t>(batches.size()); ++i) {
      rng_before_step = default_generator().offset();
      models::TensorBatch b = models::to_tensors(batches[i], device);
      Tensor loss;
      {
        Autocast autocast(precision, precision != GemmPrecision::full);
        Tensor logits = model(b.src, b.src_lengths, b.tgt_in);                                 // (B, T, V)
        loss = nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}), loss_options);
      }
      if (state["step"].get<int64_t>() + 1 == nan_at) loss = loss * std::numeric_limits<double>::quiet_NaN();
      double value = loss.item();
      if (!std::isfinite(value)) stop_non_finite("loss", value, i);
      optimizer.zero_grad();
      scaler.scale(loss).backward();  // backward uses the forward's GEMM precision
      scaler.unscale_(optimizer);     // true gradients from here on (a disabled scaler does nothing)
      double grad_norm = optim::clip_grad_norm_(model.parameters(), config.clip);
      if (scaler.is_enabled()) {
        // fp16: an inf/NaN gradient means the scale was too large; the scaler skips the step and
        // halves the scale (expected now and then, not an error)
        if (!scaler.step(optimizer)) ++skipped;
        scaler.update();
      } else {
        if (!std::isfinite(grad_norm)) stop_non_finite("gradient norm", grad_norm, i);
        optimizer.step();
      }
      loss_sum += value * b.target_tokens, tokens += b.target_tokens, ++done;
      state["step"] = state["step"].get<int64_t>() + 1;
      state["batch"] = i + 1;
      state["epoch_loss_sum"] = loss_sum;
      state["epoch_tokens"] = tokens;
      state["epoch_skipped"] = skipped;
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!args.flag("quiet") && (i % 10 == 0 || i + 1 == static_cast<int64_t>(batches.size())))
        fmt::print(stderr, "\repoch {}/{} batch {}/{} loss {:.3f} {:.0f} tok/s ETA {}   ", epoch + 1, config.epochs,
                   i + 1, batches.size(), loss_sum / tokens, tokens / elapsed,
                   duration(elapsed / done * (batches.size() - i - 1)));
      if (interrupted || state["step"].get<int64_t>() == stop_after) return interrupt();
    }
    scheduler.step();
    state["epoch"] = epoch + 1;
    state["batch"] = 0;
    state["epoch_loss_sum"] = 0.0;
    state["epoch_tokens"] = 0;
    state["epoch_skipped"] = 0;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Evaluation val = [&] {
      Autocast autocast(precision, precision != GemmPrecision::full);
      return evaluate(model, valid, tgt_vocab, data.valid, {.beam_size = 1});
    }();
    if (!args.flag("quiet")) fmt::print(stderr, "\n");
    std::string amp_note = scaler.is_enabled() ? fmt::format(", {} skipped steps (inf/NaN fp16 gradients), loss "
                                                             "scale {}", skipped, scaler.get_scale()) : "";
    fmt::print("epoch {}: train loss {:.3f}, valid loss {:.3f}, ppl {:.2f}, BLEU {:.2f}, {:.0f} s{}\n", epoch + 1,
               tokens ? loss_sum / tokens : 0.0, val.loss, std::exp(val.loss), val.bleu, seconds, amp_note);
    nlohmann::json metrics{{"epoch", epoch + 1}, {"step", state["step"]},
                           {"train_loss", tokens ? loss_sum / tokens : 0.0}, {"valid_loss", val.loss},
                           {"valid_ppl", std::exp(val.loss)}, {"valid_bleu", val.bleu},
                           {"seconds", seconds}, {"lr", optimizer.lr()}};
    if (scaler.is_enabled()) {
      metrics["skipped_steps"] = skipped;
      metrics["loss_scale"] = scaler.get_scale();
    }
    append_line(metrics_path, metrics.dump());
    if (val.bleu > state["best_bleu"].get<double>()) {
      state["best_bleu"] = val.bleu;
      save(best_path);
    }
    save(last_path);
    if (interrupted) return interrupt();  // Ctrl-C during the validation: stop at the epoch boundary
  }
  std::signal(SIGINT, SIG_DFL);

  // ---- test BLEU with the best checkpoint, a few translations and their heatmaps
  SG_CHECK_IO(std::filesystem::exists(best_path), "no best checkpoint at {}", best_path);
  models::LoadedCheckpoint best = models::read_checkpoint(best_path);
  models::load_weights(model, best, best_path);
  Autocast autocast(precision, precision != GemmPrecision::full);
  report_test(model, src_vocab, tgt_vocab, data, config, out_dir,
              {.max_len = 2 * config.max_tokens + 10, .beam_size = beam});
  return 0;
}

}  // namespace seqgrad::tools
