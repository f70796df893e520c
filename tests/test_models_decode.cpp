// Decoding: beam search, its length and coverage penalties, min_len, sampling, ensembles, forced
// decoding and alternatives on models whose output distribution is constructed by hand (so the
// expected hypotheses and scores are derived below), and batched decoding against one sentence
// at a time.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/search_step.h"
#include "tests/padded_source.h"

using namespace seqgrad;
using namespace seqgrad::models;
using seqgrad::testing::Source;
using seqgrad::testing::source;

namespace {

// Target ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 <unk>, 4 "a", 5 "b".
constexpr int64_t kEos = 2, kA = 4, kB = 5;

Seq2SeqConfig tiny_config() {
  Seq2SeqConfig c;
  c.src_vocab = 7, c.tgt_vocab = 6, c.embed_size = 4, c.hidden_size = 5, c.num_layers = 1, c.dropout = 0;
  return c;
}

// A model whose next-token distribution is `probs` at every step, whatever the source and the
// prefix: the output layer's weight is zero and its bias holds log(probs).
std::unique_ptr<Seq2Seq> constant_model(const std::vector<double>& probs) {
  auto model = std::make_unique<Seq2Seq>(tiny_config());
  init_xavier(*model);
  NoGradGuard no_grad;
  model->decoder.out->weight.fill_(0);
  std::vector<float> bias;
  for (double p : probs) bias.push_back(static_cast<float>(std::log(p)));
  model->decoder.out->bias.copy_(from_vector(bias, {static_cast<int64_t>(bias.size())}));
  return model;
}

// log p(token) under the model's softmax of log(probs) (probs need not sum to exactly 1).
double log_p(const std::vector<double>& probs, int64_t token) {
  double sum = 0;
  for (double p : probs) sum += static_cast<double>(static_cast<float>(p));
  return std::log(probs[token] / sum);
}


}  // namespace

TEST_CASE("beam_search: a hypothesis still open when beam_size have finished never wins") {
  // p(a) = .5, p(<eos>) = .3, p(b) = .2 at every step; beam 2, alpha 1 (score = log p / length,
  // <eos> counted). Step 0: "a" (.5) opens, "" + <eos> (.3) finishes (score log .3 = -1.20), "b"
  // opens. Step 1: "a a" (.25) opens, "a" + <eos> (.15) finishes (score log(.15) / 2 = -0.95): two
  // have finished, so the search ends. The open "a" of step 0 (log .5 / 2 = -0.35 as if cut) must
  // not be returned: the answer is "a" + <eos>, then "" + <eos>.
  std::vector<double> probs = {1e-6, 1e-6, 0.3, 1e-6, 0.5, 0.2};
  std::unique_ptr<Seq2Seq> owned = constant_model(probs);
  Seq2Seq& model = *owned;
  Source s = source({{4, 5, 6, 2}});
  std::vector<std::vector<Hypothesis>> ranked =
      beam_search(model, s.src, s.lengths, {.max_len = 10, .beam_size = 2, .nbest = 2});
  REQUIRE(ranked.size() == 1);
  REQUIRE(ranked[0].size() == 2);
  const Hypothesis& best = ranked[0][0];
  CHECK(best.tokens == std::vector<int64_t>{kA});
  CHECK(best.finished);
  CHECK(best.attention.size() == 2);  // "a" and <eos>
  CHECK(best.attention[1].size() == 4);
  CHECK(best.log_prob == doctest::Approx(log_p(probs, kA) + log_p(probs, kEos)).epsilon(1e-6));
  REQUIRE(best.token_log_probs.size() == 2);  // "a" and <eos>, each its own
  CHECK(best.token_log_probs[0] == doctest::Approx(log_p(probs, kA)).epsilon(1e-6));
  CHECK(best.token_log_probs[1] == doctest::Approx(log_p(probs, kEos)).epsilon(1e-6));
  CHECK(best.score == doctest::Approx(best.log_prob / 2).epsilon(1e-6));
  const Hypothesis& second = ranked[0][1];
  CHECK(second.tokens.empty());
  CHECK(second.finished);
  CHECK(second.score == doctest::Approx(log_p(probs, kEos)).epsilon(1e-6));
  // decode() returns the best one
  CHECK(decode(model, s.src, s.lengths, {.max_len = 10, .beam_size = 2})[0].tokens == best.tokens);
}

