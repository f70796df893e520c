// GradScaler: PyTorch 1.13's torch.cuda.amp.GradScaler state machine (scale, unscale_, the inf/NaN
// check, skipped steps, backoff and growth, misuse errors, state_dict), on the CPU; and a float16
// autocast training loop that recovers from an overflowing initial scale.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace seqgrad;
using namespace seqgrad::optim;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor param(std::initializer_list<double> values) {
  return tensor(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::f64}).requires_grad_();
}
void set_grad(const Tensor& p, std::initializer_list<double> values) {
  p.set_grad(tensor(values, p.shape(), {.dtype = p.dtype()}));
}
}  // namespace

TEST_CASE("GradScaler: scale multiplies the loss; a disabled scaler is the identity") {
  GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  Tensor loss = scalar_tensor(0.5, {.dtype = DType::f64});
  CHECK(scaler.scale(loss).item() == 32768.0);
  GradScaler off({.enabled = false});
  CHECK(off.get_scale() == 1.0);
  CHECK(off.scale(loss).impl() == loss.impl());
  CHECK(off.state_dict().empty());
  CHECK(off.state_dict().values.empty());
  // the scale is a float32 number, as PyTorch's scale tensor
  CHECK(GradScaler({.init_scale = 0.1}).get_scale() == static_cast<double>(0.1f));
}

TEST_CASE("GradScaler: step unscales, then steps with the true gradients") {
  Tensor p = param({1.0, 2.0});
  SGD opt({p}, {.lr = 0.5});
  GradScaler scaler({.init_scale = 1024.0});
  set_grad(p, {1024.0 * 0.25, 1024.0 * -1.0});  // what backward of scale(loss) would give
  CHECK(scaler.step(opt));
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0.25, -1.0});
  CHECK(p.to_vector<double>() == std::vector<double>{1.0 - 0.5 * 0.25, 2.0 + 0.5});
  scaler.update();
  CHECK(scaler.get_scale() == 1024.0);
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("GradScaler: an inf or NaN gradient skips the step and backs the scale off") {
  for (double bad : {kInf, -kInf, kNaN}) {
    CAPTURE(bad);
    Tensor p = param({1.0, 2.0}), q = param({3.0});
    SGD opt({p, q}, {.lr = 0.5});
    GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
    set_grad(p, {8.0, 8.0});
    set_grad(q, {bad});
    scaler.unscale_(opt);
    CHECK(p.grad().to_vector<double>() == std::vector<double>{1.0, 1.0});  // unscaled anyway, as PyTorch
    CHECK_FALSE(scaler.step(opt));
    CHECK(p.to_vector<double>() == std::vector<double>{1.0, 2.0});  // untouched
    scaler.update();
    CHECK(scaler.get_scale() == 4.0);
    CHECK(scaler.growth_tracker() == 0);
  }
}

TEST_CASE("GradScaler: the scale grows after growth_interval clean steps, and backoff restarts the count") {
  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 4.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 3});
  auto iteration = [&](double grad) {
    set_grad(p, {grad});
    scaler.step(opt);
    scaler.update();
  };
  iteration(1.0);
  CHECK(scaler.growth_tracker() == 1);
  iteration(1.0);
  CHECK(scaler.growth_tracker() == 2);
  iteration(1.0);
  CHECK(scaler.get_scale() == 12.0);
  CHECK(scaler.growth_tracker() == 0);
  iteration(1.0);
  iteration(kInf);
  CHECK(scaler.get_scale() == 3.0);
  CHECK(scaler.growth_tracker() == 0);
  // growth that would overflow float32 is not applied (the tracker still restarts)
  GradScaler big({.init_scale = 3e38, .growth_interval = 1});
  set_grad(p, {1.0});
  big.step(opt);
  big.update();
  CHECK(big.get_scale() == static_cast<double>(3e38f));
  CHECK(big.growth_tracker() == 0);
}

