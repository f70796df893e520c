// The `seqgrad` command: one program, one subcommand per job.
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/blas.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/bf16_gemm.h"
#include "models/text/subword.h"
#include "ops/cpu/kernels.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
  const char* help;
};

int info_main(int argc, char** argv) {
  seqgrad::tools::Args args("info",
                            "Print the version, the number of threads and which BLAS, CPU, bf16 and int8 kernels run.");
  args.option("json", "", "the same as one JSON object");
  if (!args.parse(argc, argv)) return 0;
  const seqgrad::Bf16GemmInfo bf16 = seqgrad::bf16_gemm_info(seqgrad::Device::cpu());
  const seqgrad::Int8GemmInfo int8 = seqgrad::backend_for(seqgrad::Device::cpu()).int8_gemm_info();
  const std::string bf16_use = bf16.preferred ? "train --amp bf16 uses them" : "train --amp bf16 runs float32 GEMMs";
  const std::string int8_note = int8.saturates ? "7-bit activations (no VNNI)" : "8-bit activations";
  if (args.flag("json"))
    fmt::print("{}\n", nlohmann::json{{"version", SEQGRAD_VERSION},
                                      {"threads", seqgrad::get_num_threads()},
                                      {"blas", seqgrad::blas::describe()},
                                      {"cpu_kernels", seqgrad::cpu::kernel_isa()},
                                      {"bf16_gemm", {{"kernels", bf16.kernels}, {"used_by_amp", bf16.preferred},
                                                     {"why", bf16.why}}},
                                      {"int8_gemm", {{"kernels", int8.kernels}, {"saturates", int8.saturates}}},
                                      {"sentencepiece", {{"available", seqgrad::text::subword_supported()},
                                                         {"plugin", seqgrad::text::subword_plugin_description()}}}}
                            .dump());
  else
    fmt::print("seqgrad {}\nthreads: {}\nBLAS: {}\nCPU kernels: {}\nbf16 GEMM: {}; {}: {}\nint8 GEMM: {}, {}\n"
               "SentencePiece: {}\n",
               SEQGRAD_VERSION, seqgrad::get_num_threads(), seqgrad::blas::describe(), seqgrad::cpu::kernel_isa(),
               bf16.kernels, bf16_use, bf16.why, int8.kernels, int8_note, seqgrad::text::subword_plugin_description());
  return 0;
}

const Command kCommands[] = {
    {"train", seqgrad::tools::train_main, "train the seq2seq-with-attention translator"},
    {"translate", seqgrad::tools::translate_main, "translate sentences with a trained checkpoint"},
    {"eval", seqgrad::tools::eval_main, "BLEU (sacreBLEU-compatible) and perplexity of a checkpoint"},
    {"serve", seqgrad::tools::serve_main, "translations over HTTP (batched, OpenNMT-py compatible) and the attention explorer"},
    {"attention", seqgrad::tools::attention_main, "attention heatmaps, energies and the toy demo"},
    {"compare", seqgrad::tools::compare_main, "additive vs scaled-dot vs hybrid attention: loss, BLEU, speed, sharpness"},
    {"gradcheck", gradcheck_main, "finite-difference gradient checks of every op (float64; float32 and bf16 with --dtype)"},
    {"bench", seqgrad::tools::bench_main, "timed workloads (training steps, kernels, decoding, memory); bench/run.sh vs PyTorch"},
    {"export", seqgrad::tools::export_main, "export a checkpoint to ONNX (model, encoder, decoder step) for onnxruntime"},
    {"quantize", seqgrad::tools::quantize_main, "int8 dynamic quantization of a checkpoint (PyTorch's quantize_dynamic)"},
    {"average", seqgrad::tools::average_main, "average the weights of checkpoints (a run's last validations)"},
    {"inspect", seqgrad::tools::inspect_main, "what a checkpoint holds: preset, languages, vocabularies, epochs, metrics"},
    {"info", info_main, "version, threads and which BLAS, bf16 and int8 kernels run"},
};

// Exit statuses: 0 success, 1 a runtime error (a file, the data, the model), 2 a usage error (the
// command line), 3 an internal error (a bug in seqgrad).
constexpr int kRuntimeError = 1, kUsageError = 2, kInternalError = 3;

void print_usage(std::FILE* to) {
  fmt::print(to, "usage: seqgrad <command> [options]   (seqgrad help <command> for its options)\n"
                 "       seqgrad --version\n\ncommands:\n");
  for (const Command& c : kCommands) fmt::print(to, "  {:<11} {}\n", c.name, c.help);
}

int run(const Command& c, int argc, char** argv) {
  try {
    return c.main(argc, argv);
  } catch (const seqgrad::UsageError& e) {
    fmt::print(stderr, "seqgrad {}: error: {}\n(see seqgrad {} --help)\n", c.name, e.what(), c.name);
    return kUsageError;
  } catch (const seqgrad::Error& e) {
    fmt::print(stderr, "seqgrad {}: error: {}\n", c.name, e.what());
    return kRuntimeError;
  } catch (const std::filesystem::filesystem_error& e) {  // its message names the operation and the paths
    fmt::print(stderr, "seqgrad {}: error: {}\n", c.name, e.what());
    return kRuntimeError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "seqgrad {}: internal error: {}\n", c.name, e.what());
    return kInternalError;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return kUsageError;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(stdout);
    return 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    fmt::print("seqgrad {}\n", SEQGRAD_VERSION);
    return 0;
  }
  if (!std::strcmp(argv[1], "help")) {  // `seqgrad help CMD` is `seqgrad CMD --help`
    if (argc < 3) {
      print_usage(stdout);
      return 0;
    }
    static char help_flag[] = "--help";
    char* help_argv[] = {argv[2], help_flag, nullptr};
    for (const Command& c : kCommands)
      if (!std::strcmp(argv[2], c.name)) return run(c, 2, help_argv);
  }
  std::vector<std::string> names;
  for (const Command& c : kCommands) {
    if (!std::strcmp(argv[1], c.name)) return run(c, argc - 1, argv + 1);
    names.emplace_back(c.name);
  }
  const char* unknown = !std::strcmp(argv[1], "help") ? argv[2] : argv[1];
  fmt::print(stderr, "seqgrad: unknown command '{}'{}\n\n", unknown, seqgrad::did_you_mean(unknown, names));
  print_usage(stderr);
  return kUsageError;
}
