// StateDict: what restores an object, as PyTorch's state_dict(): named tensors and plain values.
// Modules, optimizers, learning-rate schedulers, the GradScaler and early stopping all return one
// and load one, and a checkpoint is one with the others nested in it:
//
//   StateDict ckpt = model.state_dict();           // tensors only ("fc1.weight", ...)
//   ckpt.nest("optimizer", opt.state_dict());      // tensors "optimizer.state.0.exp_avg", ...,
//                                                  // values["optimizer"] = {"type": "Adam", ...}
//   ckpt.values["epoch"] = 7;
//   opt.load_state_dict(ckpt.nested("optimizer"));
//
// The tensors are the map itself, so a StateDict reads as the std::map<std::string, Tensor> that
// Module::state_dict() returned before (a map converts to one, and one slices back to a map).
// `values` is a JSON object: numbers, strings, booleans, null, lists and objects (JSON has no
// inf or NaN: the scheduler writes them as strings). nn::save_checkpoint writes a StateDict to a
// safetensors file: tensors under their names, the values once as JSON in its metadata.
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace seqgrad {

class StateDict : public std::map<std::string, Tensor> {
 public:
  using Tensors = std::map<std::string, Tensor>;

  StateDict() = default;
  // Implicit: a map of tensors is a state dict without values.
  StateDict(Tensors tensors, nlohmann::json values = nlohmann::json::object());
  StateDict(std::initializer_list<Tensors::value_type> tensors) : Tensors(tensors) {}

  nlohmann::json values = nlohmann::json::object();

  // `child`'s tensors as "<name>.<key>" and its values as values[name]. Throws ValueError when
  // either is taken already, or when `name` is empty or holds a '.'.
  void nest(const std::string& name, const StateDict& child);
  // What nest(name, ...) stored: the tensors under "<name>." with the prefix removed, and
  // values[name] (an empty object when absent; whatever was stored, an object or not, otherwise:
  // the loader that reads it checks it).
  StateDict nested(const std::string& name) const;
  // Whether nest(name, ...) stored anything.
  bool has_nested(const std::string& name) const;
};

// A value of a state's `values` read with its type checked: ValueError naming `op` and the key,
// with what was expected and a preview of what is there, for a missing key or another type.
// (The state may come from a hostile file.)
const nlohmann::json& state_value(const nlohmann::json& values, const char* key, const std::string& op);
double state_number(const nlohmann::json& values, const char* key, const std::string& op);
int64_t state_integer(const nlohmann::json& values, const char* key, const std::string& op);
std::string state_string(const nlohmann::json& values, const char* key, const std::string& op);
// ValueError naming `op` unless `values` is a JSON object.
void check_state_object(const nlohmann::json& values, const std::string& op);

}  // namespace seqgrad
