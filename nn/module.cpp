#include "nn/module.h"

#include <functional>

namespace seqgrad::nn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

std::string LoadReport::format() const {
  std::string out;
  auto list = [&](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    out += fmt::format("{}{} ({}):", out.empty() ? "" : "; ", what, keys.size());
    for (const auto& k : keys) out += " " + k;
  };
  list("missing keys", missing_keys);
  list("unexpected keys", unexpected_keys);
  list("shape mismatches", mismatched_keys);
  return out.empty() ? "all keys matched" : out;
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member) {
  SG_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos,
                 "{}: parameter name '{}' must be non-empty and contain no '.'", type_name_, name);
  for (const auto& [n, _] : params_)
    SG_CHECK_VALUE(n != name, "{}: parameter '{}' registered twice", type_name_, name);
  if (member.defined() && !member.requires_grad()) member.requires_grad_(true);
  params_.emplace_back(name, &member);
  return member;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& member) {
  buffers_.emplace_back(name, &member);
  return member;
}

void Module::add_child(const std::string& name, Module* child) {
  SG_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos,
                 "{}: submodule name '{}' must be non-empty and contain no '.'", type_name_, name);
  children_.emplace_back(name, child);
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_)
    if (t->defined()) out.emplace_back(join(prefix, name), *t);
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), out, buffers);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (size_t i = 0; i < out.size(); ++i) {  // breadth-first, no recursion needed
    const auto [prefix, m] = out[i];
    for (const auto& [name, child] : m->children_) out.emplace_back(join(prefix, name), child);
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (Tensor& t : parameters()) t.zero_grad();
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [_, child] : children_) child->apply(fn);
  fn(*this);
}

Module& Module::to(DType dtype) {
  SG_CHECK_DTYPE(is_floating(dtype), "{}.to: modules convert to floating dtypes only, got {}", type_name_, dtype);
  NoGradGuard no_grad;
  for (auto& [_, t] : params_) {
    if (!t->defined() || t->dtype() == dtype) continue;
    *t = t->to(dtype).detach();
    t->requires_grad_(true);
  }
  for (auto& [_, t] : buffers_)
    if (t->defined() && is_floating(t->dtype())) *t = t->to(dtype).detach();
  for (auto& [_, child] : children_) child->to(dtype);
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [_, t] : params_) {
    if (!t->defined() || t->device() == device) continue;
    Tensor grad = t->grad();
    *t = t->to(device).detach();
    t->requires_grad_(true);
    if (grad.defined()) t->set_grad(grad.to(device));
  }
  for (auto& [_, t] : buffers_)
    if (t->defined()) *t = t->to(device).detach();
  for (auto& [_, child] : children_) child->to(device);
  return *this;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : named_parameters()) out[name] = t.detach();
  for (auto& [name, t] : named_buffers()) out[name] = t.detach();
  return out;
}

LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  LoadReport report;
  std::map<std::string, Tensor> mine = state_dict();
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      report.missing_keys.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      report.mismatched_keys.push_back(fmt::format("{}: checkpoint {} vs model {}", name, it->second.shape(), t.shape()));
    }
  }
  for (const auto& [name, _] : state)
    if (!mine.count(name)) report.unexpected_keys.push_back(name);
  SG_CHECK_VALUE(!strict || report.ok(), "{}.load_state_dict: {}", type_name_, report.format());
  NoGradGuard no_grad;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end() || it->second.shape() != t.shape()) continue;
    backend_for(t).copy(it->second.to(t.device()).to(t.dtype()), t);  // a CPU checkpoint into a device model too
    t.bump_version();
  }
  return report;
}

std::string Module::summary() const {
  std::string out;
  for (const auto& [prefix, m] : named_modules()) {
    int depth = prefix.empty() ? 0 : 1 + static_cast<int>(std::count(prefix.begin(), prefix.end(), '.'));
    out += fmt::format("{:{}}{}{}\n", "", 2 * depth, prefix.empty() ? "" : prefix + ": ", m->type_name());
    for (const auto& [name, t] : m->params_)
      if (t->defined())
        out += fmt::format("{:{}}{} {} {}\n", "", 2 * depth + 2, name, t->shape(), t->dtype());
  }
  out += fmt::format("parameters: {}\n", num_parameters());
  return out;
}

}  // namespace seqgrad::nn
