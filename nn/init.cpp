// torch.nn.init for seqgrad tensors. All fills run under NoGradGuard (they edit parameters) and
// draw from the seeded default generator, so a fixed seed gives a fixed model.
#include "nn/init.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/rng.h"
#include "ops/ops.h"

namespace seqgrad::nn::init {
namespace {

void check_fillable(const char* fn, const Tensor& t) {
  SG_CHECK(t.defined(), "{}: tensor is undefined", fn);
  SG_CHECK_DTYPE(is_floating(t.dtype()), "{}: expected a floating tensor, got {} {}", fn, t.dtype(), t.shape());
}

// Copies `values` (any device and dtype, same shape) into `tensor`'s storage.
void write(const Tensor& tensor, const Tensor& values) {
  backend_for(tensor).copy(values.to(tensor.dtype()).to(tensor.device()), tensor);
  tensor.bump_version();
}

thread_local bool skipping = false;

// Under SkipInitGuard: the generator advances by the `draws` the fill would make, nothing is written.
bool skipped(int64_t draws) {
  if (!skipping) return false;
  if (draws > 0) default_generator().reserve(static_cast<uint64_t>(draws));
  return true;
}

int64_t fan(const Tensor& tensor, FanMode mode) {
  Fans f = calculate_fan_in_and_fan_out(tensor);
  return mode == FanMode::fan_in ? f.fan_in : f.fan_out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu: return 3.0 / 4.0;
  }
  throw ValueError("calculate_gain: unknown nonlinearity");
}

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  SG_CHECK(tensor.defined(), "calculate_fan_in_and_fan_out: tensor is undefined");
  SG_CHECK_SHAPE(tensor.ndim() >= 2,
                 "calculate_fan_in_and_fan_out: fan in and fan out need at least 2 dimensions, got {}",
                 tensor.shape());
  int64_t receptive_field = 1;
  for (int d = 2; d < tensor.ndim(); ++d) receptive_field *= tensor.size(d);
  return {.fan_in = tensor.size(1) * receptive_field, .fan_out = tensor.size(0) * receptive_field};
}

Tensor uniform_(const Tensor& tensor, double low, double high) {
  check_fillable("uniform_", tensor);
  if (skipped(tensor.numel())) return tensor;
  NoGradGuard no_grad;
  Tensor t = tensor;
  t.uniform_(low, high);
  return t;
}

Tensor normal_(const Tensor& tensor, double mean, double std) {
  check_fillable("normal_", tensor);
  if (skipped(tensor.numel())) return tensor;
  NoGradGuard no_grad;
  Tensor t = tensor;
  t.normal_(mean, std);
  return t;
}

Tensor constant_(const Tensor& tensor, double value) {
  check_fillable("constant_", tensor);
  if (skipped(0)) return tensor;
  NoGradGuard no_grad;
  Tensor t = tensor;
  t.fill_(value);
  return t;
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor xavier_uniform_(const Tensor& tensor, double gain) {
  check_fillable("xavier_uniform_", tensor);
  Fans f = calculate_fan_in_and_fan_out(tensor);
  double std = gain * std::sqrt(2.0 / static_cast<double>(f.fan_in + f.fan_out));
  double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}

Tensor xavier_normal_(const Tensor& tensor, double gain) {
  check_fillable("xavier_normal_", tensor);
  Fans f = calculate_fan_in_and_fan_out(tensor);
  return normal_(tensor, 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.fan_in + f.fan_out)));
}

Tensor kaiming_uniform_(const Tensor& tensor, KaimingOptions options) {
  check_fillable("kaiming_uniform_", tensor);
  double std = calculate_gain(options.nonlinearity, options.a) / std::sqrt(static_cast<double>(fan(tensor, options.mode)));
  double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& tensor, KaimingOptions options) {
  check_fillable("kaiming_normal_", tensor);
  double std = calculate_gain(options.nonlinearity, options.a) / std::sqrt(static_cast<double>(fan(tensor, options.mode)));
  return normal_(tensor, 0.0, std);
}

// Householder QR of a (m, n) matrix with m >= n, returning the thin Q (m, n) with its columns
// multiplied by sign(diag(R)); that makes Q the unique factor with a positive-diagonal R, which
// is Haar-distributed when the input is standard normal (Mezzadri 2007, as torch.nn.init does).
Tensor orthogonal_(const Tensor& tensor, double gain) {
  check_fillable("orthogonal_", tensor);
  SG_CHECK_SHAPE(tensor.ndim() >= 2, "orthogonal_: only tensors with 2 or more dimensions are supported, got {}",
                 tensor.shape());
  const int64_t rows = tensor.size(0), cols = tensor.numel() / std::max<int64_t>(rows, 1);
  if (tensor.numel() == 0 || skipped(rows * cols)) return tensor;  // its draws: the normal matrix below
  NoGradGuard no_grad;
  Tensor normal = randn({rows, cols}, {.dtype = DType::f64});
  const bool transposed = rows < cols;
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  // a: (m, n) row-major copy of the (possibly transposed) normal matrix.
  std::vector<double> a = (transposed ? normal.t() : normal).contiguous().to_vector<double>();
  auto at = [&](int64_t i, int64_t j) -> double& { return a[i * n + j]; };
  std::vector<std::vector<double>> reflectors;  // v_k over rows k..m-1, with ‖v_k‖ = 1
  std::vector<double> r_diag(n);
  for (int64_t k = 0; k < n; ++k) {
    // H_k = I - 2 v vᵀ maps a[k:, k] to (alpha, 0, ..., 0), alpha = -sign(x0) ‖x‖ (no cancellation).
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += at(i, k) * at(i, k);
    norm = std::sqrt(norm);
    double alpha = at(k, k) > 0 ? -norm : norm;
    std::vector<double> v(m - k);
    for (int64_t i = k; i < m; ++i) v[i - k] = at(i, k);
    v[0] -= alpha;
    double vnorm = 0;
    for (double x : v) vnorm += x * x;
    vnorm = std::sqrt(vnorm);
    if (vnorm > 0)
      for (double& x : v) x /= vnorm;
    for (int64_t j = k; j < n; ++j) {  // a[k:, k:] -= 2 v (vᵀ a[k:, k:])
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[i - k] * at(i, j);
      for (int64_t i = k; i < m; ++i) at(i, j) -= 2 * v[i - k] * dot;
    }
    r_diag[k] = at(k, k);
    reflectors.push_back(std::move(v));
  }
  // Q = H_0 H_1 ... H_{n-1} [I_n; 0], applied right to left.
  std::vector<double> q(m * n, 0.0);
  for (int64_t j = 0; j < n; ++j) q[j * n + j] = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = reflectors[k];
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[i - k] * q[i * n + j];
      for (int64_t i = k; i < m; ++i) q[i * n + j] -= 2 * v[i - k] * dot;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    double sign = r_diag[j] < 0 ? -1.0 : (r_diag[j] > 0 ? 1.0 : 0.0);  // torch.sign: 0 stays 0
    for (int64_t i = 0; i < m; ++i) q[i * n + j] *= sign * gain;
  }
  Tensor qt = from_vector(q, {m, n}, {.dtype = DType::f64});
  if (transposed) qt = qt.t();
  write(tensor, qt.contiguous().view(tensor.shape()));
  return tensor;
}

SkipInitGuard::SkipInitGuard() : previous_(skipping) { skipping = true; }
SkipInitGuard::~SkipInitGuard() { skipping = previous_; }
bool SkipInitGuard::active() { return skipping; }

}  // namespace seqgrad::nn::init
