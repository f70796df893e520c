// Subword vocabularies (models/text/subword.h, Vocab over a SentencePiece model): the spec parser,
// merging pieces into words, training on a tiny corpus, encode/decode, the JSON (base64) round
// trip, too large a vocabulary, and the translator round trip: train, save, load, translate to the
// same detokenised, cased text. Old word-level checkpoints still load. The SentencePiece tests are
// skipped in a build without it.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/trainer.h"
#include "models/text/subword.h"
#include "nn/checkpoint.h"
#include "temp_dir.h"

using namespace seqgrad;

namespace {

const bool kNoSentencePiece = !text::subword_supported();

// 150 German/English pairs from a tiny grammar, cased and punctuated.
std::vector<text::SentencePair> toy_text() {
  const std::vector<std::pair<std::string, std::string>> subjects = {
      {"Der Hund", "The dog"}, {"Die Katze", "The cat"}, {"Ein Mann", "A man"}, {"Eine Frau", "A woman"},
      {"Das Mädchen", "The girl"}, {"Ein Junge", "A boy"}};
  const std::vector<std::pair<std::string, std::string>> verbs = {
      {"läuft", "runs"}, {"schläft", "sleeps"}, {"spielt", "plays"}, {"wartet", "waits"}, {"tanzt", "dances"}};
  const std::vector<std::pair<std::string, std::string>> places = {
      {"im Park", "in the park"}, {"auf der Straße", "on the street"}, {"zu Hause", "at home"},
      {"am Strand", "on the beach"}, {"im Schnee", "in the snow"}};
  std::vector<text::SentencePair> pairs;
  for (const auto& [s_de, s_en] : subjects)
    for (const auto& [v_de, v_en] : verbs)
      for (const auto& [p_de, p_en] : places) pairs.push_back({s_de + " " + v_de + " " + p_de + ".", s_en + " " + v_en + " " + p_en + "."});
  return pairs;
}

models::TrainConfig toy_config(const std::string& vocab) {
  models::TrainConfig c;
  c.vocab = vocab;
  c.min_freq = 1;
  c.model = {.embed_size = 16, .hidden_size = 16, .num_layers = 1, .dropout = 0.0};
  c.batch_size = 8, c.lr = 0.02, c.step_size = 100, c.gamma = 1.0, c.label_smoothing = 0.0, c.clip = 1.0;
  c.seed = 3;
  return c;
}

using seqgrad::testing::temp_path;

// Greedy translation of `sentence`, detokenised by the target vocabulary.
std::string translate(models::TranslationModel& model, const text::Vocab& src, const text::Vocab& tgt, const std::string& sentence) {
  std::vector<int64_t> ids = models::encode_sentence(src, src.tokenize(sentence), 0);
  const auto n = static_cast<int64_t>(ids.size());
  Tensor x = from_vector(ids, {1, n}, {.dtype = DType::i64});
  Tensor lengths = from_vector(std::vector<int64_t>{n}, {1}, {.dtype = DType::i64});
  model.eval();
  NoGradGuard no_grad;
  models::Hypothesis h = models::greedy_decode(model, x, lengths, {.max_len = 20}).at(0);
  return tgt.detokenize(tgt.decode(h.tokens));
}

}  // namespace

TEST_CASE("subword: --vocab specs parse, and bad ones name the flag") {
  text::SubwordOptions o = text::parse_subword_spec("bpe:8000", "--vocab");
  CHECK(o.kind == text::SubwordKind::bpe);
  CHECK(o.vocab_size == 8000);
  CHECK(text::subword_spec(text::parse_subword_spec("unigram:300", "--vocab")) == "unigram:300");
  for (const char* bad : {"unigram", "unigram:", "unigram:8k", "wordpiece:8000", "bpe:-5", "bpe:4", ":8000"})
    CHECK_THROWS_WITH_AS(text::parse_subword_spec(bad, "--vocab"), doctest::Contains("--vocab"), ValueError);
}

