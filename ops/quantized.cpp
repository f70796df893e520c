// Dynamic int8 quantization (ops/quantized.h): weight and activation quantizers, the int8 GEMM
// dispatch, and quantized_linear (check -> compute -> record, with an inference-only backward).
#include "ops/quantized.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "core/threads.h"
#include "ops/detail.h"
#ifdef SG_ONEDNN
#include "ops/cpu/onednn.h"
#endif

namespace seqgrad {
namespace {

// PyTorch's symmetric int8 observer: the range [-amax, amax] maps onto [-128, 127], whose
// half-width is (127 - (-128)) / 2 = 127.5; scales never go below float32's epsilon (an all-zero
// row), as torch.ao.quantization's observers clamp them.
constexpr float kSymmetricHalfRange = 127.5f;
constexpr float kMinScale = std::numeric_limits<float>::epsilon();

int8_t quantize_symmetric(float w, float inv_scale) {
  float q = std::nearbyint(w * inv_scale);  // round half to even, as torch's quantize_val
  return static_cast<int8_t>(std::clamp(q, -128.0f, 127.0f));
}

std::vector<int32_t> sums_of_rows(const std::vector<int8_t>& values, int64_t rows, int64_t cols) {
  std::vector<int32_t> sums(rows);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t s = 0;
    for (int64_t c = 0; c < cols; ++c) s += values[r * cols + c];
    sums[r] = s;
  }
  return sums;
}

[[maybe_unused]] bool force_reference_gemm() {  // used only with oneDNN
  static const bool forced = [] {
    const char* v = std::getenv("SEQGRAD_INT8_GEMM");
    return v != nullptr && std::strcmp(v, "reference") == 0;
  }();
  return forced;
}

// Products smaller than this many multiply-adds run on one thread.
constexpr int64_t kInt8SplitWork = int64_t{1} << 18;

}  // namespace

const char* qscheme_name(QScheme scheme) {
  return scheme == QScheme::per_channel ? "per_channel" : "per_tensor";
}

QuantizedWeight quantize_weight(const Tensor& weight, QScheme scheme, const std::string& name) {
  SG_CHECK(weight.defined(), "quantize_weight ({}): weight is undefined", name);
  SG_CHECK_SHAPE(weight.ndim() == 2, "quantize_weight ({}): expected a 2-D weight (rows, cols), got {}", name,
                 weight.shape());
  SG_CHECK_DTYPE(is_floating(weight.dtype()), "quantize_weight ({}): expected a floating weight, got {} {}", name,
                 weight.dtype(), weight.shape());
  const int64_t rows = weight.size(0), cols = weight.size(1);
  const std::vector<float> w = weight.detach().to(Device::cpu()).to_vector<float>();
  for (float v : w)
    SG_CHECK_VALUE(std::isfinite(v), "quantize_weight ({}): weight {} holds a non-finite value ({})", name,
                   weight.shape(), v);
  // amax per row (per channel) or over everything (per tensor)
  std::vector<float> amax(scheme == QScheme::per_channel ? rows : 1, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& m = amax[scheme == QScheme::per_channel ? r : 0];
      m = std::max(m, std::abs(w[r * cols + c]));
    }
  std::vector<float> scales(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) scales[i] = std::max(amax[i] / kSymmetricHalfRange, kMinScale);
  std::vector<int8_t> values(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float inv_scale = 1.0f / scales[scheme == QScheme::per_channel ? r : 0];
    for (int64_t c = 0; c < cols; ++c) values[r * cols + c] = quantize_symmetric(w[r * cols + c], inv_scale);
  }
  return make_quantized_weight(rows, cols, std::move(values), std::move(scales), name);
}

