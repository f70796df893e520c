// nn layers: Linear, Embedding, Dropout. Gradchecks in float64 w.r.t. inputs and parameters,
// PyTorch's default init, and the error messages of bad options and bad inputs.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "tools/gradcheck.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {


}  // namespace

TEST_CASE("Linear: shapes, parameter names and PyTorch's default init") {
  manual_seed(1);
  nn::Linear fc({.in_features = 64, .out_features = 300});
  CHECK(names_of(fc) == std::vector<std::string>{"weight", "bias"});
  CHECK(fc.weight.shape() == Shape{300, 64});
  CHECK(fc.bias.shape() == Shape{300});
  CHECK(fc.weight.requires_grad());
  // kaiming_uniform(a = √5) on (out, in) is U(±√(6 / ((1 + 5) in))) = U(±1/√in); the bias U(±1/√in).
  const double bound = 1.0 / 8.0;
  for (const Tensor& p : {fc.weight, fc.bias}) {
    std::vector<double> v = p.to_vector<double>();
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    CHECK(lo >= -bound);
    CHECK(hi <= bound);
    CHECK(lo < -0.9 * bound);  // it fills the whole range
    CHECK(hi > 0.9 * bound);
  }
  CHECK(fc(zeros({2, 7, 64})).shape() == Shape{2, 7, 300});

  nn::Linear no_bias({.in_features = 3, .out_features = 2, .bias = false});
  CHECK(names_of(no_bias) == std::vector<std::string>{"weight"});
  CHECK_FALSE(no_bias.bias.defined());
}

TEST_CASE("Linear: y = x Wᵀ + b (hand-computed)") {
  nn::Linear fc({.in_features = 2, .out_features = 2});
  {
    NoGradGuard no_grad;
    fc.weight.copy_(tensor({1, 2, 3, 4}, {2, 2}));
    fc.bias.copy_(tensor({0.5, -1}, {2}));
  }
  // [1, 1] · [[1, 3], [2, 4]] + [0.5, -1] = [3.5, 6]
  CHECK(fc(tensor({1, 1}, {1, 2})).to_vector<double>() == std::vector<double>{3.5, 6.0});
}

TEST_CASE("Linear: gradcheck w.r.t. input, weight and bias (float64)") {
  manual_seed(2);
  for (bool bias : {true, false}) {
    CAPTURE(bias);
    nn::Linear fc({.in_features = 4, .out_features = 3, .bias = bias});
    fc.to(DType::f64);
    auto fn = [&](const std::vector<Tensor>& in) { return fc(in[0]); };
    check_report(gradcheck(fn, with_parameters({randn64({2, 3, 4})}, fc), {.name = "Linear"}));
  }
}

TEST_CASE("Linear: errors name the layer, the expectation and the shapes") {
  CHECK_THROWS_WITH_AS(nn::Linear({.in_features = 0, .out_features = 3}),
                       "linear: in_features = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::Linear({.in_features = 3, .out_features = -1}),
                       "linear: out_features = -1 must be positive", ValueError);
  nn::Linear fc({.in_features = 4, .out_features = 3});
  CHECK_THROWS_WITH_AS(fc(zeros({2, 5})), "linear: input feature size 5 != in_features 4 (x: (2, 5))", ShapeError);
  CHECK_THROWS_WITH_AS(fc(zeros({2, 4}, {.dtype = DType::f64})), doctest::Contains("input dtype float64 != parameter dtype float32"),
                       DTypeError);
}

TEST_CASE("Embedding: lookup, N(0, 1) init and the zeroed padding row") {
  manual_seed(3);
  nn::Embedding emb({.num_embeddings = 1000, .embedding_dim = 64, .padding_idx = 0});
  CHECK(names_of(emb) == std::vector<std::string>{"weight"});
  CHECK(emb.weight.shape() == Shape{1000, 64});
  std::vector<double> row0 = emb.weight.select(0, 0).to_vector<double>();
  CHECK(std::all_of(row0.begin(), row0.end(), [](double v) { return v == 0; }));
  std::vector<double> v = emb.weight.narrow(0, 1, 999).to_vector<double>();
  double mean = 0, sq = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) sq += (x - mean) * (x - mean) / v.size();
  CHECK(std::abs(mean) < 0.02);
  CHECK(std::abs(std::sqrt(sq) - 1.0) < 0.02);

  Tensor ids = from_vector<int64_t>({5, 0, 7, 5, 1, 0}, {2, 3}, {.dtype = DType::i64});
  Tensor y = emb(ids);
  CHECK(y.shape() == Shape{2, 3, 64});
  CHECK(y.select(0, 0).select(0, 0).to_vector<double>() == emb.weight.select(0, 5).to_vector<double>());

  // Negative padding_idx counts from the end, as in PyTorch.
  nn::Embedding last({.num_embeddings = 10, .embedding_dim = 2, .padding_idx = -1});
  CHECK(last.padding_index() == 9);
  CHECK(last.weight.select(0, 9).to_vector<double>() == std::vector<double>{0, 0});
}

