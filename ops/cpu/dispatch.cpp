// Picks the CPU kernels' build at start-up: the kernel files are compiled for x86-64-v2 (the project's
// baseline) and, on x86-64, again with AVX2 + FMA; the wider build runs where the CPU has them.
#include "ops/cpu/kernels.h"

#include <cstdlib>
#include <cstring>

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

}  // namespace

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
