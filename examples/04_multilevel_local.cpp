// Source snippet: multi-level attention (several scorers over the same memory, contexts concatenated) and
// local attention (Luong et al. 2015: attend only to a window [p - D, p + D] around a position p).
// Demonstrates nn::MultiLevelAttention built from an additive and a scaled-dot level, and
// nn::LocalAttention with monotonic (p = the query's index) and predictive (p learned) positions.
// Checked: each level's slice of the multi-level context is that level run alone; local weights
// vanish outside the window and outside the valid keys; predicted positions stay in [0, len - 1].
#include <fmt/core.h>

#include <cmath>
#include <memory>
#include <vector>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

namespace {

void multi_level() {
  const int64_t d = 8;
  Tensor queries = randn({2, 3, d}), keys = randn({2, 6, d}), values = randn({2, 6, 5});
  Tensor lengths = from_vector<int64_t>({6, 4}, {2});
  std::vector<std::unique_ptr<nn::Attention>> levels;
  levels.push_back(std::make_unique<nn::AdditiveAttention>(
      nn::AdditiveAttention::Options{.query_size = d, .key_size = d, .hidden_size = 16}));
  levels.push_back(std::make_unique<nn::ScaledDotProductAttention>());
  nn::MultiLevelAttention attention(std::move(levels));
  Tensor context = attention(queries, keys, values, lengths);  // (B, Q, 5 + 5)
  fmt::print("multi-level: {} levels, context {}\n", attention.num_levels(), to_string(context.narrow(1, 0, 1)));
  expect(context.shape() == Shape{2, 3, 10}, "two levels over 5-wide values give a (B, Q, 10) context");
  Tensor additive_alone = attention.level(0)(queries, keys, values, lengths);
  Tensor dot_alone = attention.level(1)(queries, keys, values, lengths);
  expect(max_abs_diff(context.narrow(2, 0, 5), additive_alone) < 1e-6 &&
             max_abs_diff(context.narrow(2, 5, 5), dot_alone) < 1e-6,
         "its halves are the additive level's and the scaled-dot level's contexts");
  expect(max_abs_diff(attention.last_weights(), (attention.level(0).last_weights() + attention.level(1).last_weights()) * 0.5) < 1e-6,
         "last_weights() is the mean of the levels' weights (for plots)");
}

void local_monotonic() {
  const int64_t d = 4, window = 1;
  Tensor x = randn({1, 6, d});  // self-attention over 6 positions: query i is centred on key i
  nn::LocalAttention local({.query_size = d, .key_size = d, .hidden_size = 8, .window = window});
  local(x, x, x, from_vector<int64_t>({5}, {1}));  // key 5 is padding
  Tensor w = local.last_weights().select(0, 0);    // (Q, K)
  fmt::print("local (monotonic, D = 1) weights\n{}\n", to_string(w));
  bool inside_only = true;
  for (int64_t i = 0; i < 6; ++i) {
    std::vector<double> row = w.select(0, i).to_vector<double>();
    for (int64_t j = 0; j < 6; ++j) {
      bool allowed = std::abs(i - j) <= window && j < 5;
      inside_only = inside_only && (allowed || row[j] == 0.0);
    }
  }
  expect(inside_only, "query i attends only to keys i-1..i+1 that are valid");
  expect(max_abs_diff(sum(w, {1}), ones({6})) < 1e-6, "each row's window still sums to 1");
}

void local_predictive() {
  const int64_t d = 4;
  Tensor queries = randn({2, 3, d}), keys = randn({2, 10, d});
  Tensor lengths = from_vector<int64_t>({10, 4}, {2});
  nn::LocalAttention local({.query_size = d, .key_size = d, .hidden_size = 8, .window = 2,
                            .position = nn::LocalAttention::Position::predictive});
  Tensor context = local(queries, keys, keys, lengths);
  Tensor p = local.last_positions();  // (B, Q): p = (len - 1) σ(v_pᵀ tanh(W_p q))
  fmt::print("local (predictive) centres\n{}\n", to_string(p));
  std::vector<double> centres = p.to_vector<double>();
  bool in_range = true;
  for (size_t i = 0; i < centres.size(); ++i) {
    double last = i < 3 ? 9.0 : 3.0;
    in_range = in_range && centres[i] >= 0 && centres[i] <= last;
  }
  expect(in_range, "predicted centres lie in [0, len - 1] for each sentence");
  context.sum().backward();
  expect(local.w_p->weight.grad().defined() && max(abs(local.w_p->weight.grad())).item() > 0,
         "the position network learns: W_p gets a gradient through the Gaussian");
}

}  // namespace

int main() {
  manual_seed(0);
  multi_level();
  local_monotonic();
  local_predictive();
  return examples::exit_code();
}
