// Module: named parameters and submodules (registered by name, nested names like
// "encoder.rnn.weight_ih_l0"), train/eval, state_dict, dtype conversion, summary.
//
// Registration: a module's parameters and submodules are what it registers, nothing else (C++ has
// no reflection to find members). The safe way is to declare and register in one statement,
// so a member cannot exist unregistered:
//   struct Net : nn::Module {
//     Net() : Module("Net") {}
//     nn::Linear fc1 = register_module<nn::Linear>("fc1", {.in_features = 4, .out_features = 8});
//     Tensor scale = register_parameter("scale", ones({8}));
//   };
// The older form (declare the member, then `register_module("fc1", fc1)` in the constructor body)
// still works. Either way, a Module built as part of another one (a member, or anything built
// during its construction) that holds parameters and was not registered anywhere in the tree is
// reported by parameters(), named_parameters(), named_buffers() and state_dict() as an Error that
// names it (see check_registration in module.cpp for what is and is not detected).
#pragma once
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/state_dict.h"
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
  explicit Module(std::string type_name);
  virtual ~Module();
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
  // Converts every floating parameter (with its gradient) and floating buffer, in place: each
  // parameter stays the same tensor (Tensor::set_data), so an optimizer built before keeps
  // updating it, as after PyTorch's Module.to(). Modules are gradchecked in float64.
  Module& to(DType dtype);
  // Moves every parameter (with its gradient) and buffer to `device`, in place like to(dtype).
  Module& to(Device device);

  // Parameters and buffers by their nested names, sharing storage with the module: a StateDict
  // of tensors only (it reads as the std::map<std::string, Tensor> it is).
  StateDict state_dict() const;
  // Copies the tensors in (a module has no values: state.values are ignored); with strict, any
  // missing, unexpected or mis-shaped key throws (listing all of them); otherwise the matching
  // keys are loaded and the report says what was skipped.
  LoadReport load_state_dict(const StateDict& state, bool strict = true);

  // One line per module and parameter with shapes and counts, e.g. for `seqgrad train`.
  std::string summary() const;

  // Own parameters and children, for optimizers' parameter groups and for init.
  const std::vector<std::pair<std::string, Tensor*>>& own_parameters() const { return params_; }
  const std::vector<std::pair<std::string, Module*>>& children() const { return children_; }

  // Swapping a child (nn::quantize_dynamic, nn/quantized.h, as PyTorch's setattr on the parent):
  // whether the child `name` is held by a member that can swap it (an nn::Quantizable), and the
  // swap itself: `replacement` takes the child's place (same name and position, in every module
  // that registered it) and the member takes ownership of it; the old child is destroyed.
  bool is_replaceable(const std::string& name) const { return replacers_.count(name) > 0; }
  void replace_child(const std::string& name, std::unique_ptr<Module> replacement);

 protected:
  // Registers a member tensor as a parameter (sets requires_grad) and returns it.
  Tensor& register_parameter(const std::string& name, Tensor& member);
  // Declares and registers in one: `Tensor weight = register_parameter("weight", randn({4, 3}));`
  // The module keeps the tensor and the member is a handle to the same one; change its values in
  // place (copy_, init::, load_state_dict), never by assigning the member another tensor.
  [[nodiscard]] Tensor register_parameter(const std::string& name, Tensor&& value);
  // Registers a member tensor that is state but not trained (e.g. running statistics).
  Tensor& register_buffer(const std::string& name, Tensor& member);
  [[nodiscard]] Tensor register_buffer(const std::string& name, Tensor&& value);
  // Registers a member module (built before, e.g. in the constructor's initializer list).
  template <class M>
  M& register_module(const std::string& name, M& member) {
    note_registration_call();
    add_child(name, &member);
    return member;
  }
  // Registers a member that holds its module through a pointer and can swap it
  // (nn::Quantizable): its module() now, and replace_child hands it the replacement.
  template <class Slot>
    requires requires(Slot& s, std::unique_ptr<Module> m) {
      { s.module() } -> std::same_as<Module&>;
      s.replace(std::move(m));
    }
  Slot& register_module(const std::string& name, Slot& slot) {
    note_registration_call();
    add_child(name, &slot.module());
    replacers_[name] = [&slot](std::unique_ptr<Module> m) { slot.replace(std::move(m)); };
    return slot;
  }
  // Declares and registers in one: the member is built in place, already registered.
  //   nn::Linear fc = register_module<nn::Linear>("fc", {.in_features = 4, .out_features = 8});
  template <class M>
    requires std::derived_from<M, Module> && requires { typename M::Options; }
  [[nodiscard]] M register_module(const std::string& name, typename M::Options options) {
    ChildUnderConstruction registering(*this, name);
    return M(std::move(options));
  }
  //   nn::Dropout drop = register_module<nn::Dropout>("drop");  (any constructor arguments)
  template <class M, class... Args>
    requires std::derived_from<M, Module> && std::constructible_from<M, Args...> &&
             (!std::is_same_v<std::remove_cvref_t<Args>, M> && ...)
  [[nodiscard]] M register_module(const std::string& name, Args&&... args) {
    ChildUnderConstruction registering(*this, name);
    return M(std::forward<Args>(args)...);
  }

  void add_child(const std::string& name, Module* child);

 private:
  // While alive, the next Module constructed on this thread registers itself as `parent`'s child
  // `name` (that is the member being initialised: guaranteed copy elision builds it in place).
  class ChildUnderConstruction {
   public:
    ChildUnderConstruction(Module& parent, const std::string& name);
    ~ChildUnderConstruction();
    ChildUnderConstruction(const ChildUnderConstruction&) = delete;
    ChildUnderConstruction& operator=(const ChildUnderConstruction&) = delete;

   private:
    friend class Module;
    static thread_local ChildUnderConstruction* current;  // the one in progress on this thread
    Module* parent_;
    std::string name_;
    Module* child_ = nullptr;  // set by the child's Module constructor
    ChildUnderConstruction* previous_;
    int exceptions_;  // std::uncaught_exceptions() at the start: the child's constructor threw if it grew
  };
  friend class ChildUnderConstruction;

  void note_registration_call();
  void check_new_name(const std::string& name, const char* what) const;
  Tensor& add_parameter(const std::string& name, Tensor& member);
  Tensor& add_buffer(const std::string& name, Tensor& member);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool buffers) const;
  void check_registration() const;
  void convert_tensors(bool floating_only, const std::function<Tensor(const Tensor&)>& convert);
  uint64_t construction_window_end() const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::map<std::string, std::function<void(std::unique_ptr<Module>)>> replacers_;  // swappable children
  std::deque<Tensor> owned_;      // register_parameter/register_buffer(name, Tensor&&)'s (stable addresses)
  std::vector<Module*> parents_;  // modules that registered this one (it leaves them when destroyed)
  // Construction tracking for check_registration: this module's construction number on its
  // thread, and the last number that belongs to its construction (0 while unknown).
  std::thread::id thread_;
  uint64_t construction_ = 0;
  uint64_t construction_end_ = 0;  // the end of its constructor (register_module<M>), or its first register_* call
  uint64_t members_end_ = 0;       // after the last member built by register_module<M>
};

}  // namespace seqgrad::nn
