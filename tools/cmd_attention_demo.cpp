// `seqgrad attention demo`: every attention kind on one tiny, fixed toy input, printing the
// energies (pre-softmax scores), the weights and the contexts, so the formulas in
// docs/attention.md can be followed number by number. Parameters come from --seed, but for the
// additive demo's, set by hand (set_additive_parameters).
#include <algorithm>
#include <set>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/rng.h"
#include "core/threads.h"
#include "nn/attention.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace seqgrad::tools {
namespace {

// The toy input: one batch row, Q = 2 queries, K = 5 keys of which the first 4 are valid (key k4
// is padding), Dq = Dk = 3, Dv = 2. Keys k0 and k2 point the same way as query q0 and k1 as q1;
// the values are easy to recognise, so each context shows which keys it mixes.
constexpr int64_t kQ = 2, kK = 5, kD = 3, kDv = 2, kValid = 4, kHidden = 4;

struct Toy {
  Tensor queries = tensor({1.0, 0.0, 0.5,    //
                           0.0, 1.0, -0.5},  //
                          {1, kQ, kD});
  Tensor keys = tensor({1.0, 0.2, 0.4,    //
                        -0.1, 0.9, -0.6,  //
                        0.8, -0.1, 0.7,   //
                        0.0, 0.0, 0.0,    //
                        5.0, 5.0, 5.0},   //
                       {1, kK, kD});
  Tensor values = tensor({1, 0,   //
                          0, 1,   //
                          1, 1,   //
                          -1, 0,  //
                          9, 9},  //
                         {1, kK, kDv});
  Tensor lengths = from_vector<int64_t>({kValid}, {1}, {.dtype = DType::i64});
};

std::string row_of(const std::vector<double>& v, int64_t begin, int64_t n) {
  std::string s;
  for (int64_t j = 0; j < n; ++j) s += fmt::format(" {:8.4f}", v[begin + j]);
  return s;
}

void print_vectors(const char* name, const char* prefix, const Tensor& t) {  // (1, N, D)
  std::vector<double> v = t.to_vector<double>();
  int64_t n = t.size(1), d = t.size(2);
  fmt::print("  {:<8}", name);
  for (int64_t i = 0; i < n; ++i) fmt::print(" {}{} = [{} ]", prefix, i, row_of(v, i * d, d));
  fmt::print("\n");
}

// A (1, Q, K) or (Q, K) tensor as a table with keys as columns; padding keys are starred.
void print_table(const std::string& title, const Tensor& t) {
  fmt::print("{}\n       ", title);
  for (int64_t j = 0; j < kK; ++j) fmt::print(" {:>8}", fmt::format("k{}{}", j, j >= kValid ? "*" : ""));
  fmt::print("\n");
  std::vector<double> v = t.to_vector<double>();
  for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{}   {}\n", i, row_of(v, i * kK, kK));
}

void print_context(const Tensor& context) {  // (1, Q, D)
  std::vector<double> v = context.to_vector<double>();
  int64_t d = context.size(2);
  fmt::print("context = weights · values   (B, Q, {})\n", d);
  for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{}   [{} ]\n", i, row_of(v, i * d, d));
}

void print_result(const nn::Attention& a, const Tensor& context, const char* scores_title) {
  if (a.last_scores().defined()) print_table(scores_title, a.last_scores());
  print_table("weights = masked_softmax(energies)   (* = padding: weight 0; rows sum to 1)", a.last_weights());
  print_context(context);
}

// The additive demo's parameters, set by hand (small integers found by a search) so that the toy
// input shows what docs/learn.md says: q0 picks k0 and k2, q1 picks k1. Random parameters (an
// untrained model) pick nothing in particular.
void set_additive_parameters(nn::AdditiveAttention& a) {
  a.w_q.weight.copy_(tensor({-2, 2, 1, 2, 1, 1, -2, 1, 2, 1, 2, -1}, {kHidden, kD}));
  a.w_k.weight.copy_(tensor({-1, 0, -1, -1, 2, 1, 2, 2, 1, -1, 1, -1}, {kHidden, kD}));
  a.w_v.weight.copy_(tensor({2, 2, 2, -2}, {1, kHidden}));
}

void demo_additive(const Toy& toy) {
  fmt::print("== additive (Bahdanau): e_ij = w_v · tanh(W_q q_i + W_k k_j)   A = {}\n", kHidden);
  nn::AdditiveAttention a({.query_size = kD, .key_size = kD, .hidden_size = kHidden});
  set_additive_parameters(a);
  fmt::print("  parameters set by hand (not --seed) so that q0 picks k0 and k2 and q1 picks k1:\n");
  for (const auto& [name, weight] : {std::pair{"W_q", &a.w_q.weight}, {"W_k", &a.w_k.weight}, {"w_v", &a.w_v.weight}}) {
    std::vector<double> v = weight->to_vector<double>();
    std::string rows;
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i)
      rows += fmt::format("{}{:g}", i == 0 ? "" : i % weight->size(1) == 0 ? "; " : " ", v[i]);
    fmt::print("  {} = [{}]\n", name, rows);
  }
  Tensor projected = a.project_keys(toy.keys);  // (1, K, A), once per batch
  print_vectors("W_k k", "k", projected);
  Tensor context = a.attend_projected(toy.queries, projected, toy.values, toy.lengths);
  print_result(a, context, "energies e = w_v · tanh(W_q q + W_k k)");
}

