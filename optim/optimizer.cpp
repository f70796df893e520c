// Optimizer base (groups, state save/restore) and SGD, Adam, AdamW with PyTorch 1.13's formulas
// (torch/optim/sgd.py, adam.py and adamw.py, the single-tensor paths).
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/backend.h"
#include "ops/ops.h"

namespace seqgrad::optim {
namespace {

using nlohmann::json;

std::vector<std::vector<Tensor>> check_groups(const std::string& type, std::vector<std::vector<Tensor>> groups) {
  SG_CHECK_VALUE(!groups.empty(), "{}: no parameter groups given", type);
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups.size(); ++g) {
    SG_CHECK_VALUE(!groups[g].empty(), "{}: parameter group {} is empty", type, g);
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const Tensor& p = groups[g][i];
      SG_CHECK(p.defined(), "{}: parameter {} of group {} is an undefined tensor", type, i, g);
      SG_CHECK_DTYPE(is_floating(p.dtype()), "{}: parameter {} of group {} must be floating, got {} {}", type, i, g,
                     p.dtype(), p.shape());
      SG_CHECK(p.is_leaf(), "{}: parameter {} of group {} {} is not a leaf tensor (it was computed by {}); optimize "
               "the tensors it was computed from", type, i, g, p.shape(), p.grad_fn()->name);
      SG_CHECK_VALUE(seen.insert(p.impl()).second, "{}: parameter {} of group {} {} appears more than once", type,
                     i, g, p.shape());
    }
  }
  return groups;
}

void check_at_least(const char* type, const char* name, double value, double low) {
  SG_CHECK_VALUE(value >= low, "{}: {} = {} must be >= {}", type, name, value, low);
}

double get(const HyperParams& values, const char* name, const std::string& type, size_t group) {
  auto it = values.find(name);
  SG_CHECK_VALUE(it != values.end(), "{}.load_state_dict: hyper-parameter '{}' missing for group {}", type, name,
                 group);
  return it->second;
}

SGDOptions validate(const SGDOptions& o) {
  check_at_least("SGD", "lr", o.lr, 0.0);
  check_at_least("SGD", "momentum", o.momentum, 0.0);
  check_at_least("SGD", "weight_decay", o.weight_decay, 0.0);
  SG_CHECK_VALUE(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
                 "SGD: nesterov momentum needs momentum > 0 and dampening = 0, got momentum = {}, dampening = {}",
                 o.momentum, o.dampening);
  return o;
}

AdamOptions validate(const AdamOptions& o, const std::string& type) {
  check_at_least(type.c_str(), "lr", o.lr, 0.0);
  check_at_least(type.c_str(), "eps", o.eps, 0.0);
  check_at_least(type.c_str(), "weight_decay", o.weight_decay, 0.0);
  for (int k = 0; k < 2; ++k)
    SG_CHECK_VALUE(o.betas[k] >= 0.0 && o.betas[k] < 1.0, "{}: betas[{}] = {} not in [0, 1)", type, k, o.betas[k]);
  return o;
}

Tensor storage_copy(const Tensor& t, const Tensor& like) {
  NoGradGuard no_grad;
  return t.to(like.dtype()).to(like.device()).contiguous().clone().detach();
}

}  // namespace

// ---- Optimizer

Optimizer::Optimizer(std::string type_name, std::vector<std::vector<Tensor>> groups)
    : type_name_(std::move(type_name)), params_(check_groups(type_name_, std::move(groups))) {
  state_.resize(params_.size());
  for (size_t g = 0; g < params_.size(); ++g) state_[g].resize(params_[g].size());
  initial_lr_.assign(params_.size(), std::numeric_limits<double>::quiet_NaN());
}

void Optimizer::check_group(size_t group) const {
  SG_CHECK_INDEX(group < params_.size(), "{}: group {} out of range ({} groups)", type_name_, group, params_.size());
}

void Optimizer::zero_grad() {
  for (auto& group : params_)
    for (Tensor& p : group) p.zero_grad();
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  check_group(group);
  return params_[group];
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& group : params_) out.insert(out.end(), group.begin(), group.end());
  return out;
}

