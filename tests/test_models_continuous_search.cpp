// Continuous batching (models/seq2seq/continuous_search.h): sentences that join a running search at
// different steps, greedy beside beam, each get what decoding it alone gives; the GRU (float32 and
// int8) and the Transformer (whose rows join only rows at their position, in cohorts).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "models/seq2seq/continuous_search.h"
#include "models/seq2seq/transformer.h"
#include "nn/quantized.h"
#include "tests/padded_source.h"

using namespace seqgrad;
using namespace seqgrad::models;
using seqgrad::testing::Source;
using seqgrad::testing::source;

namespace {

Seq2SeqConfig gru_config(AttentionKind attention) {
  Seq2SeqConfig c;
  c.src_vocab = c.tgt_vocab = 13;
  c.embed_size = c.hidden_size = 8, c.num_layers = 2, c.dropout = 0, c.attention = attention;
  return c;
}

Seq2SeqConfig transformer_config() {
  Seq2SeqConfig c;
  c.architecture = Architecture::transformer;
  c.src_vocab = c.tgt_vocab = 13;
  c.embed_size = c.hidden_size = 16, c.num_layers = 2, c.heads = 2, c.ffn_size = 24, c.dropout = 0;
  return c;
}

// What decoding the sentence alone gives: greedy_decode's hypothesis, or beam_search's n-best.
std::vector<Hypothesis> alone(TranslationModel& model, const std::vector<int64_t>& ids, const DecodeOptions& options) {
  const Source one = source({ids});
  if (options.beam_size == 1) return greedy_decode(model, one.src, one.lengths, options);
  return beam_search(model, one.src, one.lengths, options).front();
}

// A sentence, its options, and the step before which it joins the search.
struct Arrival {
  int64_t step;
  std::vector<int64_t> ids;
  DecodeOptions options;
};

// Long and short sentences joining at steps 0, 0, 2, 3 and 5: greedy and beam, with max_len,
// min_len, n-best, penalties and alternatives differing (every sentence ends before max_len 12
// or is cut there).
std::vector<Arrival> staggered() {
  return {{0, {4, 5, 6, 7, 8, 9, 10, 11, 12, 4, 5}, {.max_len = 12}},
          {0, {6, 7}, {.max_len = 12, .beam_size = 3, .nbest = 2}},
          {2, {9, 9, 4}, {.max_len = 6, .min_len = 3}},
          {3, {12, 11, 10, 9, 8, 7, 6}, {.max_len = 12, .beam_size = 2, .length_penalty = 0.6,
                                         .length_penalty_kind = LengthPenalty::gnmt, .coverage_penalty = 0.2,
                                         .top_alternatives = 2}},
          {5, {5}, {.max_len = 12, .top_alternatives = 3}}};
}

// Runs the arrivals through one ContinuousSearch; returns each one's hypotheses, in arrival order.
std::vector<std::vector<Hypothesis>> run_continuous(TranslationModel& model, const std::vector<Arrival>& arrivals,
                                                    int64_t& most_sentences) {
  ContinuousSearch search(model);
  std::map<int64_t, size_t> arrival_of;  // the search's id -> the arrival
  std::vector<std::vector<Hypothesis>> out(arrivals.size());
  size_t next = 0;
  most_sentences = 0;
  for (int64_t step = 0; next < arrivals.size() || !search.empty(); ++step) {
    for (; next < arrivals.size() && arrivals[next].step == step; ++next)
      arrival_of[search.add({arrivals[next].ids}, arrivals[next].options).front()] = next;
    most_sentences = std::max(most_sentences, search.sentences());
    for (ContinuousSearch::Finished& f : search.step()) out[arrival_of.at(f.id)] = std::move(f.hyps);
    REQUIRE(step < 100);
  }
  return out;
}

// Every field of two hypotheses: equal bit for bit with tolerance 0, else the scores within it.
void check_same(const Hypothesis& got, const Hypothesis& want, double tolerance) {
  CHECK(got.tokens == want.tokens);
  CHECK(got.finished == want.finished);
  REQUIRE(got.token_log_probs.size() == want.token_log_probs.size());
  REQUIRE(got.attention.size() == want.attention.size());
  REQUIRE(got.alternatives.size() == want.alternatives.size());
  if (tolerance == 0) {
    CHECK(got.score == want.score);
    CHECK(got.log_prob == want.log_prob);
    CHECK(got.token_log_probs == want.token_log_probs);
    CHECK(got.attention == want.attention);  // the padding columns cut: the sentence's length each
    CHECK(got.energies == want.energies);
  } else {
    CHECK(got.score == doctest::Approx(want.score).epsilon(tolerance));
    for (size_t t = 0; t < want.token_log_probs.size(); ++t) {
      CHECK(got.token_log_probs[t] == doctest::Approx(want.token_log_probs[t]).epsilon(tolerance));
      REQUIRE(got.attention[t].size() == want.attention[t].size());
      for (size_t j = 0; j < want.attention[t].size(); ++j)
        CHECK(got.attention[t][j] == doctest::Approx(want.attention[t][j]).epsilon(tolerance));
    }
  }
  for (size_t t = 0; t < want.alternatives.size(); ++t) {
    REQUIRE(got.alternatives[t].size() == want.alternatives[t].size());
    for (size_t j = 0; j < want.alternatives[t].size(); ++j) CHECK(got.alternatives[t][j].token == want.alternatives[t][j].token);
  }
}

// The staggered arrivals through a continuous search, each checked against decoding it alone.
void check_staggered(TranslationModel& model, double tolerance) {
  model.eval();
  const std::vector<Arrival> arrivals = staggered();
  int64_t most_sentences = 0;
  const std::vector<std::vector<Hypothesis>> joined = run_continuous(model, arrivals, most_sentences);
  CHECK(most_sentences >= 3);  // sentences that joined late were decoded beside earlier ones
  std::set<std::vector<int64_t>> outputs;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    CAPTURE(i);
    const std::vector<Hypothesis> want = alone(model, arrivals[i].ids, arrivals[i].options);
    REQUIRE(joined[i].size() == want.size());
    CHECK(want.size() == static_cast<size_t>(arrivals[i].options.nbest));
    for (size_t h = 0; h < want.size(); ++h) check_same(joined[i][h], want[h], tolerance);
    outputs.insert(want.front().tokens);
  }
  CHECK(outputs.size() >= 3);  // not a degenerate model that says the same to every sentence
}

}  // namespace