void demo_dot(const Toy& toy, bool scaled) {
  if (scaled) {
    fmt::print("== scaled_dot: e_ij = q_i · k_j / √d   d = {} (no parameters)\n", kD);
  } else {
    fmt::print("== dot: e_ij = q_i · k_j   (no parameters)\n");
  }
  std::unique_ptr<nn::DotProductAttention> a = scaled ? std::make_unique<nn::ScaledDotProductAttention>()
                                                      : std::make_unique<nn::DotProductAttention>();
  Tensor context = (*a)(toy.queries, toy.keys, toy.values, toy.lengths);
  print_result(*a, context, scaled ? "energies e = q · k / √d" : "energies e = q · k");
}

void demo_hybrid(const Toy& toy) {
  fmt::print("== hybrid: context = ½ (additive + scaled_dot); weights = ½ (w_add + w_dot), exactly\n");
  nn::HybridAttention h({.query_size = kD, .key_size = kD, .hidden_size = kHidden});
  Tensor context = h(toy.queries, toy.keys, toy.values, toy.lengths);
  print_table("additive energies", h.additive.last_scores());
  print_table("additive weights w_add", h.additive.last_weights());
  print_table("scaled-dot energies", h.scaled_dot.last_scores());
  print_table("scaled-dot weights w_dot", h.scaled_dot.last_weights());
  print_table("weights = ½ (w_add + w_dot)", h.last_weights());
  print_context(context);
}

void demo_local(const Toy& toy) {
  fmt::print("== local (Luong local-m): window D = 1 around p_i = i, additive energies\n");
  nn::LocalAttention a({.query_size = kD, .key_size = kD, .hidden_size = kHidden, .window = 1});
  Tensor context = a(toy.queries, toy.keys, toy.values, toy.lengths);
  std::vector<double> p = a.last_positions().to_vector<double>();
  for (int64_t i = 0; i < kQ; ++i)
    fmt::print("  q{}: centre p = {:.2f}, keys [{:.2f}, {:.2f}] ∩ valid keys\n", i, p[i], p[i] - 1, p[i] + 1);
  print_result(a, context, "energies (whole row; the window masks them)");
}

void demo_chunked(const Toy& toy) {
  const int64_t chunk = 2;
  fmt::print("== chunked additive: the same energies, keys visited {} at a time with an online softmax\n", chunk);
  uint64_t seed = default_generator().seed();
  manual_seed(seed);  // the same parameters for both modules
  nn::AdditiveAttention reference({.query_size = kD, .key_size = kD, .hidden_size = kHidden});
  manual_seed(seed);
  nn::ChunkedAdditiveAttention a(
      {.query_size = kD, .key_size = kD, .hidden_size = kHidden, .chunk_size = chunk, .keep_weights = true});
  Tensor energies = a.score(toy.queries, toy.keys);  // (1, Q, K), for the trace only
  std::vector<double> e = energies.to_vector<double>(), v = toy.values.to_vector<double>();
  // The recurrence of chunked_additive_attention, written out with scalars for each query.
  for (int64_t i = 0; i < kQ; ++i) {
    double m = -INFINITY, l = 0, acc[kDv] = {0, 0};
    fmt::print("  q{}: running max m, normaliser l = Σ exp(e - m), acc = Σ exp(e - m) v\n", i);
    for (int64_t start = 0; start < kK; start += chunk) {
      double m_new = m;
      for (int64_t j = start; j < std::min(kK, start + chunk); ++j)
        if (j < kValid) m_new = std::max(m_new, e[i * kK + j]);
      double alpha = std::isinf(m) ? 0.0 : std::exp(m - m_new);
      l *= alpha;
      for (double& x : acc) x *= alpha;
      for (int64_t j = start; j < std::min(kK, start + chunk); ++j) {
        if (j >= kValid) continue;  // masked: exp(-inf) = 0
        double p = std::exp(e[i * kK + j] - m_new);
        l += p;
        for (int64_t d = 0; d < kDv; ++d) acc[d] += p * v[j * kDv + d];
      }
      m = m_new;
      fmt::print("      keys {}..{}: α = exp(m_old - m) = {:.4f}  m = {:.4f}  l = {:.4f}  acc = [{:.4f} {:.4f}]"
                 "  acc / l = [{:.4f} {:.4f}]\n",
                 start, std::min(kK, start + chunk) - 1, alpha, m, l, acc[0], acc[1], acc[0] / l, acc[1] / l);
    }
  }
  Tensor context = a(toy.queries, toy.keys, toy.values, toy.lengths);
  print_result(a, context, "energies (rebuilt chunk by chunk for this table)");
  Tensor expected = reference(toy.queries, toy.keys, toy.values, toy.lengths);
  double diff = max(abs(sub(context, expected))).item();
  fmt::print("max |chunked - unchunked additive| = {:.1e}  (exact up to rounding)\n", diff);
  fmt::print("averaging per-chunk contexts instead would give:");
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < kValid; start += chunk) {
    int64_t n = std::min(chunk, kValid - start);
    nn::AdditiveAttention& r = reference;
    parts.push_back(r(toy.queries, toy.keys.narrow(1, start, n), toy.values.narrow(1, start, n)));
  }
  Tensor averaged = mul(parts[0], 0.0);
  for (const Tensor& part : parts) averaged = add(averaged, mul(part, 1.0 / static_cast<double>(parts.size())));
  std::vector<double> avg = averaged.to_vector<double>();
  for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{} [{} ]", i, row_of(avg, i * kDv, kDv));
  fmt::print("   (wrong: each chunk is normalised on its own)\n");
  // The counterexample of docs/attention.md: energies [10, 0 | 0, 0], values [1, 0 | 0, 0].
  double z1 = std::exp(10.0) + 1.0, z2 = 2.0;
  fmt::print("sharper energies [10, 0 | 0, 0] with values [1, 0 | 0, 0]: attention = {:.5f}, "
             "average of the two chunks = ½ ({:.5f} + 0) = {:.5f}\n",
             std::exp(10.0) / (z1 + z2), std::exp(10.0) / z1, 0.5 * std::exp(10.0) / z1);
}

