// GradScaler (optim/grad_scaler.h): PyTorch 1.13's loss-scaling state machine.
#include "optim/grad_scaler.h"

#include <cmath>

#include "core/autograd.h"
#include "ops/ops.h"

namespace seqgrad::optim {
namespace {
GradScalerOptions validate(const GradScalerOptions& o) {
  SG_CHECK_VALUE(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale = {} must be positive "
                 "and finite", o.init_scale);
  SG_CHECK_VALUE(o.growth_factor > 1.0, "GradScaler: growth_factor = {} must be greater than 1", o.growth_factor);
  SG_CHECK_VALUE(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor = {} must be in "
                 "(0, 1)", o.backoff_factor);
  SG_CHECK_VALUE(o.growth_interval > 0, "GradScaler: growth_interval = {} must be positive", o.growth_interval);
  return o;
}
}  // namespace

GradScaler::GradScaler(Options options)
    : options_(validate(options)), scale_(static_cast<float>(options.init_scale)) {}

double GradScaler::get_scale() const { return options_.enabled ? static_cast<double>(scale_) : 1.0; }

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  SG_CHECK_DTYPE(is_floating(loss.dtype()), "GradScaler.scale: expected a floating loss, got {} {}", loss.dtype(),
                 loss.shape());
  return mul(loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer_[&optimizer];
  SG_CHECK_VALUE(state.stage != Stage::unscaled,
                 "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  SG_CHECK_VALUE(state.stage != Stage::stepped, "GradScaler.unscale_: unscale_() is being called after step()");
  NoGradGuard no_grad;
  // PyTorch: inv_scale = scale.double().reciprocal().float(); every gradient is multiplied by it,
  // whether or not a non-finite value was found.
  double inv_scale = static_cast<double>(static_cast<float>(1.0 / static_cast<double>(scale_)));
  Tensor non_finite;  // count of inf/NaN elements, accumulated on the gradients' device
  bool found = false;
  for (const Tensor& p : optimizer.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor bad = sum(logical_not(isfinite(g)).to(DType::i64));
    if (!non_finite.defined()) {
      non_finite = bad;
    } else if (non_finite.device() == bad.device()) {
      non_finite = add(non_finite, bad);
    } else {  // parameters on several devices: settle the previous device's count
      found = found || non_finite.item() != 0;
      non_finite = bad;
    }
    g.mul_(inv_scale);
  }
  if (non_finite.defined()) found = found || non_finite.item() != 0;  // the one synchronising read
  state.found_inf = found;
  state.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& state = per_optimizer_[&optimizer];
  SG_CHECK_VALUE(state.stage != Stage::stepped, "GradScaler.step: step() has already been called since the last "
                 "update()");
  if (state.stage == Stage::ready) unscale_(optimizer);
  state.stage = Stage::stepped;
  if (state.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  SG_CHECK_VALUE(!per_optimizer_.empty(), "GradScaler.update: no inf checks were recorded prior to update() (call "
                 "step() or unscale_() first)");
  bool found_inf = false;
  for (const auto& [_, state] : per_optimizer_) found_inf = found_inf || state.found_inf;
  // torch._amp_update_scale_ (float32 arithmetic on the scale)
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    auto grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  SG_CHECK_VALUE(new_scale > 0 && std::isfinite(new_scale), "GradScaler.update: new_scale = {} must be positive and "
                 "finite", new_scale);
  scale_ = static_cast<float>(new_scale);
  per_optimizer_.clear();
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return StateDict({}, {{"scale", static_cast<double>(scale_)}, {"growth_factor", options_.growth_factor},
                        {"backoff_factor", options_.backoff_factor}, {"growth_interval", options_.growth_interval},
                        {"_growth_tracker", growth_tracker_}});
}

void GradScaler::load_state_dict(const StateDict& state) {
  const std::string op = "GradScaler.load_state_dict";
  SG_CHECK_VALUE(options_.enabled, "{}: the scaler is disabled", op);
  SG_CHECK_VALUE(!state.values.empty(), "{}: the state is empty (saved from a disabled scaler?)", op);
  Options o = options_;
  o.init_scale = state_number(state.values, "scale", op);
  o.growth_factor = state_number(state.values, "growth_factor", op);
  o.backoff_factor = state_number(state.values, "backoff_factor", op);
  o.growth_interval = state_integer(state.values, "growth_interval", op);
  o = validate(o);
  const int64_t tracker = state_integer(state.values, "_growth_tracker", op);
  SG_CHECK_VALUE(tracker >= 0 && tracker < o.growth_interval, "{}: _growth_tracker = {} must be in [0, "
                 "growth_interval = {})", op, tracker, o.growth_interval);
  options_ = o;
  scale_ = static_cast<float>(o.init_scale);
  growth_tracker_ = tracker;
}

}  // namespace seqgrad::optim
