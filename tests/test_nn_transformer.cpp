// The Transformer's pieces: layer_norm (fused against its composed twin, hand values) and
// nn::LayerNorm, positional encodings (hand values), causal lengths, the encoder and decoder layers
// and stacks (torch's parameter names, float64 gradchecks w.r.t. inputs and every parameter, errors)
// and the decoder's cached step against the full causal forward. PyTorch parity:
// tests/parity/test_transformer_torch.py.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/nn.h"
#include "tests/check_values.h"
#include "tools/gradcheck.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

constexpr DType f64 = DType::f64;

Tensor lengths1(std::vector<int64_t> v) {
  return from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::i64});
}

Tensor full_lengths(int64_t batch, int64_t steps) {
  return full({batch}, static_cast<double>(steps), {.dtype = DType::i64});
}

// The gradients of sum(y · w) for a fixed w, with respect to `inputs`.
std::vector<Tensor> grads_of(const Tensor& y, const std::vector<Tensor>& inputs) {
  Tensor w = randn(y.shape(), {.dtype = y.dtype()});
  return autograd::grad({sum(mul(y, w))}, inputs);
}

nn::TransformerLayerOptions small_layer(bool norm_first, nn::TransformerActivation activation) {
  return {.d_model = 4, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0, .activation = activation,
          .batch_first = true, .norm_first = norm_first};
}

}  // namespace

// ---- layer_norm and LayerNorm

TEST_CASE("layer_norm by hand: [1, 2, 3] normalises to ±√(3/2), the gradient of its first element") {
  const double r = std::sqrt(1.5);  // μ = 2, σ² = 2/3 (biased), eps 0
  Tensor x = tensor({1, 2, 3}, {.dtype = f64}).requires_grad_();
  Tensor y = layer_norm(x, {3}, {}, {}, 0.0);
  check_values(y, {-r, 0, r});
  // affine: weight [2, 1, 0.5], bias [0, 1, -1]
  check_values(layer_norm(x, {3}, tensor({2, 1, 0.5}, {.dtype = f64}), tensor({0, 1, -1}, {.dtype = f64}), 0.0),
               {-2 * r, 1, -1 + 0.5 * r});
  // dy = [1, 0, 0]: ḡ = 1/3, x̂ = [-r, 0, r], (g x̂)‾ = -r/3, so dx = r (g - 1/3 - x̂ (-r/3)) = r [1/6, -1/3, 1/6]
  y.backward(tensor({1, 0, 0}, {.dtype = f64}));
  check_values(x.grad(), {r / 6, -r / 3, r / 6});
}

TEST_CASE("layer_norm: the fused kernels against the composed twin, values and every gradient") {
  for (DType t : {DType::f64, DType::f32}) {
    CAPTURE(t);
    manual_seed(3);
    Tensor x = randn({4, 3, 37}, {.dtype = t});
    x.select(0, 1).add_(full({3, 37}, 1e3, {.dtype = t}));  // |μ| >> σ: the centred variance keeps its precision
    x.requires_grad_();
    Tensor w = randn({37}, {.dtype = t}).requires_grad_(), b = randn({37}, {.dtype = t}).requires_grad_();
    // float32 holds 1e3 + x to 6e-5, so the two forms' means (summed in other orders) differ by that
    const double tol = t == f64 ? 1e-12 : 1e-3;
    for (int affine = 0; affine < 2; ++affine) {
      Tensor ww = affine ? w : Tensor(), bb = affine ? b : Tensor();
      Tensor fused = layer_norm(x, {37}, ww, bb), composed = layer_norm_composed(x, {37}, ww, bb);
      check_close(fused, composed, tol, "values");
      std::vector<Tensor> in = affine ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x};
      manual_seed(4);
      std::vector<Tensor> gf = grads_of(fused, in);
      manual_seed(4);
      std::vector<Tensor> gc = grads_of(composed, in);
      for (size_t i = 0; i < in.size(); ++i) check_close(gf[i], gc[i], tol, "gradients");
    }
  }
}

