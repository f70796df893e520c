// libFuzzer target: the tokenizer and UTF-8 helpers (models/text/tokenizer) and vocabulary JSON
// (models/text/vocab), with the property tokens promise: non-empty valid UTF-8 without spaces.
#include <string_view>

#include <nlohmann/json.hpp>

#include "models/text/tokenizer.h"
#include "models/text/vocab.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqgrad;
  if (size == 0) return 0;
  // The first byte picks the options, the rest is the text.
  const text::TokenizeOptions options{.lowercase = (data[0] & 1) != 0,
                                      .apostrophe = static_cast<text::Apostrophe>((data[0] >> 1) % 3)};
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool valid = !text::find_invalid_utf8(input);
  fuzz::expect_clean([&] { (void)text::decode_utf8(input); });
  fuzz::expect_clean([&] { (void)text::normalize_spaces(input); });
  fuzz::expect_clean([&] {
    // lower-casing keeps valid text valid
    if (valid && text::find_invalid_utf8(text::to_lower(input))) __builtin_trap();
  });
  fuzz::expect_clean([&] {
    std::vector<std::string> tokens = text::tokenize(input, options);
    for (const std::string& t : tokens)
      if (t.empty() || text::find_invalid_utf8(t) || t.find(' ') != std::string::npos) __builtin_trap();
    (void)text::detokenize(tokens);
  });
  fuzz::expect_clean([&] {
    nlohmann::json j = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) (void)text::Vocab::from_json(j);
  });
  return 0;
}
