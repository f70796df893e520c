// Sequential, ModuleList, ModuleDict and Functional: see containers.h.
#include "nn/containers.h"

#include <fmt/ranges.h>

namespace seqgrad::nn {

Functional::Functional(Fn fn, std::string type_name) : Module(std::move(type_name)), fn_(std::move(fn)) {
  SG_CHECK_VALUE(static_cast<bool>(fn_), "{}: the function is empty", this->type_name());
}

namespace detail {

size_t ModuleSequence::checked_index(int64_t index) const {
  const auto n = static_cast<int64_t>(modules_.size());
  SG_CHECK_INDEX(index >= -n && index < n, "{}[{}]: index out of range ({} modules)", type_name(), index, n);
  return static_cast<size_t>(index < 0 ? index + n : index);
}

Module& ModuleSequence::append(std::unique_ptr<Module> module) {
  SG_CHECK(module != nullptr, "{}: cannot append a null module", type_name());
  add_child(std::to_string(modules_.size()), module.get());
  return *modules_.emplace_back(std::move(module));
}

std::vector<Module*> ModuleSequence::modules() const {
  std::vector<Module*> out;
  for (const auto& m : modules_) out.push_back(m.get());
  return out;
}

}  // namespace detail

Tensor Sequential::operator()(const Tensor& x) const {
  Tensor y = x;
  for (const auto& layer : forward_) y = layer(y);
  return y;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, _] : items_)
    if (k == key) return true;
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : items_) out.push_back(k);
  return out;
}

Module& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : items_)
    if (k == key) return *m;
  throw IndexError(fmt::format("ModuleDict: no module under key '{}' (keys: {})", key, fmt::join(keys(), ", ")));
}

void ModuleDict::insert_owned(const std::string& key, std::unique_ptr<Module> module) {
  SG_CHECK(module != nullptr, "ModuleDict: cannot insert a null module under key '{}'", key);
  SG_CHECK_VALUE(!contains(key), "ModuleDict: key '{}' is already taken (by a {})", key, (*this)[key].type_name());
  add_child(key, module.get());  // checks the key is a valid name
  items_.emplace_back(key, std::move(module));
}

}  // namespace seqgrad::nn
