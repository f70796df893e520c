// LayerNorm: parameters and the forward through ops' layer_norm.
#include "nn/layer_norm.h"

#include <cmath>

#include "nn/init.h"

namespace seqgrad::nn {

LayerNorm::LayerNorm(Options options) : Module("LayerNorm"), options_(std::move(options)) {
  const Shape& shape = options_.normalized_shape;
  bool positive = shape.size() > 0;
  for (int64_t d : shape) positive = positive && d > 0;
  SG_CHECK_VALUE(positive, "layer_norm: normalized_shape = {} must be one or more positive sizes", shape);
  // eps = 0 divides a constant row's zero deviation by sqrt(0): NaN, found only when one arrives
  SG_CHECK_VALUE(options_.eps > 0 && std::isfinite(options_.eps), "layer_norm: eps = {} must be finite and > 0",
                 options_.eps);
  if (options_.elementwise_affine) {
    weight = empty(shape);
    bias = empty(shape);
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::operator()(const Tensor& x) const {
  SG_CHECK(x.defined(), "layer_norm: input is undefined");
  return layer_norm(x, options_.normalized_shape, weight, bias, options_.eps);
}

}  // namespace seqgrad::nn
