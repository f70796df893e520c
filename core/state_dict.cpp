// StateDict (core/state_dict.h): nesting by name prefix, and typed reads of its values.
#include "core/state_dict.h"

#include <cmath>

#include "core/error.h"
#include "core/json.h"

namespace seqgrad {

StateDict::StateDict(Tensors tensors, nlohmann::json values) : Tensors(std::move(tensors)), values(std::move(values)) {}

void StateDict::nest(const std::string& name, const StateDict& child) {
  SG_CHECK_VALUE(!name.empty() && name.find('.') == std::string::npos,
                 "StateDict.nest: name '{}' must be non-empty and contain no '.'", name);
  SG_CHECK_VALUE(values.is_object(), "StateDict.nest('{}'): values must be a JSON object, got {}", name,
                 json_preview(values));
  SG_CHECK_VALUE(!has_nested(name), "StateDict.nest: '{}' is taken already", name);
  for (const auto& [key, t] : child) emplace(name + "." + key, t);
  if (!child.values.is_object() || !child.values.empty()) values[name] = child.values;
}

StateDict StateDict::nested(const std::string& name) const {
  StateDict out;
  const std::string prefix = name + ".";
  for (auto it = lower_bound(prefix); it != end() && it->first.starts_with(prefix); ++it)
    out.emplace(it->first.substr(prefix.size()), it->second);
  if (values.is_object() && values.contains(name)) out.values = values.at(name);
  return out;
}

bool StateDict::has_nested(const std::string& name) const {
  const std::string prefix = name + ".";
  auto it = lower_bound(prefix);
  return (it != end() && it->first.starts_with(prefix)) || (values.is_object() && values.contains(name));
}

void check_state_object(const nlohmann::json& values, const std::string& op) {
  SG_CHECK_VALUE(values.is_object(), "{}: the state's values must be a JSON object, got {}", op, json_preview(values));
}

const nlohmann::json& state_value(const nlohmann::json& values, const char* key, const std::string& op) {
  check_state_object(values, op);
  auto it = values.find(key);
  SG_CHECK_VALUE(it != values.end(), "{}: the state has no '{}'", op, key);
  return *it;
}

double state_number(const nlohmann::json& values, const char* key, const std::string& op) {
  const nlohmann::json& v = state_value(values, key, op);
  SG_CHECK_VALUE(v.is_number(), "{}: the state's '{}' must be a number, got {}", op, key, json_preview(v));
  return v.get<double>();
}

int64_t state_integer(const nlohmann::json& values, const char* key, const std::string& op) {
  const nlohmann::json& v = state_value(values, key, op);
  if (v.is_number_integer()) return v.get<int64_t>();
  // an integral float (2000.0) too: states written as doubles (the GradScaler's, before StateDict)
  const bool integral = v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
                        std::fabs(v.get<double>()) < 9.0e15;
  SG_CHECK_VALUE(integral, "{}: the state's '{}' must be an integer, got {}", op, key, json_preview(v));
  return static_cast<int64_t>(v.get<double>());
}

std::string state_string(const nlohmann::json& values, const char* key, const std::string& op) {
  const nlohmann::json& v = state_value(values, key, op);
  SG_CHECK_VALUE(v.is_string(), "{}: the state's '{}' must be a string, got {}", op, key, json_preview(v));
  return v.get<std::string>();
}

}  // namespace seqgrad