TEST_CASE("LayerNorm: torch's parameters and init, several trailing dims, no affine, errors") {
  nn::LayerNorm norm({.normalized_shape = {2, 3}});
  CHECK(names_of(norm) == std::vector<std::string>{"weight", "bias"});
  check_values(norm.weight, {1, 1, 1, 1, 1, 1});
  check_values(norm.bias, {0, 0, 0, 0, 0, 0});
  norm.to(f64);
  Tensor x = randn64({4, 2, 3});
  check_close(norm(x), layer_norm_composed(x, {2, 3}, norm.weight, norm.bias), 1e-12, "two trailing dims");
  CHECK(nn::LayerNorm({.normalized_shape = {3}, .elementwise_affine = false}).parameters().empty());
  check_report(gradcheck([&](const std::vector<Tensor>& in) { return norm(in[0]); }, with_parameters({x}, norm),
                         {.name = "LayerNorm"}));

  CHECK_THROWS_WITH_AS(nn::LayerNorm({.normalized_shape = {}}),
                       "layer_norm: normalized_shape = () must be one or more positive sizes", ValueError);
  CHECK_THROWS_WITH_AS(nn::LayerNorm({.normalized_shape = {4}, .eps = -1}),
                       "layer_norm: eps = -1 must be finite and > 0", ValueError);
  // eps = 0 would normalise a constant row to 0/0 = NaN: refused when built, not when such a row comes
  CHECK_THROWS_WITH_AS(nn::LayerNorm({.normalized_shape = {4}, .eps = 0}), "layer_norm: eps = 0 must be finite and > 0",
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::LayerNorm({.normalized_shape = {4}, .eps = std::numeric_limits<double>::quiet_NaN()}),
                       "layer_norm: eps = nan must be finite and > 0", ValueError);
  CHECK(nn::LayerNorm({.normalized_shape = {4}, .eps = 1e-12}).options().eps == 1e-12);
  CHECK_THROWS_WITH_AS(norm(randn64({4, 3, 2})),
                       "layer_norm: normalized_shape (2, 3) must be the last dimensions of the input (4, 3, 2)",
                       ShapeError);
}

// ---- positional encodings and masks

TEST_CASE("PositionalEncoding: sinusoidal values by hand, interleaved as the tutorial's; offsets continue") {
  // E = 4: the frequencies are 1 and 1/10000^(2/4) = 1/100
  nn::PositionalEncoding pe({.d_model = 4, .batch_first = true});
  CHECK(pe.parameters().empty());
  Tensor p = pe.encodings(3, 0, {.dtype = f64});
  check_values(p, {0, 1, 0, 1,                                                      // position 0
                   std::sin(1.0), std::cos(1.0), std::sin(0.01), std::cos(0.01),    // position 1
                   std::sin(2.0), std::cos(2.0), std::sin(0.02), std::cos(0.02)});  // position 2
  check_close(pe.encodings(2, 1, {.dtype = f64}), p.narrow(0, 1, 2), 0, "offset 1");
  Tensor x = randn64({2, 3, 4});
  check_close(pe(x), add(x, p), 1e-15, "batch first");
  nn::PositionalEncoding time_major({.d_model = 4});
  check_close(time_major(x.transpose(0, 1)), add(x, p).transpose(0, 1), 1e-15, "(T, B, E)");
  check_close(pe(x.narrow(1, 2, 1), 2), add(x.narrow(1, 2, 1), p.narrow(0, 2, 1)), 1e-15, "one step at offset 2");

  CHECK_THROWS_WITH_AS(nn::PositionalEncoding({.d_model = 5}),
                       "positional_encoding: d_model = 5 must be even for sinusoidal encodings (a sine and a cosine "
                       "per frequency)", ValueError);
  CHECK_THROWS_WITH_AS(pe(randn64({2, 3, 6})),
                       "positional_encoding: expected x (B, T, E) of d_model = 4 features, got (2, 3, 6)", ShapeError);
}

TEST_CASE("PositionalEncoding: learned positions are a trained table with a length limit") {
  nn::PositionalEncoding pe({.d_model = 3, .kind = nn::PositionalEncoding::Kind::learned, .max_len = 5});
  CHECK(names_of(pe) == std::vector<std::string>{"weight"});
  pe.to(f64);
  Tensor x = randn64({3, 2, 3});  // (T, B, E)
  check_close(pe(x, 2), add(x, pe.weight.narrow(0, 2, 3).unsqueeze(1)), 1e-15, "rows 2..4");
  check_report(gradcheck([&](const std::vector<Tensor>& in) { return pe(in[0], 1); }, with_parameters({x}, pe),
                         {.name = "PositionalEncoding"}));
  CHECK_THROWS_WITH_AS(pe(x, 3), "positional_encoding: positions 3 .. 5 exceed the learned table's max_len = 5",
                       ValueError);
}

