// Source snippet: a "hybrid" attention mixing the additive and the dot-product scores.
// Demonstrates nn::HybridAttention = ½ (additive + scaled dot), each half with its own softmax:
//   context = ½ (softmax(vᵀ tanh(W_q q + W_k k)) + softmax(W q · k / √Dk)) · values
// (with Dq != Dk the scaled-dot half first maps the query with a learned W (Dk × Dq)). It is called
// the way a decoder calls it: a 2-D query (B, Dq), the decoder state, and a bool keep mask
// (true = a real source token) built from the source ids.
#include <fmt/core.h>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

int main() {
  manual_seed(0);
  const int64_t batch = 2, src_len = 5, query_size = 6, key_size = 8, pad = 0;
  Tensor state = randn({batch, query_size});               // (B, Dq): one decoder state per sentence
  Tensor encoder_outputs = randn({batch, src_len, key_size});  // (B, S, Dk), keys and values
  Tensor src = from_vector<int64_t>({4, 7, 9, pad, pad, 3, 5, 8, 6, 2}, {batch, src_len});
  Tensor keep = ne(src, static_cast<double>(pad));         // (B, S) true = attend

  nn::HybridAttention hybrid({.query_size = query_size, .key_size = key_size, .hidden_size = 8});
  Tensor context = hybrid(state, encoder_outputs, encoder_outputs, keep);  // (B, Dk)
  Tensor weights = hybrid.last_weights();                                  // (B, S)
  fmt::print("hybrid weights\n{}\n", to_string(weights));
  expect(context.shape() == Shape{batch, key_size} && weights.shape() == Shape{batch, src_len},
         "a 2-D query gives a (B, Dv) context and (B, S) weights");
  expect(max(weights.select(0, 0).narrow(0, 3, 2)).item() == 0.0, "padding (keep = false) gets no weight");

  // The two halves, run on their own with the same arguments.
  Tensor c_additive = hybrid.additive(state, encoder_outputs, encoder_outputs, keep);
  Tensor w_additive = hybrid.additive.last_weights();
  Tensor c_dot = hybrid.scaled_dot(state, encoder_outputs, encoder_outputs, keep);
  Tensor w_dot = hybrid.scaled_dot.last_weights();
  fmt::print("additive half\n{}\nscaled-dot half\n{}\n", to_string(w_additive), to_string(w_dot));
  expect(max_abs_diff(context, (c_additive + c_dot) * 0.5) < 1e-6, "context = ½ (additive context + scaled-dot context)");
  expect(max_abs_diff(weights, (w_additive + w_dot) * 0.5) < 1e-6, "weights = ½ (additive weights + scaled-dot weights)");
  expect(max_abs_diff(sum(weights, {1}), ones({batch})) < 1e-6, "and still sum to 1 over the source");

  // Gradients reach both halves' parameters.
  context.sum().backward();
  bool all_have_grads = true;
  for (const auto& [name, p] : hybrid.named_parameters()) {
    bool has = p.grad().defined() && max(abs(p.grad())).item() > 0;
    fmt::print("  {:24} grad {}\n", name, has ? "nonzero" : "none");
    all_have_grads = all_have_grads && has;
  }
  expect(all_have_grads, "every parameter of both halves gets a gradient");
  return examples::exit_code();
}
