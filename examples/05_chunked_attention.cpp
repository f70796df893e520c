// Source snippet: a "memory-efficient" attention that splits the keys into chunks, attends within each
// chunk and AVERAGES the chunk contexts. That is not attention: each chunk's softmax is normalised
// on its own, so a chunk of weak keys counts as much as a chunk holding the one key that matters.
// Demonstrates the exact alternative, nn::ChunkedAdditiveAttention (an online, log-sum-exp merged
// softmax: chunk J's context counts with weight exp(lse_J) / Σ_J' exp(lse_J')), next to the snippet's
// average, on the same parameters and inputs:
//   exact chunked == unchunked AdditiveAttention (to rounding);
//   the snippet's average differs from it (printed), and is right only when every chunk happens to
//   have the same normaliser (e.g. identical keys), which is why a uniform test input hides the bug;
//   re-weighting the per-chunk contexts by their log-sum-exp shares recovers the exact result.
#include <fmt/core.h>

#include <algorithm>
#include <vector>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

namespace {

constexpr int64_t kChunk = 4;

// Attention within each chunk of kChunk keys, as the snippet does: the contexts (B, Q, Dv) and the
// log-normalisers lse_J = log Σ_{j in J} exp(score_j) (B, Q, 1) of every chunk.
struct PerChunk {
  std::vector<Tensor> contexts;
  std::vector<Tensor> lse;
};
PerChunk attend_per_chunk(const nn::AdditiveAttention& attention, const Tensor& queries, const Tensor& keys,
                          const Tensor& values) {
  PerChunk out;
  for (int64_t start = 0; start < keys.size(1); start += kChunk) {
    int64_t n = std::min(kChunk, keys.size(1) - start);
    Tensor k = keys.narrow(1, start, n), v = values.narrow(1, start, n);
    out.contexts.push_back(attention(queries, k, v));
    out.lse.push_back(logsumexp(attention.last_scores(), {2}, true));
  }
  return out;
}

// The snippet's merge: the mean of the chunk contexts.
Tensor average(const PerChunk& chunks) { return mean(stack(chunks.contexts), {0}); }

// The exact merge: each chunk's context weighted by its share of the total softmax mass.
Tensor lse_merge(const PerChunk& chunks) {
  Tensor shares = softmax(stack(chunks.lse), 0);  // (J, B, Q, 1), Σ_J = 1
  return sum(mul(shares, stack(chunks.contexts)), {0});
}

}  // namespace

int main() {
  manual_seed(0);
  const int64_t d = 8, n_keys = 12;
  nn::AdditiveAttention plain({.query_size = d, .key_size = d, .hidden_size = 16});
  nn::ChunkedAdditiveAttention chunked({.query_size = d, .key_size = d, .hidden_size = 16, .chunk_size = kChunk});
  expect(chunked.load_state_dict(plain.state_dict()).ok(), "the chunked module loads the plain one's parameters");

  Tensor queries = randn({2, 3, d}), keys = randn({2, n_keys, d}) * 2.0, values = randn({2, n_keys, 5});
  Tensor exact = plain(queries, keys, values);
  Tensor exact_chunked = chunked(queries, keys, values);
  PerChunk chunks = attend_per_chunk(plain, queries, keys, values);
  Tensor averaged = average(chunks);
  double chunked_error = max_abs_diff(exact_chunked, exact), average_error = max_abs_diff(averaged, exact);
  fmt::print("{} keys in chunks of {}: max |context - exact|\n", n_keys, kChunk);
  fmt::print("  exact chunked (online softmax)  {:.2e}\n", chunked_error);
  fmt::print("  snippet's average of chunk outputs {:.2e}\n", average_error);
  fmt::print("  per-chunk contexts lse-merged   {:.2e}\n", max_abs_diff(lse_merge(chunks), exact));
  expect(chunked_error < 1e-5, "ChunkedAdditiveAttention equals AdditiveAttention");
  expect(average_error > 1e-2, "averaging per-chunk contexts does not");
  expect(max_abs_diff(lse_merge(chunks), exact) < 1e-5, "weighting each chunk by exp(lse_J) / Σ exp(lse) does");

  // Identical keys give every chunk the same normaliser: then (and only then) the average is right.
  Tensor same_keys = ones({2, n_keys, d});
  PerChunk uniform = attend_per_chunk(plain, queries, same_keys, values);
  expect(max_abs_diff(average(uniform), plain(queries, same_keys, values)) < 1e-5,
         "with identical keys the average happens to agree (a uniform test input hides the bug)");

  // Gradients agree too: the chunked backward recomputes each chunk's weights from the saved lse.
  Tensor q1 = queries.detach().requires_grad_(), q2 = queries.detach().requires_grad_();
  Tensor dy = randn(exact.shape());
  (plain(q1, keys, values) * dy).sum().backward();
  (chunked(q2, keys, values) * dy).sum().backward();
  expect(max_abs_diff(q1.grad(), q2.grad()) < 1e-5, "and so do the gradients w.r.t. the queries");
  return examples::exit_code();
}
