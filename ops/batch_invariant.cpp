// The batch-invariant scope's per-thread state (ops/batch_invariant.h); the CPU backend's GEMM
// reads it (ops/cpu/gemm.cpp).
#include "ops/batch_invariant.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace seqgrad {
namespace {

thread_local bool enabled_here = false;

// SEQGRAD_DECODE_GEMM: "invariant" (the default) or "blas" (the scope does nothing).
bool scopes_switched_off() {
  static const bool off = [] {
    const char* choice = std::getenv("SEQGRAD_DECODE_GEMM");
    if (choice == nullptr || std::strcmp(choice, "invariant") == 0) return false;
    SG_CHECK_VALUE(std::strcmp(choice, "blas") == 0,
                   "SEQGRAD_DECODE_GEMM={}: expected invariant (the default) or blas", choice);
    return true;
  }();
  return off;
}

}  // namespace

BatchInvariantMode::BatchInvariantMode(bool enabled) : previous_(enabled_here) {
  enabled_here = enabled && !scopes_switched_off();
}

BatchInvariantMode::~BatchInvariantMode() { enabled_here = previous_; }

bool BatchInvariantMode::is_enabled() { return enabled_here; }

}  // namespace seqgrad
