// The model's config table (model_config.h).
#include "models/seq2seq/model_config.h"

#include <algorithm>

#include "core/suggest.h"

namespace seqgrad::models {

AttentionKind parse_attention_kind(const std::string& name) {
  if (name == "additive") return AttentionKind::additive;
  if (name == "scaled_dot") return AttentionKind::scaled_dot;
  if (name == "hybrid") return AttentionKind::hybrid;
  throw ValueError(fmt::format("attention kind '{}' is not one of: additive, scaled_dot, hybrid", name));
}

const char* attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::additive: return "additive";
    case AttentionKind::scaled_dot: return "scaled_dot";
    case AttentionKind::hybrid: return "hybrid";
  }
  return "?";
}

Architecture parse_architecture(const std::string& name) {
  if (name == "gru") return Architecture::gru;
  if (name == "transformer") return Architecture::transformer;
  throw ValueError(fmt::format("architecture '{}' is not one of: gru, transformer", name));
}

const char* architecture_name(Architecture architecture) {
  return architecture == Architecture::transformer ? "transformer" : "gru";
}

PositionalKind parse_positional_kind(const std::string& name) {
  if (name == "sinusoidal") return PositionalKind::sinusoidal;
  if (name == "learned") return PositionalKind::learned;
  throw ValueError(fmt::format("positional encoding '{}' is not one of: sinusoidal, learned", name));
}

const char* positional_kind_name(PositionalKind kind) {
  return kind == PositionalKind::learned ? "learned" : "sinusoidal";
}

bool ModelField::applies_to(Architecture a) const {
  return std::find(architectures.begin(), architectures.end(), a) != architectures.end();
}

