// Fused ops against their composed twins: the same values and the same gradients (float64), plus
// gradchecks of the fused ops. Each fused op in ops/ or nn/ names its twin here.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "tools/gradcheck.h"

using namespace seqgrad;

namespace {

Tensor randn64(const Shape& shape) { return randn(shape, {.dtype = DType::f64}).requires_grad_(); }

void check_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
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

// Runs fused and composed on the same inputs with the same upstream gradient; compares the
// outputs and every input's gradient.
void check_twins(const std::function<Tensor(const std::vector<Tensor>&)>& fused,
                 const std::function<Tensor(const std::vector<Tensor>&)>& composed, std::vector<Tensor> inputs,
                 double tol = 1e-12) {
  Tensor y1 = fused(inputs);
  Tensor dy = randn(y1.shape(), {.dtype = y1.dtype()});
  std::vector<Tensor> g1 = autograd::grad({y1}, inputs, {dy}, {.retain_graph = true, .allow_unused = true});
  Tensor y2 = composed(inputs);
  std::vector<Tensor> g2 = autograd::grad({y2}, inputs, {dy}, {.allow_unused = true});
  check_close(y1, y2, tol, "output");
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(g1[i].defined() == g2[i].defined());
    if (g1[i].defined()) check_close(g1[i], g2[i], tol, "gradient");
  }
}

void check_report(const GradcheckReport& report) {
  INFO(report.format());
  CHECK(report.ok());
}

}  // namespace

TEST_CASE("linear (one node) equals matmul(x, Wᵀ) + b, and gradchecks") {
  manual_seed(3);
  auto fused = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  auto composed = [](const std::vector<Tensor>& v) { return add(matmul(v[0], v[1].t()), v[2]); };
  check_twins(fused, composed, {randn64({2, 3, 4}), randn64({5, 4}), randn64({5})});
  check_twins(fused, composed, {randn64({7, 4}).t().t(), randn64({4, 5}).t(), randn64({5})});  // a transposed weight
  check_report(gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
                         {randn64({3, 4}), randn64({2, 4}), randn64({2})}));
}
