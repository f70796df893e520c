// Whether bf16 products pay on a device. Mixed precision is a speed option, so a training run asked
// for bf16 (models::training_precision) uses bf16 products only where they beat float32 GEMMs:
// on CUDA, and on CPUs where oneDNN runs them natively, as AMX tiles or AVX-512 BF16 dot products
// (twice float32's multiply-adds per instruction; the seed training step 1.49x faster on an AMD
// EPYC without AMX). The emulation never pays (rounding passes before a float32 GEMM). Autocast
// itself always does what it is told.
#pragma once
#include <string>

#include "core/device.h"

namespace seqgrad {

struct Bf16GemmInfo {
  std::string kernels;   // "onednn avx512_core_amx", "onednn avx512_core_bf16", "emulated ...", "cuda"
  bool preferred = true;  // a training run asked for bf16 uses them (else float32 products)
  std::string why;       // what decided it, for `seqgrad info` and `seqgrad train`
};

// The rule, on `device`. SEQGRAD_BF16_GEMM=native or emulate forces bf16 products on the CPU (the
// default, auto, lets the rule decide); another value is a ValueError.
Bf16GemmInfo bf16_gemm_info(Device device);

}  // namespace seqgrad
