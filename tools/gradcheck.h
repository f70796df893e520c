// Finite-difference gradient checks: compare the analytical gradients autograd computes with
// central differences, in float64 (or float32 and bf16, each with its own step and tolerances),
// and report the worst elements, the non-differentiable points found and every invariant instead
// of a bool. How to use it on your own op: docs/adding-an-op.md.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace seqgrad {

// The function under test: inputs -> one floating tensor of any shape.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;
// An op with several outputs: inputs -> its outputs. Floating outputs are checked (each reduced
// with its own random weights); integer and bool outputs (indices) are ignored.
using GradcheckMultiFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// fn as a function with one output.
GradcheckMultiFn one_output(GradcheckFn fn);

// How the numerical Jacobian is found.
enum class GradcheckMode : uint8_t {
  // Central differences per input element: 2 forwards per element. The default.
  full,
  // Random projections vᵀJu (PyTorch's fast_mode, repeated): per input, fast_projections()
  // independent directions u, each two forwards and no backward beyond one per output, each
  // passing when |analytical - numerical| <= atol + rtol |numerical| (a tolerance of the
  // projection's size). The count is chosen so that one element wrong by its gradient's rms is
  // missed with probability at most fast_miss_target(). An input whose projection differs is
  // checked again in full (GradcheckOptions::fast_recheck), which names the element.
  fast,
  // The full Jacobian, with the columns that never touch the same output perturbed together (the
  // sparsity GradcheckOptions::jacobian declares): 2 forwards per colour, after the declaration is
  // verified (2 log2(rows) forwards: every output must stay put while only other rows move; a
  // false declaration fails). Inputs the declaration does not fit (a shape other than the
  // outputs') fall back to full.
  compressed,
};
const char* mode_name(GradcheckMode mode);

// The precision a check runs in, each with the step and tolerances a difference quotient in it
// can resolve (precision_defaults): float64 (PyTorch's gradcheck values), float32, and bf16, where
// the inputs and every perturbed value are bfloat16 numbers held in float32 tensors (tensors have
// no 16-bit dtype; the op runner adds bf16 autocast, so matrix products round as in training).
enum class GradcheckPrecision : uint8_t { f64, f32, bf16 };
const char* precision_name(GradcheckPrecision precision);  // "float64", "float32", "bf16"
struct GradcheckTolerances {
  double eps, atol, rtol;
};
GradcheckTolerances precision_defaults(GradcheckPrecision precision);

// Fast mode's guarantee. One projection misses an element wrong by δ with probability
// (2/π) atan(rtol ‖g‖ / |δ|) (u_e / z is Cauchy: the element's direction against the
// projection's own size); for δ the rms of the gradient, ‖g‖/|δ| = √n. Independent projections
// miss together with that probability to the power of their number.
double fast_miss_target(GradcheckPrecision precision);  // 1e-6 in float64, 1e-3 in float32 and bf16
double fast_miss_probability(int64_t n, double rtol, int projections);
// The fewest projections whose miss probability is at most `target` (at least 1; INT_MAX where
// no number does, a tolerance so loose one projection never fails: then fast mode checks in full).
int fast_projections(int64_t n, double rtol, double target);

// The Jacobian's declared sparsity (for GradcheckMode::compressed), for inputs of the outputs' shape.
struct Jacobian {
  enum class Kind : uint8_t {
    dense,        // anything may depend on anything: no compression
    elementwise,  // output element i depends only on input element i: diagonal, 1 colour
    rowwise,      // output element i depends on the input's elements in i's row along `dim`
                  // (softmax-like): block-diagonal, one colour per position in the row
  };
  Kind kind = Kind::dense;
  int dim = -1;  // rowwise: the dimension the rows run along

  static Jacobian dense() { return {}; }
  static Jacobian elementwise() { return {.kind = Kind::elementwise}; }
  static Jacobian rowwise(int dim) { return {.kind = Kind::rowwise, .dim = dim}; }
};

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;  // an element passes when |analytical - numerical| <= atol + rtol * |numerical|
  double rtol = 1e-3;
  std::string name = "fn";       // op name used in the report
  uint64_t seed = 0x5eed;        // seeds the random weights (v) and, in fast mode, the directions (u)
  int worst = 5;                 // elements listed per input in the report
  bool allow_float32 = false;    // float32 inputs are refused unless set (then loosen eps/tolerances)
  bool round_to_bf16 = false;    // the inputs hold bfloat16 values: perturbed values are rounded to it too
  bool check_zero_grad = true;   // a zero upstream gradient must give zero gradients
  bool check_repeat = true;      // a second backward must give the same gradients
  GradcheckMode mode = GradcheckMode::full;
  Jacobian jacobian = {};        // declared sparsity, used by GradcheckMode::compressed
  // A second backward may differ by this much per element: for ops declared nondeterministic
  // (atomics, a reduction order that varies). 0 demands identical gradients.
  double nondet_tol = 0;
  bool check_inputs_unchanged = true;  // forward and backward must not write into their inputs
  // Non-differentiable points. A failing element is differenced again at half and a quarter of
  // the step on each side: curvature's jump between the one-sided slopes shrinks with the step, a
  // kink's stays. A kink (relu at 0, a max tie, a clamp bound) is confirmed when the jump left after
  // Richardson extrapolation exceeds twice the tolerance and the analytical gradient lies between
  // the two slopes; any other failing element is judged again on the extrapolated difference. A confirmed kink is
  // set aside (reported, not failed) when the op declares that it has kinks (OpCase::kinks or
  // kKinksAtTies); in an op that declares none it fails, named. move_kinks: confirmed kinks are
  // moved kink_margin up and the whole check runs again there (the caller's input tensors change;
  // the report lists every move).
  bool declares_kinks = false;
  bool move_kinks = false;
  double kink_margin = 0.1;
  // Every evaluation of fn starts from the default generator's state at the first one, so an op
  // that draws random numbers (dropout) sees the same draws for every perturbation (RNG replay).
  bool replay_rng = true;
  // Fast mode: an input whose projection differs is checked again in full, which names the
  // element (true), or fails on the projection alone (false: for inputs too large for full mode).
  bool fast_recheck = true;
};

