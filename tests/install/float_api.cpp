// Built against an installed seqgrad (pkg-config), outside the source tree: a program written
// against the float modules, in PyTorch's spelling. The attention modules hold their projections
// as nn::Quantizable<nn::Linear>, so that nn::quantize_dynamic can swap them for int8 ones; a
// program that never quantizes reads and sets them as plain Linear layers (`attention.w_q.weight`,
// as `proj.weight`), and nothing of the quantization design shows. Exits 0 when all of that holds.
#include <cmath>
#include <map>
#include <string>

#include <fmt/core.h>

#include <seqgrad/core/autograd.h>
#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>
#include <seqgrad/ops/ops.h>

using namespace seqgrad;

int failures = 0;
void expect(bool ok, const std::string& claim) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", claim);
  failures += ok ? 0 : 1;
}

int main() {
  manual_seed(0);
  nn::AdditiveAttention attention({.query_size = 3, .key_size = 3, .hidden_size = 2});
  nn::Linear proj({.in_features = 3, .out_features = 2, .bias = false});  // the same shape, plain
  {
    NoGradGuard no_grad;  // as `with torch.no_grad(): attention.w_q.weight.copy_(...)`
    attention.w_q.weight.copy_(proj.weight);
    attention.w_k.weight.copy_(tensor({1, 0, 0, 0, 1, 0}, {2, 3}));
    attention.w_v.weight.fill_(1.0);
  }
  expect(attention.w_q.weight.shape() == proj.weight.shape(), "w_q.weight has a Linear's shape (A, Dq)");
  expect(!attention.w_q.bias.defined() && !proj.bias.defined(), "w_q.bias is undefined, as a bias-free Linear's");

  // The energies from the members by hand, e_j = Σ_a w_v[a] tanh((W_q q)_a + (W_k k_j)_a), against
  // the module's: the members are the weights it computes with.
  Tensor q = tensor({1.0, 0.0, 0.5}, {1, 1, 3});
  Tensor k = tensor({1.0, 0.2, 0.4, -0.1, 0.9, -0.6}, {1, 2, 3});
  Tensor scores = attention.score(q, k);  // (1, 1, 2)
  Tensor w_k_k = matmul(k.squeeze(0), attention.w_k.weight.t()).unsqueeze(0).unsqueeze(0);  // (1, 1, K, A)
  Tensor by_hand = sum(tanh(add(proj(q).unsqueeze(2), w_k_k)), {3});                         // w_v = 1
  expect(max(abs(sub(scores, by_hand))).item() < 1e-6, "score() uses the weights set through attention.w_q.weight");

  // Gradients reach the same members, as after a PyTorch backward.
  Tensor context = attention(q, k, k);
  sum(context).backward();
  expect(attention.w_q.weight.grad().defined() && attention.w_k.weight.grad().defined(),
         "attention.w_q.weight.grad() and w_k's are defined after backward");
  bool registered = false;
  for (const auto& [name, p] : attention.named_parameters())
    if (name == "w_q.weight") registered = p.grad().defined() && p.to_vector<float>() == proj.weight.to_vector<float>();
  expect(registered, "named_parameters()'s w_q.weight is the member the program set");

  // state_dict() as programs used it when it returned std::map<std::string, Tensor> (it returns a
  // StateDict now, which is that map plus plain values): kept as the map, iterated, indexed,
  // loaded from a map, and from a braced list of names and tensors.
  std::map<std::string, Tensor> state = attention.state_dict();
  nn::AdditiveAttention copy({.query_size = 3, .key_size = 3, .hidden_size = 2});
  expect(copy.load_state_dict(state).ok(), "load_state_dict(std::map) loads every key");
  size_t keys = 0;
  for (const auto& [name, t] : copy.state_dict()) keys += t.numel() > 0 ? 1 : 0;
  expect(keys == state.size(), "a range-for over state_dict() sees every tensor");
  expect(copy.state_dict().at("w_q.weight").to_vector<float>() == proj.weight.to_vector<float>(),
         "state_dict().at(\"w_q.weight\") is the loaded weight");
  nn::Linear other({.in_features = 3, .out_features = 2, .bias = false});
  other.load_state_dict({{"weight", attention.w_k.weight}});
  expect(other.weight.to_vector<float>() == attention.w_k.weight.to_vector<float>(),
         "load_state_dict({{\"weight\", t}}) loads a braced list");
  fmt::print("float_api: {}\n", failures == 0 ? "every claim holds" : fmt::format("{} claim(s) failed", failures));
  return failures == 0 ? 0 : 1;
}
