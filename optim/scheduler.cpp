// Learning-rate schedulers: closed forms of PyTorch 1.13's schedules, plus ReduceLROnPlateau.
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include <nlohmann/json.hpp>

#include "core/json.h"

namespace seqgrad::optim {
namespace {

using nlohmann::json;

// JSON has no inf or NaN; they travel as strings.
json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw ValueError(fmt::format("expected a number, got \"{}\"", s));
  }
  return j.get<double>();
}

json numbers(const std::vector<double>& values) {
  json out = json::array();
  for (double v : values) out.push_back(number(v));
  return out;
}

std::vector<double> numbers_from(const json& j) {
  std::vector<double> out;
  for (const json& v : j) out.push_back(number_from(v));
  return out;
}

// Learning rates read from a state: a NaN or infinite rate would poison the next step's update.
void check_finite_lrs(const std::vector<double>& lrs, const std::string& op, const char* field) {
  for (size_t g = 0; g < lrs.size(); ++g)
    SG_CHECK_VALUE(std::isfinite(lrs[g]), "{}: {}[{}] = {} is not a finite learning rate", op, field, g, lrs[g]);
}

void check_positive(const char* type, const char* name, int64_t value) {
  SG_CHECK_VALUE(value >= 1, "{}: {} = {} must be >= 1", type, name, value);
}

}  // namespace

// ---- LRScheduler

LRScheduler::LRScheduler(Optimizer& optimizer, std::string type_name)
    : optimizer_(optimizer), type_name_(std::move(type_name)) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) {
    if (std::isnan(optimizer.initial_lr(g))) optimizer.set_initial_lr(g, optimizer.lr(g));
    base_lrs_.push_back(optimizer.initial_lr(g));
  }
}

void LRScheduler::initial_step() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::step() { set_epoch(last_epoch_ + 1); }

void LRScheduler::set_epoch(int64_t epoch) {
  last_epoch_ = epoch;
  last_lr_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    double lr = lr_at(epoch, g);
    optimizer_.set_lr(g, lr);
    last_lr_.push_back(lr);
  }
}

StateDict LRScheduler::state_dict() const {
  json options = json::object();
  save_options(options);
  return StateDict({}, json{{"type", type_name_},
                            {"last_epoch", last_epoch_},
                            {"base_lrs", numbers(base_lrs_)},
                            {"last_lr", numbers(last_lr_)},
                            {"options", options}});
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string op = type_name_ + ".load_state_dict";
  const json& j = state.values;
  check_state_object(j, op);
  int64_t epoch = 0;
  std::vector<double> base, last;
  try {
    std::string type = j.at("type").get<std::string>();
    SG_CHECK_VALUE(type == type_name_, "{}: the state was saved by {}", op, type);
    epoch = j.at("last_epoch").get<int64_t>();
    base = numbers_from(j.at("base_lrs"));
    last = numbers_from(j.at("last_lr"));
    check_finite_lrs(base, op, "base_lrs");
    check_finite_lrs(last, op, "last_lr");
    SG_CHECK_VALUE(base.size() == base_lrs_.size() && last.size() == base_lrs_.size(),
                   "{}: the state is for {} parameter groups, the optimizer has {}", op, base.size(),
                   base_lrs_.size());
    load_options(j.at("options"));
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("{}: malformed state ({})", op, e.what()));
  }
  last_epoch_ = epoch;
  base_lrs_ = base;
  last_lr_ = last;
  for (size_t g = 0; g < base.size(); ++g) {
    optimizer_.set_initial_lr(g, base[g]);
    optimizer_.set_lr(g, last[g]);
  }
}

// ---- StepLR

StepLR::StepLR(Optimizer& optimizer, Options options) : LRScheduler(optimizer, "StepLR"), options_(options) {
  check_positive("StepLR", "step_size", options.step_size);
  initial_step();
}

double StepLR::lr_at(int64_t epoch, size_t group) const {
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(epoch / options_.step_size));
}

void StepLR::save_options(json& out) const {
  out = {{"step_size", options_.step_size}, {"gamma", options_.gamma}};
}

void StepLR::load_options(const json& in) {
  Options o{.step_size = in.at("step_size").get<int64_t>(), .gamma = in.at("gamma").get<double>()};
  check_positive("StepLR", "step_size", o.step_size);
  options_ = o;
}

// ---- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, Options options)
    : LRScheduler(optimizer, "MultiStepLR"), options_(std::move(options)) {
  std::sort(options_.milestones.begin(), options_.milestones.end());
  initial_step();
}