TEST_CASE("Embedding: the padding row gets no gradient; repeated ids accumulate") {
  nn::Embedding emb({.num_embeddings = 4, .embedding_dim = 2, .padding_idx = 1});
  Tensor ids = from_vector<int64_t>({1, 2, 2, 3, 1}, {5}, {.dtype = DType::i64});
  emb(ids).sum().backward();
  // rows: 0 unused, 1 padding (2 uses, no gradient), 2 used twice, 3 once
  CHECK(emb.weight.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0, 2, 2, 1, 1});
}

TEST_CASE("Embedding: gradcheck w.r.t. the table (float64)") {
  manual_seed(4);
  nn::Embedding emb({.num_embeddings = 5, .embedding_dim = 3});
  emb.to(DType::f64);
  Tensor ids = from_vector<int64_t>({0, 4, 2, 2, 1, 4}, {2, 3}, {.dtype = DType::i64});
  auto fn = [&](const std::vector<Tensor>& in) { return emb(in[0]); };
  check_report(gradcheck(fn, with_parameters({ids}, emb), {.name = "Embedding"}));

  // With a padding row that the ids avoid, everything else is unchanged.
  nn::Embedding padded({.num_embeddings = 5, .embedding_dim = 3, .padding_idx = 3});
  padded.to(DType::f64);
  auto fn_padded = [&](const std::vector<Tensor>& in) { return padded(in[0]); };
  check_report(gradcheck(fn_padded, with_parameters({ids}, padded), {.name = "Embedding(padding_idx=3)"}));
}

TEST_CASE("Embedding: errors") {
  CHECK_THROWS_WITH_AS(nn::Embedding({.num_embeddings = 0, .embedding_dim = 3}),
                       "embedding: num_embeddings = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::Embedding({.num_embeddings = 3, .embedding_dim = 0}),
                       "embedding: embedding_dim = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::Embedding({.num_embeddings = 3, .embedding_dim = 2, .padding_idx = 3}),
                       "embedding: padding_idx = 3 not in [-3, 3) (num_embeddings = 3)", ValueError);
  nn::Embedding emb({.num_embeddings = 3, .embedding_dim = 2});
  CHECK_THROWS_WITH_AS(emb(zeros({2})), "embedding: ids must be int64, got float32 (2,)", DTypeError);
  CHECK_THROWS_WITH_AS(emb(from_vector<int64_t>({0, 3}, {2}, {.dtype = DType::i64})), doctest::Contains("id 3 is out of range"), IndexError);
}

TEST_CASE("Dropout: p validation, eval identity, keep rate and scaling") {
  CHECK_THROWS_WITH_AS(nn::Dropout({.p = 1.2}), "dropout: p = 1.2 not in [0, 1)", ValueError);
  CHECK_THROWS_WITH_AS(nn::Dropout({.p = 1.0}), "dropout: p = 1 not in [0, 1)", ValueError);
  CHECK_THROWS_WITH_AS(nn::Dropout({.p = -0.1}), "dropout: p = -0.1 not in [0, 1)", ValueError);
  CHECK(nn::Dropout().options().p == 0.5);

  manual_seed(5);
  nn::Dropout drop({.p = 0.25});
  Tensor x = ones({100000});
  std::vector<double> y = drop(x).to_vector<double>();
  int64_t zeros_seen = 0;
  for (double v : y) {
    if (v == 0) ++zeros_seen;
    else CHECK(v == doctest::Approx(1.0 / 0.75));
  }
  CHECK(static_cast<double>(zeros_seen) / y.size() == doctest::Approx(0.25).epsilon(0.02));

  drop.eval();
  CHECK(drop(x).to_vector<double>() == x.to_vector<double>());
  drop.train();
  CHECK(nn::Dropout({.p = 0.0})(x).to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("Dropout: the gradient goes through the kept elements only, scaled") {
  manual_seed(6);
  nn::Dropout drop({.p = 0.5});
  Tensor x = ones({1000}).requires_grad_();
  Tensor y = drop(x);
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == y.detach().to_vector<double>());  // dy/dx = mask / (1 - p) = y here
}
