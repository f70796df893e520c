// The op table's machinery, installed with libseqgrad so out-of-tree rows get every in-tree check:
// input generation (kink avoidance, layouts), the registry and plugin loading, and running a row
// (gradcheck, second order, float32 agreement, error and golden rows).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/half.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "tools/op_cases.h"

namespace seqgrad::op_cases {
namespace {

constexpr double kKinkMargin = 0.1;

// Far enough from a kink that no central difference straddles it: 0.1, or 1.5 bf16 steps (relative
// past 1, at the largest kink) where those are longer.
double kink_margin(GradcheckPrecision precision, const std::vector<double>& kinks) {
  double largest = 1;
  for (double k : kinks) largest = std::max(largest, std::abs(k));
  if (precision != GradcheckPrecision::bf16) return kKinkMargin;
  return std::max(kKinkMargin, 1.5 * precision_defaults(precision).eps * largest);
}

uint64_t hash_name(const std::string& s) {  // FNV-1a: a stable seed per row
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Values for a spec, moved at least `margin` away from the kinks.
std::vector<double> generate(const InputSpec& spec, const Shape& shape, uint64_t seed,
                             const std::vector<double>& kinks, double margin) {
  int64_t n = shape.numel();
  std::vector<double> v(n);
  switch (spec.gen) {
    case Gen::normal:
      for (int64_t i = 0; i < n; ++i) v[i] = normal_at(seed, 0, i);
      break;
    case Gen::positive:
      for (int64_t i = 0; i < n; ++i) v[i] = 0.5 + 1.5 * uniform_at_f64(seed, 0, i);
      break;
    case Gen::distinct: {
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](int64_t a, int64_t b) { return uniform_at_f64(seed, 0, a) < uniform_at_f64(seed, 0, b); });
      for (int64_t r = 0; r < n; ++r) v[order[r]] = (static_cast<double>(r) - (n - 1) / 2.0) * 0.3 + 0.05;
      break;
    }
    case Gen::values:
      SG_CHECK_VALUE(static_cast<int64_t>(spec.values.size()) == n, "op table: {} values for shape {}",
                     spec.values.size(), shape);
      return spec.values;
  }
  for (double& x : v)
    for (double k : kinks)
      if (std::abs(x - k) < margin) x = k + std::copysign(margin + std::abs(x - k), x - k);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Floating outputs and the gradients of sum_j sum(w_j * y_j) (w_j fixed random) w.r.t. the
// floating inputs that require grad, all as float64 values: what the float32 check compares.
using Labelled = std::vector<std::pair<std::string, std::vector<double>>>;
Labelled values_and_gradients(const OpCase& row, GradcheckPrecision precision, uint64_t seed) {
  EnableGradGuard enable_grad;
  std::vector<Tensor> inputs = make_inputs(row, precision);
  std::vector<Tensor> ys = row.multi_fn()(inputs), roots, seeds;
  Labelled out;
  for (size_t j = 0; j < ys.size(); ++j) {
    if (!is_floating(ys[j].dtype())) continue;
    out.emplace_back(fmt::format("output {}", j), ys[j].to_vector<double>());
    if (!ys[j].requires_grad()) continue;
    std::vector<double> w(ys[j].numel());
    for (size_t i = 0; i < w.size(); ++i) w[i] = normal_at(seed, j, i);
    roots.push_back(ys[j]);
    seeds.push_back(from_vector(w, ys[j].shape(), {.dtype = ys[j].dtype()}));
  }
  std::vector<Tensor> wrt;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) wrt.push_back(inputs[i]), which.push_back(i);
  if (roots.empty() || wrt.empty()) return out;
  std::vector<Tensor> grads = autograd::grad(roots, wrt, seeds, {.allow_unused = true});
  for (size_t k = 0; k < grads.size(); ++k)
    out.emplace_back(fmt::format("gradient of input {}", which[k]),
                     grads[k].defined() ? grads[k].to_vector<double>() : std::vector<double>{});
  return out;
}

}  // namespace

