// Mixed precision on the CPU: the 16-bit rounding shared with CUDA (core/half.h), and matrix
// products under Autocast, which must equal float32 products of the rounded operands (exact
// products, float32 accumulation) in forward and backward.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/half.h"
#include "core/rng.h"
#include "ops/ops.h"

using namespace seqgrad;

namespace {

// Reference: y[i][j] = Σ_k round(a[i][k]) · round(b[k][j]), in double (the float32 GEMM of the
// rounded operands agrees to float32 rounding of the accumulation).
std::vector<double> rounded_product(const Tensor& a, const Tensor& b, float (*round)(float)) {
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        y[i * n + j] += static_cast<double>(round(av[i * k + p])) * static_cast<double>(round(bv[p * n + j]));
  return y;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) <= rtol * (1.0 + std::abs(want[i])));
  }
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i]))));
  return worst;
}

}  // namespace

TEST_CASE("half: bfloat16 and float16 patterns round to nearest, ties to even") {
  using namespace seqgrad::half;
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(-2.0f) == 0xC000);
  CHECK(round_bf16(1.0f + 0x1p-8f) == 1.0f);                    // tie: to the even pattern (1.0)
  CHECK(round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);      // tie: to the even pattern (up)
  CHECK(round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);  // above the tie: up
  CHECK(std::isinf(round_bf16(std::numeric_limits<float>::max())));  // overflow rounds to inf
  CHECK(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));

  CHECK(f16_from_float(1.0f) == 0x3C00);
  CHECK(f16_from_float(65504.0f) == 0x7BFF);  // the largest float16
  CHECK(f16_from_float(-2.0f) == 0xC000);
  CHECK(f16_from_float(0x1p-24f) == 0x0001);  // the smallest subnormal
  CHECK(f16_from_float(0x1p-14f) == 0x0400);  // the smallest normal
  CHECK(round_f16(65519.0f) == 65504.0f);
  CHECK(std::isinf(round_f16(65520.0f)));  // the tie above 65504 rounds to inf
  CHECK(round_f16(0x1p-25f) == 0.0f);      // half the smallest subnormal: tie to even (0)
  CHECK(round_f16(3 * 0x1p-25f) == 0x1p-23f);
  CHECK(round_f16(1.0f + 0x1p-11f) == 1.0f);  // tie at 11 bits: to even
  CHECK(round_f16(-1e-9f) == 0.0f);
  CHECK(std::signbit(round_f16(-1e-9f)));  // -0
  CHECK(std::isnan(round_f16(std::numeric_limits<float>::quiet_NaN())));
  for (uint32_t h = 0; h < 0x7C00; h += 37) {  // every finite pattern round-trips
    CAPTURE(h);
    CHECK(f16_from_float(f16_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("autocast: scopes nest, restore, and can be disabled") {
  CHECK(Autocast::current() == GemmPrecision::full);
  {
    Autocast outer(GemmPrecision::bf16);
    CHECK(Autocast::current() == GemmPrecision::bf16);
    {
      Autocast inner(GemmPrecision::f16);
      CHECK(Autocast::current() == GemmPrecision::f16);
      Autocast off(GemmPrecision::full);
      CHECK(Autocast::current() == GemmPrecision::full);
    }
    CHECK(Autocast::current() == GemmPrecision::bf16);
    Autocast disabled(GemmPrecision::f16, /*enabled=*/false);
    CHECK(Autocast::current() == GemmPrecision::bf16);
  }
  CHECK(Autocast::current() == GemmPrecision::full);
  CHECK(std::string(gemm_precision_name(GemmPrecision::bf16)) == "bfloat16");
}

TEST_CASE("autocast: float32 matmul rounds its operands to 16 bits and accumulates in float32") {
  manual_seed(11);
  Tensor a = randn({5, 64}), b = randn({64, 7});
  std::vector<float> full_precision = matmul(a, b).to_vector<float>();
  for (auto [precision, round] : {std::pair{GemmPrecision::bf16, &half::round_bf16},
                                  std::pair{GemmPrecision::f16, &half::round_f16}}) {
    CAPTURE(gemm_precision_name(precision));
    Autocast amp(precision);
    std::vector<float> y = matmul(a, b).to_vector<float>();
    check_close(y, rounded_product(a, b, round), 1e-5);
    // the rounding is visible: bfloat16 keeps 8 significant bits, float16 11
    double difference = max_relative_difference(y, full_precision);
    CHECK(difference > (precision == GemmPrecision::bf16 ? 1e-4 : 1e-5));
    // transposed and batched operands take the same path (strides are read, as in full precision)
    Tensor bt = b.t().contiguous().t();
    check_close(matmul(a, bt).to_vector<float>(), rounded_product(a, b, round), 1e-5);
    Tensor batched = matmul(a.unsqueeze(0).expand({3, 5, 64}), b);
    for (int i = 0; i < 3; ++i) check_close(batched.select(0, i).to_vector<float>(), rounded_product(a, b, round), 1e-5);
  }
}

TEST_CASE("autocast: float64 products and everything outside a scope keep full precision") {
  manual_seed(12);
  Tensor a = randn({4, 16}, {.dtype = DType::f64}), b = randn({16, 3}, {.dtype = DType::f64});
  std::vector<double> reference = matmul(a, b).to_vector<double>();
  {
    Autocast amp(GemmPrecision::bf16);
    CHECK(matmul(a, b).to_vector<double>() == reference);
  }
  Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
  std::vector<float> before = matmul(a32, b32).to_vector<float>();
  { Autocast amp(GemmPrecision::bf16); }
  CHECK(matmul(a32, b32).to_vector<float>() == before);
}

TEST_CASE("autocast: backward runs at the forward's precision, wherever backward() is called") {
  manual_seed(13);
  Tensor a = randn({3, 32}).requires_grad_(), b = randn({32, 4}).requires_grad_();
  Tensor dy = randn({3, 4});
  Tensor y;
  {
    Autocast amp(GemmPrecision::bf16);
    y = matmul(a, b);
  }
  y.backward(dy);  // outside the scope
  // da = dy · bᵀ and db = aᵀ · dy, both with operands rounded to bfloat16
  check_close(a.grad().to_vector<float>(), rounded_product(dy, b.t().contiguous(), &half::round_bf16), 1e-5);
  check_close(b.grad().to_vector<float>(), rounded_product(a.t().contiguous(), dy, &half::round_bf16), 1e-5);
  // and a product recorded outside autocast stays full precision in a backward run inside one
  Tensor c = randn({3, 32}).requires_grad_();
  Tensor z = matmul(c, b.detach());
  std::vector<float> full_grad;
  {
    Tensor c2 = c.detach().requires_grad_();
    matmul(c2, b.detach()).backward(dy);
    full_grad = c2.grad().to_vector<float>();
  }
  {
    Autocast amp(GemmPrecision::bf16);
    z.backward(dy);
  }
  CHECK(c.grad().to_vector<float>() == full_grad);
}

TEST_CASE("autocast: linear goes through matmul, so it follows the scope") {
  manual_seed(14);
  Tensor x = randn({2, 40}), w = randn({6, 40}), bias = zeros({6});
  Autocast amp(GemmPrecision::f16);
  check_close(linear(x, w, bias).to_vector<float>(), rounded_product(x, w.t().contiguous(), &half::round_f16), 1e-5);
}

// seqgrad keeps the recurrent products in float32 (ops.h, recurrent_product, says why; PyTorch 1.13's
// CPU autocast does not), forward and backward, in the fused layer and in the composed step alike.
TEST_CASE("autocast: the GRU's recurrent products stay float32, forward and backward") {
  manual_seed(15);
  const int64_t T = 5, B = 3, H = 8;
  Tensor xp = randn({T, B, 3 * H}), h0 = randn({B, H}), w_hh = randn({3 * H, H}) * 0.3, b_hh = randn({3 * H});
  Tensor valid = from_vector(std::vector<bool>{1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0}, {T, B}, {.dtype = DType::b8});
  Tensor dy = randn({T, B, H});
  // outputs and the gradients of xp, h0, w_hh, b_hh, from fresh leaves, inside a scope or not
  auto run = [&](GemmPrecision precision, bool fused) {
    std::vector<Tensor> in = {xp.detach().requires_grad_(), h0.detach().requires_grad_(),
                              w_hh.detach().requires_grad_(), b_hh.detach().requires_grad_()};
    Tensor y;
    {
      Autocast amp(precision);
      y = fused ? gru_layer(in[0], in[1], in[2], in[3], valid, Direction::forward)
                : gru_layer_composed(in[0], in[1], in[2], in[3], valid, Direction::forward);
      y.backward(dy);
    }
    std::vector<std::vector<float>> out = {y.to_vector<float>()};
    for (const Tensor& t : in) out.push_back(t.grad().to_vector<float>());
    return out;
  };
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    CHECK(run(GemmPrecision::bf16, fused) == run(GemmPrecision::full, fused));
    CHECK(run(GemmPrecision::f16, fused) == run(GemmPrecision::full, fused));
  }
  // recurrent_product itself ignores the scope, while matmul follows it
  Tensor h = randn({B, H}), w_t = randn({H, 3 * H});
  std::vector<float> full = matmul(h, w_t).to_vector<float>();
  Autocast amp(GemmPrecision::bf16);
  CHECK(recurrent_product(h, w_t).to_vector<float>() == full);
  CHECK(matmul(h, w_t).to_vector<float>() != full);
}

// What rounding the recurrent product to bf16 (PyTorch 1.13's CPU autocast: its nn.GRUCell equals,
// bit for bit, a step that rounds h to bf16 before h·W_hhᵀ) costs, measured against float64 over
// 50 steps: the state's error stays at one step's rounding (the GRU's gates contract it), but the
// gradient that flows back through the 50 rounded transposed products is several times less
// accurate. seqgrad's float32 recurrence is float32-accurate in both. Measured (B 8, H 64, seed 16):
// bf16 recurrence, state error 3.2e-4 at step 1 and 4.1e-4 at step 50, gradient of h0 4.8e-3 and of
// W_hh 2.3e-3; float32 recurrence, 1e-7 to 4e-7 throughout.
TEST_CASE("autocast: a bf16 recurrence, measured over 50 steps: the state does not drift, its gradient does") {
  manual_seed(16);
  const int64_t T = 50, B = 8, H = 64;
  Tensor xp = randn({T, B, 3 * H}, {.dtype = DType::f64}), h0 = randn({B, H}, {.dtype = DType::f64}) * 0.5;
  Tensor w_hh = randn({3 * H, H}, {.dtype = DType::f64}) * (0.5 / std::sqrt(double(H)));
  Tensor wy = randn({B, H}, {.dtype = DType::f64});  // loss = Σ wy · h_T
  struct Run {
    std::vector<double> first, last, dh0, dw;  // h_1, h_T and the gradients of h0 and w_hh
  };
  auto run = [&](DType dtype, bool bf16_recurrence) {
    auto leaf = [&](const Tensor& t) { return t.to(dtype).detach().clone().requires_grad_(); };
    Tensor x = xp.to(dtype), h = leaf(h0), w = leaf(w_hh);
    Tensor y;
    {
      Autocast amp(dtype == DType::f64 ? GemmPrecision::full : GemmPrecision::bf16);
      y = bf16_recurrence ? gru_layer_steps(x, h, Tensor(), Direction::forward,
                                            [&](const Tensor& xp_t, const Tensor& h_prev) {
                                              return gru_gates(xp_t, matmul(h_prev, w.t()), h_prev);
                                            })
                          : gru_layer(x, h, w, Tensor(), Tensor(), Direction::forward);
      (y.select(0, T - 1) * wy.to(dtype)).sum().backward();
    }
    auto values = [](const Tensor& t) { return t.detach().to(DType::f64).contiguous().to_vector<double>(); };
    return Run{values(y.select(0, 0)), values(y.select(0, T - 1)), values(h.grad()), values(w.grad())};
  };
  auto error = [](const std::vector<double>& got, const std::vector<double>& want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
    return std::sqrt(diff / norm);
  };
  const Run ref = run(DType::f64, false), kept = run(DType::f32, false), rounded = run(DType::f32, true);
  for (const Run* r : {&kept, &rounded}) {
    const bool bf16 = r == &rounded;
    MESSAGE(std::string(bf16 ? "bf16" : "float32") << " recurrence, relative error vs float64: h_1 "
            << error(r->first, ref.first) << ", h_50 " << error(r->last, ref.last) << ", dL/dh0 " << error(r->dh0, ref.dh0) << ", dL/dW_hh "
            << error(r->dw, ref.dw));
  }
  for (const auto& [got, want] : {std::pair{&kept.first, &ref.first}, {&kept.last, &ref.last}, {&kept.dh0, &ref.dh0},
                                  {&kept.dw, &ref.dw}})
    CHECK(error(*got, *want) < 1e-5);
  const double state_first = error(rounded.first, ref.first), state_last = error(rounded.last, ref.last);
  CHECK(state_first > 1e-4);                    // one bf16 rounding (2^-9 relative) shows at once
  CHECK(state_last < 3 * state_first);          // and does not compound in the state
  CHECK(error(rounded.dh0, ref.dh0) > 3 * state_last);  // the gradient through time loses more
}
