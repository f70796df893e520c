// What every example shares: expect(ok, what) prints one line per claim and counts the failures,
// main returns exit_code() (1 when any claim failed), and max_abs_diff compares two tensors.
// Examples are built against the installed library (tests/install/check_install.sh), so this
// header includes seqgrad as a user's program does: <seqgrad/...>.
#pragma once
#include <fmt/core.h>

#include <string>

#include <seqgrad/ops/ops.h>

namespace examples {

inline int& failures() {
  static int count = 0;
  return count;
}

inline void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures();
}

inline int exit_code() { return failures() == 0 ? 0 : 1; }

// max |a - b| over every element (shapes must broadcast).
inline double max_abs_diff(const seqgrad::Tensor& a, const seqgrad::Tensor& b) {
  return seqgrad::max(seqgrad::abs(seqgrad::sub(a, b))).item();
}

}  // namespace examples
