// Alignments and attention diagnostics (models/seq2seq/alignment.h) on attention rows written by
// hand, so every pair, merged weight and diagnostic below is derived in a comment.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/seq2seq/alignment.h"

using namespace seqgrad;
using namespace seqgrad::models;

namespace {

Hypothesis with_attention(std::vector<std::vector<float>> rows, bool finished = true) {
  Hypothesis h;
  h.attention = std::move(rows);
  h.finished = finished;
  return h;
}

// The rows of a reversal of n tokens: output t puts `peak` on source n - 1 - t and spreads the
// rest over the other n columns (the source's <eos> included); the <eos> row looks at <eos>.
std::vector<std::vector<float>> reversal_rows(int n, float peak) {
  std::vector<std::vector<float>> rows;
  for (int t = 0; t <= n; ++t) {
    const int focus = t < n ? n - 1 - t : n;
    std::vector<float> row(n + 1, (1 - peak) / static_cast<float>(n));
    row[focus] = peak;
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::string> labels(int n, const std::string& prefix) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace

TEST_CASE("attention_matrix: the axes are the tokens then <eos>, and the rows must fit them") {
  AttentionMatrix m = attention_matrix({"a", "b"}, {"x"}, with_attention({{0.5f, 0.25f, 0.25f}, {0, 0, 1}}));
  CHECK(m.src == std::vector<std::string>{"a", "b", "<eos>"});
  CHECK(m.tgt == std::vector<std::string>{"x", "<eos>"});
  CHECK(m.src_units() == 2);
  CHECK(m.tgt_units() == 1);
  CHECK(m.at(0, 1) == 0.25f);
  CHECK(m.at(1, 2) == 1.0f);
  // cut at max_len: no <eos> row, every row is an output token
  AttentionMatrix cut = attention_matrix({"a"}, {"x", "y"}, with_attention({{1, 0}, {1, 0}}, false));
  CHECK(cut.tgt == std::vector<std::string>{"x", "y"});
  CHECK(cut.tgt_units() == 2);
  CHECK_THROWS_WITH_AS(attention_matrix({"a"}, {"x", "y"}, with_attention({{1, 0}, {1, 0}})),
                       doctest::Contains("attention_matrix: 2 attention rows for 2 output tokens and <eos>"),
                       ValueError);
  CHECK_THROWS_WITH_AS(attention_matrix({"a", "b"}, {"x"}, with_attention({{1, 0}, {1, 0}})),
                       doctest::Contains("attention row 0 has 2 weights for a source of 2 tokens and <eos>"),
                       ValueError);
}

TEST_CASE("hard_alignment: a reversal of n tokens aligns source i with output n - 1 - i") {
  for (int n : {1, 2, 4, 7}) {
    CAPTURE(n);
    AttentionMatrix m = attention_matrix(labels(n, "s"), labels(n, "t"), with_attention(reversal_rows(n, 0.6f)));
    std::vector<AlignmentPoint> expected;
    for (int i = 0; i < n; ++i) expected.push_back({i, n - 1 - i});  // sorted by source
    CHECK(hard_alignment(m) == expected);
  }
  AttentionMatrix four = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(reversal_rows(4, 0.6f)));
  CHECK(pharaoh(hard_alignment(four)) == "0-3 1-2 2-1 3-0");
}

TEST_CASE("hard_alignment: the <eos> row and column are left out, ties go to the first source token") {
  // Output 0 looks most at the source's <eos> (0.5), then at c (0.3): aligned to c. Output 1 ties
  // a and b (0.4 each): aligned to a. The <eos> row gets no pair. Pairs are source-target: 2-0, 0-1.
  AttentionMatrix m = attention_matrix({"a", "b", "c"}, {"x", "y"},
                                       with_attention({{0.1f, 0.1f, 0.3f, 0.5f}, {0.4f, 0.4f, 0.1f, 0.1f},
                                                       {0.1f, 0.1f, 0.1f, 0.7f}}));
  CHECK(hard_alignment(m) == std::vector<AlignmentPoint>{{.src = 0, .tgt = 1}, {.src = 2, .tgt = 0}});
  CHECK(pharaoh(hard_alignment(m)) == "0-1 2-0");
  // an unfinished hypothesis: its last row is a token and is aligned
  AttentionMatrix cut = attention_matrix({"a", "b"}, {"x"}, with_attention({{0.1f, 0.8f, 0.1f}}, false));
  CHECK(pharaoh(hard_alignment(cut)) == "1-0");
  CHECK(pharaoh({}) == "");
}

TEST_CASE("alignment_agreement: the share of output units aligned to the same source unit") {
  // The reversal of 4 tokens aligns 0-3 1-2 2-1 3-0. The other attention puts 0.7 on the diagonal
  // for outputs 0 and 1 (0-0, 1-1), and follows the reversal for 2 and 3 (1-2, 0-3): outputs 2
  // and 3 agree, 0 and 1 do not, 2 of 4. The <eos> rows (both on <eos>) do not count.
  std::vector<std::vector<float>> rows = reversal_rows(4, 0.6f);
  const AttentionMatrix reversal = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(rows));
  rows[0] = {0.7f, 0.1f, 0.1f, 0.05f, 0.05f};
  rows[1] = {0.1f, 0.7f, 0.1f, 0.05f, 0.05f};
  const AttentionMatrix half = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(rows));
  CHECK(*alignment_agreement(reversal, half) == doctest::Approx(0.5));
  CHECK(*alignment_agreement(half, reversal) == doctest::Approx(0.5));
  CHECK(*alignment_agreement(reversal, reversal) == doctest::Approx(1.0));
  // nothing to align: an output of <eos> alone
  const AttentionMatrix empty = attention_matrix({"a"}, {}, with_attention({{0.4f, 0.6f}}));
  CHECK_FALSE(alignment_agreement(empty, empty).has_value());
  CHECK_THROWS_WITH_AS(alignment_agreement(reversal, empty), doctest::Contains("other axes (5 x 5 and 1 x 2 units)"),
                       ValueError);
}

