// Reading and checking the server's JSON requests (tools/serve/request.h).
#include "tools/serve/request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/core.h>

#include "core/error.h"
#include "core/json.h"
#include "core/suggest.h"

namespace seqgrad::tools::serve {
namespace {

constexpr int64_t kExplainAlternatives = 5;  // the explorer's top-k at each step
// A request nests two levels ({"src": [...]}, [{"src": ...}]); a little room beyond that keeps the
// message about a wrong type ("src[0] must be a string, got array") for values a level deeper.
constexpr int kMaxRequestDepth = 8;
constexpr size_t kMaxFieldChars = 40;  // an unknown key up to this long is named as it is
constexpr size_t kMaxShownKey = 64;    // a longer one (or one with control characters) as a bounded preview

// Where `text` stops being UTF-8 (std::string::npos: it is): overlong forms, surrogates and code
// points above U+10FFFF count as invalid, as RFC 3629 says.
size_t invalid_utf8_at(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > text.size()) return i;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(text[i + k]);
      if ((d >> 6) != 0x2) return i;
      cp = cp << 6 | (d & 0x3F);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string::npos;
}

[[noreturn]] void refuse(const std::string& field, const std::string& message) { throw RequestError(422, field, message); }

std::string type_name(const nlohmann::json& v) { return v.is_number_integer() ? "integer" : v.type_name(); }

int64_t integer_in(const nlohmann::json& v, const std::string& field, int64_t min, int64_t max) {
  if (!v.is_number_integer()) refuse(field, fmt::format("{} must be an integer, got {} {}", field, type_name(v), json_preview(v)));
  // an unsigned value above int64's range is stored as unsigned: compare it as such
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max))
    refuse(field, fmt::format("{} = {} is out of range [{}, {}]", field, json_preview(v), min, max));
  const auto n = v.get<int64_t>();
  if (n < min || n > max) refuse(field, fmt::format("{} = {} is out of range [{}, {}]", field, n, min, max));
  return n;
}

double number_in(const nlohmann::json& v, const std::string& field, const models::RealRange& range) {
  if (!v.is_number() || !range.holds(v.get<double>()))
    refuse(field, fmt::format("{} must be a number {}, got {}", field, range.interval(), json_preview(v)));
  return v.get<double>();
}

bool boolean(const nlohmann::json& v, const std::string& field) {
  if (!v.is_boolean()) refuse(field, fmt::format("{} must be true or false, got {} {}", field, type_name(v), json_preview(v)));
  return v.get<bool>();
}

// "\"power\" or \"gnmt\"", "\"a\", \"b\" or \"c\"".
std::string quoted_choices(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i)
    out += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ", choices[i]);
  return out;
}

// The largest value the server takes for a decoding option, within the option's own range: the
// beam by the served model (RequestLimits::max_beam and its target vocabulary), nbest by the beam,
// max_len by RequestLimits::max_len, min_len by max_len; the others as the table says.
double server_cap(const models::DecodeField& f, const models::DecodeOptions& d, int64_t max_beam,
                  const RequestLimits& limits) {
  if (f.key == "beam") return static_cast<double>(max_beam);
  if (f.key == "nbest") return static_cast<double>(d.beam_size);
  if (f.key == "max_len") return static_cast<double>(limits.max_len);
  if (f.key == "min_len") return static_cast<double>(d.max_len);
  return f.range.max;
}

// The request's value of decoding option `f`, checked against its range (capped by the server),
// set on `d`.
void read_decode_option(const nlohmann::json& v, const models::DecodeField& f, double cap, models::DecodeOptions& d) {
  models::RealRange range = f.range;
  range.max = std::min(range.max, cap);
  switch (f.type) {
    case models::FieldType::integer:
      f.set(d, integer_in(v, f.key, range.whole().min, range.whole().max));
      return;
    case models::FieldType::number: f.set(d, number_in(v, f.key, range)); return;
    case models::FieldType::boolean: f.set(d, boolean(v, f.key)); return;
    case models::FieldType::text:
      if (!f.check(v).empty())
        refuse(f.key, fmt::format("{} must be {}, got {}", f.key, quoted_choices(f.choices), json_preview(v)));
      f.set(d, v);
      return;
  }
}

// A client's key as an error names it: as is when short and printable, else quoted, escaped and
// cut to its first characters, at most kMaxShownKey characters in all (an escape such as \u0001
// takes six, so the cut is found by trying shorter prefixes).
std::string shown_key(const std::string& key) {
  const bool printable = std::none_of(key.begin(), key.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  if (key.size() <= kMaxFieldChars && printable) return key;
  std::string shown;
  for (size_t prefix = kMaxFieldChars; prefix > 0; --prefix)
    if ((shown = json_preview(key, prefix)).size() <= kMaxShownKey) break;
  return shown;
}

void check_known_fields(const nlohmann::json& object, const std::vector<std::string>& known, const std::string& where) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    const std::string shown = shown_key(key);
    refuse(shown, fmt::format("unknown field '{}' in {}{} (known: {})", shown, where,
                              shown == key ? did_you_mean(key, known) : "", list));
  }
}

