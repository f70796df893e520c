// JSON read from files (checkpoint metadata, metrics.jsonl, config files): parsed with a nesting
// limit, and shown in error messages by type and a bounded prefix. nlohmann::json::dump() recurses
// once per level, so dumping a hostile 200,000-deep value overflows the stack; these never recurse
// deeper than the limit.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace seqgrad {

// Deeper than anything seqgrad writes (a checkpoint's config nests 3 levels), far below what
// recursion over a value can survive.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; an IOError names `source` ("checkpoint run/last.safetensors: config") for
// invalid JSON, nesting deeper than `max_depth` containers or a key written twice in one object.
// The message is bounded, whatever the input.
nlohmann::json parse_json(std::string_view text, std::string_view source, int max_depth = kMaxJsonDepth);

// A value for an error message: a scalar as JSON ("\"abc\"", 3, true), a container as its type and
// size ("an array of 2 items", "an object of 5 keys"), strings cut at `max_chars`. Never recursive.
std::string json_preview(const nlohmann::json& value, std::size_t max_chars = 60);

}  // namespace seqgrad
