// The default generator; Philox and the samplers are inline in core/philox.h (shared with CUDA).
#include "core/rng.h"

namespace seqgrad {

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace seqgrad
