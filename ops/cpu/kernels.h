// The CPU backend: OpenBLAS GEMM and plain (vectorisable, OpenMP-threaded) loops.
// It is the reference implementation that other backends are tested against.
#pragma once
#include "core/backend.h"

namespace seqgrad::cpu {

Backend& backend();

}  // namespace seqgrad::cpu
