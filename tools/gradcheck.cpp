// gradcheck / gradgradcheck: analytical gradients (autograd) against central differences.
#include "tools/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/ops.h"

namespace seqgrad {
namespace {

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
void write_at(const Tensor& t, int64_t offset, double v) {
  void* base = t.impl()->storage->data;
  if (t.dtype() == DType::f64) static_cast<double*>(base)[offset] = v;
  else static_cast<float*>(base)[offset] = static_cast<float>(v);
}

// The fixed weights that reduce the output to a scalar: standard normal, seeded.
Tensor weights_like(const Tensor& y, uint64_t seed) {
  std::vector<double> w(y.numel());
  for (size_t i = 0; i < w.size(); ++i) w[i] = normal_at(seed, 0, i);
  return from_vector(w, y.shape(), {.dtype = y.dtype(), .device = y.device()});
}

// sum_i w_i (plus_i - minus_i), differenced element by element before weighting, so large
// outputs that the perturbation does not touch cancel exactly instead of swamping the sum.
double weighted_difference(const std::vector<double>& plus, const std::vector<double>& minus,
                           const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < plus.size(); ++i) s += w[i] * (plus[i] - minus[i]);
  return s;
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

// Runs backward on y's retained graph again (same weights: the gradients must be identical) and
// with a zero upstream gradient (the gradients must be zero), adding a failure line for each input
// that disagrees.
void check_backward_again(const Tensor& y, const Tensor& w, const std::vector<int>& wrt,
                          const std::vector<Tensor>& wrt_tensors, const std::vector<Tensor>& analytical,
                          const GradcheckOptions& opt, GradcheckReport& report) {
  if (opt.check_repeat) {
    std::vector<Tensor> again = autograd::grad({y}, wrt_tensors, {w}, {.retain_graph = true, .allow_unused = true});
    for (size_t k = 0; k < wrt.size(); ++k) {
      int64_t n = wrt_tensors[k].numel();
      std::vector<double> a = values_or_zeros(analytical[k], n), b = values_or_zeros(again[k], n);
      for (int64_t e = 0; e < n; ++e) {
        if (a[e] != b[e] && !(std::isnan(a[e]) && std::isnan(b[e]))) {
          report.failures.push_back(fmt::format(
              "input {}: a second backward gives a different gradient at {} ({:.9g} then {:.9g})", wrt[k],
              index_string(unravel(e, wrt_tensors[k].shape())), a[e], b[e]));
          break;
        }
      }
    }
  }
  if (opt.check_zero_grad) {
    std::vector<Tensor> zero = autograd::grad({y}, wrt_tensors, {zeros_like(y)}, {.allow_unused = true});
    for (size_t k = 0; k < wrt.size(); ++k) {
      if (!zero[k].defined()) continue;
      std::vector<double> z = zero[k].to_vector<double>();
      for (size_t e = 0; e < z.size(); ++e) {
        if (z[e] != 0) {
          report.failures.push_back(fmt::format(
              "input {}: a zero upstream gradient gives a non-zero gradient at {} ({:.9g})", wrt[k],
              index_string(unravel(static_cast<int64_t>(e), wrt_tensors[k].shape())), z[e]));
          break;
        }
      }
    }
  }
}

GradcheckReport gradcheck_impl(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                               const GradcheckOptions& opt, bool evaluate_with_grad) {
  GradcheckReport report;
  report.op = opt.name;
  report.eps = opt.eps;
  report.atol = opt.atol;
  report.rtol = opt.rtol;
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradcheck {}: fn is empty", opt.name);
  SG_CHECK_VALUE(opt.eps > 0, "gradcheck {}: eps = {} must be positive", opt.name, opt.eps);

  // 1. Which inputs are checked, and can they be perturbed element by element?
  std::vector<int> wrt;
  std::vector<Tensor> wrt_tensors;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    SG_CHECK_VALUE(x.is_leaf(), "gradcheck {}: input {} (shape {}) requires grad but is not a leaf; pass "
                   "a leaf (detach() it and call requires_grad_())", opt.name, i, x.shape());
    SG_CHECK_DTYPE(x.dtype() == DType::f64 || (x.dtype() == DType::f32 && opt.allow_float32),
                   "gradcheck {}: input {} (shape {}) is {}; gradcheck runs in float64 (set allow_float32 "
                   "with eps ~1e-2 and loose tolerances to check float32)", opt.name, i, x.shape(), x.dtype());
    SG_CHECK_DEVICE(x.device().is_cpu(), "gradcheck {}: input {} is on {}; gradcheck runs on the CPU", opt.name,
                    i, x.device());
    std::vector<int64_t> offs = element_offsets(x);
    std::sort(offs.begin(), offs.end());
    SG_CHECK_VALUE(std::adjacent_find(offs.begin(), offs.end()) == offs.end(),
                   "gradcheck {}: input {} (shape {}, strides {}) has elements that share memory (an expanded "
                   "view); pass a tensor whose elements are distinct", opt.name, i, x.shape(), x.strides());
    wrt.push_back(static_cast<int>(i));
    wrt_tensors.push_back(x);
  }
  SG_CHECK_VALUE(!wrt.empty(), "gradcheck {}: no input requires grad; call requires_grad_() on the inputs to "
                 "check", opt.name);

