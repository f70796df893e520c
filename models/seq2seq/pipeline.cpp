#include "models/seq2seq/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/serialize.h"
#include "models/seq2seq/quantized_checkpoint.h"
#include "nn/checkpoint.h"
#include "models/text/subword.h"
#include "models/text/tokenizer.h"

namespace seqgrad::models {

nlohmann::json TrainConfig::to_json() const {
  return {{"preset", preset},       {"corpus", corpus},         {"src_lang", src_lang},
          {"tgt_lang", tgt_lang},   {"data_dir", data_dir},     {"train_subset", train_subset},
          {"max_tokens", max_tokens}, {"min_freq", min_freq},   {"batch_size", batch_size},
          {"epochs", epochs},       {"lr", lr},                 {"step_size", step_size},
          {"gamma", gamma},         {"label_smoothing", label_smoothing}, {"clip", clip},
          {"seed", seed},           {"amp", amp},               {"model", model.to_json()},
          {"vocab", vocab},         {"joint_vocab", joint_vocab}};
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  TrainConfig c;
  try {
    c.preset = j.at("preset");
    c.corpus = j.at("corpus");
    c.src_lang = j.at("src_lang");
    c.tgt_lang = j.at("tgt_lang");
    c.data_dir = j.at("data_dir");
    c.train_subset = j.at("train_subset");
    c.max_tokens = j.at("max_tokens");
    c.min_freq = j.at("min_freq");
    c.batch_size = j.at("batch_size");
    c.epochs = j.at("epochs");
    c.lr = j.at("lr");
    c.step_size = j.at("step_size");
    c.gamma = j.at("gamma");
    c.label_smoothing = j.at("label_smoothing");
    c.clip = j.at("clip");
    c.seed = j.at("seed");
    c.amp = j.value("amp", std::string("off"));  // checkpoints from before --amp trained in float32
    c.vocab = j.value("vocab", std::string("word"));  // checkpoints from before --vocab are word-level
    c.joint_vocab = j.value("joint_vocab", false);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(fmt::format("train config: {}", e.what()));
  }
  if (c.vocab != "word") text::parse_subword_spec(c.vocab, "train config: vocab");  // validates it
  c.model = Seq2SeqConfig::from_json(j.at("model"));
  return c;
}

std::vector<std::string> preset_names() { return {"default", "seed", "d2l"}; }

TrainConfig preset(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  if (name == "seed") {  // the seed documents' hyper-parameters
    // on subword units: one 8000-piece unigram model for both languages; 32 pieces hold what 20
    // words did (Multi30k: 15.2 German and 14.4 English pieces per sentence against 12.6 and 13.1 words)
    c.model = {.embed_size = 256, .hidden_size = 512, .num_layers = 2, .dropout = 0.1};
    c.batch_size = 64, c.max_tokens = 32, c.lr = 0.005, c.epochs = 30, c.step_size = 10, c.gamma = 0.1;
    c.label_smoothing = 0.1, c.clip = 1.0, c.vocab = "unigram:8000", c.joint_vocab = true;
  } else if (name == "d2l") {  // d2l.ai chapter 10: 600 fra-eng pairs, 10 steps, E = H = 32
    c.corpus = "fra-eng", c.src_lang = "en", c.tgt_lang = "fr", c.train_subset = 600, c.min_freq = 2, c.vocab = "word";
    c.model = {.embed_size = 32, .hidden_size = 32, .num_layers = 2, .dropout = 0.1, .deep_output = false};
    c.batch_size = 64, c.max_tokens = 10, c.lr = 0.005, c.epochs = 250, c.step_size = 1000, c.gamma = 1.0;
    c.label_smoothing = 0.0;
  } else if (name == "default") {  // about ten minutes on two cores
    // 4000 unigram pieces per language: a target vocabulary smaller than the 4588 words (min_freq 3)
    // pays for sentences about 15% longer in pieces, so an epoch costs about what it did on words
    c.model = {.embed_size = 128, .hidden_size = 256, .num_layers = 1, .dropout = 0.2, .deep_output = true};
    c.batch_size = 64, c.max_tokens = 32, c.lr = 0.003, c.epochs = 6, c.step_size = 4, c.gamma = 0.3;
    c.label_smoothing = 0.1, c.clip = 1.0, c.min_freq = 3, c.vocab = "unigram:4000";
  } else {
    throw ValueError(fmt::format("unknown preset '{}' (choose one of: default, seed, d2l)", name));
  }
  return c;
}

namespace {

text::ParallelCorpus read_split(const TrainConfig& c, const std::string& split) {
  auto file = [&](const std::string& lang) { return fmt::format("{}/{}/{}.{}", c.data_dir, c.corpus, split, lang); };
  std::error_code ec;  // a symlink loop or a denied folder: reading the file below names the reason
  for (const std::string& lang : {c.src_lang, c.tgt_lang})
    SG_CHECK_IO(std::filesystem::exists(file(lang), ec) || ec, "data: missing file {} (corpus {}, split {}, language {})",
                file(lang), c.corpus, split, lang);
  text::ParallelCorpus corpus = text::read_parallel(file(c.src_lang), file(c.tgt_lang));
  // Every split is checked here, before training: an empty test2016 must not surface after it.
  SG_CHECK_IO(!corpus.pairs.empty(), "data: split {} has no usable sentence pair in {} and {} ({})", split,
              file(c.src_lang), file(c.tgt_lang), corpus.report.summary());
  return corpus;
}

}  // namespace

Corpora load_corpora(const TrainConfig& c, Splits splits) {
  SG_CHECK_IO(std::filesystem::is_directory(c.data_dir), "data: the data folder '{}' does not exist (it should hold "
              "multi30k/ and fra-eng/)", c.data_dir);
  Corpora out;
  std::vector<text::SentencePair> train, valid, test;
  if (c.corpus == "multi30k") {
    bool all = splits == Splits::all;
    text::ParallelCorpus tr = all ? read_split(c, "train") : text::ParallelCorpus{},
                         va = all ? read_split(c, "val") : text::ParallelCorpus{}, te = read_split(c, "test2016");
    out.report = fmt::format("train: {}\nval: {}\ntest2016: {}", tr.report.summary(), va.report.summary(),
                             te.report.summary());
    train = std::move(tr.pairs), valid = std::move(va.pairs), test = std::move(te.pairs);
  } else if (c.corpus == "fra-eng") {
    std::string path = c.data_dir + "/fra-eng/fra.txt";
    SG_CHECK_IO(std::filesystem::exists(path), "data: missing file {}", path);
    bool en_fr = c.src_lang == "en" && c.tgt_lang == "fr";
    SG_CHECK_VALUE(en_fr || (c.src_lang == "fr" && c.tgt_lang == "en"),
                   "data: fra-eng has the languages en and fr, got {}->{}", c.src_lang, c.tgt_lang);
    text::ParallelCorpus all = text::read_tsv_pairs(path, en_fr ? 0 : 1, en_fr ? 1 : 0);
    out.report = all.report.summary();
    // held-out tail: every 50th pair goes to valid/test, so all lengths are represented
    for (size_t i = 0; i < all.pairs.size(); ++i) {
      auto& dst = i % 50 == 7 ? valid : i % 50 == 23 ? test : train;
      dst.push_back(std::move(all.pairs[i]));
    }
  } else {
    throw ValueError(fmt::format("data: unknown corpus '{}' (multi30k or fra-eng)", c.corpus));
  }
  // Every split read is checked before training starts (an empty test set found only after the
  // last epoch would waste the run); test_only reads, and so checks, the test split alone.
  for (const auto& [split, pairs] : {std::pair{"train", &train}, {"valid", &valid}, {"test", &test}})
    SG_CHECK_IO(!pairs->empty() || (splits == Splits::test_only && std::string(split) != "test"),
                "data: the {} split of {} is empty ({})", split, c.corpus, out.report);
  if (c.train_subset > 0 && c.train_subset < static_cast<int64_t>(train.size())) train.resize(c.train_subset);
  for (const auto& p : test) {
    out.test_sources.push_back(p.src);
    out.test_references.push_back(p.tgt);
  }
  out.train_text = std::move(train), out.valid_text = std::move(valid), out.test_text = std::move(test);
  return out;
}

namespace {

// One side (or, joint, both sides) of the training text, one sentence per call, for SentencePiece.
text::SentenceSource sentences_of(std::span<const text::SentencePair> pairs, bool src, bool tgt) {
  const std::size_t per_pair = std::size_t{src} + std::size_t{tgt};  // joint: src, tgt of each pair in turn
  return [pairs, src, tgt, per_pair, next = std::size_t{0}](std::string& sentence) mutable {
    if (next >= pairs.size() * per_pair) return false;
    const text::SentencePair& pair = pairs[next / per_pair];
    sentence = src && (!tgt || next % 2 == 0) ? pair.src : pair.tgt;
    ++next;
    return true;
  };
}

}  // namespace

Vocabularies build_vocabularies(const TrainConfig& c, std::span<const text::SentencePair> train_text) {
  if (c.vocab == "word") {
    std::vector<text::TokenizedPair> words = text::tokenize_pairs(train_text);
    return {text::Vocab::build(text::source_side(words), {.min_freq = c.min_freq}),
            text::Vocab::build(text::target_side(words), {.min_freq = c.min_freq})};
  }
  text::SubwordOptions options = text::parse_subword_spec(c.vocab, "--vocab");
  options.max_sentences = kSubwordSampleSentences;
  options.seed = c.seed;
  auto train = [&](bool src, bool tgt) {
    return text::Vocab::from_subword(text::SubwordModel::train(sentences_of(train_text, src, tgt), options));
  };
  if (c.joint_vocab) {
    text::Vocab joint = train(true, true);
    return {joint, joint};
  }
  return {train(true, false), train(false, true)};
}

std::vector<text::TokenizedPair> tokenize_text(std::span<const text::SentencePair> pairs, const text::Vocab& src_vocab,
                                               const text::Vocab& tgt_vocab) {
  std::vector<text::TokenizedPair> out;
  out.reserve(pairs.size());
  for (const text::SentencePair& p : pairs) out.push_back({src_vocab.tokenize(p.src), tgt_vocab.tokenize(p.tgt)});
  return out;
}

void tokenize_corpora(Corpora& data, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab) {
  data.train = tokenize_text(data.train_text, src_vocab, tgt_vocab);
  data.valid = tokenize_text(data.valid_text, src_vocab, tgt_vocab);
  data.test = tokenize_text(data.test_text, src_vocab, tgt_vocab);
}

TensorBatch to_tensors(const text::Batch& b, Device device) {
  TensorOptions i64{.dtype = DType::i64, .device = device};
  TensorBatch t;
  t.src = from_vector(b.src, {b.batch, b.src_len_max}, i64);
  t.src_lengths = from_vector(b.src_lengths, {b.batch}, i64);
  t.tgt_in = from_vector(b.tgt_in, {b.batch, b.tgt_len_max}, i64);
  t.tgt_out = from_vector(b.tgt_out, {b.batch, b.tgt_len_max}, i64);
  for (int64_t n : b.tgt_lengths) t.target_tokens += n;
  t.index = b.index;
  return t;
}

std::vector<int64_t> encode_sentence(const text::Vocab& vocab, const std::vector<std::string>& tokens,
                                     int64_t max_tokens) {
  std::vector<int64_t> ids = vocab.encode(tokens);
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(max_tokens);
  ids.push_back(text::Vocab::kEos);
  return ids;
}

namespace {

// Metadata of translator checkpoints. kFormatVersion 2: always written with a checksum, so a
// version-2 file without one has been altered.
constexpr const char* kFormatVersion = "2";
const std::set<std::string> kMetadataKeys = {"format", "format_version", "config", "src_vocab", "tgt_vocab",
                                             "train_state", "quantized", nn::kChecksumKey};
// No translator needs more; a larger value in a checkpoint's config is damage (decoding sizes
// buffers by it: 2 * max_tokens + 10 steps).
constexpr int64_t kMaxTokensLimit = int64_t{1} << 20;

}  // namespace

std::map<std::string, std::string> checkpoint_metadata(const CheckpointInfo& info) {
  return {
      {"format", "seqgrad.seq2seq"},
      {"format_version", kFormatVersion},
      {"config", info.config.to_json().dump()},
      {"src_vocab", info.src_vocab.to_json().dump()},
      {"tgt_vocab", info.tgt_vocab.to_json().dump()},
      {"train_state", info.train_state.dump()},
  };
}

void save_checkpoint(const std::string& path, const Seq2Seq& model, const CheckpointInfo& info,
                     const std::map<std::string, Tensor>& extra) {
  std::map<std::string, Tensor> tensors = extra;
  for (auto& [name, t] : model.state_dict()) tensors["model." + name] = t;
  std::map<std::string, std::string> metadata = checkpoint_metadata(info);
  metadata[nn::kChecksumKey] = nn::checkpoint_checksum(tensors, metadata);  // read_checkpoint verifies it
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  save_tensors(path, tensors, metadata);
}

namespace {

// The checksum must be present and match. A file without one is accepted only when the caller
// allows it: then either a checkpoint from before checksums, or one whose checksum entry was
// damaged (its key renamed by a flipped bit shows as a key no version writes).
void verify_checksum(const CheckpointFile& checkpoint, const std::string& path, const ReadCheckpointOptions& options) {
  const TensorFile& file = checkpoint.file;
  if (auto stored = file.metadata.find(nn::kChecksumKey); stored != file.metadata.end()) {
    std::string computed = nn::checkpoint_checksum(checksummed_tensors(checkpoint), file.metadata);
    SG_CHECK_IO(stored->second == computed, "checkpoint {} is corrupted: checksum {} does not match its contents ({})",
                path, stored->second, computed);
    return;
  }
  for (const auto& [key, value] : file.metadata)
    SG_CHECK_IO(kMetadataKeys.count(key), "checkpoint {} is corrupted: its checksum entry '{}' is missing and it has "
                "an unknown metadata key '{}' (the checksum's key, damaged?)", path, nn::kChecksumKey, key);
  auto version = file.metadata.find("format_version");
  const bool writes_checksums = version != file.metadata.end();
  SG_CHECK_IO(options.allow_missing_checksum, "checkpoint {} has no checksum ('{}'): {}; pass "
              "--allow-missing-checksum to load it unverified", path, nn::kChecksumKey,
              writes_checksums ? fmt::format("it was written by a seqgrad that always stores one (format version {}), "
                                             "so the file has been altered", version->second)
                               : std::string("it was written before seqgrad stored one, or altered since"));
  if (writes_checksums)
    fmt::print(stderr, "WARNING: checkpoint {} has no checksum although its format version {} always stores one: the "
               "file has been altered; its weights are loaded UNVERIFIED (--allow-missing-checksum)\n", path,
               version->second);
  else
    fmt::print(stderr, "warning: checkpoint {} has no checksum (written before seqgrad stored one?); its weights are "
               "loaded unverified (--allow-missing-checksum)\n", path);
}

// The (rows, cols) of the 2-d weight `name` that a config field sizes, float or int8 (a quantized
// checkpoint); IOError naming the field when it is missing.
Shape sized_shape(const LoadedCheckpoint& ckpt, const std::string& name, const char* field, const std::string& path) {
  if (auto q = ckpt.quantized.find(name); q != ckpt.quantized.end()) return {q->second.rows, q->second.cols};
  auto it = ckpt.tensors.find(name);
  SG_CHECK_IO(it != ckpt.tensors.end() && it->second.ndim() == 2, "checkpoint {}: config field model.{} cannot be "
              "checked: tensor '{}' is {}", path, field, name,
              it == ckpt.tensors.end() ? std::string("missing") : fmt::format("of shape {}", it->second.shape()));
  return it->second.shape();
}

// Dimension `dim` of `shape` must be `expected`, which the config field's `value` implies.
void check_size(int64_t value, const char* field, const Shape& shape, const std::string& name, int dim,
                const std::string& path, int64_t expected) {
  SG_CHECK_IO(expected == shape[dim], "checkpoint {}: its weights do not fit the model its config describes: config "
              "field model.{} = {}, but tensor '{}' has shape {} (dimension {} should be {})", path, field, value, name,
              shape, dim, expected);
}
void check_size(int64_t value, const char* field, const Shape& shape, const std::string& name, int dim,
                const std::string& path) {
  check_size(value, field, shape, name, dim, path, value);
}

// Every size the model is built from against the tensors present, before anything is allocated:
// a hostile config (embed_size 10^6, hidden_size 2^61, num_layers 2^40) fails here, fast, instead
// of allocating gigabytes or overflowing. Both dimensions of each tensor are checked, so a
// zero-size tensor cannot vouch for a huge size: V·E, 3H·H and A·H values are in the file.
// load_weights() then checks every tensor's full shape.
void check_config_sizes(const LoadedCheckpoint& ckpt, const std::string& path) {
  const Seq2SeqConfig& m = ckpt.info.config.model;
  const std::string src_emb = "model.encoder.embedding.weight", tgt_emb = "model.decoder.embedding.weight";
  const std::string hh0 = "model.encoder.rnn.weight_hh_l0";
  check_size(m.src_vocab, "src_vocab", sized_shape(ckpt, src_emb, "src_vocab", path), src_emb, 0, path);
  check_size(m.embed_size, "embed_size", sized_shape(ckpt, src_emb, "embed_size", path), src_emb, 1, path);
  check_size(m.tgt_vocab, "tgt_vocab", sized_shape(ckpt, tgt_emb, "tgt_vocab", path), tgt_emb, 0, path);
  check_size(m.hidden_size, "hidden_size", sized_shape(ckpt, hh0, "hidden_size", path), hh0, 1, path);
  check_size(m.hidden_size, "hidden_size", sized_shape(ckpt, hh0, "hidden_size", path), hh0, 0, path,
             3 * m.hidden_size);  // (3H, H): the GRU's three gates; H already matched a dimension, so 3H fits
  int64_t layers = 0;  // the encoder's layers present: weight_hh_l0, _l1, ...
  for (std::string name; name = fmt::format("model.encoder.rnn.weight_hh_l{}", layers),
                         ckpt.tensors.count(name) || ckpt.quantized.count(name);)
    ++layers;
  SG_CHECK_IO(m.num_layers == layers, "checkpoint {}: its weights do not fit the model its config describes: config "
              "field model.num_layers = {}, but the encoder has {} layer(s) of weights", path, m.num_layers, layers);
  if (m.attention != AttentionKind::scaled_dot) {
    const std::string w_q = "model.decoder.attention.w_q.weight";
    const Shape t = sized_shape(ckpt, w_q, "attention_size", path);
    check_size(m.attention_size ? m.attention_size : m.hidden_size, "attention_size", t, w_q, 0, path);
    check_size(m.hidden_size, "hidden_size", t, w_q, 1, path);  // (A, H)
  } else {
    // Scaled dot has no attention_size tensor, but the model still builds the (unused) additive
    // module from it, A·(3H + 1) values: no more than the checkpoint holds in all.
    int64_t values = 0;
    for (const auto& [name, t] : ckpt.tensors) values += t.numel();  // bounded by the file's size
    for (const auto& [name, q] : ckpt.quantized) values += q.rows * q.cols;
    const int64_t per_unit = 3 * m.hidden_size + 1;
    SG_CHECK_IO(m.attention_size <= values / per_unit, "checkpoint {}: config field model.attention_size = {} sizes "
                "an unused additive attention of {} x {} values, more than the {} values the checkpoint holds", path,
                m.attention_size, m.attention_size, per_unit, values);
  }
  SG_CHECK_IO(m.pad_id >= 0 && m.pad_id < std::min(m.src_vocab, m.tgt_vocab), "checkpoint {}: config field "
              "model.pad_id = {} is not a token id of both vocabularies ({} and {})", path, m.pad_id, m.src_vocab,
              m.tgt_vocab);
  const int64_t max_tokens = ckpt.info.config.max_tokens;
  SG_CHECK_IO(max_tokens >= 0 && max_tokens <= kMaxTokensLimit, "checkpoint {}: config field max_tokens = {} is not "
              "in [0, {}]", path, max_tokens, kMaxTokensLimit);
}

// nlohmann converts a JSON number such as 1e300 to int64 with undefined behaviour: every integer
// and number field of the config must have its JSON type before from_json() reads it.
void check_config_types(const nlohmann::json& config, const std::string& path) {
  auto check = [&](const nlohmann::json& object, const char* prefix, std::initializer_list<const char*> keys,
                   bool integer) {
    for (const char* key : keys) {
      if (!object.is_object() || !object.contains(key)) continue;  // from_json names missing fields
      const nlohmann::json& v = object.at(key);
      SG_CHECK_IO(integer ? v.is_number_integer() : v.is_number(), "checkpoint {}: config field {}{} = {} is not {}",
                  path, prefix, key, v.dump(), integer ? "an integer" : "a number");
    }
  };
  check(config, "", {"train_subset", "max_tokens", "min_freq", "batch_size", "epochs", "step_size", "seed"}, true);
  check(config, "", {"lr", "gamma", "label_smoothing", "clip"}, false);
  if (!config.is_object() || !config.contains("model")) return;
  check(config.at("model"), "model.",
        {"src_vocab", "tgt_vocab", "embed_size", "hidden_size", "num_layers", "attention_size", "pad_id"}, true);
  check(config.at("model"), "model.", {"dropout"}, false);
}

}  // namespace

LoadedCheckpoint read_checkpoint(const std::string& path, const ReadCheckpointOptions& options) {
  // a regular file, well-formed: else an IOError naming it; float or quantized (int8 weights apart)
  CheckpointFile checkpoint = load_checkpoint_file(path);
  TensorFile& file = checkpoint.file;
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    SG_CHECK_IO(it != file.metadata.end(), "checkpoint {}: metadata '{}' is missing; is this a seqgrad translator "
                "checkpoint?", path, key);
    return it->second;
  };
  SG_CHECK_IO(meta("format") == "seqgrad.seq2seq", "checkpoint {}: format '{}' is not seqgrad.seq2seq", path,
              meta("format"));
  verify_checksum(checkpoint, path, options);
  LoadedCheckpoint out;
  try {
    nlohmann::json config = nlohmann::json::parse(meta("config"));
    check_config_types(config, path);
    out.info.config = TrainConfig::from_json(config);
    out.info.src_vocab = text::Vocab::from_json(nlohmann::json::parse(meta("src_vocab")));
    out.info.tgt_vocab = text::Vocab::from_json(nlohmann::json::parse(meta("tgt_vocab")));
    out.info.train_state = nlohmann::json::parse(meta("train_state"));
  } catch (const nlohmann::json::exception& e) {
    throw IOError(fmt::format("checkpoint {}: bad metadata: {}", path, e.what()));
  } catch (const Error& e) {  // the config's or a vocabulary's own checks: name the file they came from
    throw IOError(fmt::format("checkpoint {}: bad metadata: {}", path, e.what()));
  }
  const Seq2SeqConfig& m = out.info.config.model;
  SG_CHECK_IO(m.src_vocab == out.info.src_vocab.size() && m.tgt_vocab == out.info.tgt_vocab.size(),
              "checkpoint {}: vocabulary sizes {}/{} do not match the model's {}/{}", path, out.info.src_vocab.size(),
              out.info.tgt_vocab.size(), m.src_vocab, m.tgt_vocab);
  out.tensors = std::move(file.tensors);
  out.quantized = std::move(checkpoint.quantized);
  check_config_sizes(out, path);
  return out;
}

void load_weights(Seq2Seq& model, const LoadedCheckpoint& checkpoint, const std::string& path) {
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : checkpoint.tensors)
    if (name.rfind("model.", 0) == 0) weights[name.substr(6)] = t;
  nn::check_finite_tensors(weights, fmt::format("checkpoint {}", path));  // int8 scales: checked when read
  std::map<std::string, QuantizedWeight> quantized;  // int8 weights: their float values, then the int8 form
  for (const auto& [name, q] : checkpoint.quantized)
    if (name.rfind("model.", 0) == 0) weights[name.substr(6)] = dequantize(q), quantized.emplace(name.substr(6), q);
  try {
    model.load_state_dict(weights);
    nn::load_quantized_weights(model, quantized);
  } catch (const ValueError& e) {
    throw IOError(fmt::format("checkpoint {}: its weights do not fit the model its config describes (saved with a "
                              "different vocabulary or architecture?): {}", path, e.what()));
  }
}

}  // namespace seqgrad::models
