// The attention family: masked_softmax (fully masked rows give zeros and zero gradients, never
// NaN), float64 gradchecks of every kind w.r.t. queries, keys, values and every parameter (B=2,
// Q=3, K=4, d=4) without and with valid lengths (per batch row and per query), chunked == unchunked
// additive attention (values and gradients, chunk sizes that do and don't divide K), the weights
// each kind keeps, and the error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/attention.h"
#include "tools/gradcheck.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

constexpr DType f64 = DType::f64;
constexpr int64_t kB = 2, kQ = 3, kK = 4;


bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

Tensor lengths1(std::vector<int64_t> v) {
  return from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::i64});
}
Tensor lengths2(std::vector<int64_t> v, int64_t rows, int64_t cols) {
  return from_vector<int64_t>(v, {rows, cols}, {.dtype = DType::i64});
}

// The three masking modes every kind is checked under. Per query includes a length-0 query (a
// fully masked row: zero context, zero gradient).
struct Masking {
  const char* name;
  Tensor lengths;
};
std::vector<Masking> maskings() {
  return {{"no lengths", {}},
          {"per batch (B,)", lengths1({4, 2})},
          {"per query (B, Q)", lengths2({4, 3, 1, 2, 0, 4}, kB, kQ)}};
}

// One row per kind: sizes and a factory (float32, converted to float64 by the tests).
struct Kind {
  std::string name;
  int64_t dq, dk, dv;
  std::function<std::unique_ptr<nn::Attention>()> make;
  bool context_is_weights_times_values = true;  // context == last_weights · values (no output layer)
};

std::vector<Kind> kinds() {
  using nn::LocalAttention;
  return {
      {"additive (Dq != Dk)", 3, 5, 4,
       [] { return std::make_unique<nn::AdditiveAttention>(nn::AdditiveAttention::Options{3, 5, 4}); }},
      {"dot", 4, 4, 4, [] { return std::make_unique<nn::DotProductAttention>(); }},
      {"dot with query projection", 3, 5, 4,
       [] {
         return std::make_unique<nn::DotProductAttention>(
             nn::DotProductAttention::Options{.query_size = 3, .key_size = 5});
       }},
      {"scaled_dot", 4, 4, 4, [] { return std::make_unique<nn::ScaledDotProductAttention>(); }},
      {"hybrid (Dq != Dk)", 3, 5, 4,
       [] {
         return std::make_unique<nn::HybridAttention>(
             nn::HybridAttention::Options{.query_size = 3, .key_size = 5, .hidden_size = 4});
       }},
      {"multi_level (additive + scaled_dot)", 4, 4, 4,
       [] {
         std::vector<std::unique_ptr<nn::Attention>> levels;
         levels.push_back(std::make_unique<nn::AdditiveAttention>(nn::AdditiveAttention::Options{4, 4, 4}));
         levels.push_back(std::make_unique<nn::ScaledDotProductAttention>());
         return std::make_unique<nn::MultiLevelAttention>(std::move(levels));
       },
       false},
      {"multihead (E=4, h=2)", 4, 4, 4,
       [] {
         return std::make_unique<nn::MultiHeadAttention>(
             nn::MultiHeadAttention::Options{.embed_dim = 4, .num_heads = 2});
       },
       false},
      {"multihead (kdim=5, vdim=3)", 4, 5, 3,
       [] {
         return std::make_unique<nn::MultiHeadAttention>(
             nn::MultiHeadAttention::Options{.embed_dim = 4, .num_heads = 2, .kdim = 5, .vdim = 3});
       },
       false},
      {"local monotonic (additive, D=1)", 3, 5, 4,
       [] {
         return std::make_unique<LocalAttention>(
             LocalAttention::Options{.query_size = 3, .key_size = 5, .hidden_size = 4, .window = 1});
       }},
      {"local predictive (scaled_dot, D=2)", 3, 5, 4,
       [] {
         return std::make_unique<LocalAttention>(LocalAttention::Options{.query_size = 3,
                                                                         .key_size = 5,
                                                                         .hidden_size = 4,
                                                                         .window = 2,
                                                                         .position = LocalAttention::Position::predictive,
                                                                         .score = LocalAttention::Score::scaled_dot});
       }},
      {"chunked additive (C=3)", 3, 5, 4,
       [] {
         return std::make_unique<nn::ChunkedAdditiveAttention>(
             nn::ChunkedAdditiveAttention::Options{
                 .query_size = 3, .key_size = 5, .hidden_size = 4, .chunk_size = 3, .keep_weights = true});
       }},
  };
}

}  // namespace

// ---- masked_softmax