TEST_CASE("beam_search: <eos> finishes a hypothesis only among the step's beam_size best candidates") {
  // Beam 2, two open hypotheses: "a" (row 0, log p -1.0) and "b" (row 1, -1.2). The step's
  // candidates, best first: "a" + <eos> (-1.5), "a a" (-1.6), "b" + <eos> (-1.7), "b b" (-1.8).
  // fairseq's and CTranslate2's rule, which seqgrad follows: rank 0's <eos> finishes "a", "a a"
  // opens, rank 2's <eos> lies outside the beam and is dropped, "b b" opens; one finished, two
  // open, and the search goes on. Accepting <eos> at any rank (the rule before) would finish "b"
  // as the second hypothesis and end the sentence before "a a" or "b b" could finish better.
  using search::Candidate;
  using search::SentenceBeams;
  SentenceBeams beams;
  beams.open.push_back({.hyp = {.tokens = {kA}, .log_prob = -1.0, .finished = false}, .last = kA});
  beams.open.push_back({.hyp = {.tokens = {kB}, .log_prob = -1.2, .finished = false}, .last = kB});
  const std::vector<const SentenceBeams::Open*> row_owner = {&beams.open[0], &beams.open[1]};
  const std::vector<Candidate> candidates = {{-1.5, -0.5, 0, kEos}, {-1.6, -0.6, 0, kA},
                                             {-1.7, -0.5, 1, kEos}, {-1.8, -0.6, 1, kB}};
  const search::HostStep rows{search::HostRows(Tensor()), search::HostRows(Tensor()), search::HostAlternatives(Tensor(), 0)};
  const DecodeOptions options{.max_len = 10, .beam_size = 2, .length_penalty = 0};
  const std::vector<int64_t> parents = search::advance_sentence(beams, candidates, row_owner, rows, 0, 1, options, nullptr);
  CHECK(parents == std::vector<int64_t>{0, 1});
  REQUIRE(beams.finished.size() == 1);
  CHECK(beams.finished[0].tokens == std::vector<int64_t>{kA});
  CHECK(beams.finished[0].log_prob == doctest::Approx(-1.5));
  REQUIRE(beams.open.size() == 2);
  CHECK(beams.open[0].hyp.tokens == std::vector<int64_t>{kA, kA});
  CHECK(beams.open[1].hyp.tokens == std::vector<int64_t>{kB, kB});
  CHECK(beams.open[1].hyp.log_prob == doctest::Approx(-1.8));
}

TEST_CASE("beam_search: the beam tree records what was kept, finished and pruned at each step") {
  // The search of the test above (beam 2; p(a) = .5, p(<eos>) = .3, p(b) = .2, the rest 1e-6;
  // 2 x beam = 4 candidates per row). Step 0, from <bos>: "a" kept, "" + <eos> finished, "b" kept,
  // then the 1e-6 token pruned. Step 1: "a a" (.25) kept, "a" + <eos> (.15) finished: two have
  // finished, so the search ends and "a a" is pruned after all; of the rest the next beam_size are
  // recorded pruned: "a b" (.10), then "b a" (.10, the same log-probability; row "a" ranks first).
  using Fate = BeamNode::Fate;
  std::vector<double> probs = {1e-6, 1e-6, 0.3, 1e-6, 0.5, 0.2};
  std::unique_ptr<Seq2Seq> owned = constant_model(probs);
  Seq2Seq& model = *owned;
  Source s = source({{4, 5, 6, 2}});
  std::vector<BeamTree> trees;
  std::vector<std::vector<Hypothesis>> ranked =
      beam_search(model, s.src, s.lengths, {.max_len = 10, .beam_size = 2, .nbest = 2}, &trees);
  REQUIRE(trees.size() == 1);
  const std::vector<BeamNode>& n = trees[0].nodes;
  REQUIRE(n.size() == 8);
  struct Expected {
    int64_t parent, step, token;
    Fate fate;
    double log_prob;
  };
  const double a = log_p(probs, kA), b = log_p(probs, kB), eos = log_p(probs, kEos);
  const std::vector<Expected> expected = {
      {-1, 0, kA, Fate::kept, a},       {-1, 0, kEos, Fate::finished, eos}, {-1, 0, kB, Fate::kept, b},
      {-1, 0, -1, Fate::pruned, 0},     {0, 1, kA, Fate::pruned, a + a},    {0, 1, kEos, Fate::finished, a + eos},
      {0, 1, kB, Fate::pruned, a + b},  {2, 1, kA, Fate::pruned, b + a}};
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(n[i].parent == expected[i].parent);
    CHECK(n[i].step == expected[i].step);
    CHECK(n[i].fate == expected[i].fate);
    if (expected[i].token < 0) {  // one of the three 1e-6 tokens
      CHECK(n[i].log_prob < std::log(1e-5));
      continue;
    }
    CHECK(n[i].token == expected[i].token);
    CHECK(n[i].log_prob == doctest::Approx(expected[i].log_prob).epsilon(1e-6));
    CHECK(n[i].token_log_prob == doctest::Approx(log_p(probs, n[i].token)).epsilon(1e-6));
  }
  // the finished nodes carry the scores of the returned hypotheses: "a" + <eos> first
  CHECK(n[5].score == doctest::Approx(ranked[0][0].score).epsilon(1e-12));
  CHECK(n[1].score == doctest::Approx(ranked[0][1].score).epsilon(1e-12));
  CHECK(std::string(beam_fate_name(n[6].fate)) == "pruned");
}