// ---- spec helpers

InputSpec in(Shape shape, Layout layout) { return {.shape = shape, .layout = layout}; }
InputSpec positive(Shape shape, Layout layout) { return {.shape = shape, .gen = Gen::positive, .layout = layout}; }
InputSpec distinct(Shape shape, Layout layout) { return {.shape = shape, .gen = Gen::distinct, .layout = layout}; }
InputSpec constant(Shape shape) { return {.shape = shape, .requires_grad = false}; }
InputSpec values(std::vector<double> v, Shape shape) { return {.shape = shape, .gen = Gen::values, .values = std::move(v)}; }
InputSpec ids(std::vector<double> v, Shape shape) {
  return {.shape = shape, .gen = Gen::values, .dtype = DType::i64, .values = std::move(v), .requires_grad = false};
}
InputSpec mask(std::vector<double> v, Shape shape) {
  return {.shape = shape, .gen = Gen::values, .dtype = DType::b8, .values = std::move(v), .requires_grad = false};
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::any: return "Error";
    case ErrorKind::shape: return "ShapeError";
    case ErrorKind::dtype: return "DTypeError";
    case ErrorKind::index: return "IndexError";
    case ErrorKind::value: return "ValueError";
    case ErrorKind::device: return "DeviceError";
  }
  return "?";
}

GradcheckMultiFn OpCase::multi_fn() const { return outputs ? outputs : one_output(fn); }

// ---- the registry and plugins

void OpCaseRegistry::claim(const std::string& name, const char* kind) {
  SG_CHECK_VALUE(!name.empty() && name.front() != '/', "op table: a {} row needs an op name (got variant '{}')", kind,
                 name);
  SG_CHECK_VALUE(std::find(names_.begin(), names_.end(), std::string(kind) + ":" + name) == names_.end(),
                 "op table: the {} row '{}' is added twice; give one of them another variant", kind, name);
  names_.push_back(std::string(kind) + ":" + name);
}

void OpCaseRegistry::add(OpCase row) {
  claim(row.name(), "gradcheck");
  SG_CHECK_VALUE(static_cast<bool>(row.fn) != static_cast<bool>(row.outputs),
                 "op table: row '{}' needs exactly one of fn (one output) and outputs (several)", row.name());
  op_cases_.push_back(std::move(row));
}

void OpCaseRegistry::add(ErrorCase row) {
  claim(row.name(), "error");
  SG_CHECK_VALUE(static_cast<bool>(row.call) && !row.expected.empty(),
                 "op table: error row '{}' needs the bad call and a substring of its message", row.name());
  error_cases_.push_back(std::move(row));
}

void OpCaseRegistry::add(GoldenCase row) {
  claim(row.name(), "golden");
  SG_CHECK_VALUE(static_cast<bool>(row.compute), "op table: golden row '{}' needs compute", row.name());
  golden_cases_.push_back(std::move(row));
}

std::vector<std::string> OpCaseRegistry::op_names() const {
  std::set<std::string> names;
  for (const OpCase& r : op_cases_) names.insert(r.op);
  for (const ErrorCase& r : error_cases_) names.insert(r.op);
  for (const GoldenCase& r : golden_cases_) names.insert(r.op);
  return {names.begin(), names.end()};
}