double MultiStepLR::lr_at(int64_t epoch, size_t group) const {
  auto passed = std::upper_bound(options_.milestones.begin(), options_.milestones.end(), epoch) -
                options_.milestones.begin();  // bisect_right
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(passed));
}

void MultiStepLR::save_options(json& out) const {
  out = {{"milestones", options_.milestones}, {"gamma", options_.gamma}};
}

void MultiStepLR::load_options(const json& in) {
  Options o{.milestones = in.at("milestones").get<std::vector<int64_t>>(), .gamma = in.at("gamma").get<double>()};
  std::sort(o.milestones.begin(), o.milestones.end());
  options_ = o;
}

// ---- ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, Options options)
    : LRScheduler(optimizer, "ExponentialLR"), options_(options) {
  initial_step();
}

double ExponentialLR::lr_at(int64_t epoch, size_t group) const {
  return base_lrs()[group] * std::pow(options_.gamma, static_cast<double>(epoch));
}

void ExponentialLR::save_options(json& out) const { out = {{"gamma", options_.gamma}}; }

void ExponentialLR::load_options(const json& in) { options_ = {.gamma = in.at("gamma").get<double>()}; }

// ---- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, Options options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  check_positive("CosineAnnealingLR", "t_max", options.t_max);
  initial_step();
}

double CosineAnnealingLR::lr_at(int64_t epoch, size_t group) const {
  const double eta_min = options_.eta_min;
  const double angle = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(options_.t_max);
  return eta_min + (base_lrs()[group] - eta_min) * (1.0 + std::cos(angle)) / 2.0;
}

void CosineAnnealingLR::save_options(json& out) const {
  out = {{"t_max", options_.t_max}, {"eta_min", options_.eta_min}};
}

void CosineAnnealingLR::load_options(const json& in) {
  Options o{.t_max = in.at("t_max").get<int64_t>(), .eta_min = in.at("eta_min").get<double>()};
  check_positive("CosineAnnealingLR", "t_max", o.t_max);
  options_ = o;
}

// ---- LinearLR

namespace {
LinearLROptions validate(const LinearLROptions& o) {
  SG_CHECK_VALUE(o.start_factor > 0.0 && o.start_factor <= 1.0, "LinearLR: start_factor = {} not in (0, 1]",
                 o.start_factor);
  SG_CHECK_VALUE(o.end_factor >= 0.0 && o.end_factor <= 1.0, "LinearLR: end_factor = {} not in [0, 1]",
                 o.end_factor);
  check_positive("LinearLR", "total_iters", o.total_iters);
  return o;
}
}  // namespace

LinearLR::LinearLR(Optimizer& optimizer, Options options)
    : LRScheduler(optimizer, "LinearLR"), options_(validate(options)) {
  initial_step();
}

double LinearLR::lr_at(int64_t epoch, size_t group) const {
  const Options& o = options_;
  const double progress = static_cast<double>(std::min(o.total_iters, epoch)) / static_cast<double>(o.total_iters);
  return base_lrs()[group] * (o.start_factor + (o.end_factor - o.start_factor) * progress);
}

void LinearLR::save_options(json& out) const {
  out = {{"start_factor", options_.start_factor},
         {"end_factor", options_.end_factor},
         {"total_iters", options_.total_iters}};
}

void LinearLR::load_options(const json& in) {
  options_ = validate({.start_factor = in.at("start_factor").get<double>(),
                       .end_factor = in.at("end_factor").get<double>(),
                       .total_iters = in.at("total_iters").get<int64_t>()});
}

// ---- InverseSqrtLR

namespace {
InverseSqrtLROptions validate(const InverseSqrtLROptions& o) {
  check_positive("InverseSqrtLR", "warmup_updates", o.warmup_updates);
  SG_CHECK_VALUE(o.warmup_init_lr >= 0.0 && std::isfinite(o.warmup_init_lr),
                 "InverseSqrtLR: warmup_init_lr = {} must be finite and >= 0", o.warmup_init_lr);
  return o;
}
}  // namespace

InverseSqrtLR::InverseSqrtLR(Optimizer& optimizer, Options options)
    : LRScheduler(optimizer, "InverseSqrtLR"), options_(validate(options)) {
  initial_step();
}

double InverseSqrtLR::lr_at(int64_t epoch, size_t group) const {
  const double base = base_lrs()[group], init = options_.warmup_init_lr;
  const auto warmup = static_cast<double>(options_.warmup_updates), step = static_cast<double>(epoch);
  if (epoch < options_.warmup_updates) return init + (base - init) * step / warmup;
  return base * std::sqrt(warmup / step);
}

