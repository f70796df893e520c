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

namespace {

// A split's files in a checkpoint's config: {} for none, {"src", "tgt"} or {"tsv", "src_col", "tgt_col"}.
nlohmann::json files_to_json(const text::CorpusFiles& f) {
  if (f.is_tsv()) return {{"tsv", f.tsv}, {"src_col", f.src_col}, {"tgt_col", f.tgt_col}};
  if (!f.src.empty()) return {{"src", f.src}, {"tgt", f.tgt}};
  return nlohmann::json::object();
}

text::CorpusFiles files_from_json(const nlohmann::json& j) {
  text::CorpusFiles f;
  if (j.contains("tsv")) {
    f.tsv = j.at("tsv").get<std::string>();
    f.src_col = j.at("src_col").get<int64_t>();
    f.tgt_col = j.at("tgt_col").get<int64_t>();
  } else if (j.contains("src")) {
    f.src = j.at("src").get<std::string>();
    f.tgt = j.at("tgt").get<std::string>();
  }
  return f;
}

}  // namespace

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = {
      {"preset", preset},       {"corpus", corpus},         {"src_lang", src_lang},
      {"tgt_lang", tgt_lang},   {"data_dir", data_dir},     {"train_subset", train_subset},
      {"max_tokens", max_tokens}, {"min_freq", min_freq},   {"batch_size", batch_size},
      {"epochs", epochs},       {"lr", lr},                 {"step_size", step_size},
      {"gamma", gamma},         {"label_smoothing", label_smoothing}, {"clip", clip},
      {"seed", seed},           {"amp", amp},               {"model", model.to_json()},
      {"shuffle_buffer", shuffle_buffer}, {"vocab", vocab},                 {"joint_vocab", joint_vocab}};
  if (corpus == "files")
    j["files"] = {{"train", files_to_json(train_files)}, {"valid", files_to_json(valid_files)},
                  {"test", files_to_json(test_files)}};
  return j;
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
    // Checkpoints from before streaming: a corpus that fits one buffer is batched as they were.
    c.shuffle_buffer = j.value("shuffle_buffer", c.shuffle_buffer);
    c.vocab = j.value("vocab", std::string("word"));  // checkpoints from before --vocab are word-level
    c.joint_vocab = j.value("joint_vocab", false);
    if (c.corpus == "files") {
      const nlohmann::json& files = j.at("files");
      c.train_files = files_from_json(files.at("train"));
      c.valid_files = files_from_json(files.at("valid"));
      c.test_files = files_from_json(files.at("test"));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(fmt::format("train config: {}", e.what()));
  }
  if (c.vocab != "word") text::parse_subword_spec(c.vocab, "train config: vocab");  // validates it
  SG_CHECK_VALUE(c.shuffle_buffer >= 1, "train config: shuffle_buffer = {} must be >= 1", c.shuffle_buffer);
  c.model = Seq2SeqConfig::from_json(j.at("model"));
  return c;
}

std::vector<std::string> preset_names() { return {"default", "seed", "d2l"}; }

