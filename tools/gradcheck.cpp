// gradcheck / gradgradcheck: analytical gradients (autograd) against central differences, in
// full, fast (random projections) or compressed (declared sparsity) mode, plus the invariants.
#include "tools/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/ranges.h>

#include "core/autograd.h"
#include "core/half.h"
#include "core/rng.h"
#include "ops/ops.h"

namespace seqgrad {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Failing elements tested for a non-differentiable point per input (2 forwards each); past this
// many, a backward is wrong rather than sitting on kinks, and the rest count as failures.
constexpr int kMaxKinkTests = 64;

// The report's check lines, in the order they run.
constexpr const char* kShapesCheck = "gradient shapes and dtypes equal the inputs'";
constexpr const char* kRepeatCheck = "backward twice gives the same gradients";
constexpr const char* kZeroCheck = "zero grad_output gives zero gradients";
constexpr const char* kUnchangedCheck = "inputs unchanged by forward and backward";

// Storage offsets (in elements) of every element of t, in row-major order of its index.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out;
  out.reserve(t.numel());
  if (t.numel() == 0) return out;
  int n = t.ndim();
  std::vector<int64_t> index(n, 0);
  for (int64_t i = 0, total = t.numel(); i < total; ++i) {
    int64_t off = t.offset();
    for (int d = 0; d < n; ++d) off += index[d] * t.strides()[d];
    out.push_back(off);
    for (int d = n - 1; d >= 0; --d) {
      if (++index[d] < t.shape()[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = shape.size() - 1; d >= 0; --d) {
    index[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return index;
}

// Reads / writes element `offset` of t's storage as double.
double read_at(const Tensor& t, int64_t offset) {
  void* base = t.impl()->storage->data;
  return t.dtype() == DType::f64 ? static_cast<double*>(base)[offset] : static_cast<float*>(base)[offset];
}
// An in-place write: it bumps the storage's version, so what is cached by version (the bf16
// operand cache of matrix products) sees the perturbed values.
void write_at(const Tensor& t, int64_t offset, double v) {
  t.bump_version();
  void* base = t.impl()->storage->data;
  if (t.dtype() == DType::f64) static_cast<double*>(base)[offset] = v;
  else static_cast<float*>(base)[offset] = static_cast<float>(v);
}

// Fixed standard-normal values, one stream per (seed, stream): output weights v and fast-mode u.
Tensor random_like(const Tensor& t, uint64_t seed, uint64_t stream) {
  std::vector<double> w(t.numel());
  for (size_t i = 0; i < w.size(); ++i) w[i] = normal_at(seed, stream, i);
  return from_vector(w, t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

std::vector<double> bf16_values(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = half::round_bf16(static_cast<float>(x));
  return v;
}

std::string index_string(const std::vector<int64_t>& index) {
  if (index.empty()) return "()";
  std::string s = "(";
  for (size_t i = 0; i < index.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", index[i]);
  return s + (index.size() == 1 ? ",)" : ")");
}

// Undefined (unused) gradients count as zeros.
std::vector<double> values_or_zeros(const Tensor& g, int64_t numel) {
  return g.defined() ? g.to_vector<double>() : std::vector<double>(numel, 0.0);
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// The state of one check run: the function, the inputs checked, the outputs' weights, the report.
class Checker {
 public:
  Checker(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
          bool evaluate_with_grad)
      : fn_(fn), inputs_(inputs), opt_(opt), evaluate_with_grad_(evaluate_with_grad) {
    report_.op = opt.name;
    report_.eps = opt.eps;
    report_.atol = opt.atol;
    report_.rtol = opt.rtol;
    report_.mode = opt.mode;
    report_.precision = opt.round_to_bf16 ? GradcheckPrecision::bf16 : GradcheckPrecision::f64;
  }

  GradcheckReport run() {
    select_inputs();
    rng_ = GeneratorState::save();
    EnableGradGuard enable_grad;  // recorded even if the caller is under NoGradGuard
    std::vector<std::vector<double>> before = snapshot();
    if (!analytical()) return std::move(report_);
    std::vector<std::vector<double>> after_forward = forward_snapshot_;
    if (!check_shapes()) return std::move(report_);
    check_backward_again();
    check_unchanged(before, after_forward);
    outputs_.clear();  // frees the graph before the numerical pass
    numerical();
    return std::move(report_);
  }

 private:
  // ---- bookkeeping

  size_t add_check(const char* name) {
    report_.checks.push_back({.name = name});
    return report_.checks.size() - 1;
  }
  void fail(size_t check, std::string line) {
    GradcheckCheck& c = report_.checks[check];
    c.ok = false;
    c.detail += (c.detail.empty() ? "" : "\n") + line;
    report_.failures.push_back(std::move(line));
  }
  void skip(const char* name, std::string why) { report_.checks.push_back({.name = name, .ran = false, .detail = why}); }

  // 1. Which inputs are checked, and can they be perturbed element by element?
  void select_inputs() {
    SG_CHECK_VALUE(static_cast<bool>(fn_), "gradcheck {}: fn is empty", opt_.name);
    SG_CHECK_VALUE(opt_.eps > 0, "gradcheck {}: eps = {} must be positive", opt_.name, opt_.eps);
    SG_CHECK_VALUE(opt_.nondet_tol >= 0, "gradcheck {}: nondet_tol = {} must not be negative", opt_.name,
                   opt_.nondet_tol);
    SG_CHECK_VALUE(!opt_.move_kinks || opt_.kink_margin > 0, "gradcheck {}: kink_margin = {} must be positive",
                   opt_.name, opt_.kink_margin);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& x = inputs_[i];
      if (!x.defined() || !x.requires_grad()) continue;
      SG_CHECK_VALUE(x.is_leaf(), "gradcheck {}: input {} (shape {}) requires grad but is not a leaf; pass "
                     "a leaf (detach() it and call requires_grad_())", opt_.name, i, x.shape());
      SG_CHECK_DTYPE(x.dtype() == DType::f64 || (x.dtype() == DType::f32 && (opt_.allow_float32 || opt_.round_to_bf16)),
                     "gradcheck {}: input {} (shape {}) is {}; gradcheck runs in float64 (set allow_float32 "
                     "with eps ~1e-2 and loose tolerances to check float32)", opt_.name, i, x.shape(), x.dtype());
      SG_CHECK_DEVICE(x.device().is_cpu(), "gradcheck {}: input {} is on {}; gradcheck runs on the CPU", opt_.name,
                      i, x.device());
      std::vector<int64_t> offs = element_offsets(x);
      std::sort(offs.begin(), offs.end());
      SG_CHECK_VALUE(std::adjacent_find(offs.begin(), offs.end()) == offs.end(),
                     "gradcheck {}: input {} (shape {}, strides {}) has elements that share memory (an expanded "
                     "view); pass a tensor whose elements are distinct", opt_.name, i, x.shape(), x.strides());
      if (x.dtype() == DType::f32 && !opt_.round_to_bf16) report_.precision = GradcheckPrecision::f32;
      wrt_.push_back(static_cast<int>(i));
      wrt_tensors_.push_back(x);
    }
    SG_CHECK_VALUE(!wrt_.empty(), "gradcheck {}: no input requires grad; call requires_grad_() on the inputs to "
                   "check", opt_.name);
  }

  // The values of every defined input (integer and bool ones too): forward and backward must
  // leave them as they were.
  std::vector<std::vector<double>> snapshot() const {
    std::vector<std::vector<double>> values;
    for (const Tensor& x : inputs_) values.push_back(x.defined() ? x.to_vector<double>() : std::vector<double>{});
    return values;
  }

  // The floating outputs of fn, by position in its result; integer and bool outputs are skipped.
  std::vector<Tensor> call(bool with_grad) {
    if (opt_.replay_rng && report_.forwards > 0) rng_.restore();
    std::vector<Tensor> all;
    if (with_grad) {
      all = fn_(inputs_);
    } else {
      NoGradGuard no_grad;
      all = fn_(inputs_);
    }
    ++report_.forwards;
    std::vector<Tensor> out;
    for (size_t j = 0; j < all.size(); ++j) {
      SG_CHECK(all[j].defined(), "fn returned an undefined tensor as output {}", j);
      if (is_floating(all[j].dtype())) out.push_back(all[j]);
    }
    SG_CHECK(!out.empty(), "fn returned no floating tensor; it must return at least one");
    return out;
  }

  // 2. Analytical gradients of sum_j sum(w_j * y_j) (and per output in fast mode).
  bool analytical() {
    try {
      outputs_ = call(true);
      forward_snapshot_ = snapshot();
      for (size_t j = 0; j < outputs_.size(); ++j) weights_.push_back(random_like(outputs_[j], opt_.seed, j));
      combined_ = backward(outputs_, weights_, /*retain=*/true);
      if (opt_.mode == GradcheckMode::fast) {
        for (size_t j = 0; j < outputs_.size(); ++j)
          per_output_.push_back(outputs_.size() == 1 ? combined_ : backward({outputs_[j]}, {weights_[j]}, true));
      }
    } catch (const std::exception& e) {
      fail(add_check("forward and backward run"), fmt::format("forward/backward threw: {}", e.what()));
      return false;
    }
    return true;
  }

  // Gradients of sum(w * y) over the given outputs; outputs without history (that autograd sees
  // as independent of the inputs) contribute zeros, which the numerical pass confirms or refutes.
  std::vector<Tensor> backward(const std::vector<Tensor>& ys, const std::vector<Tensor>& ws, bool retain,
                               bool zero = false) {
    std::vector<Tensor> roots, seeds;
    for (size_t j = 0; j < ys.size(); ++j) {
      if (!ys[j].requires_grad()) continue;
      roots.push_back(ys[j]);
      seeds.push_back(zero ? zeros_like(ys[j]) : ws[j]);
    }
    if (roots.empty()) return std::vector<Tensor>(wrt_.size());
    ++report_.backwards;
    return autograd::grad(roots, wrt_tensors_, seeds, {.retain_graph = retain, .allow_unused = true});
  }

  // 3. Every gradient has its input's shape and dtype.
  bool check_shapes() {
    size_t check = add_check(kShapesCheck);
    for (size_t k = 0; k < wrt_.size(); ++k) {
      const Tensor& g = combined_[k];
      const Tensor& x = wrt_tensors_[k];
      if (g.defined() && (g.shape() != x.shape() || g.dtype() != x.dtype()))
        fail(check, fmt::format("input {}: gradient is {} {}, expected the input's {} {}", wrt_[k], g.shape(),
                                g.dtype(), x.shape(), x.dtype()));
    }
    return report_.checks[check].ok;
  }

  // 4. Backward twice gives the same gradients (within nondet_tol); a zero upstream gradient gives
  // zero gradients.
  void check_backward_again() {
    if (!opt_.check_repeat) skip(kRepeatCheck, "switched off");
    else run_invariant(kRepeatCheck, [&](size_t check) { compare_repeat(check); });
    if (!opt_.check_zero_grad) skip(kZeroCheck, "switched off");
    else run_invariant(kZeroCheck, [&](size_t check) { compare_zero(check); });
  }

  template <class F>
  void run_invariant(const char* name, F&& body) {
    size_t check = add_check(name);
    try {
      body(check);
    } catch (const std::exception& e) {
      fail(check, fmt::format("repeated backward threw: {}", e.what()));
    }
  }

  void compare_repeat(size_t check) {
    std::vector<Tensor> again = backward(outputs_, weights_, /*retain=*/true);
    for (size_t k = 0; k < wrt_.size(); ++k) {
      int64_t n = wrt_tensors_[k].numel();
      std::vector<double> a = values_or_zeros(combined_[k], n), b = values_or_zeros(again[k], n);
      for (int64_t e = 0; e < n; ++e) {
        bool same = opt_.nondet_tol > 0 ? std::abs(a[e] - b[e]) <= opt_.nondet_tol : same_value(a[e], b[e]);
        if (same) continue;
        fail(check, fmt::format("input {}: a second backward gives a different gradient at {} ({:.9g} then {:.9g}{})",
                                wrt_[k], index_string(unravel(e, wrt_tensors_[k].shape())), a[e], b[e],
                                opt_.nondet_tol > 0 ? fmt::format(", nondet_tol {:g}", opt_.nondet_tol) : ""));
        break;
      }
    }
  }

  void compare_zero(size_t check) {
    std::vector<Tensor> zero = backward(outputs_, weights_, /*retain=*/true, /*zero=*/true);
    for (size_t k = 0; k < wrt_.size(); ++k) {
      if (!zero[k].defined()) continue;
      std::vector<double> z = zero[k].to_vector<double>();
      for (size_t e = 0; e < z.size(); ++e) {
        if (z[e] == 0) continue;
        fail(check, fmt::format("input {}: a zero upstream gradient gives a non-zero gradient at {} ({:.9g})",
                                wrt_[k], index_string(unravel(static_cast<int64_t>(e), wrt_tensors_[k].shape())),
                                z[e]));
        break;
      }
    }
  }

  // 5. Neither forward nor the backwards above wrote into an input.
  void check_unchanged(const std::vector<std::vector<double>>& before,
                       const std::vector<std::vector<double>>& after_forward) {
    if (!opt_.check_inputs_unchanged) return skip(kUnchangedCheck, "switched off");
    size_t check = add_check(kUnchangedCheck);
    std::vector<std::vector<double>> after_backward = snapshot();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const std::vector<double>& mid = after_forward[i];
      bool by_forward = mid != before[i];
      const std::vector<double>& changed = by_forward ? mid : after_backward[i];
      for (size_t e = 0; e < changed.size(); ++e) {
        if (same_value(before[i][e], changed[e])) continue;
        fail(check, fmt::format("input {} {}: {} wrote into it at {} ({:.9g} -> {:.9g})", i, inputs_[i].shape(),
                                by_forward ? "forward" : "backward",
                                index_string(unravel(static_cast<int64_t>(e), inputs_[i].shape())), before[i][e],
                                changed[e]));
        break;
      }
      // Put the values back, so the numerical pass differentiates around the point the caller gave.
      if (changed != before[i]) {
        std::vector<int64_t> offs = element_offsets(inputs_[i]);
        if (is_floating(inputs_[i].dtype()))
          for (size_t e = 0; e < offs.size(); ++e) write_at(inputs_[i], offs[e], before[i][e]);
      }
    }
  }

  // ---- 6. numerical gradients

  // Evaluates fn at x + d and x - d, where d = eps * direction on the given elements of x (by
  // storage offset), and restores x. Returns each output's difference y(x + d) - y(x - d) and each
  // element's actual step (what was stored: x ± eps rounds, coarsely so in float32).
  struct Difference {
    std::vector<std::vector<double>> dy;
    std::vector<double> step;
  };
  Difference central_difference(const Tensor& x, const std::vector<int64_t>& offs,
                                const std::vector<double>& direction) {
    std::vector<double> orig(offs.size());
    for (size_t e = 0; e < offs.size(); ++e) orig[e] = read_at(x, offs[e]);
    Restore restore{x, offs, orig};
    Difference d;
    d.step.resize(offs.size());
    std::vector<std::vector<double>> plus = evaluate_at(x, offs, orig, direction, +1, d.step);
    std::vector<std::vector<double>> minus = evaluate_at(x, offs, orig, direction, -1, d.step);
    for (size_t j = 0; j < plus.size(); ++j) {
      std::vector<double> diff(plus[j].size());
      for (size_t o = 0; o < diff.size(); ++o) diff[o] = plus[j][o] - minus[j][o];
      d.dy.push_back(std::move(diff));
    }
    return d;
  }

  // Puts elements of x back as they were when it goes out of scope, whether fn threw or not.
  struct Restore {
    const Tensor& x;
    const std::vector<int64_t>& offs;
    const std::vector<double>& orig;
    ~Restore() {
      for (size_t e = 0; e < offs.size(); ++e) write_at(x, offs[e], orig[e]);
    }
  };

  // One side of the difference; adds (sign = +1) or subtracts (-1) what was stored into `step`.
  std::vector<std::vector<double>> evaluate_at(const Tensor& x, const std::vector<int64_t>& offs,
                                               const std::vector<double>& orig, const std::vector<double>& direction,
                                               int sign, std::vector<double>& step) {
    for (size_t e = 0; e < offs.size(); ++e) {
      double move = opt_.eps * direction[e];
      if (opt_.round_to_bf16) move *= std::max(1.0, std::abs(orig[e]));  // bf16's spacing is relative: 40 moves by 40 eps
      double v = orig[e] + sign * move;
      write_at(x, offs[e], opt_.round_to_bf16 ? half::round_bf16(static_cast<float>(v)) : v);
      step[e] += sign * read_at(x, offs[e]);
    }
    std::vector<Tensor> ys = call(evaluate_with_grad_);
    SG_CHECK(ys.size() == weights_.size(), "the number of floating outputs changed from {} to {} under perturbation",
             weights_.size(), ys.size());
    // Values are copied out at once: an output may be a view of the input being perturbed.
    std::vector<std::vector<double>> values;
    for (size_t j = 0; j < ys.size(); ++j) {
      SG_CHECK_SHAPE(ys[j].shape() == weights_[j].shape(), "output {}'s shape changed from {} to {} under perturbation",
                     j, weights_[j].shape(), ys[j].shape());
      values.push_back(ys[j].to_vector<double>());
    }
    return values;
  }

  void numerical() {
    size_t check = report_.checks.size();
    report_.checks.push_back({});
    int forwards_before = report_.forwards;
    std::vector<std::string> notes;
    for (size_t k = 0; k < wrt_.size(); ++k) {
      try {
        if (opt_.mode == GradcheckMode::fast) {
          if (!fast_input(k)) {
            notes.push_back(fmt::format("input {} checked again in full: its projection differs", wrt_[k]));
            full_input(k, check);
          }
          continue;
        }
        std::string why_not;
        if (opt_.mode == GradcheckMode::compressed && compressible(k, why_not) && sparsity_holds(k, check))
          compressed_input(k, check);
        else
          full_input(k, check);
        if (!why_not.empty()) notes.push_back(why_not);
      } catch (const std::exception& ex) {
        fail(check, fmt::format("input {}: the numerical pass stopped: {}", wrt_[k], ex.what()));
        break;
      }
    }
    report_.numerical_forwards = report_.forwards - forwards_before;
    if (int kinks = report_.kinks())
      notes.push_back(fmt::format("{} element(s) at a non-differentiable point, not counted", kinks));
    GradcheckCheck& c = report_.checks[check];
    c.name = fmt::format("jacobian ({} mode: {} forwards{}{})", mode_name(opt_.mode), report_.numerical_forwards,
                         notes.empty() ? "" : "; ", fmt::join(notes, "; "));
  }

  // Full: one central difference per element.
  void full_input(size_t k, size_t check) {
    const Tensor& x = wrt_tensors_[k];
    std::vector<int64_t> offs = element_offsets(x);
    std::vector<double> numerical(offs.size());
    for (size_t e = 0; e < offs.size(); ++e) {
      Difference d = central_difference(x, {offs[e]}, {1.0});
      numerical[e] = weighted(d.dy) / moved_by(d.step[0], k, static_cast<int64_t>(e));
    }
    judge_elements(k, numerical, GradcheckMode::full, 0, check);
  }

  // The step of element e of input k, which divides: zero when x ± eps rounds back to x (a coarse
  // precision, a large value).
  double moved_by(double step, size_t k, int64_t e) const {
    const Tensor& x = wrt_tensors_[k];
    SG_CHECK_VALUE(step != 0, "gradcheck {}: input {} {} at {} = {} does not move by eps {:g} in {} (x ± eps rounds "
                   "back to x); raise eps, or check the row in a finer precision", opt_.name, wrt_[k], x.shape(),
                   index_string(unravel(e, x.shape())), read_at(x, element_offsets(x)[e]), opt_.eps,
                   precision_name(report_.precision));
    return step;
  }

  double weighted(const std::vector<std::vector<double>>& dy) const {
    // sum_j sum_o w_jo dy_jo, differenced element by element before weighting, so large outputs
    // that the perturbation does not touch cancel exactly instead of swamping the sum.
    double s = 0;
    for (size_t j = 0; j < dy.size(); ++j) s += dot(weights_values(j), dy[j]);
    return s;
  }

  const std::vector<double>& weights_values(size_t j) const {
    if (weight_values_.empty())
      for (const Tensor& w : weights_) weight_values_.push_back(w.to_vector<double>());
    return weight_values_[j];
  }

  static double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  }

  // The outputs at the unperturbed inputs (one forward, on first use).
  const std::vector<std::vector<double>>& base() {
    if (base_.empty())
      for (const Tensor& y : call(evaluate_with_grad_)) base_.push_back(y.to_vector<double>());
    return base_;
  }

  // The weighted outputs' slopes to the left and to the right of one element (one-sided
  // differences): equal up to O(eps) where fn is differentiable, apart at a kink.
  std::pair<double, double> one_sided(const Tensor& x, int64_t off) {
    const std::vector<std::vector<double>>& y0 = base();
    const std::vector<int64_t> offs = {off};
    const std::vector<double> orig = {read_at(x, off)};
    std::vector<double> up_step = {-orig[0]}, down_step = {orig[0]};
    std::vector<std::vector<double>> up, down;
    {
      Restore restore{x, offs, orig};
      up = evaluate_at(x, offs, orig, {1.0}, +1, up_step);
      down = evaluate_at(x, offs, orig, {1.0}, -1, down_step);
    }
    for (size_t j = 0; j < y0.size(); ++j)
      for (size_t o = 0; o < y0[j].size(); ++o) up[j][o] -= y0[j][o], down[j][o] = y0[j][o] - down[j][o];
    return {weighted(down) / down_step[0], weighted(up) / up_step[0]};
  }

  // The declared sparsity fits input k when every output has its shape (so element e of the input
  // and element e of an output share an index) and a rowwise dim exists.
  bool compressible(size_t k, std::string& why_not) const {
    const Jacobian& jac = opt_.jacobian;
    if (jac.kind == Jacobian::Kind::dense) return false;
    const Tensor& x = wrt_tensors_[k];
    for (const Tensor& w : weights_) {
      if (w.shape() != x.shape()) {
        why_not = fmt::format("input {} {} in full: an output is {}", wrt_[k], x.shape(), w.shape());
        return false;
      }
    }
    if (jac.kind == Jacobian::Kind::rowwise && (jac.dim < -x.ndim() || jac.dim >= x.ndim())) {
      why_not = fmt::format("input {} {} in full: rowwise dim {} out of range", wrt_[k], x.shape(), jac.dim);
      return false;
    }
    return x.numel() > 0;
  }

  // The declared rows of input k: elements that may share outputs. A row has `colours` elements
  // `stride` apart (elementwise: one element per row).
  struct Rows {
    int64_t colours = 1, stride = 1;
    int64_t of(int64_t e) const { return e / (stride * colours) * stride + e % stride; }  // e's row number
  };
  Rows rows_of(size_t k) const {
    Rows r;
    const Tensor& x = wrt_tensors_[k];
    if (opt_.jacobian.kind == Jacobian::Kind::rowwise) {
      int dim = opt_.jacobian.dim < 0 ? opt_.jacobian.dim + x.ndim() : opt_.jacobian.dim;
      r.colours = x.shape()[dim];
      for (int d = dim + 1; d < x.ndim(); ++d) r.stride *= x.shape()[d];
    }
    return r;
  }

  // Verifies the declaration before compression relies on it: an output element may move only when
  // its own row of the input moves. For each bit of the row number, the rows with the bit set move
  // (then those with it clear), in random directions so that dependencies cannot cancel; any two
  // rows differ in some bit, so every dependency across rows moves an output of a row held still.
  // 2 ceil(log2 rows) forwards. A false declaration fails the check, and the input is checked in full.
  bool sparsity_holds(size_t k, size_t check) {
    const Tensor& x = wrt_tensors_[k];
    Rows rows = rows_of(k);
    std::vector<int64_t> offs = element_offsets(x);
    const int64_t n = static_cast<int64_t>(offs.size()), count = n / rows.colours;
    const std::vector<std::vector<double>>& y0 = base();
    std::vector<double> u = random_like(x, opt_.seed, 2000 + wrt_[k]).to_vector<double>();
    for (int bit = 0; (int64_t{1} << bit) < count; ++bit) {
      for (int64_t moving : {1, 0}) {
        std::vector<int64_t> moved;
        std::vector<double> orig, direction, step;
        for (int64_t e = 0; e < n; ++e)
          if ((rows.of(e) >> bit & 1) == moving) moved.push_back(offs[e]), orig.push_back(read_at(x, offs[e])),
                                                  direction.push_back(u[e]);
        step.assign(moved.size(), 0.0);
        std::vector<std::vector<double>> ys;
        {
          Restore restore{x, moved, orig};
          ys = evaluate_at(x, moved, orig, direction, +1, step);
        }
        for (size_t j = 0; j < ys.size(); ++j) {
          for (int64_t o = 0; o < n; ++o) {
            double slope = (ys[j][o] - y0[j][o]) / opt_.eps;
            if ((rows.of(o) >> bit & 1) == moving || !(std::abs(slope) > opt_.atol)) continue;
            fail(check, fmt::format("input {} {}: the declared {} Jacobian is false: output {} moves at {} (slope "
                                    "{:.3g}) while only other {} of the input move; fix or drop the row's .jacobian "
                                    "(checked in full instead)", wrt_[k], x.shape(), jacobian_name(), j,
                                    index_string(unravel(o, x.shape())), slope,
                                    rows.colours == 1 ? "elements" : "rows"));
            return false;
          }
        }
      }
    }
    return true;
  }

  std::string jacobian_name() const {
    return opt_.jacobian.kind == Jacobian::Kind::rowwise ? fmt::format("rowwise (dim {})", opt_.jacobian.dim)
                                                         : "elementwise";
  }

  // Compressed: elements in different rows never touch the same output element (verified above),
  // so one central difference moves every element at one position of its row (a colour) at once;
  // each output difference then belongs to the one moved element of its row.
  void compressed_input(size_t k, size_t check) {
    const Tensor& x = wrt_tensors_[k];
    const auto [colours, stride] = rows_of(k);
    std::vector<int64_t> offs = element_offsets(x);
    int64_t n = static_cast<int64_t>(offs.size());
    std::vector<double> numerical(n);
    for (int64_t c = 0; c < colours; ++c) {
      std::vector<int64_t> members, moved;  // flat indices of colour c, and their storage offsets
      for (int64_t e = 0; e < n; ++e)
        if ((e / stride) % colours == c) members.push_back(e), moved.push_back(offs[e]);
      Difference d = central_difference(x, moved, std::vector<double>(moved.size(), 1.0));
      for (size_t m = 0; m < members.size(); ++m) {
        int64_t e = members[m];
        double s = 0;
        for (int64_t c2 = 0; c2 < colours; ++c2) {  // the row of e: e + (c2 - c) * stride
          int64_t o = e + (c2 - c) * stride;
          for (size_t j = 0; j < d.dy.size(); ++j) s += weights_values(j)[o] * d.dy[j][o];
        }
        numerical[e] = s / moved_by(d.step[m], k, e);
      }
    }
    judge_elements(k, numerical, GradcheckMode::compressed, static_cast<int>(colours), check);
  }

  // Compares input k's numerical gradient with the analytical one element by element. A failing
  // element whose one-sided slopes differ, with the analytical value between them, sits on a
  // non-differentiable point: it is listed as such and not counted.
  void judge_elements(size_t k, const std::vector<double>& numerical, GradcheckMode method, int colours,
                      size_t check) {
    const Tensor& x = wrt_tensors_[k];
    std::vector<double> a = values_or_zeros(combined_[k], x.numel());
    std::vector<int64_t> offs = element_offsets(x);
    GradcheckInput in = input_summary(k, -1, method);
    in.colours = colours;
    std::vector<Ranked> ranked;
    int kink_tests = 0;
    for (size_t e = 0; e < numerical.size(); ++e) {
      double tolerance = opt_.atol + opt_.rtol * std::abs(numerical[e]);
      double value = read_at(x, offs[e]);
      bool fails = !(std::abs(a[e] - numerical[e]) <= tolerance);
      if (fails && std::isfinite(a[e]) && kink_tests++ < kMaxKinkTests) {
        auto [left, right] = one_sided(x, offs[e]);
        double slack = opt_.atol + opt_.rtol * std::max(std::abs(left), std::abs(right));
        if (std::abs(right - left) > slack && a[e] >= std::min(left, right) - slack &&
            a[e] <= std::max(left, right) + slack) {
          in.kinks.push_back({.index = unravel(static_cast<int64_t>(e), x.shape()), .numerical = numerical[e],
                              .analytical = a[e], .value = value, .left = left, .right = right});
          continue;
        }
      }
      ranked.push_back(rank(in, unravel(static_cast<int64_t>(e), x.shape()), numerical[e], a[e], tolerance));
      ranked.back().element.value = value;
    }
    finish_input(std::move(in), ranked, check, [&](const GradcheckInput& done) {
      const GradcheckElement& bad = done.worst.front();
      return fmt::format("input {} {}: {} of {} gradient elements differ; worst at {}: numerical {:.9g}, "
                         "analytical {:.9g}, tolerance {:.3g}, input value {:.9g}", done.input, done.shape,
                         done.failed_elements, x.numel(), index_string(bad.index), bad.numerical, bad.analytical,
                         bad.tolerance, bad.value);
    });
  }

  // Fast: per output j, the projection of the input's actual step d onto the Jacobian, weighted
  // by w_j: numerical w_jᵀ(y(x + d) - y(x - d)) against analytical (Jᵀw_j)ᵀd, both over 2 eps,
  // with PyTorch's fast-mode tolerance atol + rtol |numerical|: of the projection's own size, so
  // one wrong element of a large input is not drowned by a tolerance summed over all of them.
  // Returns false when a projection differs (the caller then checks the input in full).
  bool fast_input(size_t k) {
    const Tensor& x = wrt_tensors_[k];
    std::vector<int64_t> offs = element_offsets(x);
    std::vector<double> u = random_like(x, opt_.seed, 1000 + wrt_[k]).to_vector<double>();
    Difference d = central_difference(x, offs, u);
    bool ok = true;
    for (size_t j = 0; j < weights_.size(); ++j) {
      std::vector<double> g = values_or_zeros(per_output_[j][k], x.numel());
      double numerical = dot(weights_values(j), d.dy[j]) / (2 * opt_.eps);
      double analytical = dot(g, d.step) / (2 * opt_.eps);
      GradcheckInput in = input_summary(k, static_cast<int>(j), GradcheckMode::fast);
      std::vector<Ranked> ranked = {rank(in, {}, numerical, analytical, opt_.atol + opt_.rtol * std::abs(numerical))};
      ok = ok && in.failed_elements == 0;
      finish_input(std::move(in), ranked, std::nullopt, [](const GradcheckInput&) { return std::string(); });
    }
    return ok;
  }

  struct Ranked {
    double badness;  // error over tolerance
    GradcheckElement element;
  };

  GradcheckInput input_summary(size_t k, int output, GradcheckMode method) const {
    GradcheckInput in;
    in.input = wrt_[k];
    in.output = output;
    in.shape = wrt_tensors_[k].shape();
    in.dtype = wrt_tensors_[k].dtype();
    in.method = method;
    return in;
  }

  Ranked rank(GradcheckInput& in, std::vector<int64_t> index, double numerical, double analytical,
              double tolerance) const {
    GradcheckElement el{.index = std::move(index), .numerical = numerical, .analytical = analytical,
                        .tolerance = tolerance};
    el.abs_err = std::abs(analytical - numerical);
    el.rel_err = el.abs_err / std::max(std::abs(numerical), opt_.atol);
    bool finite = std::isfinite(numerical) && std::isfinite(analytical);
    double badness = finite ? el.abs_err / tolerance : kInf;
    if (!finite || el.abs_err > tolerance) ++in.failed_elements;
    if (!finite) el.abs_err = el.rel_err = kInf;
    in.max_abs_err = std::max(in.max_abs_err, el.abs_err);
    in.max_rel_err = std::max(in.max_rel_err, el.rel_err);
    return {badness, std::move(el)};
  }

  // Keeps the worst elements; a failing input fails `check` (fast mode's projections fail none:
  // the full check that follows them decides).
  template <class Describe>
  void finish_input(GradcheckInput in, std::vector<Ranked>& ranked, std::optional<size_t> check, Describe&& describe) {
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& l, const Ranked& r) { return l.badness > r.badness; });
    for (size_t e = 0; e < ranked.size() && static_cast<int>(e) < opt_.worst; ++e) in.worst.push_back(ranked[e].element);
    if (in.failed_elements > 0 && check) fail(*check, describe(in));
    report_.inputs.push_back(std::move(in));
  }

  const GradcheckMultiFn& fn_;
  const std::vector<Tensor>& inputs_;
  const GradcheckOptions& opt_;
  bool evaluate_with_grad_;
  GradcheckReport report_;
  GeneratorState rng_;  // before the first evaluation: every other one starts from it (replay_rng)
  std::vector<int> wrt_;
  std::vector<Tensor> wrt_tensors_;
  std::vector<Tensor> outputs_, weights_, combined_;
  std::vector<std::vector<Tensor>> per_output_;  // fast mode: gradients of each output alone
  std::vector<std::vector<double>> forward_snapshot_;
  std::vector<std::vector<double>> base_;  // the outputs at the unperturbed inputs (base())
  mutable std::vector<std::vector<double>> weight_values_;
};

}  // namespace

GradcheckMultiFn one_output(GradcheckFn fn) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradcheck: fn is empty");
  return [fn = std::move(fn)](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; };
}

const char* mode_name(GradcheckMode mode) {
  switch (mode) {
    case GradcheckMode::full: return "full";
    case GradcheckMode::fast: return "fast";
    case GradcheckMode::compressed: return "compressed";
  }
  return "?";
}

const char* precision_name(GradcheckPrecision precision) {
  switch (precision) {
    case GradcheckPrecision::f64: return "float64";
    case GradcheckPrecision::f32: return "float32";
    case GradcheckPrecision::bf16: return "bf16";
  }
  return "?";
}

// The step sits far above the precision's rounding (x ± eps is stored inexactly; the checker
// divides by the step actually stored), the tolerances above what a difference quotient with that
// step resolves: float64 PyTorch's values; float32 (24-bit mantissa) about 1e-2; bf16 (8 bits:
// 2⁻⁸ relative rounding) a step of 16 of its units at 1 (relative past 1), whose truncation error
// (eps² f'''/6) needs a 5 % rtol. Tried on the in-tree table and the mutants: bf16 with eps 2⁻⁴
// fails rows on the rounding of bf16 products, atol 5e-3 fails one row, atol 5e-2 lets a missing
// softmax term in gradients near 0.05 pass.
GradcheckTolerances precision_defaults(GradcheckPrecision precision) {
  switch (precision) {
    case GradcheckPrecision::f64: return {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3};
    case GradcheckPrecision::f32: return {.eps = 1e-2, .atol = 1e-2, .rtol = 1e-2};
    case GradcheckPrecision::bf16: return {.eps = 0x1p-3, .atol = 1e-2, .rtol = 5e-2};
  }
  return {};
}

GeneratorState GeneratorState::save() {
  const Generator& g = default_generator();
  return {.seed = g.seed(), .offset = g.offset()};
}

void GeneratorState::restore() const {
  Generator& g = default_generator();
  g.manual_seed(seed);
  g.set_offset(offset);
}

int GradcheckReport::kinks() const {
  int n = 0;
  for (const GradcheckInput& in : inputs) n += static_cast<int>(in.kinks.size());
  return n;
}

double GradcheckReport::max_abs_err() const {
  double m = 0;
  for (const GradcheckInput& in : inputs) m = std::max(m, in.max_abs_err);
  return m;
}

double GradcheckReport::max_rel_err() const {
  double m = 0;
  for (const GradcheckInput& in : inputs) m = std::max(m, in.max_rel_err);
  return m;
}

namespace {

std::string indented(const std::string& text, const char* prefix) {
  std::string out;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    out += prefix + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

std::string kink_line(const GradcheckInput& in, const GradcheckElement& e) {
  return fmt::format("input {} non-differentiable at {} (value {:.6g}): slopes {:.6g} left, {:.6g} right; analytical "
                     "{:.6g} between them, not counted", in.input, index_string(e.index), e.value, e.left, e.right,
                     e.analytical);
}

// One input's worst elements (worst first) and its non-differentiable points.
std::string format_input(const GradcheckInput& in) {
  std::string which = in.output >= 0 ? fmt::format(", output {}", in.output) : "";
  std::string how = in.method == GradcheckMode::compressed ? fmt::format(", {} colours", in.colours) : "";
  std::string out = fmt::format("  input {} {} {}{} ({}{}): {} element(s) outside tolerance, max abs err {:.3g}, max "
                                "rel err {:.3g}\n", in.input, in.shape, in.dtype, which, mode_name(in.method), how,
                                in.failed_elements, in.max_abs_err, in.max_rel_err);
  bool fast = in.method == GradcheckMode::fast;
  if (!in.worst.empty())
    out += fmt::format("    {:<14} {:>12} {:>16} {:>16} {:>10} {:>10} {:>10}\n", fast ? "projection" : "index",
                       fast ? "" : "input", "numerical", "analytical", "abs err", "rel err", "tolerance");
  for (const GradcheckElement& e : in.worst)
    out += fmt::format("    {:<14} {:>12} {:>16.9g} {:>16.9g} {:>10.3g} {:>10.3g} {:>10.3g}\n",
                       fast ? "vᵀJu" : index_string(e.index), fast ? "" : fmt::format("{:.6g}", e.value), e.numerical,
                       e.analytical, e.abs_err, e.rel_err, e.tolerance);
  for (const GradcheckElement& e : in.kinks) out += "    " + kink_line(in, e) + "\n";
  return out;
}

}  // namespace

std::string GradcheckReport::format_kinks() const {
  std::string out;
  for (const GradcheckInput& in : inputs)
    for (const GradcheckElement& e : in.kinks) out += fmt::format("{}: {}\n", op, kink_line(in, e));
  for (const std::string& m : moved) out += fmt::format("{}: moved off a non-differentiable point: {}\n", op, m);
  return out;
}

std::string GradcheckReport::format() const {
  std::string out = fmt::format("gradcheck {}: {} (max abs err {:.3g}, max rel err {:.3g}; {}: eps {:g}, atol {:g}, "
                                "rtol {:g}; {} mode, {} forwards, {} backwards)\n",
                                op, ok() ? "ok" : "FAILED", max_abs_err(), max_rel_err(), precision_name(precision),
                                eps, atol, rtol, mode_name(mode), forwards, backwards);
  for (const GradcheckCheck& c : checks) {
    out += fmt::format("  {:<5} {}{}\n", !c.ran ? "skip" : c.ok ? "ok" : "FAIL", c.name,
                       !c.ran ? fmt::format(" ({})", c.detail) : "");
    if (c.ran && !c.ok) out += indented(c.detail, "        ");
  }
  for (const std::string& m : moved) out += fmt::format("  moved off a non-differentiable point: {}\n", m);
  for (const GradcheckInput& in : inputs) out += format_input(in);
  return out;
}

namespace {

// Runs the check; with move_kinks, moves every element found at a non-differentiable point up by
// kink_margin (in the caller's tensors) and runs it again, up to three times (a move can land on
// another kink, e.g. the other bound of a clamp).
GradcheckReport run_checks(const GradcheckMultiFn& fn, const std::vector<Tensor>& args, const GradcheckOptions& options,
                           bool evaluate_with_grad) {
  GradcheckReport report = Checker(fn, args, options, evaluate_with_grad).run();
  std::vector<std::string> moved;
  for (int round = 0; options.move_kinks && report.kinks() > 0 && round < 3; ++round) {
    for (const GradcheckInput& in : report.inputs) {
      const Tensor& x = args[in.input];
      for (const GradcheckElement& e : in.kinks) {
        int64_t flat = 0;
        for (int d = 0; d < x.ndim(); ++d) flat = flat * x.shape()[d] + e.index[d];
        double to = e.value + options.kink_margin;
        if (options.round_to_bf16) to = half::round_bf16(static_cast<float>(to));
        write_at(x, element_offsets(x)[flat], to);
        moved.push_back(fmt::format("input {} {}: {:.6g} -> {:.6g}", in.input, index_string(e.index), e.value,
                                    read_at(x, element_offsets(x)[flat])));
      }
    }
    report = Checker(fn, args, options, evaluate_with_grad).run();
  }
  report.moved = std::move(moved);
  return report;
}

}  // namespace

GradcheckReport gradcheck(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  return run_checks(fn, inputs, options, /*evaluate_with_grad=*/false);
}

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradcheck {}: fn is empty", options.name);
  return gradcheck(one_output(fn), inputs, std::move(options));
}

// Second order. The checked function maps (inputs..., dy_0, dy_1, ...) to the first-order
// gradients of sum_j sum(dy_j * fn(inputs)_j) with respect to the inputs that require grad,
// computed with create_graph so that autograd can differentiate them again. Each gradient is an
// output of its own (so a declared sparsity carries over: the gradient of an element-wise or
// row-wise op is element-wise or row-wise in the inputs and the dys), except in fast mode, which
// projects them concatenated (one backward instead of one per gradient).
GradcheckReport gradgradcheck(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradgradcheck {}: fn is empty", options.name);
  std::vector<Tensor> dys;
  {
    EnableGradGuard enable_grad;
    std::vector<Tensor> ys = fn(inputs);
    for (size_t j = 0; j < ys.size(); ++j) {
      SG_CHECK(ys[j].defined(), "gradgradcheck {}: fn returned an undefined tensor as output {}", options.name, j);
      if (!is_floating(ys[j].dtype())) continue;
      Tensor dy = random_like(ys[j], options.seed + 1, j);
      if (options.round_to_bf16) dy = from_vector(bf16_values(dy), dy.shape(), {.dtype = dy.dtype()});
      dys.push_back(dy.detach().requires_grad_());
    }
    SG_CHECK(!dys.empty(), "gradgradcheck {}: fn must return a floating tensor", options.name);
  }
  size_t n = inputs.size();
  bool concatenate = options.mode == GradcheckMode::fast;
  GradcheckMultiFn first_order = [fn, n, concatenate](const std::vector<Tensor>& args) {
    std::vector<Tensor> xs(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<Tensor> wrt;
    for (const Tensor& x : xs)
      if (x.defined() && x.requires_grad()) wrt.push_back(x);
    std::vector<Tensor> roots, seeds;
    size_t j = 0;
    for (const Tensor& y : fn(xs)) {
      if (!is_floating(y.dtype())) continue;
      if (y.requires_grad()) roots.push_back(y), seeds.push_back(args[n + j]);
      ++j;
    }
    std::vector<Tensor> grads(wrt.size());
    if (!roots.empty()) grads = autograd::grad(roots, wrt, seeds, {.create_graph = true, .allow_unused = true});
    for (size_t k = 0; k < grads.size(); ++k)
      if (!grads[k].defined()) grads[k] = zeros(wrt[k].shape(), {.dtype = wrt[k].dtype()});
    if (!concatenate) return grads;
    std::vector<Tensor> parts;
    for (const Tensor& g : grads) parts.push_back(g.reshape({-1}));
    return std::vector<Tensor>{cat(parts)};
  };
  std::vector<Tensor> args = inputs;
  args.insert(args.end(), dys.begin(), dys.end());
  options.name += " (second order)";
  return run_checks(first_order, args, options, /*evaluate_with_grad=*/true);
}

GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradgradcheck {}: fn is empty", options.name);
  return gradgradcheck(one_output(fn), inputs, std::move(options));
}

}  // namespace seqgrad