TEST_CASE("attention_overlap: the mean over rows of the weight both put on each unit") {
  // Row "x": min(0.5, 0.25) + min(0.25, 0.75) + min(0.25, 0) = 0.25 + 0.25 + 0 = 0.5. Row <eos>:
  // min(0, 0.25) + min(0, 0) + min(1, 0.75) = 0.75. Their mean: (0.5 + 0.75) / 2 = 0.625. The hard
  // alignments differ (x on "a" against x on "b"), so alignment_agreement gives 0 for the same rows.
  const AttentionMatrix a = attention_matrix({"a", "b"}, {"x"}, with_attention({{0.5f, 0.25f, 0.25f}, {0, 0, 1}}));
  const AttentionMatrix b = attention_matrix({"a", "b"}, {"x"}, with_attention({{0.25f, 0.75f, 0}, {0.25f, 0, 0.75f}}));
  CHECK(*attention_overlap(a, b) == doctest::Approx(0.625).epsilon(1e-12));
  CHECK(*attention_overlap(b, a) == doctest::Approx(0.625).epsilon(1e-12));
  CHECK(*alignment_agreement(a, b) == 0.0);
  CHECK(*attention_overlap(a, a) == doctest::Approx(1.0).epsilon(1e-12));  // each row sums to 1
  // rows on disjoint units share nothing; a row cut at max_len (no <eos> row) counts as any other
  const AttentionMatrix left = attention_matrix({"a"}, {"x"}, with_attention({{1, 0}}, false));
  const AttentionMatrix right = attention_matrix({"a"}, {"x"}, with_attention({{0, 1}}, false));
  CHECK(*attention_overlap(left, right) == 0.0);
  // the reversal of 4 tokens (0.6 on its unit, 0.1 on each other) against the same rows with 0.7 on
  // the diagonal for outputs 0 and 1: each of those two rows shares 0.1 + 0.1 + 0.1 + 0.05 + 0.05 =
  // 0.4 (row 0: min(0.1, 0.7), min(0.1, 0.1), min(0.1, 0.1), min(0.6, 0.05), min(0.1, 0.05)), the
  // other three rows 1, so (2 x 0.4 + 3) / 5 = 0.76
  std::vector<std::vector<float>> rows = reversal_rows(4, 0.6f);
  const AttentionMatrix reversal = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(rows));
  rows[0] = {0.7f, 0.1f, 0.1f, 0.05f, 0.05f};
  rows[1] = {0.1f, 0.7f, 0.1f, 0.05f, 0.05f};
  const AttentionMatrix half = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(rows));
  CHECK(*attention_overlap(reversal, half) == doctest::Approx(0.76).epsilon(1e-6));
  const AttentionMatrix empty = attention_matrix({"a"}, {}, with_attention({}, false));
  CHECK_FALSE(attention_overlap(empty, empty).has_value());
  CHECK_THROWS_WITH_AS(attention_overlap(reversal, a), doctest::Contains("other axes (5 x 5 and 2 x 3 units)"),
                       ValueError);
}

