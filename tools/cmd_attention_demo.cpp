// `seqgrad attention demo`: every attention kind on one tiny, fixed toy input, printing the
// energies (pre-softmax scores), the weights and the contexts, so the formulas in
// docs/attention.md can be followed number by number. Parameters come from --seed, but for the
// additive and multi-head demos', set by hand (set_additive_parameters, set_multihead_parameters);
// causal self-attention has none.
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
#include "nn/mask.h"
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

// `rows` x kK numbers (row-major) as a table with keys as columns, rows labelled `row_label`0..,
// columns `key_label`0..; padding keys are starred. Where `keep` is given, a cell it masks out
// prints as -inf (the energy the softmax sees there).
void print_grid(const std::string& title, const std::vector<double>& v, int64_t rows, const char* row_label,
                const char* key_label, const std::vector<bool>& keep = {}) {
  fmt::print("{}\n       ", title);
  for (int64_t j = 0; j < kK; ++j) fmt::print(" {:>8}", fmt::format("{}{}{}", key_label, j, j >= kValid ? "*" : ""));
  fmt::print("\n");
  for (int64_t i = 0; i < rows; ++i) {
    std::string cells;
    for (int64_t j = 0; j < kK; ++j)
      cells += keep.empty() || keep[i * kK + j] ? fmt::format(" {:8.4f}", v[i * kK + j]) : fmt::format(" {:>8}", "-inf");
    fmt::print("  {}{}{}  {}\n", row_label, i, i >= kValid && rows == kK ? "*" : " ", cells);
  }
}

// A (1, Q, K) or (Q, K) tensor as a table with keys as columns; padding keys are starred.
void print_table(const std::string& title, const Tensor& t) {
  print_grid(title, t.to_vector<double>(), kQ, "q", "k");
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

// The multi-head demo's parameters, set by hand so that every number can be checked by hand: the
// toy's E = 3 features split into h = 3 heads of d = 1. W_q = W_k = I, so head h compares feature h
// of a query with feature h of each key; W_v sends a value (a, b) to (a, b, a + b), so head 0
// returns the values' first feature, head 1 their second and head 2 their sum; W_o = I and the
// biases are 0, so the output is the three heads' contexts side by side.
void set_multihead_parameters(nn::MultiHeadAttention& a) {
  const Tensor identity = tensor({1, 0, 0, 0, 1, 0, 0, 0, 1}, {kD, kD});
  a.q_proj_weight.copy_(identity);
  a.k_proj_weight.copy_(identity);
  a.v_proj_weight.copy_(tensor({1, 0, 0, 1, 1, 1}, {kD, kDv}));
  a.in_proj_bias.zero_();
  a.out_proj.weight.copy_(identity);
  a.out_proj.bias.zero_();
}

void demo_multihead(const Toy& toy) {
  const int64_t heads = kD;  // d = E / h = 1
  fmt::print("== multihead: E = {}, h = {} heads of d = E / h = 1 (torch.nn.MultiheadAttention layout)\n", kD, heads);
  nn::MultiHeadAttention a({.embed_dim = kD, .num_heads = heads, .vdim = kDv});
  set_multihead_parameters(a);
  fmt::print("  parameters set by hand (not --seed): W_q = W_k = I, so head h scores q_h · k_h (feature h alone);\n"
             "  W_v = [1 0; 0 1; 1 1], so v = (a, b) becomes (a, b, a + b) and head h returns feature h of that;\n"
             "  W_o = I and every bias 0, so the output is the heads' contexts side by side\n");
  Tensor context = a(toy.queries, toy.keys, toy.values, toy.lengths);  // (1, Q, E)
  Tensor head_values = linear(toy.values, a.v_proj_weight, a.in_proj_bias.narrow(0, 2 * kD, kD));  // (1, K, E)
  std::vector<bool> keep(kQ * kK);
  for (int64_t i = 0; i < kQ * kK; ++i) keep[i] = i % kK < kValid;
  for (int64_t h = 0; h < heads; ++h) {
    fmt::print("-- head {}: queries and keys projected to their feature {}, values to (v W_vᵀ)_{}\n", h, h, h);
    print_vectors("values", "v", head_values.narrow(2, h, 1));
    std::vector<double> e = a.last_head_scores().select(1, h).to_vector<double>();  // (Q, K)
    print_grid(fmt::format("head {} energies q·k / √d   (d = 1, so /√d = /1)", h), e, kQ, "q", "k");
    print_grid(fmt::format("head {} masked energies (the padding key is -inf before the softmax)", h), e, kQ, "q",
               "k", keep);
    Tensor w = a.last_head_weights().select(1, h);  // (1, Q, K)
    print_grid(fmt::format("head {} weights = softmax(masked energies)   (rows sum to 1)", h),
               w.to_vector<double>(), kQ, "q", "k");
    std::vector<double> c = matmul(w, head_values.narrow(2, h, 1)).to_vector<double>();  // (1, Q, 1)
    fmt::print("head {} context = weights · values   (B, Q, d = 1)\n", h);
    for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{}   [{} ]\n", i, row_of(c, i, 1));
  }
  print_table("weights averaged over the heads (last_weights(): what a heatmap of the layer shows)",
              a.last_weights());
  std::vector<double> c = context.to_vector<double>();
  fmt::print("output = concat(head 0, head 1, head 2) W_oᵀ + b_o   (B, Q, E = {}; W_o = I: the heads' contexts)\n", kD);
  for (int64_t i = 0; i < kQ; ++i) fmt::print("  q{}   [{} ]\n", i, row_of(c, i * kD, kD));
}

void demo_causal(const Toy& toy) {
  fmt::print("== causal self-attention (the Transformer decoder's): query t sees only the keys j <= t\n");
  fmt::print("  the {} keys as one sequence x0..x{} (x{} is padding: length {}) attend to themselves:\n"
             "  queries = keys = x, values = the toy values (no projections: one head of d = {}, scaled dot)\n",
             kK, kK - 1, kK - 1, kValid, kD);
  Tensor lengths = nn::causal_lengths(toy.lengths, kK);  // (1, K): query t's valid keys
  std::vector<int64_t> len = lengths.to_vector<int64_t>();
  fmt::print("  per-query valid lengths causal_lengths([{}], {}) = [", kValid, kK);
  for (int64_t t = 0; t < kK; ++t) fmt::print("{}{}", t == 0 ? "" : " ", len[t]);
  fmt::print("]: length_t = min(t + 1, {}), so key j is kept iff j < length_t\n", kValid);
  nn::ScaledDotProductAttention a;
  Tensor context = a(toy.keys, toy.keys, toy.values, lengths);  // (1, K, Dv)
  std::vector<double> e = a.last_scores().to_vector<double>();  // (K, K)
  std::vector<bool> keep(kK * kK);
  for (int64_t i = 0; i < kK * kK; ++i) keep[i] = i % kK < len[i / kK];
  print_grid("energies e = x_t · x_j / √d   (every pair, before the mask)", e, kK, "x", "x");
  print_grid("masked energies: the future keys j > t and the padding key are -inf", e, kK, "x", "x", keep);
  print_grid("weights = masked_softmax(energies)   (zero above the diagonal; rows sum to 1)",
             a.last_weights().to_vector<double>(), kK, "x", "x");
  std::vector<double> c = context.to_vector<double>();
  fmt::print("context = weights · values   (B, T, {})\n", kDv);
  for (int64_t t = 0; t < kK; ++t) fmt::print("  x{}{}  [{} ]\n", t, t >= kValid ? "*" : " ", row_of(c, t * kDv, kDv));
  fmt::print("  (x{}* is padding: its row is computed, and the loss ignores it)\n", kK - 1);
  fmt::print("the key/value cache (TransformerDecoderLayer::step): decoding position t, its query attends to the\n"
             "cached keys and values 0..t with no mask at all, and gets the causal row t:\n");
  for (int64_t t = 0; t < kValid; ++t) {
    Tensor step = a(toy.keys.narrow(1, t, 1), toy.keys.narrow(1, 0, t + 1), toy.values.narrow(1, 0, t + 1));
    double diff = max(abs(sub(step, context.narrow(1, t, 1)))).item();
    std::vector<double> s = step.to_vector<double>();
    fmt::print("  step {}: cache x0..x{}  context [{} ]   |step - causal row| = {:.1e}\n", t, t, row_of(s, 0, kDv),
               diff);
  }
}

}  // namespace
}  // namespace seqgrad::tools

