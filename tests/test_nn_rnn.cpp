// GRU/LSTM and their cells: PyTorch's parameter layout, float64 gradchecks w.r.t. inputs, initial
// states and every parameter (B=2, T=3, H=4), valid-length masking against unpadded runs, dropout
// between layers, and the error messages.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/mask.h"
#include "nn/rnn.h"
#include "tools/gradcheck.h"
#include "tests/check_values.h"

using namespace seqgrad;
using namespace seqgrad::testing;

namespace {

constexpr DType f64 = DType::f64;


double max_abs(const Tensor& a) { return max_abs_diff(a, zeros_like(a)); }

Tensor flat(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flats;
  for (const Tensor& p : parts) flats.push_back(p.reshape({-1}));
  return cat(flats, 0);
}

Tensor lengths_of(const std::vector<int64_t>& values) {
  return from_vector<int64_t>(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::i64});
}

}  // namespace

TEST_CASE("GRU/LSTM: parameter names, shapes and order are PyTorch's") {
  nn::GRU gru({.input_size = 5, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
  CHECK(names_of(gru) == std::vector<std::string>{
                             "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                             "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
                             "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
                             "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(gru.weights(0).weight_ih.shape() == Shape{12, 5});
  CHECK(gru.weights(1, nn::Direction::reverse).weight_ih.shape() == Shape{12, 8});  // input = [fwd | rev]
  CHECK(gru.weights(1).weight_hh.shape() == Shape{12, 4});
  CHECK(gru.weights(0).bias_hh.shape() == Shape{12});
  CHECK(gru.state_dict().at("weight_hh_l1_reverse").shape() == Shape{12, 4});

  nn::LSTM lstm({.input_size = 3, .hidden_size = 2, .bias = false});
  CHECK(names_of(lstm) == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0"});
  CHECK(lstm.weights(0).weight_ih.shape() == Shape{8, 3});

  nn::GRUCell cell({.input_size = 3, .hidden_size = 2});
  CHECK(names_of(cell) == std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  CHECK(cell.weight_ih.shape() == Shape{6, 3});
  nn::LSTMCell lcell({.input_size = 3, .hidden_size = 2});
  CHECK(lcell.weight_hh.shape() == Shape{8, 2});
}

TEST_CASE("GRU/LSTM: default init is U(±1/√H) for every parameter") {
  manual_seed(11);
  nn::LSTM lstm({.input_size = 30, .hidden_size = 64, .num_layers = 2});
  const double bound = 1.0 / 8.0;
  for (const auto& [name, p] : lstm.named_parameters()) {
    CAPTURE(name);
    std::vector<double> v = p.to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= -bound);
    CHECK(*std::max_element(v.begin(), v.end()) <= bound);
    CHECK(*std::max_element(v.begin(), v.end()) > 0.9 * bound);
  }
}

TEST_CASE("GRUCell: one step by hand (H = 1)") {
  // With every weight 0 except the biases: r = σ(b_ir + b_hr), z = σ(b_iz + b_hz),
  // n = tanh(b_in + r b_hn), h' = (1 - z) n + z h.
  nn::GRUCell cell({.input_size = 1, .hidden_size = 1});
  cell.to(f64);
  {
    NoGradGuard no_grad;
    cell.weight_ih.zero_();
    cell.weight_hh.zero_();
    cell.bias_ih.copy_(tensor({0.1, 0.2, 0.3}, {3}, {.dtype = f64}));
    cell.bias_hh.copy_(tensor({0.4, -0.5, 0.6}, {3}, {.dtype = f64}));
  }
  auto sigma = [](double a) { return 1 / (1 + std::exp(-a)); };
  double r = sigma(0.5), z = sigma(-0.3), n = std::tanh(0.3 + r * 0.6), h = 0.7;
  Tensor out = cell(tensor({2.0}, {1, 1}, {.dtype = f64}), tensor({h}, {1, 1}, {.dtype = f64}));
  CHECK(out.item() == doctest::Approx((1 - z) * n + z * h).epsilon(1e-14));
}

TEST_CASE("LSTMCell: one step by hand (H = 1)") {
  // All weights 0, biases b = b_ih + b_hh per gate: c' = σ(b_f) c + σ(b_i) tanh(b_g), h' = σ(b_o) tanh(c').
  nn::LSTMCell cell({.input_size = 1, .hidden_size = 1});
  cell.to(f64);
  {
    NoGradGuard no_grad;
    cell.weight_ih.zero_();
    cell.weight_hh.zero_();
    cell.bias_ih.copy_(tensor({0.1, 0.2, 0.3, 0.4}, {4}, {.dtype = f64}));
    cell.bias_hh.zero_();
  }
  auto sigma = [](double a) { return 1 / (1 + std::exp(-a)); };
  double c = 0.5, c1 = sigma(0.2) * c + sigma(0.1) * std::tanh(0.3), h1 = sigma(0.4) * std::tanh(c1);
  auto [h, c_out] = cell(tensor({1.0}, {1, 1}, {.dtype = f64}),
                         {.h = tensor({-0.2}, {1, 1}, {.dtype = f64}), .c = tensor({c}, {1, 1}, {.dtype = f64})});
  CHECK(h.item() == doctest::Approx(h1).epsilon(1e-14));
  CHECK(c_out.item() == doctest::Approx(c1).epsilon(1e-14));
}

TEST_CASE("GRUCell / LSTMCell: gradcheck w.r.t. input, state and parameters (float64)") {
  manual_seed(12);
  nn::GRUCell gru({.input_size = 3, .hidden_size = 4});
  gru.to(f64);
  auto gru_fn = [&](const std::vector<Tensor>& in) { return gru(in[0], in[1]); };
  check_report(gradcheck(gru_fn, with_parameters({randn64({2, 3}), randn64({2, 4})}, gru), {.name = "GRUCell"}));

  nn::LSTMCell lstm({.input_size = 3, .hidden_size = 4});
  lstm.to(f64);
  auto lstm_fn = [&](const std::vector<Tensor>& in) {
    auto [h, c] = lstm(in[0], {.h = in[1], .c = in[2]});
    return flat({h, c});
  };
  check_report(gradcheck(lstm_fn, with_parameters({randn64({2, 3}), randn64({2, 4}), randn64({2, 4})}, lstm),
                         {.name = "LSTMCell"}));
}

TEST_CASE("GRU equals its cell stepped by hand; LSTM likewise") {
  manual_seed(13);
  nn::GRU gru({.input_size = 3, .hidden_size = 4});
  nn::GRUCell cell({.input_size = 3, .hidden_size = 4});
  cell.load_state_dict({{"weight_ih", gru.weights(0).weight_ih}, {"weight_hh", gru.weights(0).weight_hh},
                        {"bias_ih", gru.weights(0).bias_ih}, {"bias_hh", gru.weights(0).bias_hh}});
  Tensor x = randn({2, 5, 3});
  Tensor h = randn({2, 4});
  auto [out, h_n] = gru(x, {.h0 = h.unsqueeze(0)});
  for (int64_t t = 0; t < 5; ++t) {
    h = cell(x.select(1, t), h);
    CHECK(max_abs_diff(out.select(1, t), h) < 1e-6);
  }
  CHECK(max_abs_diff(h_n.select(0, 0), h) < 1e-6);

  nn::LSTM lstm({.input_size = 3, .hidden_size = 4});
  nn::LSTMCell lcell({.input_size = 3, .hidden_size = 4});
  lcell.load_state_dict({{"weight_ih", lstm.weights(0).weight_ih}, {"weight_hh", lstm.weights(0).weight_hh},
                         {"bias_ih", lstm.weights(0).bias_ih}, {"bias_hh", lstm.weights(0).bias_hh}});
  nn::LSTMState s;
  auto [lout, state] = lstm(x);
  for (int64_t t = 0; t < 5; ++t) {
    s = lcell(x.select(1, t), s);
    CHECK(max_abs_diff(lout.select(1, t), s.h) < 1e-6);
  }
  CHECK(max_abs_diff(state.h.select(0, 0), s.h) < 1e-6);
  CHECK(max_abs_diff(state.c.select(0, 0), s.c) < 1e-6);
}

TEST_CASE("GRU: gradcheck w.r.t. input, h0 and every parameter (float64, B=2, T=3, H=4)") {
  struct Case {
    const char* name;
    int64_t num_layers;
    bool bidirectional;
    bool with_lengths;
    bool with_h0;
  };
  for (const Case& c : {Case{"1 layer", 1, false, false, false}, Case{"1 layer, h0", 1, false, false, true},
                        Case{"2 layers", 2, false, false, true}, Case{"bidirectional", 1, true, false, true},
                        Case{"2 layers, bidirectional, lengths", 2, true, true, true},
                        Case{"1 layer, lengths, no h0", 1, false, true, false}}) {
    SUBCASE(c.name) {
      manual_seed(14);
      nn::GRU gru({.input_size = 3, .hidden_size = 4, .num_layers = c.num_layers, .bidirectional = c.bidirectional});
      gru.to(f64);
      const int64_t dirs = c.bidirectional ? 2 : 1;
      Tensor lengths = c.with_lengths ? lengths_of({3, 2}) : Tensor();
      std::vector<Tensor> inputs;
      inputs.push_back(randn64({2, 3, 3}));
      if (c.with_h0) inputs.push_back(randn64({c.num_layers * dirs, 2, 4}));
      auto fn = [&](const std::vector<Tensor>& in) {
        auto [out, h_n] = gru(in[0], {.h0 = c.with_h0 ? in[1] : Tensor(), .lengths = lengths});
        return flat({out, h_n});
      };
      check_report(gradcheck(fn, with_parameters(inputs, gru), {.name = std::string("GRU ") + c.name}));
    }
  }
}

TEST_CASE("GRU: a leading projection computed ahead equals the whole input, step by step, values and gradients") {
  // A decoder's teacher-forced loop: the first P = 2 features of every step projected at once, then
  // one GRU call per step on the other 3 (float64, 2 layers, B = 2, T = 4).
  manual_seed(15);
  nn::GRU gru({.input_size = 5, .hidden_size = 4, .num_layers = 2});
  gru.to(f64);
  Tensor x = randn64({2, 4, 5}), h0 = randn64({2, 2, 4});
  auto stepped = [&](const std::vector<Tensor>& in, bool hoisted) {
    Tensor lead = in[0].narrow(2, 0, 2), rest = in[0].narrow(2, 2, 3), h = in[1];
    Tensor projected = hoisted ? gru.project_leading(lead) : Tensor();
    std::vector<Tensor> outputs;
    for (int64_t t = 0; t < 4; ++t) {
      auto [out, h_n] = hoisted ? gru(rest.narrow(1, t, 1), {.h0 = h, .leading_projection = projected.narrow(1, t, 1)})
                                : gru(in[0].narrow(1, t, 1), {.h0 = h});
      outputs.push_back(out);
      h = h_n;
    }
    return flat({cat(outputs, 1), h});
  };
  Tensor whole = stepped({x, h0}, false), split = stepped({x, h0}, true);
  CHECK(max_abs_diff(whole, split) < 1e-12);
  CHECK(max_abs(whole) > 0.1);
  auto fn = [&](const std::vector<Tensor>& in) { return stepped(in, true); };
  check_report(gradcheck(fn, with_parameters({x, h0}, gru), {.name = "GRU with a leading projection"}));

  CHECK_THROWS_WITH_AS(gru(x, {.leading_projection = zeros({2, 4, 12}, {.dtype = f64})}),
                       "gru: leading_projection (2, 4, 12) must be (B, T, 3H = 12) beside x (2, 4, 5) "
                       "(B, T, F < input_size = 5)", ShapeError);
  CHECK_THROWS_WITH_AS(gru(x.narrow(2, 0, 3), {.leading_projection = zeros({2, 3, 12}, {.dtype = f64})}),
                       doctest::Contains("gru: leading_projection (2, 3, 12) must be (B, T, 3H = 12)"), ShapeError);
  CHECK_THROWS_WITH_AS(gru.project_leading(x), "gru: project_leading expects (B, T, P) with 0 < P < input_size = 5, "
                       "got (2, 4, 5)", ShapeError);
  CHECK_THROWS_WITH_AS(gru.project_leading(Tensor()), "gru: project_leading's input is undefined", Error);
  nn::GRU bidirectional({.input_size = 5, .hidden_size = 4, .bidirectional = true});
  CHECK_THROWS_WITH_AS(bidirectional.project_leading(zeros({2, 4, 2})),
                       "gru: a leading projection needs a unidirectional GRU", ValueError);
  CHECK_THROWS_WITH_AS(bidirectional(zeros({2, 4, 3}), {.leading_projection = zeros({2, 4, 12})}),
                       "gru: a leading projection needs a unidirectional GRU", ValueError);
}

// A decoder calls its GRU once per step: the weights' gradients summed over the T calls equal those
// of one call over the whole sequence.
TEST_CASE("GRU stepped one call per step: the weights' gradients equal the whole sequence's") {
  manual_seed(16);
  const int64_t T = 4;
  nn::GRU gru({.input_size = 5, .hidden_size = 4, .num_layers = 2});
  gru.to(f64);
  Tensor x = randn64({2, T, 5}), h0 = randn64({2, 2, 4}), weights = randn64({2, T, 4});
  auto weight_grads = [&](bool stepped) {
    gru.zero_grad();
    Tensor out;
    if (stepped) {
      std::vector<Tensor> outputs;
      Tensor h = h0;
      for (int64_t t = 0; t < T; ++t) {
        auto [y, h_n] = gru(x.narrow(1, t, 1), {.h0 = h});
        outputs.push_back(y);
        h = h_n;
      }
      out = cat(outputs, 1);
    } else {
      out = gru(x, {.h0 = h0}).output;
    }
    mul(out, weights).sum().backward();
    std::vector<Tensor> grads;
    for (const auto& [name, p] : gru.named_parameters()) grads.push_back(p.grad().clone());
    return flat(grads);
  };
  const Tensor whole = weight_grads(false);
  const Tensor stepped = weight_grads(true);
  CHECK(max_abs_diff(whole, stepped) < 1e-12);
  CHECK(max_abs(whole) > 0.1);
}

TEST_CASE("LSTM: gradcheck w.r.t. input, h0, c0 and every parameter (float64, B=2, T=3, H=4)") {
  for (bool bidirectional : {false, true}) {
    for (int64_t num_layers : {1, 2}) {
      CAPTURE(bidirectional);
      CAPTURE(num_layers);
      manual_seed(15);
      nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = num_layers, .bidirectional = bidirectional});
      lstm.to(f64);
      const int64_t n = num_layers * (bidirectional ? 2 : 1);
      Tensor lengths = lengths_of({2, 3});
      auto fn = [&](const std::vector<Tensor>& in) {
        auto [out, state] = lstm(in[0], {.h0 = in[1], .c0 = in[2], .lengths = lengths});
        return flat({out, state.h, state.c});
      };
      check_report(gradcheck(fn, with_parameters({randn64({2, 3, 3}), randn64({n, 2, 4}), randn64({n, 2, 4})}, lstm),
                             {.name = "LSTM"}));
    }
  }
}

// Runs a padded batch with lengths and each sequence alone without padding: the valid steps and
// the final states agree, padded outputs are zero, and padded inputs do not matter.
template <class RNN, class Run>
void check_masking(RNN& rnn, const Run& run, int64_t n_states) {
  const int64_t B = 4, T = 6, F = 3;
  const std::vector<int64_t> lens{6, 2, 4, 1};
  const int64_t H = rnn.options().hidden_size, dirs = rnn.num_directions();
  Tensor x = randn({B, T, F}, {.dtype = f64});
  Tensor x_garbage = x.clone();  // the same valid steps, wild values in the padding
  {
    NoGradGuard no_grad;
    for (int64_t b = 0; b < B; ++b)
      if (lens[b] < T) x_garbage.select(0, b).narrow(0, lens[b], T - lens[b]).fill_(1e3);
  }
  std::vector<Tensor> init;
  for (int64_t k = 0; k < n_states; ++k) init.push_back(randn({rnn.options().num_layers * dirs, B, H}, {.dtype = f64}));
  auto [out, finals] = run(x, init, lengths_of(lens));
  auto [out_garbage, finals_garbage] = run(x_garbage, init, lengths_of(lens));
  CHECK(out.shape() == Shape{B, T, dirs * H});
  CHECK(max_abs_diff(out, out_garbage) == 0);
  for (int64_t k = 0; k < n_states; ++k) CHECK(max_abs_diff(finals[k], finals_garbage[k]) == 0);

  for (int64_t b = 0; b < B; ++b) {
    CAPTURE(b);
    std::vector<Tensor> init_b;
    for (const Tensor& s : init) init_b.push_back(s.narrow(1, b, 1));
    auto [solo, solo_finals] = run(x.narrow(0, b, 1).narrow(1, 0, lens[b]), init_b, Tensor());
    CHECK(max_abs_diff(out.narrow(0, b, 1).narrow(1, 0, lens[b]), solo) < 1e-12);
    if (lens[b] < T) CHECK(max_abs(out.narrow(0, b, 1).narrow(1, lens[b], T - lens[b])) == 0);
    for (int64_t k = 0; k < n_states; ++k) CHECK(max_abs_diff(finals[k].narrow(1, b, 1), solo_finals[k]) < 1e-12);
  }

  // Padded inputs get no gradient.
  Tensor xg = x.clone().requires_grad_();
  auto [out_g, finals_g] = run(xg, init, lengths_of(lens));
  (out_g.sum() + finals_g[0].sum()).backward();
  for (int64_t b = 0; b < B; ++b)
    if (lens[b] < T) CHECK(max_abs(xg.grad().select(0, b).narrow(0, lens[b], T - lens[b])) == 0);
}

TEST_CASE("GRU: valid lengths match running each sequence alone") {
  for (bool bidirectional : {false, true}) {
    CAPTURE(bidirectional);
    manual_seed(16);
    nn::GRU gru({.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = bidirectional});
    gru.to(f64);
    auto run = [&](const Tensor& x, const std::vector<Tensor>& init, const Tensor& lengths) {
      auto [out, h_n] = gru(x, {.h0 = init[0], .lengths = lengths});
      return std::pair{out, std::vector<Tensor>{h_n}};
    };
    check_masking(gru, run, 1);
  }
}

TEST_CASE("LSTM: valid lengths match running each sequence alone") {
  for (bool bidirectional : {false, true}) {
    CAPTURE(bidirectional);
    manual_seed(17);
    nn::LSTM lstm({.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = bidirectional});
    lstm.to(f64);
    auto run = [&](const Tensor& x, const std::vector<Tensor>& init, const Tensor& lengths) {
      auto [out, state] = lstm(x, {.h0 = init[0], .c0 = init[1], .lengths = lengths});
      return std::pair{out, std::vector<Tensor>{state.h, state.c}};
    };
    check_masking(lstm, run, 2);
  }
}

TEST_CASE("GRU and LSTM: lengths become a keep mask (B, T); any pattern of padded steps keeps the state") {
  manual_seed(20);
  nn::GRU gru({.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .bidirectional = true});
  gru.to(f64);
  lstm.to(f64);
  Tensor x = randn({3, 5, 3}, {.dtype = f64});
  Tensor lengths = lengths_of({5, 2, 0});
  Tensor keep = nn::keep_mask(lengths, 5, "test");  // (3, 5), true at t < length
  std::vector<bool> expected = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  CHECK(keep.to_vector<bool>() == expected);
  auto [g_len, gh_len] = gru(x, {.lengths = lengths});
  auto [g_keep, gh_keep] = gru(x, {.keep = keep});
  CHECK(max_abs_diff(g_len, g_keep) == 0);
  CHECK(max_abs_diff(gh_len, gh_keep) == 0);
  auto [l_len, ls_len] = lstm(x, {.lengths = lengths});
  auto [l_keep, ls_keep] = lstm(x, {.keep = keep});
  CHECK(max_abs_diff(l_len, l_keep) == 0);
  CHECK(max_abs_diff(ls_len.c, ls_keep.c) == 0);

  // Step 1 padded in every row: sequence 0 is then steps 0, 2, 3, 4 run alone, both directions.
  Tensor gap = logical_and(keep, ne(arange(0, 5).view({1, 5}), 1.0));  // (3, 5)
  Tensor real_steps = from_vector<int64_t>({0, 2, 3, 4}, {4}, {.dtype = DType::i64});
  Tensor x0 = index_select(x.narrow(0, 0, 1), 1, real_steps);  // (1, 4, 3)
  auto [g_gap, gh_gap] = gru(x, {.keep = gap});
  auto [g_solo, gh_solo] = gru(x0);
  CHECK(max_abs_diff(index_select(g_gap.narrow(0, 0, 1), 1, real_steps), g_solo) < 1e-12);
  CHECK(max_abs(g_gap.select(1, 1)) == 0);
  CHECK(max_abs_diff(gh_gap.narrow(1, 0, 1), gh_solo) < 1e-12);
  auto [l_gap, ls_gap] = lstm(x, {.keep = gap});
  auto [l_solo, ls_solo] = lstm(x0);
  CHECK(max_abs_diff(index_select(l_gap.narrow(0, 0, 1), 1, real_steps), l_solo) < 1e-12);
  CHECK(max_abs_diff(ls_gap.c.narrow(1, 0, 1), ls_solo.c) < 1e-12);
}

TEST_CASE("GRU: full lengths equal no lengths; a length of 0 keeps h0 and outputs zeros") {
  manual_seed(18);
  nn::GRU gru({.input_size = 2, .hidden_size = 3, .bidirectional = true});
  Tensor x = randn({2, 4, 2});
  Tensor h0 = randn({2, 2, 3});
  auto [out, h_n] = gru(x, {.h0 = h0});
  auto [out_full, h_full] = gru(x, {.h0 = h0, .lengths = lengths_of({4, 4})});
  CHECK(max_abs_diff(out, out_full) == 0);
  CHECK(max_abs_diff(h_n, h_full) == 0);

  auto [out0, h0_out] = gru(x, {.h0 = h0, .lengths = lengths_of({0, 4})});
  CHECK(max_abs(out0.select(0, 0)) == 0);
  CHECK(max_abs_diff(h0_out.narrow(1, 0, 1), h0.narrow(1, 0, 1)) == 0);
  CHECK(max_abs_diff(out0.select(0, 1), out.select(0, 1)) == 0);

  auto [out_none, h_none] = gru(x, {.h0 = h0, .lengths = lengths_of({0, 0})});
  CHECK(max_abs(out_none) == 0);
  CHECK(max_abs_diff(h_none, h0) == 0);
}

TEST_CASE("GRU: dropout between layers in training only, never after the last layer") {
  manual_seed(19);
  nn::GRU gru({.input_size = 4, .hidden_size = 8, .num_layers = 2, .dropout = 0.5});
  Tensor x = randn({3, 5, 4});
  gru.eval();
  auto [eval_a, h_a] = gru(x);
  auto [eval_b, h_b] = gru(x);
  CHECK(max_abs_diff(eval_a, eval_b) == 0);
  gru.train();
  auto [train_out, h_train] = gru(x);
  CHECK(max_abs_diff(train_out, eval_a) > 1e-3);  // layer 1 saw a dropped-out input

  // One layer: the dropout option has nothing to act on.
  nn::GRU single({.input_size = 4, .hidden_size = 8, .dropout = 0.5});
  auto [s_train, s_h] = single(x);
  single.eval();
  auto [s_eval, s_h_eval] = single(x);
  CHECK(max_abs_diff(s_train, s_eval) == 0);
}

TEST_CASE("GRU/LSTM: errors name the layer, the expectation and the shapes") {
  nn::GRU gru({.input_size = 32, .hidden_size = 4, .num_layers = 2});
  CHECK_THROWS_WITH_AS(gru(zeros({2, 5, 16})), "gru: input feature size 16 != input_size 32 (x: (2, 5, 16))",
                       ShapeError);
  CHECK_THROWS_WITH_AS(gru(zeros({5, 32})),
                       "gru: expected a batch-first input (B, T, input_size = 32), got x: (5, 32)", ShapeError);
  CHECK_THROWS_WITH_AS(gru(zeros({2, 0, 32})), "gru: input has no time steps (x: (2, 0, 32))", ShapeError);
  CHECK_THROWS_WITH_AS(gru(zeros({2, 5, 32}, {.dtype = f64})),
                       doctest::Contains("gru: input dtype float64 != parameter dtype float32"), DTypeError);
  Tensor x = zeros({2, 5, 32});
  CHECK_THROWS_WITH_AS(gru(x, {.lengths = lengths_of({5, 6})}),
                       "gru: lengths[1] = 6 not in [0, 5] (lengths (2,) for 5 positions)", ValueError);
  CHECK_THROWS_WITH_AS(gru(x, {.lengths = lengths_of({-1, 2})}),
                       "gru: lengths[0] = -1 not in [0, 5] (lengths (2,) for 5 positions)", ValueError);
  CHECK_THROWS_WITH_AS(gru(x, {.keep = ones({2, 4}, {.dtype = DType::b8})}),
                       "gru: keep (2, 4) must be (B, T) = (2, 5) (x: (2, 5, 32))", ShapeError);
  CHECK_THROWS_WITH_AS(gru(x, {.keep = ones({2, 5})}), "gru: keep must be bool (true at real steps), got float32 (2, 5)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(gru(x, {.lengths = lengths_of({1, 2}), .keep = ones({2, 5}, {.dtype = DType::b8})}),
                       "gru: give lengths or a keep mask, not both (x: (2, 5, 32))", ValueError);
  CHECK_THROWS_WITH_AS(gru(x, {.lengths = lengths_of({1, 2, 3})}),
                       "gru: lengths (3,) must be (B,) = (2,) (x: (2, 5, 32))", ShapeError);
  CHECK_THROWS_WITH_AS(gru(x, {.lengths = zeros({2})}), "gru: lengths must be int64, got float32 (2,)", DTypeError);
  CHECK_THROWS_WITH_AS(gru(x, {.h0 = zeros({1, 2, 4})}), "gru: h0 shape (1, 2, 4) != (2, 2, 4) (x: (2, 5, 32))",
                       ShapeError);

  nn::LSTM lstm({.input_size = 3, .hidden_size = 4});
  CHECK_THROWS_WITH_AS(lstm(zeros({2, 5, 3}), {.c0 = zeros({1, 3, 4})}),
                       "lstm: c0 shape (1, 3, 4) != (1, 2, 4) (x: (2, 5, 3))", ShapeError);
  CHECK_THROWS_WITH_AS(lstm(zeros({2, 5, 4})), "lstm: input feature size 4 != input_size 3 (x: (2, 5, 4))",
                       ShapeError);
  CHECK_THROWS_WITH_AS(lstm.weights(1), "lstm: layer 1 out of range for num_layers = 1", IndexError);
  CHECK_THROWS_WITH_AS(lstm.weights(0, nn::Direction::reverse),
                       "lstm: the reverse direction exists only when bidirectional", IndexError);

  nn::GRUCell cell({.input_size = 3, .hidden_size = 4});
  CHECK_THROWS_WITH_AS(cell(zeros({2, 5})), "gru_cell: input feature size 5 != input_size 3 (x: (2, 5))", ShapeError);
  CHECK_THROWS_WITH_AS(cell(zeros({2, 3}), zeros({3, 4})), "gru_cell: h shape (3, 4) != (2, 4) (x: (2, 3))",
                       ShapeError);
  nn::LSTMCell lcell({.input_size = 3, .hidden_size = 4});
  CHECK_THROWS_WITH_AS(lcell(zeros({2, 3, 1})), "lstm_cell: expected input (B, input_size = 3), got x: (2, 3, 1)",
                       ShapeError);
}

TEST_CASE("GRU/LSTM: bad options name the bad value") {
  CHECK_THROWS_WITH_AS(nn::GRU({.input_size = 0, .hidden_size = 4}), "gru: input_size = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::GRU({.input_size = 3, .hidden_size = -2}), "gru: hidden_size = -2 must be positive",
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::LSTM({.input_size = 3, .hidden_size = 4, .num_layers = 0}),
                       "lstm: num_layers = 0 must be positive", ValueError);
  CHECK_THROWS_WITH_AS(nn::GRU({.input_size = 3, .hidden_size = 4, .num_layers = 2, .dropout = 1.5}),
                       "gru: dropout = 1.5 not in [0, 1)", ValueError);
  CHECK_THROWS_WITH_AS(nn::GRUCell({.input_size = 3, .hidden_size = 0}), "gru_cell: hidden_size = 0 must be positive",
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::LSTMCell({.input_size = 0, .hidden_size = 1}), "lstm_cell: input_size = 0 must be positive",
                       ValueError);
}
