// libFuzzer target: `seqgrad serve`'s request readers (tools/serve/request), every route, every field.
// The first byte picks the route and the server's limits, the rest is the HTTP body. A bad body must
// end as a RequestError with a 4xx status, a bounded message and a bounded field name; an accepted
// one must hold only values within the limits. Anything else (another exception, a crash, a
// sanitizer report, a stack overflow from nesting) is a finding.
#include <string>
#include <vector>

#include "tools/serve/request.h"

namespace {

using namespace seqgrad;
using tools::serve::RequestError;

constexpr size_t kMaxMessage = 600, kMaxField = 64;

void check_accepted(const tools::serve::TranslateRequest& r, const tools::serve::RequestLimits& limits, int64_t vocab) {
  const auto& d = r.decoding;
  if (r.src.empty() || static_cast<int64_t>(r.src.size()) > limits.max_sentences || r.model >= limits.models ||
      d.beam_size < 1 || d.beam_size > std::min(limits.max_beam, vocab) || d.nbest < 1 || d.nbest > d.beam_size ||
      d.min_len > d.max_len || d.max_len > limits.max_len)
    __builtin_trap();
  for (const std::string& sentence : r.src)
    if (static_cast<int64_t>(sentence.size()) > limits.max_src_bytes) __builtin_trap();
  if (r.response.explain && (static_cast<int64_t>(r.src.size()) > limits.max_explain_sentences ||
                             d.beam_size > limits.max_explain_beam))
    __builtin_trap();
  try {
    d.validate();  // every option within its range in the decode options' table
  } catch (const ValueError&) {
    __builtin_trap();
  }
}

// Both halves of an accepted side-by-side request are accepted translate requests of one sentence,
// for a GRU and a Transformer.
void check_accepted(const tools::serve::SideBySideRequest& r, const std::vector<tools::serve::ServedName>& served,
                    const tools::serve::RequestLimits& limits, int64_t vocab) {
  check_accepted(r.gru, limits, vocab);
  check_accepted(r.transformer, limits, vocab);
  if (r.gru.src != std::vector<std::string>{r.src} || r.transformer.src != r.gru.src ||
      served.at(r.gru.model).architecture != "gru" || served.at(r.transformer.model).architecture != "transformer")
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool opennmt = (data[0] & 1) != 0, side_by_side = !opennmt && (data[0] & 0x20) != 0;
  const tools::serve::RequestLimits limits{.max_sentences = 1 + (data[0] >> 1 & 3), .max_beam = 4, .max_len = 20,
                                           .max_src_bytes = 64, .max_explain_sentences = 1, .max_explain_beam = 2,
                                           .models = 1 + static_cast<size_t>(data[0] >> 3 & 1)};
  const std::vector<int64_t> vocab(limits.models, data[0] & 0x10 ? 3 : 50);
  std::vector<models::DecodeOptions> defaults(limits.models);
  for (auto& d : defaults) d.max_len = 10;
  std::vector<tools::serve::ServedName> served = {{"gru.safetensors", "gru"}};  // a Transformer when 2 are served
  if (limits.models > 1) served.push_back({"transformer.safetensors", "transformer"});
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const nlohmann::json parsed = tools::serve::parse_body(body);
    if (side_by_side)
      check_accepted(tools::serve::read_side_by_side_request(parsed, served, defaults, vocab, limits), served, limits,
                     vocab[0]);
    else if (opennmt) check_accepted(tools::serve::read_opennmt_request(parsed, defaults, limits), limits, vocab[0]);
    else check_accepted(tools::serve::read_translate_request(parsed, defaults, vocab, limits), limits, vocab[0]);
  } catch (const RequestError& e) {
    if (e.status < 400 || e.status > 499 || std::string(e.what()).size() > kMaxMessage || e.field.size() > kMaxField)
      __builtin_trap();
  }
  return 0;
}
