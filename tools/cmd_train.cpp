// `seqgrad train`: trains the seq2seq translator with models::Trainer (models/seq2seq/trainer.h,
// where the step and the epoch loop live), and adds what a command needs around it: the run folder
// (locked, protected, resumable), Ctrl-C, progress, metrics.jsonl, best/last checkpoints and the
// final test report.
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/device_memory.h"
#include "core/fileio.h"
#include "dist/communicator.h"
#include "models/seq2seq/trainer.h"
#include "ops/bf16_gemm.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/train_flags.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

using models::TrainConfig;
volatile std::sig_atomic_t interrupted = 0;

Args train_args() {
  Args a("train", "Train the seq2seq-with-attention translator (Bahdanau et al. 2015) on a bundled corpus (--corpus\n"
                  "multi30k or fra-eng) or on your own parallel text: --train SRC_FILE TGT_FILE --valid SRC_FILE\n"
                  "TGT_FILE [--test SRC_FILE TGT_FILE], UTF-8, one sentence per line, aligned by line (or one\n"
                  "tab-separated file per split, source<TAB>target: --train-tsv FILE ...). The training split is\n"
                  "streamed through a buffer of --shuffle-buffer pairs, so it may be larger than memory; every\n"
                  "file is checked before training starts (UTF-8, equal line counts, tabs, missing files).\n"
                  "The settings come from --preset or --config FILE, then the flags; --print-config shows them.\n"
                  "Validation reports sacreBLEU (13a, cased, detokenised: it picks best.safetensors), chrF and\n"
                  "the tokenised lower-cased BLEU tutorials report.\n"
                  "Ctrl-C saves <out>/last.safetensors and exits (130); --resume continues from it exactly.\n"
                  "A NaN or infinite loss or gradient norm stops the run, naming the step, and saves the state\n"
                  "before that step in <out>/nan.safetensors (last.safetensors stays the last good checkpoint);\n"
                  "A loss far above a uniform prediction's (4 x log of the target vocabulary size) stops it the\n"
                  "same way: training diverged. With --amp fp16 an inf/NaN gradient only skips the step and\n"
                  "halves the loss scale. A run folder that holds a run is refused unless --resume or --force;\n"
                  "it is locked while a run uses it.\n"
                  "Under `mpirun -np N` the N processes train one model data-parallel: each takes its share of\n"
                  "every batch (--batch-size stays the global size), gradients are averaged, rank 0 writes;\n"
                  "--resume works with any N. SEQGRAD_DIST_TIMEOUT (s, default 300) bounds a wait for a rank.");
  add_config_flags(a);
  add_data_options(a);
  add_decode_options(a);  // the closing test report decodes as `seqgrad eval` does
  a.option("out", "dir", "run folder for checkpoints, metrics and heatmaps", "runs/<preset>")
      .option("threads", "n", "threads (default: all cores)")
      .option("resume", "",
              "continue from <out>/last.safetensors with its settings: --epochs may extend\n"
              "                             the run, --data-dir, --beam, --threads, --device and --quiet may\n"
              "                             change, other flags must match the checkpoint's")
      .option("device", "name",
              "cpu | cuda | cuda:N: where the model, optimizer state, batches and\n"
              "                             decoding live (CUDA needs the CUDA backend built and a GPU)", "cpu")
      .option("force", "",
              "start a new run in an --out folder that holds one, deleting its\n"
              "                             checkpoints and metrics")
      .quiet_option();  // progress (a bar on a terminal, a line per 10% of an epoch in a log), the data and model lines
  // Test hooks (tests/test_tools_cli.py, tests/test_tools_train.py), left out of --help; they live
  // here, outside models::Trainer: --stop-after-steps in the after-step callback, --nan-at-step in
  // a Trainer subclass (NanAtStep below).
  a.hidden_option("stop-after-steps", "n", "behave exactly like Ctrl-C once the step counter reaches n")
      .hidden_option("nan-at-step", "n", "make the loss of step n (1-based) NaN, to test the non-finite stop")
      .hidden_option("init-loss-scale", "x", "--amp fp16's initial loss scale (default 65536); a huge one forces "
                     "skipped steps");
  return a;
}

