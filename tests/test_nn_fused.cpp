// Fused ops against their composed twins: the same values and the same gradients (float64), plus
// gradchecks of the fused ops. Each fused op in ops/ or nn/ names its twin here.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "nn/attention_additive.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "tools/gradcheck.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

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

// A fused op's own checks: gradcheck, gradgradcheck (second order goes through the composed twin)
// and float32 (vectorised kernels) within float32 rounding of float64.
void check_fused_op(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  check_report(gradcheck(fn, inputs));
  check_report(gradgradcheck(fn, inputs));
  std::vector<Tensor> f32;
  for (const Tensor& t : inputs) f32.push_back(t.detach().to(DType::f32));
  check_close(fn(f32).to(DType::f64), fn(inputs).detach(), 1e-5, "float32 vs float64");
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

TEST_CASE("gru_layer (fused) equals gru_layer_composed on values and gradients") {
  manual_seed(5);
  const int64_t T = 4, B = 3, H = 5;
  // valid (T, B): sequence lengths 4, 2, 0 (the last one all padding; step 3 padding except b = 0)
  Tensor valid = from_vector(std::vector<bool>{1, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0}, {T, B});
  for (Direction d : {Direction::forward, Direction::reverse}) {
    for (bool masked : {false, true}) {
      for (bool bias : {true, false}) {
        INFO("direction " << (d == Direction::forward ? "forward" : "reverse") << ", masked " << masked << ", bias "
                          << bias);
        Tensor v = masked ? valid : Tensor();
        auto fused = [=](const std::vector<Tensor>& x) {
          return gru_layer(x[0], x[1], x[2], bias ? x[3] : Tensor(), v, d);
        };
        auto composed = [=](const std::vector<Tensor>& x) {
          return gru_layer_composed(x[0], x[1], x[2], bias ? x[3] : Tensor(), v, d);
        };
        std::vector<Tensor> inputs{randn64({T, B, 3 * H}), randn64({B, H}), randn64({3 * H, H})};
        if (bias) inputs.push_back(randn64({3 * H}));
        check_twins(fused, composed, inputs);
      }
    }
  }
  // a single step (the decoder calls the layer once per step)
  check_twins([](const std::vector<Tensor>& x) { return gru_layer(x[0], x[1], x[2], x[3], {}, Direction::forward); },
              [](const std::vector<Tensor>& x) {
                return gru_layer_composed(x[0], x[1], x[2], x[3], {}, Direction::forward);
              },
              {randn64({1, B, 3 * H}), randn64({B, H}), randn64({3 * H, H}), randn64({3 * H})});
}

TEST_CASE("gru_layer: gradcheck, second order through the composed twin, and float32 against float64") {
  manual_seed(6);
  Tensor valid = from_vector(std::vector<bool>{1, 1, 1, 0, 0, 0}, {3, 2});
  auto fn = [valid](const std::vector<Tensor>& x) { return gru_layer(x[0], x[1], x[2], x[3], valid, Direction::reverse); };
  check_fused_op(fn, {randn64({3, 2, 6}), randn64({2, 2}), randn64({6, 2}), randn64({6})});
}

TEST_CASE("additive_scores (fused) equals additive_scores_composed; gradcheck and second order") {
  manual_seed(7);
  auto fused = [](const std::vector<Tensor>& x) { return additive_scores(x[0], x[1], x[2]); };
  auto composed = [](const std::vector<Tensor>& x) { return additive_scores_composed(x[0], x[1], x[2]); };
  check_twins(fused, composed, {randn64({3, 2, 5}), randn64({3, 4, 5}), randn64({1, 5})});
  check_twins(fused, composed, {randn64({2, 1, 7}), randn64({2, 6, 7}), randn64({1, 7})});  // one query (decoder)
  check_fused_op(fused, {randn64({2, 2, 3}), randn64({2, 3, 3}), randn64({1, 3})});
}

TEST_CASE("cross_entropy (fused) equals cross_entropy_composed: smoothing, ignore_index, reductions") {
  manual_seed(8);
  Tensor targets = from_vector(std::vector<int64_t>{2, 0, 4, 1, 0, 3}, {2, 3});  // 0 is ignored below
  for (double eps : {0.0, 0.1, 1.0}) {
    for (nn::Reduction r : {nn::Reduction::mean, nn::Reduction::sum, nn::Reduction::none}) {
      INFO("label_smoothing " << eps << ", reduction " << static_cast<int>(r));
      nn::CrossEntropyOptions o{.label_smoothing = eps, .ignore_index = 0, .reduction = r};
      check_twins([=](const std::vector<Tensor>& x) { return nn::cross_entropy(x[0], targets, o); },
                  [=](const std::vector<Tensor>& x) { return nn::cross_entropy_composed(x[0], targets, o); },
                  {randn64({2, 3, 5})});
    }
  }
  auto fn = [targets](const std::vector<Tensor>& x) {
    return nn::cross_entropy(x[0], targets, {.label_smoothing = 0.1, .ignore_index = 0});
  };
  check_fused_op(fn, {randn64({2, 3, 5})});
}

TEST_CASE("dropout (fused) equals dropout_composed: the same mask bit for bit, values and gradients") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double p : {0.3, 0.9, 1.0}) {
      INFO(dtype_name(dtype) << ", p " << p);
      // Each call reseeds, so both draw the same counters; 7 x 37 is not a whole number of the CPU
      // kernel's blocks, and the transposed input is read in row-major order of its shape.
      auto fused = [p](const std::vector<Tensor>& x) { manual_seed(12); return dropout(x[0], p); };
      auto composed = [p](const std::vector<Tensor>& x) { manual_seed(12); return dropout_composed(x[0], p); };
      Tensor x = randn({7, 37}, {.dtype = dtype}).requires_grad_();
      check_twins(fused, composed, {x}, 0.0);
      check_twins(fused, composed, {x.detach().t().requires_grad_()}, 0.0);
      // the generator moves on by the same count either way
      fused({x});
      const uint64_t after_fused = default_generator().offset();
      composed({x});
      CHECK(default_generator().offset() == after_fused);
    }
  }
}

TEST_CASE("dropout: gradcheck and second order (the backward is dropout again, with the same mask)") {
  auto fn = [](const std::vector<Tensor>& x) { manual_seed(4); return dropout(x[0], 0.4); };
  check_report(gradcheck(fn, {randn64({3, 5})}));
  check_report(gradgradcheck(fn, {randn64({3, 5})}));
}