TEST_CASE("beam_search: a batch's beam trees are each sentence's alone") {
  manual_seed(11);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  std::vector<std::vector<int64_t>> sentences = {{4, 5, 6, 2}, {3, 2}};
  DecodeOptions options{.max_len = 6, .beam_size = 3};
  Source batch = source(sentences);
  std::vector<BeamTree> together;
  std::vector<std::vector<Hypothesis>> best = beam_search(model, batch.src, batch.lengths, options, &together);
  REQUIRE(together.size() == 2);
  for (size_t i = 0; i < sentences.size(); ++i) {
    Source one = source({sentences[i]});
    std::vector<BeamTree> alone;
    beam_search(model, one.src, one.lengths, options, &alone);
    REQUIRE(alone[0].nodes.size() == together[i].nodes.size());
    for (size_t k = 0; k < alone[0].nodes.size(); ++k) {
      CHECK(alone[0].nodes[k].token == together[i].nodes[k].token);
      CHECK(alone[0].nodes[k].parent == together[i].nodes[k].parent);
      CHECK(alone[0].nodes[k].fate == together[i].nodes[k].fate);
    }
    // the best hypothesis is a path of kept nodes, ending in a finished one with its score when it
    // finished (max_len may cut it)
    const Hypothesis& h = best[i][0];
    int64_t parent = -1;
    for (size_t t = 0; t < h.tokens.size() + (h.finished ? 1 : 0); ++t) {
      const int64_t token = t < h.tokens.size() ? h.tokens[t] : kEos;
      auto it = std::find_if(together[i].nodes.begin(), together[i].nodes.end(), [&](const BeamNode& x) {
        return x.parent == parent && x.token == token && x.fate != BeamNode::Fate::pruned;
      });
      REQUIRE(it != together[i].nodes.end());
      CHECK(it->step == static_cast<int64_t>(t));
      if (token == kEos) CHECK(it->score == doctest::Approx(h.score).epsilon(1e-12));
      parent = it - together[i].nodes.begin();
    }
  }
}

TEST_CASE("beam_search: when max_len cuts the search, the open hypotheses compete, marked unfinished") {
  // p(a) = .6, p(b) = .4, <eos> almost never: after max_len 3 steps nothing has finished, and the
  // best open hypothesis "a a a" is returned with score log(.6^3) / 3 (three tokens, no <eos>).
  std::vector<double> probs = {1e-9, 1e-9, 1e-9, 1e-9, 0.6, 0.4};
  std::unique_ptr<Seq2Seq> owned = constant_model(probs);
  Seq2Seq& model = *owned;
  Source s = source({{4, 2}});
  std::vector<std::vector<Hypothesis>> ranked =
      beam_search(model, s.src, s.lengths, {.max_len = 3, .beam_size = 2, .nbest = 2});
  REQUIRE(ranked[0].size() == 2);
  const Hypothesis& best = ranked[0][0];
  CHECK(best.tokens == std::vector<int64_t>{kA, kA, kA});
  CHECK_FALSE(best.finished);
  CHECK(best.attention.size() == 3);
  CHECK(best.score == doctest::Approx(3 * log_p(probs, kA) / 3).epsilon(1e-6));
  CHECK(ranked[0][1].tokens.size() == 3);  // "a a b" or a permutation: one b
  CHECK(ranked[0][1].score == doctest::Approx((2 * log_p(probs, kA) + log_p(probs, kB)) / 3).epsilon(1e-6));
}

TEST_CASE("beam_search: a batch of sentences gives what each sentence gives alone") {
  manual_seed(7);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  std::vector<std::vector<int64_t>> sentences = {{4, 5, 6, 2}, {3, 2}, {6, 6, 5, 4, 3, 2}};
  Source batch = source(sentences);
  DecodeOptions options{.max_len = 8, .beam_size = 3, .length_penalty = 0.7, .nbest = 3};
  std::vector<std::vector<Hypothesis>> together = beam_search(model, batch.src, batch.lengths, options);
  REQUIRE(together.size() == sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) {
    Source one = source({sentences[i]});
    std::vector<Hypothesis> alone = beam_search(model, one.src, one.lengths, options)[0];
    REQUIRE(alone.size() == together[i].size());
    for (size_t n = 0; n < alone.size(); ++n) {
      CHECK(alone[n].tokens == together[i][n].tokens);
      CHECK(alone[n].score == doctest::Approx(together[i][n].score).epsilon(1e-5));
      CHECK(alone[n].attention.size() == together[i][n].attention.size());
    }
    for (size_t n = 1; n < alone.size(); ++n) CHECK(together[i][n - 1].score >= together[i][n].score);
  }
}