void InverseSqrtLR::save_options(json& out) const {
  out = {{"warmup_updates", options_.warmup_updates}, {"warmup_init_lr", options_.warmup_init_lr}};
}

void InverseSqrtLR::load_options(const json& in) {
  options_ = validate({.warmup_updates = in.at("warmup_updates").get<int64_t>(),
                       .warmup_init_lr = in.at("warmup_init_lr").get<double>()});
}

// ---- LambdaLR

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_groups(), lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lambdas)
    : LRScheduler(optimizer, "LambdaLR"), lambdas_(std::move(lambdas)) {
  SG_CHECK_VALUE(lambdas_.size() == optimizer.num_groups(), "LambdaLR: {} functions for {} parameter groups",
                 lambdas_.size(), optimizer.num_groups());
  for (size_t g = 0; g < lambdas_.size(); ++g)
    SG_CHECK_VALUE(static_cast<bool>(lambdas_[g]), "LambdaLR: the function for group {} is empty", g);
  initial_step();
}

double LambdaLR::lr_at(int64_t epoch, size_t group) const { return base_lrs()[group] * lambdas_[group](epoch); }

void LambdaLR::save_options(json& out) const { out = json::object(); }

void LambdaLR::load_options(const json&) {}

// ---- SequentialLR

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  SG_CHECK_VALUE(!schedulers_.empty(), "SequentialLR: no schedulers given");
  SG_CHECK_VALUE(milestones_.size() + 1 == schedulers_.size(),
                 "SequentialLR: {} schedulers need {} milestones, got {}", schedulers_.size(),
                 schedulers_.size() - 1, milestones_.size());
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    SG_CHECK_VALUE(schedulers_[k] != nullptr, "SequentialLR: scheduler {} is null", k);
    SG_CHECK_VALUE(&schedulers_[k]->optimizer() == &optimizer,
                   "SequentialLR: scheduler {} ({}) drives a different optimizer", k, schedulers_[k]->type_name());
  }
  for (size_t k = 0; k < milestones_.size(); ++k)
    SG_CHECK_VALUE(milestones_[k] > (k == 0 ? 0 : milestones_[k - 1]),
                   "SequentialLR: milestones must be > 0 and strictly increasing, got {} at position {}",
                   milestones_[k], k);
  for (auto& s : schedulers_) s->last_epoch_ = -1;  // none has run yet; the first starts now
  initial_step();
}

size_t SequentialLR::active(int64_t epoch) const {
  return static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
}

double SequentialLR::lr_at(int64_t epoch, size_t group) const {
  size_t k = active(epoch);
  int64_t start = k == 0 ? 0 : milestones_[k - 1];
  return schedulers_[k]->lr_at(epoch - start, group);
}

void SequentialLR::step() {
  LRScheduler::step();
  sync_active();
}

void SequentialLR::sync_active() {
  size_t k = active(last_epoch());
  LRScheduler& s = *schedulers_[k];
  s.last_epoch_ = last_epoch() - (k == 0 ? 0 : milestones_[k - 1]);
  s.last_lr_ = last_lr();
}

void SequentialLR::save_options(json& out) const {
  json states = json::array();
  for (const auto& s : schedulers_) states.push_back(s->state_dict().values);
  out = {{"milestones", milestones_}, {"schedulers", states}};
}

void SequentialLR::load_options(const json& in) {
  auto milestones = in.at("milestones").get<std::vector<int64_t>>();
  const json& states = in.at("schedulers");
  SG_CHECK_VALUE(milestones == milestones_ && states.size() == schedulers_.size(),
                 "SequentialLR.load_state_dict: the state has {} schedulers and milestones {}, this one {} and {}",
                 states.size(), json(milestones).dump(), schedulers_.size(), json(milestones_).dump());
  for (size_t k = 0; k < schedulers_.size(); ++k) schedulers_[k]->load_state_dict(StateDict({}, states[k]));
}

// ---- ReduceLROnPlateau

