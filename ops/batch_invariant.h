// Batch-invariant float32 products for inference (the batch_invariant_ops idea, as a scope):
// while a BatchInvariantMode lives on a thread, every float32 matrix product that thread computes
// on the CPU (linear, matmul, bmm, the GRU's recurrent product) gives each row of its result the
// same bits whatever the other rows are: how many there are, which block a row falls in, which
// thread computes it. A product otherwise picks its kernel by its number of rows (ops/cpu/gemm.cpp:
// a matrix-vector product for one row, oneDNN for a few, OpenBLAS beyond), and each sums in its own
// order. The scope uses one kernel (ops/cpu/invariant_gemm.cpp) whose reduction order for an element
// depends only on the length of the sum: products over a source padded with zero weights (masked
// attention) also keep their bits. The searches (models/seq2seq/search_step.h) decode under it, so
// a sentence's translation and scores are the same to the last bit alone, in any `translate` batch
// and under any `serve` load (docs/deployment.md#batch-invariance). Training never enters it.
//
//   {
//     seqgrad::BatchInvariantMode invariant;
//     logits = model.step(state, y_prev);   // row r's logits: the same bits with any other rows
//   }
//
// SEQGRAD_DECODE_GEMM=blas makes the scope do nothing (the row-count-chosen kernels, for
// measuring what the invariance costs); another value than blas or invariant is a ValueError.
// Scopes nest; the state is per thread. float64 products, products under Autocast and CUDA's are
// not affected.
#pragma once

namespace seqgrad {

class BatchInvariantMode {
 public:
  explicit BatchInvariantMode(bool enabled = true);
  ~BatchInvariantMode();
  BatchInvariantMode(const BatchInvariantMode&) = delete;
  BatchInvariantMode& operator=(const BatchInvariantMode&) = delete;

  // Whether float32 products on this thread are batch-invariant now.
  static bool is_enabled();

 private:
  bool previous_;
};

}  // namespace seqgrad