TEST_CASE("causal_lengths: query t sees min(t + 1, length) keys; bad lengths are refused") {
  check_values(nn::causal_lengths(lengths1({3, 1, 0}), 3), {1, 2, 3, 1, 1, 1, 0, 0, 0});
  CHECK_THROWS_WITH_AS(nn::causal_lengths(lengths1({4}), 3),
                       "causal_lengths: lengths[0] = 4 not in [0, 3] (lengths (1,) for 3 positions)", ValueError);
}

// ---- the layers and stacks

TEST_CASE("Transformer layers and stacks: torch's parameter names, in torch's order") {
  nn::TransformerEncoderLayer enc({.d_model = 4, .nhead = 2, .dim_feedforward = 6});
  CHECK(names_of(enc) == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                                  "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                                  "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                                  "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  nn::TransformerDecoder dec({.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 6}, .num_layers = 2, .norm = true});
  std::map<std::string, Tensor> state = dec.state_dict();
  for (const char* key : {"layers.0.multihead_attn.in_proj_weight", "layers.1.norm3.bias", "layers.1.self_attn.out_proj.weight",
                          "norm.weight", "norm.bias"})
    CHECK_MESSAGE(state.count(key) == 1, key);
  CHECK(state.size() == 2 * 18 + 2);  // 18 tensors a decoder layer (torch's count), the final norm's 2
}

TEST_CASE("Transformer layers: float64 gradcheck w.r.t. inputs and every parameter, both norm orders, masks") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    manual_seed(7);
    nn::TransformerEncoderLayer enc(small_layer(norm_first, nn::TransformerActivation::gelu));
    enc.to(f64);
    Tensor src = randn64({2, 3, 4});
    Tensor padding = lengths1({3, 2});
    check_report(gradcheck([&](const std::vector<Tensor>& in) { return enc(in[0], padding); },
                           with_parameters({src}, enc), {.name = "TransformerEncoderLayer"}));

    nn::TransformerDecoderLayer dec(small_layer(norm_first, nn::TransformerActivation::relu));
    dec.to(f64);
    Tensor tgt = randn64({2, 3, 4}), memory = randn64({2, 4, 4});
    Tensor causal = nn::causal_lengths(lengths1({3, 2}), 3);
    check_report(gradcheck([&](const std::vector<Tensor>& in) { return dec(in[0], in[1], causal, lengths1({4, 2})); },
                           with_parameters({tgt, memory}, dec), {.name = "TransformerDecoderLayer"}));
  }
}

TEST_CASE("Transformer: (T, B, E) is the batch-first layer's numbers transposed") {
  manual_seed(8);
  nn::TransformerEncoder time_major({.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0},
                                     .num_layers = 2});
  nn::TransformerEncoder batch_major({.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 6, .dropout = 0.0,
                                                .batch_first = true},
                                      .num_layers = 2});
  batch_major.load_state_dict(time_major.state_dict());
  Tensor x = randn({2, 5, 4});
  check_close(time_major(x.transpose(0, 1), lengths1({5, 3})).transpose(0, 1), batch_major(x, lengths1({5, 3})), 0,
              "encoder");
}

TEST_CASE("TransformerDecoder::step with its cache gives the full causal forward's numbers; rows reorder") {
  for (DType t : {DType::f64, DType::f32})
    for (bool norm_first : {false, true}) {
      CAPTURE(t);
      CAPTURE(norm_first);
      const double tol = t == f64 ? 1e-12 : 1e-6;
      manual_seed(9);
      nn::TransformerDecoder dec({.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                            .batch_first = true, .norm_first = norm_first},
                                  .num_layers = 2, .norm = norm_first});
      dec.to(t);
      const int64_t B = 3, T = 4, S = 5;
      Tensor tgt = randn({B, T, 8}, {.dtype = t}), memory = randn({B, S, 8}, {.dtype = t});
      Tensor src_lengths = lengths1({5, 3, 1});
      Tensor whole = dec(tgt, memory, nn::causal_lengths(full_lengths(B, T), T), src_lengths);  // (B, T, E)
      nn::TransformerDecoder::State state = dec.start(memory, src_lengths);
      for (int64_t i = 0; i < 2; ++i) check_close(dec.step(tgt.select(1, i), state), whole.select(1, i), tol, "step");
      CHECK(state.steps == 2);
      CHECK(state.cached_keys(1).shape() == Shape{B, 2, 2, 4});  // (B, h, steps, d)
      CHECK(state.keys[1].size(2) >= 2);                           // a buffer with room for more

      // a beam search keeps rows 2, 0, 0, 1 (4 hypotheses from 3 rows): the reordered state
      // continues as the reordered batch
      Tensor rows = lengths1({2, 0, 0, 1});
      state = state.select_rows(rows);
      Tensor tgt_r = index_select(tgt, 0, rows), memory_r = index_select(memory, 0, rows);
      Tensor src_r = index_select(src_lengths, 0, rows);
      Tensor full_r = dec(tgt_r, memory_r, nn::causal_lengths(full_lengths(rows.size(0), T), T), src_r);
      for (int64_t i = 2; i < T; ++i)
        check_close(dec.step(tgt_r.select(1, i), state), full_r.select(1, i), tol, "step after reorder");
    }
}

