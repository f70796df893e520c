// Linear: y = x · Wᵀ + b over the last dimension, as torch.nn.Linear.
#pragma once
#include <cstdint>

#include "nn/module.h"

namespace seqgrad::nn {

class Linear : public Module {
 public:
  struct Options {
    int64_t in_features = 0;
    int64_t out_features = 0;
    bool bias = true;
  };
  explicit Linear(Options options);

  // x: (..., in_features) -> (..., out_features)
  Tensor operator()(const Tensor& x) const;

  // PyTorch's default: weight ~ kaiming_uniform(a = √5), i.e. U(±1/√in_features), and
  // bias ~ U(±1/√in_features).
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features,); undefined when options.bias is false

 private:
  Options options_;
};

}  // namespace seqgrad::nn
