// Module: named parameters and submodules (registered by name, nested names like
// "encoder.rnn.weight_ih_l0"), train/eval, state_dict, dtype conversion, summary.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace seqgrad::nn {

// What load_state_dict found wrong, by name.
struct LoadReport {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  std::vector<std::string> mismatched_keys;  // "name: checkpoint (2, 3) vs model (3, 3)"
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && mismatched_keys.empty(); }
  std::string format() const;
};

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  // Parameters are registered as pointers to members, so modules stay where they were built.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, const Module*>> named_modules() const;  // self first, as ""
  int64_t num_parameters() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Calls fn on every submodule (children first) and then on this module, like torch's apply.
  void apply(const std::function<void(Module&)>& fn);
  // Converts every floating parameter and buffer (modules are gradchecked in float64).
  Module& to(DType dtype);
  // Moves every parameter (with its gradient) and buffer to `device`. Like to(dtype) it replaces
  // the tensors, so build optimizers afterwards (as in PyTorch).
  Module& to(Device device);

  // Parameters and buffers by their nested names, sharing storage with the module.
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in; with strict, any missing, unexpected or mis-shaped key throws (listing all
  // of them); otherwise the matching keys are loaded and the report says what was skipped.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // One line per module and parameter with shapes and counts, e.g. for `seqgrad train`.
  std::string summary() const;

  // Own parameters and children, for optimizers' parameter groups and for init.
  const std::vector<std::pair<std::string, Tensor*>>& own_parameters() const { return params_; }
  const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }

 protected:
  // Registers a member tensor as a parameter (sets requires_grad) and returns it.
  Tensor& register_parameter(const std::string& name, Tensor& member);
  // Registers a member tensor that is state but not trained (e.g. running statistics).
  Tensor& register_buffer(const std::string& name, Tensor& member);
  template <class M>
  M& register_module(const std::string& name, M& member) {
    add_child(name, &member);
    return member;
  }

 private:
  void add_child(const std::string& name, Module* child);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace seqgrad::nn
