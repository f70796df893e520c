// models::attention_internals: the terms it returns recompute the decoder's own energies, weights
// and contexts (additive: vᵀ tanh(q + k); scaled dot: q·k / √(2H); a = softmax(e); c = Σ a h), and
// its steps are those of the translation it follows.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "models/seq2seq/decode.h"
#include "models/seq2seq/internals.h"

using namespace seqgrad;
using namespace seqgrad::models;

namespace {

Seq2SeqConfig small_config(AttentionKind kind) {
  Seq2SeqConfig c;
  c.src_vocab = 9, c.tgt_vocab = 8, c.embed_size = 4, c.hidden_size = 6, c.num_layers = 2, c.dropout = 0.3;
  c.attention_size = 5, c.attention = kind;
  return c;
}

const std::vector<int64_t> kSource = {4, 7, 5, 8, 2};  // ids, <eos> last

Tensor source_ids() { return from_vector(kSource, {1, static_cast<int64_t>(kSource.size())}, {.dtype = DType::i64}); }
Tensor source_lengths() {
  return from_vector(std::vector<int64_t>{static_cast<int64_t>(kSource.size())}, {1}, {.dtype = DType::i64});
}

// The encoder's outputs h (S rows of 2H), computed apart from attention_internals.
std::vector<std::vector<float>> encoder_outputs(Seq2Seq& model) {
  NoGradGuard no_grad;
  EvalScope eval(model);
  Tensor h = model.encode(source_ids(), source_lengths()).memory.values.contiguous();  // (1, S, 2H)
  std::vector<float> flat = h.to_vector<float>();
  const auto width = static_cast<size_t>(h.size(2));
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i < kSource.size(); ++i)
    rows.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(i * width),
                      flat.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
  return rows;
}

}  // namespace

TEST_CASE("attention_internals: additive terms give the decoder's energies, weights and contexts") {
  for (AttentionKind kind : {AttentionKind::additive, AttentionKind::hybrid, AttentionKind::scaled_dot}) {
    CAPTURE(attention_kind_name(kind));
    manual_seed(21);
    Seq2Seq model(small_config(kind));
    init_xavier(model);
    model.train();  // attention_internals runs in eval mode (no dropout) and restores the mode
    Tensor src = source_ids();
    Tensor lengths = source_lengths();
    Hypothesis hyp = greedy_decode(model, src, lengths, {.max_len = 7})[0];
    AttentionInternals in = attention_internals(model, src, hyp.tokens, hyp.finished);
    CHECK(model.is_training());
    CHECK(in.kind == kind);
    const size_t steps = hyp.tokens.size() + (hyp.finished ? 1 : 0);
    REQUIRE(in.query_terms.size() == steps);
    REQUIRE(in.energies.size() == steps);
    REQUIRE(in.key_terms.size() == kSource.size());
    const std::vector<std::vector<float>> h = encoder_outputs(model);
    for (size_t t = 0; t < steps; ++t) {
      CAPTURE(t);
      double normaliser = 0;
      for (size_t i = 0; i < kSource.size(); ++i) {
        double e = 0;
        if (kind == AttentionKind::scaled_dot) {
          REQUIRE(in.query_terms[t].size() == h[i].size());  // W_q s maps into the keys' 2H
          for (size_t d = 0; d < h[i].size(); ++d) e += double(in.query_terms[t][d]) * in.key_terms[i][d];
          e /= std::sqrt(static_cast<double>(h[i].size()));
        } else {
          REQUIRE(in.v.size() == 5);  // A
          REQUIRE(in.query_terms[t].size() == 5);
          for (size_t a = 0; a < in.v.size(); ++a)
            e += double(in.v[a]) * std::tanh(double(in.query_terms[t][a]) + in.key_terms[i][a]);
        }
        CHECK(in.energies[t][i] == doctest::Approx(e).epsilon(1e-5));
        normaliser += std::exp(e);
      }
      for (size_t i = 0; i < kSource.size(); ++i) {
        const double e = in.energies[t][i];
        if (kind != AttentionKind::hybrid)  // hybrid mixes its two kinds' weights
          CHECK(in.weights[t][i] == doctest::Approx(std::exp(e) / normaliser).epsilon(1e-5));
        // the weights are the ones greedy decoding returned for the same token
        CHECK(in.weights[t][i] == doctest::Approx(hyp.attention[t][i]).epsilon(1e-5));
      }
      for (size_t d = 0; d < h[0].size(); ++d) {
        double c = 0;
        for (size_t i = 0; i < kSource.size(); ++i) c += double(in.weights[t][i]) * h[i][d];
        CHECK(in.contexts[t][d] == doctest::Approx(c).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("attention_internals: a batch of sentences is refused by name") {
  Seq2Seq model(small_config(AttentionKind::additive));
  Tensor two = from_vector(std::vector<int64_t>{4, 2, 5, 2}, {2, 2}, {.dtype = DType::i64});
  CHECK_THROWS_WITH_AS(attention_internals(model, two, {}, true), doctest::Contains("attention_internals: expects one"),
                       ShapeError);
}
