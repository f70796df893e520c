// Dropout module over ops' dropout(), which draws its mask from the seeded default generator.
#include "nn/dropout.h"

namespace seqgrad::nn {

Dropout::Dropout(Options options) : Module("Dropout"), options_(options) {
  SG_CHECK_VALUE(options.p >= 0 && options.p < 1, "dropout: p = {} not in [0, 1)", options.p);
}

Tensor Dropout::operator()(const Tensor& x) const {
  SG_CHECK(x.defined(), "dropout: input is undefined");
  return dropout(x, options_.p, is_training());
}

}  // namespace seqgrad::nn
