// The attention's terms along one translation (models/seq2seq/internals.h).
#include "models/seq2seq/internals.h"

#include "core/error.h"
#include "models/seq2seq/decode.h"

namespace seqgrad::models {
namespace {

// (1, N, D) or (1, D) -> N rows of D values (one row for (1, D)).
std::vector<std::vector<float>> host_rows(const Tensor& t) {
  const int64_t width = t.size(-1);
  std::vector<float> flat = t.contiguous().to_vector<float>();
  std::vector<std::vector<float>> rows;
  for (size_t start = 0; start < flat.size(); start += static_cast<size_t>(width))
    rows.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(start),
                      flat.begin() + static_cast<std::ptrdiff_t>(start + static_cast<size_t>(width)));
  return rows;
}

}  // namespace

AttentionInternalsPass::AttentionInternalsPass(Seq2Seq& model, const Tensor& src, std::vector<int64_t> tokens,
                                               bool finished, int64_t bos_id, int64_t eos_id)
    : model_(model), tokens_(std::move(tokens)), steps_(tokens_.size() + (finished ? 1 : 0)), previous_(bos_id),
      eos_id_(eos_id) {
  SG_CHECK_SHAPE(src.ndim() == 2 && src.size(0) == 1 && src.size(1) > 0,
                 "attention_internals: expects one sentence's ids (1, S), got {}", src.shape());
  SG_CHECK(!model.is_training(), "attention_internals: the model must be in eval mode");
  NoGradGuard no_grad;
  Tensor lengths = full({1}, static_cast<double>(src.size(1)), {.dtype = DType::i64, .device = src.device()});
  Tensor keep = nn::keep_mask(lengths, src.size(1), "attention_internals");  // (1, S)
  Encoder::Output encoded = model.encoder(src, keep);                       // outputs h (1, S, 2H)
  outputs_ = encoded.outputs;
  memory_ = model.decoder.prepare(encoded.outputs, keep);
  state_ = encoded.state;  // (L, 1, H)
  const nn::AdditiveAttention* additive = model.decoder.additive_part();
  out_.kind = model.config().attention;
  if (additive != nullptr) {
    out_.key_terms = host_rows(additive->project_keys(encoded.outputs));
    out_.v = nn::linear_weight(additive->w_v).contiguous().to_vector<float>();
  } else {
    out_.key_terms = host_rows(encoded.outputs);
  }
}

bool AttentionInternalsPass::step() {
  if (done()) return false;
  NoGradGuard no_grad;
  const AttnDecoder& decoder = model_.decoder;
  const nn::AdditiveAttention* additive = decoder.additive_part();
  Tensor query = state_.select(0, state_.size(0) - 1);  // s_{t-1} (1, H)
  Tensor query_term = additive != nullptr ? additive->w_q(query) : (*decoder.query_projection())(query);
  Tensor y_prev = full({1}, static_cast<double>(previous_), {.dtype = DType::i64, .device = query.device()});
  AttnDecoder::Step step = decoder.attend(y_prev, state_, memory_);  // no logits: only the attention is read
  out_.query_terms.push_back(host_rows(query_term).front());
  out_.energies.push_back(host_rows(step.energies).front());
  out_.weights.push_back(host_rows(step.weights).front());
  out_.contexts.push_back(host_rows(matmul(step.weights.unsqueeze(1), outputs_)).front());  // (1, 1, 2H)
  state_ = step.state;
  const size_t t = out_.query_terms.size() - 1;
  previous_ = t < tokens_.size() ? tokens_[t] : eos_id_;
  return !done();
}

AttentionInternals attention_internals(Seq2Seq& model, const Tensor& src, const std::vector<int64_t>& tokens,
                                       bool finished, int64_t bos_id, int64_t eos_id) {
  EvalScope eval(model);
  AttentionInternalsPass pass(model, src, tokens, finished, bos_id, eos_id);
  while (pass.step()) {
  }
  return pass.take();
}