TEST_CASE("subword: pieces merge into words at '▁', special tokens stay words") {
  // "▁Ein ▁Bo ston ▁Terrier . <eos>": "." continues "Terrier" (no ▁), <eos> is its own word
  const std::vector<std::string> pieces = {"\u2581Ein", "\u2581Bo", "ston", "\u2581Terrier", ".", "<eos>"};
  text::MergedPieces m = text::merge_pieces(pieces);
  CHECK(m.words == std::vector<std::string>{"Ein", "Boston", "Terrier.", "<eos>"});
  CHECK(m.word_of_piece == std::vector<int64_t>{0, 1, 1, 2, 2, 3});
  // word-level tokens: each its own word
  CHECK(text::merge_pieces(std::vector<std::string>{"a", "dog", "."}).words.size() == 3);
}

TEST_CASE("subword: a model trained on a tiny corpus encodes cased pieces and decodes to the same text" *
          doctest::skip(kNoSentencePiece)) {
  std::vector<text::SentencePair> pairs = toy_text();
  models::Vocabularies v = models::build_vocabularies(toy_config("bpe:50"), pairs);
  REQUIRE(v.src.is_subword());
  CHECK(v.src.size() == 50);
  CHECK(v.src.tokens()[0] == "<pad>");
  CHECK(v.src.tokens()[3] == "<unk>");
  for (const auto& p : pairs) {
    std::vector<std::string> pieces = v.src.tokenize(p.src);
    CHECK(v.src.detokenize(pieces) == p.src);  // cased, punctuation attached: exactly the input
    std::vector<int64_t> ids = v.src.encode(pieces);
    CHECK(std::find(ids.begin(), ids.end(), text::Vocab::kUnk) == ids.end());
    CHECK(v.src.decode(ids) == pieces);
  }
  CHECK(v.tgt.tokenize("The dog runs.").front().starts_with("\u2581"));
  // BLEU's words: lower-cased and split like the word tokenizer's
  CHECK(v.tgt.words(v.tgt.tokenize("The dog runs.")) == std::vector<std::string>{"the", "dog", "runs", "."});
  // the JSON (base64 of the model) round trip gives the same vocabulary and pieces
  text::Vocab back = text::Vocab::from_json(v.tgt.to_json());
  CHECK(back.tokens() == v.tgt.tokens());
  CHECK(back.tokenize("A woman waits at home.") == v.tgt.tokenize("A woman waits at home."));
  // joint: one model for both languages
  models::TrainConfig joint = toy_config("bpe:80");
  joint.joint_vocab = true;
  models::Vocabularies j = models::build_vocabularies(joint, pairs);
  CHECK(j.src.tokens() == j.tgt.tokens());
  CHECK(j.src.detokenize(j.src.tokenize("Die Katze schläft zu Hause.")) == "Die Katze schläft zu Hause.");
}

TEST_CASE("subword: a vocabulary larger than the text supports, and a damaged model, are clear errors" *
          doctest::skip(kNoSentencePiece)) {
  CHECK_THROWS_WITH_AS(models::build_vocabularies(toy_config("unigram:8000"), toy_text()),
                       doctest::Contains("subword vocabulary unigram:8000: the training text supports at most"),
                       ValueError);
  CHECK_THROWS_WITH_AS(models::build_vocabularies(toy_config("unigram:10"), toy_text()),
                       doctest::Contains("subword vocabulary unigram:10: the training text has"), ValueError);
  CHECK_THROWS_WITH_AS(models::build_vocabularies(toy_config("unigram:100"), {}),
                       doctest::Contains("no training sentence"), ValueError);
  nlohmann::json j = {{"format", "seqgrad.vocab"}, {"version", 2}, {"kind", "sentencepiece"}, {"model", "AAA"}};
  CHECK_THROWS_WITH_AS(text::Vocab::from_json(j), doctest::Contains("not base64"), ValueError);
  j["model"] = "QUJD";  // "ABC": base64, but no model
  CHECK_THROWS_WITH_AS(text::Vocab::from_json(j), doctest::Contains("does not load"), ValueError);
  j["model"] = "QU?D";
  CHECK_THROWS_WITH_AS(text::Vocab::from_json(j), doctest::Contains("character '?'"), ValueError);
}