namespace {

using Rows = FieldRows<Seq2SeqConfig>;
const std::vector<Architecture> kBoth = {Architecture::gru, Architecture::transformer};
const std::vector<Architecture> kGru = {Architecture::gru};
const std::vector<Architecture> kTransformer = {Architecture::transformer};

ModelField model_row(Field<Seq2SeqConfig> field, std::vector<Architecture> architectures, bool added_later = false) {
  ModelField f;
  static_cast<Field<Seq2SeqConfig>&>(f) = std::move(field);
  f.architectures = std::move(architectures);
  f.added_later = added_later;
  return f;
}

// Keys are the fields' full names, "model.hidden_size", as errors, flags' help and `inspect` name
// them; the "model" object of a checkpoint's config holds them without the prefix.
std::vector<ModelField> make_model_table() {
  const int64_t kMaxSize = int64_t{1} << 20;  // a dimension: far above any translator's
  const bool kAddedLater = true;              // written since the Transformer: an older config is a GRU's
  return {
      // the vocabulary sizes and pad id are set from the vocabularies
      model_row(Rows::integer("model.src_vocab", "", "source vocabulary size (from the vocabulary)",
                              [](Seq2SeqConfig& c) -> auto& { return c.src_vocab; }, {.min = 0}), kBoth),
      model_row(Rows::integer("model.tgt_vocab", "", "target vocabulary size (from the vocabulary)",
                              [](Seq2SeqConfig& c) -> auto& { return c.tgt_vocab; }, {.min = 0}), kBoth),
      model_row(Rows::integer("model.embed_size", "embed", "embedding size E (the Transformer's equals --hidden)",
                              [](Seq2SeqConfig& c) -> auto& { return c.embed_size; }, {.min = 1, .max = kMaxSize}),
                kBoth),
      model_row(Rows::integer("model.hidden_size", "hidden", "the GRU's hidden size H; the Transformer's width d_model",
                              [](Seq2SeqConfig& c) -> auto& { return c.hidden_size; }, {.min = 1, .max = kMaxSize}),
                kBoth),
      model_row(Rows::integer("model.num_layers", "layers",
                              "layers: the GRU's L; the Transformer's in the encoder and in the decoder each",
                              [](Seq2SeqConfig& c) -> auto& { return c.num_layers; }, {.min = 1, .max = 64}), kBoth),
      model_row(Rows::integer("model.attention_size", "attention-size", "additive attention's size A (0 = the hidden size)",
                              [](Seq2SeqConfig& c) -> auto& { return c.attention_size; }, {.min = 0, .max = kMaxSize}),
                kGru),
      model_row(Rows::number("model.dropout", "dropout", "dropout probability",
                             [](Seq2SeqConfig& c) -> auto& { return c.dropout; }, {.min = 0, .max = 1, .max_open = true}),
                kBoth),
      model_row(Rows::choice<AttentionKind>("model.attention", "attention", "kind",
                                            "attention: additive | scaled_dot | hybrid",
                                            [](Seq2SeqConfig& c) -> auto& { return c.attention; }, attention_kind_name,
                                            parse_attention_kind, "additive, scaled_dot, hybrid"),
                kGru),
      model_row(Rows::boolean("model.deep_output", "deep-output", "logits from [state; context; embedding], as in the paper",
                              [](Seq2SeqConfig& c) -> auto& { return c.deep_output; }), kGru),
      model_row(Rows::integer("model.pad_id", "", "the padding token's id (the vocabulary's)",
                              [](Seq2SeqConfig& c) -> auto& { return c.pad_id; }, {.min = 0}), kBoth),
      model_row(Rows::choice<Architecture>("model.architecture", "architecture", "kind",
                                           "gru | transformer: the GRU encoder-decoder with attention, or the "
                                           "Transformer (width --hidden, --layers in the encoder and the decoder each)",
                                           [](Seq2SeqConfig& c) -> auto& { return c.architecture; }, architecture_name,
                                           parse_architecture, "gru, transformer"),
                kBoth, kAddedLater),
      model_row(Rows::integer("model.heads", "heads", "attention heads (must divide --hidden)",
                              [](Seq2SeqConfig& c) -> auto& { return c.heads; }, {.min = 1, .max = 1024}),
                kTransformer, kAddedLater),
      model_row(Rows::integer("model.ffn_size", "ffn-size", "the feed-forward block's inner size (0 = 4 x --hidden)",
                              [](Seq2SeqConfig& c) -> auto& { return c.ffn_size; }, {.min = 0, .max = kMaxSize}),
                kTransformer, kAddedLater),
      model_row(Rows::boolean("model.norm_first", "norm-first", "pre-norm layers (else the paper's post-norm)",
                              [](Seq2SeqConfig& c) -> auto& { return c.norm_first; }),
                kTransformer, kAddedLater),
      model_row(Rows::boolean("model.tie_embeddings", "tie-embeddings",
                              "one matrix for the source and target embeddings and the output projection (needs "
                              "--joint-vocab)", [](Seq2SeqConfig& c) -> auto& { return c.tie_embeddings; }),
                kTransformer, kAddedLater),
      model_row(Rows::choice<PositionalKind>("model.positional", "positional", "kind",
                                             "sinusoidal | learned position encodings",
                                             [](Seq2SeqConfig& c) -> auto& { return c.positional; },
                                             positional_kind_name, parse_positional_kind, "sinusoidal, learned"),
                kTransformer, kAddedLater),
  };
}

constexpr std::string_view kPrefix = "model.";

std::string json_key(const ModelField& f) { return f.key.substr(kPrefix.size()); }

[[noreturn]] void inconsistent(const std::string& key, const nlohmann::json& value, const std::string& problem) {
  throw ConfigError(key, value.dump(), problem);
}

// What the fields' ranges cannot say: the fields against each other, for the config's architecture.
void check_consistent(const Seq2SeqConfig& c) {
  for (const auto& [key, size] : {std::pair{"model.src_vocab", c.src_vocab}, {"model.tgt_vocab", c.tgt_vocab}})
    if (size <= 4) inconsistent(key, size, "must be > 4 (a vocabulary holds the 4 special tokens, and words)");
  if (c.architecture != Architecture::transformer) return;
  if (c.hidden_size % c.heads != 0)
    inconsistent("model.heads", c.heads, fmt::format("must divide model.hidden_size = {} (the width each head gets)",
                                                     c.hidden_size));
  if (c.embed_size != c.hidden_size)
    inconsistent("model.embed_size", c.embed_size, fmt::format("must equal model.hidden_size = {} (the embeddings "
                                                               "are the Transformer's width)", c.hidden_size));
  if (c.positional == PositionalKind::sinusoidal && c.hidden_size % 2 != 0)
    inconsistent("model.hidden_size", c.hidden_size, "must be even for sinusoidal positions (sine and cosine pairs)");
  if (c.tie_embeddings && c.src_vocab != c.tgt_vocab)
    throw ConfigError("model.tie_embeddings", "", fmt::format("shares one matrix between the languages, so it needs one "
                 "joint vocabulary (vocab unigram:N or bpe:N with joint_vocab), but the vocabularies have {} and {} "
                 "tokens", c.src_vocab, c.tgt_vocab));
}

}  // namespace

const std::vector<ModelField>& model_fields() {
  static const std::vector<ModelField> table = make_model_table();
  return table;
}

const ModelField* find_model_field(std::string_view key) {
  for (const ModelField& f : model_fields())
    if (f.key == key) return &f;
  return nullptr;
}

void Seq2SeqConfig::validate() const {
  for (const ModelField& f : model_fields())
    if (std::string problem = f.check(*this); !problem.empty()) throw ConfigError(f.key, f.get(*this).dump(), problem);
  check_consistent(*this);
}

nlohmann::json Seq2SeqConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const ModelField& f : model_fields()) j[json_key(f)] = f.get(*this);
  return j;
}

Seq2SeqConfig Seq2SeqConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("model", json_preview(j), "must be an object");
  std::vector<std::string> keys;
  for (const ModelField& f : model_fields()) keys.push_back(json_key(f));
  for (const auto& [name, value] : j.items())
    if (std::find(keys.begin(), keys.end(), name) == keys.end())
      throw ConfigError(std::string(kPrefix) + name, "", "is not a field of the model's config" + did_you_mean(name, keys));
  Seq2SeqConfig c;
  for (const ModelField& f : model_fields()) {
    if (j.contains(json_key(f))) f.set(c, j.at(json_key(f)));
    else if (!f.added_later) throw ConfigError(f.key, "", "is missing (every config seqgrad writes has it)");
  }
  c.validate();
  return c;
}

}  // namespace seqgrad::models