TrainConfig preset(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  if (name == "seed") {  // the seed documents' hyper-parameters
    // on subword units: one 8000-piece unigram model for both languages; 32 pieces hold what 20
    // words did (Multi30k: 15.2 German and 14.4 English pieces per sentence against 12.6 and 13.1 words).
    // Adam at 0.001, not the seeds' 0.005: on subwords 0.005 diverged after one epoch (validation
    // loss 2.71 -> 3.09, sacreBLEU 19.8 -> 15.4), where 0.001 validates at 17.6 -> 29.1 (README)
    c.model = {.embed_size = 256, .hidden_size = 512, .num_layers = 2, .dropout = 0.1};
    c.batch_size = 64, c.max_tokens = 32, c.lr = 0.001, c.epochs = 30, c.step_size = 10, c.gamma = 0.1;
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

std::string describe_corpus(const TrainConfig& c) {
  if (c.corpus != "files") return c.corpus;
  std::string out = fmt::format("train {}, valid {}", c.train_files.describe(), c.valid_files.describe());
  const bool has_test = !c.test_files.src.empty() || c.test_files.is_tsv();
  return out + (has_test ? ", test " + c.test_files.describe() : ", no test split");
}

std::vector<std::string> corpus_names() { return {"multi30k", "fra-eng", "files"}; }

text::CorpusFiles split_files(const TrainConfig& c, const std::string& split) {
  text::CorpusFiles f;
  if (c.corpus == "multi30k") {
    const std::string name = split == "valid" ? "val" : split == "test" ? "test2016" : split;
    f.src = fmt::format("{}/multi30k/{}.{}", c.data_dir, name, c.src_lang);
    f.tgt = fmt::format("{}/multi30k/{}.{}", c.data_dir, name, c.tgt_lang);
  } else if (c.corpus == "fra-eng") {
    const bool en_fr = c.src_lang == "en" && c.tgt_lang == "fr";
    SG_CHECK_VALUE(en_fr || (c.src_lang == "fr" && c.tgt_lang == "en"),
                   "data: fra-eng has the languages en and fr, got {}->{}", c.src_lang, c.tgt_lang);
    f.tsv = c.data_dir + "/fra-eng/fra.txt";
    f.src_col = en_fr ? 0 : 1, f.tgt_col = en_fr ? 1 : 0;
    // held-out pairs: every 50th pair goes to valid/test, so all lengths are represented
    f.period = 50;
    f.residues = split == "valid" ? std::vector<int64_t>{7} : split == "test" ? std::vector<int64_t>{23}
                                                                               : std::vector<int64_t>{7, 23};
    f.exclude = split == "train";
  } else if (c.corpus == "files") {
    f = split == "train" ? c.train_files : split == "valid" ? c.valid_files : c.test_files;
  } else {
    throw ValueError(fmt::format("data: unknown corpus '{}' (multi30k, fra-eng, or your own files with --train)",
                                 c.corpus));
  }
  return f;
}

namespace {

// Every file of a split must exist; the error names the flag or folder it came from.
void check_files_exist(const TrainConfig& c, const text::CorpusFiles& f, const std::string& split) {
  auto check = [&](const std::string& path, const std::string& what) {
    std::error_code ec;  // a symlink loop or a denied folder: reading the file names the reason
    SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "data: missing file {} ({})", path, what);
  };
  if (c.corpus == "files") {
    const std::string flag = split == "train" ? "--train" : split == "valid" ? "--valid" : "--test";
    if (f.is_tsv()) check(f.tsv, flag + "-tsv");
    else check(f.src, flag + " source file"), check(f.tgt, flag + " target file");
  } else if (f.is_tsv()) {
    check(f.tsv, fmt::format("corpus {}", c.corpus));
  } else {
    for (const auto& [path, lang] : {std::pair{f.src, c.src_lang}, {f.tgt, c.tgt_lang}})
      check(path, fmt::format("corpus {}, split {}, language {}", c.corpus, split, lang));
  }
}

// A split that has no pair after cleaning is an error before training (an empty test set found
// only after the last epoch would waste the run).
void check_not_empty(const TrainConfig& c, int64_t pairs, const text::CorpusFiles& f, const std::string& split,
                     const text::ReadReport& r) {
  // Multi30k's splits by their file names (val, test2016), as its README names them
  const std::string name = c.corpus != "multi30k" ? split : split == "valid" ? "val" : split == "test" ? "test2016"
                                                                                                        : split;
  SG_CHECK_IO(pairs > 0, "data: split {} has no usable sentence pair in {} ({})", name, f.describe(), r.summary());
}

// A held split, tokenized, with its raw sentences.
struct HeldSplit {
  std::vector<text::TokenizedPair> pairs;
  std::vector<std::string> sources, references;
  std::string report;
};

HeldSplit read_held_split(const TrainConfig& c, const std::string& split) {
  const text::CorpusFiles f = split_files(c, split);
  check_files_exist(c, f, split);
  text::ParallelCorpus corpus = text::read_corpus(f);
  check_not_empty(c, static_cast<int64_t>(corpus.pairs.size()), f, split, corpus.report);
  HeldSplit out;
  out.report = corpus.report.summary();
  for (const text::SentencePair& p : corpus.pairs) out.sources.push_back(p.src), out.references.push_back(p.tgt);
  out.pairs = text::tokenize_pairs(corpus.pairs);
  return out;
}

}  // namespace

Corpora load_corpora(const TrainConfig& c, Splits splits, const text::PairVisitor& visit_train) {
  SG_CHECK_IO(c.corpus == "files" || std::filesystem::is_directory(c.data_dir), "data: the data folder '{}' does not "
              "exist (it should hold multi30k/ and fra-eng/)", c.data_dir);
  Corpora out;
  std::vector<std::string> reports;
  if (splits == Splits::all) {
    const text::CorpusFiles f = split_files(c, "train");
    check_files_exist(c, f, "train");
    out.train = text::index_corpus(f, {.buffer_pairs = c.shuffle_buffer, .max_pairs = c.train_subset}, visit_train);
    check_not_empty(c, out.train.pairs, f, "train", out.train.report);
    reports.push_back("train: " + out.train.report.summary());
    HeldSplit valid = read_held_split(c, "valid");
    out.valid = std::move(valid.pairs);
    out.valid_references = std::move(valid.references);
    out.valid_sources = std::move(valid.sources);
    reports.push_back("valid: " + valid.report);
  }
  const bool has_test = !(c.corpus == "files" && c.test_files.src.empty() && c.test_files.tsv.empty());
  SG_CHECK_VALUE(has_test || splits == Splits::all, "data: the checkpoint was trained without a test split; give "
                 "one with --test SRC_FILE TGT_FILE (or --test-tsv FILE)");
  if (has_test) {
    HeldSplit test = read_held_split(c, "test");
    out.test = std::move(test.pairs);
    out.test_sources = std::move(test.sources);
    out.test_references = std::move(test.references);
    reports.push_back("test: " + test.report);
  }
  for (const std::string& r : reports) out.report += (out.report.empty() ? "" : "\n") + r;
  return out;
}

std::vector<text::TokenizedPair> read_train_pairs(const Corpora& corpora, int64_t max_pairs) {
  const int64_t n = max_pairs > 0 ? std::min(max_pairs, corpora.train.pairs) : corpora.train.pairs;
  return text::tokenize_pairs(text::read_corpus(corpora.train.files, corpora.train.read_options, n).pairs);
}

void WordCounts::add(const text::SentencePair& pair) {
  for (std::string& token : text::tokenize(pair.src)) ++src[std::move(token)];
  for (std::string& token : text::tokenize(pair.tgt)) ++tgt[std::move(token)];
}

text::PairEncoder pair_encoder(const text::Vocab& src_vocab, const text::Vocab& tgt_vocab, int64_t max_tokens) {
  const text::EncodeOptions truncate{.max_src_tokens = max_tokens, .max_tgt_tokens = max_tokens};
  return [&src_vocab, &tgt_vocab, truncate](const text::SentencePair& pair) {
    const text::TokenizedPair tokens{src_vocab.tokenize(pair.src), tgt_vocab.tokenize(pair.tgt)};
    return std::move(text::encode_pairs(std::span(&tokens, 1), src_vocab, tgt_vocab, truncate).pairs.front());
  };
}

namespace {

// One side (or, joint, both sides) of the training sample, one sentence per call, for SentencePiece.
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

VocabularyBuilder::VocabularyBuilder(const TrainConfig& config)
    : config_(config), sample_(config.vocab == "word" ? 1 : kSubwordSampleSentences, config.seed) {}  // words: unused

void VocabularyBuilder::add(const text::SentencePair& pair) {
  if (config_.vocab == "word") counts_.add(pair);
  else sample_.add(pair);
}

Vocabularies VocabularyBuilder::build() const {
  if (config_.vocab == "word")
    return {text::Vocab::from_counts(counts_.src, {.min_freq = config_.min_freq}),
            text::Vocab::from_counts(counts_.tgt, {.min_freq = config_.min_freq})};
  return build_vocabularies(config_, sample_.pairs());
}

Vocabularies build_vocabularies(const TrainConfig& c, std::span<const text::SentencePair> train_text) {
  if (c.vocab == "word") {
    VocabularyBuilder words(c);
    for (const text::SentencePair& p : train_text) words.add(p);
    return words.build();
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

void tokenize_held_splits(Corpora& data, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab) {
  auto tokenize = [&](const std::vector<std::string>& sources, const std::vector<std::string>& references) {
    std::vector<text::TokenizedPair> out;
    for (std::size_t i = 0; i < sources.size(); ++i)
      out.push_back({src_vocab.tokenize(sources[i]), tgt_vocab.tokenize(references[i])});
    return out;
  };
  data.valid = tokenize(data.valid_sources, data.valid_references);
  data.test = tokenize(data.test_sources, data.test_references);
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
    std::string computed = checkpoint_checksum(checkpoint, file.metadata);
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
  check(config, "", {"train_subset", "max_tokens", "min_freq", "batch_size", "epochs", "step_size", "seed",
                     "shuffle_buffer"}, true);
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
  std::map<std::string, QuantizedWeight> quantized;  // int8 weights: their modules are swapped in first
  for (const auto& [name, q] : checkpoint.quantized)
    if (name.rfind("model.", 0) == 0) quantized.emplace(name.substr(6), q);
  try {
    nn::load_quantized_weights(model, quantized);
    model.load_state_dict(weights);
  } catch (const ValueError& e) {
    throw IOError(fmt::format("checkpoint {}: its weights do not fit the model its config describes (saved with a "
                              "different vocabulary or architecture?): {}", path, e.what()));
  }
}

}  // namespace seqgrad::models
