#include "tools/args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace seqgrad::tools {
int64_t max_threads() { return 4 * std::max<int64_t>(1, std::thread::hardware_concurrency()); }

Args& Args::option(const std::string& name, const std::string& value_name, const std::string& help,
                   const std::string& default_value) {
  order_.push_back(name);
  Option o;
  o.value_name = value_name, o.help = help, o.default_value = default_value;
  options_[name] = o;
  return *this;
}

Args& Args::hidden_option(const std::string& name, const std::string& value_name, const std::string& help) {
  option(name, value_name, help);
  options_[name].hidden = true;
  return *this;
}

Args& Args::pair_option(const std::string& name, const std::string& first_name, const std::string& second_name,
                        const std::string& help) {
  option(name, first_name, help);
  options_[name].second_value_name = second_name;
  return *this;
}

Args& Args::list_option(const std::string& name, const std::string& value_name, const std::string& help,
                        const std::string& default_value, std::function<bool(std::string_view)> continues) {
  option(name, value_name, help, default_value);
  options_[name].continues = std::move(continues);
  return *this;
}

Args& Args::positional(const std::string& name, const std::string& help) {
  positional_name_ = name;
  positional_help_ = help;
  return *this;
}

Args& Args::required() {
  SG_CHECK(!order_.empty(), "{}: required() before any option", command_);
  options_[order_.back()].required = true;
  return *this;
}

Args& Args::group(const std::string& name) {
  SG_CHECK(!order_.empty(), "{}: group '{}' before any option", command_, name);
  options_[order_.back()].group = name;
  return *this;
}

bool Args::in_group(const std::string& option, const std::string& name) const {
  auto o = options_.find(option);
  return o != options_.end() && o->second.group == name;
}

Args& Args::deprecated_alias(const std::string& old_name, const std::string& new_name) {
  SG_CHECK(options_.count(new_name), "{}: alias --{} of an undeclared option --{}", command_, old_name, new_name);
  aliases_[old_name] = new_name;
  return *this;
}

Args& Args::deprecated_positional(const std::string& option) {
  SG_CHECK(options_.count(option), "{}: deprecated positional spelling of an undeclared option --{}", command_, option);
  SG_CHECK(positional_name_.empty(), "{}: a positional argument and a deprecated positional spelling", command_);
  positional_alias_ = option;
  return *this;
}

Args& Args::quiet_option() { return option("quiet", "", kQuietHelp); }

