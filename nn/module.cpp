// Module: registration (and the check for unregistered members), traversal, to(), state_dict.
#include "nn/module.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "core/autograd.h"

namespace seqgrad::nn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// ---- construction tracking (for Module::check_registration)
// Every live Module by (thread, construction number): the modules built while another one was
// being constructed are a range of numbers on the thread that built it.
using ConstructionKey = std::pair<std::thread::id, uint64_t>;
std::mutex live_mutex;
std::map<ConstructionKey, Module*>& live_modules() {
  static auto* live = new std::map<ConstructionKey, Module*>();  // never destroyed: modules may outlive statics
  return *live;
}
thread_local uint64_t constructions_on_thread = 0;

void erase_one(std::vector<Module*>& v, const Module* m) {
  v.erase(std::remove(v.begin(), v.end(), m), v.end());
}
}  // namespace

thread_local Module::ChildUnderConstruction* Module::ChildUnderConstruction::current = nullptr;

Module::ChildUnderConstruction::ChildUnderConstruction(Module& parent, const std::string& name)
    : parent_(&parent), name_(name), previous_(current), exceptions_(std::uncaught_exceptions()) {
  current = this;
}

Module::ChildUnderConstruction::~ChildUnderConstruction() {
  if (current == this) current = previous_;  // no Module was built
  if (child_ == nullptr || std::uncaught_exceptions() > exceptions_) return;   // it threw: ~Module cleaned up
  // The child's constructor has returned: everything built since it started is part of it, and
  // the parent's members built by registration end here too.
  child_->construction_end_ = constructions_on_thread;
  parent_->members_end_ = constructions_on_thread;
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)), thread_(std::this_thread::get_id()) {
  construction_ = ++constructions_on_thread;
  if (ChildUnderConstruction* pending = ChildUnderConstruction::current) {  // this is that member: register it
    ChildUnderConstruction::current = pending->previous_;
    pending->parent_->add_child(pending->name_, this);
    pending->child_ = this;
  }
  std::lock_guard lock(live_mutex);
  live_modules()[{thread_, construction_}] = this;
}

Module::~Module() {
  {
    std::lock_guard lock(live_mutex);
    live_modules().erase({thread_, construction_});
  }
  // No dangling registrations: leave the modules that registered this one, and forget children.
  for (Module* parent : parents_)
    std::erase_if(parent->children_, [this](const auto& entry) { return entry.second == this; });
  for (auto& [_, child] : children_) erase_one(child->parents_, this);
}

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

void Module::note_registration_call() {
  // register_* called with a member built before: the constructor body runs, so every member is
  // built. Only the first call counts (a later one may come from elsewhere).
  if (construction_end_ == 0 && std::this_thread::get_id() == thread_) construction_end_ = constructions_on_thread;
}

Tensor& Module::register_parameter(const std::string& name, Tensor& member) {
  note_registration_call();
  return add_parameter(name, member);
}

Tensor Module::register_parameter(const std::string& name, Tensor&& value) {
  check_new_name(name, "parameter");
  return add_parameter(name, owned_.emplace_back(std::move(value)));
}

Tensor& Module::register_buffer(const std::string& name, Tensor& member) {
  note_registration_call();
  return add_buffer(name, member);
}

Tensor Module::register_buffer(const std::string& name, Tensor&& value) {
  check_new_name(name, "buffer");
  return add_buffer(name, owned_.emplace_back(std::move(value)));
}

void Module::check_new_name(const std::string& name, const char* what) const {
  SG_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos,
                 "{}: {} name '{}' must be non-empty and contain no '.'", type_name_, what, name);
  for (const auto* list : {&params_, &buffers_})
    for (const auto& [n, _] : *list)
      SG_CHECK_VALUE(n != name, "{}: {} '{}' registered twice", type_name_, what, name);
}

Tensor& Module::add_parameter(const std::string& name, Tensor& member) {
  check_new_name(name, "parameter");
  if (member.defined() && !member.requires_grad()) member.requires_grad_(true);
  params_.emplace_back(name, &member);
  return member;
}

Tensor& Module::add_buffer(const std::string& name, Tensor& member) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, &member);
  return member;
}

void Module::add_child(const std::string& name, Module* child) {
  SG_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos,
                 "{}: submodule name '{}' must be non-empty and contain no '.'", type_name_, name);
  for (const auto& [n, _] : children_)
    SG_CHECK_VALUE(n != name, "{}: submodule '{}' registered twice", type_name_, name);
  children_.emplace_back(name, child);
  child->parents_.push_back(this);
}

void Module::replace_child(const std::string& name, std::unique_ptr<Module> replacement) {
  auto replacer = replacers_.find(name);
  SG_CHECK_VALUE(replacer != replacers_.end(), "{}: submodule '{}' is not held by a member that can swap it "
                 "(nn::Quantizable)", type_name_, name);
  SG_CHECK_VALUE(replacement != nullptr, "{}: replace_child('{}'): the replacement is null", type_name_, name);
  auto child = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  SG_CHECK_VALUE(child != children_.end(), "{}: no submodule '{}' to replace", type_name_, name);
  Module* old = child->second;
  Module* now = replacement.get();
  for (Module* parent : old->parents_)  // every registration of the old child now names the new one
    for (auto& [_, c] : parent->children_)
      if (c == old) c = now;
  now->parents_ = std::move(old->parents_);
  old->parents_.clear();
  now->training_ = old->training_;
  replacer->second(std::move(replacement));  // the member owns the new child and destroys the old one
}

