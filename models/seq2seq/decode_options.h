// How a search decodes (DecodeOptions), and the one declaration table of its options
// (decode_fields()): each option's flag, JSON key, type, range, default, help and the
// architectures that support it. The command line (tools/translator.h), the server's requests
// (tools/serve/request.h), the JSON of `eval --json` and DecodeOptions::validate() all read it, so
// an option has one range and one help text.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/config_table.h"
#include "models/seq2seq/model_config.h"

namespace seqgrad::models {

// How beam search normalises a finished hypothesis's log-probability by its length |Y| (<eos> counted).
enum class LengthPenalty {
  power,  // log_prob / |Y|^alpha (Marian's --normalize, fairseq's --lenpen; alpha 0: none, 1: the mean)
  gnmt,   // log_prob / ((5 + |Y|) / 6)^alpha (Wu et al. 2016; OpenNMT-py's -length_penalty wu)
};
LengthPenalty parse_length_penalty(const std::string& name);  // "power" | "gnmt"; ValueError otherwise
const char* length_penalty_name(LengthPenalty kind);

// Random sampling: one hypothesis per sentence, each token drawn from the model's distribution at
// `temperature` (log-probabilities / temperature, renormalised), cut to the top_k most probable
// tokens and then to the nucleus: the fewest most probable tokens whose probability reaches top_p.
struct SamplingOptions {
  int64_t top_k = 0;         // 0: no top-k cut; 1: greedy
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus cut
  double temperature = 1.0;  // > 0
  uint64_t seed = 0;         // of the Generator decode() makes when not given one
};

struct DecodeOptions {
  int64_t max_len = 50;            // tokens produced at most (then the hypothesis is cut)
  int64_t beam_size = 1;           // 1 = greedy
  double length_penalty = 1.0;     // alpha of length_penalty_kind
  LengthPenalty length_penalty_kind = LengthPenalty::power;
  // beta of the GNMT coverage penalty beta * sum_i log(min(sum_j a_ij, 1)), added to a finished
  // hypothesis's score (a_ij: the attention of target step j on source position i); 0: off
  double coverage_penalty = 0.0;
  int64_t min_len = 0;             // <eos> is not allowed before this many tokens (greedy, sampling, beam)
  int64_t nbest = 1;               // hypotheses beam_search returns per sentence (<= beam_size)
  std::optional<SamplingOptions> sampling = std::nullopt;  // set: decode() samples (beam_size must be 1)
  int64_t top_alternatives = 0;    // > 0: each produced token also carries its step's K most probable tokens
  int64_t bos_id = 1, eos_id = 2;

  // Every option in its range (the table's) and the options consistent with each other (nbest <=
  // beam_size, min_len <= max_len, sampling with beam_size 1); a ValueError naming the member.
  void validate() const;
};

// Where an option is offered: to every command that decodes and to the server's requests
// (`search`), to `translate` and the server's requests (`nbest`), or with random sampling to
// `translate`, `eval` and `attention`, not the server (`sampling`).
enum class DecodeScope { search, nbest, sampling };

// One row of the table.
struct DecodeField {
  std::string member;      // DecodeOptions' field, as library errors name it: "beam_size", "sampling.temperature"
  std::string key;         // the JSON key of the server's requests and of eval --json's "decoding": "beam"
  std::string flag;        // the command-line flag without "--": "beam"
  std::string value_name;  // in --help: "n"
  std::string help;
  std::string default_text;  // --help's default ("1"); "" when it is not a constant (max_len: the checkpoint's)
  FieldType type = FieldType::integer;
  RealRange range;                   // integer and number options (integers: the whole numbers in it)
  std::vector<std::string> choices;  // text options with a few names: the names
  DecodeScope scope = DecodeScope::search;
  std::vector<Architecture> architectures;  // the architectures whose search supports the option
  // The option's value as JSON; null when it does not apply (a sampling option without sampling).
  std::function<nlohmann::json(const DecodeOptions&)> get;
  // "" when `value` is of the option's type and in its range, else what is wrong ("must be in [0,
  // 10]", "must be one of: power, gnmt").
  std::function<std::string(const nlohmann::json& value)> check;
  // Sets the option from a value that check() accepted.
  std::function<void(DecodeOptions&, const nlohmann::json& value)> set;

  bool supports(Architecture a) const;
  bool in_requests() const { return scope != DecodeScope::sampling; }
};
const std::vector<DecodeField>& decode_fields();
// The row with this JSON key; a ValueError for a key no row has (a caller's typo, not input).
const DecodeField& decode_field(std::string_view key);

// The options as JSON, one member per option that applies (keyed as the table says), for reports
// such as eval --json's "decoding".
nlohmann::json decode_options_json(const DecodeOptions& options);

}  // namespace seqgrad::models
