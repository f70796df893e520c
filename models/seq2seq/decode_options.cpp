// The decoding options' table (decode_options.h).
#include "models/seq2seq/decode_options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/core.h>

namespace seqgrad::models {

LengthPenalty parse_length_penalty(const std::string& name) {
  if (name == "power") return LengthPenalty::power;
  if (name == "gnmt") return LengthPenalty::gnmt;
  throw ValueError(fmt::format("length penalty '{}' is not one of: power, gnmt", name));
}

const char* length_penalty_name(LengthPenalty kind) { return kind == LengthPenalty::gnmt ? "gnmt" : "power"; }

bool DecodeField::supports(Architecture a) const {
  return std::find(architectures.begin(), architectures.end(), a) != architectures.end();
}

namespace {

// Every search option works for both architectures: the penalties and the explorer read the
// attention rows each step returns (the Transformer's: its last layer's cross-attention, averaged
// over the heads, as OpenNMT-py's coverage penalty reads it).
const std::vector<Architecture> kBoth = {Architecture::gru, Architecture::transformer};

// The two cuts of --sample topk:K | topp:P.
const RealRange kTopK{.min = 1, .max = 1e9};
const RealRange kTopP{.min = 0, .max = 1, .min_open = true};
constexpr const char* kSampleProblem = "expects topk:K (K >= 1) or topp:P (0 < P <= 1)";

// --sample's value as sampling options, or nullopt when it is not topk:K or topp:P in range.
std::optional<SamplingOptions> parse_sample(const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string kind = value.substr(0, colon), number = value.substr(colon + 1);
  char* end = nullptr;
  const double x = std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(x)) return std::nullopt;
  SamplingOptions s;
  if (kind == "topk" && kTopK.holds(x) && x == std::floor(x)) s.top_k = static_cast<int64_t>(x);
  else if (kind == "topp" && kTopP.holds(x)) s.top_p = x;
  else return std::nullopt;
  return s;
}

std::string integer_problem(const nlohmann::json& v, const RealRange& range) {
  const bool fits = v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX));
  if (!fits) return "must be an integer";
  return range.holds(static_cast<double>(v.get<int64_t>())) ? "" : range.text();
}

std::string number_problem(const nlohmann::json& v, const RealRange& range) {
  if (!v.is_number()) return "must be a number";
  return range.holds(v.get<double>()) ? "" : range.text();
}

template <class T>
using Access = T& (*)(DecodeOptions&);

// A row's names, help and scope; the builders below add its type, range and accessors.
DecodeField row(std::string member, std::string key, std::string flag, std::string value_name, std::string help,
                std::string default_text, DecodeScope scope) {
  DecodeField f;
  f.member = std::move(member), f.key = std::move(key), f.flag = std::move(flag), f.value_name = std::move(value_name);
  f.help = std::move(help), f.default_text = std::move(default_text), f.scope = scope;
  f.architectures = kBoth;
  return f;
}

// A sampling option applies only with sampling: null without it, and setting it starts sampling.
bool absent(DecodeScope scope, const DecodeOptions& o) { return scope == DecodeScope::sampling && !o.sampling; }
void start_sampling(DecodeScope scope, DecodeOptions& o) {
  if (absent(scope, o)) o.sampling.emplace();
}

// An int64_t or uint64_t member (the seed) whose whole numbers lie in `range`.
template <class T>
DecodeField integer(DecodeField f, RealRange range, Access<T> at) {
  f.type = FieldType::integer, f.range = range;
  f.get = [scope = f.scope, at](const DecodeOptions& o) {
    return absent(scope, o) ? nlohmann::json() : nlohmann::json(at(const_cast<DecodeOptions&>(o)));
  };
  f.check = [range](const nlohmann::json& v) { return integer_problem(v, range); };
  f.set = [scope = f.scope, at](DecodeOptions& o, const nlohmann::json& v) {
    start_sampling(scope, o);
    at(o) = static_cast<T>(v.get<int64_t>());
  };
  return f;
}

DecodeField number(DecodeField f, RealRange range, Access<double> at) {
  f.type = FieldType::number, f.range = range;
  f.help += fmt::format(" ({})", range.interval());  // --help shows the one range: "(in [0, 10])"
  f.get = [scope = f.scope, at](const DecodeOptions& o) {
    return absent(scope, o) ? nlohmann::json() : nlohmann::json(at(const_cast<DecodeOptions&>(o)));
  };
  f.check = [range](const nlohmann::json& v) { return number_problem(v, range); };
  f.set = [scope = f.scope, at](DecodeOptions& o, const nlohmann::json& v) {
    start_sampling(scope, o);
    at(o) = v.get<double>();
  };
  return f;
}