double Optimizer::lr(size_t group) const {
  check_group(group);
  return group_lr(group);
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < params_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  check_group(group);
  SG_CHECK_VALUE(lr >= 0.0, "{}: lr = {} must be >= 0", type_name_, lr);
  group_lr(group) = lr;
}

double Optimizer::initial_lr(size_t group) const {
  check_group(group);
  return initial_lr_[group];
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  check_group(group);
  initial_lr_[group] = lr;
}

Tensor Optimizer::grad_for_step(const Tensor& param) const {
  Tensor grad = param.grad();
  if (!grad.defined()) return grad;
  SG_CHECK_SHAPE(grad.shape() == param.shape() && grad.dtype() == param.dtype(),
                 "{}.step: gradient {} {} does not match its parameter {} {}", type_name_, grad.dtype(), grad.shape(),
                 param.dtype(), param.shape());
  return grad.detach();
}

Optimizer::ParamState& Optimizer::state_for_step(size_t group, size_t index) {
  ParamState& st = state_[group][index];
  const Tensor& p = params_[group][index];
  for (auto& [_, buffer] : st.buffers)
    if (buffer.dtype() != p.dtype() || buffer.device() != p.device()) buffer = storage_copy(buffer, p);
  return st;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  json groups = json::array();
  size_t index = 0;
  for (size_t g = 0; g < params_.size(); ++g) {
    json params = json::array();
    for (size_t i = 0; i < params_[g].size(); ++i, ++index) {
      const ParamState& st = state_[g][i];
      params.push_back({{"shape", params_[g][i].shape().vec()}, {"step", st.step}});
      for (const auto& [name, buffer] : st.buffers)
        out[fmt::format("state.{}.{}", index, name)] = storage_copy(buffer, buffer);
    }
    json group = {{"hyper_params", hyper_params(g)}, {"params", params}};
    group["initial_lr"] = std::isnan(initial_lr_[g]) ? json(nullptr) : json(initial_lr_[g]);
    groups.push_back(group);
  }
  out.values = json{{"type", type_name_}, {"groups", groups}};
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::string op = type_name_ + ".load_state_dict";
  const json& meta = state.values;  // the state may come from a hostile file: every field is checked
  check_state_object(meta, op);
  // 1. Validate everything before changing anything.
  std::vector<HyperParams> hyper(params_.size());
  std::vector<double> initial(params_.size());
  std::vector<int64_t> steps;
  try {
    std::string type = meta.at("type").get<std::string>();
    SG_CHECK_VALUE(type == type_name_, "{}: the state was saved by {}", op, type);
    const json& groups = meta.at("groups");
    SG_CHECK_VALUE(groups.is_array() && groups.size() == params_.size(), "{}: the state has {} parameter groups, the "
                   "optimizer {}", op, groups.is_array() ? groups.size() : 0, params_.size());
    for (size_t g = 0; g < params_.size(); ++g) {
      const json& params = groups[g].at("params");
      SG_CHECK_VALUE(params.size() == params_[g].size(), "{}: group {} has {} parameters in the state, {} in the "
                     "optimizer", op, g, params.size(), params_[g].size());
      for (size_t i = 0; i < params.size(); ++i) {
        Shape saved(params[i].at("shape").get<std::vector<int64_t>>());
        SG_CHECK_SHAPE(saved == params_[g][i].shape(), "{}: group {} parameter {}: saved shape {} vs parameter {}", op,
                       g, i, saved, params_[g][i].shape());
        steps.push_back(params[i].at("step").get<int64_t>());
        SG_CHECK_VALUE(steps.back() >= 0, "{}: group {} parameter {}: negative step {}", op, g, i, steps.back());
      }
      hyper[g] = groups[g].at("hyper_params").get<HyperParams>();
      const json& init = groups[g].at("initial_lr");
      initial[g] = init.is_null() ? std::numeric_limits<double>::quiet_NaN() : init.get<double>();
    }
  } catch (const json::exception& e) {
    throw ValueError(fmt::format("{}: malformed state ({})", op, e.what()));
  }
  // Tensor names: "state.<index>.<buffer>" for an existing parameter index, shaped like it.
  std::vector<std::pair<size_t, size_t>> where_is;  // global index -> (group, index)
  for (size_t g = 0; g < params_.size(); ++g)
    for (size_t i = 0; i < params_[g].size(); ++i) where_is.emplace_back(g, i);
  std::vector<std::map<std::string, Tensor>> buffers(where_is.size());
  for (const auto& [key, t] : state) {
    size_t index = 0;
    const size_t dot = key.rfind("state.", 0) == 0 ? key.find('.', 6) : std::string::npos;
    bool parsed = dot != std::string::npos && dot + 1 < key.size();
    if (parsed) {
      auto [end, ec] = std::from_chars(key.data() + 6, key.data() + dot, index);
      parsed = ec == std::errc() && end == key.data() + dot;
    }
    SG_CHECK_VALUE(parsed && index < where_is.size(), "{}: unexpected tensor '{}' (expected state.<0..{}>.<buffer>)",
                   op, key, where_is.size() - 1);
    const Tensor& param = params_[where_is[index].first][where_is[index].second];
    SG_CHECK(t.defined(), "{}: tensor '{}' is undefined", op, key);
    SG_CHECK_SHAPE(t.shape() == param.shape(), "{}: '{}' has shape {} but its parameter has {}", op, key, t.shape(),
                   param.shape());
    SG_CHECK_DTYPE(is_floating(t.dtype()), "{}: '{}' must be floating, got {}", op, key, t.dtype());
    // A NaN moment would poison the parameter at the next step, one step before anything notices.
    const double non_finite = sum(logical_not(isfinite(t)).to(DType::i64)).item();
    SG_CHECK_VALUE(non_finite == 0, "{}: tensor '{}' {} holds {} non-finite value(s); the state is unusable (saved "
                   "after a diverged step?)", op, key, t.shape(), non_finite);
    buffers[index][key.substr(dot + 1)] = t;
  }
  // Hyper-parameters are applied to a scratch copy first, so a bad value leaves us untouched.
  std::vector<HyperParams> previous(params_.size());
  for (size_t g = 0; g < params_.size(); ++g) previous[g] = hyper_params(g);
  try {
    for (size_t g = 0; g < params_.size(); ++g) set_hyper_params(g, hyper[g]);
    for (size_t index = 0; index < where_is.size(); ++index) {
      auto [g, i] = where_is[index];
      std::vector<std::string> expected = steps[index] > 0 ? state_buffers(g) : std::vector<std::string>{};
      for (const auto& name : expected)
        SG_CHECK_VALUE(buffers[index].count(name), "{}: missing tensor 'state.{}.{}' (parameter {} of group {} has "
                       "taken {} steps)", op, index, name, i, g, steps[index]);
      for (const auto& [name, _] : buffers[index])
        SG_CHECK_VALUE(std::find(expected.begin(), expected.end(), name) != expected.end(),
                       "{}: unexpected tensor 'state.{}.{}' for {} with these hyper-parameters", op, index, name,
                       type_name_);
    }
  } catch (...) {
    for (size_t g = 0; g < params_.size(); ++g) set_hyper_params(g, previous[g]);
    throw;
  }
  // 2. Apply.
  for (size_t index = 0; index < where_is.size(); ++index) {
    auto [g, i] = where_is[index];
    ParamState& st = state_[g][i];
    st.step = steps[index];
    st.buffers.clear();
    for (const auto& [name, t] : buffers[index]) st.buffers[name] = storage_copy(t, params_[g][i]);
  }
  initial_lr_ = initial;
}

