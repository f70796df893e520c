// Learning-rate schedulers with PyTorch 1.13's numbers (torch/optim/lr_scheduler.py). Call step()
// once per epoch (or iteration) AFTER optimizer.step(); constructing a scheduler already applies
// the rate for epoch 0, as PyTorch's does.
//
// Each scheduler is a closed form lr_at(epoch) of its base rates. PyTorch mostly applies
// "chainable" multiplicative updates to the optimizer's current rate instead; the two agree (to
// rounding) as long as nothing else edits the rates between steps, and the closed form resumes
// correctly from a state_dict whatever order states are restored in.
//
//   optim::Adam opt(model.parameters(), {.lr = 5e-3});
//   optim::StepLR sched(opt, {.step_size = 10, .gamma = 0.1});
//   for (epoch...) { train(...); sched.step(); }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "optim/optimizer.h"

namespace seqgrad::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  const std::string& type_name() const { return type_name_; }
  Optimizer& optimizer() const { return optimizer_; }

  // last_epoch += 1, then every group's lr = lr_at(last_epoch, group).
  virtual void step();
  // The rate of `group` at `epoch` (>= 0): a pure function of the epoch and the base rates.
  virtual double lr_at(int64_t epoch, size_t group) const = 0;

  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& last_lr() const { return last_lr_; }  // PyTorch's get_last_lr()
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // Values only: the type, last_epoch, base and last rates and the options. Loading restores them
  // (options included, as PyTorch does) and sets the optimizer's rates to the restored last
  // rates. LambdaLR's functions are code and are not saved.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  // Base rates are the groups' initial_lr, which is set to the current lr where it is unset.
  LRScheduler(Optimizer& optimizer, std::string type_name);
  // Applies epoch 0; derived constructors call it last, once their options are set.
  void initial_step();
  virtual void save_options(nlohmann::json& out) const = 0;
  virtual void load_options(const nlohmann::json& in) = 0;
  void set_epoch(int64_t epoch);  // last_epoch = epoch and apply its rates

 private:
  friend class SequentialLR;
  Optimizer& optimizer_;
  std::string type_name_;
  int64_t last_epoch_ = -1;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
};

// lr = base · gamma^⌊epoch / step_size⌋
struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};

class StepLR : public LRScheduler {
 public:
  using Options = StepLROptions;
  StepLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// lr = base · gamma^(number of milestones <= epoch); milestones in any order, repeats count twice.
struct MultiStepLROptions {
  std::vector<int64_t> milestones = {};
  double gamma = 0.1;
};

class MultiStepLR : public LRScheduler {
 public:
  using Options = MultiStepLROptions;
  MultiStepLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// lr = base · gamma^epoch
struct ExponentialLROptions {
  double gamma = 0.1;
};

class ExponentialLR : public LRScheduler {
 public:
  using Options = ExponentialLROptions;
  ExponentialLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// lr = eta_min + (base - eta_min) · (1 + cos(π · epoch / t_max)) / 2   (periodic past t_max, as
// PyTorch's chainable form is)
struct CosineAnnealingLROptions {
  int64_t t_max = 1;  // PyTorch's T_max
  double eta_min = 0.0;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  using Options = CosineAnnealingLROptions;
  CosineAnnealingLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// Linear warm-up (or decay) of the factor:
//   lr = base · (start + (end - start) · min(epoch, total_iters) / total_iters)
// start_factor must be in (0, 1] (PyTorch's chainable form divides by it), end_factor in [0, 1].
struct LinearLROptions {
  double start_factor = 1.0 / 3.0;
  double end_factor = 1.0;
  int64_t total_iters = 5;
};

class LinearLR : public LRScheduler {
 public:
  using Options = LinearLROptions;
  LinearLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// fairseq's inverse_sqrt: a linear warm-up from warmup_init_lr to the base rate over
// warmup_updates steps, then decay with the inverse square root of the step:
//   lr = warmup_init_lr + (base - warmup_init_lr) · epoch / warmup_updates   for epoch < warmup_updates
//   lr = base · √(warmup_updates / epoch)                                     from then on
// (fairseq's decay_factor = lr · √warmup_updates times epoch^-1/2). Call step() once per update.
struct InverseSqrtLROptions {
  int64_t warmup_updates = 4000;  // >= 1
  double warmup_init_lr = 0.0;    // >= 0; fairseq's default when warming up
};

class InverseSqrtLR : public LRScheduler {
 public:
  using Options = InverseSqrtLROptions;
  InverseSqrtLR(Optimizer& optimizer, Options options);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  Options options_;
};

// lr = base · lambda(epoch), one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas);
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  std::vector<Lambda> lambdas_;
};

// Runs schedulers one after another: schedulers[k] is active from milestones[k-1] on and sees the
// epoch counted from there (restarting at 0), e.g. LinearLR warm-up for 5 epochs and then
// CosineAnnealingLR: SequentialLR(opt, {warmup, cosine}, {5}). Milestones strictly increase and
// are > 0; there is one fewer than schedulers, and all schedulers drive `optimizer`.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  double lr_at(int64_t epoch, size_t group) const override;

 protected:
  void save_options(nlohmann::json& out) const override;
  void load_options(const nlohmann::json& in) override;

 private:
  size_t active(int64_t epoch) const;  // index of the scheduler that owns `epoch`
  void sync_active();                  // the active scheduler's epoch and rates follow ours
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Reduces the rates by `factor` once the metric has not improved for more than `patience` steps.
// Unlike the schedulers above it acts on the optimizer's current rates (as PyTorch's does):
//   improved = (min, rel): m < best · (1 - threshold)    (min, abs): m < best - threshold
//              (max, rel): m > best · (1 + threshold)    (max, abs): m > best + threshold
//   bad epochs reset on improvement and during cooldown; when they exceed patience, every group's
//   lr = max(lr · factor, min_lr) (only if that lowers it by more than eps), then `cooldown` steps
//   of cooldown follow.
enum class PlateauMode { min, max };
enum class ThresholdMode { rel, abs };

struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::min;
  double factor = 0.1;  // < 1
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;
  double min_lr = 0.0;
  std::vector<double> min_lrs = {};  // per group; overrides min_lr when given
  double eps = 1e-8;
};

class ReduceLROnPlateau {
 public:
  using Mode = PlateauMode;
  using Options = ReduceLROnPlateauOptions;
  ReduceLROnPlateau(Optimizer& optimizer, Options options = {});

  void step(double metric);

  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }

  // Values only: the options, best, bad epochs, cooldown, last_epoch and last rates.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double a, double best) const;
  Optimizer& optimizer_;
  Options options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace seqgrad::optim
