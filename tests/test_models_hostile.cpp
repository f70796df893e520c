// Hostile translator checkpoints and corpora (issue 16): every size in a checkpoint's config is
// checked against its tensors before the model is built, the checksum cannot be bypassed by
// renaming its key, non-finite weights are refused, and corpus errors name the file. Issue 28: a
// 200,000-deep vocabulary value, misaligned files under --subset, sentences too long for SentencePiece.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/serialize.h"
#include "models/seq2seq/run.h"
#include "models/text/subword.h"
#include "nn/checkpoint.h"
#include "temp_dir.h"

using namespace seqgrad;
using nlohmann::json;

namespace {

using seqgrad::testing::temp_path;

// A tiny translator checkpoint (V_src 7, V_tgt 8, E 3, H 4, 2 layers), written once.
const std::string& tiny_checkpoint() {
  static const std::string path = [] {
    models::CheckpointInfo info;
    info.src_vocab = text::Vocab::build(std::vector<std::vector<std::string>>{{"a", "b", "c"}});
    info.tgt_vocab = text::Vocab::build(std::vector<std::vector<std::string>>{{"w", "x", "y", "z"}});
    info.config.model = {.src_vocab = info.src_vocab.size(), .tgt_vocab = info.tgt_vocab.size(), .embed_size = 3,
                         .hidden_size = 4, .num_layers = 2};
    info.train_state.values = {{"epoch", 1}, {"batch", 0}, {"step", 5}};
    models::Seq2Seq model(info.config.model);
    std::string p = temp_path("tiny.safetensors");
    models::save_checkpoint(p, model, info);
    return p;
  }();
  return path;
}

// A copy of the tiny checkpoint edited by `edit`, with a correct checksum over the edit unless
// `resign` is false: a forger can recompute a CRC, so the checks behind it must hold on their own.
std::string edited(const std::string& name, const std::function<void(TensorFile&)>& edit, bool resign = true) {
  TensorFile file = load_tensors(tiny_checkpoint());
  edit(file);
  if (resign) file.metadata[nn::kChecksumKey] = nn::checkpoint_checksum(file.tensors, file.metadata);
  std::string path = temp_path(name + ".safetensors");
  save_tensors(path, file.tensors, file.metadata);
  return path;
}

std::string with_model_field(const std::string& name, const std::string& field, json value) {
  return edited(name, [&](TensorFile& f) {
    json config = json::parse(f.metadata.at("config"));
    config["model"][field] = value;
    f.metadata["config"] = config.dump();
  });
}

// read_checkpoint + building the model + load_weights, as `seqgrad translate` does.
void load_translator(const std::string& path, models::ReadCheckpointOptions options = {}) {
  models::LoadedCheckpoint ckpt = models::read_checkpoint(path, options);
  models::Seq2Seq model(ckpt.info.config.model);
  models::load_weights(model, ckpt, path);
}

}  // namespace

TEST_CASE("hostile checkpoint: the tiny checkpoint itself loads") { CHECK_NOTHROW(load_translator(tiny_checkpoint())); }

