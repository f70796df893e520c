// Helpers shared by the libFuzzer targets (tests/fuzz/meson.build; build.sh and run.sh build and run
// them): the readers under test take paths, so each input is written to a per-process scratch file
// first.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"

namespace seqgrad::fuzz {

// A scratch path of this process (one fuzzing process writes it at a time), in
// $SEQGRAD_FUZZ_SCRATCH when set (run.sh points it at a directory it removes afterwards: libFuzzer
// may leave with _Exit, so the process cannot clean up itself), else in /tmp.
inline std::string scratch_path(std::string_view tag) {
  const char* dir = std::getenv("SEQGRAD_FUZZ_SCRATCH");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/seqgrad_fuzz_" + std::to_string(::getpid()) +
         "_" + std::string(tag);
}

// Replaces `path` with `bytes` (plain write: the file is private to this process).
inline void write_scratch(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();  // the harness itself is broken: stop loudly
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) __builtin_trap();
  std::fclose(f);
}

// Runs f; seqgrad::Error is the expected answer to a bad input. Anything else (another
// exception, a crash, a sanitizer report) escapes and is a finding.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace seqgrad::fuzz
