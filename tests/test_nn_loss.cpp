// nn losses: hand-derived golden values and gradients (label smoothing with ignore_index, every
// reduction), the all-ignored NaN, float64 gradchecks, and the error messages.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/loss.h"
#include "tools/gradcheck.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;
using nn::CrossEntropyOptions;
using nn::Reduction;

namespace {

Tensor ids(std::initializer_list<double> values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::i64});
}

// The golden case: logits (3, 2), C = 2, ε = 0.2, the last target ignored.
//   rows 0 and 1: logits (0, ln 3) -> softmax (1/4, 3/4), logp (-ln 4, ln 3 - ln 4)
//   Σ_c -logp = 2 ln 4 - ln 3
//   row 0 (y = 0): (1 - ε) ln 4         + ε/2 (2 ln 4 - ln 3) = ln 4 - 0.1 ln 3
//   row 1 (y = 1): (1 - ε) (ln 4 - ln 3) + ε/2 (2 ln 4 - ln 3) = ln 4 - 0.9 ln 3
//   row 2: ignored -> 0, and not counted: mean = (2 ln 4 - ln 3) / 2
const double kLn3 = std::log(3.0), kLn4 = std::log(4.0);
Tensor golden_logits() {
  return tensor({0, kLn3, 0, kLn3, 5, 7}, {3, 2}, {.dtype = DType::f64}).requires_grad_();
}
Tensor golden_targets() { return ids({0, 1, -100}, {3}); }

}  // namespace

TEST_CASE("cross_entropy: hand-derived values with label smoothing and ignore_index") {
  Tensor logits = golden_logits(), targets = golden_targets();
  CrossEntropyOptions o{.label_smoothing = 0.2};
  check_values(nn::cross_entropy(logits, targets, {.label_smoothing = 0.2, .reduction = Reduction::none})
                  .to_vector<double>(),
              {kLn4 - 0.1 * kLn3, kLn4 - 0.9 * kLn3, 0.0});
  check_values({nn::cross_entropy(logits, targets, {.label_smoothing = 0.2, .reduction = Reduction::sum}).item()},
              {2 * kLn4 - kLn3});
  check_values({nn::cross_entropy(logits, targets, o).item()}, {(2 * kLn4 - kLn3) / 2});
  // Without smoothing: (ln 4 + (ln 4 - ln 3)) / 2.
  check_values({nn::cross_entropy(logits, targets).item()}, {(2 * kLn4 - kLn3) / 2});
  // ignore_index is an option: with ignore_index = 1 rows 1 and 2 are ignored; row 0 alone counts.
  check_values({nn::cross_entropy(logits, ids({0, 1, 1}, {3}), {.ignore_index = 1}).item()}, {kLn4});
}

TEST_CASE("cross_entropy: hand-derived gradient, (softmax - smoothed one-hot) / count") {
  // mean over 2 counted rows; smoothed targets with ε = 0.2, C = 2: y=0 -> (0.9, 0.1), y=1 -> (0.1, 0.9)
  //   row 0: ((1/4 - 0.9), (3/4 - 0.1)) / 2 = (-0.325, 0.325)
  //   row 1: ((1/4 - 0.1), (3/4 - 0.9)) / 2 = (0.075, -0.075)
  //   row 2: ignored -> (0, 0)
  Tensor logits = golden_logits();
  nn::cross_entropy(logits, golden_targets(), {.label_smoothing = 0.2}).backward();
  check_values(logits.grad().to_vector<double>(), {-0.325, 0.325, 0.075, -0.075, 0.0, 0.0});
}

TEST_CASE("cross_entropy: (B, T, C) logits with (B, T) targets equal the flattened (N, C) case") {
  manual_seed(3);
  Tensor logits = randn({2, 3, 5}, {.dtype = DType::f64});
  Tensor targets = ids({4, 0, -100, 2, -100, 1}, {2, 3});
  for (Reduction r : {Reduction::none, Reduction::sum, Reduction::mean}) {
    CrossEntropyOptions o{.label_smoothing = 0.1, .reduction = r};
    Tensor a = nn::cross_entropy(logits, targets, o);
    Tensor b = nn::cross_entropy(logits.reshape({6, 5}), targets.reshape({6}), o);
    CHECK(a.shape() == (r == Reduction::none ? Shape{2, 3} : Shape{}));
    check_values(a.to_vector<double>(), b.to_vector<double>());
  }
  // A single example: logits (C,) with a 0-d target.
  Tensor one = nn::cross_entropy(logits.select(0, 0).select(0, 0), ids({4}, {}));
  check_values({one.item()}, {nn::cross_entropy(logits, targets, {.reduction = Reduction::none}).to_vector<double>()[0]});
}