// One element of one input: where it is and how far the two gradients are apart. In fast mode
// one "element" is a projection vᵀJu of an (input, output) pair, its index {projection number}.
struct GradcheckElement {
  std::vector<int64_t> index;  // multi-index into the input
  double numerical = 0;
  double analytical = 0;
  double abs_err = 0;
  double rel_err = 0;  // abs_err / max(|numerical|, atol): tiny gradients do not blow it up
  double tolerance = 0;  // the element fails when abs_err exceeds it: atol + rtol |numerical|
  double value = 0;      // the input's value there (fast mode: none)
  // A non-differentiable point: the slopes of one-sided differences to the left and the right
  // (extrapolated to a zero step); declared: the op declares kinks (set aside), else it fails.
  double left = 0, right = 0;
  bool declared = true;
  bool refined = false;  // numerical: extrapolated from half and a quarter of the step (it failed at the step)
};

struct GradcheckInput {
  int input = 0;    // index into the inputs vector
  std::string label;  // "input 0"; in second order, "random dy" for the upstream gradients checked too
  int output = -1;  // fast mode: the output of the pair; -1: every output (weighted and summed)
  Shape shape;
  DType dtype = DType::f64;
  GradcheckMode method = GradcheckMode::full;  // how this input's numerical gradient was found
  int colours = 0;                             // compressed: forward pairs spent on this input
  int projections = 0;                         // fast: independent projections of this input
  double max_abs_err = 0;
  double max_rel_err = 0;
  int failed_elements = 0;
  std::vector<GradcheckElement> worst;  // worst first (by error over tolerance)
  std::vector<GradcheckElement> kinks;  // at a non-differentiable point: reported, not failed
};

// One invariant and whether it held: each gets its own line in the report.
struct GradcheckCheck {
  std::string name = {};    // "backward twice gives the same gradients", ...
  bool ok = true;
  bool ran = true;          // false: skipped (switched off)
  std::string detail = {};  // every violation (one per line), or why it was skipped
};

struct GradcheckReport {
  std::string op;
  double eps = 0, atol = 0, rtol = 0;  // the options the check ran with
  GradcheckMode mode = GradcheckMode::full;
  GradcheckPrecision precision = GradcheckPrecision::f64;  // of the inputs checked
  std::vector<GradcheckInput> inputs;  // one per input that requires grad (fast: per input and output)
  std::vector<GradcheckCheck> checks;  // the Jacobian comparison and every invariant, in order
  std::vector<std::string> failures;   // every failed check, one line each
  std::vector<std::string> moved;      // move_kinks: "input 0 (2,): 0 -> 0.1", one per element moved
  int forwards = 0, backwards = 0;     // evaluations spent (the cost of the check)
  int numerical_forwards = 0;          // of which the numerical Jacobian took (what the mode changes)
  bool ok() const { return failures.empty(); }
  // "ok", or the first failed check and its cause: "FAILED gradient shapes ...: input 1: ...".
  std::string headline() const;
  int kinks() const;  // elements found at a non-differentiable point
  double max_abs_err() const;
  double max_rel_err() const;
  // One line per element found at a non-differentiable point, and per element moved off one.
  std::string format_kinks() const;
  // A multi-line report: a summary, one line per check, then per input the worst elements.
  std::string format() const;
};

// The default generator's position (core/rng.h): what RNG replay saves once and restores before
// every evaluation, so each one draws the same numbers.
struct GeneratorState {
  uint64_t seed = 0, offset = 0;
  static GeneratorState save();
  void restore() const;
};

// Checks d sum_j sum(w_j * fn(inputs)_j) / d inputs[i] for every input that requires grad (float64
// leaves; integer and bool inputs are passed through). Each w_j is a fixed random tensor, so every
// output element counts. Inputs are perturbed in place through their strides (non-contiguous
// inputs are fine) and restored; inputs whose elements overlap in memory (expanded) are refused.
// Also checks, each on its own report line: each gradient has its input's shape and dtype, a zero
// upstream gradient gives zero gradients, backward twice gives the same gradients, and neither
// forward nor backward modifies the inputs.
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions options = {});
GradcheckReport gradcheck(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs,
                          GradcheckOptions options = {});

// Second order: gradchecks (inputs, dy...) -> autograd::grad(fn(inputs), inputs, dy, create_graph),
// with each dy a random upstream gradient of its output's shape that is itself checked (labelled
// "random dy" in the report). The declared sparsity and kinks carry over (the gradient of an
// element-wise op is element-wise in x and dy). An input whose analytical second-order gradient
// is zero everywhere while the numerical one is not gets a hint: the backward may not be
// differentiable (a detached tensor or a raw kernel in it).
GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              GradcheckOptions options = {});
GradcheckReport gradgradcheck(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs,
                              GradcheckOptions options = {});

}  // namespace seqgrad
