// Continuous batching (models/seq2seq/continuous_search.h): sentences that join a running search at
// different steps, greedy beside beam, each get what decoding it alone gives; the GRU (float32 and
// int8) and the Transformer (whose rows join only rows at their position, in cohorts).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <utility>
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

namespace {

// A GRU translator whose searches fail at their third step when their source holds the marker
// token: a step that runs out of memory, or reaches a position beyond a learned table, for some
// sentences only. Marked rows never join unmarked ones (a cohort of their own, as a Transformer's
// rows at another position).
class FailingAtStep : public TranslationModel {
 public:
  static constexpr int64_t kMarker = 12;
  explicit FailingAtStep(TranslationModel& inner) : TranslationModel("FailingAtStep"), inner_(inner) {}
  Tensor operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const override {
    return inner_(src, src_lengths, tgt_in);
  }
  std::unique_ptr<SearchState> start(const Tensor& src, const Tensor& src_lengths) const override {
    auto s = std::make_unique<State>();
    s->inner = inner_.start(src, src_lengths);
    const std::vector<int64_t> ids = src.to_vector<int64_t>();
    s->marked = std::find(ids.begin(), ids.end(), kMarker) != ids.end();
    return s;
  }
  StepOutput step(SearchState& state, const Tensor& y_prev) const override {
    auto& s = dynamic_cast<State&>(state);
    if (s.marked && ++s.steps == 3) throw std::bad_alloc();
    return inner_.step(*s.inner, y_prev);
  }
  void reorder(SearchState& state, const std::vector<int64_t>& rows) const override {
    inner_.reorder(*dynamic_cast<State&>(state).inner, rows);
  }
  void merge(SearchState& into, SearchState&& from) const override {
    inner_.merge(*dynamic_cast<State&>(into).inner, std::move(*dynamic_cast<State&>(from).inner));
  }
  bool can_merge(const SearchState& into, const SearchState& from) const override {
    const auto &a = dynamic_cast<const State&>(into), &b = dynamic_cast<const State&>(from);
    return a.marked == b.marked && inner_.can_merge(*a.inner, *b.inner);
  }
  int64_t target_vocab() const override { return inner_.target_vocab(); }
  std::string architecture() const override { return inner_.architecture(); }

 private:
  struct State : SearchState {
    std::unique_ptr<SearchState> inner;
    bool marked = false;
    int64_t steps = 0;
  };
  TranslationModel& inner_;
};

}  // namespace

TEST_CASE("continuous search: a step that fails fails its cohort's sentences only; the others decode as alone") {
  manual_seed(16);
  auto inner = make_translation_model(gru_config(AttentionKind::additive));
  nn::quantize_dynamic(*inner);  // bit for bit, so that "as alone" is exact
  inner->eval();
  FailingAtStep model(*inner);
  ContinuousSearch search(model);
  const DecodeOptions greedy{.max_len = 12}, beam{.max_len = 12, .beam_size = 3, .nbest = 2};
  const std::vector<int64_t> good_ids = search.add({{4, 5, 6}, {9, 9, 4, 7}}, beam);
  const std::vector<int64_t> marked = search.add({{4, FailingAtStep::kMarker}, {5, 6, FailingAtStep::kMarker}}, greedy);
  const std::vector<int64_t> late = search.add({{7, 8}}, greedy);
  std::map<int64_t, ContinuousSearch::Finished> finished;
  for (int step = 0; !search.empty(); ++step) {
    REQUIRE(step < 100);
    for (ContinuousSearch::Finished& f : search.step()) finished.emplace(f.id, std::move(f));
  }
  REQUIRE(finished.size() == 5);
  for (int64_t id : marked) {
    CAPTURE(id);
    REQUIRE(finished.at(id).error);
    CHECK(finished.at(id).hyps.empty());
    CHECK_THROWS_AS(std::rethrow_exception(finished.at(id).error), std::bad_alloc);
  }
  const std::vector<std::pair<int64_t, std::vector<Hypothesis>>> good = {
      {good_ids[0], alone(*inner, {4, 5, 6}, beam)}, {good_ids[1], alone(*inner, {9, 9, 4, 7}, beam)},
      {late[0], alone(*inner, {7, 8}, greedy)}};
  for (const auto& [id, want] : good) {
    CAPTURE(id);
    const ContinuousSearch::Finished& f = finished.at(id);
    CHECK_FALSE(f.error);
    REQUIRE(f.hyps.size() == want.size());
    for (size_t h = 0; h < want.size(); ++h) check_same(f.hyps[h], want[h], 0);
  }
}

