// The `seqgrad` command: one program, one subcommand per job.
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include <fmt/core.h>

#include "core/blas.h"
#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/kernels.h"
#include "tools/commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
  const char* help;
};

int info_main(int, char**) {
  fmt::print("seqgrad {}\nthreads: {}\nBLAS: {}\nCPU kernels: {}\n", SEQGRAD_VERSION, seqgrad::get_num_threads(),
             seqgrad::blas::describe(), seqgrad::cpu::kernel_isa());
  return 0;
}

const Command kCommands[] = {
    {"train", seqgrad::tools::train_main, "train the seq2seq-with-attention translator"},
    {"translate", seqgrad::tools::translate_main, "translate sentences with a trained checkpoint"},
    {"eval", seqgrad::tools::eval_main, "BLEU (sacreBLEU-compatible) and perplexity of a checkpoint"},
    {"attention", seqgrad::tools::attention_main, "attention heatmaps, energies and the toy demo"},
    {"compare", seqgrad::tools::compare_main, "additive vs scaled-dot vs hybrid attention: loss, BLEU, speed, sharpness"},
    {"gradcheck", gradcheck_main, "finite-difference gradient checks of every op (float64)"},
    {"bench", seqgrad::tools::bench_main, "timed workloads (training steps, kernels, decoding, memory); bench/run.sh vs PyTorch"},
    {"info", info_main, "version, threads and which BLAS kernels run"},
};

void print_usage() {
  fmt::print("usage: seqgrad <command> [options]   (seqgrad <command> --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) fmt::print("  {:<11} {}\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.main(argc - 1, argv + 1);
    } catch (const seqgrad::Error& e) {
      fmt::print(stderr, "seqgrad {}: error: {}\n", c.name, e.what());
      return 1;
    } catch (const std::filesystem::filesystem_error& e) {  // names the operation, the reason and the path(s)
      fmt::print(stderr, "seqgrad {}: error: {}\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      fmt::print(stderr, "seqgrad {}: internal error: {}\n", c.name, e.what());
      return 3;
    }
  }
  fmt::print(stderr, "seqgrad: unknown command '{}'\n\n", argv[1]);
  print_usage();
  return 2;
}