QuantizedWeight make_quantized_weight(int64_t rows, int64_t cols, std::vector<int8_t> values,
                                      std::vector<float> scales, const std::string& name) {
  SG_CHECK_SHAPE(rows > 0 && cols > 0, "quantized weight ({}): shape ({}, {}) must be positive", name, rows, cols);
  SG_CHECK_SHAPE(static_cast<int64_t>(values.size()) == rows * cols,
                 "quantized weight ({}): {} int8 values for shape ({}, {}), expected {}", name, values.size(), rows,
                 cols, rows * cols);
  SG_CHECK_SHAPE(static_cast<int64_t>(scales.size()) == rows || scales.size() == 1,
                 "quantized weight ({}): {} scales for {} rows, expected {} (per channel) or 1 (per tensor)", name,
                 scales.size(), rows, rows);
  for (float s : scales)
    SG_CHECK_VALUE(std::isfinite(s) && s > 0, "quantized weight ({}): scale {} must be finite and positive", name, s);
  QuantizedWeight q;
  q.rows = rows;
  q.cols = cols;
  // a single row is per channel and per tensor at once; keep what the caller's count says
  q.scheme = scales.size() == 1 && rows != 1 ? QScheme::per_tensor : QScheme::per_channel;
  q.row_sums = sums_of_rows(values, rows, cols);
  q.values = std::move(values);
  q.scales = std::move(scales);
  q.name = name;
#ifdef SG_ONEDNN
  if (!force_reference_gemm()) q.packed = onednn::pack_int8_weights(rows, cols, q.values.data());
#endif
  return q;
}

Tensor dequantize(const QuantizedWeight& w) {
  std::vector<float> out(w.values.size());
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) out[r * w.cols + c] = w.scale(r) * static_cast<float>(w.values[r * w.cols + c]);
  return from_vector(out, {w.rows, w.cols});
}

// PyTorch's ChooseQuantizationParams (aten/src/ATen/native/quantized/cpu/QuantUtils.h) for
// qmin = 0, qmax = 255 (127 with reduce_range), preserve_sparsity and power-of-two scales off.
ActivationParams choose_activation_params(float x_min, float x_max, bool reduce_range) {
  const int32_t q_min = 0, q_max = reduce_range ? 127 : 255;
  const double lo = std::min(x_min, 0.0f), hi = std::max(x_max, 0.0f);  // the range holds 0 exactly
  double scale = (hi - lo) / (q_max - q_min);
  if (static_cast<float>(scale) == 0.0f || std::isinf(1.0f / static_cast<float>(scale))) scale = 0.1;
  const float s = static_cast<float>(scale);
  // the zero point from whichever end loses less precision, then rounded into [q_min, q_max]
  const double from_min = q_min - lo / s, from_max = q_max - hi / s;
  const double error_min = std::abs(q_min) - std::abs(lo / s), error_max = std::abs(q_max) - std::abs(hi / s);
  const double initial = error_min < error_max ? from_min : from_max;
  const int32_t zero_point = static_cast<int32_t>(std::clamp<double>(std::nearbyint(initial), q_min, q_max));
  return {.scale = s, .zero_point = zero_point, .q_max = q_max};
}

bool int8_needs_reduce_range() {
#ifdef SG_ONEDNN
  return !force_reference_gemm() && !onednn::cpu_has_vnni();
#else
  return false;
#endif
}

const char* int8_gemm_backend() {
#ifdef SG_ONEDNN
  if (!force_reference_gemm()) return "onednn";
#endif
  return "reference";
}

void int8_gemm_reference(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c) {
  const int64_t grain = std::max<int64_t>(1, kInt8SplitWork / std::max<int64_t>(m * k, 1));
  parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {  // b's row j stays in cache for every row of a
      const int8_t* bj = b + j * k;
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t* ai = a + i * k;
        int32_t acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t kk = 0; kk < k; ++kk) acc += static_cast<int32_t>(ai[kk]) * static_cast<int32_t>(bj[kk]);
        c[i * n + j] = acc;
      }
    }
  });
}

void int8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0);
    return;
  }
#ifdef SG_ONEDNN
  if (!force_reference_gemm()) {
    onednn::int8_gemm(m, n, k, a, b, c);
    return;
  }
#endif
  int8_gemm_reference(m, n, k, a, b, c);
}

void int8_gemm(int64_t m, const uint8_t* a, const QuantizedWeight& w, int32_t* c) {
#ifdef SG_ONEDNN
  if (w.packed && m > 0 && !force_reference_gemm()) {
    onednn::int8_gemm_packed(m, w.rows, w.cols, a, w.packed.get(), c);
    return;
  }
#endif
  int8_gemm(m, w.rows, w.cols, a, w.values.data(), c);
}