bool Args::parse(int argc, char** argv) {
  bool options_done = false;  // after "--" every argument is positional
  bool warned_positional = false;
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
    if (!options_done && a == "--list-options") {
      fmt::print("{}\n", declarations_json());
      return false;
    }
    bool looks_like_option =
        a.size() >= 2 && a[0] == '-' && (a[1] == '-' || std::isalpha(static_cast<unsigned char>(a[1])));
    if ((options_done || !looks_like_option) && !positional_alias_.empty()) {
      if (!warned_positional)
        fmt::print(stderr, "warning: giving the {} without --{} is deprecated and will be removed in the next "
                   "release; use --{} {}\n", positional_alias_, positional_alias_, positional_alias_, a);
      warned_positional = true;
      if (options_.at(positional_alias_).continues) list_values_[positional_alias_].push_back(a);
      SG_CHECK_USAGE(options_.at(positional_alias_).continues || !has(positional_alias_),
                     "--{} given twice ({} and {})", positional_alias_, get(positional_alias_), a);
      if (!has(positional_alias_)) values_[positional_alias_] = a;
      continue;
    }
    if (options_done || !looks_like_option) {
      SG_CHECK_USAGE(!positional_name_.empty(), "unexpected argument '{}'", a);
      positionals_.push_back(a);
      continue;
    }
    SG_CHECK_USAGE(a[1] == '-', "unknown option {} (options are spelled --name; see --help{})", a,
                   positional_name_.empty() ? "" : fmt::format("; put -- before a {} that starts with '-'",
                                                               positional_name_));
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos)
      value = name.substr(eq + 1), name = name.substr(0, eq), inline_value = true;
    if (auto alias = aliases_.find(name); alias != aliases_.end()) {
      fmt::print(stderr, "warning: --{} is deprecated and will be removed in the next release; use --{}\n", name,
                 alias->second);
      name = alias->second;
    }
    auto it = options_.find(name);
    SG_CHECK_USAGE(it != options_.end(), "unknown option --{}{}", name, did_you_mean(name, order_, "--"));
    if (it->second.value_name.empty()) {
      SG_CHECK_USAGE(!inline_value, "--{} is a flag and takes no value (got '{}')", name, value);
      values_.insert_or_assign(name, std::string(1, '1'));  // not `= "1"`: GCC 12 -Wrestrict false positive
      continue;
    }
    if (!inline_value) {
      SG_CHECK_USAGE(i + 1 < argc, "option --{} needs a value <{}>", name, it->second.value_name);
      // "--epochs --out x" forgot the value; a value that starts with "--" is written --name=--value
      SG_CHECK_USAGE(std::string_view(argv[i + 1]).rfind("--", 0) != 0, "option --{} needs a value <{}>, got "
                     "the option {} (write --{}=VALUE for a value starting with --)", name,
                     it->second.value_name, argv[i + 1], name);
      value = argv[++i];
    }
    SG_CHECK_USAGE(!value.empty(), "option --{} needs a value <{}>, got an empty one", name,
                   it->second.value_name);
    if (const auto& continues = it->second.continues) {  // a list option: every value of every occurrence
      std::vector<std::string>& list = list_values_[name];
      list.push_back(value);
      while (i + 1 < argc && argv[i + 1][0] != '-' && continues(argv[i + 1])) list.push_back(argv[++i]);
      values_[name] = list.front();
      continue;
    }
    values_[name] = value;
    if (const std::string& second = it->second.second_value_name; !second.empty()) {
      SG_CHECK_USAGE(!inline_value && i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0 &&
                         argv[i + 1][0] != '\0',
                     "option --{} needs two values: --{} <{}> <{}>", name, name, it->second.value_name, second);
      second_values_[name] = argv[++i];
    }
  }
  for (const std::string& name : order_) {
    const Option& o = options_.at(name);
    SG_CHECK_USAGE(!o.required || has(name), "--{}{} is required", name,
                   o.value_name.empty() ? "" : fmt::format(" <{}>", o.value_name));
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

int64_t Args::get_int(const std::string& name, int64_t min, int64_t max) const {
  std::string s = get(name);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool parsed = ec == std::errc() || ec == std::errc::result_out_of_range;  // out of range: checked below
  SG_CHECK_USAGE(parsed && end == s.data() + s.size(), "--{} expects an integer, got '{}'", name, s);
  bool in_range = ec == std::errc() && v >= min && v <= max;
  constexpr int64_t kLowest = std::numeric_limits<int64_t>::min(), kHighest = std::numeric_limits<int64_t>::max();
  SG_CHECK_USAGE(in_range || max != kHighest, "--{} must be >= {}, got {}", name, min, s);
  SG_CHECK_USAGE(in_range || min != kLowest, "--{} must be <= {}, got {}", name, max, s);
  SG_CHECK_USAGE(in_range, "--{} must be in [{}, {}], got {}", name, min, max, s);
  return v;
}

int Args::get_threads(const std::string& name) const {
  int64_t v = get_int(name, 1);
  SG_CHECK_USAGE(v <= max_threads(), "--{} {} is more than 4 x the {} cores of this machine (at most {})", name, v,
                 max_threads() / 4, max_threads());
  return static_cast<int>(v);
}

double Args::get_double(const std::string& name) const {
  std::string s = get(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  SG_CHECK_USAGE(!s.empty() && !std::isspace(static_cast<unsigned char>(s[0])) && end == s.c_str() + s.size() &&
                     std::isfinite(v),
                 "--{} expects a finite number, got '{}'", name, s);
  return v;
}

std::pair<std::string, std::string> Args::get_pair(const std::string& name) const {
  auto second = second_values_.find(name);
  SG_CHECK(has(name) && second != second_values_.end(), "{}: --{} is not a given pair option", command_, name);
  return {get(name), second->second};
}

std::vector<std::string> Args::get_list(const std::string& name) const {
  auto list = list_values_.find(name);
  return list != list_values_.end() ? list->second : std::vector<std::string>{get(name)};
}

bool Args::is_pair_option(const std::string& name) const {
  auto o = options_.find(name);
  return o != options_.end() && !o->second.second_value_name.empty();
}

std::string Args::help() const {
  std::string out = fmt::format("usage: seqgrad {} [options]{}\n\n{}\n\noptions:\n", command_,
                                positional_name_.empty() ? "" : fmt::format(" [{}...]", positional_name_), summary_);
  if (!positional_name_.empty()) out += fmt::format("  {:<26} {}\n", positional_name_, positional_help_);
  for (const std::string& name : order_) {
    const Option& o = options_.at(name);
    if (o.hidden) continue;
    std::string left = o.value_name.empty() ? "--" + name : fmt::format("--{} <{}>", name, o.value_name);
    if (!o.second_value_name.empty()) left += fmt::format(" <{}>", o.second_value_name);
    if (o.continues) left += "...";
    out += fmt::format("  {:<26} {}{}{}\n", left, o.help, o.required ? " (required)" : "",
                       o.default_value.empty() ? "" : fmt::format(" (default: {})", o.default_value));
  }
  return out;
}

std::string Args::declarations_json() const {
  nlohmann::json options = nlohmann::json::array();
  for (const std::string& name : order_) {
    const Option& o = options_.at(name);
    std::string kind = o.value_name.empty() ? "flag" : !o.second_value_name.empty() ? "pair" : o.continues ? "list" : "value";
    options.push_back({{"name", name}, {"kind", kind}, {"value_name", o.value_name},
                       {"second_value_name", o.second_value_name}, {"default", o.default_value}, {"help", o.help},
                       {"group", o.group}, {"hidden", o.hidden}, {"required", o.required}});
  }
  nlohmann::json j{{"command", command_}, {"options", options}, {"aliases", aliases_}};
  if (!positional_name_.empty()) j["positional"] = positional_name_;
  if (!positional_alias_.empty()) j["deprecated_positional"] = positional_alias_;
  return j.dump();
}

}  // namespace seqgrad::tools
