// The op table: one row per op variant, driving the gradient checks (tests/test_ops_table.cpp and
// `seqgrad gradcheck`), the error-message checks and the golden values of non-differentiable ops.
// Adding an op means adding rows: in the tree, to tools/op_cases.cpp; out of the tree, to a plugin
// that `seqgrad gradcheck --plugin` loads (SG_REGISTER_OP_CASES below; docs/adding-an-op.md).
// This header, the checks (tools/op_cases_run.cpp) and the in-tree rows are installed with libseqgrad.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
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

// Memory layout of a generated input; the others are leaf views of a larger buffer, two of them
// starting past its first element (a storage offset a kernel must add).
enum class Layout : uint8_t {
  contiguous,
  transposed,  // the transpose of a contiguous (..., n, m) tensor
  sliced,      // every other element of the last dimension of a contiguous (..., 2n) tensor, from the second
  offset,      // contiguous, but the second half of a buffer twice its size (storage offset numel)
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
  kNoFloat32 = 1u << 1,   // skip the float32-vs-float64 agreement check (say why in a comment)
  kNoBf16 = 1u << 2,      // skip the bf16 gradcheck (--dtype bf16): bf16 cannot resolve the row (say why)
  // max/min-like: non-differentiable where elements tie, at no fixed value to list in .kinks
  // (distinct() inputs keep them apart, but bf16's step can reach across); kinks the checker
  // confirms are reported, not failed, as for a row with .kinks
  kKinksAtTies = 1u << 3,
};

struct OpCase {
  std::string op = {};       // the ops.h function; `seqgrad gradcheck OP` selects every row of an op
  std::string variant = {};  // what this row exercises ("batched_broadcast", "noncontiguous", ...)
  std::vector<InputSpec> inputs = {};
  GradcheckFn fn = {};       // one output; for an op with several, leave it empty and set `outputs`
  // Keep away from kinks: generated floating values are moved at least 0.1 away from these
  // points (0 for relu/abs, the bounds for clamp), where the derivative jumps. A row that declares
  // kinks (here or with kKinksAtTies) has the kinks the checker confirms (a step reaching across
  // one, a hand-picked value on one) reported and set aside; a row that declares none fails on one.
  std::vector<double> kinks = {};
  unsigned flags = kNone;
  // Tolerances; a row only loosens them with a reason in a comment (e.g. a float32 round trip).
  double eps = 1e-6, atol = 1e-5, rtol = 1e-3;
  // The Jacobian's sparsity, when declared: `seqgrad gradcheck --compress` then checks the full
  // Jacobian in one forward pair per colour (Jacobian::elementwise(): 1; rowwise(dim): the row length).
  Jacobian jacobian = {};
  GradcheckMultiFn outputs = {};  // an op with several outputs (instead of fn)
  double nondet_tol = 0;          // backward twice may differ by this much (nondeterministic ops)

  std::string name() const { return variant.empty() ? op : op + "/" + variant; }
  bool gradgrad() const { return !(flags & kNoGradgrad); }
  bool float32() const { return !(flags & kNoFloat32); }
  bool bf16() const { return !(flags & kNoBf16); }
  bool declares_kinks() const { return !kinks.empty() || (flags & kKinksAtTies); }
  GradcheckMultiFn multi_fn() const;  // `outputs`, or `fn` as a one-output function
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

// The in-tree rows (tools/op_cases.cpp).
const std::vector<OpCase>& op_cases();
const std::vector<ErrorCase>& error_cases();
const std::vector<GoldenCase>& golden_cases();
// Distinct op names over the three in-tree tables, sorted.
std::vector<std::string> op_names();

// A table of rows: the in-tree one, or the rows a plugin registers.
class OpCaseRegistry {
 public:
  // Each throws ValueError for a row without an op name or function, or a name already added.
  void add(OpCase row);
  void add(ErrorCase row);
  void add(GoldenCase row);
  const std::vector<OpCase>& op_cases() const { return op_cases_; }
  const std::vector<ErrorCase>& error_cases() const { return error_cases_; }
  const std::vector<GoldenCase>& golden_cases() const { return golden_cases_; }
  std::vector<std::string> op_names() const;  // distinct, sorted
  size_t size() const { return op_cases_.size() + error_cases_.size() + golden_cases_.size(); }