TEST_CASE("beam_search with beam 1 is greedy decoding") {
  manual_seed(3);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  Source s = source({{4, 5, 6, 2}, {3, 3, 2}});
  std::vector<Hypothesis> greedy = greedy_decode(model, s.src, s.lengths, {.max_len = 6});
  std::vector<std::vector<Hypothesis>> beam = beam_search(model, s.src, s.lengths, {.max_len = 6, .beam_size = 1});
  for (size_t i = 0; i < greedy.size(); ++i) {
    CHECK(beam[i][0].tokens == greedy[i].tokens);
    CHECK(beam[i][0].finished == greedy[i].finished);
    CHECK(beam[i][0].log_prob == doctest::Approx(greedy[i].log_prob).epsilon(1e-5));
    REQUIRE(greedy[i].token_log_probs.size() == greedy[i].attention.size());  // one per produced token
    REQUIRE(beam[i][0].token_log_probs.size() == greedy[i].token_log_probs.size());
    double sum = 0;
    for (size_t t = 0; t < greedy[i].token_log_probs.size(); ++t) {
      CHECK(beam[i][0].token_log_probs[t] == doctest::Approx(greedy[i].token_log_probs[t]).epsilon(1e-5));
      sum += greedy[i].token_log_probs[t];
    }
    CHECK(greedy[i].log_prob == doctest::Approx(sum).epsilon(1e-12));
  }
}

TEST_CASE("beam_search: bad options are errors") {
  Seq2Seq model(tiny_config());
  Source s = source({{4, 2}});
  CHECK_THROWS_WITH_AS(beam_search(model, s.src, s.lengths, {.beam_size = 2, .nbest = 3}),
                       doctest::Contains("nbest 3 must be in [1, beam_size 2]"), ValueError);
  CHECK_THROWS_WITH_AS(beam_search(model, s.src, s.lengths, {.beam_size = 0}),
                       doctest::Contains("beam_size 0 must be >= 1"), ValueError);
}

TEST_CASE("Seq2Seq::encode: the lengths become one keep mask, shared by the encoder's GRU and the attention") {
  manual_seed(5);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  model.eval();
  Source s = source({{4, 5, 6, 2}, {5, 2}, {2}});
  auto [state, memory] = model.encode(s.src, s.lengths);
  // the memory's keep mask: (B, 1, S), true at the real tokens
  REQUIRE(memory.key_keep.defined());
  CHECK(memory.key_keep.shape() == Shape{3, 1, 4});
  std::vector<bool> expected = {1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0};
  CHECK(memory.key_keep.to_vector<bool>() == expected);
  // the encoder's outputs (the attention's values) are zero at padded positions
  std::vector<float> values = memory.values.to_vector<float>();
  const int64_t width = memory.values.size(2);
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t d = 0; d < width; ++d)
      if (!expected[i]) CHECK(values[i * width + d] == 0.0f);
  // the teacher-forced model is the decoder over this encoding
  Tensor tgt_in = from_vector<int64_t>({1, 4, 5, 1, 5, 0, 1, 2, 0}, {3, 3}, {.dtype = DType::i64});
  Tensor direct = model(s.src, s.lengths, tgt_in);
  Tensor via_encode = model.decoder(tgt_in, state, memory);
  CHECK(max(abs(sub(direct, via_encode))).item() == 0.0);
  CHECK_THROWS_WITH_AS(model.encode(s.src, from_vector<int64_t>({4, 5, 1}, {3}, {.dtype = DType::i64})),
                       doctest::Contains("seq2seq: lengths[1] = 5 not in [0, 4]"), ValueError);
}

// ---- length and coverage penalties, min_len, sampling, ensembles, forced decoding, alternatives

namespace {

// The first token a hypothesis produced: <eos> when it produced none.
int64_t first_token(const Hypothesis& h) { return h.tokens.empty() ? kEos : h.tokens.front(); }

// p(a) = .5, p(<eos>) = .3, p(b) = .2 at every step (the first test's distribution).
const std::vector<double> kHalfA = {1e-6, 1e-6, 0.3, 1e-6, 0.5, 0.2};

// How often each token came first in `hyps`, as fractions.
std::vector<double> first_token_frequencies(const std::vector<Hypothesis>& hyps) {
  std::vector<double> counts(6, 0.0);
  for (const Hypothesis& h : hyps) counts[first_token(h)] += 1.0 / static_cast<double>(hyps.size());
  return counts;
}

Source repeated(const std::vector<int64_t>& sentence, size_t n) {
  return source(std::vector<std::vector<int64_t>>(n, sentence));
}

}  // namespace

