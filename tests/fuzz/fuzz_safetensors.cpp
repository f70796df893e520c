// libFuzzer target: the safetensors parser (core/safetensors), then what a parsed file must satisfy:
// it serializes, and the bytes parse back to the same file. (Converting entries to tensors,
// core/serialize, is fuzzed by the checkpoint target.)
#include <string_view>

#include "core/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace seqgrad;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  safetensors::File file;
  try {
    file = safetensors::parse(bytes, "fuzz input");
  } catch (const IOError&) {
    return 0;  // rejected with a message naming the input: the expected outcome for most inputs
  }
  // Accepted: a round trip must reproduce it exactly.
  safetensors::File again = safetensors::parse(safetensors::serialize(file), "round trip");
  if (!(again == file)) __builtin_trap();
  return 0;
}