// A resumed run keeps its checkpoint's settings: a flag that asks for something else is an error
// rather than silently ignored (a different vocabulary or architecture cannot load the weights).
void check_resume_flags(const Args& a, const TrainConfig& saved, const std::string& path) {
  SG_CHECK_USAGE(!a.has("config"), "cannot resume with --config: a resumed run keeps {}'s settings (--epochs may "
                 "extend it)", path);
  SG_CHECK_USAGE(!a.has("preset") || a.get("preset") == saved.preset,
                 "cannot resume: {} was trained with --preset {}, not {}; drop --preset or start a new run in "
                 "another --out folder", path, saved.preset, a.get("preset"));
  TrainConfig requested = apply_config_flags(saved, a);
  for (const GivenFlag& g : given_config_flags(a)) {
    if (g.field->resumable) continue;
    nlohmann::json was = g.field->get(saved), asked = g.field->get(requested);
    auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    SG_CHECK_USAGE(was == asked, "cannot resume: {} was trained with --{} {}, not {}; a resumed run keeps its "
                   "checkpoint's settings (drop the flag, or start a new run in another --out folder)", path,
                   g.flag, text(was), text(asked));
  }
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

// The run folder, held for the whole run: an advisory lock (flock on <out>/.lock, which holds the
// holder's pid) so that a second training on the same folder is refused instead of interleaving
// its metrics and checkpoints with the first's. The kernel drops the lock when the process ends,
// even on kill -9, so a stale .lock file never blocks a later run.
class RunFolder {
 public:
  explicit RunFolder(const std::string& dir) : dir_(dir) {
    std::filesystem::create_directories(dir);
    std::string path = dir + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SG_CHECK_IO(fd_ >= 0, "cannot open the run folder's lock file {}: {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      std::string holder = read_file(path);
      ::close(fd_);
      throw IOError(fmt::format("the run folder {} is in use by another training (pid {}); wait for it to end or "
                                "choose another --out", dir, holder.empty() ? "unknown" : holder));
    }
    std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
      fmt::print(stderr, "warning: cannot write the pid into {}: {}\n", path, std::strerror(errno));
  }
  ~RunFolder() { ::close(fd_); }
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  // Removes the temporary files (".<name>.tmp.<pid>.<n>", core/fileio.h) that a killed run left
  // behind; with the lock held, no live writer can own one.
  void remove_stale_temporaries() const {
    int removed = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && name.starts_with(".") && name.find(".tmp.") != std::string::npos)
        removed += std::filesystem::remove(entry.path()) ? 1 : 0;
    }
    if (removed) fmt::print("note: removed {} temporary file(s) left in {} by an interrupted run\n", removed, dir_);
  }

 private:
  std::string dir_;
  int fd_ = -1;
};

// Progress on stderr: on a terminal a bar redrawn in place every 10 steps; otherwise (a log file,
// a pipe) a plain line each time another 10% of the epoch is done. Both show the epoch's and the
// whole run's ETA.
class Progress {
 public:
  Progress(bool quiet, int64_t epochs, int64_t batches_per_epoch)
      : quiet_(quiet), terminal_(::isatty(STDERR_FILENO) == 1), epochs_(epochs), batches_(batches_per_epoch),
        run_start_(std::chrono::steady_clock::now()) {}

