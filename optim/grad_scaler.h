// Dynamic loss scaling for mixed precision, with the semantics of PyTorch 1.13's
// torch.cuda.amp.GradScaler (torch/cuda/amp/grad_scaler.py). Float16 GEMM operands (core/autocast.h)
// flush small gradients to zero; scaling the loss by S before backward keeps them representable,
// and the gradients are divided by S before the optimizer uses them:
//
//   optim::GradScaler scaler;                 // S = 65536
//   {
//     Autocast amp(GemmPrecision::f16);
//     loss = model(x, y);
//   }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                     // optional: gradients are true gradients from here on
//   optim::clip_grad_norm_(model.parameters(), 1.0);
//   scaler.step(opt);                         // skipped when a gradient is inf or NaN
//   scaler.update();                          // S *= 0.5 after a skipped step; S *= 2 after 2000 good ones
//
// The scale is a float32 number held on the host (PyTorch keeps it on the device); checking the
// gradients costs one device-to-host copy per step. Nothing here depends on the device.
#pragma once
#include <cstdint>
#include <map>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace seqgrad::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;    // > 1
  double backoff_factor = 0.5;   // in (0, 1)
  int64_t growth_interval = 2000;  // steps without inf/NaN before the scale grows
  bool enabled = true;           // disabled: scale() and unscale_() do nothing, step() just steps
};

class GradScaler {
 public:
  using Options = GradScalerOptions;
  explicit GradScaler(Options options = {});

  // loss * scale (a float32 / float64 tensor on any device); the loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of the optimizer's parameters by the scale in place, and records whether
  // any of them holds an inf or NaN. At most once per optimizer between update()s, and not after
  // step(): either throws a ValueError naming the misuse.
  void unscale_(Optimizer& optimizer);
  // Unscales (unless unscale_ already did) and calls optimizer.step() unless a gradient was inf or
  // NaN. Returns whether the step was taken. At most once per optimizer between update()s.
  bool step(Optimizer& optimizer);
  // Adjusts the scale from this iteration's checks: backoff after any inf/NaN (and the growth count
  // restarts), growth after growth_interval clean steps in a row (if the grown scale is finite).
  // Throws when no optimizer was checked since the last update(). Resets the per-optimizer state.
  void update();
  // Sets the scale directly (PyTorch's update(new_scale)); also resets the per-optimizer state.
  void update(double new_scale);

  double get_scale() const;  // 1 when disabled
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  const Options& options() const { return options_; }

  // Values only, with PyTorch's state_dict keys: scale, growth_factor, backoff_factor,
  // growth_interval, _growth_tracker (the last two integers); empty when disabled.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage : uint8_t { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    bool found_inf = false;
  };

  Options options_;
  float scale_;  // float32, as PyTorch's scale tensor
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace seqgrad::optim
