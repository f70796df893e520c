// keep_mask: lengths to the keep mask (nn/mask.h).
#include "nn/mask.h"

#include <vector>

#include "ops/ops.h"

namespace seqgrad::nn {

Tensor keep_mask(const Tensor& lengths, int64_t positions, const char* op) {
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
  Tensor steps = arange(0, static_cast<double>(positions), 1, {.dtype = DType::i64, .device = lengths.device()});
  return lt(steps, lengths.unsqueeze(-1));  // (..., positions)
}

}  // namespace seqgrad::nn