uint64_t Module::construction_window_end() const {
  if (construction_end_ != 0) return construction_end_;
  return members_end_;  // only register_module<M> members: the window ends after the last one
}

// The modules built while a module of this tree was being constructed (its members, and what its
// constructor built) are found by construction number (live_modules). One of them that holds a
// parameter or buffer the tree does not reach was forgotten: that is an error naming it.
//
// A module's construction is known to span [its number, the end of its constructor] when it was
// built by register_module<M>, and [its number, its first register_* call] otherwise (members
// are all built before the constructor body runs). Not detected: a module that registers nothing
// at all (its parameters() is empty, which optimizers reject), and with only register_module<M>
// members, an old-style member declared after the last of them.
void Module::check_registration() const {
  const auto modules = named_modules();
  std::unordered_set<const Module*> in_tree;
  std::unordered_set<const TensorImpl*> reached;
  for (const auto& [_, m] : modules) {
    in_tree.insert(m);
    for (const auto* list : {&m->params_, &m->buffers_})
      for (const auto& [__, t] : *list)
        if (t->defined()) reached.insert(t->impl());
  }
  std::lock_guard lock(live_mutex);
  const auto& live = live_modules();
  // Deepest first: a part is inside the windows of all its ancestors; name the nearest one.
  for (auto module = modules.rbegin(); module != modules.rend(); ++module) {
    const auto& [path, part_of] = *module;
    const uint64_t end = part_of->construction_window_end();
    if (end == 0) continue;
    auto it = live.upper_bound({part_of->thread_, part_of->construction_});
    for (; it != live.end() && it->first.first == part_of->thread_ && it->first.second <= end; ++it) {
      const Module* m = it->second;
      if (in_tree.count(m)) continue;
      for (const auto* list : {&m->params_, &m->buffers_})
        for (const auto& [name, t] : *list)
          SG_CHECK(!t->defined() || reached.count(t->impl()),
                   "{}: a {} holding '{}' {} was built as part of {}{} but is not registered, so parameters() "
                   "and state_dict() cannot see it; declare it with register_module<{}>(\"name\", ...) or "
                   "call register_module(\"name\", member) in {}'s constructor", type_name_, m->type_name_, name,
                   t->shape(), part_of->type_name_, path.empty() ? "" : " ('" + path + "')", m->type_name_,
                   part_of->type_name_);
    }
  }
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     bool buffers) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_)
    if (t->defined()) out.emplace_back(join(prefix, name), *t);
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), out, buffers);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  check_registration();
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  check_registration();
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

namespace {
// Gives t (and its gradient) `convert`'s result in place: every handle to t, an optimizer's
// included, sees the new data (Tensor::set_data, PyTorch's `param.data = ...`).
// A tensor already in the target form converts to itself (same storage) and is left alone.
void convert_in_place(const Tensor& t, const std::function<Tensor(const Tensor&)>& convert) {
  Tensor grad = t.grad();
  if (Tensor data = convert(t.detach()); data.impl()->storage != t.impl()->storage) t.set_data(data);
  if (!grad.defined()) return;
  if (Tensor g = convert(grad.detach()); g.impl()->storage != grad.impl()->storage) t.set_grad(g);
}
}  // namespace

void Module::convert_tensors(bool floating_only, const std::function<Tensor(const Tensor&)>& convert) {
  NoGradGuard no_grad;
  std::vector<Module*> tree{this};
  for (size_t i = 0; i < tree.size(); ++i)
    for (auto& [_, child] : tree[i]->children_) tree.push_back(child);
  std::unordered_set<const TensorImpl*> done;  // a module registered twice converts once
  for (Module* m : tree)
    for (auto* list : {&m->params_, &m->buffers_})
      for (auto& [_, t] : *list)
        if (t->defined() && (!floating_only || is_floating(t->dtype())) && done.insert(t->impl()).second)
          convert_in_place(*t, convert);
}

Module& Module::to(DType dtype) {
  SG_CHECK_DTYPE(is_floating(dtype), "{}.to: modules convert to floating dtypes only, got {}", type_name_, dtype);
  convert_tensors(/*floating_only=*/true, [dtype](const Tensor& t) { return t.to(dtype); });
  return *this;
}

Module& Module::to(Device device) {
  convert_tensors(/*floating_only=*/false, [device](const Tensor& t) { return t.to(device); });
  return *this;
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters()) out[name] = t.detach();
  for (auto& [name, t] : named_buffers()) out[name] = t.detach();
  return out;
}

LoadReport Module::load_state_dict(const StateDict& state, bool strict) {
  LoadReport report;
  StateDict mine = state_dict();
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