TEST_CASE("masked_softmax: hand-computed, per batch and per query") {
  Tensor scores = tensor({0, std::log(3.0), 5, 7, 1, 1, 1, 1}, {2, 1, 4});
  // row 0 keeps keys 0, 1: [1, 3] / 4; row 1 keeps 3 of 4 equal scores: 1/3 each
  Tensor w = nn::masked_softmax(scores, lengths1({2, 3}));
  std::vector<double> expected = {0.25, 0.75, 0, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0};
  std::vector<double> got = w.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-6));

  // per query: (B=1, Q=2, K=3), lengths [1, 2]
  Tensor w2 = nn::masked_softmax(zeros({1, 2, 3}), lengths2({1, 2}, 1, 2));
  CHECK(w2.to_vector<double>() == std::vector<double>{1, 0, 0, 0.5, 0.5, 0});

  // no lengths: a plain softmax; 4-D scores (B, h, Q, K) take (B,) lengths
  CHECK(max_abs_diff(nn::masked_softmax(scores, {}), softmax(scores, -1)) == 0);
  Tensor w4 = nn::masked_softmax(zeros({2, 3, 1, 4}), lengths1({1, 4}));
  CHECK(w4.select(0, 0).sum().item() == doctest::Approx(3.0));
  CHECK(w4.select(0, 0).select(0, 2).to_vector<double>() == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE("masked_softmax: a fully masked row gives zeros and a zero gradient, never NaN") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    Tensor scores = randn({2, 3, 4}, {.dtype = dtype}).requires_grad_();
    Tensor lengths = lengths2({0, 2, 4, 0, 0, 1}, 2, 3);  // rows (0,0), (1,0), (1,1) fully masked
    Tensor w = nn::masked_softmax(scores, lengths);
    REQUIRE(all_finite(w));
    CHECK(w.select(0, 0).select(0, 0).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    CHECK(w.select(0, 1).select(0, 1).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    CHECK(w.select(0, 1).select(0, 2).sum().item() == doctest::Approx(1.0));
    (w * randn({2, 3, 4}, {.dtype = dtype})).sum().backward();
    Tensor g = scores.grad();
    REQUIRE(all_finite(g));
    CHECK(g.select(0, 0).select(0, 0).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    CHECK(g.select(0, 1).select(0, 0).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    // masked keys of a partly masked row get no gradient either
    CHECK(g.select(0, 0).select(0, 1).narrow(0, 2, 2).to_vector<double>() == std::vector<double>{0, 0});
  }
  // every row masked, all lengths 0 (B,)
  Tensor scores = randn({2, 1, 3}, {.dtype = f64}).requires_grad_();
  Tensor w = nn::masked_softmax(scores, lengths1({0, 0}));
  CHECK(w.sum().item() == 0);
  w.sum().backward();
  CHECK(scores.grad().abs().sum().item() == 0);
}

TEST_CASE("masked_softmax: gradcheck (float64) with per-batch and per-query lengths, including empty rows") {
  manual_seed(11);
  for (const Masking& m : maskings()) {
    CAPTURE(m.name);
    auto fn = [&](const std::vector<Tensor>& in) { return nn::masked_softmax(in[0], m.lengths); };
    check_report(gradcheck(fn, {randn64({kB, kQ, kK})}, {.name = "masked_softmax"}));
  }
}

TEST_CASE("masked_softmax: errors name the op and the shapes") {
  Tensor scores = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(nn::masked_softmax(scores, lengths1({5, 1})),
                       doctest::Contains("masked_softmax: lengths[0] = 5 not in [0, 4] (lengths (2,) for 4 positions)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::masked_softmax(scores, lengths1({1, -1})),
                       doctest::Contains("lengths[1] = -1 not in [0, 4]"), ValueError);
  CHECK_THROWS_WITH_AS(nn::masked_softmax(scores, lengths1({1, 1, 1})),
                       doctest::Contains("valid_lengths must have shape (B,) = (2,) or (B, Q) = (2, 3), got (3,)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(nn::masked_softmax(scores, tensor({1, 2}, {2})),
                       doctest::Contains("the mask must be int64 valid lengths or a bool keep mask (true = keep), "
                                         "got float32 (2,)"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(nn::softmax_with_keep(scores, zeros({2, 3, 4})), doctest::Contains("keep mask must be bool"),
                       DTypeError);
}

// ---- every kind

TEST_CASE("attention kinds: gradcheck (float64) w.r.t. queries, keys, values and every parameter") {
  for (const Kind& kind : kinds()) {
    for (const Masking& m : maskings()) {
      CAPTURE(kind.name);
      CAPTURE(m.name);
      manual_seed(21);
      std::unique_ptr<nn::Attention> attention = kind.make();
      attention->to(f64);
      attention->eval();
      Tensor q = randn64({kB, kQ, kind.dq}), k = randn64({kB, kK, kind.dk}), v = randn64({kB, kK, kind.dv});
      auto fn = [&](const std::vector<Tensor>& in) { return (*attention)(in[0], in[1], in[2], m.lengths); };
      check_report(gradcheck(fn, with_parameters({q, k, v}, *attention), {.name = kind.name}));
    }
  }
}

TEST_CASE("attention kinds: shapes, kept weights, fully masked queries") {
  for (const Kind& kind : kinds()) {
    CAPTURE(kind.name);
    manual_seed(22);
    std::unique_ptr<nn::Attention> attention = kind.make();
    attention->to(f64);
    Tensor q = randn64({kB, kQ, kind.dq}), k = randn64({kB, kK, kind.dk}), v = randn64({kB, kK, kind.dv});
    Tensor lengths = lengths2({4, 3, 1, 2, 0, 4}, kB, kQ);
    Tensor context = (*attention)(q, k, v, lengths);
    REQUIRE(all_finite(context));
    Tensor w = attention->last_weights();
    REQUIRE(w.defined());
    CHECK(w.shape() == Shape{kB, kQ, kK});
    CHECK_FALSE(w.requires_grad());
    // rows sum to 1 except the empty one (b=1, q=1), which is all zeros; masked keys get 0
    std::vector<double> sums = w.sum({2}).to_vector<double>();
    bool gaussian = kind.name.find("predictive") != std::string::npos;  // local-p: not renormalised
    bool local = kind.name.find("local") != std::string::npos;  // a window may hold no valid key
    for (int i = 0; i < kB * kQ; ++i) {
      CAPTURE(i);
      if (i == 4) CHECK(sums[i] == 0);
      else if (gaussian) CHECK(sums[i] <= 1 + 1e-12);
      else if (local && sums[i] == 0) continue;
      else CHECK(sums[i] == doctest::Approx(1.0).epsilon(1e-12));
    }
    CHECK(w.select(0, 0).select(0, 2).narrow(0, 1, 3).abs().sum().item() == 0);  // length 1
    if (kind.context_is_weights_times_values) {
      CHECK(context.shape() == Shape{kB, kQ, kind.dv});
      CHECK(max_abs_diff(context, matmul(w, v)) < 1e-12);
    }
  }
}

TEST_CASE("attention kinds: argument errors name the kind and the shapes") {
  for (const Kind& kind : kinds()) {
    CAPTURE(kind.name);
    std::unique_ptr<nn::Attention> a = kind.make();
    Tensor q = randn({kB, kQ, kind.dq}), k = randn({kB, kK, kind.dk}), v = randn({kB, kK, kind.dv});
    CHECK_THROWS_WITH_AS((*a)(randn({3, kQ, kind.dq}), k, v), doctest::Contains("batch sizes differ: queries (3, 3,"),
                         ShapeError);
    CHECK_THROWS_WITH_AS((*a)(q, k, randn({kB, kK + 1, kind.dv})),
                         doctest::Contains("must have the same number of positions K"), ShapeError);
    CHECK_THROWS_WITH_AS((*a)(q, k, v, lengths1({5, 1})), doctest::Contains("lengths[0] = 5 not in [0, 4]"),
                         ValueError);
    CHECK_THROWS_WITH_AS((*a)(q, k, v, lengths2({1, 1, 1, 1, -2, 1}, kB, kQ)),
                         doctest::Contains("lengths[4] = -2 not in [0, 4]"), ValueError);
    CHECK_THROWS_WITH_AS((*a)(q, k, v, lengths2({1, 1, 1, 1}, kB, 2)),
                         doctest::Contains("valid_lengths must have shape (B,) = (2,) or (B, Q) = (2, 3), got (2, 2)"),
                         ShapeError);
    CHECK_THROWS_WITH_AS((*a)(randn({kB, 1, kQ, kind.dq}), k, v),
                         doctest::Contains("queries must be (B, Q, Dq) or (B, Dq), got (2, 1, 3,"), ShapeError);
    CHECK_THROWS_WITH_AS((*a)(q, k, v, ones({kB, kQ})),
                         doctest::Contains("the mask must be int64 valid lengths or a bool keep mask (true = keep), "
                                           "got float32 (2, 3)"),
                         DTypeError);
    CHECK_THROWS_WITH_AS((*a)(q, k, v, ones({kB, kK + 1}, {.dtype = DType::b8})),
                         doctest::Contains("a keep mask must have shape (B, K) = (2, 4), (B, 1, K) or (B, Q, K) = "
                                           "(2, 3, 4), got (2, 5)"),
                         ShapeError);
    CHECK_THROWS_AS((*a)(randn({kB, kQ, kind.dq + 2}), k, v), ShapeError);  // wrong query feature size
  }
  nn::AdditiveAttention additive({.query_size = 3, .key_size = 5, .hidden_size = 4});
  Tensor q = randn({2, 3, 3}), k = randn({2, 4, 5}), v = randn({2, 4, 4});
  CHECK_THROWS_WITH_AS(additive(randn({2, 3, 6}), k, v),
                       "additive_attention: queries feature size 6 != query_size 3 (queries: (2, 3, 6))", ShapeError);
  CHECK_THROWS_WITH_AS(additive(q, randn({2, 4, 2}), v),
                       "additive_attention: keys feature size 2 != key_size 5 (keys: (2, 4, 2))", ShapeError);
  CHECK_THROWS_WITH_AS(additive.attend_projected(q, k, v),
                       "additive_attention: projected keys feature size 5 != hidden_size 4 (projected keys: (2, 4, 5))",
                       ShapeError);
  CHECK_THROWS_WITH_AS(additive(q, k, v.to(f64)), doctest::Contains("must share one floating dtype"), DTypeError);
  CHECK_THROWS_WITH_AS(nn::ScaledDotProductAttention()(q, k, v),
                       doctest::Contains("queries (2, 3, 3) and keys (2, 4, 5) need the same feature size"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(nn::AdditiveAttention({.query_size = 3, .key_size = 5}),
                       "additive_attention: hidden_size = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::MultiHeadAttention({.embed_dim = 6, .num_heads = 4}),
                       "multihead_attention: num_heads = 4 must be positive and divide embed_dim = 6", ValueError);
  CHECK_THROWS_WITH_AS(
      nn::ChunkedAdditiveAttention({.query_size = 3, .key_size = 5, .hidden_size = 4, .chunk_size = 0}),
      "chunked_additive_attention: chunk_size = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::DotProductAttention({.query_size = 3}), doctest::Contains("give both query_size and key_size"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::LocalAttention({.query_size = 3, .key_size = 5, .hidden_size = 4, .window = 0,
                                           .position = nn::LocalAttention::Position::predictive}),
                       doctest::Contains("predictive positions need window >= 1"), ValueError);
}

// ---- additive

TEST_CASE("AdditiveAttention: parameter names, hand-computed scores, project_keys + attend_projected") {
  nn::AdditiveAttention a({.query_size = 1, .key_size = 1, .hidden_size = 1});
  CHECK(names_of(a) == std::vector<std::string>{"w_q.weight", "w_k.weight", "w_v.weight"});
  {
    NoGradGuard no_grad;
    a.w_q->weight.fill_(1);
    a.w_k->weight.fill_(2);
    a.w_v->weight.fill_(3);
  }
  // s = 3 tanh(q + 2k): q = 0.5, k = [0, 1] -> [3 tanh(0.5), 3 tanh(2.5)]
  Tensor s = a.score(tensor({0.5}, {1, 1, 1}), tensor({0, 1}, {1, 2, 1}));
  CHECK(s.to_vector<double>()[0] == doctest::Approx(3 * std::tanh(0.5)));
  CHECK(s.to_vector<double>()[1] == doctest::Approx(3 * std::tanh(2.5)));

  manual_seed(31);
  nn::AdditiveAttention b({.query_size = 3, .key_size = 5, .hidden_size = 4});
  Tensor q = randn({2, 3, 3}), k = randn({2, 4, 5}), v = randn({2, 4, 4});
  Tensor lengths = lengths1({3, 4});
  Tensor pk = b.project_keys(k);
  CHECK(pk.shape() == Shape{2, 4, 4});
  CHECK(max_abs_diff(b.attend_projected(q, pk, v, lengths), b(q, k, v, lengths)) < 1e-6);
  CHECK(max_abs_diff(b.last_scores(), b.score(q, k)) < 1e-6);
}

TEST_CASE("AdditiveAttention: gradcheck through project_keys + attend_projected (float64)") {
  manual_seed(32);
  nn::AdditiveAttention a({.query_size = 3, .key_size = 5, .hidden_size = 4});
  a.to(f64);
  for (const Masking& m : maskings()) {
    CAPTURE(m.name);
    auto fn = [&](const std::vector<Tensor>& in) {
      return a.attend_projected(in[0], a.project_keys(in[1]), in[2], m.lengths);
    };
    check_report(gradcheck(fn, with_parameters({randn64({2, 3, 3}), randn64({2, 4, 5}), randn64({2, 4, 4})}, a),
                           {.name = "attend_projected"}));
  }
}

// ---- chunked == unchunked

TEST_CASE("ChunkedAdditiveAttention equals AdditiveAttention: values and gradients, every chunk size") {
  manual_seed(41);
  nn::AdditiveAttention reference({.query_size = 3, .key_size = 5, .hidden_size = 6});
  reference.to(f64);
  const int64_t keys = 7;
  Tensor q = randn64({2, 3, 3}), k = randn64({2, keys, 5}), v = randn64({2, keys, 4});
  std::vector<Masking> masks = {{"no lengths", {}},
                                {"per batch", lengths1({7, 3})},
                                {"per query, with empty rows", lengths2({7, 0, 2, 5, 1, 0}, 2, 3)}};
  for (int64_t chunk : {1, 2, 3, 4, 6, 7, 8, 100}) {
    nn::ChunkedAdditiveAttention chunked(
        {.query_size = 3, .key_size = 5, .hidden_size = 6, .chunk_size = chunk, .keep_weights = true});
    chunked.to(f64);
    REQUIRE(chunked.load_state_dict(reference.state_dict()).ok());
    for (const Masking& m : masks) {
      CAPTURE(chunk);
      CAPTURE(m.name);
      Tensor dy = randn({2, 3, 4}, {.dtype = f64});
      std::vector<Tensor> inputs = with_parameters({q, k, v}, reference);
      std::vector<Tensor> inputs_c = with_parameters({q, k, v}, chunked);
      Tensor y = reference(q, k, v, m.lengths);
      Tensor y_c = chunked(q, k, v, m.lengths);
      CHECK(max_abs_diff(y, y_c) < 1e-12);
      CHECK(max_abs_diff(reference.last_weights(), chunked.last_weights()) < 1e-12);
      CHECK(max_abs_diff(reference.last_scores(), chunked.last_scores()) < 1e-12);
      std::vector<Tensor> g = autograd::grad({y}, inputs, {dy});
      std::vector<Tensor> g_c = autograd::grad({y_c}, inputs_c, {dy});
      REQUIRE(g.size() == g_c.size());
      for (size_t i = 0; i < g.size(); ++i) {
        CAPTURE(i);
        CHECK(max_abs_diff(g[i], g_c[i]) < 1e-12);
      }
    }
  }
}

TEST_CASE("chunked_additive_attention: gradcheck of the fused op (float64), with and without dropout") {
  manual_seed(42);
  Tensor keep = lt(arange(0, 5).view({1, 1, 5}), lengths2({5, 0, 3, 2, 1, 4}, 2, 3).view({2, 3, 1}));  // (2, 3, 5)
  for (int64_t chunk : {2, 5}) {
    for (double p : {0.0, 0.4}) {
      CAPTURE(chunk);
      CAPTURE(p);
      // dropout masks come from the generator: reseed so that every evaluation draws the same one
      auto fn = [&](const std::vector<Tensor>& in) {
        manual_seed(7);
        return chunked_additive_attention(in[0], in[1], in[2], in[3], keep, chunk, p);
      };
      check_report(gradcheck(fn, {randn64({2, 3, 4}), randn64({2, 5, 4}), randn64({1, 4}), randn64({2, 5, 3})},
                             {.name = "chunked_additive_attention"}));
    }
  }
}

TEST_CASE("ChunkedAdditiveAttention: dropout draws AdditiveAttention's mask when chunk_size >= K") {
  manual_seed(43);
  nn::AdditiveAttention reference({.query_size = 3, .key_size = 5, .hidden_size = 4, .dropout = 0.5});
  nn::ChunkedAdditiveAttention chunked(
      {.query_size = 3, .key_size = 5, .hidden_size = 4, .dropout = 0.5, .chunk_size = 4});
  reference.to(f64);
  chunked.to(f64);
  REQUIRE(chunked.load_state_dict(reference.state_dict()).ok());
  Tensor q = randn({2, 3, 3}, {.dtype = f64}), k = randn({2, 4, 5}, {.dtype = f64}), v = randn({2, 4, 4}, {.dtype = f64});
  manual_seed(99);
  Tensor y = reference(q, k, v, lengths1({4, 2}));
  manual_seed(99);
  Tensor y_c = chunked(q, k, v, lengths1({4, 2}));
  CHECK(max_abs_diff(y, y_c) < 1e-12);
  // eval(): no dropout, and the kept weights are the same either way
  reference.eval();
  Tensor y_eval = reference(q, k, v);
  CHECK(max_abs_diff(y_eval, matmul(reference.last_weights(), v)) < 1e-12);
}

TEST_CASE("chunked_additive_attention: create_graph differentiates the composed twin, as plain attention's") {
  // The fused backward's gradients equal the composed twin's (recorded under create_graph), and a
  // second-order gradient through them equals the one through the plain attention
  // softmax_with_keep(additive_scores_composed) · values.
  manual_seed(44);
  Tensor qp = randn64({2, 2, 3}), kp = randn64({2, 5, 3}), w = randn64({1, 3}), v = randn64({2, 5, 2});
  Tensor keep = lt(arange(0, 5).view({1, 1, 5}), lengths1({5, 3}).view({2, 1, 1}));  // (2, 1, 5)
  Tensor dy = randn64({2, 2, 2}).detach();
  auto second_order = [&](const Tensor& y, bool create_graph) {
    std::vector<Tensor> g = autograd::grad({y}, {qp, kp, w, v}, {dy}, {.create_graph = create_graph});
    if (!create_graph) return g;
    Tensor norm = add(add(sum(mul(g[0], g[0])), sum(mul(g[1], g[1]))), add(sum(mul(g[2], g[2])), sum(mul(g[3], g[3]))));
    std::vector<Tensor> gg = autograd::grad({norm}, {qp, kp, w, v});
    g.insert(g.end(), gg.begin(), gg.end());
    return g;
  };
  std::vector<Tensor> fused = second_order(chunked_additive_attention(qp, kp, w, v, keep, 2), false);
  std::vector<Tensor> twin = second_order(chunked_additive_attention(qp, kp, w, v, keep, 2), true);
  Tensor plain_y = matmul(nn::softmax_with_keep(additive_scores_composed(qp, kp, w), keep), v);  // (2, 2, 2)
  std::vector<Tensor> plain = second_order(plain_y, true);
  REQUIRE(twin.size() == 8);
  REQUIRE(plain.size() == 8);
  for (size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    if (i < 4) CHECK(max_abs_diff(fused[i], twin[i]) < 1e-12);
    CHECK(max_abs_diff(twin[i], plain[i]) < 1e-10);
  }
}

// ---- hybrid, multi-level, multi-head, local

TEST_CASE("HybridAttention: context and weights are the mean of its halves") {
  manual_seed(51);
  nn::HybridAttention h({.query_size = 3, .key_size = 5, .hidden_size = 4});
  CHECK(names_of(h) == std::vector<std::string>{"additive.w_q.weight", "additive.w_k.weight", "additive.w_v.weight",
                                                "scaled_dot.w_q.weight"});
  Tensor q = randn({2, 3, 3}), k = randn({2, 4, 5}), v = randn({2, 4, 4});
  Tensor c = h(q, k, v, lengths1({2, 4}));
  Tensor c_add = h.additive(q, k, v, lengths1({2, 4}));
  Tensor w_add = h.additive.last_weights();
  Tensor c_dot = h.scaled_dot(q, k, v, lengths1({2, 4}));
  CHECK(max_abs_diff(c, (c_add + c_dot) * 0.5) < 1e-6);
  CHECK(max_abs_diff(h.last_weights(), (w_add + h.scaled_dot.last_weights()) * 0.5) < 1e-6);
  CHECK_FALSE(h.last_scores().defined());
}

TEST_CASE("MultiLevelAttention: contexts concatenated in level order") {
  manual_seed(52);
  std::vector<std::unique_ptr<nn::Attention>> levels;
  levels.push_back(std::make_unique<nn::AdditiveAttention>(nn::AdditiveAttention::Options{4, 4, 3}));
  levels.push_back(std::make_unique<nn::DotProductAttention>());
  nn::MultiLevelAttention ml(std::move(levels));
  CHECK(names_of(ml) == std::vector<std::string>{"level0.w_q.weight", "level0.w_k.weight", "level0.w_v.weight"});
  Tensor q = randn({2, 3, 4}), k = randn({2, 4, 4}), v = randn({2, 4, 5});
  Tensor c = ml(q, k, v);
  CHECK(c.shape() == Shape{2, 3, 10});
  CHECK(max_abs_diff(c.narrow(2, 0, 5), ml.level(0)(q, k, v)) < 1e-6);
  CHECK(max_abs_diff(c.narrow(2, 5, 5), ml.level(1)(q, k, v)) < 1e-6);
}

TEST_CASE("MultiHeadAttention: torch's parameter names and shapes; heads kept") {
  nn::MultiHeadAttention mha({.embed_dim = 6, .num_heads = 3});
  CHECK(names_of(mha) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(mha.in_proj_weight.shape() == Shape{18, 6});
  CHECK(mha.in_proj_bias.abs().sum().item() == 0);
  nn::MultiHeadAttention kv({.embed_dim = 4, .num_heads = 2, .bias = false, .kdim = 5, .vdim = 3});
  CHECK(names_of(kv) == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});
  Tensor out = mha(randn({2, 3, 6}), randn({2, 4, 6}), randn({2, 4, 6}), lengths1({4, 1}));
  CHECK(out.shape() == Shape{2, 3, 6});
  CHECK(mha.last_head_weights().shape() == Shape{2, 3, 3, 4});
  CHECK(max_abs_diff(mha.last_weights(), mean(mha.last_head_weights(), {1})) < 1e-7);
}

TEST_CASE("LocalAttention: only keys in [p - D, p + D] are attended") {
  manual_seed(53);
  nn::LocalAttention local({.query_size = 4, .key_size = 4, .hidden_size = 4, .window = 1});
  Tensor q = randn({1, 5, 4}), k = randn({1, 6, 4}), v = randn({1, 6, 2});
  local(q, k, v, lengths1({4}));
  std::vector<double> w = local.last_weights().to_vector<double>();
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 6; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      bool inside = std::abs(i - j) <= 1 && j < 4;
      if (inside) CHECK(w[i * 6 + j] > 0);
      else CHECK(w[i * 6 + j] == 0);
    }
  }
  CHECK(local.last_positions().to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4});
  // explicit centres: the decoder's step t for a single query
  local.attend_at(q.narrow(1, 0, 1), k, v, {}, lengths2({5}, 1, 1));
  std::vector<double> w1 = local.last_weights().to_vector<double>();
  CHECK(w1[0] + w1[1] + w1[2] + w1[3] == 0);
  CHECK(w1[4] + w1[5] == doctest::Approx(1.0));

  nn::LocalAttention p({.query_size = 4, .key_size = 4, .hidden_size = 3, .window = 2,
                        .position = nn::LocalAttention::Position::predictive});
  CHECK(names_of(p) == std::vector<std::string>{"additive.w_q.weight", "additive.w_k.weight", "additive.w_v.weight",
                                                "w_p.weight", "v_p.weight"});
  p(q, k, v, lengths1({4}));
  for (double c : p.last_positions().to_vector<double>()) {
    CHECK(c >= 0);
    CHECK(c <= 3);
  }
}

TEST_CASE("Every kind: attend(queries, prepare(keys, values, lengths)) equals forward, values and gradients") {
  for (const Kind& kind : kinds()) {
    for (const Masking& m : maskings()) {
      CAPTURE(kind.name);
      CAPTURE(m.name);
      manual_seed(5);
      std::unique_ptr<nn::Attention> a = kind.make();
      a->to(f64);
      Tensor k = randn64({kB, kK, kind.dk}), v = randn64({kB, kK, kind.dv});
      nn::AttentionMemory memory = a->prepare(k, v, m.lengths);  // once, then two query batches
      for (int call = 0; call < 2; ++call) {
        CAPTURE(call);
        Tensor q = randn64({kB, kQ, kind.dq});
        Tensor dy = randn({kB, kQ, a->forward(q, k, v, m.lengths).size(2)}, {.dtype = f64});
        std::vector<Tensor> inputs = with_parameters({q, k, v}, *a);
        Tensor y = a->forward(q, k, v, m.lengths);
        Tensor weights = a->last_weights();
        std::vector<Tensor> g = autograd::grad({y}, inputs, {dy}, {.allow_unused = true});
        Tensor y_prepared = a->attend(q, memory);
        CHECK(max_abs_diff(y, y_prepared) == 0.0);
        CHECK(max_abs_diff(weights, a->last_weights()) == 0.0);
        std::vector<Tensor> g_prepared =
            autograd::grad({y_prepared}, inputs, {dy}, {.retain_graph = true, .allow_unused = true});
        for (size_t i = 0; i < g.size(); ++i) {
          CAPTURE(i);
          REQUIRE(g[i].defined() == g_prepared[i].defined());
          if (g[i].defined()) CHECK(max_abs_diff(g[i], g_prepared[i]) < 1e-12);
        }
      }
    }
  }
}

TEST_CASE("AttentionMemory: expand repeats a batch of one (beam search); a memory of another kind is refused") {
  manual_seed(6);
  nn::HybridAttention hybrid({.query_size = 3, .key_size = 5, .hidden_size = 4});
  nn::ScaledDotProductAttention dot({.query_size = 3, .key_size = 5});
  Tensor k = randn({1, kK, 5}), v = randn({1, kK, 4}), q = randn({3, 1, 3});
  nn::AttentionMemory one = hybrid.prepare(k, v, lengths1({2}));
  nn::AttentionMemory three = one.expand(3);
  CHECK(three.parts.size() == 2);
  CHECK(three.parts[0].projected[0].shape() == Shape{3, kK, 4});
  CHECK(three.key_keep.shape() == Shape{3, 1, kK});
  Tensor y = hybrid.attend(q, three);  // (3, 1, 4): each query against the same sentence
  for (int64_t b = 0; b < 3; ++b) {
    CAPTURE(b);
    Tensor y_b = hybrid(q.narrow(0, b, 1), k, v, lengths1({2}));
    CHECK(max_abs_diff(y.narrow(0, b, 1), y_b) < 1e-6);
  }
  CHECK(max_abs_diff(hybrid.last_weights().narrow(2, 2, 2), zeros({1, 1, 2})) == 0.0);  // keys 2, 3 masked
  CHECK_THROWS_WITH_AS(dot.attend(q, three), doctest::Contains("memory was not prepared by this attention kind"),
                       Error);
  CHECK_THROWS_WITH_AS(three.expand(2), doctest::Contains("needs a batch of 1"), ShapeError);
  nn::AttentionMemory per_query = dot.prepare(randn({3, kK, 5}), randn({3, kK, 4}), lengths2({1, 2, 3, 4, 1, 2}, 3, 2));
  CHECK_THROWS_WITH_AS(dot.attend(randn({3, 1, 3}), per_query),
                       doctest::Contains("valid_lengths or keep mask were per query for 2 queries, got queries (3, 1, 3)"),
                       ShapeError);
  nn::AttentionMemory per_query_keep =
      dot.prepare(randn({3, kK, 5}), randn({3, kK, 4}), ones({3, 2, kK}, {.dtype = DType::b8}));  // (B, Q, K)
  CHECK(per_query_keep.key_keep.shape() == Shape{3, 2, kK});
  CHECK_THROWS_WITH_AS(dot.attend(randn({3, 3}), per_query_keep),
                       doctest::Contains("valid_lengths or keep mask were per query for 2 queries, got queries (3, 1, 3)"),
                       ShapeError);
}

// ---- the seeds' conventions: bool keep masks and 2-D queries

namespace {

// The keep mask (true = keep) equivalent to valid lengths: (B,) -> (B, K), (B, Q) -> (B, Q, K).
Tensor keep_mask_of(const Tensor& lengths) {
  Tensor positions = arange(0, static_cast<double>(kK), 1.0, {.dtype = DType::i64});  // (K,)
  Tensor lengths_k = lengths.unsqueeze(lengths.ndim());                                // (B, 1) or (B, Q, 1)
  return lt(positions, lengths_k);
}

// forward's context and its gradients w.r.t. queries (q_leaf, of which q may be a view), keys,
// values and parameters, for `dy`.
struct Run {
  Tensor y, weights;
  std::vector<Tensor> grads;
};
Run run(const nn::Attention& a, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
        const Tensor& dy, const Tensor& q_leaf = {}) {
  Tensor y = a.forward(q, k, v, mask);
  std::vector<Tensor> inputs = with_parameters({q_leaf.defined() ? q_leaf : q, k, v}, a);
  std::vector<Tensor> g = autograd::grad({y}, inputs, {dy}, {.allow_unused = true});
  return {y, a.last_weights(), g};
}

void check_same_run(const Run& got, const Run& expected, double tolerance) {
  CHECK(got.y.shape() == expected.y.shape());
  CHECK(max_abs_diff(got.y, expected.y) <= tolerance);
  CHECK(max_abs_diff(got.weights, expected.weights) <= tolerance);
  REQUIRE(got.grads.size() == expected.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got.grads[i].defined() == expected.grads[i].defined());
    if (got.grads[i].defined()) CHECK(max_abs_diff(got.grads[i], expected.grads[i]) <= tolerance);
  }
}

}  // namespace

TEST_CASE("Every kind: a bool keep mask (true = keep) gives what the same valid lengths give, values and gradients") {
  std::vector<std::pair<const char*, Tensor>> cases = {{"per batch (B,) as (B, K)", lengths1({4, 2})},
                                                       {"per query (B, Q) as (B, Q, K)",
                                                        lengths2({4, 3, 1, 2, 0, 4}, kB, kQ)}};
  for (const Kind& kind : kinds()) {
    for (const auto& [name, lengths] : cases) {
      CAPTURE(kind.name);
      CAPTURE(name);
      manual_seed(8);
      std::unique_ptr<nn::Attention> a = kind.make();
      a->to(f64);
      Tensor q = randn64({kB, kQ, kind.dq}), k = randn64({kB, kK, kind.dk}), v = randn64({kB, kK, kind.dv});
      Tensor dy = randn({kB, kQ, a->forward(q, k, v).size(2)}, {.dtype = f64});
      Tensor keep = keep_mask_of(lengths);
      Run with_lengths = run(*a, q, k, v, lengths, dy);
      check_same_run(run(*a, q, k, v, keep, dy), with_lengths, 0.0);
      if (keep.ndim() == 2) check_same_run(run(*a, q, k, v, keep.unsqueeze(1), dy), with_lengths, 0.0);  // (B, 1, K)
      CHECK(max_abs_diff(a->attend(q, a->prepare(k, v, keep)), with_lengths.y) == 0.0);
    }
  }
}

TEST_CASE("A keep mask need not be a prefix: masked keys get zero weight and no gradient") {
  manual_seed(9);
  nn::AdditiveAttention a({.query_size = 3, .key_size = 5, .hidden_size = 4});
  a.to(f64);
  Tensor q = randn64({kB, kQ, 3}), k = randn64({kB, kK, 5}), v = randn64({kB, kK, 4});
  // batch 0 keeps keys 0 and 2, batch 1 keeps key 3 only
  Tensor keep = from_vector<bool>({true, false, true, false, false, false, false, true}, {kB, kK},
                                  {.dtype = DType::b8});
  Tensor y = a(q, k, v, keep);
  Tensor w = a.last_weights();  // (B, Q, K)
  for (int64_t qi = 0; qi < kQ; ++qi) {
    CAPTURE(qi);
    std::vector<double> w0 = w.select(0, 0).select(0, qi).to_vector<double>();
    std::vector<double> w1 = w.select(0, 1).select(0, qi).to_vector<double>();
    CHECK(w0[1] == 0.0);
    CHECK(w0[3] == 0.0);
    CHECK(w0[0] + w0[2] == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(w1 == std::vector<double>{0, 0, 0, 1});
  }
  Tensor dv = autograd::grad({y.sum()}, {v})[0];  // (B, K, Dv): rows of masked keys are zero
  CHECK(max_abs_diff(dv.select(0, 0).select(0, 1), zeros({4}, {.dtype = f64})) == 0.0);
  CHECK(max_abs_diff(dv.select(0, 1).narrow(0, 0, 3), zeros({3, 4}, {.dtype = f64})) == 0.0);
  // masked_softmax takes the same keep mask (broadcast over the queries)
  Tensor scores = randn64({kB, kQ, kK});
  CHECK(max_abs_diff(nn::masked_softmax(scores, keep.unsqueeze(1)),
                     nn::softmax_with_keep(scores, keep.unsqueeze(1))) == 0.0);
  CHECK(max_abs_diff(nn::masked_softmax(scores, keep_mask_of(lengths1({4, 2})).unsqueeze(1)),
                     nn::masked_softmax(scores, lengths1({4, 2}))) == 0.0);
}

TEST_CASE("Every kind: 2-D queries (B, Dq) give a (B, Dv) context and (B, K) weights, as (B, 1, Dq) does") {
  std::vector<std::pair<const char*, Tensor>> masks = {{"no mask", {}},
                                                       {"lengths (B,)", lengths1({4, 2})},
                                                       {"keep mask (B, K)", keep_mask_of(lengths1({3, 1}))}};
  for (const Kind& kind : kinds()) {
    for (const auto& [name, mask] : masks) {
      CAPTURE(kind.name);
      CAPTURE(name);
      manual_seed(10);
      std::unique_ptr<nn::Attention> a = kind.make();
      a->to(f64);
      Tensor q = randn64({kB, kind.dq}), k = randn64({kB, kK, kind.dk}), v = randn64({kB, kK, kind.dv});
      Tensor y3 = a->forward(q.unsqueeze(1), k, v, mask);  // (B, 1, D)
      Tensor dy = randn({kB, y3.size(2)}, {.dtype = f64});
      Run as_3d = run(*a, q.unsqueeze(1), k, v, mask, dy.unsqueeze(1), q);
      Run as_2d = run(*a, q, k, v, mask, dy);
      CHECK(as_2d.y.shape() == Shape{kB, y3.size(2)});
      CHECK(as_2d.weights.shape() == Shape{kB, kK});
      if (a->last_scores().defined()) CHECK(a->last_scores().shape() == Shape{kB, kK});
      as_3d.y = as_3d.y.squeeze(1);
      as_3d.weights = as_3d.weights.squeeze(1);
      check_same_run(as_2d, as_3d, 0.0);
      CHECK(max_abs_diff(a->attend(q, a->prepare(k, v, mask)), as_2d.y) == 0.0);  // prepared memory, 2-D query
      CHECK(a->last_weights().shape() == Shape{kB, kK});
    }
  }
}
