// Decoding: beam search on models whose output distribution is constructed by hand (so the
// expected hypotheses and scores are derived below), and batched decoding against one sentence
// at a time.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/decode.h"

using namespace seqgrad;
using namespace seqgrad::models;

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

struct Source {
  Tensor src, lengths;
};
Source source(const std::vector<std::vector<int64_t>>& sentences) {
  int64_t longest = 0;
  for (const auto& s : sentences) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  std::vector<int64_t> ids, lengths;
  for (const auto& s : sentences) {
    ids.insert(ids.end(), s.begin(), s.end());
    ids.insert(ids.end(), longest - static_cast<int64_t>(s.size()), 0);  // <pad>
    lengths.push_back(static_cast<int64_t>(s.size()));
  }
  auto batch = static_cast<int64_t>(sentences.size());
  return {from_vector(ids, {batch, longest}, {.dtype = DType::i64}),
          from_vector(lengths, {batch}, {.dtype = DType::i64})};
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
