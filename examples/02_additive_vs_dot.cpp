// Source snippet: d2l's AdditiveAttention and DotProductAttention, run on the same inputs.
// Demonstrates the two scoring functions side by side:
//   additive      score(q, k) = vᵀ tanh(W_q q + W_k k)   (learned; Dq may differ from Dk)
//   scaled dot    score(q, k) = q · k / √d               (no parameters; Dq = Dk = d)
// then weights = masked_softmax(scores, valid_lens) and context = weights · values for both.
// Checked: each kind's weights equal its formula computed by hand, and when every key is the same
// (the snippet's torch.ones keys) both kinds attend uniformly to the valid keys, whatever the query.
#include <fmt/core.h>

#include <cmath>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

int main() {
  manual_seed(0);
  const int64_t d = 2;
  Tensor queries = randn({2, 1, d});                                          // (B, Q, d)
  Tensor keys = randn({2, 10, d});                                            // (B, K, d)
  Tensor values = arange(0, 40, 1, {.dtype = DType::f32}).reshape({1, 10, 4}).expand({2, 10, 4});  // (B, K, 4)
  Tensor valid_lens = from_vector<int64_t>({2, 6}, {2});

  nn::AdditiveAttention additive({.query_size = d, .key_size = d, .hidden_size = 8});
  nn::ScaledDotProductAttention dot;
  additive.eval();
  dot.eval();
  Tensor c_add = additive(queries, keys, values, valid_lens);  // (B, Q, 4)
  Tensor c_dot = dot(queries, keys, values, valid_lens);       // (B, Q, 4)
  Tensor w_add = additive.last_weights(), w_dot = dot.last_weights();  // (B, Q, K)
  fmt::print("additive weights\n{}\nscaled-dot weights\n{}\n", to_string(w_add), to_string(w_dot));
  expect(c_add.shape() == Shape{2, 1, 4} && c_dot.shape() == Shape{2, 1, 4}, "both give a (B, Q, Dv) = (2, 1, 4) context");

  // The formulas by hand, with broadcasting: (B, Q, 1, A) + (B, 1, K, A) -> (B, Q, K, A).
  Tensor features = tanh(additive.w_q(queries).unsqueeze(2) + additive.w_k(keys).unsqueeze(1));
  Tensor scores_add = matmul(features, additive.w_v.weight.transpose(0, 1)).squeeze(-1);  // (B, Q, K)
  Tensor scores_dot = matmul(queries, keys.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
  expect(max_abs_diff(w_add, nn::masked_softmax(scores_add, valid_lens)) < 1e-6,
         "additive weights = masked_softmax(vᵀ tanh(W_q q + W_k k))");
  expect(max_abs_diff(w_dot, nn::masked_softmax(scores_dot, valid_lens)) < 1e-6,
         "scaled-dot weights = masked_softmax(q · k / √d)");
  expect(max_abs_diff(c_add, matmul(w_add, values)) < 1e-4 && max_abs_diff(c_dot, matmul(w_dot, values)) < 1e-4,
         "context = weights · values for both");
  expect(max_abs_diff(w_add, w_dot) > 1e-3, "the two scorers weigh the same keys differently");

  // The snippet's inputs: every key is torch.ones, so every score in a row is the same and both
  // kinds average the valid values: row 0 the first 2 value rows, row 1 the first 6.
  Tensor same_keys = ones({2, 10, d});
  Tensor uniform_add = additive(queries, same_keys, values, valid_lens);
  Tensor uniform_dot = dot(queries, same_keys, values, valid_lens);
  Tensor expected = stack({mean(values.select(0, 0).narrow(0, 0, 2), {0}, true),
                           mean(values.select(0, 1).narrow(0, 0, 6), {0}, true)});  // (B, 1, 4)
  fmt::print("identical keys: additive {}\n", to_string(uniform_add));
  expect(max_abs_diff(uniform_add, expected) < 1e-4 && max_abs_diff(uniform_dot, expected) < 1e-4,
         "identical keys: both contexts are the mean of the valid values ([2, 3, 4, 5] and [10, 11, 12, 13])");
  return examples::exit_code();
}