TEST_CASE("continuous search: sentences joining a running GRU search get their translations alone (float32)") {
  for (AttentionKind kind : {AttentionKind::additive, AttentionKind::scaled_dot, AttentionKind::hybrid}) {
    CAPTURE(static_cast<int>(kind));
    manual_seed(11);
    auto model = make_translation_model(gru_config(kind));
    // float32 products take another kernel by their row count (ops/cpu/gemm.cpp), so the scores
    // agree to float rounding; padding or another sentence leaking in would move them by far more
    check_staggered(*model, 1e-5);
  }
}

TEST_CASE("continuous search: an int8 GRU gives every joining sentence its translation alone, bit for bit") {
  manual_seed(12);
  auto model = make_translation_model(gru_config(AttentionKind::additive));
  nn::quantize_dynamic(*model);  // each activation row quantized with its own range
  check_staggered(*model, 0);
}

TEST_CASE("continuous search: Transformer sentences joining at other steps decode in cohorts, as alone") {
  manual_seed(13);
  auto model = make_translation_model(transformer_config());
  check_staggered(*model, 1e-5);
}

TEST_CASE("continuous search: the Transformer's rows join only rows at their position; the GRU's any") {
  manual_seed(14);
  for (const Seq2SeqConfig& config : {transformer_config(), gru_config(AttentionKind::additive)}) {
    auto model = make_translation_model(config);
    model->eval();
    NoGradGuard no_grad;
    const Source a = source({{4, 5, 6}}), b = source({{7, 8, 9, 10, 11}});
    auto running = model->start(a.src, a.lengths);
    model->step(*running, full({1}, 1.0, {.dtype = DType::i64}));
    auto joining = model->start(b.src, b.lengths);
    if (config.architecture == Architecture::transformer) {
      CHECK_FALSE(model->can_merge(*running, *joining));
      CHECK_THROWS_WITH_AS(model->merge(*running, std::move(*joining)),
                           doctest::Contains("transformer: rows that decoded 0 positions cannot join rows that decoded 1"),
                           Error);
    } else {
      REQUIRE(model->can_merge(*running, *joining));
      model->merge(*running, std::move(*joining));
      // one row each, the second's memory 5 positions wide and the first's padded to it (masked)
      TranslationModel::StepOutput out = model->step(*running, full({2}, 4.0, {.dtype = DType::i64}));
      CHECK(out.logits.shape() == Shape{2, 13});
      CHECK(out.weights.shape() == Shape{2, 5});
      const std::vector<float> w = out.weights.to_vector<float>();
      CHECK(w[3] == 0.0F);  // the first sentence's padding gets no attention
      CHECK(w[4] == 0.0F);
      CHECK(w[0] + w[1] + w[2] == doctest::Approx(1.0));
      // the 5-token sentence leaves; a 2-token one joins: the memory is cut to the 3 positions used
      model->reorder(*running, {0});
      const Source c = source({{8, 9}});
      model->merge(*running, std::move(*model->start(c.src, c.lengths)));
      out = model->step(*running, full({2}, 5.0, {.dtype = DType::i64}));
      CHECK(out.weights.shape() == Shape{2, 3});
      CHECK(out.weights.to_vector<float>()[5] == 0.0F);  // the new sentence's padding
    }
  }
}

TEST_CASE("continuous search: what it refuses names the field") {
  manual_seed(15);
  auto model = make_translation_model(gru_config(AttentionKind::additive));
  ContinuousSearch search(*model);
  DecodeOptions sampled{.sampling = SamplingOptions{.top_k = 5}};
  CHECK_THROWS_WITH_AS(search.add({{4, 5}}, sampled), doctest::Contains("sampling is not offered"), ValueError);
  CHECK_THROWS_WITH_AS(search.add({{4, 5}}, {.beam_size = 0}), doctest::Contains("beam_size 0 must be >= 1"),
                       ValueError);
  CHECK_THROWS_WITH_AS(search.add({{4, 5}, {}}, {}), doctest::Contains("sentence 1 has no tokens"), ValueError);
  CHECK(search.empty());
  CHECK(search.step().empty());
}
