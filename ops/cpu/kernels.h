// The CPU backend: OpenBLAS GEMM and plain vectorisable loops, threaded by core/threads.h.
// It is the reference implementation that other backends are tested against.
#pragma once
#include "core/backend.h"

namespace seqgrad::cpu {

// The CPU backend for this machine: the kernels (ops/cpu/*.cpp) built for AVX2 + FMA when the CPU has them, else
// for x86-64-v2 (ops/cpu/dispatch.cpp; SEQGRAD_CPU_KERNELS=x86-64-v2 forces the latter).
Backend& backend();
// Which build that is: "avx2+fma" or "x86-64-v2" (or "generic" off x86).
const char* kernel_isa();

namespace base {
Backend& backend();
}
namespace avx2 {
Backend& backend();
}

}  // namespace seqgrad::cpu
