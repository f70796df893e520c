// The batch-invariant float32 GEMM (ops/batch_invariant.h) behind CpuBackend::gemm while a
// BatchInvariantMode is on: one kernel for every shape, each element of C one fixed sequence of
// operations over its row of A and its column of B.
#pragma once
#include "core/tensor.h"

#ifndef SG_CPU_ISA
#define SG_CPU_ISA base
#endif

namespace seqgrad::cpu::SG_CPU_ISA {

// c (batch, m, n) = alpha · a (batch, m, k) · b (batch, k, n) + beta · c, float32, c's rows dense
// (CpuBackend::gemm's operands). Each element's sum is one order that depends on k alone (eight
// interleaved partial sums, then one tree: invariant_gemm.cpp), whatever m, the layout of a and b
// or the thread; terms of zero weight appended at the end (a padded, masked source) leave it as it
// was.
void invariant_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta);

}  // namespace seqgrad::cpu::SG_CPU_ISA