TEST_CASE("beam_search: the GNMT length penalty ((5 + |Y|) / 6)^alpha ranks the finished hypotheses") {
  // The search of the first test finishes "" + <eos> (log .3, |Y| = 1) and "a" + <eos> (log .15,
  // |Y| = 2). Power, alpha 1: -1.204 / 1 < -1.897 / 2 = -0.949, so "a" wins. GNMT, alpha 1: the
  // penalties are 6/6 = 1 and 7/6, so -1.204 > -1.897 / (7/6) = -1.626: "" wins.
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  Source s = source({{4, 5, 6, 2}});
  DecodeOptions gnmt{.max_len = 10, .beam_size = 2, .length_penalty = 1.0, .length_penalty_kind = LengthPenalty::gnmt,
                     .nbest = 2};
  std::vector<Hypothesis> ranked = beam_search(*model, s.src, s.lengths, gnmt)[0];
  REQUIRE(ranked.size() == 2);
  CHECK(ranked[0].tokens.empty());
  CHECK(ranked[0].score == doctest::Approx(log_p(kHalfA, kEos)).epsilon(1e-6));
  CHECK(ranked[1].tokens == std::vector<int64_t>{kA});
  CHECK(ranked[1].score == doctest::Approx((log_p(kHalfA, kA) + log_p(kHalfA, kEos)) / (7.0 / 6.0)).epsilon(1e-6));
  CHECK(parse_length_penalty("gnmt") == LengthPenalty::gnmt);
  CHECK_THROWS_WITH_AS(parse_length_penalty("wu"), doctest::Contains("'wu' is not one of: power, gnmt"), ValueError);
}

TEST_CASE("final_score: length penalty plus beta x the sum of log(min(coverage, 1)) over source positions") {
  // Two rows over two source positions: coverage (1.4, 0.6) -> log 1 + log .6 = -0.5108.
  Hypothesis h;
  h.tokens = {kA};
  h.log_prob = -2.0;
  h.attention = {{0.5f, 0.5f}, {0.9f, 0.1f}};
  CHECK(final_score(h, {.length_penalty = 1.0}) == doctest::Approx(-1.0));  // |Y| = 2 with <eos>
  CHECK(final_score(h, {.length_penalty = 1.0, .coverage_penalty = 0.2}) ==
        doctest::Approx(-1.0 + 0.2 * std::log(0.6)).epsilon(1e-6));
  // GNMT, alpha .6: ((5 + 2) / 6)^.6 = 1.0969
  CHECK(final_score(h, {.length_penalty = 0.6, .length_penalty_kind = LengthPenalty::gnmt, .coverage_penalty = 0.2}) ==
        doctest::Approx(-2.0 / std::pow(7.0 / 6.0, 0.6) + 0.2 * std::log(0.6)).epsilon(1e-6));
}

TEST_CASE("beam_search: the coverage penalty favours the hypothesis that attended to the whole source") {
  // With the attention's parameters zero, every step attends uniformly to the 4 source positions.
  // "" + <eos> has one row: coverage .25 each, penalty 4 log .25 = -5.545; "a" + <eos> two rows:
  // coverage .5 each, 4 log .5 = -2.773. Alpha 0 (no length normalisation): without coverage ""
  // wins (log .3 > log .15); with beta 1, "a" does: -1.897 - 2.773 > -1.204 - 5.545.
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  {
    NoGradGuard no_grad;
    for (Tensor& p : model->decoder.attention->parameters()) p.fill_(0);
  }
  Source s = source({{4, 5, 6, 2}});
  DecodeOptions plain{.max_len = 10, .beam_size = 2, .length_penalty = 0.0, .nbest = 2};
  CHECK(beam_search(*model, s.src, s.lengths, plain)[0][0].tokens.empty());
  DecodeOptions covered = plain;
  covered.coverage_penalty = 1.0;
  std::vector<Hypothesis> ranked = beam_search(*model, s.src, s.lengths, covered)[0];
  CHECK(ranked[0].tokens == std::vector<int64_t>{kA});
  CHECK(ranked[0].score == doctest::Approx(log_p(kHalfA, kA) + log_p(kHalfA, kEos) + 4 * std::log(0.5)).epsilon(1e-5));
  CHECK(ranked[1].score == doctest::Approx(log_p(kHalfA, kEos) + 4 * std::log(0.25)).epsilon(1e-5));
}

TEST_CASE("min_len: no <eos> before min_len tokens, in greedy decoding and beam search") {
  // p(<eos>) = .5, p(a) = .3, p(b) = .2: greedy stops at once. With min_len 2 it takes "a" twice
  // (the best token that is not <eos>), then <eos>; the log-probabilities stay the model's.
  std::vector<double> probs = {1e-6, 1e-6, 0.5, 1e-6, 0.3, 0.2};
  std::unique_ptr<Seq2Seq> model = constant_model(probs);
  Source s = source({{4, 5, 2}});
  CHECK(greedy_decode(*model, s.src, s.lengths, {.max_len = 10})[0].tokens.empty());
  Hypothesis h = greedy_decode(*model, s.src, s.lengths, {.max_len = 10, .min_len = 2})[0];
  CHECK(h.tokens == std::vector<int64_t>{kA, kA});
  CHECK(h.finished);
  REQUIRE(h.token_log_probs.size() == 3);
  CHECK(h.token_log_probs[0] == doctest::Approx(log_p(probs, kA)).epsilon(1e-6));
  CHECK(h.token_log_probs[2] == doctest::Approx(log_p(probs, kEos)).epsilon(1e-6));
  // Beam 2: step 0 opens "a" (.3) and "b" (.2); step 1 keeps "a a" (.09) and "a b" (.06, before "b
  // a" by order); step 2 finishes "a a" + <eos> (.045) and "a b" + <eos> (.03), in that order.
  std::vector<Hypothesis> ranked =
      beam_search(*model, s.src, s.lengths, {.max_len = 10, .beam_size = 2, .min_len = 2, .nbest = 2})[0];
  REQUIRE(ranked.size() == 2);
  CHECK(ranked[0].tokens == std::vector<int64_t>{kA, kA});
  CHECK(ranked[1].tokens == std::vector<int64_t>{kA, kB});
  CHECK(ranked[0].finished);
  CHECK_THROWS_WITH_AS(greedy_decode(*model, s.src, s.lengths, {.max_len = 3, .min_len = 4}),
                       doctest::Contains("min_len 4 must be in [0, max_len 3]"), ValueError);
}

