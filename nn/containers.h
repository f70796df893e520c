// Modules that hold modules, as torch.nn's: Sequential (a chain of Tensor -> Tensor layers),
// ModuleList (an indexed list) and ModuleDict (modules by key, in insertion order), plus
// Functional (a Tensor -> Tensor function as a layer). Children are registered under their
// position ("0", "1", ...) or key, so names match PyTorch's ("layers.0.weight"), and
// parameters(), state_dict(), to(), train() and apply() reach them.
//
//   nn::Sequential mlp(std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 4, .out_features = 8}),
//                      [](const Tensor& x) { return tanh(x); },
//                      std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 8, .out_features = 2}));
//   mlp.push_back<nn::Linear>({.in_features = 2, .out_features = 2});  // built in place, returned
//   Tensor y = mlp(x);                                 // state_dict keys: 0.weight, 0.bias, 2.weight, ...
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace seqgrad::nn {

// A Tensor -> Tensor function as a module without parameters (torch::nn::Functional), e.g. an
// activation between the layers of a Sequential.
class Functional : public Module {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  explicit Functional(Fn fn, std::string type_name = "Functional");
  Tensor operator()(const Tensor& x) const { return fn_(x); }

 private:
  Fn fn_;
};

// A module usable as a layer of a Sequential: callable on a Tensor, giving a Tensor.
template <class M>
concept TensorToTensorModule = std::derived_from<M, Module> && requires(const M& m, const Tensor& x) {
  { m(x) } -> std::convertible_to<Tensor>;
};

namespace detail {

// What ModuleList and Sequential share: owned modules registered as "0", "1", ...
class ModuleSequence : public Module {
 public:
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // The module at `index` (negative counts from the end, as in Python); throws when out of range.
  Module& operator[](int64_t index) const { return *modules_[checked_index(index)]; }
  // The same, as its concrete type; throws naming both types when it is another.
  template <class M>
  M& at(int64_t index) const {
    return checked_cast<M>(*modules_[checked_index(index)], std::to_string(index));
  }
  // Each module in order (for range-for).
  std::vector<Module*> modules() const;

 protected:
  using Module::Module;
  size_t checked_index(int64_t index) const;
  // Takes ownership and registers the module under its position.
  Module& append(std::unique_ptr<Module> module);

  template <class M>
  M& checked_cast(Module& m, const std::string& where) const {
    auto* typed = dynamic_cast<M*>(&m);
    SG_CHECK(typed != nullptr, "{}[{}]: the module is a {}, not the type asked for", type_name(), where,
             m.type_name());
    return *typed;
  }

 private:
  std::vector<std::unique_ptr<Module>> modules_;
};

}  // namespace detail

// torch.nn.ModuleList: modules of any type by position; no forward of its own.
class ModuleList : public detail::ModuleSequence {
 public:
  ModuleList() : ModuleSequence("ModuleList") {}
  template <class... Ms>
    requires(std::derived_from<Ms, Module> && ...)
  explicit ModuleList(std::unique_ptr<Ms>... modules) : ModuleList() {
    (push_back(std::move(modules)), ...);
  }

  template <class M>
    requires std::derived_from<M, Module>
  M& push_back(std::unique_ptr<M> module) {
    M& m = *module;
    append(std::move(module));
    return m;
  }
  // Builds the module in place from its options (`push_back<nn::Linear>({.in_features = 4, ...})`).
  template <class M>
    requires std::derived_from<M, Module> && requires { typename M::Options; }
  M& push_back(typename M::Options options) {
    return push_back(std::make_unique<M>(std::move(options)));
  }
  template <class M, class... Args>
    requires std::derived_from<M, Module> && std::constructible_from<M, Args...>
  M& emplace_back(Args&&... args) {
    return push_back(std::make_unique<M>(std::forward<Args>(args)...));
  }
};

// torch.nn.Sequential: layers applied in order, y = layer_n(... layer_1(x)). Each layer is a
// module callable as Tensor(const Tensor&) (Linear, Dropout, Embedding, another Sequential, a
// Functional, your own), or a function, which becomes a Functional.
class Sequential : public detail::ModuleSequence {
 public:
  Sequential() : ModuleSequence("Sequential") {}
  template <class... Layers>
    requires(sizeof...(Layers) > 0)
  explicit Sequential(Layers&&... layers) : Sequential() {
    (push_back(std::forward<Layers>(layers)), ...);
  }

  template <TensorToTensorModule M>
  M& push_back(std::unique_ptr<M> module) {
    M& m = *module;
    append(std::move(module));
    forward_.push_back([&m](const Tensor& x) -> Tensor { return m(x); });
    return m;
  }
  template <TensorToTensorModule M>
    requires requires { typename M::Options; }
  M& push_back(typename M::Options options) {
    return push_back(std::make_unique<M>(std::move(options)));
  }
  template <TensorToTensorModule M, class... Args>
    requires std::constructible_from<M, Args...>
  M& emplace_back(Args&&... args) {
    return push_back(std::make_unique<M>(std::forward<Args>(args)...));
  }
  // A function as a layer (it becomes a Functional child, so positions match PyTorch's, where
  // an activation such as nn.Tanh() takes a position too).
  template <class F>
    requires std::is_invocable_r_v<Tensor, F, const Tensor&> && (!std::is_base_of_v<Module, std::remove_cvref_t<F>>)
  Functional& push_back(F&& fn) {
    return push_back(std::make_unique<Functional>(Functional::Fn(std::forward<F>(fn))));
  }

  // x through every layer in order; an empty Sequential returns x.
  Tensor operator()(const Tensor& x) const;

 private:
  std::vector<std::function<Tensor(const Tensor&)>> forward_;
};

// torch.nn.ModuleDict: modules by string key, kept in insertion order (state_dict names are
// "<key>.<parameter>"). A key must be new (as libtorch's insert); keys contain no '.'.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}

  template <class M>
    requires std::derived_from<M, Module>
  M& insert(const std::string& key, std::unique_ptr<M> module) {
    M& m = *module;
    insert_owned(key, std::move(module));
    return m;
  }
  template <class M>
    requires std::derived_from<M, Module> && requires { typename M::Options; }
  M& insert(const std::string& key, typename M::Options options) {
    return insert(key, std::make_unique<M>(std::move(options)));
  }
  template <class M, class... Args>
    requires std::derived_from<M, Module> && std::constructible_from<M, Args...>
  M& emplace(const std::string& key, Args&&... args) {
    return insert(key, std::make_unique<M>(std::forward<Args>(args)...));
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;  // in insertion order
  // The module under `key`; throws listing the keys when there is none.
  Module& operator[](const std::string& key) const;
  template <class M>
  M& at(const std::string& key) const {
    Module& m = (*this)[key];
    auto* typed = dynamic_cast<M*>(&m);
    SG_CHECK(typed != nullptr, "ModuleDict['{}']: the module is a {}, not the type asked for", key, m.type_name());
    return *typed;
  }

 private:
  void insert_owned(const std::string& key, std::unique_ptr<Module> module);
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> items_;
};

}  // namespace seqgrad::nn
