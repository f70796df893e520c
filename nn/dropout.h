// Dropout: zeroes each element with probability p during training and scales the rest by
// 1 / (1 - p), as torch.nn.Dropout; the identity in eval().
#pragma once

#include "nn/module.h"

namespace seqgrad::nn {

class Dropout : public Module {
 public:
  struct Options {
    double p = 0.5;  // in [0, 1)
  };
  Dropout() : Dropout(Options{}) {}
  explicit Dropout(Options options);

  // x: any shape -> same shape
  Tensor operator()(const Tensor& x) const;
  const Options& options() const { return options_; }

 private:
  Options options_;
};

}  // namespace seqgrad::nn
