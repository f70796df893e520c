// Mixed precision (PyTorch's torch.autocast, for matrix products): inside an Autocast scope every
// float32 matrix product (matmul, bmm, linear, and so the attention projections and the RNNs'
// input projections) rounds its operands to bfloat16 or float16 and accumulates in float32; the
// RNNs' recurrent products stay float32 (ops.h, recurrent_product, says why: unlike PyTorch 1.13's
// CPU autocast, which rounds them); weights, activations, gradients and every other op stay float32, float64 is
// never affected (gradient checks). The backward of a
// product made under autocast uses the same precision, wherever backward() is called (as PyTorch,
// whose saved operands are already 16-bit). Scopes nest; the state is per thread.
//
//   {
//     seqgrad::Autocast amp(GemmPrecision::bf16);
//     loss = model(x, y);             // GEMMs in bf16, accumulation and outputs in float32
//   }
//   scaler.scale(loss).backward();    // optim/grad_scaler.h for float16
//
// What this is not (yet): tensors have no 16-bit dtype, so activations are stored in float32 and
// the memory saving of PyTorch's autocast is not had; only the GEMM arithmetic (and on CUDA, the
// tensor-core GEMM throughput) is. On the CPU the product is emulated exactly (rounded operands,
// a float32 GEMM), so the CPU remains the oracle of the CUDA result.
#pragma once
#include "core/backend_ops.h"

namespace seqgrad {

class Autocast {
 public:
  explicit Autocast(GemmPrecision precision, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

  // The precision float32 matrix products use on this thread now (full outside any scope).
  static GemmPrecision current();

 private:
  GemmPrecision previous_;
};

const char* gemm_precision_name(GemmPrecision precision);  // "float32", "bfloat16", "float16"

}  // namespace seqgrad
