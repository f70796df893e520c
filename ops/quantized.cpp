// Dynamic int8 quantization (ops/quantized.h): weight and activation quantizers, the int8 GEMM
// through the backend's primitive, quantized_linear and quantized_embedding (check -> compute ->
// record, with an inference-only backward).
#include "ops/quantized.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "ops/cpu/int8.h"
#include "ops/detail.h"

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

// Σ_k values[r, k] per row: (rows,) int32
Tensor sums_of_rows(const Tensor& values) {
  const int64_t rows = values.size(0), cols = values.size(1);
  Tensor sums = Tensor::empty({rows}, {.dtype = DType::i32});
  const int8_t* v = values.data<int8_t>();
  int32_t* s = sums.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int32_t total = 0;
    for (int64_t c = 0; c < cols; ++c) total += v[r * cols + c];
    s[r] = total;
  }
  return sums;
}

// The CPU backend, which runs int8 inference; another device's input is refused by name.
Backend& int8_backend(const char* op, const std::string& name, const Tensor& x) {
  Backend& backend = backend_for(x);
  SG_CHECK_DEVICE(backend.supports(FusedOp::int8_gemm), "{} ({}): op {} is not implemented on {} (x: {}); int8 "
                  "inference runs on the CPU", op, name, fused_op_name(FusedOp::int8_gemm), backend.name(), x.shape());
  return backend;
}

}  // namespace

const char* qscheme_name(QScheme scheme) {
  return scheme == QScheme::per_channel ? "per_channel" : "per_tensor";
}

Tensor QuantizedWeight::int8_values() const {
  if (values.defined()) return values;
  Tensor plain = Tensor::empty({rows, cols}, {.dtype = DType::i8});
  backend_for(Device::cpu()).int8_unpack(packed, plain);
  return plain;
}

int64_t QuantizedWeight::nbytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&values, &packed, &scales, &row_sums})
    if (t->defined()) total += t->numel() * static_cast<int64_t>(element_size(t->dtype()));
  return total;
}

QuantizedWeight quantize_weight(const Tensor& weight, QScheme scheme, const std::string& name, Int8Use use) {
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
  Tensor values = Tensor::empty({rows, cols}, {.dtype = DType::i8});
  int8_t* q = values.data<int8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const float inv_scale = 1.0f / scales[scheme == QScheme::per_channel ? r : 0];
    for (int64_t c = 0; c < cols; ++c) q[r * cols + c] = quantize_symmetric(w[r * cols + c], inv_scale);
  }
  return make_quantized_weight(values, from_vector(scales, {static_cast<int64_t>(scales.size())}), name, use);
}

QuantizedWeight make_quantized_weight(const Tensor& values, const Tensor& scales, const std::string& name,
                                      Int8Use use) {
  SG_CHECK(values.defined() && scales.defined(), "quantized weight ({}): values or scales are undefined", name);
  SG_CHECK_DTYPE(values.dtype() == DType::i8 && scales.dtype() == DType::f32,
                 "quantized weight ({}): expected int8 values and float32 scales, got {} {} and {} {}", name,
                 values.dtype(), values.shape(), scales.dtype(), scales.shape());
  SG_CHECK_SHAPE(values.ndim() == 2 && values.size(0) > 0 && values.size(1) > 0,
                 "quantized weight ({}): values must be 2-D (rows, cols) with positive sizes, got {}", name,
                 values.shape());
  const int64_t rows = values.size(0), cols = values.size(1);
  SG_CHECK_SHAPE(scales.ndim() == 1 && (scales.size(0) == rows || scales.size(0) == 1),
                 "quantized weight ({}): {} scales for {} rows, expected ({},) (per channel) or (1,) (per tensor)",
                 name, scales.shape(), rows, rows);
  QuantizedWeight q;
  q.rows = rows;
  q.cols = cols;
  q.scales = scales.to(Device::cpu()).contiguous();
  for (float s : q.scales.to_vector<float>())
    SG_CHECK_VALUE(std::isfinite(s) && s > 0, "quantized weight ({}): scale {} must be finite and positive", name, s);
  // a single row is per channel and per tensor at once; keep what the caller's count says
  q.scheme = scales.size(0) == 1 && rows != 1 ? QScheme::per_tensor : QScheme::per_channel;
  q.name = name;
  q.values = values.to(Device::cpu()).contiguous();
  q.row_sums = sums_of_rows(q.values);
  if (use == Int8Use::gemm) {
    q.packed = backend_for(Device::cpu()).int8_pack(q.values);
    if (q.packed.defined()) q.values = Tensor();  // held once: in the GEMM's own layout
  }
  return q;
}