TEST_CASE("GradScaler: misuse is refused with PyTorch's messages") {
  Tensor p = param({1.0});
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no inf checks were recorded prior to update()"), ValueError);
  set_grad(p, {1.0});
  scaler.unscale_(opt);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt),
                       doctest::Contains("unscale_() has already been called on this optimizer since the last update()"),
                       ValueError);
  scaler.step(opt);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("unscale_() is being called after step()"), ValueError);
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("step() has already been called since the last update()"),
                       ValueError);
  scaler.update();
  set_grad(p, {1.0});
  CHECK(scaler.step(opt));  // a new iteration
  CHECK_THROWS_WITH_AS(GradScaler({.growth_factor = 1.0}), doctest::Contains("growth_factor = 1 must be greater than 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(GradScaler({.backoff_factor = 1.5}), doctest::Contains("backoff_factor = 1.5"), ValueError);
  CHECK_THROWS_WITH_AS(scaler.update(-1.0), doctest::Contains("new_scale = -1"), ValueError);
}

TEST_CASE("GradScaler: update(new_scale), and state_dict round trip with PyTorch's keys") {
  Tensor p = param({1.0});
  SGD opt({p}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 16.0, .growth_interval = 5});
  set_grad(p, {1.0});
  scaler.step(opt);
  scaler.update();
  StateDict state = scaler.state_dict();
  CHECK(state.empty());  // values only
  CHECK(state.values == nlohmann::json{{"scale", 16.0}, {"_growth_tracker", 1}, {"growth_interval", 5},
                                       {"growth_factor", 2.0}, {"backoff_factor", 0.5}});
  GradScaler restored;
  restored.load_state_dict(state);
  CHECK(restored.get_scale() == 16.0);
  CHECK(restored.growth_tracker() == 1);
  CHECK(restored.options().growth_interval == 5);
  restored.update(2.0);
  CHECK(restored.get_scale() == 2.0);
  // a state written as doubles (before StateDict) loads: its integers are integral numbers
  state.values["growth_interval"] = 5.0, state.values["_growth_tracker"] = 3.0;
  restored.load_state_dict(state);
  CHECK(restored.growth_tracker() == 3);
  state.values["_growth_tracker"] = 1.5;
  CHECK_THROWS_WITH_AS(restored.load_state_dict(state), "GradScaler.load_state_dict: the state's '_growth_tracker' "
                       "must be an integer, got 1.5", ValueError);
  state.values["_growth_tracker"] = 5;
  CHECK_THROWS_WITH_AS(restored.load_state_dict(state), "GradScaler.load_state_dict: _growth_tracker = 5 must be in "
                       "[0, growth_interval = 5)", ValueError);
  state.values.erase("scale");
  CHECK_THROWS_WITH_AS(restored.load_state_dict(state), "GradScaler.load_state_dict: the state has no 'scale'",
                       ValueError);
}

TEST_CASE("GradScaler: float16 autocast training recovers from an overflowing initial scale") {
  // y = x · w with float16 GEMM operands. Scaled by 2^30, the upstream gradient overflows float16
  // (max 65504) in the backward GEMM, the gradients become inf, and the step is skipped until the
  // scale has backed off far enough; then the loss goes down.
  manual_seed(3);
  Tensor x = randn({16, 8}), w_true = randn({8, 1});
  Tensor y = matmul(x, w_true);
  Tensor w = zeros({8, 1}).requires_grad_();
  SGD opt({w}, {.lr = 0.05});
  GradScaler scaler({.init_scale = 1073741824.0});  // 2^30
  int skipped = 0;
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      Autocast amp(GemmPrecision::f16);
      loss = mean(pow(sub(matmul(x, w), y), 2.0));
    }
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
    scaler.scale(loss).backward();
    if (!scaler.step(opt)) ++skipped;
    scaler.update();
  }
  CHECK(skipped > 0);
  CHECK(scaler.get_scale() < 1073741824.0);
  CHECK(std::isfinite(last_loss));
  CHECK(last_loss < 0.2 * first_loss);
}
