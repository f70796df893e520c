// The translator model's config (Seq2SeqConfig): the architecture and its sizes. One table
// (model_fields()) declares every field once: its JSON key, its flag, its type, its range, its help
// and the architectures that read it. From it come the config's JSON (a checkpoint's "model"
// object), validate(), the training table's model.* rows (config.h), and so train's flags and
// `inspect`'s lines.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/config_table.h"

namespace seqgrad::models {

enum class AttentionKind { additive, scaled_dot, hybrid };
AttentionKind parse_attention_kind(const std::string& name);  // throws ValueError listing the kinds
const char* attention_kind_name(AttentionKind kind);

// The translator's architecture: the GRU encoder-decoder with attention (model.h), or the
// Transformer (transformer.h).
enum class Architecture { gru, transformer };
Architecture parse_architecture(const std::string& name);  // throws ValueError listing them
const char* architecture_name(Architecture architecture);
enum class PositionalKind { sinusoidal, learned };
PositionalKind parse_positional_kind(const std::string& name);
const char* positional_kind_name(PositionalKind kind);

struct Seq2SeqConfig {
  Architecture architecture = Architecture::gru;
  int64_t src_vocab = 0, tgt_vocab = 0;
  // the GRU: embeddings E, hidden size H, L layers. The Transformer: the model width is hidden_size
  // (d_model), the embeddings' size too (embed_size must equal it), and num_layers layers in the
  // encoder and in the decoder each.
  int64_t embed_size = 256, hidden_size = 512, num_layers = 2;
  int64_t attention_size = 0;  // A for additive attention; 0 means hidden_size
  double dropout = 0.1;
  AttentionKind attention = AttentionKind::additive;
  bool deep_output = true;  // logits from [state; context; embedding], as in the paper
  int64_t pad_id = 0;
  // the Transformer's own
  int64_t heads = 4;          // attention heads; must divide hidden_size
  int64_t ffn_size = 0;       // the feed-forward block's inner size (0 = 4 x hidden_size, as the paper)
  bool norm_first = true;     // pre-norm layers (and a final norm), else the paper's post-norm
  bool tie_embeddings = false;  // source and target embeddings and the output projection share one
                                // matrix (fairseq's share_all_embeddings: needs one joint vocabulary)
  PositionalKind positional = PositionalKind::sinusoidal;

  // Every field in its range and the fields consistent with each other (vocabularies beyond the
  // special tokens; the Transformer's heads dividing the width, ...); a ConfigError naming the
  // field ("model.heads") otherwise.
  void validate() const;
  nlohmann::json to_json() const;  // every field, keyed as the table says
  // A config as to_json() wrote it: the fields added since the first checkpoints may be absent
  // (they keep their defaults: an older config is a GRU's); unknown keys, missing fields, wrong
  // types and bad values are ConfigErrors. Validated.
  static Seq2SeqConfig from_json(const nlohmann::json& j);
};

// One row of the model's table.
struct ModelField : Field<Seq2SeqConfig> {
  std::vector<Architecture> architectures;  // the architectures that read the field
  bool added_later = false;  // absent from the checkpoints written before it existed (it keeps its default)
  bool applies_to(Architecture a) const;
};
const std::vector<ModelField>& model_fields();
// The row with this JSON key ("hidden_size", without "model."), or nullptr.
const ModelField* find_model_field(std::string_view key);

}  // namespace seqgrad::models