// A source sentence: a string of at most limits.max_src_bytes bytes (413 above: refused before
// anything tokenizes it).
std::string sentence(const nlohmann::json& v, const std::string& field, const RequestLimits& limits) {
  if (!v.is_string()) refuse(field, fmt::format("{} must be a string, got {} {}", field, type_name(v), json_preview(v)));
  const auto& text = v.get_ref<const std::string&>();
  if (static_cast<int64_t>(text.size()) > limits.max_src_bytes)
    throw RequestError(413, field, fmt::format("{} has {} bytes, more than the server's limit of {} for one sentence "
                                               "(--max-src-bytes)", field, text.size(), limits.max_src_bytes));
  return text;
}

size_t model_index(const nlohmann::json& v, const std::string& field, size_t models) {
  return static_cast<size_t>(integer_in(v, field, 0, static_cast<int64_t>(models) - 1));
}

}  // namespace

nlohmann::json parse_body(const std::string& body) {
  if (size_t at = invalid_utf8_at(body); at != std::string::npos)
    throw RequestError(400, "", fmt::format("the request body is not valid UTF-8 (byte {} of {})", at, body.size()));
  try {
    return parse_json(body, "the request body", kMaxRequestDepth);  // never recursive: no body can crash it
  } catch (const IOError& e) {
    throw RequestError(400, "", e.what());
  }
}

TranslateRequest read_translate_request(const nlohmann::json& body, const std::vector<models::DecodeOptions>& defaults,
                                        const std::vector<int64_t>& vocab_size, const RequestLimits& limits) {
  if (!body.is_object())
    throw RequestError(400, "", fmt::format("the request must be a JSON object {{\"src\": [...], ...}}, got {}",
                                            type_name(body)));
  std::vector<std::string> known = {"src", "model"};
  for (const models::DecodeField& f : models::decode_fields())
    if (f.in_requests()) known.push_back(f.key);
  known.insert(known.end(), {"alignment", "attention", "explain"});
  check_known_fields(body, known, "the request");
  TranslateRequest r;
  if (body.contains("model")) r.model = model_index(body["model"], "model", limits.models);
  r.decoding = defaults[r.model];
  if (body.contains("explain")) r.response.explain = boolean(body["explain"], "explain");
  const bool explain = r.response.explain;
  if (!body.contains("src")) refuse("src", "the request has no 'src' (a list of sentences to translate)");
  const nlohmann::json& src = body["src"];
  if (!src.is_array()) refuse("src", fmt::format("src must be a list of strings, got {}", type_name(src)));
  const int64_t max_sentences = explain ? limits.max_explain_sentences : limits.max_sentences;
  if (src.empty() || static_cast<int64_t>(src.size()) > max_sentences)
    refuse("src", fmt::format("src has {} sentences: give 1 to {}{}", src.size(), max_sentences,
                              explain ? " with explain (--max-explain-sentences)" : ""));
  for (size_t i = 0; i < src.size(); ++i) r.src.push_back(sentence(src[i], fmt::format("src[{}]", i), limits));
  const int64_t max_beam = std::min(limits.max_beam, vocab_size[r.model]);
  r.decoding.nbest = 1;  // the command line's --nbest is translate's, not the server's
  for (const models::DecodeField& f : models::decode_fields()) {  // in the table's order: beam before nbest, ...
    if (!f.in_requests()) continue;
    if (body.contains(f.key)) read_decode_option(body[f.key], f, server_cap(f, r.decoding, max_beam, limits), r.decoding);
    if (f.key == "min_len" && r.decoding.min_len > r.decoding.max_len)  // the server's --min-len
      refuse("max_len", fmt::format("max_len = {} is below min_len {} (give a smaller min_len)", r.decoding.max_len,
                                    r.decoding.min_len));
  }
  if (body.contains("alignment") && !body["alignment"].is_null()) {
    const nlohmann::json& v = body["alignment"];
    if (v == "hard") r.response.alignment = Alignment::hard;
    else if (v == "soft") r.response.alignment = Alignment::soft;
    else refuse("alignment", fmt::format("alignment must be \"hard\", \"soft\" or null, got {}", json_preview(v)));
  }
  if (body.contains("attention")) r.response.attention = boolean(body["attention"], "attention");
  if (explain && r.decoding.beam_size > limits.max_explain_beam)
    refuse("beam", fmt::format("beam = {}{} is more than the server gives an explain request (--max-explain-beam {})",
                               r.decoding.beam_size, body.contains("beam") ? "" : " (the server's --beam)",
                               limits.max_explain_beam));
  if (explain) r.decoding.top_alternatives = kExplainAlternatives;
  return r;
}

