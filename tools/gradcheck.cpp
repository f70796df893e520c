// gradcheck / gradgradcheck: analytical gradients (autograd) against central differences, in
// full, fast (random projections) or compressed (declared sparsity) mode, plus the invariants.
#include "tools/gradcheck.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <optional>

#include <fmt/ranges.h>

#include "core/autograd.h"
#include "core/half.h"
#include "core/rng.h"
#include "ops/ops.h"

namespace seqgrad {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  // labels: how the report names each input ("input i" past its end); inputs from first_dy on
  // are the random upstream gradients of a second-order check.
  Checker(const GradcheckMultiFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
          bool evaluate_with_grad, std::vector<std::string> labels = {}, size_t first_dy = SIZE_MAX)
      : fn_(fn), inputs_(inputs), opt_(opt), evaluate_with_grad_(evaluate_with_grad), labels_(std::move(labels)),
        first_dy_(first_dy) {
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
      wrt_offsets_.push_back(element_offsets(x));
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
    } catch (const std::exception& e) {
      fail(add_check("forward runs"), fmt::format("forward threw: {}", e.what()));
      return false;
    }
    try {
      combined_ = backward(outputs_, weights_, /*retain=*/true);
      if (opt_.mode == GradcheckMode::fast) {
        for (size_t j = 0; j < outputs_.size(); ++j)
          per_output_.push_back(outputs_.size() == 1 ? combined_ : backward({outputs_[j]}, {weights_[j]}, true));
      }
    } catch (const std::exception& e) {
      // The engine refuses a gradient of the wrong shape or dtype as the backward adds it (Grads::add):
      // that is the shapes check's failure, not a crash of the backward.
      std::string what = e.what();
      bool shape = dynamic_cast<const ShapeError*>(&e) != nullptr;
      bool dtype = dynamic_cast<const DTypeError*>(&e) != nullptr;
      if ((shape || dtype) && what.find("backward: gradient for input") != std::string::npos) {
        fail(add_check(kShapesCheck), fmt::format("the backward gives a gradient of the wrong {}: {}{}",
                                                  shape ? "shape" : "dtype", what,
                                                  shape ? " (a broadcast input's gradient must be summed back to its "
                                                          "shape: sum_to(g, x.shape()))" : ""));
      } else {
        fail(add_check("backward runs"), fmt::format("backward threw: {}", e.what()));
      }
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
        fail(check, fmt::format("{}: gradient is {} {}, expected the input's {} {}", label(wrt_[k]), g.shape(),
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
        fail(check, fmt::format("{}: a second backward gives a different gradient at {} ({:.9g} then {:.9g}{})",
                                label(wrt_[k]), index_string(unravel(e, wrt_tensors_[k].shape())), a[e], b[e],
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
        fail(check, fmt::format("{}: a zero upstream gradient gives a non-zero gradient at {} ({:.9g})",
                                label(wrt_[k]), index_string(unravel(static_cast<int64_t>(e), wrt_tensors_[k].shape())),
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
        fail(check, fmt::format("{} {}: {} wrote into it at {} ({:.9g} -> {:.9g})", label(i), inputs_[i].shape(),
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

  // Moves the given elements of x (by storage offset) by +eps and by -eps, each times its
  // direction, evaluating fn on each side, and restores x. Returns both sides' outputs and each
  // element's actual steps (what was stored: x ± eps rounds, coarsely in float32 and bf16).
  struct Moved {
    std::vector<std::vector<double>> plus, minus;
    std::vector<double> up, down;  // x+ - x and x - x-
  };
  Moved move_both_ways(const Tensor& x, const std::vector<int64_t>& offs, const std::vector<double>& direction,
                       double eps) {
    std::vector<double> orig(offs.size());
    for (size_t e = 0; e < offs.size(); ++e) orig[e] = read_at(x, offs[e]);
    Restore restore{x, offs, orig};
    Moved m;
    m.plus = evaluate_at(x, offs, orig, direction, +eps, m.up);
    m.minus = evaluate_at(x, offs, orig, direction, -eps, m.down);
    for (double& d : m.down) d = -d;
    return m;
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

  // fn with the elements moved by `move` times their direction (x itself is left moved: the
  // caller restores it); `moved` receives what each element actually moved by.
  std::vector<std::vector<double>> evaluate_at(const Tensor& x, const std::vector<int64_t>& offs,
                                               const std::vector<double>& orig, const std::vector<double>& direction,
                                               double move, std::vector<double>& moved) {
    moved.assign(offs.size(), 0.0);
    for (size_t e = 0; e < offs.size(); ++e) {
      double by = move * direction[e];
      if (opt_.round_to_bf16) by *= std::max(1.0, std::abs(orig[e]));  // bf16's spacing is relative: 40 moves by 40 eps
      double v = orig[e] + by;
      write_at(x, offs[e], opt_.round_to_bf16 ? half::round_bf16(static_cast<float>(v)) : v);
      moved[e] = read_at(x, offs[e]) - orig[e];
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
          int64_t n = wrt_tensors_[k].numel();
          int projections = fast_projections(n, opt_.rtol, fast_miss_target(report_.precision));
          if (projections >= n) {
            notes.push_back(fmt::format("{} in full: its {} element(s) cost no more forwards than {} projections",
                                        label(wrt_[k]), n, projections));
            full_input(k, check);
          } else if (!fast_input(k, projections, check) && opt_.fast_recheck) {
            notes.push_back(fmt::format("{} checked again in full: a projection differs", label(wrt_[k])));
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
        fail(check, fmt::format("{}: the numerical pass stopped: {}", label(wrt_[k]), ex.what()));
        break;
      }
    }
    report_.numerical_forwards = report_.forwards - forwards_before;
    int kinks = 0;
    for (const GradcheckInput& in : report_.inputs)
      for (const GradcheckElement& e : in.kinks) kinks += e.declared ? 1 : 0;
    if (refined_ > 0) notes.push_back(fmt::format("{} element(s) differenced again at smaller steps", refined_));
    if (kinks > 0)
      notes.push_back(fmt::format("{} element(s) at a declared non-differentiable point, not counted", kinks));
    GradcheckCheck& c = report_.checks[check];
    c.name = fmt::format("jacobian ({} mode: {} forwards{}{})", mode_name(opt_.mode), report_.numerical_forwards,
                         notes.empty() ? "" : "; ", fmt::join(notes, "; "));
  }

  // The slopes of the weighted outputs to each side of one element, over the steps actually stored.
  struct Sides {
    double left = 0, right = 0;  // slopes
    double down = 0, up = 0;     // steps to the left and to the right
    // The derivative through the three points x - down, x, x + up: the central difference when
    // the steps agree, and still exact for a parabola where rounding made them differ (bf16).
    double derivative() const { return (down * right + up * left) / (down + up); }
  };

  // Full: every element moved alone, two forwards each (and the unperturbed outputs once).
  void full_input(size_t k, size_t check) {
    int64_t n = wrt_tensors_[k].numel();
    std::vector<Sides> sides(n);
    for (int64_t e = 0; e < n; ++e) sides[e] = sides_alone(k, e, opt_.eps);
    Finer finer = [&](int64_t e) {
      return std::pair{sides_alone(k, e, opt_.eps / 2), sides_alone(k, e, opt_.eps / 4)};
    };
    judge_elements(k, sides, finer, GradcheckMode::full, 0, check);
  }

  Sides sides_alone(size_t k, int64_t e, double eps) {
    const Tensor& x = wrt_tensors_[k];
    const std::vector<std::vector<double>>& y0 = base();
    Moved m = move_both_ways(x, {wrt_offsets_[k][e]}, {1.0}, eps);
    Sides s{.down = moved_by(m.down[0], k, e, eps), .up = moved_by(m.up[0], k, e, eps)};
    s.right = weighted_difference(m.plus, y0) / s.up;
    s.left = weighted_difference(y0, m.minus) / s.down;
    return s;
  }

  // A step of element e of input k, which divides: zero when x ± eps rounds back to x (a coarse
  // precision, a large value).
  double moved_by(double step, size_t k, int64_t e, double eps) const {
    const Tensor& x = wrt_tensors_[k];
    SG_CHECK_VALUE(step != 0, "gradcheck {}: {} {} at {} = {} does not move by eps {:g} in {} (x ± eps rounds "
                   "back to x); raise eps, or check the row in a finer precision", opt_.name, label(wrt_[k]),
                   x.shape(), index_string(unravel(e, x.shape())), read_at(x, element_offsets(x)[e]), eps,
                   precision_name(report_.precision));
    return step;
  }

  // sum_j sum_o w_jo (a_jo - b_jo), differenced element by element before weighting, so large
  // outputs that the perturbation does not touch cancel exactly instead of swamping the sum.
  double weighted_difference(const std::vector<std::vector<double>>& a,
                             const std::vector<std::vector<double>>& b) const {
    double s = 0;
    for (size_t j = 0; j < a.size(); ++j) {
      const std::vector<double>& w = weights_values(j);
      for (size_t o = 0; o < w.size(); ++o) s += w[o] * (a[j][o] - b[j][o]);
    }
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

  // The declared sparsity fits input k when every output has its shape (so element e of the input
  // and element e of an output share an index) and a rowwise dim exists.
  bool compressible(size_t k, std::string& why_not) const {
    const Jacobian& jac = opt_.jacobian;
    if (jac.kind == Jacobian::Kind::dense) return false;
    const Tensor& x = wrt_tensors_[k];
    for (const Tensor& w : weights_) {
      if (w.shape() != x.shape()) {
        why_not = fmt::format("{} {} in full: an output is {}", label(wrt_[k]), x.shape(), w.shape());
        return false;
      }
    }
    if (jac.kind == Jacobian::Kind::rowwise && (jac.dim < -x.ndim() || jac.dim >= x.ndim())) {
      why_not = fmt::format("{} {} in full: rowwise dim {} out of range", label(wrt_[k]), x.shape(), jac.dim);
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
        std::vector<std::vector<double>> ys;
        {
          Restore restore{x, moved, orig};
          ys = evaluate_at(x, moved, orig, direction, opt_.eps, step);
        }
        for (size_t j = 0; j < ys.size(); ++j) {
          for (int64_t o = 0; o < n; ++o) {
            double slope = (ys[j][o] - y0[j][o]) / opt_.eps;
            if ((rows.of(o) >> bit & 1) == moving || !(std::abs(slope) > opt_.atol)) continue;
            fail(check, fmt::format("{} {}: the declared {} Jacobian is false: output {} moves at {} (slope "
                                    "{:.3g}) while only other {} of the input move; fix or drop the row's .jacobian "
                                    "(checked in full instead)", label(wrt_[k]), x.shape(), jacobian_name(), j,
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
  // so one forward pair moves every element at one position of its row (a colour) at once; each
  // output difference then belongs to the one moved element of its row.
  void compressed_input(size_t k, size_t check) {
    std::vector<Sides> sides = sides_by_colour(k, opt_.eps);
    // In bf16 every element is looked at closer: its smaller steps, too, one forward pair per colour.
    std::vector<Sides> half, quarter;
    if (coarse()) half = sides_by_colour(k, opt_.eps / 2), quarter = sides_by_colour(k, opt_.eps / 4);
    Finer finer = [&](int64_t e) {
      if (!coarse()) return std::pair{sides_alone(k, e, opt_.eps / 2), sides_alone(k, e, opt_.eps / 4)};
      return std::pair{half[e], quarter[e]};
    };
    judge_elements(k, sides, finer, GradcheckMode::compressed, static_cast<int>(rows_of(k).colours), check);
  }

  std::vector<Sides> sides_by_colour(size_t k, double eps) {
    const Tensor& x = wrt_tensors_[k];
    const auto [colours, stride] = rows_of(k);
    std::vector<int64_t> offs = element_offsets(x);
    int64_t n = static_cast<int64_t>(offs.size());
    const std::vector<std::vector<double>>& y0 = base();
    std::vector<Sides> sides(n);
    for (int64_t c = 0; c < colours; ++c) {
      std::vector<int64_t> members, moved;  // flat indices of colour c, and their storage offsets
      for (int64_t e = 0; e < n; ++e)
        if ((e / stride) % colours == c) members.push_back(e), moved.push_back(offs[e]);
      Moved m = move_both_ways(x, moved, std::vector<double>(moved.size(), 1.0), eps);
      for (size_t i = 0; i < members.size(); ++i) {
        int64_t e = members[i];
        double up = 0, down = 0;
        for (int64_t c2 = 0; c2 < colours; ++c2) {  // the row of e: e + (c2 - c) * stride
          int64_t o = e + (c2 - c) * stride;
          for (size_t j = 0; j < m.plus.size(); ++j) {
            up += weights_values(j)[o] * (m.plus[j][o] - y0[j][o]);
            down += weights_values(j)[o] * (y0[j][o] - m.minus[j][o]);
          }
        }
        Sides& s = sides[e];
        s.up = moved_by(m.up[i], k, e, eps), s.down = moved_by(m.down[i], k, e, eps);
        s.right = up / s.up, s.left = down / s.down;
      }
    }
    return sides;
  }

  // A failing element (in bf16 every element), differenced again at half and a quarter of the step
  // (four forwards alone; compressed mode moves a colour at once). Each one-sided slope, at three
  // steps, is extrapolated to a zero step through a parabola in the step (Richardson): curvature's
  // share of the slopes (± eps f''/2, and eps² f'''/6) goes, a kink's jump stays. A kink is
  // confirmed when the extrapolated slopes still differ by more than twice the tolerance and the
  // analytical value lies between them; otherwise the element is judged on their mean (its error
  // falls from eps² to eps⁴: what a coarse step cannot resolve, such as exp(4x) in bf16, is
  // resolved here). A kink just beside the element rather than on it leaves the slope on its other
  // side clean at every step, and the analytical value equal to it: either a confirmed kink, or,
  // where the extrapolated slopes happen to agree, a mean equal to it.
  struct Closer {
    bool kink = false;
    double left = 0, right = 0, derivative = 0;
  };
  // An element's sides at half and a quarter of the step.
  using Finer = std::function<std::pair<Sides, Sides>(int64_t e)>;
  Closer look_closer(const Sides& at_eps, const std::pair<Sides, Sides>& finer, double analytical) {
    const auto& [half, quarter] = finer;
    Closer c{.left = extrapolate({at_eps.down, half.down, quarter.down}, {at_eps.left, half.left, quarter.left}),
             .right = extrapolate({at_eps.up, half.up, quarter.up}, {at_eps.right, half.right, quarter.right})};
    c.derivative = (c.left + c.right) / 2;
    // A jump within twice the tolerance is not confirmed: then the mean lies within the
    // tolerance of either slope, and judges the element.
    double slack = opt_.atol + opt_.rtol * std::max(std::abs(c.left), std::abs(c.right));
    bool between = analytical >= std::min(c.left, c.right) - slack && analytical <= std::max(c.left, c.right) + slack;
    c.kink = std::abs(c.right - c.left) > 2 * slack && between;
    return c;
  }

  // The value at step 0 of the parabola through (h_i, v_i): Lagrange's formula at 0.
  static double extrapolate(const std::array<double, 3>& h, const std::array<double, 3>& v) {
    double at_zero = 0;
    for (int i = 0; i < 3; ++i) {
      double w = 1;
      for (int j = 0; j < 3; ++j)
        if (j != i) w *= h[j] / (h[j] - h[i]);
      at_zero += w * v[i];
    }
    return at_zero;
  }

  // bf16's step (1/8) leaves a truncation error of a few percent (eps² f'''/6: 1 % for exp(2x)),
  // as large as the errors a backward must not hide: there every element is looked at closer.
  bool coarse() const { return report_.precision == GradcheckPrecision::bf16; }

  // Compares input k's numerical gradient with the analytical one element by element; a failing
  // element (in bf16 every element) is looked at closer (look_closer): a confirmed kink is listed
  // as such (failing when the op declares no kinks), any other element judged on the extrapolated
  // derivative.
  void judge_elements(size_t k, const std::vector<Sides>& sides, const Finer& finer, GradcheckMode method, int colours,
                      size_t check) {
    const Tensor& x = wrt_tensors_[k];
    std::vector<double> a = values_or_zeros(combined_[k], x.numel());
    const std::vector<int64_t>& offs = wrt_offsets_[k];
    GradcheckInput in = input_summary(k, -1, method);
    in.colours = colours;
    std::vector<Ranked> ranked;
    for (size_t e = 0; e < sides.size(); ++e) {
      double numerical = sides[e].derivative(), value = read_at(x, offs[e]);
      bool refined = false;
      bool fails = !(std::abs(a[e] - numerical) <= opt_.atol + opt_.rtol * std::abs(numerical));
      if ((fails || coarse()) && std::isfinite(a[e])) {
        Closer c = look_closer(sides[e], finer(static_cast<int64_t>(e)), a[e]);
        if (c.kink) {
          in.kinks.push_back({.index = unravel(static_cast<int64_t>(e), x.shape()), .numerical = numerical,
                              .analytical = a[e], .value = value, .left = c.left, .right = c.right,
                              .declared = opt_.declares_kinks});
          continue;
        }
        numerical = c.derivative, refined = true;
        ++refined_;
      }
      ranked.push_back(rank(in, unravel(static_cast<int64_t>(e), x.shape()), numerical, a[e],
                            opt_.atol + opt_.rtol * std::abs(numerical)));
      ranked.back().element.value = value;
      ranked.back().element.refined = refined;
    }
    for (const GradcheckElement& kink : in.kinks)
      if (!kink.declared) fail(check, undeclared_kink_line(in, kink));
    bool all_zero = std::all_of(a.begin(), a.end(), [](double v) { return v == 0; });
    finish_input(std::move(in), ranked, check, [&](const GradcheckInput& done) {
      const GradcheckElement& bad = done.worst.front();
      std::string line = fmt::format("{} {}: {} of {} gradient elements differ; worst at {}: numerical {:.9g}{}, "
                                     "analytical {:.9g}, tolerance {:.3g}, input value {:.9g}", done.label, done.shape,
                                     done.failed_elements, x.numel(), index_string(bad.index), bad.numerical,
                                     bad.refined ? " (from half and a quarter of the step, extrapolated)" : "",
                                     bad.analytical, bad.tolerance, bad.value);
      if (evaluate_with_grad_ && all_zero && wrt_[k] < first_dy_)
        line += "; the analytical second-order gradient is zero everywhere: the backward may not be differentiable "
                "(a detached tensor or a raw kernel in it; write it with tensor-level ops on saved inputs, or set "
                "kNoGradgrad with a reason)";
      return line;
    });
  }

  std::string undeclared_kink_line(const GradcheckInput& in, const GradcheckElement& kink) const {
    return fmt::format("{}: a kink at {} (value {:.6g}) that the op does not declare: one-sided slopes {:.6g} left, "
                       "{:.6g} right, a jump that stays when the step is halved; declare the op's kinks "
                       "(OpCase::kinks) or move off it (--move-kinks, GradcheckOptions::move_kinks)", in.label,
                       index_string(kink.index), kink.value, kink.left, kink.right);
  }

  // Fast: `count` random directions u, each a forward pair: per output j, the projection of the
  // input's actual step d onto the Jacobian, weighted by w_j: numerical w_jᵀ(y(x + d) - y(x - d))
  // against analytical (Jᵀw_j)ᵀd, both over 2 eps, with PyTorch's fast-mode tolerance atol +
  // rtol |numerical|: of the projection's own size, so one wrong element of a large input is not
  // drowned by a tolerance summed over all of them. Returns false when a projection differs (then
  // the input fails here, or is checked in full: fast_recheck).
  bool fast_input(size_t k, int count, size_t check) {
    const Tensor& x = wrt_tensors_[k];
    std::vector<int64_t> offs = element_offsets(x);
    std::vector<GradcheckInput> ins;
    std::vector<std::vector<Ranked>> ranked(weights_.size());
    for (size_t j = 0; j < weights_.size(); ++j) {
      ins.push_back(input_summary(k, static_cast<int>(j), GradcheckMode::fast));
      ins.back().projections = count;
    }
    for (int p = 0; p < count; ++p) {
      uint64_t stream = (uint64_t{1} << 40) + (static_cast<uint64_t>(wrt_[k]) << 20) + static_cast<uint64_t>(p);
      std::vector<double> u = random_like(x, opt_.seed, stream).to_vector<double>();
      // In bf16 each projection is taken at three steps, its difference from the analytical one
      // extrapolated to a zero step (as look_closer does for one element).
      int levels = coarse() ? 3 : 1;
      std::vector<std::array<double, 3>> numerical(weights_.size()), analytical(weights_.size());
      for (int level = 0; level < levels; ++level) {
        double eps = opt_.eps / (1 << level);
        Moved m = move_both_ways(x, offs, u, eps);
        std::vector<double> step(offs.size());
        for (size_t e = 0; e < step.size(); ++e) step[e] = m.up[e] + m.down[e];
        for (size_t j = 0; j < weights_.size(); ++j) {
          numerical[j][level] = weighted_difference(m.plus[j], m.minus[j], j) / (2 * eps);
          analytical[j][level] = dot(values_or_zeros(per_output_[j][k], x.numel()), step) / (2 * eps);
        }
      }
      for (size_t j = 0; j < weights_.size(); ++j) {
        double n = numerical[j][0], an = analytical[j][0];
        if (coarse()) {
          std::array<double, 3> error;
          for (int level = 0; level < 3; ++level) error[level] = numerical[j][level] - analytical[j][level];
          n = an + extrapolate({1, 0.5, 0.25}, error);
        }
        ranked[j].push_back(rank(ins[j], {p}, n, an, opt_.atol + opt_.rtol * std::abs(n)));
      }
    }
    bool ok = std::all_of(ins.begin(), ins.end(), [](const GradcheckInput& in) { return in.failed_elements == 0; });
    for (size_t j = 0; j < ins.size(); ++j) {
      std::optional<size_t> judged = opt_.fast_recheck ? std::nullopt : std::optional<size_t>(check);
      finish_input(std::move(ins[j]), ranked[j], judged, [&](const GradcheckInput& done) {
        const GradcheckElement& bad = done.worst.front();
        return fmt::format("{} {}, output {}: {} of {} projections differ; worst, projection {}: numerical {:.9g}, "
                           "analytical {:.9g}, tolerance {:.3g} (fast mode without a full recheck: the element is not "
                           "named)", done.label, done.shape, done.output, done.failed_elements, count, bad.index[0],
                           bad.numerical, bad.analytical, bad.tolerance);
      });
    }
    return ok;
  }

  // weighted_difference of output j alone.
  double weighted_difference(const std::vector<double>& a, const std::vector<double>& b, size_t j) const {
    const std::vector<double>& w = weights_values(j);
    double s = 0;
    for (size_t o = 0; o < w.size(); ++o) s += w[o] * (a[o] - b[o]);
    return s;
  }

  struct Ranked {
    double badness;  // error over tolerance
    GradcheckElement element;
  };

  std::string label(size_t i) const { return i < labels_.size() ? labels_[i] : fmt::format("input {}", i); }

  GradcheckInput input_summary(size_t k, int output, GradcheckMode method) const {
    GradcheckInput in;
    in.input = wrt_[k];
    in.label = label(wrt_[k]);
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
  std::vector<std::string> labels_;
  size_t first_dy_;
  int refined_ = 0;  // failing elements judged on the extrapolated derivative
  GradcheckReport report_;
  GeneratorState rng_;  // before the first evaluation: every other one starts from it (replay_rng)
  std::vector<int> wrt_;
  std::vector<Tensor> wrt_tensors_;
  std::vector<std::vector<int64_t>> wrt_offsets_;  // element_offsets of each, in row-major order
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
// step resolves: float64 PyTorch's values; float32 (24-bit mantissa) rtol 1e-2 and atol 1e-3 (the
// in-tree table passes every mode at atol 1e-3 and fails one row at 1e-4; atol 1e-2 let a
// backward 2 % off pass in 8 % of seeds where the gradients are below 1); bf16 (8 bits:
// 2⁻⁸ relative rounding) a step of 16 of its units at 1 (relative past 1). Its truncation error
// (eps² f'''/6: 4 % for exp(4x)) is not in the tolerance: an element that fails at the step is
// differenced again at half of it and judged on the extrapolated value (error eps⁴), so the rtol
// stays at float32's and a backward 2 % off fails. Tried on the in-tree table and the mutants:
// bf16 with eps 2⁻⁴ fails rows on the rounding of bf16 products, atol 5e-3 fails one row, atol
// 5e-2 lets a missing softmax term in gradients near 0.05 pass.
GradcheckTolerances precision_defaults(GradcheckPrecision precision) {
  switch (precision) {
    case GradcheckPrecision::f64: return {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3};
    case GradcheckPrecision::f32: return {.eps = 1e-2, .atol = 1e-3, .rtol = 1e-2};
    case GradcheckPrecision::bf16: return {.eps = 0x1p-3, .atol = 1e-2, .rtol = 1e-2};
  }
  return {};
}

double fast_miss_target(GradcheckPrecision precision) {
  return precision == GradcheckPrecision::f64 ? 1e-6 : 1e-3;
}

double fast_miss_probability(int64_t n, double rtol, int projections) {
  double one = 2 / std::numbers::pi * std::atan(rtol * std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))));
  return std::pow(one, projections);
}

int fast_projections(int64_t n, double rtol, double target) {
  double one = fast_miss_probability(n, rtol, 1);
  if (one <= target) return 1;
  if (!(one < 1)) return std::numeric_limits<int>::max();  // a tolerance no projection resolves: full mode
  return static_cast<int>(std::ceil(std::log(target) / std::log(one)));
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
  return fmt::format("{} non-differentiable at {} (value {:.6g}): slopes {:.6g} left, {:.6g} right; analytical "
                     "{:.6g} between them, {}", in.label, index_string(e.index), e.value, e.left, e.right,
                     e.analytical, e.declared ? "not counted" : "FAILED: the op declares no kinks");
}

// One input's worst elements (worst first) and its non-differentiable points.
std::string format_input(const GradcheckInput& in) {
  std::string which = in.output >= 0 ? fmt::format(", output {}", in.output) : "";
  std::string how = in.method == GradcheckMode::compressed ? fmt::format(", {} colours", in.colours)
                    : in.method == GradcheckMode::fast   ? fmt::format(", {} projections", in.projections)
                                                         : "";
  std::string out = fmt::format("  {} {} {}{} ({}{}): {} {} outside tolerance, max abs err {:.3g}, max rel err "
                                "{:.3g}\n", in.label, in.shape, in.dtype, which, mode_name(in.method), how,
                                in.failed_elements, in.method == GradcheckMode::fast ? "projection(s)" : "element(s)",
                                in.max_abs_err, in.max_rel_err);
  bool fast = in.method == GradcheckMode::fast;
  if (!in.worst.empty())
    out += fmt::format("    {:<14} {:>12} {:>16} {:>16} {:>10} {:>10} {:>10}\n", fast ? "projection" : "index",
                       fast ? "" : "input", "numerical", "analytical", "abs err", "rel err", "tolerance");
  for (const GradcheckElement& e : in.worst)
    out += fmt::format("    {:<14} {:>12} {:>16.9g} {:>16.9g} {:>10.3g} {:>10.3g} {:>10.3g}\n",
                       fast ? fmt::format("vᵀJu #{}", e.index.at(0)) : index_string(e.index) + (e.refined ? " *" : ""),
                       fast ? "" : fmt::format("{:.6g}", e.value), e.numerical,
                       e.analytical, e.abs_err, e.rel_err, e.tolerance);
  for (const GradcheckElement& e : in.kinks) out += "    " + kink_line(in, e) + "\n";
  return out;
}

}  // namespace

std::string GradcheckReport::format_kinks() const {
  std::string out;
  for (const GradcheckInput& in : inputs)
    for (const GradcheckElement& e : in.kinks)
      if (e.declared) out += fmt::format("{}: {}\n", op, kink_line(in, e));
  for (const std::string& m : moved) out += fmt::format("{}: moved off a non-differentiable point: {}\n", op, m);
  return out;
}

std::string GradcheckReport::headline() const {
  for (const GradcheckCheck& c : checks)
    if (c.ran && !c.ok)
      return fmt::format("FAILED {}: {}", c.name.substr(0, c.name.find(" (")), c.detail.substr(0, c.detail.find('\n')));
  return ok() ? "ok" : "FAILED " + failures.front();
}

std::string GradcheckReport::format() const {
  std::string out = fmt::format("gradcheck {}: {}\n  (max abs err {:.3g}, max rel err {:.3g}; {}: eps {:g}, atol {:g}, "
                                "rtol {:g}; {} mode, {} forwards, {} backwards)\n",
                                op, headline(), max_abs_err(), max_rel_err(), precision_name(precision),
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
                           bool evaluate_with_grad, const std::vector<std::string>& labels = {},
                           size_t first_dy = SIZE_MAX) {
  GradcheckReport report = Checker(fn, args, options, evaluate_with_grad, labels, first_dy).run();
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
        moved.push_back(fmt::format("{} {}: {:.6g} -> {:.6g}", in.label, index_string(e.index), e.value,
                                    read_at(x, element_offsets(x)[flat])));
      }
    }
    report = Checker(fn, args, options, evaluate_with_grad, labels, first_dy).run();
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
  std::vector<std::string> labels;
  for (size_t i = 0; i < n; ++i) labels.push_back(fmt::format("input {}", i));
  for (size_t j = 0; j < dys.size(); ++j)
    labels.push_back(dys.size() == 1 ? "random dy" : fmt::format("random dy of output {}", j));
  options.name += " (second order)";
  return run_checks(first_order, args, options, /*evaluate_with_grad=*/true, labels, n);
}

GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradgradcheck {}: fn is empty", options.name);
  return gradgradcheck(one_output(fn), inputs, std::move(options));
}

}  // namespace seqgrad