Tensor dequantize(const QuantizedWeight& w) {
  const Tensor scales = w.scheme == QScheme::per_channel ? w.scales.reshape({w.rows, 1}) : w.scales;
  return w.int8_values().to(DType::f32) * scales;  // s · q, one float32 product per value
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

bool int8_needs_reduce_range() { return backend_for(Device::cpu()).int8_gemm_info().saturates; }

const char* int8_gemm_backend() { return backend_for(Device::cpu()).int8_gemm_info().kernels; }

void int8_gemm_reference(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c) {
  cpu::int8_reference_kernels().gemm(m, n, k, a, b, c);
}

Tensor int8_gemm(const Tensor& a, const QuantizedWeight& w) {
  SG_CHECK_DTYPE(a.dtype() == DType::u8 && a.ndim() == 2 && a.size(1) == w.cols && a.is_contiguous(),
                 "int8_gemm ({}): expected contiguous uint8 activations (m, {}), got {} {}", w.name, w.cols,
                 a.dtype(), a.shape());
  Backend& backend = int8_backend("int8_gemm", w.name, a);
  Tensor c = Tensor::empty({a.size(0), w.rows}, {.dtype = DType::i32});
  backend.int8_gemm(a, w.packed.defined() ? w.packed : w.values, c);
  return c;
}

// quantized_linear  y[m, n] = s_x[m] · s_w[n] · (Σ_k xq[m, k] Wq[n, k] - z_x[m] Σ_k Wq[n, k]) + b[n]
//   x: (..., cols) -> y: (..., rows), each row of x quantized with its own range (so a row's result
//   does not depend on the other rows). No gradient: backward throws, naming the module.
Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w, const Tensor& bias) {
  const char* op = "quantized_linear";
  detail::check_defined(op, x);
  SG_CHECK_DTYPE(x.dtype() == DType::f32, "{} ({}): expected a float32 input, got {} {}", op, w.name, x.dtype(),
                 x.shape());
  int8_backend(op, w.name, x);
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
    const bool reduce_range = int8_needs_reduce_range();
    Tensor xq = Tensor::empty({rows, cols}, {.dtype = DType::u8});  // (M, K) uint8 codes
    uint8_t* pq = xq.data<uint8_t>();
    std::vector<ActivationParams> p(static_cast<size_t>(rows));      // (M,) one per row
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = px + r * cols;
      // 1. this row's range -> its uint8 parameters
      float x_min = 0.0f, x_max = 0.0f;
      for (int64_t c = 0; c < cols; ++c) x_min = std::min(x_min, xr[c]), x_max = std::max(x_max, xr[c]);
      SG_CHECK_VALUE(std::isfinite(x_min) && std::isfinite(x_max), "{} ({}): input {} holds a non-finite value "
                     "(row {})", op, w.name, x.shape(), r);
      p[r] = choose_activation_params(x_min, x_max, reduce_range);
      // 2. xq = clamp(round(x / s_x) + z_x, 0, q_max)
      const float inv_scale = 1.0f / p[r].scale, z = static_cast<float>(p[r].zero_point);
      const float q_max = static_cast<float>(p[r].q_max);
      for (int64_t c = 0; c < cols; ++c)
        pq[r * cols + c] = static_cast<uint8_t>(std::clamp(std::nearbyint(xr[c] * inv_scale) + z, 0.0f, q_max));
    }
    // 3. the exact int32 product, 4. the float epilogue with each row's scale and zero point
    const Tensor acc = int8_gemm(xq, w);  // (M, N) int32
    const int32_t* pa = acc.data<int32_t>();
    const int32_t* sums = w.row_sums.data<int32_t>();
    float* py = y.data<float>();
    const Tensor bias_c = bias.defined() ? bias.detach().contiguous() : Tensor();
    const float* pb = bias_c.defined() ? bias_c.data<float>() : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < out; ++n) {
        const int32_t centred = pa[r * out + n] - p[r].zero_point * sums[n];
        py[r * out + n] = p[r].scale * w.scale(n) * static_cast<float>(centred) + (pb ? pb[n] : 0.0f);
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

// quantized_embedding  y[..., e] = s[id] · q[id, e]: int8 rows gathered, then scaled in float32
Tensor quantized_embedding(const Tensor& ids, const QuantizedWeight& w) {
  const char* op = "quantized_embedding";
  SG_CHECK(ids.defined(), "{} ({}): ids are undefined", op, w.name);
  SG_CHECK_DTYPE(ids.dtype() == DType::i64, "{} ({}): ids must be int64, got {} {}", op, w.name, ids.dtype(),
                 ids.shape());
  SG_CHECK(w.values.defined(), "{} ({}): the table is not held row by row (quantize it with Int8Use::rows)", op,
           w.name);
  SG_CHECK_DEVICE(ids.device() == Device::cpu(), "{} ({}): the int8 table is on the CPU, where int8 inference runs; "
                  "got ids {} on {}", op, w.name, ids.shape(), ids.device());
  NoGradGuard no_grad;  // a quantized table is not trained
  Tensor flat = ids.reshape({-1});                                       // (N,)
  Tensor rows = index_select(w.values, 0, flat).to(DType::f32);         // (N, E): q of each id
  Tensor scales = w.scheme == QScheme::per_channel ? index_select(w.scales, 0, flat).unsqueeze(1) : w.scales;
  Shape out_shape = ids.shape();
  out_shape.push_back(w.cols);
  return (rows * scales).view(out_shape);  // (ids..., E)
}

// As PyTorch's dynamic quantized GRU; quantized_linear's backward throws, naming the module.
Tensor gru_layer_quantized(const Tensor& xp, const Tensor& h0, const QuantizedWeight& w_hh, const Tensor& b_hh,
                           const Tensor& keep, Direction direction) {
  return gru_layer_steps(xp, h0, keep, direction, [&](const Tensor& xp_t, const Tensor& h) {
    return gru_gates(xp_t, quantized_linear(h, w_hh, b_hh), h);
  });
}

}  // namespace seqgrad