std::vector<DecodeField> make_table() {
  using S = DecodeScope;
  const double kNone = std::numeric_limits<double>::infinity();
  // log p / length^10 already ranks by length alone; the coverage penalty likewise outweighs the
  // log-probabilities long before 10
  const double kMaxPenalty = 10;
  DecodeField length_penalty_type =
      row("length_penalty_kind", "length_penalty_type", "length-penalty-type", "kind",
          "power: log p / length^alpha | gnmt: log p / ((5 + length) / 6)^alpha (Wu et al. 2016)", "power",
          S::search);
  length_penalty_type.type = FieldType::text;
  length_penalty_type.choices = {"power", "gnmt"};
  length_penalty_type.get = [](const DecodeOptions& o) { return nlohmann::json(length_penalty_name(o.length_penalty_kind)); };
  length_penalty_type.check = [](const nlohmann::json& v) {
    return v == "power" || v == "gnmt" ? "" : "must be one of: power, gnmt";
  };
  length_penalty_type.set = [](DecodeOptions& o, const nlohmann::json& v) {
    o.length_penalty_kind = parse_length_penalty(v.get<std::string>());
  };
  DecodeField sample =
      row("sampling", "sample", "sample", "topk:K|topp:P",
          "random sampling instead of the search: from the K most probable tokens, or from the nucleus of probability "
          "P (one output per sentence; --seed makes it reproducible)", "", S::sampling);
  sample.type = FieldType::text;
  sample.get = [](const DecodeOptions& o) {
    if (!o.sampling) return nlohmann::json();
    return nlohmann::json(o.sampling->top_k > 0 ? fmt::format("topk:{}", o.sampling->top_k)
                                                : fmt::format("topp:{}", o.sampling->top_p));
  };
  sample.check = [](const nlohmann::json& v) {
    return v.is_string() && parse_sample(v.get<std::string>()) ? "" : kSampleProblem;
  };
  sample.set = [](DecodeOptions& o, const nlohmann::json& v) {
    SamplingOptions cut = *parse_sample(v.get<std::string>());
    SamplingOptions& s = o.sampling ? *o.sampling : o.sampling.emplace();
    s.top_k = cut.top_k, s.top_p = cut.top_p;
  };
  return {
      integer<int64_t>(row("beam_size", "beam", "beam", "n", "beam size (1 = greedy)", "1", S::search),
                       {.min = 1, .max = kNone}, [](DecodeOptions& o) -> auto& { return o.beam_size; }),
      integer<int64_t>(row("nbest", "nbest", "nbest", "n",
                           "the n best hypotheses of the beam, with their scores (needs --beam >= n)", "",
                           S::nbest),
                       {.min = 1, .max = kNone}, [](DecodeOptions& o) -> auto& { return o.nbest; }),
      integer<int64_t>(row("max_len", "max_len", "max-len", "n",
                           "longest output in tokens (default: 2 x the checkpoint's truncation + 10, as validation)",
                           "", S::search),
                       {.min = 1, .max = kNone}, [](DecodeOptions& o) -> auto& { return o.max_len; }),
      integer<int64_t>(row("min_len", "min_len", "min-len", "n", "no <eos> before n output tokens", "0", S::search),
                       {.min = 0, .max = kNone}, [](DecodeOptions& o) -> auto& { return o.min_len; }),
      number(row("length_penalty", "length_penalty", "length-penalty", "alpha",
                 "beam score = log p / length^alpha (the power penalty; see --length-penalty-type)", "1.0",
                 S::search),
             {.min = 0, .max = kMaxPenalty}, [](DecodeOptions& o) -> auto& { return o.length_penalty; }),
      length_penalty_type,
      number(row("coverage_penalty", "coverage_penalty", "coverage-penalty", "beta",
                 "beam score + beta x sum over source words of log(min(attention received, 1)) (GNMT's; 0 = off)",
                 "0", S::search),
             {.min = 0, .max = kMaxPenalty}, [](DecodeOptions& o) -> auto& { return o.coverage_penalty; }),
      sample,
      number(row("sampling.temperature", "temperature", "temperature", "t",
                 "with --sample: sample from the distribution at temperature t", "1.0", S::sampling),
             {.min = 0, .max = kNone, .min_open = true},
             [](DecodeOptions& o) -> auto& { return o.sampling->temperature; }),
      integer<uint64_t>(row("sampling.seed", "seed", "seed", "n", "with --sample: the seed of the draws", "0",
                            S::sampling),
                        {.min = 0, .max = kNone}, [](DecodeOptions& o) -> auto& { return o.sampling->seed; }),
  };
}

}  // namespace

const std::vector<DecodeField>& decode_fields() {
  static const std::vector<DecodeField> table = make_table();
  return table;
}

const DecodeField& decode_field(std::string_view key) {
  for (const DecodeField& f : decode_fields())
    if (f.key == key) return f;
  throw ValueError(fmt::format("decode_field: no decoding option has the key '{}'", key));
}

nlohmann::json decode_options_json(const DecodeOptions& options) {
  nlohmann::json j = nlohmann::json::object();
  for (const DecodeField& f : decode_fields())
    if (nlohmann::json v = f.get(options); !v.is_null()) j[f.key] = std::move(v);
  return j;
}

void DecodeOptions::validate() const {
  // sampling's cuts first: the library holds them as two numbers, where --sample gives one of them
  if (sampling) {
    SG_CHECK_VALUE(sampling->top_k >= 0 && sampling->top_k <= kTopK.max,
                   "DecodeOptions: sampling.top_k {} must be in [0, {}] (0: no cut)", sampling->top_k, kTopK.max);
    SG_CHECK_VALUE(kTopP.holds(sampling->top_p), "DecodeOptions: sampling.top_p {} {}", sampling->top_p, kTopP.text());
  }
  for (const DecodeField& f : decode_fields()) {
    const nlohmann::json v = f.get(*this);
    if (v.is_null()) continue;
    if (std::string problem = f.check(v); !problem.empty())
      throw ValueError(fmt::format("DecodeOptions: {} {} {}", f.member, v.is_string() ? v.get<std::string>() : v.dump(),
                                   problem));
  }
  SG_CHECK_VALUE(nbest <= beam_size, "DecodeOptions: nbest {} must be in [1, beam_size {}]", nbest, beam_size);
  SG_CHECK_VALUE(min_len <= max_len, "DecodeOptions: min_len {} must be in [0, max_len {}]", min_len, max_len);
  SG_CHECK_VALUE(top_alternatives >= 0, "DecodeOptions: top_alternatives {} must be >= 0 (0: off)", top_alternatives);
  SG_CHECK_VALUE(!sampling || beam_size == 1,
                 "DecodeOptions: sampling draws one hypothesis per sentence, so beam_size {} must be 1", beam_size);
}

}  // namespace seqgrad::models
