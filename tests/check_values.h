// check_values: a tensor's elements against expected numbers, within a relative tolerance
// (absolute below 1), shared by the core test files.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor.h"

namespace seqgrad::testing {

inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  REQUIRE(t.defined());
  std::vector<double> v = t.to_vector<double>();
  REQUIRE(v.size() == expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << ": " << v[i] << " vs " << expected[i]);
    CHECK(std::abs(v[i] - expected[i]) <= tol * std::max(1.0, std::abs(expected[i])));
  }
}

}  // namespace seqgrad::testing