TEST_CASE("hostile checkpoint: config sizes are checked against the tensors before anything is built") {
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  const Case cases[] = {
      {"embed_size", int64_t{4611686018427387904}, "config field model.embed_size = 4611686018427387904"},
      {"embed_size", int64_t{4287621595510868754}, "config field model.embed_size = 4287621595510868754"},
      {"embed_size", 1000000, "model.embed_size = 1000000, but tensor 'model.encoder.embedding.weight' has shape (7, 3)"},
      {"hidden_size", int64_t{1} << 61, "config field model.hidden_size = 2305843009213693952"},
      {"num_layers", int64_t{1} << 40, "config field model.num_layers = 1099511627776 must be in [1, 64]"},
      {"num_layers", 1, "model.num_layers = 1, but the encoder has 2 layer(s)"},
      {"attention_size", int64_t{1} << 60, "config field model.attention_size = 1152921504606846976"},
      {"src_vocab", 6, "vocabulary sizes 7/8 do not match the model's 6/8"},
      {"pad_id", 9, "model.pad_id = 9"},
      {"embed_size", 0, "config field model.embed_size = 0 must be in [1, 1048576]"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.field);
    CAPTURE(c.value.dump());
    std::string path = with_model_field("config", c.field, c.value);
    auto start = std::chrono::steady_clock::now();
    // every message names the checkpoint, and fails before a byte of the model is allocated
    CHECK_THROWS_WITH_AS(load_translator(path), doctest::Contains(("checkpoint " + path).c_str()), IOError);
    CHECK_THROWS_WITH_AS(load_translator(path), doctest::Contains(c.expected), IOError);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  // scaled dot builds an unused additive module from attention_size: bounded by the tensors too
  std::string scaled = edited("scaled_dot", [](TensorFile& f) {
    json config = json::parse(f.metadata.at("config"));
    config["model"]["attention"] = "scaled_dot";
    config["model"]["attention_size"] = 1000000;  // within the config's range, beyond what the file holds
    f.metadata["config"] = config.dump();
  });
  CHECK_THROWS_WITH_AS(load_translator(scaled), doctest::Contains("model.attention_size = 1000000 sizes an unused "
                                                                  "additive attention of 1000000 x 13 values, more "
                                                                  "than the"), IOError);
  // a zero-size tensor cannot vouch for a huge size: both dimensions are checked
  std::string hollow = edited("zero_size", [](TensorFile& f) {
    f.tensors["model.encoder.rnn.weight_hh_l0"] = empty({0, 100000});
    json config = json::parse(f.metadata.at("config"));
    config["model"]["hidden_size"] = 100000;
    f.metadata["config"] = config.dump();
  });
  CHECK_THROWS_WITH_AS(load_translator(hollow), doctest::Contains("config field model.hidden_size = 100000, but tensor "
                                                                  "'model.encoder.rnn.weight_hh_l0' has shape (0, "
                                                                  "100000) (dimension 0 should be 300000)"), IOError);
  // the trainer's max_tokens sizes decoding buffers (2 * max_tokens + 10 steps)
  std::string tokens = edited("max_tokens", [](TensorFile& f) {
    json config = json::parse(f.metadata.at("config"));
    config["max_tokens"] = int64_t{1} << 62;
    f.metadata["config"] = config.dump();
  });
  CHECK_THROWS_WITH_AS(load_translator(tokens), doctest::Contains("config field max_tokens = 4611686018427387904 "
                                                                  "must be in [1, 1048576]"), IOError);
}

TEST_CASE("hostile checkpoint: metadata errors name the checkpoint") {
  std::string dup = edited("duplicate_token", [](TensorFile& f) {
    json vocab = json::parse(f.metadata.at("src_vocab"));
    vocab["tokens"][5] = vocab["tokens"][4];
    f.metadata["src_vocab"] = vocab.dump();
  });
  CHECK_THROWS_WITH_AS(load_translator(dup), doctest::Contains(("checkpoint " + dup + ": bad metadata: ").c_str()),
                       IOError);
  CHECK_THROWS_WITH_AS(load_translator(dup), doctest::Contains("appears twice"), IOError);
}

TEST_CASE("hostile checkpoint: a missing checksum needs the explicit option; a renamed key never loads") {
  // one flipped bit in the key's name: "seqgrad.crc32" -> "seqgrad.crc33"
  std::string flipped = edited("flipped_key", [](TensorFile& f) {
    f.metadata["seqgrad.crc33"] = f.metadata.at(nn::kChecksumKey);
    f.metadata.erase(nn::kChecksumKey);
    f.tensors.at("model.decoder.out.bias").fill_(1.0);  // ... and altered weights
  }, /*resign=*/false);
  for (bool allow : {false, true})
    CHECK_THROWS_WITH_AS(load_translator(flipped, {.allow_missing_checksum = allow}),
                         doctest::Contains("unknown metadata key 'seqgrad.crc33' (the checksum's key, damaged?)"),
                         IOError);
  // the entry removed: refused, as written by a version that always stores one; loads when allowed
  std::string removed = edited("no_checksum", [](TensorFile& f) { f.metadata.erase(nn::kChecksumKey); }, false);
  CHECK_THROWS_WITH_AS(load_translator(removed), doctest::Contains("has no checksum ('seqgrad.crc32'): it was written "
                                                                   "by a seqgrad that always stores one"), IOError);
  CHECK_THROWS_WITH_AS(load_translator(removed), doctest::Contains("pass --allow-missing-checksum"), IOError);
  CHECK_NOTHROW(load_translator(removed, {.allow_missing_checksum = true}));
  // a checkpoint from before checksums (no format_version either) loads only when allowed
  std::string old = edited("old_format", [](TensorFile& f) {
    f.metadata.erase(nn::kChecksumKey);
    f.metadata.erase("format_version");
  }, false);
  CHECK_THROWS_WITH_AS(load_translator(old), doctest::Contains("written before seqgrad stored one"), IOError);
  CHECK_NOTHROW(load_translator(old, {.allow_missing_checksum = true}));
  // a format version that is not a number, or newer than this build's, is named
  std::string garbled = edited("version_x", [](TensorFile& f) { f.metadata["format_version"] = "x"; });
  CHECK_THROWS_WITH_AS(load_translator(garbled), doctest::Contains("format_version 'x' is not a version number"),
                       IOError);
  std::string newer = edited("version_9", [](TensorFile& f) { f.metadata["format_version"] = "9"; });
  CHECK_THROWS_WITH_AS(load_translator(newer), doctest::Contains("format version 9 was written by a newer seqgrad; "
                                                                 "this build reads versions up to 3"), IOError);
}

TEST_CASE("hostile checkpoint: non-finite weights are refused, naming the tensor") {
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    std::string path = edited("nonfinite", [&](TensorFile& f) {
      Tensor& w = f.tensors.at("model.decoder.out.weight");
      w.data<float>()[5] = static_cast<float>(bad);
    });
    CHECK_THROWS_WITH_AS(load_translator(path), doctest::Contains("tensor 'decoder.out.weight' (8, 15) holds 1 "
                                                                  "non-finite value(s)"), IOError);
    CHECK_THROWS_WITH_AS(load_translator(path), doctest::Contains("at flat index 5"), IOError);
  }
}

