// libFuzzer target: the subword vocabulary path of a checkpoint (models/text/vocab: from_json with
// "kind": "sentencepiece", base64 decoding, SubwordModel::from_serialized, which hands the bytes to
// libsentencepiece through the plugin), then what a loaded vocabulary is used for: encoding a
// sentence and decoding the pieces back.
//
// Input: the first byte picks the form, the rest is the payload. Even: the payload is the model
// proto, the bytes a checkpoint's "model" field decodes to (Vocab::from_subword over
// from_serialized, the tail of from_json: mutations reach SentencePiece's parser without having to
// keep base64 valid). Odd: the payload is the vocabulary JSON text itself (mutations reach the JSON
// checks and the base64 decoder). Seeds: real unigram and BPE models in both forms.
//
// Built only with SentencePiece (tests/fuzz/build.sh enables it: the fuzz build has no ONNX, so the
// plugin loads without RTLD_DEEPBIND, which ASan refuses; models/meson.build).
#include <string_view>

#include "core/json.h"
#include "models/text/subword.h"
#include "models/text/vocab.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace seqgrad;

// A loaded vocabulary must encode text into its own pieces and decode them without failing.
void use(const text::Vocab& vocab) {
  for (std::string_view sentence : {"Ein Mann fährt Fahrrad.", "a b  c", ""}) {
    const std::vector<std::string> pieces = vocab.tokenize(sentence);
    for (int64_t id : vocab.encode(pieces))
      if (id < 0 || id >= vocab.size()) __builtin_trap();
    (void)vocab.detokenize(pieces);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // once: a build whose plugin does not load would "pass" by rejecting every input
  static const bool supported = [] {
    if (!text::subword_supported()) __builtin_trap();
    return true;
  }();
  (void)supported;
  std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  fuzz::expect_clean([&] {
    use(data[0] % 2 == 0 ? text::Vocab::from_subword(text::SubwordModel::from_serialized(std::string(payload)))
                         : text::Vocab::from_json(parse_json(payload, "fuzz input")));
  });
  return 0;
}
