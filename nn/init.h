// Parameter initialisation, as torch.nn.init: every function fills a tensor in place (under
// NoGradGuard, from the seeded default generator) and returns it.
#pragma once
#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace seqgrad::nn::init {

enum class Nonlinearity { linear, conv1d, conv2d, conv3d, sigmoid, tanh, relu, leaky_relu, selu };
enum class FanMode { fan_in, fan_out };

// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain):
//   linear, conv*, sigmoid: 1   tanh: 5/3   relu: √2   selu: 3/4
//   leaky_relu: √(2 / (1 + slope²)), slope = `param` (default 0.01)
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

// fan_in = size(1) · receptive field, fan_out = size(0) · receptive field, where the receptive
// field is the product of the dimensions after the first two (1 for a matrix). A Linear weight
// (out, in) has fan_in = in. Needs at least 2 dimensions.
struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

// U(low, high), N(mean, std²), a constant, zeros, ones.
Tensor uniform_(const Tensor& tensor, double low = 0.0, double high = 1.0);
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0);
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// Glorot: std = gain · √(2 / (fan_in + fan_out)); uniform on ±√3 · std, or normal with that std.
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0);
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0);

// He: std = gain / √fan with gain = calculate_gain(nonlinearity, a) and fan chosen by `mode`;
// uniform on ±√3 · std, or normal with that std. The defaults are PyTorch's.
struct KaimingOptions {
  double a = 0.0;  // negative slope of the leaky_relu that follows
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::leaky_relu;
};
Tensor kaiming_uniform_(const Tensor& tensor, KaimingOptions options = {});
Tensor kaiming_normal_(const Tensor& tensor, KaimingOptions options = {});

// A (semi-)orthogonal matrix times `gain`: the tensor is viewed as (size(0), numel / size(0));
// Q of the QR decomposition (Householder, float64) of a standard normal matrix of that shape,
// with columns multiplied by sign(diag(R)) so that Q is uniformly (Haar) distributed, as PyTorch
// does. Rows are orthonormal when rows <= cols, columns otherwise.
Tensor orthogonal_(const Tensor& tensor, double gain = 1.0);

// While alive on this thread, every fill above leaves its tensor as it is and only advances the
// default generator as its draws would (torch.nn.utils.skip_init): for a model whose values are
// all loaded next (a checkpoint), whose memory then stays untouched until they are (a weight an
// int8 module replaces never becomes resident). Guards nest.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  static bool active();

 private:
  bool previous_;
};

}  // namespace seqgrad::nn::init