namespace {

// "'a.safetensors' (gru), 'b.safetensors' (transformer)": the served models, for messages.
std::string served_list(const std::vector<ServedName>& served) {
  std::string out;
  for (const ServedName& m : served) out += fmt::format("{}'{}' ({})", out.empty() ? "" : ", ", m.name, m.architecture);
  return out;
}

// models[i]: a served model's index, or its name.
size_t served_model(const nlohmann::json& v, const std::string& field, const std::vector<ServedName>& served) {
  if (v.is_number_integer()) return model_index(v, field, served.size());
  if (!v.is_string())
    refuse(field, fmt::format("{} must be a served model's name or index, got {} {}", field, type_name(v), json_preview(v)));
  for (size_t i = 0; i < served.size(); ++i)
    if (served[i].name == v.get<std::string>()) return i;
  refuse(field, fmt::format("{}: no served model is named {} (served: {})", field, json_preview(v), served_list(served)));
}

// The GRU's and the Transformer's indices: the request's "models" in either order, else the first
// of each architecture served.
std::pair<size_t, size_t> side_by_side_models(const nlohmann::json& body, const std::vector<ServedName>& served) {
  std::vector<size_t> chosen;
  if (body.contains("models")) {
    const nlohmann::json& m = body["models"];
    if (!m.is_array() || m.size() != 2)
      refuse("models", fmt::format("models must be a list of two served models (a GRU's and a Transformer's name or "
                                   "index), got {}", json_preview(m)));
    for (size_t i = 0; i < 2; ++i) chosen.push_back(served_model(m[i], fmt::format("models[{}]", i), served));
  }
  const auto first = [&](const std::string& architecture) {
    if (body.contains("models")) {
      for (size_t i : chosen)
        if (served[i].architecture == architecture) return i;
      refuse("models", fmt::format("side by side takes one GRU and one Transformer, got '{}' ({}) and '{}' ({})",
                                   served[chosen[0]].name, served[chosen[0]].architecture, served[chosen[1]].name,
                                   served[chosen[1]].architecture));
    }
    for (size_t i = 0; i < served.size(); ++i)
      if (served[i].architecture == architecture) return i;
    refuse("models", fmt::format("side by side needs a GRU and a Transformer checkpoint served; this server serves {}",
                                 served_list(served)));
  };
  return {first("gru"), first("transformer")};
}

}  // namespace

SideBySideRequest read_side_by_side_request(const nlohmann::json& body, const std::vector<ServedName>& served,
                                            const std::vector<models::DecodeOptions>& defaults,
                                            const std::vector<int64_t>& vocab_size, const RequestLimits& limits) {
  if (!body.is_object())
    throw RequestError(400, "", fmt::format("the request must be a JSON object {{\"src\": \"...\", \"models\": "
                                            "[...]}}, got {}", type_name(body)));
  std::vector<std::string> known = {"src", "models"};
  for (const models::DecodeField& f : models::decode_fields())
    if (f.in_requests() && f.key != "nbest") known.push_back(f.key);  // one translation each: no n-best
  check_known_fields(body, known, "the request");
  if (!body.contains("src")) refuse("src", "the request has no 'src' (the sentence to translate with both models)");
  SideBySideRequest r;
  r.src = sentence(body["src"], "src", limits);
  const auto [gru, transformer] = side_by_side_models(body, served);
  nlohmann::json translate = body;  // each model's part: a /v1/translate request with explain
  translate.erase("models");
  translate["src"] = nlohmann::json::array({r.src});
  translate["explain"] = true;
  translate["model"] = gru;
  r.gru = read_translate_request(translate, defaults, vocab_size, limits);
  translate["model"] = transformer;
  r.transformer = read_translate_request(translate, defaults, vocab_size, limits);
  return r;
}

TranslateRequest read_opennmt_request(const nlohmann::json& body, const std::vector<models::DecodeOptions>& defaults,
                                      const RequestLimits& limits) {
  if (!body.is_array())
    throw RequestError(400, "", fmt::format("the request must be a JSON list [{{\"src\": \"...\", \"id\": 0}}, ...], "
                                            "got {}", type_name(body)));
  if (body.empty() || static_cast<int64_t>(body.size()) > limits.max_sentences)
    refuse("", fmt::format("the request has {} items: give 1 to {}", body.size(), limits.max_sentences));
  TranslateRequest r;
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string where = fmt::format("[{}]", i);
    const nlohmann::json& item = body[i];
    if (!item.is_object()) refuse(where, fmt::format("item {} must be an object {{\"src\": \"...\"}}, got {}", where,
                                                     type_name(item)));
    check_known_fields(item, {"src", "id"}, "item " + where);
    if (!item.contains("src")) refuse(where + ".src", fmt::format("item {} has no 'src'", where));
    r.src.push_back(sentence(item["src"], where + ".src", limits));
    if (!item.contains("id")) continue;
    if (limits.models == 1) {  // any integer: the id a client wrote for OpenNMT-py's model
      integer_in(item["id"], where + ".id", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      continue;
    }
    const size_t model = model_index(item["id"], where + ".id", limits.models);
    if (i > 0 && model != r.model)
      refuse(where + ".id", fmt::format("{}.id = {} differs from the first item's id {}: one request, one model", where,
                                        model, r.model));
    r.model = model;
  }
  r.decoding = defaults[r.model];
  r.decoding.nbest = 1;
  return r;
}

}  // namespace seqgrad::tools::serve