TEST_CASE("TransformerDecoder::step: the cache grows past its first buffer in place; under autograd it keeps the graph") {
  manual_seed(10);
  nn::TransformerDecoder dec({.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                        .batch_first = true, .norm_first = true},
                              .num_layers = 2, .norm = true});
  const int64_t B = 2, T = 40, S = 3;  // 40 positions: the 16-position buffer doubles twice
  Tensor tgt = randn({B, T, 8}), memory = randn({B, S, 8});
  Tensor src_lengths = full({B}, static_cast<double>(S), {.dtype = DType::i64});
  Tensor whole = dec(tgt, memory, nn::causal_lengths(full({B}, static_cast<double>(T), {.dtype = DType::i64}), T),
                     src_lengths);
  {
    NoGradGuard no_grad;
    nn::TransformerDecoder::State state = dec.start(memory, src_lengths);
    std::vector<int64_t> capacities;
    for (int64_t i = 0; i < T; ++i) {
      check_close(dec.step(tgt.select(1, i), state), whole.select(1, i), 1e-5, "step");
      capacities.push_back(state.keys[0].size(2));
      if (i == 20) state = state.select_rows(lengths1({0, 1}));  // rows kept as they are: a copy of the buffers
    }
    CHECK(capacities[15] == 16);  // positions 0..15 in the first buffer
    CHECK(capacities[16] == 34);  // then twice the positions needed, written in place until full
    CHECK(capacities[T - 1] >= T);
    CHECK(state.cached_values(1).shape() == Shape{B, 2, T, 4});
  }
  // with gradients recorded the cache grows by cat, and a loss on the last step reaches the first input
  Tensor x = tgt.detach().requires_grad_(true);
  nn::TransformerDecoder::State state = dec.start(memory, src_lengths);
  Tensor last;
  for (int64_t i = 0; i < 3; ++i) last = dec.step(x.select(1, i), state);
  sum(last).backward();
  REQUIRE(x.grad().defined());
  CHECK(sum(abs(x.grad().select(1, 0))).item() > 0);
}

TEST_CASE("Transformer: errors name the module, the option and the shapes") {
  CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer({.d_model = 6, .nhead = 4}),
                       "transformer: nhead = 4 must be positive and divide d_model = 6", ValueError);
  CHECK_THROWS_WITH_AS(nn::TransformerDecoderLayer({.d_model = 4, .nhead = 2, .dropout = 1.0}),
                       "transformer: dropout = 1 not in [0, 1)", ValueError);
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder({.layer = {.d_model = 4}, .num_layers = 0}),
                       "transformer: num_layers = 0 must be positive", ValueError);
  nn::TransformerEncoderLayer enc({.d_model = 4, .nhead = 2, .dim_feedforward = 6});
  CHECK_THROWS_WITH_AS(enc(zeros({3, 2, 5})), "transformer: src must be (T, B, E) with E = d_model = 4, got (3, 2, 5)",
                       ShapeError);
  nn::TransformerDecoder one({.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 6}, .num_layers = 1});
  nn::TransformerDecoder two({.layer = {.d_model = 4, .nhead = 2, .dim_feedforward = 6}, .num_layers = 2});
  nn::TransformerDecoder::State state = one.start(zeros({5, 2, 4}));
  CHECK_THROWS_WITH_AS(two.step(zeros({2, 4}), state),
                       "transformer: the decoder state holds 1 layers for a decoder of 2: make it with this decoder's "
                       "start()", Error);
  CHECK_THROWS_WITH_AS(one.step(zeros({2, 1, 4}), state),
                       "transformer: a step's input must be (B, E) with E = d_model = 4, got (2, 1, 4)", ShapeError);
}
