// Linear layer: parameters, PyTorch's default init, and the forward through ops' linear().
#include "nn/linear.h"

#include <cmath>

#include "nn/init.h"

namespace seqgrad::nn {

Linear::Linear(Options options) : Module("Linear"), options_(options) {
  SG_CHECK_VALUE(options.in_features > 0, "linear: in_features = {} must be positive", options.in_features);
  SG_CHECK_VALUE(options.out_features > 0, "linear: out_features = {} must be positive", options.out_features);
  weight = empty({options.out_features, options.in_features});
  if (options.bias) bias = empty({options.out_features});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(options_.in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::operator()(const Tensor& x) const {
  SG_CHECK(x.defined(), "linear: input is undefined");
  SG_CHECK_SHAPE(x.ndim() >= 1 && x.size(-1) == options_.in_features,
                 "linear: input feature size {} != in_features {} (x: {})", x.ndim() >= 1 ? x.size(-1) : 0,
                 options_.in_features, x.shape());
  SG_CHECK_DTYPE(x.dtype() == weight.dtype(),
                 "linear: input dtype {} != parameter dtype {} (x: {}); convert the module with .to(DType::{})",
                 x.dtype(), weight.dtype(), x.shape(), x.dtype() == DType::f64 ? "f64" : "f32");
  return linear(x, weight, bias);
}

}  // namespace seqgrad::nn
