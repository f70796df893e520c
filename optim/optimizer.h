// Optimizers with PyTorch 1.13's update rules: SGD (momentum, dampening, nesterov, weight decay),
// Adam (L2 weight decay, amsgrad) and AdamW (decoupled weight decay). Parameters are grouped, each
// group with its own hyper-parameters; updates run under NoGradGuard on the parameters' storage.
//
//   seqgrad::optim::Adam opt(model.parameters(), {.lr = 5e-3});
//   loss.backward(); opt.step(); opt.zero_grad();
//
// The optimizer holds the parameter tensors themselves. Module::to(dtype or device) converts
// them in place, so an optimizer built before keeps updating them; its state (moments, momentum)
// follows the parameter's dtype and device at the next step (as PyTorch's load_state_dict casts it).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/backend_ops.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace seqgrad::optim {

// Hyper-parameters by name ("lr", "momentum", "beta1", ...); booleans are 0 or 1.
using HyperParams = std::map<std::string, double>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& type_name() const { return type_name_; }

  // One update of every parameter that has a gradient; parameters without one are skipped (their
  // step count does not advance), as in PyTorch.
  virtual void step() = 0;
  // Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  size_t num_groups() const { return params_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  std::vector<Tensor> parameters() const;  // all groups, in order

  double lr(size_t group = 0) const;
  void set_lr(double lr);  // every group
  void set_lr(size_t group, double lr);
  // The learning rate schedulers scale: the group's lr when the first scheduler attached to it
  // (PyTorch's `initial_lr`); saved and restored with the state. NaN until a scheduler sets it.
  double initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  // A group's hyper-parameters by name, e.g. {"lr": 0.001, "beta1": 0.9, ...}.
  virtual HyperParams hyper_params(size_t group) const = 0;

  // Copies of the state: tensors "state.<i>.<buffer>" (i counts parameters across groups in
  // order, as PyTorch numbers them; e.g. "state.3.exp_avg") and values {"type": "Adam", "groups":
  // [{"hyper_params": {"lr": ...}, "initial_lr": ..., "params": [{"shape": [...], "step": 7}, ...]}]}.
  StateDict state_dict() const;
  // Restores state saved by an optimizer of the same type over parameters of the same shapes,
  // hyper-parameters included (as PyTorch does). Every mismatch throws naming the key or group.
  void load_state_dict(const StateDict& state);

 protected:
  // Per-parameter state: the step count and named buffers ("exp_avg", "momentum_buffer", ...).
  struct ParamState {
    int64_t step = 0;
    std::map<std::string, Tensor> buffers;
  };

  Optimizer(std::string type_name, std::vector<std::vector<Tensor>> groups);
  virtual double& group_lr(size_t group) = 0;
  virtual double group_lr(size_t group) const = 0;
  // Validates and sets a group's hyper-parameters (load_state_dict).
  virtual void set_hyper_params(size_t group, const HyperParams& values) = 0;
  // The buffers a parameter of this group has once it has taken a step.
  virtual std::vector<std::string> state_buffers(size_t group) const = 0;
  // Called at the start of step(): the parameter's gradient, or an undefined tensor to skip it,
  // after checking it matches the parameter.
  Tensor grad_for_step(const Tensor& param) const;
  ParamState& state(size_t group, size_t index) { return state_[group][index]; }
  // The state of a parameter about to step, its buffers converted to the parameter's dtype and
  // device when the parameter changed them since (Module::to converts parameters in place).
  ParamState& state_for_step(size_t group, size_t index);
  void check_group(size_t group) const;

 private:
  std::string type_name_;
  std::vector<std::vector<Tensor>> params_;
  std::vector<std::vector<ParamState>> state_;
  std::vector<double> initial_lr_;
};

// ---- SGD
// With g = grad + weight_decay · p:
//   momentum = 0:  p -= lr · g
//   otherwise:     b = g on the first step, else b = momentum · b + (1 - dampening) · g
//                  p -= lr · (nesterov ? g + momentum · b : b)
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening = 0
};

class SGD : public Optimizer {
 public:
  using Options = SGDOptions;
  struct Group {
    std::vector<Tensor> params;
    Options options;
  };
  explicit SGD(std::vector<Tensor> params, Options options = {});
  explicit SGD(std::vector<Group> groups);

  void step() override;
  HyperParams hyper_params(size_t group) const override;
  Options& options(size_t group = 0);

 protected:
  double& group_lr(size_t group) override { return options_[group].lr; }
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_hyper_params(size_t group, const HyperParams& values) override;
  std::vector<std::string> state_buffers(size_t group) const override;

 private:
  std::vector<Options> options_;
};

// ---- Adam and AdamW
// At step t with g = grad (Adam adds weight_decay · p to g; AdamW instead first scales
// p *= 1 - lr · weight_decay):
//   m = β1 · m + (1 - β1) · g          v = β2 · v + (1 - β2) · g²
//   v̂ = amsgrad ? (v_max = max(v_max, v)) : v
//   p -= lr / (1 - β1^t) · m / (√v̂ / √(1 - β2^t) + eps)
// A fused op like the others: each parameter takes one call of its backend's adam_update kernel
// (CPU: ops/cpu/adam.cpp, CUDA: ops/cuda/fused.cu) when the backend has it and the tensors are
// contiguous, else the composed twin below, built from tensor ops.
struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  using Options = AdamOptions;
  struct Group {
    std::vector<Tensor> params;
    Options options;
  };
  explicit Adam(std::vector<Tensor> params, Options options = {});
  explicit Adam(std::vector<Group> groups);

  void step() override;
  HyperParams hyper_params(size_t group) const override;
  Options& options(size_t group = 0);

 protected:
  Adam(std::string type_name, std::vector<Group> groups, bool decoupled_weight_decay);
  double& group_lr(size_t group) override { return options_[group].lr; }
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_hyper_params(size_t group, const HyperParams& values) override;
  std::vector<std::string> state_buffers(size_t group) const override;

 private:
  std::vector<Options> options_;
  bool decoupled_weight_decay_ = false;
};

class AdamW : public Adam {
 public:
  using Options = AdamWOptions;
  explicit AdamW(std::vector<Tensor> params, Options options = {});
  struct Group {
    std::vector<Tensor> params;
    Options options;
  };
  explicit AdamW(std::vector<Group> groups);
};

namespace detail {

// One Adam/AdamW update of one parameter with the scalars of step p.step (1-based): param,
// exp_avg, exp_avg_sq (and max_exp_avg_sq with p.amsgrad, else undefined) are updated in place
// from grad; all of one shape, floating dtype and device. The backend's fused kernel runs when it
// has one and every tensor is contiguous; otherwise adam_update_composed.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamParams& p);
// The same update written with tensor ops (any device, any strides): the kernels' composed twin.
void adam_update_composed(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamParams& p);

}  // namespace detail
}  // namespace seqgrad::optim
