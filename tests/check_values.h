// The test suites' shared checkers: a tensor's elements against expected numbers, two tensors
// against each other, gradcheck reports, and the helpers the module tests build inputs with.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "tools/gradcheck.h"

namespace seqgrad::testing {

// Each element within tol relative to the expected value (absolute below 1); an infinite
// expected value must be met exactly.
inline void check_values(const std::vector<double>& got, const std::vector<double>& expected, double tol = 1e-12) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << expected[i]);
    if (std::isinf(expected[i])) CHECK(got[i] == expected[i]);
    else CHECK(std::abs(got[i] - expected[i]) <= tol * std::max(1.0, std::abs(expected[i])));
  }
}

inline void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  REQUIRE(t.defined());
  check_values(t.to_vector<double>(), expected, tol);
}

// a against b of the same shape: the worst element's difference relative to b (absolute below 1).
inline void check_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  INFO(what);
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  INFO("max relative difference " << worst);
  CHECK(worst <= tol);
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// A gradcheck/gradgradcheck report must pass; its table is printed when it does not.
inline void check_report(const GradcheckReport& report) {
  INFO(report.format());
  CHECK(report.ok());
}

// ---- inputs for float64 gradchecks of ops and modules

inline Tensor randn64(const Shape& shape) { return randn(shape, {.dtype = DType::f64}).requires_grad_(); }

// inputs followed by every parameter of `m` (which share storage with the module, so gradcheck's
// perturbations reach it).
inline std::vector<Tensor> with_parameters(std::vector<Tensor> inputs, const nn::Module& m) {
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  return inputs;
}

inline std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, _] : m.named_parameters()) names.push_back(name);
  return names;
}

}  // namespace seqgrad::testing
