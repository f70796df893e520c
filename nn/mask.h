// Which positions of a padded batch are real, in the one form the library passes around: a keep
// mask, bool, true = real (a step of a sequence for the recurrent layers, a key to attend for the
// attention family). Lengths, the input format of a padded batch, become a keep mask once per
// batch with keep_mask, the one place where their values cross to the host (for the range check).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace seqgrad::nn {

// lengths: int64 of any shape (...), each in [0, positions] -> keep (..., positions) bool,
//   keep[..., j] = j < length.
// `op` names the caller in error messages.
Tensor keep_mask(const Tensor& lengths, int64_t positions, const char* op);

// Causal self-attention over `steps` positions as per-query valid lengths, the attention family's
// (B, Q) form: query t attends to the keys j <= t that are real,
//   lengths int64 (B,), each in [0, steps] -> (B, steps) int64, [b, t] = min(t + 1, lengths[b]).
// Without padding, pass lengths = full({B}, steps).
Tensor causal_lengths(const Tensor& lengths, int64_t steps, const char* op = "causal_lengths");

}  // namespace seqgrad::nn