 private:
  void claim(const std::string& name, const char* kind);
  std::vector<OpCase> op_cases_;
  std::vector<ErrorCase> error_cases_;
  std::vector<GoldenCase> golden_cases_;
  std::vector<std::string> names_;
};

// The in-tree rows as a registry (tools/op_cases.cpp).
const OpCaseRegistry& builtin_registry();

// ---- plugins: your op's rows in a shared library, checked by `seqgrad gradcheck --plugin LIB`.
// In one source file of the library:
//   SG_REGISTER_OP_CASES(registry) {
//     registry.add(OpCase{.op = "softsign", .inputs = {in({3, 4})}, .fn = ..., .kinks = {0.0}});
//   }
// The version guards against a plugin built with a different op_cases.h or gradcheck.h (2: the
// checker's reports gained the headline, labels and projection counts).
constexpr int kPluginAbiVersion = 2;
#define SG_REGISTER_OP_CASES(registry)                                                              \
  extern "C" int seqgrad_op_cases_abi_version() { return ::seqgrad::op_cases::kPluginAbiVersion; } \
  extern "C" void seqgrad_register_op_cases(::seqgrad::op_cases::OpCaseRegistry& registry)
// Loads the shared library at `path` (dlopen; it stays loaded: its rows point into it) and calls
// its seqgrad_register_op_cases. Throws IOError for a missing or unloadable file and ValueError
// for a missing entry point, another ABI version, a throwing registration or no rows.
void load_plugin(const std::string& path, OpCaseRegistry& registry);

// The row's inputs: f64 leaves (requiring grad unless the spec says otherwise), the same values
// on every call. f32 makes the floating inputs float32 (same values, rounded); bf16 rounds them to
// bfloat16 values, held in float32.
std::vector<Tensor> make_inputs(const OpCase& row, GradcheckPrecision precision = GradcheckPrecision::f64);
// The row's gradcheck options (its name, tolerances, declared Jacobian and nondet_tol).
GradcheckOptions options_for(const OpCase& row);

// ---- running rows with every check

struct CheckOptions {
  GradcheckMode mode = GradcheckMode::full;
  // float32 or bf16: gradcheck in that precision, with its step and tolerances (precision_defaults,
  // or the row's where they are looser); bf16 runs under bf16 autocast.
  GradcheckPrecision precision = GradcheckPrecision::f64;
  // Overrides of the row's values; unset keeps the row's (or the precision's).
  std::optional<double> eps = {}, atol = {}, rtol = {};
  std::optional<uint64_t> seed = {};
  bool second_order = true;       // gradgradcheck where the row allows
  bool float32_agreement = true;  // float32 vs float64 values and gradients, where the row allows
  bool move_kinks = false;        // move elements found at a non-differentiable point, and check again
};
// The float32 agreement check: |y32 - y64| <= atol + rtol |y64| for values and gradients.
constexpr double kAgreementAtol = 1e-4, kAgreementRtol = 1e-3;

enum class RowKind : uint8_t { gradcheck, error, golden };
const char* row_kind_name(RowKind kind);

struct RowResult {
  std::string name = {};
  RowKind kind = RowKind::gradcheck;
  bool ok = true;
  GradcheckReport first = {}, second = {};  // gradcheck rows
  bool second_ran = false;
  GradcheckCheck float32 = {};  // gradcheck rows: the float32 agreement (ran = false: skipped, and why)
  std::string problem = {};     // error and golden rows: what went wrong; gradcheck rows: a throw
  std::string skipped = {};     // not run, and why (a row that opts out of the precision asked for)
  double seconds = 0;
  std::string format() const;  // the reports and problems, for a failing row
  // "ok", or the failure that decided it: "first order: FAILED jacobian: input 0 (3,): ...".
  std::string headline() const;
};
RowResult check_op_case(const OpCase& row, const CheckOptions& options = {});
// The gradcheck options check_op_case uses: the row's, in the chosen precision and mode, overridden.
GradcheckOptions options_for(const OpCase& row, const CheckOptions& options);
RowResult check_error_row(const ErrorCase& row);
RowResult check_golden_row(const GoldenCase& row);
// "" when float32 and float64 agree on the row's values and gradients, else the first difference.
std::string check_float32_agreement(const OpCase& row, uint64_t seed);
// Runs an error row: "" when the call throws the expected Error subclass with the expected
// substring, else a description of what happened instead.
std::string check_error_case(const ErrorCase& row);
// Runs a golden row: "" when shape, dtype and values match, else the first difference.
std::string check_golden_case(const GoldenCase& row);
// True when a command-line pattern selects the row: the op name, or the full "op/variant".
bool matches(const std::string& pattern, const std::string& op, const std::string& name);

}  // namespace seqgrad::op_cases