void load_plugin(const std::string& path, OpCaseRegistry& registry) {
  std::error_code ec;
  SG_CHECK_IO(std::filesystem::is_regular_file(path, ec), "plugin '{}': no such file (build your op's rows "
              "into a shared library: docs/adding-an-op.md)", path);
  // A bare name would make dlopen search the library path instead of opening this file.
  std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: the rows point into it
  if (handle == nullptr) {
    const char* why = dlerror();
    throw IOError(fmt::format("plugin '{}': cannot load it: {}", path, why ? why : "unknown dlopen error"));
  }
  using Version = int (*)();
  using Register = void (*)(OpCaseRegistry&);
  if (auto version = reinterpret_cast<Version>(dlsym(handle, "seqgrad_op_cases_abi_version"))) {
    SG_CHECK_VALUE(version() == kPluginAbiVersion, "plugin '{}': built with op_cases.h version {}, this seqgrad "
                   "is version {}; rebuild the plugin against this installation", path, version(), kPluginAbiVersion);
  }
  auto entry = reinterpret_cast<Register>(dlsym(handle, "seqgrad_register_op_cases"));
  SG_CHECK_VALUE(entry != nullptr, "plugin '{}': no function seqgrad_register_op_cases; define it with "
                 "SG_REGISTER_OP_CASES(registry) {{ registry.add(...); }} from <seqgrad/tools/op_cases.h>", path);
  size_t before = registry.size();
  try {
    entry(registry);
  } catch (const std::exception& e) {
    throw ValueError(fmt::format("plugin '{}': seqgrad_register_op_cases threw: {}", path, e.what()));
  }
  SG_CHECK_VALUE(registry.size() > before, "plugin '{}': seqgrad_register_op_cases added no rows", path);
}

// ---- inputs and options

std::vector<Tensor> make_inputs(const OpCase& row, GradcheckPrecision precision) {
  std::vector<Tensor> out;
  uint64_t seed = hash_name(row.name());
  for (size_t k = 0; k < row.inputs.size(); ++k) {
    const InputSpec& spec = row.inputs[k];
    if (!is_floating(spec.dtype)) {
      out.push_back(from_vector(spec.values, spec.shape, {.dtype = spec.dtype}));
      continue;
    }
    // Non-contiguous layouts are views of a larger contiguous buffer, made before requires_grad_,
    // so the input is still a leaf.
    Shape base = spec.shape;
    int nd = base.size();
    if (spec.layout == Layout::transposed) {
      SG_CHECK_SHAPE(nd >= 2, "op table {}: a transposed input needs 2 dims, got {}", row.name(), base);
      std::swap(base[nd - 1], base[nd - 2]);
    } else if (spec.layout == Layout::sliced) {
      SG_CHECK_SHAPE(nd >= 1, "op table {}: a sliced input needs 1 dim", row.name());
      base[nd - 1] *= 2;
    } else if (spec.layout == Layout::offset) {
      base = {2 * spec.shape.numel()};
    }
    DType dtype = precision == GradcheckPrecision::f64 ? spec.dtype : DType::f32;
    std::vector<double> v = generate(spec, base, seed + 7919 * k, row.kinks, kink_margin(precision, row.kinks));
    if (precision == GradcheckPrecision::bf16)
      for (double& x : v) x = half::round_bf16(static_cast<float>(x));
    Tensor t = from_vector(v, base, {.dtype = dtype});
    if (spec.layout == Layout::transposed) t = t.transpose(-1, -2);
    if (spec.layout == Layout::sliced) t = t.slice(-1, 1, base[nd - 1], 2);
    if (spec.layout == Layout::offset) t = t.narrow(0, spec.shape.numel(), spec.shape.numel()).view(spec.shape);
    if (spec.requires_grad) t.requires_grad_();
    out.push_back(t);
  }
  return out;
}

GradcheckOptions options_for(const OpCase& row) {
  return {.eps = row.eps, .atol = row.atol, .rtol = row.rtol, .name = row.name(), .jacobian = row.jacobian,
          .nondet_tol = row.nondet_tol, .declares_kinks = row.declares_kinks()};
}