TEST_CASE("continuous search: record_trees gives each beam sentence beam_search's tree") {
  manual_seed(17);
  auto model = make_translation_model(gru_config(AttentionKind::additive));
  nn::quantize_dynamic(*model);
  model->eval();
  ContinuousSearch search(*model);
  const DecodeOptions beam{.max_len = 8, .beam_size = 3, .nbest = 2};
  const std::vector<std::vector<int64_t>> sentences = {{4, 5, 6, 7}, {9, 10}};
  std::map<int64_t, ContinuousSearch::Finished> finished;
  const std::vector<int64_t> ids = search.add(sentences, beam, true);
  const int64_t greedy_id = search.add({{6, 7}}, {.max_len = 8}, true).front();
  for (int step = 0; !search.empty(); ++step) {
    REQUIRE(step < 100);
    for (ContinuousSearch::Finished& f : search.step()) finished.emplace(f.id, std::move(f));
  }
  CHECK_FALSE(finished.at(greedy_id).beam_tree);  // greedy has no tree, as translate_batch's explain
  for (size_t i = 0; i < sentences.size(); ++i) {
    CAPTURE(i);
    std::vector<BeamTree> trees;
    const Source one = source({sentences[i]});
    beam_search(*model, one.src, one.lengths, beam, &trees);
    REQUIRE(finished.at(ids[i]).beam_tree);
    const std::vector<BeamNode>& got = finished.at(ids[i]).beam_tree->nodes;
    const std::vector<BeamNode>& want = trees.front().nodes;
    REQUIRE(got.size() == want.size());
    CHECK(got.size() > 3);
    for (size_t n = 0; n < want.size(); ++n) {
      CAPTURE(n);
      CHECK(got[n].parent == want[n].parent);
      CHECK(got[n].step == want[n].step);
      CHECK(got[n].token == want[n].token);
      CHECK(got[n].fate == want[n].fate);
      CHECK(got[n].log_prob == want[n].log_prob);  // int8: bit for bit
      CHECK(got[n].score == want[n].score);
    }
  }
}

TEST_CASE("search_state_bytes: the rows' source memory and decoded state, by architecture") {
  // GRU, H = 8, L = 2, A = 0 (so H): per row (4H + A) = 40 floats per source token and L * H = 16
  // of hidden state: 3 rows of a 5-token source = 3 * (200 + 16) * 4 bytes
  CHECK(search_state_bytes(gru_config(AttentionKind::additive), 3, 5, 10) == 3 * (40 * 5 + 16) * 4);
  Seq2SeqConfig wide = gru_config(AttentionKind::additive);
  wide.attention_size = 20;  // per token 4 * 8 + 20 = 52
  CHECK(search_state_bytes(wide, 1, 5, 10) == (52 * 5 + 16) * 4);
  // Transformer, E = 16, L = 2: keys and values of every layer, 2 * 2 * 16 = 64 floats per source
  // token (cross-attention) and per decoded position (self-attention)
  CHECK(search_state_bytes(transformer_config(), 2, 5, 10) == 2 * 64 * (5 + 10) * 4);
  CHECK(search_state_bytes(transformer_config(), 0, 5, 10) == 0);
}