  void start_epoch(int64_t epoch) {
    epoch_ = epoch, done_ = 0, tokens_ = 0, epoch_start_ = std::chrono::steady_clock::now();
  }
  // After each step: `s` is the state after it, `tokens` the step's target tokens.
  void step(const models::TrainState& s, int64_t tokens) {
    ++done_, ++steps_, tokens_ += tokens;
    if (quiet_) return;
    const int64_t i = s.batch;  // batches done in this epoch
    bool show = terminal_ ? (i - 1) % 10 == 0 || i == batches_ : i * 10 / batches_ != (i - 1) * 10 / batches_;
    if (!show) return;
    double epoch_elapsed = seconds_since(epoch_start_), run_elapsed = seconds_since(run_start_);
    int64_t run_left = epochs_ * batches_ - (epoch_ * batches_ + i);
    std::string line = fmt::format("epoch {}/{} batch {}/{} loss {:.3f} {:.0f} tok/s ETA {} (run {})", epoch_ + 1,
                                   epochs_, i, batches_, s.epoch_loss(), static_cast<double>(tokens_) / epoch_elapsed,
                                   duration(epoch_elapsed / done_ * (batches_ - i)),
                                   duration(run_elapsed / steps_ * run_left));
    fmt::print(stderr, "{}{}", terminal_ ? "\r" : "", line + (terminal_ ? "   " : "\n"));
  }
  void message(const std::string& text) const {
    if (!quiet_) fmt::print(stderr, "{}{}\n", terminal_ ? "\r" : "", text);
  }
  // Ends the bar's line before something else is printed.
  void end_line() const {
    if (!quiet_ && terminal_) fmt::print(stderr, "\n");
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  bool quiet_, terminal_;
  int64_t epochs_, batches_, epoch_ = 0, done_ = 0, steps_ = 0, tokens_ = 0;  // done_, tokens_: this epoch
  std::chrono::steady_clock::time_point run_start_, epoch_start_;
};

// --nan-at-step n, a test hook (tests/test_tools_train.py): the loss of step n is multiplied by NaN
// so that the real non-finite stop runs. Only this subclass has it; the Trainer itself has no hook.
class NanAtStep : public models::Trainer {
 public:
  NanAtStep(int64_t step, TrainConfig config, text::Vocab src, text::Vocab tgt, models::TrainerOptions options)
      : Trainer(std::move(config), std::move(src), std::move(tgt), options), step_(step) {}
  Tensor loss(const models::TensorBatch& batch) override {
    Tensor loss = Trainer::loss(batch);
    return state().step + 1 == step_ ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
  }

