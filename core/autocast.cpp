// The per-thread autocast state (core/autocast.h).
#include "core/autocast.h"

namespace seqgrad {
namespace {
thread_local GemmPrecision current_precision = GemmPrecision::full;
}  // namespace

Autocast::Autocast(GemmPrecision precision, bool enabled) : previous_(current_precision) {
  if (enabled) current_precision = precision;
}

Autocast::~Autocast() { current_precision = previous_; }

GemmPrecision Autocast::current() { return current_precision; }

const char* gemm_precision_name(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::bf16: return "bfloat16";
    case GemmPrecision::f16: return "float16";
    default: return "float32";
  }
}

}  // namespace seqgrad
