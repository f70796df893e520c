// Built against an installed seqgrad (pkg-config), outside the source tree: a user defines a
// differentiable function of their own in the two public ways and gradchecks both in float64.
//   1. Composition: write the forward with existing ops; autograd derives the backward.
//   2. A custom backward: check -> compute (under NoGradGuard) -> record(op, y, inputs, backward),
//      with tensors kept for backward through save() and gradients added with Grads::add.
// A deliberately wrong backward must be caught by the checker. Exits 0 when all of that holds.
#include <fmt/core.h>

#include <seqgrad/core/autograd.h>
#include <seqgrad/core/error.h>
#include <seqgrad/core/rng.h>
#include <seqgrad/ops/ops.h>
#include <seqgrad/tools/gradcheck.h>

using namespace seqgrad;

// softsign  y = x / (1 + |x|), by composition: no backward to write.
Tensor softsign(const Tensor& x) { return div(x, add(abs(x), 1.0)); }

// softsign with its own backward:  dx = dy / (1 + |x|)²   (`wrong` drops the square)
Tensor softsign_custom(const Tensor& x, bool wrong = false) {
  SG_CHECK_DTYPE(is_floating(x.dtype()), "softsign_custom: x must be floating, got {} {}", x.dtype(), x.shape());
  Tensor y;  // (...) like x
  {
    NoGradGuard no_grad;  // the forward is computed once, without building a graph
    y = div(x, add(abs(x), 1.0));
  }
  // Backward is written with tensor-level ops on the saved input, so under create_graph it is
  // itself recorded and differentiable (gradgradcheck below).
  return record("softsign_custom", y, {x}, [x = save(x), wrong](const Tensor& dy, Grads& g) {
    Tensor d = add(abs(x.get()), 1.0);  // 1 + |x|
    if (g.needs(0)) g.add(0, wrong ? div(dy, d) : div(dy, mul(d, d)));
  });
}

int main() {
  manual_seed(7);
  // Samples away from the kink of |x| at 0, where finite differences straddle two slopes.
  Tensor x = randn({3, 4}, {.dtype = DType::f64});
  x = where(lt(abs(x), 0.1), add(x, 0.3), x).requires_grad_();
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    fmt::print("{}: {}\n", ok ? "ok  " : "FAIL", what);
    failures += ok ? 0 : 1;
  };
  GradcheckReport composed = gradcheck([](const std::vector<Tensor>& in) { return softsign(in[0]); }, {x},
                                       {.name = "softsign"});
  expect(composed.ok(), "softsign by composition passes gradcheck");
  GradcheckReport custom = gradcheck([](const std::vector<Tensor>& in) { return softsign_custom(in[0]); }, {x},
                                     {.name = "softsign_custom"});
  fmt::print("{}\n", custom.format());
  expect(custom.ok(), "softsign with a custom backward passes gradcheck");
  GradcheckReport second = gradgradcheck([](const std::vector<Tensor>& in) { return softsign_custom(in[0]); }, {x},
                                         {.name = "softsign_custom"});
  expect(second.ok(), "its backward is itself differentiable (gradgradcheck)");
  Tensor diff = abs(sub(softsign(x), softsign_custom(x)));
  expect(amax(diff, {0, 1}).to_vector<double>()[0] == 0.0, "both give the same values");
  GradcheckReport wrong = gradcheck([](const std::vector<Tensor>& in) { return softsign_custom(in[0], true); }, {x},
                                    {.name = "softsign_wrong"});
  expect(!wrong.ok() && wrong.max_abs_err() > 1e-2, "a wrong backward is reported");
  return failures == 0 ? 0 : 1;
}