// ---- SGD

SGD::SGD(std::vector<Tensor> params, Options options) : SGD(std::vector<Group>{{std::move(params), options}}) {}

SGD::SGD(std::vector<Group> groups)
    : Optimizer("SGD", [&] {
        std::vector<std::vector<Tensor>> params;
        for (auto& g : groups) params.push_back(g.params);
        return params;
      }()) {
  for (auto& g : groups) options_.push_back(validate(g.options));
}

SGD::Options& SGD::options(size_t group) {
  check_group(group);
  return options_[group];
}

HyperParams SGD::hyper_params(size_t group) const {
  check_group(group);
  const Options& o = options_[group];
  return {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening}, {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void SGD::set_hyper_params(size_t group, const HyperParams& v) {
  Options o{.lr = get(v, "lr", "SGD", group),
            .momentum = get(v, "momentum", "SGD", group),
            .dampening = get(v, "dampening", "SGD", group),
            .weight_decay = get(v, "weight_decay", "SGD", group),
            .nesterov = get(v, "nesterov", "SGD", group) != 0.0};
  options_[group] = validate(o);
}

std::vector<std::string> SGD::state_buffers(size_t group) const {
  if (options_[group].momentum != 0.0) return {"momentum_buffer"};
  return {};
}

// d = grad + wd · p;  buf = d (first step) or momentum · buf + (1 - dampening) · d;
// p -= lr · (nesterov ? d + momentum · buf : buf)            (torch/optim/sgd.py, _single_tensor_sgd)
void SGD::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_groups(); ++g) {
    const Options& o = options_[g];
    for (size_t i = 0; i < params(g).size(); ++i) {
      Tensor p = params(g)[i];
      Tensor d = grad_for_step(p);
      if (!d.defined()) continue;
      ParamState& st = state_for_step(g, i);
      ++st.step;
      if (o.weight_decay != 0.0) d = add(d, mul(p.detach(), o.weight_decay));
      if (o.momentum != 0.0) {
        auto it = st.buffers.find("momentum_buffer");
        if (it == st.buffers.end()) {
          it = st.buffers.emplace("momentum_buffer", clone(d).contiguous()).first;
        } else {
          it->second.mul_(o.momentum);
          it->second.add_(d, 1.0 - o.dampening);
        }
        d = o.nesterov ? add(d, mul(it->second, o.momentum)) : it->second;
      }
      p.add_(d, -o.lr);
    }
  }
}