TEST_CASE("soft_alignment_text: Marian's rows, every row and column, 4 decimals") {
  AttentionMatrix m = attention_matrix({"a"}, {"x"}, with_attention({{0.75f, 0.25f}, {0.125f, 0.875f}}));
  CHECK(soft_alignment_text(m) == "0.7500,0.2500 0.1250,0.8750");
}

TEST_CASE("merged_into_words: a word's source columns summed, its output rows averaged") {
  // source pieces ▁ein ▁Hund e <eos> -> words ein Hunde <eos>; output ▁a ▁do g <eos> -> a dog <eos>
  //   piece rows             word rows (columns summed, then the rows of "dog" averaged)
  //   ▁a   .7 .1 .1 .1       a      .7  .2  .1
  //   ▁do  .1 .5 .2 .2       dog    mean(.1 .7 .2, .3 .5 .2) = .2 .6 .2
  //   g    .3 .1 .4 .2
  //   eos  0  .1 .1 .8       <eos>  0   .2  .8
  const std::vector<std::string> src = {"\u2581ein", "\u2581Hund", "e"}, tgt = {"\u2581a", "\u2581do", "g"};
  Hypothesis h = with_attention({{.7f, .1f, .1f, .1f}, {.1f, .5f, .2f, .2f}, {.3f, .1f, .4f, .2f}, {0, .1f, .1f, .8f}});
  AttentionMatrix pieces = attention_matrix(src, tgt, h);
  AttentionMatrix words = merged_into_words(pieces);
  CHECK(words.src == std::vector<std::string>{"ein", "Hunde", "<eos>"});
  CHECK(words.tgt == std::vector<std::string>{"a", "dog", "<eos>"});
  CHECK(words.finished);
  const std::vector<float> expected = {.7f, .2f, .1f, .2f, .6f, .2f, 0, .2f, .8f};
  REQUIRE(words.weights.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(words.weights[i] == doctest::Approx(expected[i]).epsilon(1e-6));
  // pieces: ▁a -> ▁ein, ▁do -> ▁Hund (.5), g -> e (.4); words: a -> ein, dog -> Hunde
  CHECK(pharaoh(hard_alignment(pieces)) == "0-0 1-1 2-2");
  CHECK(pharaoh(hard_alignment(words)) == "0-0 1-1");
  // word-level tokens come back unchanged
  AttentionMatrix plain = attention_matrix({"a", "b"}, {"x"}, with_attention({{.5f, .3f, .2f}, {0, 0, 1}}));
  CHECK(merged_into_words(plain).weights == plain.weights);
}

TEST_CASE("attention_diagnostics: entropy, coverage and the distance from the diagonal") {
  SUBCASE("a uniform row has entropy ln S, a one-hot row 0") {
    // S = 4 columns (3 tokens and <eos>): the first row is uniform, the <eos> row one-hot
    AttentionMatrix m = attention_matrix({"a", "b", "c"}, {"x"},
                                         with_attention({{.25f, .25f, .25f, .25f}, {0, 0, 0, 1}}));
    AttentionDiagnostics d = attention_diagnostics(m);
    REQUIRE(d.entropy.size() == 2);
    CHECK(d.entropy[0] == doctest::Approx(std::log(4.0)).epsilon(1e-6));
    CHECK(d.entropy[1] == 0.0);
    CHECK(d.mean_entropy == doctest::Approx(std::log(4.0) / 2).epsilon(1e-6));
    CHECK(d.coverage == std::vector<double>{.25, .25, .25, 1.25});
    // the uniform row's weighted position is the middle, ½; q_0 = ½ for one output unit: 0
    REQUIRE(d.diagonal_distance);
    CHECK(*d.diagonal_distance == doctest::Approx(0.0));
  }
  SUBCASE("identity and reversal") {
    // identity n x n: every row's position (t + ½)/n is its own q_t: 0. Reversal: row t at
    // (n - 1 - t + ½)/n, so |n - 1 - 2t|/n; n = 4: (3 + 1 + 1 + 3) / 4 / 4 = 0.5.
    std::vector<std::vector<float>> identity;
    for (int t = 0; t <= 4; ++t) {
      identity.push_back(std::vector<float>(5, 0.0f));
      identity.back()[t] = 1;
    }
    AttentionMatrix same = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(identity));
    AttentionMatrix reversed = attention_matrix(labels(4, "s"), labels(4, "t"), with_attention(reversal_rows(4, 1.0f)));
    CHECK(*attention_diagnostics(same).diagonal_distance == doctest::Approx(0.0));
    CHECK(*attention_diagnostics(reversed).diagonal_distance == doctest::Approx(0.5));
    CHECK(attention_diagnostics(reversed).mean_entropy == 0.0);
    CHECK(attention_diagnostics(reversed).coverage == std::vector<double>{1, 1, 1, 1, 1});
    // n = 3: (2 + 0 + 2) / 3 / 3 = 4/9
    AttentionMatrix three = attention_matrix(labels(3, "s"), labels(3, "t"), with_attention(reversal_rows(3, 1.0f)));
    CHECK(*attention_diagnostics(three).diagonal_distance == doctest::Approx(4.0 / 9));
  }
  SUBCASE("words, with weight on <eos> renormalised away") {
    // The word matrix of merged_into_words above: rows a (.7 .2 | .1) and dog (.2 .6 | .2).
    //   entropy(a) = -(.7 ln .7 + .2 ln .2 + .1 ln .1) = .249672 + .321888 + .230259 = .801819
    //   coverage: ein .7 + .2 + 0 = .9, Hunde .2 + .6 + .2 = 1, <eos> .1 + .2 + .8 = 1.1
    //   S = T = 2, p = (¼, ¾): a: (.7 ¼ + .2 ¾)/.9 = .361111, q = ¼ -> .111111;
    //   dog: (.2 ¼ + .6 ¾)/.8 = .625, q = ¾ -> .125; mean .118056
    AttentionMatrix words = attention_matrix({"ein", "Hunde"}, {"a", "dog"},
                                             with_attention({{.7f, .2f, .1f}, {.2f, .6f, .2f}, {0, .2f, .8f}}));
    AttentionDiagnostics d = attention_diagnostics(words);
    CHECK(d.entropy[0] == doctest::Approx(0.801819).epsilon(1e-5));
    REQUIRE(d.coverage.size() == 3);
    CHECK(d.coverage[0] == doctest::Approx(0.9).epsilon(1e-6));
    CHECK(d.coverage[1] == doctest::Approx(1.0).epsilon(1e-6));
    CHECK(d.coverage[2] == doctest::Approx(1.1).epsilon(1e-6));
    CHECK(*d.diagonal_distance == doctest::Approx(0.118056).epsilon(1e-5));
  }
  SUBCASE("an empty output has no diagonal distance") {
    AttentionMatrix empty = attention_matrix({"a"}, {}, with_attention({{.3f, .7f}}));
    AttentionDiagnostics d = attention_diagnostics(empty);
    CHECK_FALSE(d.diagonal_distance);
    CHECK(d.entropy.size() == 1);
    CHECK(hard_alignment(empty).empty());
  }
}
