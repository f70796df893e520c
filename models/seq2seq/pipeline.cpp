#include "models/seq2seq/pipeline.h"

#include <filesystem>

#include "core/serialize.h"
#include "models/seq2seq/quantized_checkpoint.h"
#include "nn/checkpoint.h"
#include "models/text/tokenizer.h"

namespace seqgrad::models {

nlohmann::json TrainConfig::to_json() const {
  return {{"preset", preset},       {"corpus", corpus},         {"src_lang", src_lang},
          {"tgt_lang", tgt_lang},   {"data_dir", data_dir},     {"train_subset", train_subset},
          {"max_tokens", max_tokens}, {"min_freq", min_freq},   {"batch_size", batch_size},
          {"epochs", epochs},       {"lr", lr},                 {"step_size", step_size},
          {"gamma", gamma},         {"label_smoothing", label_smoothing}, {"clip", clip},
          {"seed", seed},           {"amp", amp},               {"model", model.to_json()}};
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
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(fmt::format("train config: {}", e.what()));
  }
  c.model = Seq2SeqConfig::from_json(j.at("model"));
  return c;
}

std::vector<std::string> preset_names() { return {"default", "seed", "d2l"}; }

TrainConfig preset(const std::string& name) {
  TrainConfig c;
  c.preset = name;
  if (name == "seed") {  // the seed documents' hyper-parameters
    c.model = {.embed_size = 256, .hidden_size = 512, .num_layers = 2, .dropout = 0.1};
    c.batch_size = 64, c.max_tokens = 20, c.lr = 0.005, c.epochs = 30, c.step_size = 10, c.gamma = 0.1;
    c.label_smoothing = 0.1, c.clip = 1.0;
  } else if (name == "d2l") {  // d2l.ai chapter 10: 600 fra-eng pairs, 10 steps, E = H = 32
    c.corpus = "fra-eng", c.src_lang = "en", c.tgt_lang = "fr", c.train_subset = 600, c.min_freq = 2;
    c.model = {.embed_size = 32, .hidden_size = 32, .num_layers = 2, .dropout = 0.1, .deep_output = false};
    c.batch_size = 64, c.max_tokens = 10, c.lr = 0.005, c.epochs = 250, c.step_size = 1000, c.gamma = 1.0;
    c.label_smoothing = 0.0;
  } else if (name == "default") {  // about ten minutes on two cores
    c.model = {.embed_size = 128, .hidden_size = 256, .num_layers = 1, .dropout = 0.2, .deep_output = true};
    c.batch_size = 64, c.max_tokens = 20, c.lr = 0.003, c.epochs = 6, c.step_size = 4, c.gamma = 0.3;
    c.label_smoothing = 0.1, c.clip = 1.0, c.min_freq = 3;
  } else {
    throw ValueError(fmt::format("unknown preset '{}' (choose one of: default, seed, d2l)", name));
  }
  return c;
}

namespace {

text::ParallelCorpus read_split(const TrainConfig& c, const std::string& split) {
  auto file = [&](const std::string& lang) { return fmt::format("{}/{}/{}.{}", c.data_dir, c.corpus, split, lang); };
  for (const std::string& lang : {c.src_lang, c.tgt_lang})
    SG_CHECK_IO(std::filesystem::exists(file(lang)), "data: missing file {} (corpus {}, split {}, language {})",
                file(lang), c.corpus, split, lang);
  return text::read_parallel(file(c.src_lang), file(c.tgt_lang));
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
  if (c.train_subset > 0 && c.train_subset < static_cast<int64_t>(train.size())) train.resize(c.train_subset);
  for (const auto& p : test) {
    out.test_sources.push_back(p.src);
    out.test_references.push_back(p.tgt);
  }
  out.train = text::tokenize_pairs(train);
  out.valid = text::tokenize_pairs(valid);
  out.test = text::tokenize_pairs(test);
  return out;
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

std::map<std::string, std::string> checkpoint_metadata(const CheckpointInfo& info) {
  return {
      {"format", "seqgrad.seq2seq"},
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

LoadedCheckpoint read_checkpoint(const std::string& path) {
  CheckpointFile checkpoint = load_checkpoint_file(path);  // float or quantized (int8 weights apart)
  TensorFile& file = checkpoint.file;
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    SG_CHECK_IO(it != file.metadata.end(), "checkpoint {}: metadata '{}' is missing; is this a seqgrad translator "
                "checkpoint?", path, key);
    return it->second;
  };
  SG_CHECK_IO(meta("format") == "seqgrad.seq2seq", "checkpoint {}: format '{}' is not seqgrad.seq2seq", path,
              meta("format"));
  // Checkpoints written before the checksum was added have none; any written since must match it.
  if (auto stored = file.metadata.find(nn::kChecksumKey); stored != file.metadata.end()) {
    std::string computed = nn::checkpoint_checksum(checksummed_tensors(checkpoint), file.metadata);
    SG_CHECK_IO(stored->second == computed, "checkpoint {} is corrupted: checksum {} does not match its contents ({})",
                path, stored->second, computed);
  }
  LoadedCheckpoint out;
  try {
    out.info.config = TrainConfig::from_json(nlohmann::json::parse(meta("config")));
    out.info.src_vocab = text::Vocab::from_json(nlohmann::json::parse(meta("src_vocab")));
    out.info.tgt_vocab = text::Vocab::from_json(nlohmann::json::parse(meta("tgt_vocab")));
    out.info.train_state = nlohmann::json::parse(meta("train_state"));
  } catch (const nlohmann::json::exception& e) {
    throw IOError(fmt::format("checkpoint {}: bad metadata: {}", path, e.what()));
  }
  const Seq2SeqConfig& m = out.info.config.model;
  SG_CHECK_IO(m.src_vocab == out.info.src_vocab.size() && m.tgt_vocab == out.info.tgt_vocab.size(),
              "checkpoint {}: vocabulary sizes {}/{} do not match the model's {}/{}", path, out.info.src_vocab.size(),
              out.info.tgt_vocab.size(), m.src_vocab, m.tgt_vocab);
  out.tensors = std::move(file.tensors);
  out.quantized = std::move(checkpoint.quantized);
  return out;
}

void load_weights(Seq2Seq& model, const LoadedCheckpoint& checkpoint, const std::string& path) {
  std::map<std::string, Tensor> weights;
  for (const auto& [name, t] : checkpoint.tensors)
    if (name.rfind("model.", 0) == 0) weights[name.substr(6)] = t;
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