// quantized_linear  y = s_x · s_w[n] · (Σ_k xq[m, k] Wq[n, k] - z_x Σ_k Wq[n, k]) + b[n]
//   x: (..., cols) -> y: (..., rows). No gradient: backward throws, naming the module.
Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w, const Tensor& bias) {
  const char* op = "quantized_linear";
  detail::check_defined(op, x);
  SG_CHECK_DTYPE(x.dtype() == DType::f32, "{} ({}): expected a float32 input, got {} {}", op, w.name, x.dtype(),
                 x.shape());
  SG_CHECK_DEVICE(x.device() == Device::cpu(), "{} ({}): int8 inference runs on the CPU, got x {} on {}", op, w.name,
                  x.shape(), x.device());
  SG_CHECK_SHAPE(x.ndim() >= 1 && x.size(-1) == w.cols, "{} ({}): input feature size {} != in_features {} (x: {})", op,
                 w.name, x.ndim() >= 1 ? x.size(-1) : 0, w.cols, x.shape());
  if (bias.defined()) {
    SG_CHECK_SHAPE(bias.ndim() == 1 && bias.size(0) == w.rows && bias.dtype() == DType::f32 &&
                       bias.device() == Device::cpu(),
                   "{} ({}): bias must be float32 ({},) on the CPU, got {} {} on {}", op, w.name, w.rows,
                   bias.dtype(), bias.shape(), bias.device());
  }
  const int64_t cols = w.cols, out = w.rows, rows = x.numel() / cols;
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out;
  Tensor y = Tensor::empty(out_shape, {.dtype = DType::f32});
  if (rows > 0) {
    const Tensor xc = x.detach().contiguous();
    const float* px = xc.data<float>();
    // 1. this call's activation range -> uint8 parameters
    float x_min = 0.0f, x_max = 0.0f;
    for (int64_t i = 0; i < rows * cols; ++i) x_min = std::min(x_min, px[i]), x_max = std::max(x_max, px[i]);
    SG_CHECK_VALUE(std::isfinite(x_min) && std::isfinite(x_max), "{} ({}): input {} holds a non-finite value", op,
                   w.name, x.shape());
    const ActivationParams p = choose_activation_params(x_min, x_max, int8_needs_reduce_range());
    // 2. xq = clamp(round(x / s_x) + z_x, 0, q_max)
    std::vector<uint8_t> xq(rows * cols);
    const float inv_scale = 1.0f / p.scale;
    for (int64_t i = 0; i < rows * cols; ++i) {
      float q = std::nearbyint(px[i] * inv_scale) + static_cast<float>(p.zero_point);
      xq[i] = static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(p.q_max)));
    }
    // 3. the exact int32 product, 4. the float epilogue
    std::vector<int32_t> acc(rows * out);
    int8_gemm(rows, xq.data(), w, acc.data());
    float* py = y.data<float>();
    const Tensor bias_c = bias.defined() ? bias.detach().contiguous() : Tensor();
    const float* pb = bias_c.defined() ? bias_c.data<float>() : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < out; ++n) {
        const int32_t centred = acc[r * out + n] - p.zero_point * w.row_sums[n];
        py[r * out + n] = p.scale * w.scale(n) * static_cast<float>(centred) + (pb ? pb[n] : 0.0f);
      }
  }
  const Tensor inputs[] = {x, bias};
  return record(op, y, std::span<const Tensor>(inputs, bias.defined() ? 2 : 1),
                [name = w.name](const Tensor&, Grads&) {
                  throw Error(fmt::format(
                      "quantized_linear ({}): backward is not supported: a dynamically quantized module is "
                      "inference-only; train the float32 model and quantize it afterwards",
                      name));
                });
}

// As PyTorch's dynamic quantized GRU; quantized_linear's backward throws, naming the module.
Tensor gru_layer_quantized(const Tensor& xp, const Tensor& h0, const QuantizedWeight& w_hh, const Tensor& b_hh,
                           const Tensor& valid, Direction direction) {
  return gru_layer_steps(xp, h0, valid, direction, [&](const Tensor& xp_t, const Tensor& h) {
    return gru_gates(xp_t, quantized_linear(h, w_hh, b_hh), h);
  });
}

}  // namespace seqgrad
