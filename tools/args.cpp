#include "tools/args.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/core.h>

#include "core/error.h"

namespace seqgrad::tools {

Args& Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                   const std::string& default_value) {
  order_.push_back(name);
  options_[name] = {value_name, help, default_value};
  return *this;
}

Args& Args::hidden_option(const std::string& name, const std::string& value_name, const std::string& help) {
  option(name, value_name, help);
  options_[name].hidden = true;
  return *this;
}

Args& Args::positional(const std::string& name, const std::string& help) {
  positional_name_ = name;
  positional_help_ = help;
  return *this;
}

bool Args::parse(int argc, char** argv) {
  bool options_done = false;  // after "--" every argument is positional
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (!options_done && a == "--") {
      options_done = true;
      continue;
    }
    if (!options_done && (a == "--help" || a == "-h")) {
      fmt::print("{}", help());
      return false;
    }
    bool looks_like_option =
        a.size() >= 2 && a[0] == '-' && (a[1] == '-' || std::isalpha(static_cast<unsigned char>(a[1])));
    if (options_done || !looks_like_option) {
      SG_CHECK_VALUE(!positional_name_.empty(), "unexpected argument '{}' (see --help)", a);
      positionals_.push_back(a);
      continue;
    }
    SG_CHECK_VALUE(a[1] == '-', "unknown option {} (options are spelled --name; see --help{})", a,
                   positional_name_.empty() ? "" : fmt::format("; put -- before a {} that starts with '-'",
                                                               positional_name_));
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos)
      value = name.substr(eq + 1), name = name.substr(0, eq), inline_value = true;
    auto it = options_.find(name);
    SG_CHECK_VALUE(it != options_.end(), "unknown option --{} (see --help)", name);
    if (it->second.value_name.empty()) {
      SG_CHECK_VALUE(!inline_value, "--{} is a flag and takes no value (got '{}')", name, value);
      values_.insert_or_assign(name, std::string(1, '1'));  // not `= "1"`: GCC 12 -Wrestrict false positive
      continue;
    }
    if (!inline_value) {
      SG_CHECK_VALUE(i + 1 < argc, "option --{} needs a value <{}>", name, it->second.value_name);
      // "--epochs --out x" forgot the value; a value that starts with "--" is written --name=--value
      SG_CHECK_VALUE(std::string_view(argv[i + 1]).rfind("--", 0) != 0, "option --{} needs a value <{}>, got "
                     "the option {} (write --{}=VALUE for a value starting with --)", name,
                     it->second.value_name, argv[i + 1], name);
      value = argv[++i];
    }
    SG_CHECK_VALUE(!value.empty(), "option --{} needs a value <{}>, got an empty one", name,
                   it->second.value_name);
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
  SG_CHECK_VALUE(ec == std::errc() && end == s.data() + s.size(), "--{} expects an integer, got '{}'", name, s);
  return v;
}

double Args::get_double(const std::string& name) const {
  std::string s = get(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  SG_CHECK_VALUE(!s.empty() && !std::isspace(static_cast<unsigned char>(s[0])) && end == s.c_str() + s.size() &&
                     std::isfinite(v),
                 "--{} expects a finite number, got '{}'", name, s);
  return v;
}

std::string Args::help() const {
  std::string out = fmt::format("usage: seqgrad {} [options]{}\n\n{}\n\noptions:\n", command_,
                                positional_name_.empty() ? "" : fmt::format(" [{}...]", positional_name_), summary_);
  if (!positional_name_.empty()) out += fmt::format("  {:<26} {}\n", positional_name_, positional_help_);
  for (const std::string& name : order_) {
    const Option& o = options_.at(name);
    if (o.hidden) continue;
    std::string left = o.value_name.empty() ? "--" + name : fmt::format("--{} <{}>", name, o.value_name);
    out += fmt::format("  {:<26} {}{}\n", left, o.help,
                       o.default_value.empty() ? "" : fmt::format(" (default: {})", o.default_value));
  }
  return out;
}

}  // namespace seqgrad::tools
