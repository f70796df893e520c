// keep_mask and causal_lengths: lengths to the forms the library passes around (nn/mask.h).
#include "nn/mask.h"

#include <vector>

#include "ops/ops.h"

namespace seqgrad::nn {

namespace {

void check_lengths(const Tensor& lengths, int64_t positions, const char* op) {
  SG_CHECK(lengths.defined(), "{}: lengths are undefined", op);
  SG_CHECK_DTYPE(lengths.dtype() == DType::i64, "{}: lengths must be int64, got {} {}", op, lengths.dtype(),
                 lengths.shape());
  // A length outside [0, positions] is a caller's bug that would otherwise silently mean "no
  // padding" (too long) or "nothing real" (negative).
  const std::vector<int64_t> values = lengths.cpu().to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    SG_CHECK_VALUE(values[i] >= 0 && values[i] <= positions,
                   "{}: lengths[{}] = {} not in [0, {}] (lengths {} for {} positions)", op, i, values[i], positions,
                   lengths.shape(), positions);
}

}  // namespace

Tensor keep_mask(const Tensor& lengths, int64_t positions, const char* op) {
  check_lengths(lengths, positions, op);
  Tensor steps = arange(0, static_cast<double>(positions), 1, {.dtype = DType::i64, .device = lengths.device()});
  return lt(steps, lengths.unsqueeze(-1));  // (..., positions)
}

Tensor causal_lengths(const Tensor& lengths, int64_t steps, const char* op) {
  check_lengths(lengths, steps, op);
  SG_CHECK_SHAPE(lengths.ndim() == 1, "{}: lengths must be (B,), got {}", op, lengths.shape());
  Tensor t1 = arange(1, static_cast<double>(steps + 1), 1, {.dtype = DType::i64, .device = lengths.device()});  // (T,)
  return minimum(t1.unsqueeze(0), lengths.unsqueeze(1));  // (B, T)
}

}  // namespace seqgrad::nn