GradcheckOptions options_for(const OpCase& row, const CheckOptions& options) {
  GradcheckOptions opt = options_for(row);
  if (options.precision != GradcheckPrecision::f64) {  // the precision's values, or the row's where looser
    GradcheckTolerances t = precision_defaults(options.precision);
    opt.eps = std::max(opt.eps, t.eps), opt.atol = std::max(opt.atol, t.atol), opt.rtol = std::max(opt.rtol, t.rtol);
    opt.allow_float32 = true;
    opt.round_to_bf16 = options.precision == GradcheckPrecision::bf16;
  }
  opt.eps = options.eps.value_or(opt.eps);
  opt.atol = options.atol.value_or(opt.atol);
  opt.rtol = options.rtol.value_or(opt.rtol);
  opt.seed = options.seed.value_or(opt.seed);
  opt.mode = options.mode;
  opt.move_kinks = options.move_kinks;
  return opt;
}

// ---- running rows

std::string check_error_case(const ErrorCase& row) {
  try {
    row.call();
  } catch (const Error& e) {
    std::string what = e.what();
    bool type_ok = false;
    switch (row.kind) {
      case ErrorKind::any: type_ok = true; break;
      case ErrorKind::shape: type_ok = dynamic_cast<const ShapeError*>(&e) != nullptr; break;
      case ErrorKind::dtype: type_ok = dynamic_cast<const DTypeError*>(&e) != nullptr; break;
      case ErrorKind::index: type_ok = dynamic_cast<const IndexError*>(&e) != nullptr; break;
      case ErrorKind::value: type_ok = dynamic_cast<const ValueError*>(&e) != nullptr; break;
      case ErrorKind::device: type_ok = dynamic_cast<const DeviceError*>(&e) != nullptr; break;
    }
    if (!type_ok) return fmt::format("threw the wrong Error subclass (expected {}): {}", error_kind_name(row.kind), what);
    if (what.find(row.expected) == std::string::npos)
      return fmt::format("message \"{}\" does not contain \"{}\"", what, row.expected);
    return "";
  } catch (const std::exception& e) {
    return fmt::format("threw a non-seqgrad exception: {}", e.what());
  }
  return fmt::format("did not throw (expected {} containing \"{}\")", error_kind_name(row.kind), row.expected);
}

std::string check_golden_case(const GoldenCase& row) {
  Tensor y;
  try {
    y = row.compute();
  } catch (const std::exception& e) {
    return fmt::format("threw: {}", e.what());
  }
  if (y.shape() != row.shape) return fmt::format("shape {}, expected {}", y.shape(), row.shape);
  if (y.dtype() != row.dtype) return fmt::format("dtype {}, expected {}", y.dtype(), row.dtype);
  std::vector<double> got = y.to_vector<double>();
  if (got.size() != row.expected.size())
    return fmt::format("{} values, but the row lists {}", got.size(), row.expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    bool same = got[i] == row.expected[i] || (std::isnan(got[i]) && std::isnan(row.expected[i]));
    if (!same) return fmt::format("element {} is {}, expected {}", i, got[i], row.expected[i]);
  }
  return "";
}

bool matches(const std::string& pattern, const std::string& op, const std::string& name) {
  return pattern == op || pattern == name;
}

std::string check_float32_agreement(const OpCase& row, uint64_t seed) {
  Labelled ref, got;
  GeneratorState rng = GeneratorState::save();  // both see the same random draws
  try {
    ref = values_and_gradients(row, GradcheckPrecision::f64, seed);
    rng.restore();
    got = values_and_gradients(row, GradcheckPrecision::f32, seed);
  } catch (const std::exception& e) {
    return fmt::format("threw: {}", e.what());
  }
  if (ref.size() != got.size()) return fmt::format("float32 gives {} tensors, float64 {}", got.size(), ref.size());
  for (size_t t = 0; t < ref.size(); ++t) {
    const auto& [label, a] = ref[t];
    const std::vector<double>& b = got[t].second;
    if (a.size() != b.size()) return fmt::format("{}: {} elements in float32, {} in float64", label, b.size(), a.size());
    for (size_t e = 0; e < a.size(); ++e) {
      bool both_nan = std::isnan(a[e]) && std::isnan(b[e]);
      if (!both_nan && !(std::abs(b[e] - a[e]) <= kAgreementAtol + kAgreementRtol * std::abs(a[e])))
        return fmt::format("{}, element {}: float32 {:.9g}, float64 {:.9g} (tolerance {:g} + {:g} |float64|)", label,
                           e, b[e], a[e], kAgreementAtol, kAgreementRtol);
    }
  }
  return "";
}