TEST_CASE("sample_decode: top-k 1 is greedy decoding") {
  manual_seed(11);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  Source s = source({{4, 5, 6, 2}, {3, 2}, {6, 5, 2}});
  DecodeOptions greedy{.max_len = 6};
  DecodeOptions top1 = greedy;
  top1.sampling = SamplingOptions{.top_k = 1, .temperature = 0.7, .seed = 3};
  Generator generator(3);
  std::vector<Hypothesis> expected = greedy_decode(model, s.src, s.lengths, greedy);
  std::vector<Hypothesis> sampled = sample_decode(model, s.src, s.lengths, top1, generator);
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(sampled[i].tokens == expected[i].tokens);
    CHECK(sampled[i].log_prob == doctest::Approx(expected[i].log_prob).epsilon(1e-6));  // the model's, untempered
  }
}

TEST_CASE("sample_decode: top-p draws from exactly the nucleus") {
  // p(a) = .5, p(<eos>) = .3, p(b) = .2. The nucleus of .45 is {a} (.5 reaches it); of .7 {a, <eos>}
  // (.5 does not, .8 does); of .85 {a, <eos>, b} (1.0). 400 first tokens: each nucleus member
  // appears (b, the rarest, with probability 1 - .8^400), no other token does.
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  Source s = repeated({4, 5, 2}, 400);
  for (auto [p, nucleus] : {std::pair{0.45, std::vector<int64_t>{kA}}, {0.7, {kA, kEos}}, {0.85, {kA, kEos, kB}}}) {
    DecodeOptions o{.max_len = 1, .sampling = SamplingOptions{.top_p = p, .seed = 5}};
    std::vector<double> freq = first_token_frequencies(decode(*model, s.src, s.lengths, o));
    for (int64_t token = 0; token < 6; ++token) {
      CAPTURE(p);
      CAPTURE(token);
      bool in_nucleus = std::find(nucleus.begin(), nucleus.end(), token) != nucleus.end();
      CHECK((freq[token] > 0) == in_nucleus);
    }
    if (p == 0.7) CHECK(freq[kA] == doctest::Approx(0.5 / 0.8).epsilon(0.1));  // renormalised in the nucleus
  }
}

TEST_CASE("sample_decode: temperature T samples p^(1/T), renormalised") {
  // T = 2 over (.5, .3, .2) and three tokens of 1e-6: p(a) = sqrt(.5) / sum_i sqrt(p_i) = 0.414
  // instead of .5. 4000 draws: the standard error of a frequency is below .008.
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  Source s = repeated({4, 2}, 4000);
  DecodeOptions o{.max_len = 1, .sampling = SamplingOptions{.temperature = 2.0, .seed = 9}};
  std::vector<double> freq = first_token_frequencies(decode(*model, s.src, s.lengths, o));
  double sum = 0;
  for (double p : kHalfA) sum += std::sqrt(p);
  for (int64_t token : {kA, kEos, kB}) CHECK(freq[token] == doctest::Approx(std::sqrt(kHalfA[token]) / sum).epsilon(0.08));
  CHECK(std::sqrt(kHalfA[kA]) / sum == doctest::Approx(0.414).epsilon(0.01));
}

