// Picks the CPU kernels at start-up: the kernel files are compiled for x86-64-v2 (the project's
// baseline) and, on x86-64, again with AVX2 + FMA; the wider build runs where the CPU has them.
// The int8 GEMM is oneDNN's where the build has it, else the reference loops (ops/cpu/int8.h).
#include "ops/cpu/kernels.h"

#include <cstdlib>
#include <cstring>

#include "ops/cpu/int8.h"

namespace seqgrad::cpu {
namespace {

// SEQGRAD_CPU_KERNELS=x86-64-v2 forces the baseline build (to test it on an AVX2 machine).
bool has_avx2_fma() {
#if defined(SG_HAVE_AVX2_KERNELS) && (defined(__x86_64__) || defined(__i386__))
  const char* forced = std::getenv("SEQGRAD_CPU_KERNELS");
  if (forced != nullptr && std::strcmp(forced, "x86-64-v2") == 0) return false;
  __builtin_cpu_init();  // may run before the runtime's own initialisation (a static initialiser)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// SEQGRAD_INT8_GEMM=reference forces the reference int8 loops (to test them in a oneDNN build).
[[maybe_unused]] bool int8_reference_forced() {
  const char* forced = std::getenv("SEQGRAD_INT8_GEMM");
  return forced != nullptr && std::strcmp(forced, "reference") == 0;
}

}  // namespace

const Int8Kernels& int8_kernels() {
#if defined(SG_ONEDNN)
  static const Int8Kernels& chosen = int8_reference_forced() ? int8_reference_kernels() : int8_onednn_kernels();
  return chosen;
#else
  return int8_reference_kernels();
#endif
}

Backend& backend() {
#if defined(SG_HAVE_AVX2_KERNELS)
  static Backend& chosen = has_avx2_fma() ? avx2::backend() : base::backend();
  return chosen;
#else
  return base::backend();
#endif
}

const char* kernel_isa() {
#if defined(__x86_64__) || defined(__i386__)
  return has_avx2_fma() ? "avx2+fma" : "x86-64-v2";
#else
  return "generic";
#endif
}

}  // namespace seqgrad::cpu
