// Source snippet: "typical problems" of attention maps, and how to spot them:
//   too diagonal     every output step looks at the same-numbered input position, whatever the
//                    content (fine for copying, wrong where the languages reorder words);
//   too diffuse      weights close to uniform: the model has not learned where to look;
//   fixed position   every step looks at one position (often the first token or <eos>).
// Demonstrates three measurements of a map W (T queries × S keys, rows summing to 1), printed for
// maps that attention modules produce, one per problem and one healthy (a reordering):
//   entropy      mean over rows of -Σ_s w log w / log S          (1 = uniform, 0 = one key)
//   diagonality  mean over rows of the mass on keys within 1 of the scaled diagonal s ≈ t (S-1)/(T-1)
//   fixation     the largest column mean: the share of all attention one key receives
// and a diagnosis with thresholds (entropy > 0.9, diagonality > 0.9, fixation > 0.5). Checked:
// each map is diagnosed with its problem only, and the healthy one with none.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;

namespace {

struct Measures {
  double entropy, diagonality, fixation;
};

// w: (T, S), rows summing to 1.
Measures measure(const Tensor& w) {
  int64_t rows = w.size(0), cols = w.size(1);
  Tensor plogp = where(gt(w, 0.0), w * log(clamp(w, 1e-30, 1.0)), zeros_like(w));  // 0 log 0 = 0
  double entropy = mean(-sum(plogp, {1})).item() / std::log(static_cast<double>(cols));
  Tensor t = arange(0, static_cast<double>(rows), 1.0, {.dtype = w.dtype()}).unsqueeze(1);  // (T, 1)
  Tensor s = arange(0, static_cast<double>(cols), 1.0, {.dtype = w.dtype()}).unsqueeze(0);  // (1, S)
  Tensor diagonal = t * (static_cast<double>(cols - 1) / static_cast<double>(std::max<int64_t>(rows - 1, 1)));
  Tensor near = to_dtype(le(abs(s - diagonal), 1.0), w.dtype());  // (T, S) 1 within one key of the diagonal
  double diagonality = mean(sum(w * near, {1})).item();
  double fixation = max(mean(w, {0})).item();
  return {entropy, diagonality, fixation};
}

std::string diagnose(const Measures& m) {
  std::string problems;
  auto add = [&problems](const char* p) { problems += problems.empty() ? p : std::string(", ") + p; };
  if (m.entropy > 0.9) add("too diffuse");
  if (m.diagonality > 0.9) add("too diagonal");
  if (m.fixation > 0.5) add("fixed position");
  return problems.empty() ? "healthy" : problems;
}

// The weights (T, S) of scaled dot-product attention for queries (1, T, D) over keys (1, S, D).
Tensor weights_of(const Tensor& queries, const Tensor& keys) {
  nn::ScaledDotProductAttention attention;
  attention(queries, keys, keys);
  return attention.last_weights().select(0, 0);
}

}  // namespace

int main() {
  manual_seed(0);
  const int64_t n = 8, d = 16;
  Tensor keys = randn({1, n, d});  // one sentence of 8 positions
  std::vector<int64_t> reversed_positions;
  for (int64_t t = n - 1; t >= 0; --t) reversed_positions.push_back(t);
  Tensor reorder = from_vector<int64_t>(reversed_positions, {n});

  Tensor u = randn({1, 1, d});  // one direction that a "bias" key and every query share
  Tensor biased_keys = keys.clone();
  biased_keys.narrow(1, 0, 1).copy_(u * 2.0);
  struct Case {
    const char* name;
    const char* expected;
    Tensor weights;
  };
  std::vector<Case> cases = {
      {"reordering (query t = key S-1-t)", "healthy", weights_of(index_select(keys, 1, reorder), keys)},
      {"self, sharp (query t = 3 key t)", "too diagonal", weights_of(keys * 3.0, keys)},
      {"flat (queries near 0)", "too diffuse", weights_of(keys * 0.02, keys)},
      {"one key dominates (shared u)", "fixed position", weights_of(u * 2.0 + randn({1, n, d}) * 0.3, biased_keys)},
  };
  fmt::print("{:34} {:>8} {:>12} {:>9}  diagnosis\n", "map", "entropy", "diagonality", "fixation");
  for (const Case& c : cases) {
    Measures m = measure(c.weights);
    std::string diagnosis = diagnose(m);
    fmt::print("{:34} {:8.3f} {:12.3f} {:9.3f}  {}\n", c.name, m.entropy, m.diagonality, m.fixation, diagnosis);
    expect(diagnosis == c.expected, fmt::format("{}: diagnosed \"{}\"", c.name, c.expected));
  }
  return examples::exit_code();
}