TEST_CASE("cross_entropy: every target ignored gives NaN (PyTorch's 0/0) and zero gradients") {
  Tensor logits = golden_logits();
  Tensor targets = ids({-100, -100, -100}, {3});
  Tensor loss = nn::cross_entropy(logits, targets, {.label_smoothing = 0.1});
  CHECK(std::isnan(loss.item()));
  loss.backward();
  check_values(logits.grad().to_vector<double>(), {0, 0, 0, 0, 0, 0});
  CHECK(nn::cross_entropy(logits, targets, {.reduction = Reduction::sum}).item() == 0.0);
}

TEST_CASE("cross_entropy: float64 gradcheck of label-smoothed CE with ignore_index, every reduction") {
  manual_seed(11);
  Tensor targets = ids({4, 0, 7, 2, 7, 1}, {2, 3});  // 7 is the ignore_index here
  for (Reduction r : {Reduction::none, Reduction::sum, Reduction::mean}) {
    for (double eps : {0.0, 0.1}) {
      CAPTURE(eps);
      Tensor logits = randn({2, 3, 5}, {.dtype = DType::f64}).requires_grad_();
      auto fn = [&](const std::vector<Tensor>& in) {
        return nn::cross_entropy(in[0], targets, {.label_smoothing = eps, .ignore_index = 7, .reduction = r});
      };
      check_report(gradcheck(fn, {logits}, {.name = "cross_entropy"}));
    }
  }
}

TEST_CASE("nll_loss equals cross_entropy on log_softmax; mse_loss") {
  manual_seed(5);
  Tensor logits = randn({4, 3}, {.dtype = DType::f64}).requires_grad_();
  Tensor targets = ids({2, -100, 0, 1}, {4});
  for (Reduction r : {Reduction::none, Reduction::sum, Reduction::mean}) {
    Tensor a = nn::nll_loss(log_softmax(logits, -1), targets, {.reduction = r});
    Tensor b = nn::cross_entropy(logits, targets, {.reduction = r});
    check_values(a.to_vector<double>(), b.to_vector<double>());
  }
  check_report(gradcheck([&](const std::vector<Tensor>& in) { return nn::nll_loss(in[0], targets); }, {logits},
                         {.name = "nll_loss"}));

  // mse: ((1 - 0)² + (2 - 4)²) = 5, mean 2.5; d/dx = 2 (x - y) / n = (1, -2)
  Tensor x = tensor({1, 2}, {2}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = tensor({0, 4}, {2}, {.dtype = DType::f64});
  Tensor loss = nn::mse_loss(x, y);
  check_values({loss.item()}, {2.5});
  check_values({nn::mse_loss(x, y, Reduction::sum).item()}, {5.0});
  check_values(nn::mse_loss(x, y, Reduction::none).to_vector<double>(), {1.0, 4.0});
  loss.backward();
  check_values(x.grad().to_vector<double>(), {1.0, -2.0});
  Tensor t = randn({3, 2}, {.dtype = DType::f64}).requires_grad_();
  check_report(gradcheck([](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1]); },
                         {randn({3, 2}, {.dtype = DType::f64}).requires_grad_(), t}, {.name = "mse_loss"}));
}

TEST_CASE("losses: error messages name the op, the values and the shapes") {
  Tensor logits = zeros({4, 7});
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, ids({0, 1, 2}, {3})),
                       "cross_entropy: targets (3,) must match the batch of logits (4, 7)", ShapeError);
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, ids({0, 9, 2, 1}, {4})),
                       doctest::Contains("cross_entropy: target 9 is out of range for 7 classes"), IndexError);
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, ids({0, -1, 2, 1}, {4})),
                       doctest::Contains("target -1 is out of range for 7 classes"), IndexError);
  CHECK_NOTHROW(nn::cross_entropy(logits, ids({0, -100, 2, 1}, {4})));
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, ids({0, 1, 2, 1}, {4}), {.label_smoothing = 1.5}),
                       "cross_entropy: label_smoothing = 1.5 not in [0, 1]", ValueError);
  CHECK_THROWS_WITH_AS(nn::cross_entropy(logits, zeros({4})),
                       doctest::Contains("cross_entropy: targets must be int64 class indices, got float32 (4,)"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(nn::nll_loss(logits, ids({0, 1}, {2})),
                       "nll_loss: targets (2,) must match the batch of logits (4, 7)", ShapeError);
  CHECK_THROWS_WITH_AS(nn::mse_loss(zeros({2, 3}), zeros({3, 2})),
                       "mse_loss: input (2, 3) and target (3, 2) must have the same shape", ShapeError);
}