RowResult check_op_case(const OpCase& row, const CheckOptions& options) {
  auto start = std::chrono::steady_clock::now();
  RowResult result{.name = row.name(), .kind = RowKind::gradcheck};
  GradcheckOptions opt = options_for(row, options);
  if (options.precision == GradcheckPrecision::bf16 && !row.bf16()) {
    result.skipped = "the row opts out of bf16";
    return result;
  }
  try {
    GradcheckMultiFn fn = row.multi_fn();
    if (options.precision == GradcheckPrecision::bf16) {
      fn = [fn](const std::vector<Tensor>& x) {
        Autocast bf16(GemmPrecision::bf16);  // matrix products round their operands, as in training
        return fn(x);
      };
    }
    result.first = gradcheck(fn, make_inputs(row, options.precision), opt);
    result.ok = result.first.ok();
    if (options.second_order && row.gradgrad()) {
      result.second = gradgradcheck(fn, make_inputs(row, options.precision), opt);
      result.second_ran = true;
      result.ok = result.ok && result.second.ok();
    }
  } catch (const std::exception& e) {
    result.ok = false;
    result.problem = fmt::format("threw: {}", e.what());
  }
  GradcheckCheck& agreement = result.float32;
  agreement.name = "float32 and float64 agree on values and gradients";
  if (!options.float32_agreement) agreement.ran = false, agreement.detail = "switched off";
  else if (!row.float32()) agreement.ran = false, agreement.detail = "the row opts out";
  else if (options.precision != GradcheckPrecision::f64)
    agreement.ran = false, agreement.detail = fmt::format("the check runs in {}", precision_name(options.precision));
  else {
    agreement.detail = check_float32_agreement(row, opt.seed);
    agreement.ok = agreement.detail.empty();
    result.ok = result.ok && agreement.ok;
  }
  result.seconds = seconds_since(start);
  return result;
}

namespace {

// An error or golden row's result: `check` returns "" or what went wrong.
template <class Check>
RowResult timed_row(std::string name, RowKind kind, Check&& check) {
  auto start = std::chrono::steady_clock::now();
  RowResult result{.name = std::move(name), .kind = kind, .problem = check()};
  result.ok = result.problem.empty();
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace

RowResult check_error_row(const ErrorCase& row) {
  return timed_row(row.name(), RowKind::error, [&] { return check_error_case(row); });
}

RowResult check_golden_row(const GoldenCase& row) {
  return timed_row(row.name(), RowKind::golden, [&] { return check_golden_case(row); });
}

const char* row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::gradcheck: return "gradcheck";
    case RowKind::error: return "error";
    case RowKind::golden: return "golden";
  }
  return "?";
}

std::string RowResult::headline() const {
  if (ok) return "ok";
  if (!problem.empty()) return problem;
  if (kind != RowKind::gradcheck) return "FAILED";
  if (!first.checks.empty() && !first.ok()) return "first order: " + first.headline();
  if (second_ran && !second.ok()) return "second order: " + second.headline();
  if (!float32.ok) return fmt::format("FAILED {}: {}", float32.name, float32.detail);
  return "FAILED";
}

std::string RowResult::format() const {
  std::string out;
  if (kind == RowKind::gradcheck) {
    if (!first.checks.empty() && !first.ok()) out += first.format();
    if (second_ran && !second.ok()) out += second.format();
    if (!float32.ok) out += fmt::format("FAIL  {}: {}\n", float32.name, float32.detail);
  }
  if (!problem.empty()) out += problem + "\n";
  return out;
}

}  // namespace seqgrad::op_cases
