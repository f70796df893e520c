// The Transformer translator (models/seq2seq/transformer.h) through the search and the library's
// Translator: decoding with the key/value cache gives the teacher-forced model's numbers, a batch
// translates as each sentence alone, ties share one matrix, checkpoints round-trip, and the
// architecture's errors name the field and the file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/internals.h"
#include "models/seq2seq/quantized_checkpoint.h"
#include "models/seq2seq/trainer.h"
#include "models/seq2seq/transformer.h"
#include "models/seq2seq/translator.h"
#include "tests/padded_source.h"
#include "tests/temp_dir.h"

using namespace seqgrad;
using namespace seqgrad::models;
using seqgrad::testing::Source;
using seqgrad::testing::source;
using seqgrad::testing::temp_path;

namespace {

Seq2SeqConfig transformer_config(bool tie = false, bool norm_first = true) {
  Seq2SeqConfig c;
  c.architecture = Architecture::transformer;
  c.src_vocab = c.tgt_vocab = 13;
  c.embed_size = c.hidden_size = 16, c.num_layers = 2, c.heads = 2, c.ffn_size = 24, c.dropout = 0;
  c.norm_first = norm_first, c.tie_embeddings = tie;
  return c;
}

// The vocabulary of the tests' checkpoints: the 4 special tokens and 9 words (13 in all).
text::Vocab toy_vocab(const std::vector<std::string>& words = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8"}) {
  std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  tokens.insert(tokens.end(), words.begin(), words.end());
  return text::Vocab::from_tokens(tokens);
}

// The teacher-forced log-probabilities of `tokens` (then <eos> when finished) after <bos>, for
// one sentence: the model run over the whole prefix at once, no cache.
std::vector<double> forced_log_probs(const TranslationModel& model, const Source& s, const Hypothesis& h) {
  std::vector<int64_t> in = {1};
  in.insert(in.end(), h.tokens.begin(), h.tokens.end());
  std::vector<int64_t> next = h.tokens;
  if (h.finished) next.push_back(2);
  else in.pop_back();
  const auto steps = static_cast<int64_t>(in.size());
  NoGradGuard no_grad;
  Tensor lp = log_softmax(model(s.src, s.lengths, from_vector(in, {1, steps}, {.dtype = DType::i64})), -1);
  std::vector<double> out;
  for (int64_t t = 0; t < steps; ++t) out.push_back(lp.select(0, 0).select(0, t).select(0, next[t]).item());
  return out;
}

}  // namespace

TEST_CASE("transformer: decoding with the key/value cache gives the teacher-forced model's scores") {
  for (bool norm_first : {true, false}) {
    manual_seed(3);
    auto model = make_translation_model(transformer_config(false, norm_first));
    model->eval();
    const Source s = source({{4, 7, 9, 5, 11}});
    for (int64_t beam : {1, 3}) {
      const DecodeOptions options{.max_len = 8, .beam_size = beam, .nbest = beam};
      std::vector<Hypothesis> hyps = beam > 1 ? beam_search(*model, s.src, s.lengths, options).front()
                                              : greedy_decode(*model, s.src, s.lengths, options);
      for (const Hypothesis& h : hyps) {
        CAPTURE(norm_first);
        CAPTURE(beam);
        const std::vector<double> forced = forced_log_probs(*model, s, h);
        REQUIRE(forced.size() == h.token_log_probs.size());
        for (size_t t = 0; t < forced.size(); ++t) CHECK(h.token_log_probs[t] == doctest::Approx(forced[t]).epsilon(1e-6));
      }
      // and score_targets (stepping the given tokens) agrees with the search's own scores
      const Hypothesis scored = score_targets(*model, s.src, s.lengths, {hyps.front().tokens}, options).front();
      for (size_t t = 0; t < scored.token_log_probs.size() && hyps.front().finished; ++t)
        CHECK(scored.token_log_probs[t] == doctest::Approx(hyps.front().token_log_probs[t]).epsilon(1e-6));
    }
  }
}

