// The JSON requests of `seqgrad serve` read and checked: a request that is not what the API
// documents (docs/serving.md) becomes a RequestError naming the field, its value and what is valid,
// answered with a 4xx status; nothing invalid reaches the decoder.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/decode.h"

namespace seqgrad::tools::serve {

// A bad request: `status` is 400 (the body is not JSON of the right kind), 413 (too large), 422 (a
// field's value is wrong) or 503 (overloaded); `field` names the member ("src[2]", "beam"), empty
// for the body as a whole.
struct RequestError : std::runtime_error {
  RequestError(int status, std::string field, const std::string& message)
      : std::runtime_error(message), status(status), field(std::move(field)) {}
  int status;
  std::string field;
};

enum class Alignment { none, hard, soft };

// What a sentence's answer carries beyond its translations and scores.
struct ResponseOptions {
  Alignment alignment = Alignment::none;
  bool attention = false;  // the attention weights, one row per output token
  bool explain = false;    // what the explorer shows: weights, energies, per-step alternatives
};

// What a request may ask of one served model.
struct RequestLimits {
  int64_t max_sentences = 64;  // sentences in one request
  int64_t max_beam = 16;       // and never more than the target vocabulary
  int64_t max_len = 100;       // output tokens at most
  // a sentence's UTF-8 bytes at most, checked before it is tokenized (a tokenizer's memory grows
  // with its input: a 400 KB sentence took SentencePiece hundreds of MB)
  int64_t max_src_bytes = 4096;
  // "explain" (every attention map, energy term and alternative, the beam tree): the explorer's
  // request, one sentence
  int64_t max_explain_sentences = 1;
  int64_t max_explain_beam = 5;
  size_t models = 1;           // served checkpoints: "model" is an index below this
};

struct TranslateRequest {
  size_t model = 0;
  std::vector<std::string> src;
  models::DecodeOptions decoding;
  ResponseOptions response;
};

// A served checkpoint as requests name it: its name (the path given) and architecture ("gru" or
// "transformer").
struct ServedName {
  std::string name, architecture;
};

// POST /v1/side_by_side: one sentence through a GRU and a Transformer, each read as a
// /v1/translate request with "explain" for its model.
struct SideBySideRequest {
  std::string src;
  TranslateRequest gru, transformer;
};

// The body as a JSON value: 400 when it is not valid UTF-8, not JSON, nested deeper than a request
// can be (8 levels) or has a key twice in one object. Never recursive, so no body up to the size
// limit can exhaust the stack, and every message is bounded.
nlohmann::json parse_body(const std::string& body);
// POST /v1/translate: {"src": [...], "model", the decoding options the table offers to requests
// (models/seq2seq/decode_options.h: "beam", "nbest", "max_len", "min_len", "length_penalty",
// "length_penalty_type", "coverage_penalty"), "alignment", "attention", "explain"}; each decoding
// option within its range there, capped by `limits` (and the beam by `vocab_size`, the target
// vocabulary of each model); what is left out comes from `defaults` (the command line). Each
// sentence within limits.max_src_bytes (413), an explain request within max_explain_sentences and
// max_explain_beam (422), each message naming the option.
TranslateRequest read_translate_request(const nlohmann::json& body, const std::vector<models::DecodeOptions>& defaults,
                                        const std::vector<int64_t>& vocab_size, const RequestLimits& limits);
// POST /v1/side_by_side: {"src": "a sentence", "models": [a, b] (each a served model's name or index:
// one GRU and one Transformer; left out, the first of each), the decoding options of /v1/translate}.
// 422 naming what was expected when a model is not served, the two share an architecture, or the
// server lacks one of them.
SideBySideRequest read_side_by_side_request(const nlohmann::json& body, const std::vector<ServedName>& served,
                                            const std::vector<models::DecodeOptions>& defaults,
                                            const std::vector<int64_t>& vocab_size, const RequestLimits& limits);
// POST /translator/translate (OpenNMT-py's REST server): [{"src": "...", "id": N}, ...]; every item
// names the same model (id: its index; with one model served any id is taken, as clients written
// for OpenNMT-py's model ids send theirs).
TranslateRequest read_opennmt_request(const nlohmann::json& body, const std::vector<models::DecodeOptions>& defaults,
                                      const RequestLimits& limits);

}  // namespace seqgrad::tools::serve
