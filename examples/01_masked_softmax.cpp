// Source snippet: d2l's masked_softmax(X, valid_lens), which fills masked scores with -1e6 before softmax.
// Demonstrates nn::masked_softmax with valid lengths per batch row (B,) and per query (B, Q), the
// same masking as a bool keep mask (true = keep, the snippets' `mask == 0 -> masked` convention), and
// the edge the -1e6 trick gets wrong: a row with no valid key gives zeros (not a uniform row),
// with a zero gradient instead of NaN.
#include <fmt/core.h>

#include <cmath>
#include <vector>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

int main() {
  manual_seed(0);
  Tensor scores = rand({2, 2, 4});  // (B, Q, K), as torch.rand(2, 2, 4) in the snippet

  // One valid length per batch row: row 0 keeps keys 0-1, row 1 keeps keys 0-2.
  Tensor lengths = from_vector<int64_t>({2, 3}, {2});
  Tensor w = nn::masked_softmax(scores, lengths);  // (B, Q, K)
  fmt::print("scores\n{}\nmasked_softmax(scores, [2, 3])\n{}\n", to_string(scores), to_string(w));
  expect(max_abs_diff(sum(w, {2}), ones({2, 2})) < 1e-6, "every row sums to 1");
  expect(max(w.narrow(2, 2, 2).select(0, 0)).item() == 0.0 && max(w.select(0, 1).select(1, 3)).item() == 0.0,
         "keys at and after each valid length get weight exactly 0");
  // Hand check of one row: softmax over the first two scores only.
  std::vector<double> s = scores.select(0, 0).select(0, 0).to_vector<double>();
  double w0 = std::exp(s[0]) / (std::exp(s[0]) + std::exp(s[1]));
  expect(std::abs(w.select(0, 0).select(0, 0).to_vector<double>()[0] - w0) < 1e-6,
         "w[0, 0, 0] = e^s0 / (e^s0 + e^s1)");

  // One valid length per query, as the snippet's 2-D valid_lens [[1, 3], [2, 4]].
  Tensor per_query = from_vector<int64_t>({1, 3, 2, 4}, {2, 2});
  Tensor wq = nn::masked_softmax(scores, per_query);
  expect(wq.select(0, 0).select(0, 0).to_vector<double>()[0] == 1.0, "a query with one valid key puts all weight on it");
  expect(max_abs_diff(wq.select(0, 1).select(0, 1), softmax(scores, -1).select(0, 1).select(0, 1)) < 1e-7,
         "a query with all 4 keys valid is a plain softmax");

  // The same masking as a keep mask (true = attend), e.g. from ids != pad in a user's program.
  Tensor keep = lt(arange(0, 4), lengths.unsqueeze(1)).unsqueeze(1);  // (B, 1, K)
  expect(max_abs_diff(nn::masked_softmax(scores, keep), w) == 0.0, "a bool keep mask gives the same weights");

  // A fully masked row: the -1e6 trick gives a uniform row (attending to padding); seqgrad gives
  // zeros, so the context of an empty source is 0, and the gradient is 0, not NaN.
  Tensor x = rand({1, 1, 4}).requires_grad_();
  Tensor empty_row = nn::masked_softmax(x, from_vector<int64_t>({0}, {1}));
  Tensor trick = softmax(masked_fill(x, ones({1, 1, 4}, {.dtype = DType::b8}), -1e6), -1);
  fmt::print("no valid key: masked_softmax {} vs the -1e6 trick {}\n", to_string(empty_row), to_string(trick));
  expect(max(abs(empty_row)).item() == 0.0, "a row with no valid key gives all zeros");
  expect(std::abs(trick.to_vector<double>()[0] - 0.25) < 1e-6, "(the -1e6 trick gives 1/K to padding instead)");
  mul(empty_row, rand({1, 1, 4})).sum().backward();
  std::vector<double> grad = x.grad().to_vector<double>();
  bool zero_grad = true;
  for (double g : grad) zero_grad = zero_grad && g == 0.0;
  expect(zero_grad, "and its gradient is 0 (finite)");
  return examples::exit_code();
}