namespace {
ReduceLROnPlateauOptions validate(ReduceLROnPlateauOptions o, size_t groups) {
  SG_CHECK_VALUE(o.factor < 1.0, "ReduceLROnPlateau: factor = {} must be < 1", o.factor);
  SG_CHECK_VALUE(o.factor >= 0.0, "ReduceLROnPlateau: factor = {} must be >= 0", o.factor);
  SG_CHECK_VALUE(o.patience >= 0 && o.cooldown >= 0, "ReduceLROnPlateau: patience = {} and cooldown = {} must be >= 0",
                 o.patience, o.cooldown);
  if (o.min_lrs.empty()) o.min_lrs.assign(groups, o.min_lr);
  SG_CHECK_VALUE(o.min_lrs.size() == groups, "ReduceLROnPlateau: {} min_lrs for {} parameter groups", o.min_lrs.size(),
                 groups);
  return o;
}

double mode_worse(PlateauMode mode) {
  return mode == PlateauMode::min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}
}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, Options options)
    : optimizer_(optimizer), options_(validate(std::move(options), optimizer.num_groups())),
      best_(mode_worse(options_.mode)) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) last_lr_.push_back(optimizer.lr(g));
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double t = options_.threshold;
  const bool rel = options_.threshold_mode == ThresholdMode::rel;
  if (options_.mode == PlateauMode::min) return rel ? a < best * (1.0 - t) : a < best - t;
  return rel ? a > best * (t + 1.0) : a > best + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
      double old_lr = optimizer_.lr(g);
      double new_lr = std::max(old_lr * options_.factor, options_.min_lrs[g]);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

StateDict ReduceLROnPlateau::state_dict() const {
  const Options& o = options_;
  json options = {{"mode", o.mode == PlateauMode::min ? "min" : "max"},
                  {"factor", o.factor},
                  {"patience", o.patience},
                  {"threshold", o.threshold},
                  {"threshold_mode", o.threshold_mode == ThresholdMode::rel ? "rel" : "abs"},
                  {"cooldown", o.cooldown},
                  {"min_lrs", numbers(o.min_lrs)},
                  {"eps", o.eps}};
  return StateDict({}, json{{"type", "ReduceLROnPlateau"},
                            {"last_epoch", last_epoch_},
                            {"best", number(best_)},
                            {"num_bad_epochs", num_bad_epochs_},
                            {"cooldown_counter", cooldown_counter_},
                            {"last_lr", numbers(last_lr_)},
                            {"options", options}});
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  const std::string op = "ReduceLROnPlateau.load_state_dict";
  const json& j = state.values;
  check_state_object(j, op);
  try {
    SG_CHECK_VALUE(j.at("type") == "ReduceLROnPlateau", "{}: the state was saved by {}", op,
                   json_preview(j.at("type")));
    const json& in = j.at("options");
    auto text = [&](const char* key, const char* a, const char* b) {
      std::string v = in.at(key).get<std::string>();
      SG_CHECK_VALUE(v == a || v == b, "{}: {} must be \"{}\" or \"{}\", got \"{}\"", op, key, a, b, v);
      return v == a;
    };
    Options o{.mode = text("mode", "min", "max") ? PlateauMode::min : PlateauMode::max,
              .factor = in.at("factor").get<double>(),
              .patience = in.at("patience").get<int64_t>(),
              .threshold = in.at("threshold").get<double>(),
              .threshold_mode = text("threshold_mode", "rel", "abs") ? ThresholdMode::rel : ThresholdMode::abs,
              .cooldown = in.at("cooldown").get<int64_t>(),
              .min_lrs = numbers_from(in.at("min_lrs")),
              .eps = in.at("eps").get<double>()};
    o = validate(o, optimizer_.num_groups());
    std::vector<double> last = numbers_from(j.at("last_lr"));
    check_finite_lrs(o.min_lrs, op, "options.min_lrs");
    check_finite_lrs(last, op, "last_lr");
    SG_CHECK_VALUE(last.size() == optimizer_.num_groups(), "{}: the state is for {} parameter groups, the optimizer "
                   "has {}", op, last.size(), optimizer_.num_groups());
    double best = number_from(j.at("best"));
    SG_CHECK_VALUE(!std::isnan(best), "{}: best = nan (the best metric so far is a number or, before any, +-inf)", op);
    int64_t last_epoch = j.at("last_epoch").get<int64_t>();
    int64_t bad = j.at("num_bad_epochs").get<int64_t>();
    int64_t cooldown = j.at("cooldown_counter").get<int64_t>();
    options_ = o;
    best_ = best;
    last_epoch_ = last_epoch;
    num_bad_epochs_ = bad;
    cooldown_counter_ = cooldown;
    last_lr_ = last;
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("{}: malformed state ({})", op, e.what()));
  }
}

}  // namespace seqgrad::optim
