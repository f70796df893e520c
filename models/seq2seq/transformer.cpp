// The Transformer translator: see transformer.h for the architecture and shapes.
#include "models/seq2seq/transformer.h"

#include <cmath>

#include "nn/init.h"
#include "nn/mask.h"

namespace seqgrad::models {
namespace {

nn::TransformerStackOptions stack_options(const Seq2SeqConfig& c) {
  return {.layer = {.d_model = c.hidden_size, .nhead = c.heads,
                    .dim_feedforward = c.ffn_size > 0 ? c.ffn_size : 4 * c.hidden_size, .dropout = c.dropout,
                    .batch_first = true, .norm_first = c.norm_first},
          .num_layers = c.num_layers,
          .norm = c.norm_first};  // pre-norm layers leave their last output un-normed
}

nn::Embedding::Options embedding_options(int64_t vocab, const Seq2SeqConfig& c) {
  return {.num_embeddings = vocab, .embedding_dim = c.hidden_size, .padding_idx = c.pad_id};
}

// A search's decoder rows: the per-layer key/value cache of each row, and each row's sentence
// memory gathered from the batch's (only when the rows' sentences change).
struct TransformerSearchState : TranslationModel::SearchState {
  nn::TransformerDecoder::State rows;
  std::vector<nn::AttentionMemory> sentences;  // per layer: the cross-attention's keys and values
  SentenceRows sentence_of_row{0};
};

}  // namespace

TransformerTranslator::TransformerTranslator(const Seq2SeqConfig& c)
    : TranslationModel("TransformerTranslator"),
      positions({.d_model = c.hidden_size,
                 .kind = c.positional == PositionalKind::learned ? nn::PositionalEncoding::Kind::learned
                                                                 : nn::PositionalEncoding::Kind::sinusoidal,
                 .dropout = c.dropout,
                 .batch_first = true}),
      encoder(stack_options(c)),
      decoder(stack_options(c)),
      config_(c) {
  config_.validate();
  SG_CHECK_VALUE(config_.architecture == Architecture::transformer,
                 "TransformerTranslator: the config's model.architecture is '{}', not transformer",
                 architecture_name(config_.architecture));
  src_embedding_ = std::make_unique<nn::Embedding>(embedding_options(c.src_vocab, c));
  register_module(c.tie_embeddings ? "embedding" : "src_embedding", *src_embedding_);
  tgt_embedding_ = src_embedding_.get();
  if (!c.tie_embeddings) {
    tgt_embedding_own_ = std::make_unique<nn::Embedding>(embedding_options(c.tgt_vocab, c));
    tgt_embedding_ = tgt_embedding_own_.get();
    register_module("tgt_embedding", *tgt_embedding_own_);
  }
  register_module("positions", positions);
  register_module("encoder", encoder);
  register_module("decoder", decoder);
  if (!c.tie_embeddings) {
    out_ = std::make_unique<nn::Quantizable<nn::Linear>>(nn::Linear::Options{.in_features = c.hidden_size,
                                                                              .out_features = c.tgt_vocab,
                                                                              .bias = false});
    register_module("out", *out_);
  }
}

void TransformerTranslator::init_embeddings() {
  NoGradGuard no_grad;
  for (nn::Embedding* e : {src_embedding_.get(), tgt_embedding_own_.get()}) {
    if (e == nullptr) continue;
    nn::init::normal_(e->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(config_.hidden_size)));
    e->weight.select(0, config_.pad_id).zero_();
  }
}

Tensor TransformerTranslator::embed(const nn::Embedding& table, const Tensor& ids, int64_t offset) const {
  return positions(mul(table(ids), std::sqrt(static_cast<double>(config_.hidden_size))), offset);
}

Tensor TransformerTranslator::encode(const Tensor& src, const Tensor& src_lengths) const {
  SG_CHECK_SHAPE(src.ndim() == 2 && src_lengths.defined() && src_lengths.ndim() == 1 &&
                     src_lengths.size(0) == src.size(0),
                 "transformer: src {} and src_lengths {} must be (B, S) and (B,)", src.shape(),
                 src_lengths.defined() ? src_lengths.shape() : Shape{});
  return encoder(embed(*src_embedding_, src), src_lengths);  // padding keys masked by the lengths
}

Tensor TransformerTranslator::operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const {
  SG_CHECK_SHAPE(tgt_in.ndim() == 2 && src.ndim() == 2 && src.size(0) == tgt_in.size(0),
                 "transformer: src {} and tgt_in {} must be (B, S) and (B, T) with the same batch", src.shape(),
                 tgt_in.shape());
  const Tensor memory = encode(src, src_lengths);
  const int64_t batch = tgt_in.size(0), steps = tgt_in.size(1);
  // causal: position t sees the target positions up to t (padding comes after the real ones, so
  // the real positions never see it; the loss ignores the padded ones)
  const Tensor causal = nn::causal_lengths(full({batch}, static_cast<double>(steps), {.dtype = DType::i64,
                                                                                     .device = tgt_in.device()}),
                                           steps, "transformer");
  const Tensor y = decoder(embed(*tgt_embedding_, tgt_in), memory, causal, src_lengths);  // (B, T, E)
  return project_out(y);
}

