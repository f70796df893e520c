#include "tools/args.h"

#include <charconv>

#include <fmt/core.h>

#include "core/error.h"

namespace seqgrad::tools {

Args& Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                   const std::string& default_value) {
  order_.push_back(name);
  options_[name] = {value_name, help, default_value};
  return *this;
}

Args& Args::positional(const std::string& name, const std::string& help) {
  positional_name_ = name;
  positional_help_ = help;
  return *this;
}

bool Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fmt::print("{}", help());
      return false;
    }
    if (a.rfind("--", 0) != 0) {
      SG_CHECK_VALUE(!positional_name_.empty(), "{}: unexpected argument '{}' (see --help)", command_, a);
      positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
    auto it = options_.find(name);
    SG_CHECK_VALUE(it != options_.end(), "{}: unknown option --{} (see --help)", command_, name);
    if (it->second.value_name.empty()) {
      values_[name] = "1";
      continue;
    }
    if (value.empty()) {
      SG_CHECK_VALUE(i + 1 < argc, "{}: option --{} needs a value <{}>", command_, name, it->second.value_name);
      value = argv[++i];
    }
    values_[name] = value;
  }
  return true;
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::get(const std::string& name) const {
  auto v = values_.find(name);
  if (v != values_.end()) return v->second;
  auto o = options_.find(name);
  SG_CHECK(o != options_.end(), "{}: option --{} was never declared", command_, name);
  return o->second.default_value;
}

int64_t Args::get_int(const std::string& name) const {
  std::string s = get(name);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  SG_CHECK_VALUE(ec == std::errc() && end == s.data() + s.size(), "{}: --{} expects an integer, got '{}'", command_,
                 name, s);
  return v;
}

double Args::get_double(const std::string& name) const {
  std::string s = get(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  SG_CHECK_VALUE(!s.empty() && end == s.c_str() + s.size(), "{}: --{} expects a number, got '{}'", command_, name, s);
  return v;
}

std::string Args::help() const {
  std::string out = fmt::format("usage: seqgrad {} [options]{}\n\n{}\n\noptions:\n", command_,
                                positional_name_.empty() ? "" : fmt::format(" [{}...]", positional_name_), summary_);
  if (!positional_name_.empty()) out += fmt::format("  {:<26} {}\n", positional_name_, positional_help_);
  for (const std::string& name : order_) {
    const Option& o = options_.at(name);
    std::string left = o.value_name.empty() ? "--" + name : fmt::format("--{} <{}>", name, o.value_name);
    out += fmt::format("  {:<26} {}{}\n", left, o.help,
                       o.default_value.empty() ? "" : fmt::format(" (default: {})", o.default_value));
  }
  return out;
}

}  // namespace seqgrad::tools