// ---- Adam / AdamW

namespace detail {

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamParams& p) {
  std::vector<std::pair<const char*, const Tensor*>> operands{
      {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}};
  if (p.amsgrad) operands.emplace_back("max_exp_avg_sq (amsgrad)", &max_exp_avg_sq);
  for (const auto& [name, t] : operands)
    SG_CHECK(t->defined() && t->shape() == param.shape() && t->dtype() == param.dtype() &&
                 t->device() == param.device(),
             "adam_update: {} must match the parameter {} {} on {}, got {}", name, param.dtype(), param.shape(),
             param.device(),
             t->defined() ? fmt::format("{} {} on {}", t->dtype(), t->shape(), t->device()) : "an undefined tensor");
  Backend& backend = backend_for(param);
  const bool dense = param.is_contiguous() && exp_avg.is_contiguous() && exp_avg_sq.is_contiguous() &&
                     (!p.amsgrad || max_exp_avg_sq.is_contiguous());
  if (!backend.supports(FusedOp::adam_update) || !dense) {
    adam_update_composed(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, p);
    return;
  }
  backend.adam_update(param, grad.contiguous(), exp_avg, exp_avg_sq, max_exp_avg_sq, p);
  for (const Tensor* t : {&param, &exp_avg, &exp_avg_sq}) t->bump_version();
  if (p.amsgrad) max_exp_avg_sq.bump_version();
}