TEST_CASE("sample_decode: the same seed gives the same output, however the sentences are batched") {
  manual_seed(13);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  std::vector<std::vector<int64_t>> sentences = {{4, 5, 6, 2}, {3, 2}, {6, 5, 2}, {5, 2}};
  DecodeOptions o{.max_len = 8, .sampling = SamplingOptions{.top_p = 0.95, .temperature = 1.5, .seed = 21}};
  Source all = source(sentences);
  std::vector<Hypothesis> once = decode(model, all.src, all.lengths, o), again = decode(model, all.src, all.lengths, o);
  Generator generator(21);  // the same stream, in two batches
  Source head = source({sentences[0]}), tail = source({sentences[1], sentences[2], sentences[3]});
  std::vector<Hypothesis> split = sample_decode(model, head.src, head.lengths, o, generator);
  for (Hypothesis& h : sample_decode(model, tail.src, tail.lengths, o, generator)) split.push_back(std::move(h));
  DecodeOptions other = o;
  other.sampling->seed = 22;
  std::vector<Hypothesis> reseeded = decode(model, all.src, all.lengths, other);
  bool any_differs = false;
  for (size_t i = 0; i < sentences.size(); ++i) {
    CHECK(again[i].tokens == once[i].tokens);
    CHECK(split[i].tokens == once[i].tokens);
    any_differs = any_differs || reseeded[i].tokens != once[i].tokens;
  }
  CHECK(any_differs);  // another seed, other draws
  CHECK_THROWS_WITH_AS(decode(model, all.src, all.lengths, {.beam_size = 2, .sampling = SamplingOptions{}}),
                       doctest::Contains("beam_size 2 must be 1"), ValueError);
  CHECK_THROWS_WITH_AS(decode(model, all.src, all.lengths, {.sampling = SamplingOptions{.top_p = 0}}),
                       doctest::Contains("sampling.top_p 0 must be in (0, 1]"), ValueError);
}

TEST_CASE("Ensemble: the mean of the members' probabilities picks a token neither picks alone") {
  // Model 1: p(a) = .5, p(b) = .4, p(<eos>) = .1: it picks a. Model 2: p(<eos>) = .5, p(b) = .4,
  // p(a) = .1: it picks <eos>. Their mean: a .3, b .4, <eos> .3: b, with log-probability log .4.
  std::vector<double> p1 = {1e-6, 1e-6, 0.1, 1e-6, 0.5, 0.4}, p2 = {1e-6, 1e-6, 0.5, 1e-6, 0.1, 0.4};
  std::unique_ptr<Seq2Seq> m1 = constant_model(p1), m2 = constant_model(p2);
  Ensemble both({m1.get(), m2.get()});
  Source s = source({{4, 5, 2}});
  CHECK(first_token(greedy_decode(*m1, s.src, s.lengths, {.max_len = 1})[0]) == kA);
  CHECK(first_token(greedy_decode(*m2, s.src, s.lengths, {.max_len = 1})[0]) == kEos);
  Hypothesis h = greedy_decode(both, s.src, s.lengths, {.max_len = 1})[0];
  CHECK(first_token(h) == kB);
  const double mean_b = (std::exp(log_p(p1, kB)) + std::exp(log_p(p2, kB))) / 2;
  CHECK(h.token_log_probs[0] == doctest::Approx(std::log(mean_b)).epsilon(1e-6));
  // Beam 2, nbest 2, max_len 1, alpha 0: "b" (cut, log .4) ranks first, then "a" or <eos> (.3 each).
  std::vector<Hypothesis> ranked =
      beam_search(both, s.src, s.lengths, {.max_len = 1, .beam_size = 2, .length_penalty = 0, .nbest = 2})[0];
  CHECK(first_token(ranked[0]) == kB);
  CHECK(ranked[0].score == doctest::Approx(std::log(mean_b)).epsilon(1e-6));
  // teacher forcing: the same mean, as log-probabilities (B, T, V)
  Tensor tgt_in = from_vector<int64_t>({1}, {1, 1}, {.dtype = DType::i64});
  std::vector<double> forward = both.forward(s.src, s.lengths, tgt_in).to_vector<double>();
  CHECK(forward[kB] == doctest::Approx(std::log(mean_b)).epsilon(1e-6));
  auto wider = std::make_unique<Seq2Seq>([] { Seq2SeqConfig c = tiny_config(); c.tgt_vocab = 7; return c; }());
  CHECK_THROWS_WITH_AS(Ensemble({m1.get(), wider.get()}), doctest::Contains("model 1 has a target vocabulary of 7 tokens"),
                       ValueError);
}

TEST_CASE("score_targets: each given token's log-probability, <eos> included") {
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  Source s = source({{4, 5, 2}, {6, 2}});
  std::vector<Hypothesis> scored =
      score_targets(*model, s.src, s.lengths, {{kA, kB}, {}}, {.length_penalty = 1.0, .top_alternatives = 2});
  REQUIRE(scored.size() == 2);
  const Hypothesis& h = scored[0];
  CHECK(h.tokens == std::vector<int64_t>{kA, kB});
  CHECK(h.finished);
  REQUIRE(h.token_log_probs.size() == 3);
  CHECK(h.token_log_probs[0] == doctest::Approx(log_p(kHalfA, kA)).epsilon(1e-6));
  CHECK(h.token_log_probs[1] == doctest::Approx(log_p(kHalfA, kB)).epsilon(1e-6));
  CHECK(h.token_log_probs[2] == doctest::Approx(log_p(kHalfA, kEos)).epsilon(1e-6));
  CHECK(h.log_prob == doctest::Approx(log_p(kHalfA, kA) + log_p(kHalfA, kB) + log_p(kHalfA, kEos)).epsilon(1e-6));
  CHECK(h.score == doctest::Approx(h.log_prob / 3).epsilon(1e-6));
  CHECK(h.attention.size() == 3);
  CHECK(h.attention[0].size() == 3);
  // the empty target: <eos> alone
  CHECK(scored[1].tokens.empty());
  CHECK(scored[1].log_prob == doctest::Approx(log_p(kHalfA, kEos)).epsilon(1e-6));
  CHECK(scored[1].attention[0].size() == 2);
  // alternatives: a (.5) then <eos> (.3) at every step
  REQUIRE(h.alternatives.size() == 3);
  for (const std::vector<Alternative>& alt : h.alternatives) {
    REQUIRE(alt.size() == 2);
    CHECK(alt[0].token == kA);
    CHECK(alt[0].probability == doctest::Approx(0.5).epsilon(1e-5));
    CHECK(alt[1].token == kEos);
    CHECK(alt[1].probability == doctest::Approx(0.3).epsilon(1e-5));
  }
  CHECK_THROWS_WITH_AS(score_targets(*model, s.src, s.lengths, {{kA, 9}, {}}, {}),
                       doctest::Contains("targets[0][1] = 9 not in [0, 6)"), ValueError);
}