  auto evaluate = [&]() -> Tensor {
    if (evaluate_with_grad) return fn(inputs);
    NoGradGuard no_grad;
    return fn(inputs);
  };

  // 2. Analytical gradients of sum(w * y) (recorded even if the caller is under NoGradGuard).
  EnableGradGuard enable_grad;
  Tensor y, w;
  std::vector<Tensor> analytical;
  try {
    y = fn(inputs);
    SG_CHECK(y.defined(), "fn returned an undefined tensor");
    SG_CHECK_DTYPE(is_floating(y.dtype()), "fn returned a {} tensor; it must return a floating tensor", y.dtype());
    w = weights_like(y, opt.seed);
    // An output without history does not depend on the inputs as far as autograd knows: every
    // analytical gradient is zero, which the numerical pass then confirms or refutes.
    if (y.requires_grad())
      analytical = autograd::grad({y}, wrt_tensors, {w}, {.retain_graph = true, .allow_unused = true});
    else
      analytical.resize(wrt.size());
  } catch (const std::exception& e) {
    report.failures.push_back(fmt::format("forward/backward threw: {}", e.what()));
    return report;
  }

  // 3. Every gradient has its input's shape and dtype.
  bool shapes_ok = true;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& g = analytical[k];
    const Tensor& x = wrt_tensors[k];
    if (!g.defined()) continue;
    if (g.shape() != x.shape() || g.dtype() != x.dtype()) {
      report.failures.push_back(fmt::format("input {}: gradient is {} {}, expected the input's {} {}", wrt[k],
                                            g.shape(), g.dtype(), x.shape(), x.dtype()));
      shapes_ok = false;
    }
  }
  if (!shapes_ok) return report;

  // 4. Backward twice gives identical gradients; a zero upstream gradient gives zero gradients.
  if (y.requires_grad()) {
    try {
      check_backward_again(y, w, wrt, wrt_tensors, analytical, opt, report);
    } catch (const std::exception& e) {
      report.failures.push_back(fmt::format("repeated backward threw: {}", e.what()));
    }
  }
  y = Tensor();  // frees the graph before the numerical pass

  // 5. Numerical gradients by central differences, element by element, restoring each value.
  std::vector<double> wv = w.to_vector<double>();
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& x = wrt_tensors[k];
    std::vector<int64_t> offs = element_offsets(x);
    std::vector<double> a = values_or_zeros(analytical[k], x.numel());
    GradcheckInput in;
    in.input = wrt[k];
    in.shape = x.shape();
    in.dtype = x.dtype();
    struct Ranked {
      double badness;
      GradcheckElement element;
    };
    std::vector<Ranked> ranked;
    for (size_t e = 0; e < offs.size(); ++e) {
      double orig = read_at(x, offs[e]);
      double difference = 0, step = 0;
      try {
        // Values are copied out at once: the output may be a view of the input being perturbed.
        // The step is what was actually stored (x ± eps rounds, coarsely so in float32).
        write_at(x, offs[e], orig + opt.eps);
        step = read_at(x, offs[e]);
        Tensor plus = evaluate();
        std::vector<double> plus_values = plus.to_vector<double>();
        write_at(x, offs[e], orig - opt.eps);
        step -= read_at(x, offs[e]);
        Tensor minus = evaluate();
        std::vector<double> minus_values = minus.to_vector<double>();
        write_at(x, offs[e], orig);
        SG_CHECK_SHAPE(plus.shape() == w.shape() && minus.shape() == w.shape(),
                       "the output shape changed from {} to {} under perturbation", w.shape(), plus.shape());
        difference = weighted_difference(plus_values, minus_values, wv);
      } catch (const std::exception& ex) {
        write_at(x, offs[e], orig);
        report.failures.push_back(fmt::format("input {}: fn threw while perturbing element {}: {}", wrt[k],
                                              index_string(unravel(static_cast<int64_t>(e), x.shape())), ex.what()));
        return report;
      }
      GradcheckElement el;
      el.index = unravel(static_cast<int64_t>(e), x.shape());
      el.numerical = difference / step;
      el.analytical = a[e];
      el.abs_err = std::abs(el.analytical - el.numerical);
      el.rel_err = el.abs_err / std::max(std::abs(el.numerical), opt.atol);
      double tolerance = opt.atol + opt.rtol * std::abs(el.numerical);
      bool finite = std::isfinite(el.numerical) && std::isfinite(el.analytical);
      double badness = finite ? el.abs_err / tolerance : std::numeric_limits<double>::infinity();
      if (!finite || el.abs_err > tolerance) ++in.failed_elements;
      if (!finite) el.abs_err = el.rel_err = std::numeric_limits<double>::infinity();
      in.max_abs_err = std::max(in.max_abs_err, el.abs_err);
      in.max_rel_err = std::max(in.max_rel_err, el.rel_err);
      ranked.push_back({badness, std::move(el)});
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Ranked& l, const Ranked& r) { return l.badness > r.badness; });
    for (size_t e = 0; e < ranked.size() && static_cast<int>(e) < opt.worst; ++e)
      in.worst.push_back(ranked[e].element);
    if (in.failed_elements > 0) {
      const GradcheckElement& bad = in.worst.front();
      report.failures.push_back(fmt::format(
          "input {} {}: {} of {} gradient elements differ; worst at {}: numerical {:.9g}, analytical {:.9g}",
          in.input, in.shape, in.failed_elements, x.numel(), index_string(bad.index), bad.numerical,
          bad.analytical));
    }
    report.inputs.push_back(std::move(in));
  }
  return report;
}

}  // namespace

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

