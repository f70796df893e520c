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

AttentionInternals attention_internals(Seq2Seq& model, const Tensor& src, const std::vector<int64_t>& tokens,
                                       bool finished, int64_t bos_id, int64_t eos_id) {
  SG_CHECK_SHAPE(src.ndim() == 2 && src.size(0) == 1 && src.size(1) > 0,
                 "attention_internals: expects one sentence's ids (1, S), got {}", src.shape());
  NoGradGuard no_grad;
  EvalScope eval(model);
  const Device device = src.device();
  Tensor lengths = full({1}, static_cast<double>(src.size(1)), {.dtype = DType::i64, .device = device});
  Tensor keep = nn::keep_mask(lengths, src.size(1), "attention_internals");  // (1, S)
  Encoder::Output encoded = model.encoder(src, keep);                       // outputs h (1, S, 2H)
  AttnDecoder::Memory memory = model.decoder.prepare(encoded.outputs, keep);
  const AttnDecoder& decoder = model.decoder;
  const nn::AdditiveAttention* additive = decoder.additive_part();

  AttentionInternals out;
  out.kind = model.config().attention;
  if (additive != nullptr) {
    out.key_terms = host_rows(additive->project_keys(encoded.outputs));
    out.v = nn::linear_weight(additive->w_v).contiguous().to_vector<float>();
  } else {
    out.key_terms = host_rows(encoded.outputs);
  }
  Tensor state = encoded.state;  // (L, 1, H)
  int64_t previous = bos_id;
  const size_t steps = tokens.size() + (finished ? 1 : 0);
  for (size_t t = 0; t < steps; ++t) {
    Tensor query = state.select(0, state.size(0) - 1);  // s_{t-1} (1, H)
    Tensor query_term = additive != nullptr ? additive->w_q(query) : (*decoder.query_projection())(query);
    Tensor y_prev = full({1}, static_cast<double>(previous), {.dtype = DType::i64, .device = device});
    AttnDecoder::Step step = decoder.step(y_prev, state, memory);
    out.query_terms.push_back(host_rows(query_term).front());
    out.energies.push_back(host_rows(step.energies).front());
    out.weights.push_back(host_rows(step.weights).front());
    out.contexts.push_back(host_rows(matmul(step.weights.unsqueeze(1), encoded.outputs)).front());  // (1, 1, 2H)
    state = step.state;
    previous = t < tokens.size() ? tokens[t] : eos_id;
  }
  return out;
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

TransformerInternals transformer_internals(TransformerTranslator& model, const Tensor& src,
                                           const std::vector<int64_t>& tokens, bool finished, int64_t bos_id,
                                           int64_t eos_id) {
  SG_CHECK_SHAPE(src.ndim() == 2 && src.size(0) == 1 && src.size(1) > 0,
                 "transformer_internals: expects one sentence's ids (1, S), got {}", src.shape());
  NoGradGuard no_grad;
  EvalScope eval(model);
  const Device device = src.device();
  const int64_t layers = model.config().num_layers;
  Tensor lengths = full({1}, static_cast<double>(src.size(1)), {.dtype = DType::i64, .device = device});
  std::unique_ptr<TranslationModel::SearchState> state = model.start(src, lengths);

  TransformerInternals out;
  out.heads = model.config().heads;
  out.head_dim = model.config().hidden_size / out.heads;
  out.layers.resize(static_cast<size_t>(layers));
  std::vector<std::vector<Tensor>> self_rows(layers), weights(layers), scores(layers), queries(layers);
  for (int64_t l = 0; l < layers; ++l)  // start() encoded the source
    out.layers[l].encoder_weights = host_heads(model.encoder.layer(l).self_attn.last_head_weights());
  int64_t previous = bos_id;
  const size_t steps = tokens.size() + (finished ? 1 : 0);
  for (size_t t = 0; t < steps; ++t) {
    model.step(*state, full({1}, static_cast<double>(previous), {.dtype = DType::i64, .device = device}));
    for (int64_t l = 0; l < layers; ++l) {
      const auto& layer = model.decoder.layer(l);
      self_rows[l].push_back(host_heads(layer.self_attn.last_head_weights()));  // (h, 1, t + 1)
      weights[l].push_back(host_heads(layer.multihead_attn.last_head_weights()));  // (h, 1, S)
      scores[l].push_back(host_heads(layer.multihead_attn.last_head_scores()));
      queries[l].push_back(host_heads(layer.multihead_attn.last_head_queries()));  // (h, 1, d)
      if (t == 0) out.layers[l].cross_keys = host_heads(layer.multihead_attn.last_head_keys());  // (h, S, d)
    }
    previous = t < tokens.size() ? tokens[t] : eos_id;
  }
  if (steps == 0) return out;
  for (int64_t l = 0; l < layers; ++l) {
    TransformerInternals::Layer& layer = out.layers[l];
    layer.decoder_weights = causal_map(self_rows[l]);
    layer.cross_weights = cat(weights[l], 1);  // (h, T, S)
    layer.cross_scores = cat(scores[l], 1);
    layer.cross_queries = cat(queries[l], 1);  // (h, T, d)
  }
  return out;
}

}  // namespace seqgrad::models