TEST_CASE("score_targets of the greedy output gives its own log-probabilities; the sum is teacher forcing's") {
  manual_seed(17);
  Seq2Seq model(tiny_config());
  init_xavier(model);
  Source s = source({{4, 5, 6, 2}, {3, 2}, {6, 5, 2}});
  std::vector<Hypothesis> greedy = greedy_decode(model, s.src, s.lengths, {.max_len = 12});
  std::vector<std::vector<int64_t>> targets;
  for (const Hypothesis& h : greedy) targets.push_back(h.tokens);
  std::vector<Hypothesis> scored = score_targets(model, s.src, s.lengths, targets, {});
  for (size_t i = 0; i < greedy.size(); ++i) {
    if (!greedy[i].finished) continue;  // cut at max_len: scoring adds the <eos> greedy never produced
    REQUIRE(scored[i].token_log_probs.size() == greedy[i].token_log_probs.size());
    for (size_t t = 0; t < scored[i].token_log_probs.size(); ++t)
      CHECK(scored[i].token_log_probs[t] == doctest::Approx(greedy[i].token_log_probs[t]).epsilon(1e-5));
    REQUIRE(scored[i].attention.size() == greedy[i].attention.size());
    for (size_t t = 0; t < scored[i].attention.size(); ++t)
      for (size_t j = 0; j < scored[i].attention[t].size(); ++j)
        CHECK(scored[i].attention[t][j] == doctest::Approx(greedy[i].attention[t][j]).epsilon(1e-5));
  }
  // teacher forcing of one target: the sum of log_softmax at the given tokens
  std::vector<std::vector<int64_t>> one = {{kA, kB, kA}};
  Source first = source({{4, 5, 6, 2}});
  Hypothesis h = score_targets(model, first.src, first.lengths, one, {})[0];
  Tensor tgt_in = from_vector<int64_t>({1, kA, kB, kA}, {1, 4}, {.dtype = DType::i64});
  model.eval();
  std::vector<double> lp = log_softmax(Ensemble(model).forward(first.src, first.lengths, tgt_in), -1).to_vector<double>();
  double expected = lp[0 * 6 + kA] + lp[1 * 6 + kB] + lp[2 * 6 + kA] + lp[3 * 6 + kEos];
  CHECK(h.log_prob == doctest::Approx(expected).epsilon(1e-5));
}

TEST_CASE("top_alternatives: each produced token carries its step's K most probable tokens; none when off") {
  std::unique_ptr<Seq2Seq> model = constant_model(kHalfA);
  Source s = source({{4, 5, 2}});
  Hypothesis off = greedy_decode(*model, s.src, s.lengths, {.max_len = 3})[0];
  CHECK(off.alternatives.empty());
  Hypothesis greedy = greedy_decode(*model, s.src, s.lengths, {.max_len = 3, .top_alternatives = 3})[0];
  REQUIRE(greedy.alternatives.size() == greedy.token_log_probs.size());
  for (const std::vector<Alternative>& alt : greedy.alternatives) {
    REQUIRE(alt.size() == 3);
    CHECK(alt[0].token == kA);
    CHECK(alt[1].token == kEos);
    CHECK(alt[2].token == kB);
    CHECK(alt[2].probability == doctest::Approx(0.2).epsilon(1e-5));
  }
  // beam: every token of each hypothesis, e.g. "a" + <eos> of the first test
  Hypothesis best = beam_search(*model, s.src, s.lengths, {.max_len = 10, .beam_size = 2, .top_alternatives = 1})[0][0];
  REQUIRE(best.alternatives.size() == 2);
  CHECK(best.alternatives[1].size() == 1);
  CHECK(best.alternatives[1][0].token == kA);
  CHECK(best.alternatives[1][0].probability == doctest::Approx(0.5).epsilon(1e-5));
}