// ---- corpora ------------------------------------------------------------------------------------

namespace {
void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
}  // namespace

TEST_CASE("hostile corpus: a directory, CR-only line endings and empty splits are errors naming the file") {
  const std::string dir = temp_path("corpus_dir");
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH_AS(text::read_lines(dir), doctest::Contains(("'" + dir + "'").c_str()), IOError);
  CHECK_THROWS_WITH_AS(text::read_lines(dir), doctest::Contains("Is a directory"), IOError);

  const std::string mac = temp_path("mac.txt");
  write_text(mac, "ein mann\rzwei hunde\r");
  CHECK_THROWS_WITH_AS(text::read_lines(mac), doctest::Contains(("'" + mac + "' ends its lines with CR alone").c_str()),
                       IOError);

  // A Multi30k-shaped data folder whose test2016 has only tab-only lines: refused before training.
  const std::string data = temp_path("data");
  std::filesystem::create_directories(data + "/multi30k");
  for (const std::string split : {"train", "val"})
    for (const std::string lang : {"de", "en"}) write_text(data + "/multi30k/" + split + "." + lang, "ein mann\n");
  write_text(data + "/multi30k/test2016.de", "\t\t\n\t\n");
  write_text(data + "/multi30k/test2016.en", "\t\n\t\t\t\n");
  models::TrainConfig config;
  config.data_dir = data;
  CHECK_THROWS_WITH_AS(models::load_corpora(config),
                       doctest::Contains(("data: split test2016 has no usable sentence pair in " + data +
                                          "/multi30k/test2016.de and " + data + "/multi30k/test2016.en")
                                             .c_str()),
                       IOError);
  write_text(data + "/multi30k/train.de", "");  // an empty train file
  write_text(data + "/multi30k/train.en", "");
  CHECK_THROWS_WITH_AS(models::load_corpora(config), doctest::Contains("split train has no usable sentence pair"),
                       IOError);
  std::filesystem::remove_all(data);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(mac);
}