namespace {

// One batch row of a multi-head tensor (1, h, ...) on the host: (h, ...).
Tensor host_heads(const Tensor& t) { return t.select(0, 0).contiguous().cpu(); }

// Per-step rows (h, 1, t + 1) of the causal self-attention, t = 0..T-1, as one (h, T, T) map with
// zeros after each row's position.
Tensor causal_map(const std::vector<Tensor>& rows) {
  const auto steps = static_cast<int64_t>(rows.size());
  Tensor map = zeros({rows.front().size(0), steps, steps});  // (h, T, T)
  for (int64_t t = 0; t < steps; ++t) map.narrow(1, t, 1).narrow(2, 0, t + 1).copy_(rows[t]);
  return map;
}

}  // namespace

TransformerInternalsPass::TransformerInternalsPass(TransformerTranslator& model, const Tensor& src,
                                                   std::vector<int64_t> tokens, bool finished, int64_t bos_id,
                                                   int64_t eos_id)
    : model_(model), tokens_(std::move(tokens)), steps_(tokens_.size() + (finished ? 1 : 0)), previous_(bos_id),
      eos_id_(eos_id), device_(src.device()) {
  SG_CHECK_SHAPE(src.ndim() == 2 && src.size(0) == 1 && src.size(1) > 0,
                 "transformer_internals: expects one sentence's ids (1, S), got {}", src.shape());
  SG_CHECK(!model.is_training(), "transformer_internals: the model must be in eval mode");
  NoGradGuard no_grad;
  const int64_t layers = model.config().num_layers;
  Tensor lengths = full({1}, static_cast<double>(src.size(1)), {.dtype = DType::i64, .device = src.device()});
  state_ = model.start(src, lengths);
  out_.heads = model.config().heads;
  out_.head_dim = model.config().hidden_size / out_.heads;
  out_.layers.resize(static_cast<size_t>(layers));
  self_rows_.resize(layers), weights_.resize(layers), scores_.resize(layers), queries_.resize(layers);
  for (int64_t l = 0; l < layers; ++l)  // start() encoded the source
    out_.layers[l].encoder_weights = host_heads(model.encoder.layer(l).self_attn.last_head_weights());
  if (steps_ == 0) done_ = true;
}

bool TransformerInternalsPass::step() {
  if (done()) return false;
  NoGradGuard no_grad;
  const auto layers = static_cast<int64_t>(out_.layers.size());
  const size_t t = self_rows_.front().size();
  model_.step(*state_, full({1}, static_cast<double>(previous_), {.dtype = DType::i64, .device = device_}));
  for (int64_t l = 0; l < layers; ++l) {  // what this step left in the modules, read before any other step runs
    const auto& layer = model_.decoder.layer(l);
    self_rows_[l].push_back(host_heads(layer.self_attn.last_head_weights()));  // (h, 1, t + 1)
    weights_[l].push_back(host_heads(layer.multihead_attn.last_head_weights()));  // (h, 1, S)
    scores_[l].push_back(host_heads(layer.multihead_attn.last_head_scores()));
    queries_[l].push_back(host_heads(layer.multihead_attn.last_head_queries()));  // (h, 1, d)
    if (t == 0) out_.layers[l].cross_keys = host_heads(layer.multihead_attn.last_head_keys());  // (h, S, d)
  }
  previous_ = t < tokens_.size() ? tokens_[t] : eos_id_;
  if (t + 1 < steps_) return true;
  for (int64_t l = 0; l < layers; ++l) {
    TransformerInternals::Layer& layer = out_.layers[l];
    layer.decoder_weights = causal_map(self_rows_[l]);
    layer.cross_weights = cat(weights_[l], 1);  // (h, T, S)
    layer.cross_scores = cat(scores_[l], 1);
    layer.cross_queries = cat(queries_[l], 1);  // (h, T, d)
  }
  done_ = true;
  return false;
}

TransformerInternals transformer_internals(TransformerTranslator& model, const Tensor& src,
                                           const std::vector<int64_t>& tokens, bool finished, int64_t bos_id,
                                           int64_t eos_id) {
  EvalScope eval(model);
  TransformerInternalsPass pass(model, src, tokens, finished, bos_id, eos_id);
  while (pass.step()) {
  }
  return pass.take();
}

}  // namespace seqgrad::models