TEST_CASE("transformer: a batch of sentences translates as each sentence alone (greedy and beam)") {
  manual_seed(5);
  auto model = make_translation_model(transformer_config(true));
  model->eval();
  const std::vector<std::vector<int64_t>> sentences = {{4, 5, 6}, {7, 8, 9, 10, 11, 12}, {6}, {12, 4, 9, 9}};
  for (int64_t beam : {1, 4}) {
    const DecodeOptions options{.max_len = 10, .beam_size = beam};
    const Source all = source(sentences);
    std::vector<Hypothesis> batched = decode(*model, all.src, all.lengths, options);
    for (size_t i = 0; i < sentences.size(); ++i) {
      const Source one = source({sentences[i]});
      const Hypothesis alone = decode(*model, one.src, one.lengths, options).front();
      CAPTURE(beam);
      CAPTURE(i);
      CHECK(batched[i].tokens == alone.tokens);
      CHECK(batched[i].score == doctest::Approx(alone.score).epsilon(1e-5));
      REQUIRE(batched[i].attention.size() == alone.attention.size());
      for (size_t t = 0; t < alone.attention.size(); ++t) {
        REQUIRE(batched[i].attention[t].size() == sentences[i].size());  // the padding columns cut
        for (size_t j = 0; j < sentences[i].size(); ++j)
          CHECK(batched[i].attention[t][j] == doctest::Approx(alone.attention[t][j]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("transformer: the attention rows are the last layer's cross-attention over the real source tokens") {
  manual_seed(7);
  auto model = make_translation_model(transformer_config());
  model->eval();
  const Source s = source({{4, 5, 6, 7}, {8, 9}});
  const Hypothesis h = greedy_decode(*model, s.src, s.lengths, {.max_len = 5})[1];
  for (const std::vector<float>& row : h.attention) {
    REQUIRE(row.size() == 2);
    CHECK(row[0] + row[1] == doctest::Approx(1.0).epsilon(1e-5));  // all weight on the 2 real tokens
  }
}

TEST_CASE("transformer: the explain report (transformer_internals) is every layer and head of one pass") {
  manual_seed(11);
  auto made = make_translation_model(transformer_config());
  auto& model = dynamic_cast<TransformerTranslator&>(*made);
  model.eval();
  const Source s = source({{4, 7, 9, 5, 11}});
  const Hypothesis h = greedy_decode(model, s.src, s.lengths, {.max_len = 6}).front();
  const TransformerInternals in = transformer_internals(model, s.src, h.tokens, h.finished);
  const auto steps = static_cast<int64_t>(h.attention.size()), heads = int64_t{2}, d = int64_t{8}, src = int64_t{5};
  REQUIRE(in.layers.size() == 2);
  CHECK(in.heads == heads);
  CHECK(in.head_dim == d);
  for (size_t l = 0; l < in.layers.size(); ++l) {
    CAPTURE(l);
    const TransformerInternals::Layer& layer = in.layers[l];
    REQUIRE(layer.cross_weights.shape() == Shape{heads, steps, src});
    REQUIRE(layer.cross_scores.shape() == Shape{heads, steps, src});
    REQUIRE(layer.cross_queries.shape() == Shape{heads, steps, d});
    REQUIRE(layer.cross_keys.shape() == Shape{heads, src, d});
    REQUIRE(layer.encoder_weights.shape() == Shape{heads, src, src});
    REQUIRE(layer.decoder_weights.shape() == Shape{heads, steps, steps});
    for (int64_t j = 0; j < heads; ++j) {
      for (int64_t t = 0; t < steps; ++t) {
        // each score is q·k/√d of the same pass's query and key, and the weights its softmax
        double total = 0, causal = 0;
        std::vector<double> exps;
        for (int64_t i = 0; i < src; ++i) {
          double qk = 0;
          for (int64_t a = 0; a < d; ++a)
            qk += layer.cross_queries.select(0, j).select(0, t).select(0, a).item() *
                  layer.cross_keys.select(0, j).select(0, i).select(0, a).item();
          const double score = layer.cross_scores.select(0, j).select(0, t).select(0, i).item();
          CHECK(qk / std::sqrt(static_cast<double>(d)) == doctest::Approx(score).epsilon(1e-5));
          exps.push_back(std::exp(score));
          total += exps.back();
        }
        for (int64_t i = 0; i < src; ++i)
          CHECK(layer.cross_weights.select(0, j).select(0, t).select(0, i).item() ==
                doctest::Approx(exps[i] / total).epsilon(1e-5));
        // the causal self-attention: row t over positions 0..t, nothing after
        for (int64_t u = 0; u < steps; ++u) {
          const double w = layer.decoder_weights.select(0, j).select(0, t).select(0, u).item();
          if (u > t) CHECK(w == 0.0);
          causal += w;
        }
        CHECK(causal == doctest::Approx(1.0).epsilon(1e-5));
      }
      for (int64_t i = 0; i < src; ++i)
        CHECK(sum(layer.encoder_weights.select(0, j).select(0, i)).item() == doctest::Approx(1.0).epsilon(1e-5));
    }
  }
  // the search's attention rows are the last layer's head average of the same numbers
  const Tensor average = mean(in.layers.back().cross_weights, {0});  // (T, S)
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < src; ++i)
      CHECK(average.select(0, t).select(0, i).item() == doctest::Approx(h.attention[t][i]).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(transformer_internals(model, source({{4, 5}, {6, 7}}).src, h.tokens, h.finished),
                       doctest::Contains("one sentence's ids (1, S), got (2, 2)"), ShapeError);
}

TEST_CASE("transformer: tied embeddings are one matrix, registered once; untied ones are three") {
  auto tied = make_translation_model(transformer_config(true));
  auto untied = make_translation_model(transformer_config(false));
  auto names = [](const TranslationModel& m) {
    std::vector<std::string> out;
    for (const auto& [name, p] : m.named_parameters())
      if (name.find("embedding") != std::string::npos || name.starts_with("out.")) out.push_back(name);
    return out;
  };
  CHECK(names(*tied) == std::vector<std::string>{"embedding.weight"});
  CHECK(names(*untied) == std::vector<std::string>{"src_embedding.weight", "tgt_embedding.weight", "out.weight"});
  auto& t = dynamic_cast<TransformerTranslator&>(*tied);
  CHECK(t.output_weight().impl() == t.src_embedding().weight.impl());
  CHECK(t.tgt_embedding().weight.impl() == t.src_embedding().weight.impl());
  CHECK(tied->num_parameters() == untied->num_parameters() - 2 * 13 * 16);
  // the padding rows start at 0 (fairseq's init), the others ~ N(0, 1/E)
  const std::vector<float> w = t.src_embedding().weight.to_vector<float>();
  double sum_sq = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (i < 16) CHECK(w[i] == 0.0f);
    else sum_sq += w[i] * w[i];
  }
  CHECK(sum_sq / (w.size() - 16) == doctest::Approx(1.0 / 16).epsilon(0.35));
}

TEST_CASE("transformer: a checkpoint round-trips through the library's Translator, alone or beside a GRU") {
  manual_seed(11);
  TrainConfig config;
  config.model = transformer_config(true);
  config.max_tokens = 6;
  const std::vector<std::string> words = {"ein", "hund", "eine", "katze", "rennt", "schlaeft", "im", "park", "und"};
  const text::Vocab vocab = toy_vocab(words);
  auto model = make_translation_model(config.model);
  const std::string path = temp_path("seqgrad_transformer_roundtrip.safetensors");
  save_checkpoint(path, *model, {config, vocab, vocab, {}});

  const std::vector<std::string> sentences = {"ein hund rennt", "eine katze schlaeft im park"};
  Translator translator({path});
  CHECK(translator.info().config.model.architecture == Architecture::transformer);
  const DecodeOptions options{.max_len = 6, .beam_size = 2};
  std::vector<Translation> loaded = translator.translate(sentences, options);
  model->eval();
  const Ensemble direct(*model);
  std::vector<Translation> expected = translate_batch(direct, translator.info(), sentences, options, 12);
  for (size_t i = 0; i < sentences.size(); ++i) {
    CHECK(loaded[i].error.empty());
    CHECK(loaded[i].hyps.front().tokens == expected[i].hyps.front().tokens);
    CHECK(loaded[i].hyps.front().score == expected[i].hyps.front().score);
  }

  // an ensemble of a Transformer and a GRU over the same vocabularies: mean probabilities
  TrainConfig gru_config = config;
  gru_config.model = Seq2SeqConfig{.src_vocab = 13, .tgt_vocab = 13, .embed_size = 8, .hidden_size = 8,
                                   .num_layers = 1, .dropout = 0};
  auto gru = make_translation_model(gru_config.model);
  const std::string gru_path = temp_path("seqgrad_gru_for_ensemble.safetensors");
  save_checkpoint(gru_path, *gru, {gru_config, vocab, vocab, {}});
  Translator mixed({path, gru_path});
  CHECK(mixed.size() == 2);
  CHECK(mixed.translate(sentences, {.max_len = 6}).front().error.empty());

  // vocabularies that differ: the error names both files
  std::vector<std::string> other_words = words;
  other_words.back() = "oder";
  const text::Vocab other = toy_vocab(other_words);
  const std::string other_path = temp_path("seqgrad_transformer_other_vocab.safetensors");
  save_checkpoint(other_path, *model, {config, other, other, {}});
  const std::string differ =
      "an ensemble needs the same vocabularies, but the source vocabularies of " + path + " and " + other_path + " differ";
  CHECK_THROWS_WITH_AS(Translator({path, other_path}), doctest::Contains(differ.c_str()), IOError);
  for (const std::string& p : {path, gru_path, other_path}) std::filesystem::remove(p);
}

// nn::quantize_dynamic on the translator: every Linear becomes int8 (the attentions' out_proj, the
// feed-forward blocks, an untied output layer); the embeddings, and with them a tied output
// projection, stay float32. The int8 model stays close to the float one, its cached decoding still
// gives its teacher-forced scores, and its quantized checkpoint translates as the model in memory.
TEST_CASE("transformer: int8 (quantize_dynamic) swaps its Linear layers and keeps the search's numbers") {
  for (bool tie : {false, true}) {
    CAPTURE(tie);
    manual_seed(5);
    TrainConfig config;
    config.model = transformer_config(tie);
    auto model = make_translation_model(config.model);
    model->eval();
    const Source s = source({{4, 7, 9, 5, 11}, {6, 8, 12}});
    const Tensor tgt_in = from_vector<int64_t>({1, 5, 9, 4, 1, 6, 7, 8}, {2, 4});
    NoGradGuard no_grad;
    const Tensor float_lp = log_softmax((*model)(s.src, s.lengths, tgt_in), -1);

    const std::vector<std::string> names = nn::quantize_dynamic(*model, {.kinds = {nn::QuantKind::Linear}});
    std::vector<std::string> expected;
    for (int64_t l = 0; l < 2; ++l) {
      for (std::string sub : {"self_attn.out_proj", "linear1", "linear2"})
        expected.push_back("encoder.layers." + std::to_string(l) + "." + sub + ".weight");
      for (std::string sub : {"self_attn.out_proj", "multihead_attn.out_proj", "linear1", "linear2"})
        expected.push_back("decoder.layers." + std::to_string(l) + "." + sub + ".weight");
    }
    if (!tie) expected.push_back("out.weight");
    std::sort(expected.begin(), expected.end());
    std::vector<std::string> got = names;
    std::sort(got.begin(), got.end());
    CHECK(got == expected);
    // the Embedding kind too: a Transformer's embeddings are plain members, refused by name
    CHECK_THROWS_WITH_AS(nn::quantize_dynamic(*model, {.kinds = {nn::QuantKind::Embedding}}),
                         doctest::Contains(tie ? "embedding" : "src_embedding"), ValueError);

    // int8 weights and per-row int8 activations: log-probabilities within a few hundredths
    const Tensor int8_lp = log_softmax((*model)(s.src, s.lengths, tgt_in), -1);
    const double diff = max(abs(sub(int8_lp, float_lp))).item();
    MESSAGE("int8 against float32 log-probabilities, largest difference: ", diff);
    CHECK(diff > 0);  // the products did change
    CHECK(diff < 0.05);

    // the cache and the per-row activation scales: the search's scores are the teacher-forced ones
    const DecodeOptions options{.max_len = 8, .beam_size = 3, .nbest = 3};
    const Source first = source({{4, 7, 9, 5, 11}});
    const std::vector<std::vector<Hypothesis>> beams = beam_search(*model, s.src, s.lengths, options);
    for (const Hypothesis& h : beams.front()) {
      const std::vector<double> forced = forced_log_probs(*model, first, h);
      REQUIRE(forced.size() == h.token_log_probs.size());
      for (size_t t = 0; t < forced.size(); ++t) CHECK(h.token_log_probs[t] == doctest::Approx(forced[t]).epsilon(1e-5));
    }

    // the quantized checkpoint: the Translator loads it and translates as the model in memory
    const text::Vocab vocab = toy_vocab();
    const std::string path = temp_path("seqgrad_transformer_int8.safetensors");
    const CheckpointInfo info{config, vocab, vocab, {}};
    save_quantized_checkpoint(path, *model, info, {.kinds = {nn::QuantKind::Linear}});
    Translator translator({path});
    const std::vector<std::string> sentences = {"w0 w3 w5", "w1 w2 w8 w4"};
    const Ensemble direct(*model);
    const std::vector<Translation> loaded = translator.translate(sentences, options);
    const std::vector<Translation> in_memory = translate_batch(direct, info, sentences, options, 12);
    for (size_t i = 0; i < sentences.size(); ++i) {
      CHECK(loaded[i].hyps.front().tokens == in_memory[i].hyps.front().tokens);
      CHECK(loaded[i].hyps.front().score == in_memory[i].hyps.front().score);
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("transformer: the architecture's errors name the field") {
  Seq2SeqConfig c = transformer_config();
  c.heads = 3;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("model.heads = 3 must divide model.hidden_size = 16"),
                       ValueError);
  c = transformer_config();
  c.embed_size = 8;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("model.embed_size = 8 must equal model.hidden_size = 16"),
                       ValueError);
  c = transformer_config(true);
  c.tgt_vocab = 12;
  CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("model.tie_embeddings shares one matrix"), ValueError);
  CHECK_THROWS_WITH_AS(parse_architecture("lstm"), "architecture 'lstm' is not one of: gru, transformer", ValueError);
}

TEST_CASE("transformer: a GRU checkpoint read as a Transformer (or back) is an error naming the file and the field") {
  TrainConfig config;
  config.model = transformer_config();
  const text::Vocab vocab = toy_vocab();
  TrainConfig gru_config = config;
  gru_config.model = Seq2SeqConfig{.src_vocab = 13, .tgt_vocab = 13, .embed_size = 16, .hidden_size = 16,
                                   .num_layers = 2, .dropout = 0};
  auto gru = make_translation_model(gru_config.model);
  const std::string path = temp_path("seqgrad_gru_as_transformer.safetensors");
  // the GRU's weights under a config that says transformer: the sizes check names the tensor it misses
  save_checkpoint(path, *gru, {config, vocab, vocab, {}});
  const std::string missing = "checkpoint " + path + ": config field model.src_vocab cannot be checked: tensor "
                              "'model.src_embedding.weight' is missing";
  CHECK_THROWS_WITH_AS(read_checkpoint(path), doctest::Contains(missing.c_str()), IOError);
  std::filesystem::remove(path);
}

TEST_CASE("transformer: a run started (init_from) from a checkpoint of the other architecture names the field") {
  const text::Vocab vocab = toy_vocab();
  TrainConfig gru_config;
  gru_config.model = Seq2SeqConfig{.embed_size = 8, .hidden_size = 8, .num_layers = 1, .dropout = 0};
  Trainer gru(gru_config, vocab, vocab);
  const std::string path = temp_path("seqgrad_init_from_gru.safetensors");
  gru.save(path);
  TrainConfig config;
  config.model = transformer_config();
  Trainer transformer(config, vocab, vocab);
  const std::string expected = "init_from " + path + ": it holds a gru translator (config field model.architecture), "
                               "but this run trains a transformer";
  CHECK_THROWS_WITH_AS(transformer.init_weights_from(read_checkpoint(path), path), doctest::Contains(expected.c_str()),
                       IOError);
  std::filesystem::remove(path);
}

TEST_CASE("transformer: a checkpoint whose config the tensors do not back is refused before anything is built") {
  // a hostile or damaged config (within the fields' ranges: an FFN of 2^20 per layer, more layers
  // than the file holds, a wider model) must not size a model: read_checkpoint checks each against
  // the tensors present and names the field
  TrainConfig config;
  config.model = transformer_config();
  const text::Vocab vocab = toy_vocab();
  auto model = make_translation_model(config.model);
  const std::string path = temp_path("seqgrad_transformer_hostile.safetensors");
  struct Case {
    void (*edit)(Seq2SeqConfig&);
    const char* message;
  };
  const Case cases[] = {
      {[](Seq2SeqConfig& m) { m.ffn_size = int64_t{1} << 20; },
       "config field model.ffn_size = 1048576, but tensor 'model.encoder.layers.0.linear1.weight' has shape "
       "(24, 16)"},
      {[](Seq2SeqConfig& m) { m.num_layers = 3; },
       "config field model.num_layers = 3, but the encoder has 2 layer(s) of weights"},
      {[](Seq2SeqConfig& m) { m.hidden_size = m.embed_size = 32; },
       "config field model.hidden_size = 32, but tensor 'model.src_embedding.weight' has shape (13, 16)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    TrainConfig hostile = config;
    c.edit(hostile.model);
    save_checkpoint(path, *model, {hostile, vocab, vocab, {}});
    CHECK_THROWS_WITH_AS(read_checkpoint(path), doctest::Contains(c.message), IOError);
  }
  std::filesystem::remove(path);
}