// Issue 28: nlohmann's dump() recursed once per level of an untrusted value; a vocabulary's error
// messages now show a value by its type and a bounded prefix, however deep it is.
TEST_CASE("hostile vocabulary JSON: a 200,000-deep value is a clean error, never a recursion") {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  for (const std::string& text :
       {R"({"format":"seqgrad.vocab","version":)" + deep + "}",
        R"({"format":"seqgrad.vocab","version":1,"tokens":["<pad>","<bos>","<eos>","<unk>",)" + deep + "]}",
        R"({"format":"seqgrad.vocab","version":2,"kind":)" + deep + R"(,"model":""})"}) {
    const json value = json::parse(text);  // unlimited on purpose: from_json must not rely on a caller's limit
    CHECK_THROWS_WITH_AS(text::Vocab::from_json(value), doctest::Contains("an array of 1 item"), ValueError);
  }
  CHECK_THROWS_WITH_AS(parse_json(deep, "checkpoint x: src_vocab"),
                       "checkpoint x: src_vocab: JSON nested deeper than 64 levels", IOError);
}

// Probe finding 2 of issue 28: a pass that stops at max_pairs (--subset) still reads both files to
// their ends, so files of different line counts are refused whatever the subset.
TEST_CASE("hostile corpus: stopping early (--subset) still refuses misaligned files") {
  std::string de, en;
  for (int i = 0; i < 2000; ++i) de += "ein mann " + std::to_string(i) + "\n";
  for (int i = 0; i < 1999; ++i) en += "a man " + std::to_string(i) + "\n";
  const std::string src = temp_path("subset.de"), tgt = temp_path("subset.en");
  write_text(src, de);
  write_text(tgt, en);
  text::CorpusFiles files;
  files.src = src, files.tgt = tgt;
  const std::string message = "'" + src + "' has 2000 lines but '" + tgt + "' has 1999";
  CHECK_THROWS_WITH_AS(text::index_corpus(files, {.buffer_pairs = 64, .max_pairs = 300}),
                       doctest::Contains(message.c_str()), IOError);
  CHECK_THROWS_WITH_AS(text::read_corpus(files, {}, 300), doctest::Contains(message.c_str()), IOError);
  write_text(tgt, en + "a man 1999\n");  // aligned: the subset reads its 300 pairs, the check costs nothing else
  text::CorpusIndex index = text::index_corpus(files, {.buffer_pairs = 64, .max_pairs = 300});
  CHECK(index.pairs == 300);
  const text::ParallelCorpus subset = text::read_corpus(files, {}, 300);
  REQUIRE(subset.pairs.size() == 300);
  CHECK(subset.pairs.back().src == "ein mann 299");
  std::filesystem::remove(src);
  std::filesystem::remove(tgt);
}

// Probe finding 3 of issue 28: SentencePiece drops sentences over its length limit and, with none
// left, fails with "Internal: ... [!sentences_.empty()]"; the error says what happened and what to do.
TEST_CASE("hostile corpus: no sentence short enough for the subword trainer") {
  if (!text::subword_supported()) {
    MESSAGE("SKIP: this build has no SentencePiece");
    return;
  }
  std::string long_line;
  while (long_line.size() <= 4192) long_line += "Ein Mann fährt Fahrrad. ";
  int left = 50;
  text::SentenceSource next = [&](std::string& sentence) {
    if (left-- == 0) return false;
    sentence = long_line;
    return true;
  };
  CHECK_THROWS_WITH_AS(text::SubwordModel::train(next, {.kind = text::SubwordKind::unigram, .vocab_size = 100}),
                       "subword vocabulary unigram:100: no training sentence is short enough for the SentencePiece "
                       "trainer, which skips sentences longer than 4192 bytes; split the corpus into shorter lines "
                       "(one sentence each), or use --vocab word",
                       ValueError);
}