void adam_update_composed(const Tensor& param_in, const Tensor& grad_in, const Tensor& exp_avg_in,
                          const Tensor& exp_avg_sq_in, const Tensor& max_exp_avg_sq_in, const AdamParams& s) {
  NoGradGuard no_grad;
  Tensor param = param_in, exp_avg = exp_avg_in, exp_avg_sq = exp_avg_sq_in, max_exp_avg_sq = max_exp_avg_sq_in;
  Tensor grad = grad_in;
  const double bias_correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  if (s.decoupled_weight_decay) param.mul_(1.0 - s.lr * s.weight_decay);
  else if (s.weight_decay != 0.0) grad = add(grad, mul(param, s.weight_decay));
  exp_avg.mul_(s.beta1);
  exp_avg.add_(grad, 1.0 - s.beta1);
  exp_avg_sq.mul_(s.beta2);
  exp_avg_sq.add_(mul(grad, grad), 1.0 - s.beta2);
  Tensor vhat = exp_avg_sq;
  if (s.amsgrad) {
    max_exp_avg_sq.copy_(where(gt(max_exp_avg_sq, exp_avg_sq), max_exp_avg_sq, exp_avg_sq));
    vhat = max_exp_avg_sq;
  }
  Tensor denom = add(div(sqrt(vhat), full({}, std::sqrt(bias_correction2), {.dtype = vhat.dtype(),
                                                                            .device = vhat.device()})), s.eps);
  param.add_(div(exp_avg, denom), -(s.lr / bias_correction1));
}

}  // namespace detail

Adam::Adam(std::vector<Tensor> params, Options options) : Adam(std::vector<Group>{{std::move(params), options}}) {}

Adam::Adam(std::vector<Group> groups) : Adam("Adam", std::move(groups), false) {}

Adam::Adam(std::string type_name, std::vector<Group> groups, bool decoupled_weight_decay)
    : Optimizer(type_name, [&] {
        std::vector<std::vector<Tensor>> params;
        for (auto& g : groups) params.push_back(g.params);
        return params;
      }()),
      decoupled_weight_decay_(decoupled_weight_decay) {
  for (auto& g : groups) options_.push_back(validate(g.options, type_name));
}

Adam::Options& Adam::options(size_t group) {
  check_group(group);
  return options_[group];
}

HyperParams Adam::hyper_params(size_t group) const {
  check_group(group);
  const Options& o = options_[group];
  return {{"lr", o.lr}, {"beta1", o.betas[0]}, {"beta2", o.betas[1]}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

void Adam::set_hyper_params(size_t group, const HyperParams& v) {
  const std::string& type = type_name();
  Options o{.lr = get(v, "lr", type, group),
            .betas = {get(v, "beta1", type, group), get(v, "beta2", type, group)},
            .eps = get(v, "eps", type, group),
            .weight_decay = get(v, "weight_decay", type, group),
            .amsgrad = get(v, "amsgrad", type, group) != 0.0};
  options_[group] = validate(o, type);
}

std::vector<std::string> Adam::state_buffers(size_t group) const {
  if (options_[group].amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_groups(); ++g) {
    const Options& o = options_[g];
    for (size_t i = 0; i < params(g).size(); ++i) {
      const Tensor& p = params(g)[i];
      Tensor grad = grad_for_step(p);
      if (!grad.defined()) continue;
      ParamState& st = state_for_step(g, i);
      auto buffer = [&](const char* name) -> Tensor& {
        Tensor& b = st.buffers[name];
        if (!b.defined()) b = zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
        return b;
      };
      Tensor& exp_avg = buffer("exp_avg");
      Tensor& exp_avg_sq = buffer("exp_avg_sq");
      Tensor max_exp_avg_sq = o.amsgrad ? buffer("max_exp_avg_sq") : Tensor();
      ++st.step;
      detail::adam_update(p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq,
                          {.lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps,
                           .weight_decay = o.weight_decay, .amsgrad = o.amsgrad,
                           .decoupled_weight_decay = decoupled_weight_decay_, .step = st.step});
    }
  }
}

namespace {
std::vector<Adam::Group> adamw_groups(std::vector<AdamW::Group> groups) {
  std::vector<Adam::Group> out;
  for (auto& g : groups) {
    const AdamWOptions& o = g.options;
    out.push_back({std::move(g.params), {.lr = o.lr, .betas = o.betas, .eps = o.eps,
                                         .weight_decay = o.weight_decay, .amsgrad = o.amsgrad}});
  }
  return out;
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, Options options)
    : AdamW(std::vector<Group>{{std::move(params), options}}) {}

AdamW::AdamW(std::vector<Group> groups) : Adam("AdamW", adamw_groups(std::move(groups)), true) {}

}  // namespace seqgrad::optim
