// What the declaration tables of the translator's configs share (the run's, config.h; the model's,
// model_config.h): a row type over any config struct, its builders (one per value type, each with
// its JSON type check and its range), the range types and the error that names a field.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"

namespace seqgrad::models {

// A setting of the wrong type or out of its range. what(): "config field lr = -1: must be > 0".
class ConfigError : public ValueError {
 public:
  ConfigError(std::string field, std::string value, std::string problem)
      : ValueError(value.empty() ? fmt::format("config field {} {}", field, problem)
                                 : fmt::format("config field {} = {} {}", field, value, problem)),
        field_(std::move(field)),
        value_(std::move(value)),
        problem_(std::move(problem)) {}
  const std::string& field() const { return field_; }      // the JSON key: "lr", "model.dropout"
  const std::string& value() const { return value_; }      // as given (bounded: core/json.h's json_preview)
  const std::string& problem() const { return problem_; }  // "must be > 0"

 private:
  std::string field_, value_, problem_;
};

enum class FieldType { integer, number, boolean, text };

// [min, max] of whole numbers; max = int64's largest means no upper end.
struct IntRange {
  int64_t min = 0, max = std::numeric_limits<int64_t>::max();
  bool holds(int64_t v) const { return v >= min && v <= max; }
  std::string text() const {  // "must be >= 1", "must be in [1, 64]"
    if (max == std::numeric_limits<int64_t>::max()) return fmt::format("must be >= {}", min);
    return fmt::format("must be in [{}, {}]", min, max);
  }
};

// A real range: [min, max] with either end open; max infinite when absent.
struct RealRange {
  double min = 0, max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;
  bool holds(double v) const {
    return std::isfinite(v) && (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
  std::string interval() const {  // "> 0", "in [0, 1)"
    if (std::isinf(max)) return fmt::format("{} {}", min_open ? ">" : ">=", min);
    return fmt::format("in {}{}, {}{}", min_open ? "(" : "[", min, max, max_open ? ")" : "]");
  }
  std::string text() const { return "must be " + interval(); }  // "must be > 0", "must be in [0, 1)"
  // The whole numbers in it, for an integer field (a closed end as it is; no end: int64's).
  IntRange whole() const {
    constexpr int64_t kLowest = std::numeric_limits<int64_t>::min(), kHighest = std::numeric_limits<int64_t>::max();
    const double low = min_open ? std::floor(min) + 1 : std::ceil(min), high = max_open ? std::ceil(max) - 1 : std::floor(max);
    return {.min = std::isinf(min) ? kLowest : static_cast<int64_t>(low),
            .max = std::isinf(max) || high >= 9.2e18 ? kHighest : static_cast<int64_t>(high)};
  }
};

// One row of a config's table: a field of `Config`, its JSON key, its flag and its checks.
template <class Config>
struct Field {
  std::string key;         // JSON key
  std::string flag;        // command-line flag without "--"; "" when no flag sets it (derived or data fields)
  std::string value_name;  // in --help ("n", "x", "kind"); "" for a boolean (--flag / --no-flag)
  std::string help;
  FieldType type = FieldType::text;
  std::function<nlohmann::json(const Config&)> get;
  // Sets the field from JSON: a ConfigError when the type is wrong or the value is not one of the choices.
  std::function<void(Config&, const nlohmann::json&)> set;
  // "" when the value is in range, else what is wrong ("must be in [0, 1)").
  std::function<std::string(const Config&)> check;
};

// The row builders of a table over `Config`: each reads and writes its member through an accessor
// (a captureless lambda returning a reference to it).
template <class Config>
struct FieldRows {
  template <class T>
  using Access = T& (*)(Config&);

  template <class T>
  static T& field_of(Access<T> at, const Config& c) {
    return at(const_cast<Config&>(c));  // the accessors name a member; reading it does not modify
  }

  [[noreturn]] static void wrong_type(const std::string& key, const nlohmann::json& v, const char* expected) {
    throw ConfigError(key, json_preview(v), fmt::format("must be {}", expected));
  }

  static Field<Config> row(std::string key, std::string flag, std::string value_name, std::string help,
                           FieldType type) {
    Field<Config> f;
    f.key = std::move(key), f.flag = std::move(flag), f.value_name = std::move(value_name), f.help = std::move(help);
    f.type = type;
    return f;
  }

  // An int64_t or uint64_t member (the seed).
  template <class T>
  static Field<Config> integer_field(std::string key, std::string flag, std::string help, Access<T> at, IntRange range) {
    Field<Config> f = row(key, std::move(flag), "n", std::move(help), FieldType::integer);
    f.get = [at](const Config& c) { return nlohmann::json(field_of(at, c)); };
    // nlohmann converts 1e300 to an integer with undefined behaviour: only JSON integers that fit are read
    f.set = [at, key](Config& c, const nlohmann::json& v) {
      const bool fits = std::is_signed_v<T> ? v.is_number_integer() &&
                                                  (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX))
                                            : v.is_number_unsigned();
      if (!fits) wrong_type(key, v, std::is_signed_v<T> ? "an integer" : "an integer >= 0");
      at(c) = v.get<T>();
    };
    f.check = [at, range](const Config& c) -> std::string {
      T v = field_of(at, c);
      return std::is_unsigned_v<T> || range.holds(static_cast<int64_t>(v)) ? "" : range.text();
    };
    return f;
  }
  static Field<Config> integer(std::string key, std::string flag, std::string help, Access<int64_t> at,
                               IntRange range) {
    return integer_field<int64_t>(std::move(key), std::move(flag), std::move(help), at, range);
  }
  static Field<Config> integer(std::string key, std::string flag, std::string help, Access<uint64_t> at,
                               IntRange range) {
    return integer_field<uint64_t>(std::move(key), std::move(flag), std::move(help), at, range);
  }

  static Field<Config> number(std::string key, std::string flag, std::string help, Access<double> at,
                              RealRange range) {
    Field<Config> f = row(key, std::move(flag), "x", std::move(help), FieldType::number);
    f.get = [at](const Config& c) { return nlohmann::json(field_of(at, c)); };
    f.set = [at, key](Config& c, const nlohmann::json& v) {
      if (!v.is_number()) wrong_type(key, v, "a number");
      at(c) = v.get<double>();
    };
    f.check = [at, range](const Config& c) { return range.holds(field_of(at, c)) ? "" : range.text(); };
    return f;
  }

  static Field<Config> boolean(std::string key, std::string flag, std::string help, Access<bool> at) {
    Field<Config> f = row(key, std::move(flag), "", std::move(help), FieldType::boolean);
    f.get = [at](const Config& c) { return nlohmann::json(field_of(at, c)); };
    f.set = [at, key](Config& c, const nlohmann::json& v) {
      if (!v.is_boolean()) wrong_type(key, v, "true or false");
      at(c) = v.get<bool>();
    };
    f.check = [](const Config&) { return std::string(); };
    return f;
  }

  // A string; `check` returns "" or the problem.
  static Field<Config> text(std::string key, std::string flag, std::string value_name, std::string help,
                            Access<std::string> at, std::function<std::string(const std::string&)> check) {
    Field<Config> f = row(key, std::move(flag), std::move(value_name), std::move(help), FieldType::text);
    f.get = [at](const Config& c) { return nlohmann::json(field_of(at, c)); };
    f.set = [at, key](Config& c, const nlohmann::json& v) {
      if (!v.is_string()) wrong_type(key, v, "a string");
      at(c) = v.get<std::string>();
    };
    f.check = [at, check](const Config& c) { return check(field_of(at, c)); };
    return f;
  }

  // One of a few names, held as an enum (`name` and `parse` convert; parse throws ValueError).
  template <class E>
  static Field<Config> choice(std::string key, std::string flag, std::string value_name, std::string help,
                              Access<E> at, const char* (*name)(E), E (*parse)(const std::string&),
                              std::string choices) {
    Field<Config> f = row(key, std::move(flag), std::move(value_name), std::move(help), FieldType::text);
    f.get = [at, name](const Config& c) { return nlohmann::json(name(field_of(at, c))); };
    f.set = [at, key, parse, choices](Config& c, const nlohmann::json& v) {
      if (!v.is_string()) wrong_type(key, v, "a string");
      try {
        at(c) = parse(v.get<std::string>());
      } catch (const ValueError&) {
        throw ConfigError(key, json_preview(v), "must be one of: " + choices);
      }
    };
    f.check = [](const Config&) { return std::string(); };  // parse admitted only valid names
    return f;
  }
};

}  // namespace seqgrad::models
