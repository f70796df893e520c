#include "core/json.h"

#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/core.h>

#include "core/error.h"

namespace seqgrad {
namespace {
constexpr std::size_t kMaxMessageChars = 200;  // of the parser's own explanation
}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view source, int max_depth) {
  using json = nlohmann::json;
  // The keys seen in each open object, innermost last: a key written twice is refused, since
  // nlohmann would keep the last value and silently drop what the writer meant by the first.
  std::vector<std::unordered_set<std::string>> open_objects;
  auto check_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw IOError(fmt::format("{}: JSON nested deeper than {} levels", source, max_depth));
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second)
      throw IOError(fmt::format("{}: the key {} appears twice in one object", source, json_preview(parsed)));
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check_event);
  } catch (const json::exception& e) {
    // the parser quotes the token it stopped in, which can be the whole input
    std::string reason = e.what();
    if (reason.size() > kMaxMessageChars) {
      std::size_t cut = kMaxMessageChars;
      while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
      reason = reason.substr(0, cut) + "...";
    }
    throw IOError(fmt::format("{}: not valid JSON: {}", source, reason));
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
