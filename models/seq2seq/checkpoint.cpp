#include "models/seq2seq/checkpoint.h"

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <tuple>
#include <set>

#include "core/json.h"
#include "core/serialize.h"
#include "models/seq2seq/quantized_checkpoint.h"
#include "nn/checkpoint.h"

namespace seqgrad::models {

namespace {

// Metadata of translator checkpoints. Since version 2 always written with a checksum, so a file
// of version 2 or later without one has been altered. Version 3: train_state is a StateDict's
// values (no JSON strings inside), the optimizer's tensors "optimizer.*" (upgrade_train_state).
constexpr const char* kFormatVersion = "3";
const std::set<std::string> kMetadataKeys = {"format", "format_version", "config", "src_vocab", "tgt_vocab",
                                             "train_state", "quantized", nn::kChecksumKey};

}  // namespace

std::map<std::string, std::string> checkpoint_metadata(const CheckpointInfo& info) {
  return {
      {"format", "seqgrad.seq2seq"},
      {"format_version", kFormatVersion},
      {"config", info.config.to_json().dump()},
      {"src_vocab", info.src_vocab.to_json().dump()},
      {"tgt_vocab", info.tgt_vocab.to_json().dump()},
      {"train_state", info.train_state.values.dump()},
  };
}

void save_checkpoint(const std::string& path, const TranslationModel& model, const CheckpointInfo& info) {
  StateDict tensors = info.train_state;
  SG_CHECK_VALUE(!tensors.has_nested("model"), "save_checkpoint: train_state holds \"model\" (its tensors or "
                 "values), the name of the weights");
  tensors.values = nlohmann::json::object();
  tensors.nest("model", model.state_dict());
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
void check_gru_sizes(const LoadedCheckpoint& ckpt, const std::string& path) {
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
}

// The same for a Transformer: the embeddings (V, E), the feed-forward block (F, E) and the layers
// present; the heads only divide E (validated with the config).
void check_transformer_sizes(const LoadedCheckpoint& ckpt, const std::string& path) {
  const Seq2SeqConfig& m = ckpt.info.config.model;
  const std::string src_emb = m.tie_embeddings ? "model.embedding.weight" : "model.src_embedding.weight";
  const std::string tgt_emb = m.tie_embeddings ? src_emb : "model.tgt_embedding.weight";
  const std::string ffn = "model.encoder.layers.0.linear1.weight";
  check_size(m.src_vocab, "src_vocab", sized_shape(ckpt, src_emb, "src_vocab", path), src_emb, 0, path);
  check_size(m.hidden_size, "hidden_size", sized_shape(ckpt, src_emb, "hidden_size", path), src_emb, 1, path);
  check_size(m.tgt_vocab, "tgt_vocab", sized_shape(ckpt, tgt_emb, "tgt_vocab", path), tgt_emb, 0, path);
  check_size(m.ffn_size, "ffn_size", sized_shape(ckpt, ffn, "ffn_size", path), ffn, 0, path,
             m.ffn_size > 0 ? m.ffn_size : 4 * m.hidden_size);
  for (const char* stack : {"encoder", "decoder"}) {
    int64_t layers = 0;
    while (ckpt.tensors.count(fmt::format("model.{}.layers.{}.linear1.weight", stack, layers)) ||
           ckpt.quantized.count(fmt::format("model.{}.layers.{}.linear1.weight", stack, layers)))
      ++layers;
    SG_CHECK_IO(m.num_layers == layers, "checkpoint {}: its weights do not fit the model its config describes: config "
                "field model.num_layers = {}, but the {} has {} layer(s) of weights", path, m.num_layers, stack, layers);
  }
}

void check_config_sizes(const LoadedCheckpoint& ckpt, const std::string& path) {
  const Seq2SeqConfig& m = ckpt.info.config.model;
  if (m.architecture == Architecture::transformer) check_transformer_sizes(ckpt, path);
  else check_gru_sizes(ckpt, path);
  SG_CHECK_IO(m.pad_id >= 0 && m.pad_id < std::min(m.src_vocab, m.tgt_vocab), "checkpoint {}: config field "
              "model.pad_id = {} is not a token id of both vocabularies ({} and {})", path, m.pad_id, m.src_vocab,
              m.tgt_vocab);
}

// ---- reading checkpoints written before StateDict (format version 2 and older), upgraded on read

// A train_state entry that version 2 wrote as a JSON string holding JSON: parsed in place.
void parse_json_string(nlohmann::json& state, const char* key, const std::string& path) {
  if (!state.contains(key) || !state[key].is_string()) return;  // absent, or malformed: its loader says so
  state[key] = parse_json(state[key].get<std::string>(), fmt::format("checkpoint {}: train_state.{}", path, key));
}

// Version 2's early-stopping fields as the nested state optim::EarlyStopping reads. Patience was
// never saved: the resumed run's config sets it (Trainer::restore). A file written before early
// stopping (no best_metric) kept the tokenised lower-cased BLEU in best_bleu, another scale: its
// search for the best sacreBLEU starts afresh. best_bleu itself is dropped.
void upgrade_early_stopping(nlohmann::json& state, const std::string& path) {
  if (state.contains("early_stopping")) return;  // a newer file that lost its format_version: as it is
  nlohmann::json stopping{{"metric", "sacrebleu"}, {"mode", "max"}, {"patience", 0}, {"min_delta", 0.0},
                          {"best", nullptr}, {"validations_since_best", 0}};
  auto number = [&](const char* key) -> std::optional<double> {
    if (!state.contains(key) || state[key].is_null()) return std::nullopt;
    SG_CHECK_IO(state[key].is_number(), "checkpoint {}: train_state.{} must be a number, got {}", path, key,
                json_preview(state[key]));
    return state[key].get<double>();
  };
  if (state.contains("best_metric")) {
    const nlohmann::json& metric = state["best_metric"];
    SG_CHECK_IO(metric == "sacrebleu" || metric == "chrf" || metric == "loss", "checkpoint {}: train_state.best_metric "
                "must be one of sacrebleu, chrf, loss, got {}", path, json_preview(metric));
    stopping["metric"] = metric;
    stopping["mode"] = metric == "loss" ? "min" : "max";
    // before best_score, best_bleu was the best sacreBLEU (early stopping's only metric then)
    std::optional<double> best = state.contains("best_score") ? number("best_score") : number("best_bleu");
    if (best && *best >= 0) stopping["best"] = *best;
    if (std::optional<double> since = number("validations_since_best")) stopping["validations_since_best"] = *since;
  }
  for (const char* old : {"best_bleu", "best_metric", "best_score", "validations_since_best", "stopped_early"})
    state.erase(old);
  state["early_stopping"] = std::move(stopping);
}

// The train_state and tensors of a checkpoint before version 3 in the current layout.
void upgrade_train_state(nlohmann::json& state, std::map<std::string, Tensor>& tensors, const std::string& path) {
  if (!state.is_object()) return;  // train_state_from_json names the problem
  parse_json_string(state, "optimizer", path);
  parse_json_string(state, "scheduler", path);
  upgrade_early_stopping(state, path);
  std::map<std::string, Tensor> renamed;
  for (auto& [name, t] : tensors)
    renamed.emplace(name.starts_with("optim.") ? "optimizer." + name.substr(6) : name, std::move(t));
  tensors = std::move(renamed);
}

// The format version: 1 for a file without one (written before checksums); an IOError for one
// that is not a number or is newer than this build's.
int format_version(const TensorFile& file, const std::string& path) {
  auto version = file.metadata.find("format_version");
  if (version == file.metadata.end()) return 1;
  const std::string& v = version->second;
  const bool digits = !v.empty() && v.size() <= 3 && std::all_of(v.begin(), v.end(), ::isdigit);
  SG_CHECK_IO(digits, "checkpoint {}: format_version '{}' is not a version number", path, v);
  SG_CHECK_IO(std::stoi(v) <= std::stoi(kFormatVersion), "checkpoint {}: format version {} was written by a newer "
              "seqgrad; this build reads versions up to {}", path, v, kFormatVersion);
  return std::stoi(v);
}

// The run's state of a checkpoint: train_state's values and the tensors that are not weights.
StateDict train_state_of(nlohmann::json values, const std::map<std::string, Tensor>& tensors) {
  StateDict state({}, std::move(values));
  for (const auto& [name, t] : tensors)
    if (!name.starts_with("model.")) state.emplace(name, t);
  return state;
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
  const int version = format_version(file, path);
  LoadedCheckpoint out;
  try {
    auto parsed = [&](const char* key) { return parse_json(meta(key), fmt::format("metadata '{}'", key)); };
    out.info.config = TrainConfig::from_json(parsed("config"));  // every field's type and range checked
    out.info.src_vocab = text::Vocab::from_json(parsed("src_vocab"));
    out.info.tgt_vocab = text::Vocab::from_json(parsed("tgt_vocab"));
    nlohmann::json train_state = parsed("train_state");
    if (version < 3) upgrade_train_state(train_state, file.tensors, path);
    out.info.train_state = train_state_of(std::move(train_state), file.tensors);
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

void load_weights(TranslationModel& model, const LoadedCheckpoint& checkpoint, const std::string& path) {
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

namespace {

void check_float(const LoadedCheckpoint& c, const std::string& path) {
  SG_CHECK_IO(c.quantized.empty(), "average: checkpoint {} is quantized (int8 weights); average the float "
              "checkpoints, then quantize the average", path);
}

// `other` (read from `path`) must have `first`'s architecture and vocabularies to be averaged with it.
void check_averageable(const LoadedCheckpoint& first, const std::string& first_path, const LoadedCheckpoint& other,
                       const std::string& path) {
  check_float(other, path);
  for (const auto& [side, a, b] : {std::tuple{"source", &first.info.src_vocab, &other.info.src_vocab},
                                   {"target", &first.info.tgt_vocab, &other.info.tgt_vocab}})
    SG_CHECK_IO(a->to_json() == b->to_json(), "average: checkpoints {} and {} have different {} vocabularies ({} {} "
                "tokens and {} {} tokens)", first_path, path, side, a->kind(), a->size(), b->kind(), b->size());
  for (const ConfigField& f : config_fields()) {
    if (!f.key.starts_with("model.")) continue;
    const nlohmann::json a = f.get(first.info.config), b = f.get(other.info.config);
    SG_CHECK_IO(a == b, "average: checkpoints {} and {} have different architectures: config field {} is {} in the "
                "first and {} in the second", first_path, path, f.key, a.dump(), b.dump());
  }
}

}  // namespace

LoadedCheckpoint average_checkpoints(const std::vector<std::string>& paths) {
  SG_CHECK_VALUE(!paths.empty(), "average: no checkpoint to average");
  LoadedCheckpoint out;
  std::map<std::string, Tensor> sums;  // float64 sums of the "model." weights
  std::map<std::string, DType> dtypes;  // the first checkpoint's, the average's
  for (size_t i = 0; i < paths.size(); ++i) {
    LoadedCheckpoint c = read_checkpoint(paths[i]);
    if (i == 0) {
      check_float(c, paths[0]);
      out.info = c.info;
    } else {
      check_averageable(out, paths[0], c, paths[i]);
    }
    for (const auto& [name, t] : c.tensors) {
      if (!name.starts_with("model.")) continue;  // the optimizer's state is not averaged
      Tensor value = t.to(DType::f64);
      auto it = sums.find(name);
      if (i == 0) {
        sums.emplace(name, value), dtypes.emplace(name, t.dtype());
        continue;
      }
      SG_CHECK_IO(it != sums.end() && it->second.shape() == value.shape(), "average: checkpoint {}'s tensor '{}' {} "
                  "has no counterpart in {}", paths[i], name, value.shape(), paths[0]);
      it->second = it->second + value;
    }
    SG_CHECK_IO(std::count_if(c.tensors.begin(), c.tensors.end(), [](const auto& kv) {
                  return kv.first.starts_with("model.");
                }) == static_cast<std::ptrdiff_t>(sums.size()),
                "average: checkpoints {} and {} hold different sets of weights", paths[0], paths[i]);
  }
  const double n = static_cast<double>(paths.size());
  for (const auto& [name, sum] : sums) out.tensors.emplace(name, (sum * (1.0 / n)).to(dtypes.at(name)));
  nlohmann::json state = out.info.train_state.values;
  for (const char* key : {"optimizer", "scheduler", "grad_scaler"}) state.erase(key);
  state["averaged_from"] = paths;
  out.info.train_state = StateDict({}, std::move(state));  // no optimizer tensors: not resumable
  return out;
}

}  // namespace seqgrad::models
