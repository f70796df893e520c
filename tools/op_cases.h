// The op table: one row per op variant, driving the gradient checks (tests/test_ops_table.cpp and
// `seqgrad gradcheck`), the error-message checks and the golden values of non-differentiable ops.
// Adding an op means adding rows here: a gradcheck row and at least one error row.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "tools/gradcheck.h"

namespace seqgrad::op_cases {

// How an input's values are generated (deterministically, from the row name).
enum class Gen : uint8_t {
  normal,    // standard normal
  positive,  // uniform in [0.5, 2): log, sqrt, fractional powers
  distinct,  // a shuffled ladder of values 0.3 apart: max/min without ties
  values,    // exactly InputSpec::values (indices, masks, hand-picked samples)
};

// Memory layout of a generated input; non-contiguous inputs are leaf views of a larger buffer.
enum class Layout : uint8_t {
  contiguous,
  transposed,  // the transpose of a contiguous (..., n, m) tensor
  sliced,      // every other element of the last dimension of a contiguous (..., 2n) tensor
};

struct InputSpec {
  Shape shape;
  Gen gen = Gen::normal;
  DType dtype = DType::f64;
  Layout layout = Layout::contiguous;
  std::vector<double> values = {};  // Gen::values, in row-major order
  bool requires_grad = true;         // floating inputs only; index and mask inputs never do
};

// Spec helpers that read like the table: in({2, 3}), positive({3}), ids({0, 2}, {2}), ...
InputSpec in(Shape shape, Layout layout = Layout::contiguous);
InputSpec positive(Shape shape, Layout layout = Layout::contiguous);
InputSpec distinct(Shape shape, Layout layout = Layout::contiguous);
InputSpec constant(Shape shape);  // a normal f64 input that gradcheck does not differentiate
InputSpec values(std::vector<double> v, Shape shape);
InputSpec ids(std::vector<double> v, Shape shape);   // int64
InputSpec mask(std::vector<double> v, Shape shape);  // bool

enum Flags : unsigned {
  kNone = 0,
  kNoGradgrad = 1u << 0,  // skip the second-order check
};

struct OpCase {
  std::string op;       // the ops.h function; `seqgrad gradcheck OP` selects every row of an op
  std::string variant;  // what this row exercises ("batched_broadcast", "noncontiguous", ...)
  std::vector<InputSpec> inputs;
  GradcheckFn fn;
  // Keep away from kinks: generated floating values are moved at least 0.1 away from these
  // points (0 for relu/abs, the bounds for clamp), where the derivative jumps.
  std::vector<double> kinks = {};
  unsigned flags = kNone;
  // Tolerances; a row only loosens them with a reason in a comment (e.g. a float32 round trip).
  double eps = 1e-6, atol = 1e-5, rtol = 1e-3;

  std::string name() const { return variant.empty() ? op : op + "/" + variant; }
  bool gradgrad() const { return !(flags & kNoGradgrad); }
};

// Which seqgrad::Error subclass an error row expects.
enum class ErrorKind : uint8_t { any, shape, dtype, index, value, device };
const char* error_kind_name(ErrorKind kind);

struct ErrorCase {
  std::string op;
  std::string variant;
  std::function<void()> call;  // the bad call
  std::string expected;        // a substring of the message
  ErrorKind kind = ErrorKind::any;
  std::string name() const { return variant.empty() ? op : op + "/" + variant; }
};

// A non-differentiable op (comparisons, argmax, topk, ...) checked against known values.
struct GoldenCase {
  std::string op;
  std::string variant;
  std::function<Tensor()> compute;
  Shape shape;
  DType dtype;
  std::vector<double> expected;  // row-major; NaN matches NaN
  std::string name() const { return variant.empty() ? op : op + "/" + variant; }
};

const std::vector<OpCase>& op_cases();
const std::vector<ErrorCase>& error_cases();
const std::vector<GoldenCase>& golden_cases();

// The row's inputs: f64 leaves (requiring grad unless the spec says otherwise), the same values
// on every call.
std::vector<Tensor> make_inputs(const OpCase& row);
// The row's gradcheck options (its name and tolerances).
GradcheckOptions options_for(const OpCase& row);
// Distinct op names over all three tables, sorted.
std::vector<std::string> op_names();
// Runs an error row: "" when the call throws the expected Error subclass with the expected
// substring, else a description of what happened instead.
std::string check_error_case(const ErrorCase& row);
// Runs a golden row: "" when shape, dtype and values match, else the first difference.
std::string check_golden_case(const GoldenCase& row);
// True when a command-line pattern selects the row: the op name, or the full "op/variant".
bool matches(const std::string& pattern, const std::string& op, const std::string& name);

}  // namespace seqgrad::op_cases