std::string GradcheckReport::format() const {
  std::string out = fmt::format("gradcheck {}: {} (max abs err {:.3g}, max rel err {:.3g}; eps {:g}, atol {:g}, "
                                "rtol {:g})\n",
                                op, ok() ? "ok" : "FAILED", max_abs_err(), max_rel_err(), eps, atol, rtol);
  for (const std::string& f : failures) out += fmt::format("  FAIL {}\n", f);
  for (const GradcheckInput& in : inputs) {
    out += fmt::format("  input {} {} {}: {} element(s) outside tolerance, max abs err {:.3g}, max rel err {:.3g}\n",
                       in.input, in.shape, in.dtype, in.failed_elements, in.max_abs_err, in.max_rel_err);
    if (in.worst.empty()) continue;
    out += fmt::format("    {:<16} {:>16} {:>16} {:>11} {:>11}\n", "index", "numerical", "analytical", "abs err",
                       "rel err");
    for (const GradcheckElement& e : in.worst)
      out += fmt::format("    {:<16} {:>16.9g} {:>16.9g} {:>11.3g} {:>11.3g}\n", index_string(e.index),
                         e.numerical, e.analytical, e.abs_err, e.rel_err);
  }
  return out;
}

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  return gradcheck_impl(fn, inputs, options, /*evaluate_with_grad=*/false);
}

// Second order. The checked function maps (inputs..., dy) to the first-order gradients of
// sum(dy * fn(inputs)) with respect to the inputs that require grad, flattened and concatenated,
// computed with create_graph so that autograd can differentiate them again.
GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options) {
  SG_CHECK_VALUE(static_cast<bool>(fn), "gradgradcheck {}: fn is empty", options.name);
  Tensor y = fn(inputs);
  SG_CHECK(y.defined() && is_floating(y.dtype()), "gradgradcheck {}: fn must return a floating tensor",
           options.name);
  std::vector<double> dy_values(y.numel());
  for (size_t i = 0; i < dy_values.size(); ++i) dy_values[i] = normal_at(options.seed + 1, 0, i);
  Tensor dy = from_vector(dy_values, y.shape(), {.dtype = y.dtype(), .requires_grad = true});
  y = Tensor();
  size_t n = inputs.size();
  GradcheckFn first_order = [fn, n](const std::vector<Tensor>& args) {
    std::vector<Tensor> xs(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<Tensor> wrt;
    for (const Tensor& x : xs)
      if (x.defined() && x.requires_grad()) wrt.push_back(x);
    Tensor out = fn(xs);
    std::vector<Tensor> grads = autograd::grad({out}, wrt, {args[n]}, {.create_graph = true, .allow_unused = true});
    std::vector<Tensor> parts;
    for (size_t k = 0; k < grads.size(); ++k)
      parts.push_back(grads[k].defined() ? grads[k].reshape({-1})
                                         : zeros({wrt[k].numel()}, {.dtype = wrt[k].dtype()}));
    return cat(parts);
  };
  std::vector<Tensor> args = inputs;
  args.push_back(dy);
  options.name += " (second order)";
  return gradcheck_impl(first_order, args, options, /*evaluate_with_grad=*/true);
}

}  // namespace seqgrad
