// nn::init: each initialiser against its distribution (bounds, mean and std on a large tensor),
// fan computation and gains as torch.nn.init, orthogonality of orthogonal_, and determinism.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/init.h"
#include "ops/ops.h"

using namespace seqgrad;
namespace init = seqgrad::nn::init;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s{.mean = 0, .std = 0, .min = v[0], .max = v[0]};
  for (double x : v) {
    s.mean += x / v.size();
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  for (double x : v) s.std += (x - s.mean) * (x - s.mean) / v.size();
  s.std = std::sqrt(s.std);
  return s;
}

// A uniform U(-b, b) on ~250k samples: mean ~0 (±0.01 b), std b/√3 (±1%), range filled.
void check_uniform(const Tensor& t, double bound) {
  Stats s = stats_of(t);
  CHECK(s.min >= -bound);
  CHECK(s.max <= bound);
  CHECK(s.min < -0.999 * bound);
  CHECK(s.max > 0.999 * bound);
  CHECK(std::abs(s.mean) < 0.01 * bound);
  CHECK(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));
}

void check_normal(const Tensor& t, double mean, double std) {
  Stats s = stats_of(t);
  CHECK(std::abs(s.mean - mean) < 0.01 * std);
  CHECK(s.std == doctest::Approx(std).epsilon(0.01));
}

}  // namespace

TEST_CASE("init: fans and gains as torch.nn.init") {
  init::Fans f = init::calculate_fan_in_and_fan_out(empty({300, 200}));
  CHECK(f.fan_in == 200);
  CHECK(f.fan_out == 300);
  f = init::calculate_fan_in_and_fan_out(empty({16, 8, 3, 5}));  // conv: receptive field 15
  CHECK(f.fan_in == 8 * 15);
  CHECK(f.fan_out == 16 * 15);
  CHECK_THROWS_WITH_AS(init::calculate_fan_in_and_fan_out(empty({5})),
                       "calculate_fan_in_and_fan_out: fan in and fan out need at least 2 dimensions, got (5,)",
                       ShapeError);

  using N = init::Nonlinearity;
  CHECK(init::calculate_gain(N::linear) == 1.0);
  CHECK(init::calculate_gain(N::sigmoid) == 1.0);
  CHECK(init::calculate_gain(N::tanh) == doctest::Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(N::relu) == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(N::leaky_relu) == doctest::Approx(std::sqrt(2.0 / (1 + 0.01 * 0.01))));
  CHECK(init::calculate_gain(N::leaky_relu, std::sqrt(5.0)) == doctest::Approx(std::sqrt(2.0 / 6.0)));
  CHECK(init::calculate_gain(N::selu) == 0.75);
}

TEST_CASE("init: uniform_, normal_, constant_, zeros_, ones_") {
  manual_seed(21);
  Tensor t = empty({500, 500});
  check_uniform(init::uniform_(t, -0.3, 0.3), 0.3);
  Stats s = stats_of(init::uniform_(t, 2, 5));
  CHECK(s.min >= 2);
  CHECK(s.max < 5);
  CHECK(s.mean == doctest::Approx(3.5).epsilon(0.01));
  check_normal(init::normal_(t, 1.5, 0.2), 1.5, 0.2);
  s = stats_of(init::constant_(t, 0.25));
  CHECK((s.min == 0.25 && s.max == 0.25));
  s = stats_of(init::zeros_(t));
  CHECK((s.min == 0 && s.max == 0));
  s = stats_of(init::ones_(t));
  CHECK((s.min == 1 && s.max == 1));
}

TEST_CASE("init: xavier and kaiming follow their formulas") {
  manual_seed(22);
  Tensor t = empty({400, 600});  // fan_out 400, fan_in 600
  check_uniform(init::xavier_uniform_(t), std::sqrt(6.0 / 1000));
  check_uniform(init::xavier_uniform_(t, 2.0), 2.0 * std::sqrt(6.0 / 1000));
  check_normal(init::xavier_normal_(t), 0, std::sqrt(2.0 / 1000));
  // kaiming defaults: a = 0, fan_in, leaky_relu -> gain √2, std = √2 / √600
  check_uniform(init::kaiming_uniform_(t), std::sqrt(3.0) * std::sqrt(2.0 / 600));
  check_normal(init::kaiming_normal_(t), 0, std::sqrt(2.0 / 600));
  check_normal(init::kaiming_normal_(t, {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu}),
               0, std::sqrt(2.0 / 400));
  // Linear's default: a = √5 -> U(±1/√fan_in)
  check_uniform(init::kaiming_uniform_(t, {.a = std::sqrt(5.0)}), 1.0 / std::sqrt(600.0));
}

TEST_CASE("init: orthogonal_ gives orthonormal rows or columns, times gain") {
  manual_seed(23);
  for (Shape shape : {Shape{64, 64}, Shape{40, 90}, Shape{90, 40}, Shape{6, 4, 5}}) {
    CAPTURE(fmt::format("{}", shape));
    for (DType dtype : {DType::f32, DType::f64}) {
      Tensor t = empty(shape, {.dtype = dtype});
      init::orthogonal_(t, 2.0);
      Tensor q = t.reshape({shape[0], -1}).to(DType::f64);  // (rows, cols)
      const int64_t rows = q.size(0), cols = q.size(1);
      // QQᵀ = 4 I when rows <= cols (orthonormal rows), else QᵀQ = 4 I.
      Tensor gram = rows <= cols ? matmul(q, q.t()) : matmul(q.t(), q);
      const int64_t n = gram.size(0);
      std::vector<double> g = gram.to_vector<double>();
      double worst = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) worst = std::max(worst, std::abs(g[i * n + j] - (i == j ? 4.0 : 0.0)));
      CHECK(worst < (dtype == DType::f64 ? 1e-12 : 1e-5));
    }
  }
  // Haar-distributed: over many 2x2 matrices, each entry averages 0 (a bias would show without the
  // sign fix, where diag(R) > 0 is not enforced).
  double sum00 = 0;
  Tensor q = empty({2, 2}, {.dtype = DType::f64});
  for (int i = 0; i < 4000; ++i) sum00 += init::orthogonal_(q).to_vector<double>()[0];
  CHECK(std::abs(sum00 / 4000) < 0.05);
}

TEST_CASE("init: seeded, so the same seed gives the same values; parameters stay leaves") {
  Tensor a = empty({3, 4}), b = empty({3, 4});
  manual_seed(7);
  init::xavier_uniform_(a);
  init::orthogonal_(a);
  manual_seed(7);
  init::xavier_uniform_(b);
  init::orthogonal_(b);
  CHECK(a.to_vector<double>() == b.to_vector<double>());

  Tensor p = empty({3, 4}).requires_grad_();
  init::kaiming_uniform_(p);  // a parameter: allowed, and no history is recorded
  init::orthogonal_(p);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());

  CHECK_THROWS_WITH_AS(init::orthogonal_(empty({4})),
                       "orthogonal_: only tensors with 2 or more dimensions are supported, got (4,)", ShapeError);
  CHECK_THROWS_WITH_AS(init::uniform_(empty({2}, {.dtype = DType::i64})),
                       "uniform_: expected a floating tensor, got int64 (2,)", DTypeError);
}
