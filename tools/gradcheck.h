// Finite-difference gradient checks: compare the analytical gradients autograd computes with
// central differences, in float64, and report the worst elements instead of a bool.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace seqgrad {

// The function under test: inputs -> one floating tensor of any shape.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // an element passes when |analytical - numerical| <= atol + rtol * |numerical|
  double rtol = 1e-3;
  std::string name = "fn";       // op name used in the report
  uint64_t seed = 0x5eed;        // seeds the fixed random weights that reduce the output to a scalar
  int worst = 5;                 // elements listed per input in the report
  bool allow_float32 = false;    // float32 inputs are refused unless set (then loosen eps/tolerances)
  bool check_zero_grad = true;   // a zero upstream gradient must give zero gradients
  bool check_repeat = true;      // a second backward must give identical gradients
};

// One element of one input: where it is and how far the two gradients are apart.
struct GradcheckElement {
  std::vector<int64_t> index;  // multi-index into the input
  double numerical = 0;
  double analytical = 0;
  double abs_err = 0;
  double rel_err = 0;  // abs_err / max(|numerical|, atol): tiny gradients do not blow it up
};

struct GradcheckInput {
  int input = 0;  // index into the inputs vector
  Shape shape;
  DType dtype = DType::f64;
  double max_abs_err = 0;
  double max_rel_err = 0;
  int failed_elements = 0;
  std::vector<GradcheckElement> worst;  // worst first (by error over tolerance)
};

struct GradcheckReport {
  std::string op;
  double eps = 0, atol = 0, rtol = 0;  // the options the check ran with
  std::vector<GradcheckInput> inputs;  // one per input that requires grad
  std::vector<std::string> failures;   // every failed check, one line each
  bool ok() const { return failures.empty(); }
  double max_abs_err() const;
  double max_rel_err() const;
  // A multi-line report: a summary, then per input the worst elements as a table.
  std::string format() const;
};

// Checks d sum(w * fn(inputs)) / d inputs[i] for every input that requires grad (float64
// leaves; integer and bool inputs are passed through). w is a fixed random tensor, so every
// output element counts. Inputs are perturbed in place through their strides (non-contiguous
// inputs are fine) and restored; inputs whose elements overlap in memory (expanded) are refused.
// Also checks: each gradient has its input's shape and dtype, a zero upstream gradient gives
// zero gradients, and backward twice gives identical gradients.
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions options = {});

// Second order: gradchecks (inputs, dy) -> autograd::grad(fn(inputs), inputs, dy, create_graph),
// with dy a random upstream gradient of the output's shape that is itself checked.
GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              GradcheckOptions options = {});

}  // namespace seqgrad