int attention_demo_main(int argc, char** argv) {
  using namespace seqgrad;
  tools::Args a("attention demo",
                "Print each attention kind's energies, weights and contexts for a tiny fixed toy input "
                "(docs/attention.md has the formulas).");
  a.option("attention", "list", "comma-separated kinds: additive, dot, scaled_dot, hybrid, local, chunked, multihead, "
           "causal; or all", "all")
      .deprecated_alias("kind", "attention")
      .option("seed", "n", "random seed of the parameters of hybrid, local and chunked (the input and the "
              "additive and multihead demos' parameters are fixed)", "0")
      .option("threads", "n", "threads (default: all cores)");
  if (!a.parse(argc, argv)) return 0;
  if (a.has("threads")) set_num_threads(a.get_threads());
  const std::vector<std::string> kinds = {"additive", "dot",     "scaled_dot", "hybrid",
                                          "local",    "chunked", "multihead",  "causal"};
  std::set<std::string> chosen;  // the demos run in `kinds`' order, each once
  for (size_t start = 0, end = 0; end != std::string::npos; start = end + 1) {
    end = a.get("attention").find(',', start);
    const std::string kind = a.get("attention").substr(start, end == std::string::npos ? end : end - start);
    SG_CHECK_USAGE(kind == "all" || std::find(kinds.begin(), kinds.end(), kind) != kinds.end(),
                   "attention demo: unknown --attention kind '{}'; choose from additive, dot, scaled_dot, hybrid, "
                   "local, chunked, multihead, causal, all", kind);
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
    if (k == "causal") tools::demo_causal(toy);
  }
  return 0;
}
