// LayerNorm: normalisation over the trailing dimensions, as torch.nn.LayerNorm (the op and its
// math: layer_norm in ops/ops.h).
#pragma once
#include "nn/module.h"

namespace seqgrad::nn {

class LayerNorm : public Module {
 public:
  struct Options {
    Shape normalized_shape = {};    // the last dimension(s) of the input, e.g. {E}
    double eps = 1e-5;              // added to the variance, > 0
    bool elementwise_affine = true; // weight (init 1) and bias (init 0) of normalized_shape
  };
  explicit LayerNorm(Options options);

  // x (..., normalized_shape) -> x's shape
  Tensor operator()(const Tensor& x) const;
  void reset_parameters();  // weight = 1, bias = 0
  const Options& options() const { return options_; }

  Tensor weight;  // normalized_shape; undefined without elementwise_affine
  Tensor bias;    // normalized_shape; undefined without elementwise_affine

 private:
  Options options_;
};

}  // namespace seqgrad::nn