 private:
  int64_t step_;
};

// A hidden test hook's value: absent, or an integer >= 1.
std::optional<int64_t> hook_step(const Args& a, const char* name) {
  if (!a.has(name)) return std::nullopt;
  SG_CHECK_VALUE(a.get_int(name) >= 1, "--{} must be >= 1, got {}", name, a.get_int(name));
  return a.get_int(name);
}

// A new run's folder: one that holds a run is refused unless --force deletes that run.
// The files of a run in `out_dir` ("last.safetensors, metrics.jsonl"), "" when it holds none; a new
// run there is refused unless --force.
std::string held_run(const std::string& out_dir, bool force) {
  std::string held;
  for (const char* name : {"last.safetensors", "best.safetensors", "metrics.jsonl"})
    if (std::filesystem::exists(out_dir + "/" + name)) held += held.empty() ? name : std::string(", ") + name;
  SG_CHECK_VALUE(force || held.empty(),
                 "the run folder {} already holds a run ({}); pass --resume to continue it, --force to delete it "
                 "and start over, or choose another --out", out_dir, held);
  return held;
}

// A new run's folder, once locked: --force deletes the run it held.
void clear_run_folder(const std::string& out_dir, bool force) {
  std::string held = held_run(out_dir, force);
  // nan.safetensors alone is what a run that diverged before its first epoch leaves: a new run
  // (with another --lr, say) replaces it without --force.
  for (const char* name : {"last.safetensors", "best.safetensors", "metrics.jsonl", "nan.safetensors"})
    std::filesystem::remove(out_dir + "/" + name);
  if (!held.empty()) fmt::print("note: --force: deleted the previous run's checkpoints and metrics in {}\n", out_dir);
}

// An early_stopping_metric as the epoch lines name it.
std::string metric_name(const std::string& metric) {
  return metric == "sacrebleu" ? "sacreBLEU" : metric == "chrf" ? "chrF" : "valid loss";
}

// Data-parallel: what the gradient averaging cost (docs/scaling.md uses these numbers).
void report_communication(const models::Trainer& trainer) {
  const nn::DistributedDataParallel* ddp = trainer.data_parallel();
  if (ddp == nullptr || ddp->stats().steps == 0) return;
  const nn::DistributedStats& s = ddp->stats();
  std::vector<double> bucket_mb;
  for (int64_t b : ddp->bucket_bytes()) bucket_mb.push_back(b / 1e6);
  fmt::print("data-parallel: {} steps, {:.2f} MB allreduced per step in buckets of {:.2f} MB, backward {:.1f} ms per "
             "step of which {:.1f} ms waiting for allreduces after it\n", s.steps, ddp->bytes_per_step() / 1e6,
             fmt::join(bucket_mb, ", "), 1e3 * s.backward_seconds / s.steps, 1e3 * s.exposed_wait_seconds / s.steps);
  std::fflush(stdout);
}

int train(int argc, char** argv) {
  Args args = train_args();
  if (!args.parse(argc, argv)) return 0;
  SG_CHECK_USAGE(args.positionals().empty(), "unexpected argument '{}'", args.positionals()[0]);
  // Under mpirun every rank runs this program; rank 0 alone prints, locks and writes the run folder.
  const std::shared_ptr<dist::Communicator> job = dist::world();
  const bool writer = job->rank() == 0;
  if (!writer) std::freopen("/dev/null", "w", stdout);
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
  apply_threads_flag(args);
  const std::optional<int64_t> stop_after = hook_step(args, "stop-after-steps");
  const std::optional<int64_t> nan_at = hook_step(args, "nan-at-step");
  SG_CHECK_USAGE(!(args.flag("resume") && args.flag("force")), "--resume and --force exclude each other (--resume "
                 "continues the run in --out, --force deletes it)");
  std::string out_dir = args.get("out") == "runs/<preset>" ? "runs/" + args.get("preset") : args.get("out");
  const std::string last_path = out_dir + "/last.safetensors", best_path = out_dir + "/best.safetensors";

  // ---- the config (a resumed run takes its settings from its checkpoint), the run folder, the data
  std::optional<models::LoadedCheckpoint> resumed;
  TrainConfig config;
  if (args.flag("resume")) {
    SG_CHECK_IO(std::filesystem::exists(last_path), "cannot resume: no checkpoint at {} (--out names the run folder)",
                last_path);
    resumed = models::read_checkpoint(last_path);
    check_resume_flags(args, resumed->info.config, last_path);
    config = apply_config_flags(resumed->info.config, args);  // only --epochs and --data-dir can change here
  } else {
    config = config_from_flags(args);
  }
  const models::DecodeOptions decoding = decode_options(args, config);  // the test report's, checked early
  if (args.flag("print-config")) {
    fmt::print("{}\n", config.to_json().dump(2));
    return 0;
  }
  if (writer && !resumed) held_run(out_dir, args.flag("force"));  // refused before the data loads
  std::optional<models::Vocabularies> vocabs;
  if (resumed) vocabs = models::Vocabularies{resumed->info.src_vocab, resumed->info.tgt_vocab};
  models::RunData data = models::load_run_data(config, std::move(vocabs));
  // the run folder, created once the inputs have loaded and held for the whole run
  std::optional<RunFolder> run_folder;
  if (writer) {
    run_folder.emplace(out_dir);  // refused here if another training holds it
    if (!resumed) clear_run_folder(out_dir, args.flag("force"));
    run_folder->remove_stale_temporaries();
  }
  const bool quiet = args.flag("quiet");  // the results only: the epoch lines and the test report
  if (!quiet)
    fmt::print("data: {} {}->{}: {} train, {} valid, {} test pairs\n{}\n", describe_corpus(config), config.src_lang,
               config.tgt_lang, data.corpora.train.pairs, data.corpora.valid.size(), data.corpora.test.size(),
               data.corpora.report);
  const text::Vocab &src_vocab = data.vocabs.src, &tgt_vocab = data.vocabs.tgt;

  // ---- the trainer: model, Adam, StepLR, GradScaler; a resumed run restores all of them
  // Several ranks: MPI moves CPU gradients, NCCL CUDA ones (one GPU per rank, e.g. through
  // CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK).
  models::TrainerOptions options{
      .device = device, .communicator = device.is_cuda() && job->world_size() > 1 ? dist::nccl_world(device) : job};
  if (args.has("init-loss-scale")) options.init_loss_scale = args.get_double("init-loss-scale");
  std::unique_ptr<models::Trainer> trainer =
      nan_at ? std::make_unique<NanAtStep>(*nan_at, config, src_vocab, tgt_vocab, options)
             : std::make_unique<models::Trainer>(config, src_vocab, tgt_vocab, options);
  if (resumed) trainer->restore(*resumed, last_path);
  resumed.reset();  // the checkpoint's tensors: restored
  const models::TrainState& state = trainer->state();
  if (!quiet) {
    const models::Seq2SeqConfig& m = config.model;
    const std::string architecture = m.architecture == models::Architecture::transformer
        ? fmt::format("transformer {} x {} layers, {} heads", m.hidden_size, m.num_layers, m.heads)
        : fmt::format("attention {}", models::attention_kind_name(m.attention));
    fmt::print("model: {} parameters, vocab {} -> {}, {}, device {}, amp {}\n", trainer->model().num_parameters(),
               src_vocab.size(), tgt_vocab.size(), architecture, device, models::amp_name(config.amp));
  }
  if (trainer->precision() != config.amp)  // bf16 where its products would be slower (models::training_precision)
    fmt::print("amp bf16: float32 GEMMs run instead: {} (SEQGRAD_BF16_GEMM=native forces bf16)\n",
               bf16_gemm_info(device).why);
  if (!quiet && job->world_size() > 1 && config.batch_tokens > 0)
    fmt::print("data-parallel: {} ranks ({}), each batch of up to {} tokens split between them by rows\n",
               job->world_size(), job->backend(), config.batch_tokens);
  else if (!quiet && job->world_size() > 1)
    fmt::print("data-parallel: {} ranks ({}), {} pairs per rank per batch of {}\n", job->world_size(), job->backend(),
               config.batch_size / job->world_size(), config.batch_size);
  if (state.step > 0)
    fmt::print("resuming {} after step {} (epoch {}, batch {})\n", last_path, state.step, state.epoch + 1,
               state.batch);
  SG_CHECK_USAGE(state.epoch <= config.epochs, "cannot resume: {} is past its last epoch: its state is at epoch {} "
                 "of {} (give --epochs N with N > {} to extend the run)", last_path, state.epoch, config.epochs,
                 state.epoch);
  if (state.early_stopping.should_stop())
    fmt::print("note: {} stopped early after step {} (epoch {}): {} validation(s) without a better {}; not training, "
               "reporting its test\n", last_path, state.step, state.epoch + (state.batch > 0 ? 1 : 0),
               state.early_stopping.validations_since_best(), metric_name(config.early_stopping_metric));
  else if (state.epoch == config.epochs && state.step > 0)
    fmt::print("note: {} has finished its {} epoch(s); reporting its test (give --epochs N to extend the run)\n",
               last_path, config.epochs);
  std::fflush(stdout);

  // ---- the run: models::fit, with Ctrl-C, progress and the epoch lines around it
  interrupted = 0;
  std::signal(SIGINT, on_sigint);
  Progress progress(args.flag("quiet") || !writer, config.epochs, data.train->batches_per_epoch());
  progress.start_epoch(state.epoch);
  auto stop_requested = [&] {
    const bool stop = interrupted || (stop_after && state.step == *stop_after);
    return job->world_size() > 1 ? job->any_rank(stop) : stop;  // every rank stops at the same step
  };
  models::RunCallbacks callbacks{
      .after_step = [&](const models::StepResult& step) {
        progress.step(state, step.tokens);
        return !stop_requested();
      },
      .before_validation = [&](int64_t epoch) {
        progress.end_line();
        progress.message(fmt::format("epoch {}/{}: validating on {} pairs...", epoch, config.epochs,
                                     data.valid.corpus.pairs.size()));
      },
      .after_epoch = [&](const models::EpochMetrics& m, const models::Evaluation&) {
        std::string amp_note = m.skipped_steps ? fmt::format(", {} skipped steps (inf/NaN fp16 gradients), loss "
                                                             "scale {}", *m.skipped_steps, *m.loss_scale) : "";
        std::string at = m.batch ? fmt::format(", batch {} (step {})", *m.batch, m.step) : "";
        fmt::print("epoch {}{}: train loss {:.3f}, valid loss {:.3f}, ppl {:.2f}, sacreBLEU {:.2f}, chrF {:.2f}, BLEU "
                   "{:.2f} (tokenised, lower-cased), {:.0f} s{}\n", m.epoch, at, m.train_loss, m.valid_loss,
                   std::exp(m.valid_loss), m.valid_sacrebleu, m.valid_chrf, m.valid_bleu_tokenized, m.seconds,
                   amp_note);
        std::fflush(stdout);  // a `tail -f` of a log sees each epoch as it ends
        if (m.best)
          progress.message(fmt::format("saved new best ({} {:.2f}): {}", metric_name(config.early_stopping_metric),
                                       m.score(config.early_stopping_metric), best_path));
        if (!m.batch) progress.start_epoch(state.epoch);  // a mid-epoch validation (--valid-every) goes on with it
        return !interrupted;  // Ctrl-C during the validation: stop at the epoch boundary
      }};
  models::RunResult run;
  try {
    run = models::fit(*trainer, *data.train, data.valid, {.out_dir = out_dir, .callbacks = callbacks});
  } catch (const models::DivergenceError& e) {
    progress.end_line();
    throw ValueError(e.what());
  }
  std::signal(SIGINT, SIG_DFL);
  if (!quiet) report_communication(*trainer);
  if (!run.completed) {
    progress.end_line();
    std::string where = state.batch == 0 ? fmt::format("after epoch {} (step {})", state.epoch, state.step)
                                         : fmt::format("at epoch {}, batch {} (step {})", state.epoch + 1, state.batch,
                                                       state.step);
    if (writer) fmt::print(stderr, "\ninterrupted {}: saved {} (continue with --resume)\n", where, last_path);
    return 130;
  }
  if (run.stopped_early && !run.epochs.empty())
    fmt::print("early stopping: {} validation(s) without a better {} (patience {}); stopped after step {}; the best "
               "{} is {:.2f} ({})\n", state.early_stopping.validations_since_best(),
               metric_name(config.early_stopping_metric), config.patience, state.step,
               metric_name(config.early_stopping_metric), state.early_stopping.best().value_or(0), best_path);
  if (!writer) return 0;

  // ---- test BLEU with the best checkpoint, a few translations and their heatmaps
  SG_CHECK_IO(std::filesystem::exists(best_path), "no best checkpoint at {}", best_path);
  models::LoadedCheckpoint best = models::read_checkpoint(best_path);
  models::load_weights(trainer->model(), best, best_path);
  if (data.corpora.test.empty()) {
    fmt::print("test: no test split (give one with --test SRC_FILE TGT_FILE); best checkpoint: {}\n", best_path);
    return 0;
  }
  Autocast autocast(trainer->precision(), trainer->precision() != GemmPrecision::full);
  models::TrainConfig as_eval = config;  // the sources cut where `seqgrad eval` cuts them
  as_eval.max_tokens = inference_truncation(config);
  models::Evaluation test = evaluate_test(trainer->model(), src_vocab, tgt_vocab, data.corpora, as_eval, decoding);
  report_test(test, data.corpora, decoding);
  fmt::print("heatmaps: {}\n", write_test_heatmaps(test, src_vocab, tgt_vocab, data.corpora, out_dir));
  return 0;
}

}  // namespace

int train_main(int argc, char** argv) {
  return dist::run_on_every_rank([&] { return train(argc, argv); });
}

}  // namespace seqgrad::tools