TEST_CASE("subword: train, save, load, translate: the same detokenised, cased output" *
          doctest::skip(kNoSentencePiece)) {
  std::vector<text::SentencePair> pairs = toy_text();
  models::TrainConfig config = toy_config("bpe:50");
  models::Vocabularies v = models::build_vocabularies(config, pairs);
  text::EncodedCorpus corpus = text::encode_pairs(models::tokenize_text(pairs, v.src, v.tgt), v.src, v.tgt);
  models::Trainer trainer(config, v.src, v.tgt);
  for (int epoch = 0; epoch < 12; ++epoch) trainer.train_epoch(corpus);
  const std::string sentence = "Der Hund schläft im Park.";
  const std::string before = translate(trainer.model(), v.src, v.tgt, sentence);
  CHECK(before == "The dog sleeps in the park.");  // the toy grammar is learnt: cased, detokenised
  const std::string path = temp_path("seqgrad_subword_roundtrip.safetensors");
  trainer.save(path);
  models::LoadedCheckpoint loaded = models::read_checkpoint(path);
  CHECK(loaded.info.config.vocab == "bpe:50");
  REQUIRE(loaded.info.src_vocab.is_subword());
  CHECK(loaded.info.tgt_vocab.tokens() == v.tgt.tokens());
  models::Seq2Seq model(loaded.info.config.model);
  models::load_weights(model, loaded, path);
  CHECK(translate(model, loaded.info.src_vocab, loaded.info.tgt_vocab, sentence) == before);
  std::filesystem::remove(path);
}

TEST_CASE("subword: a word-level checkpoint written before --vocab still loads as words") {
  std::vector<text::SentencePair> pairs = toy_text();
  models::TrainConfig config = toy_config("word");
  models::Vocabularies v = models::build_vocabularies(config, pairs);
  CHECK_FALSE(v.src.is_subword());
  config.model.src_vocab = v.src.size(), config.model.tgt_vocab = v.tgt.size();
  models::Seq2Seq model(config.model);
  // The metadata of a checkpoint from before subword vocabularies: no "vocab" or "joint_vocab".
  std::map<std::string, std::string> metadata = models::checkpoint_metadata({config, v.src, v.tgt, StateDict({}, {{"epoch", 0}})});
  nlohmann::json old_config = nlohmann::json::parse(metadata["config"]);
  old_config.erase("vocab");
  old_config.erase("joint_vocab");
  metadata["config"] = old_config.dump();
  CHECK(nlohmann::json::parse(metadata["src_vocab"])["version"] == 1);  // words: the format as before
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : model.state_dict()) tensors["model." + name] = t;
  metadata[nn::kChecksumKey] = nn::checkpoint_checksum(tensors, metadata);
  const std::string path = temp_path("seqgrad_old_word_checkpoint.safetensors");
  save_tensors(path, tensors, metadata);
  models::LoadedCheckpoint loaded = models::read_checkpoint(path);
  CHECK(loaded.info.config.vocab == "word");
  CHECK_FALSE(loaded.info.config.joint_vocab);
  CHECK_FALSE(loaded.info.src_vocab.is_subword());
  CHECK(loaded.info.src_vocab.tokenize("Der Hund läuft.") == std::vector<std::string>{"der", "hund", "läuft", "."});
  CHECK(loaded.info.tgt_vocab.detokenize(std::vector<std::string>{"the", "dog", "runs", "."}) == "the dog runs.");
  std::filesystem::remove(path);
}

TEST_CASE("subword: a checkpoint config naming an unknown vocabulary is refused") {
  models::TrainConfig config = toy_config("word");
  nlohmann::json j = config.to_json();
  j["vocab"] = "wordpiece:100";
  CHECK_THROWS_WITH_AS(models::TrainConfig::from_json(j), doctest::Contains("config field vocab = \"wordpiece:100\" expected unigram:SIZE"), ValueError);
}