Tensor TransformerTranslator::project_out(const Tensor& y) const {
  return out_ ? (*out_)(y) : linear(y, tgt_embedding_->weight);
}

std::unique_ptr<TranslationModel::SearchState> TransformerTranslator::start(const Tensor& src,
                                                                           const Tensor& src_lengths) const {
  auto s = std::make_unique<TransformerSearchState>();
  s->rows = decoder.start(encode(src, src_lengths), src_lengths);
  s->sentences = s->rows.memory;
  s->sentence_of_row = SentenceRows(src.size(0));
  return s;
}

TranslationModel::StepOutput TransformerTranslator::step(SearchState& state, const Tensor& y_prev) const {
  auto& s = dynamic_cast<TransformerSearchState&>(state);
  const Tensor x = embed(*tgt_embedding_, y_prev.unsqueeze(1), s.rows.steps).squeeze(1);  // (N, E)
  const Tensor y = decoder.step(x, s.rows);                                                 // (N, E)
  // what the heatmaps show: the last layer's cross-attention, averaged over its heads
  const nn::MultiHeadAttention& cross = decoder.layer(config_.num_layers - 1).multihead_attn;
  return {.logits = project_out(y),
          .weights = cross.last_weights().squeeze(1),
          .energies = cross.last_scores().squeeze(1)};
}

void TransformerTranslator::reorder(SearchState& state, const std::vector<int64_t>& rows) const {
  auto& s = dynamic_cast<TransformerSearchState&>(state);
  const Device device = s.sentences.front().keys.device();
  const Tensor index = row_index(rows, device);
  for (size_t i = 0; i < s.rows.keys.size(); ++i) {
    if (!s.rows.keys[i].defined()) continue;  // before the first step
    s.rows.keys[i] = index_select(s.rows.keys[i], 0, index);
    s.rows.values[i] = index_select(s.rows.values[i], 0, index);
  }
  const std::vector<int64_t> sentences = s.sentence_of_row.reorder(rows);
  if (sentences.empty()) return;
  const Tensor sentence_index = row_index(sentences, device);
  for (size_t i = 0; i < s.sentences.size(); ++i) s.rows.memory[i] = s.sentences[i].select_rows(sentence_index);
}

bool TransformerTranslator::can_merge(const SearchState& into, const SearchState& from) const {
  return dynamic_cast<const TransformerSearchState&>(into).rows.steps ==
         dynamic_cast<const TransformerSearchState&>(from).rows.steps;
}

void TransformerTranslator::merge(SearchState& into, SearchState&& from) const {
  auto& a = dynamic_cast<TransformerSearchState&>(into);
  auto& b = dynamic_cast<TransformerSearchState&>(from);
  // Every row's query attends to all its cached positions, unmasked, and the positions are
  // encoded from one offset: rows at different positions cannot share the cache.
  SG_CHECK(a.rows.steps == b.rows.steps, "transformer: rows that decoded {} positions cannot join rows that decoded "
           "{} (one key/value cache length for all rows)", b.rows.steps, a.rows.steps);
  for (size_t i = 0; i < a.rows.memory.size(); ++i) {
    a.rows.memory[i] = concat_memories(a.rows.memory[i], b.rows.memory[i], 2);  // projected heads (B, h, K, d)
    if (a.rows.keys[i].defined()) {
      // (N, h, steps, d): the cached positions of each (the buffers' capacities may differ)
      a.rows.keys[i] = cat({a.rows.cached_keys(i), b.rows.cached_keys(i)}, 0);
      a.rows.values[i] = cat({a.rows.cached_values(i), b.rows.cached_values(i)}, 0);
    }
  }
  // The rows' memories become the sentences' (one per row), as the GRU's merge does.
  a.sentences = a.rows.memory;
  a.sentence_of_row = SentenceRows(a.rows.memory.front().keys.size(0));
}

std::unique_ptr<TranslationModel> build_translation_model(const Seq2SeqConfig& config) {
  if (config.architecture == Architecture::transformer) return std::make_unique<TransformerTranslator>(config);
  return std::make_unique<Seq2Seq>(config);
}

std::unique_ptr<TranslationModel> make_translation_model(const Seq2SeqConfig& config) {
  std::unique_ptr<TranslationModel> model = build_translation_model(config);
  if (auto* gru = dynamic_cast<Seq2Seq*>(model.get())) init_xavier(*gru);
  if (auto* transformer = dynamic_cast<TransformerTranslator*>(model.get())) transformer->init_embeddings();
  return model;
}

}  // namespace seqgrad::models
