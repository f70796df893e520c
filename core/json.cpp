#include "core/json.h"

#include <fmt/core.h>

#include "core/error.h"

namespace seqgrad {

nlohmann::json parse_json(std::string_view text, std::string_view source, int max_depth) {
  using json = nlohmann::json;
  auto limit_depth = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw IOError(fmt::format("{}: JSON nested deeper than {} levels", source, max_depth));
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit_depth);
  } catch (const json::exception& e) {
    throw IOError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

std::string json_preview(const nlohmann::json& v, std::size_t max_chars) {
  auto plural = [](std::size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
  if (v.is_array()) return "an array of " + plural(v.size(), "item");
  if (v.is_object()) return "an object of " + plural(v.size(), "key");
  if (v.is_string()) {
    // quoted, with bytes that are not UTF-8 (a file's, or a multi-byte character cut at max_chars)
    // shown as U+FFFD: dump() would throw on them
    auto quoted = [](const std::string& s) {
      return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() <= max_chars) return quoted(s);
    return quoted(s.substr(0, max_chars)) + fmt::format("... ({} bytes)", s.size());
  }
  return v.dump();  // a number, bool or null: one level
}

}  // namespace seqgrad