void demo_multihead(const Toy& toy) {
  fmt::print("== multihead: E = {}, h = 1 head of d = {} (torch.nn.MultiheadAttention layout)\n", kD, kD);
  nn::MultiHeadAttention a({.embed_dim = kD, .num_heads = 1, .vdim = kDv});
  Tensor context = a(toy.queries, toy.keys, toy.values, toy.lengths);
  print_table("energies (q W_q + b_q) · (k W_k + b_k) / √d", a.last_scores());
  print_table("weights (averaged over heads)", a.last_weights());
  std::vector<double> c = context.to_vector<double>();
  fmt::print("output = out_proj(weights · (v W_v + b_v))   (B, Q, E = {})\n", kD);
  for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{}   [{} ]\n", i, row_of(c, i * kD, kD));
}

}  // namespace
}  // namespace seqgrad::tools

int attention_demo_main(int argc, char** argv) {
  using namespace seqgrad;
  tools::Args a("attention demo",
                "Print each attention kind's energies, weights and contexts for a tiny fixed toy input "
                "(docs/attention.md has the formulas).");
  a.option("attention", "list", "comma-separated kinds: additive, dot, scaled_dot, hybrid, local, chunked, multihead; "
           "or all", "all")
      .deprecated_alias("kind", "attention")
      .option("seed", "n", "random seed of the parameters of hybrid, local, chunked and multihead (the input and "
              "the additive demo's parameters are fixed)", "0")
      .option("threads", "n", "threads (default: all cores)");
  if (!a.parse(argc, argv)) return 0;
  if (a.has("threads")) set_num_threads(a.get_threads());
  const std::vector<std::string> kinds = {"additive", "dot", "scaled_dot", "hybrid", "local", "chunked", "multihead"};
  std::set<std::string> chosen;  // the demos run in `kinds`' order, each once
  for (size_t start = 0, end = 0; end != std::string::npos; start = end + 1) {
    end = a.get("attention").find(',', start);
    const std::string kind = a.get("attention").substr(start, end == std::string::npos ? end : end - start);
    SG_CHECK_USAGE(kind == "all" || std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
                   "attention demo: unknown --attention kind '{}'; choose from additive, dot, scaled_dot, hybrid, "
                   "local, chunked, multihead, all", kind);
    if (kind == "all") chosen.insert(kinds.begin(), kinds.end());
    else chosen.insert(kind);
  }
  uint64_t seed = static_cast<uint64_t>(a.get_int("seed"));
  NoGradGuard no_grad;
  tools::Toy toy;
  fmt::print("toy input: B = 1, Q = {} queries, K = {} keys (valid length {}: k4 is padding), Dq = Dk = {}, Dv = {}\n",
             tools::kQ, tools::kK, tools::kValid, tools::kD, tools::kDv);
  tools::print_vectors("queries", "q", toy.queries);
  tools::print_vectors("keys", "k", toy.keys);
  tools::print_vectors("values", "v", toy.values);
  for (const std::string& k : kinds) {
    if (!chosen.count(k)) continue;
    manual_seed(seed);
    fmt::print("\n");
    if (k == "additive") tools::demo_additive(toy);
    if (k == "dot") tools::demo_dot(toy, false);
    if (k == "scaled_dot") tools::demo_dot(toy, true);
    if (k == "hybrid") tools::demo_hybrid(toy);
    if (k == "local") tools::demo_local(toy);
    if (k == "chunked") tools::demo_chunked(toy);
    if (k == "multihead") tools::demo_multihead(toy);
  }
  return 0;
}
