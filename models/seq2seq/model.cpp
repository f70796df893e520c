// The seq2seq translator: see model.h for the architecture and shapes.
#include "models/seq2seq/model.h"

#include <cmath>

#include "core/rng.h"

namespace seqgrad::models {

// ---- encoder

Encoder::Encoder(const Seq2SeqConfig& c)
    : nn::Module("Encoder"),
      embedding({.num_embeddings = c.src_vocab, .embedding_dim = c.embed_size, .padding_idx = c.pad_id}),
      dropout({.p = c.dropout}),
      rnn({.input_size = c.embed_size, .hidden_size = c.hidden_size, .num_layers = c.num_layers,
           .bidirectional = true, .dropout = c.dropout}),
      bridge({.in_features = 2 * c.hidden_size, .out_features = c.hidden_size}),
      num_layers_(c.num_layers),
      hidden_size_(c.hidden_size) {
  register_module("embedding", embedding);
  register_module("dropout", dropout);
  register_module("rnn", rnn);
  register_module("bridge", bridge);
}

Encoder::Output Encoder::operator()(const Tensor& src, const Tensor& src_keep) const {
  Tensor x = dropout(embedding(src));  // (B, S, E)
  const bool lengths = src_keep.defined() && src_keep.dtype() == DType::i64;  // not yet a keep mask
  auto [outputs, h_n] = rnn(x, {.lengths = lengths ? src_keep : Tensor(), .keep = lengths ? Tensor() : src_keep});
  // outputs (B, S, 2H), h_n (2L, B, H)
  int64_t batch = src.size(0);
  // h_n rows are ordered (layer, direction): pair each layer's forward and backward states
  Tensor pairs = h_n.view({num_layers_, 2, batch, hidden_size_}).permute({0, 2, 1, 3});  // (L, B, 2, H)
  Tensor state = tanh(bridge(pairs.reshape({num_layers_, batch, 2 * hidden_size_})));     // (L, B, H)
  return {outputs, state};
}

// ---- decoder

namespace {

// Before the decoder held one attention module, it built an AdditiveAttention and the scaled-dot
// query projection for every kind and registered the ones it used. Each module draws its
// initial weights at construction, so the decoder skips the draws of the part a kind lacks: a
// seed gives the same initial weights, and the same training, as before.
void skip_initial_draws(int64_t count) { default_generator().reserve(static_cast<uint64_t>(count)); }

std::unique_ptr<nn::Attention> make_attention(const Seq2SeqConfig& c) {
  int64_t h = c.hidden_size, width = c.attention_size ? c.attention_size : c.hidden_size;
  switch (c.attention) {
    case AttentionKind::additive: {
      auto additive = std::make_unique<nn::AdditiveAttention>(
          nn::AdditiveAttention::Options{.query_size = h, .key_size = 2 * h, .hidden_size = width});
      skip_initial_draws(2 * h * h);  // the query projection (2H, H)
      return additive;
    }
    case AttentionKind::scaled_dot:
      skip_initial_draws(width * h + width * 2 * h + width);  // the additive w_q (A, H), w_k (A, 2H), w_v (1, A)
      return std::make_unique<nn::ScaledDotProductAttention>(
          nn::DotProductAttention::Options{.query_size = h, .key_size = 2 * h});
    case AttentionKind::hybrid:
      return std::make_unique<nn::HybridAttention>(
          nn::HybridAttention::Options{.query_size = h, .key_size = 2 * h, .hidden_size = width});
  }
  throw ValueError(fmt::format("seq2seq: unknown attention kind {}", static_cast<int>(c.attention)));
}

}  // namespace

AttnDecoder::AttnDecoder(const Seq2SeqConfig& c)
    : nn::Module("AttnDecoder"),
      embedding({.num_embeddings = c.tgt_vocab, .embedding_dim = c.embed_size, .padding_idx = c.pad_id}),
      dropout({.p = c.dropout}),
      attention(make_attention(c)),
      rnn({.input_size = c.embed_size + 2 * c.hidden_size, .hidden_size = c.hidden_size, .num_layers = c.num_layers,
           .dropout = c.dropout}),
      out({.in_features = c.deep_output ? 3 * c.hidden_size + c.embed_size : c.hidden_size,
           .out_features = c.tgt_vocab}),
      config_(c) {
  register_module("embedding", embedding);
  register_module("dropout", dropout);
  // The checkpoint names from before (model.h): the parts are registered, not the wrapper. The
  // wrappers hold no parameters of their own and their attention dropout is 0.
  if (auto* hybrid = dynamic_cast<nn::HybridAttention*>(attention.get())) {
    register_module("attention", hybrid->additive);
    register_module("query_proj", *hybrid->scaled_dot.w_q);
  } else if (auto* dot = dynamic_cast<nn::DotProductAttention*>(attention.get())) {
    register_module("query_proj", *dot->w_q);
  } else {
    register_module("attention", *attention);
  }
  register_module("rnn", rnn);
  register_module("out", out);
}

AttnDecoder::Memory AttnDecoder::prepare(const Tensor& encoder_outputs, const Tensor& src_keep) const {
  return attention->prepare(encoder_outputs, encoder_outputs, src_keep);  // keys = values = (B, S, 2H)
}

const nn::AdditiveAttention* AttnDecoder::additive_part() const {
  if (auto* hybrid = dynamic_cast<const nn::HybridAttention*>(attention.get())) return &hybrid->additive;
  return dynamic_cast<const nn::AdditiveAttention*>(attention.get());
}

const nn::Quantizable<nn::Linear>* AttnDecoder::query_projection() const {
  if (auto* hybrid = dynamic_cast<const nn::HybridAttention*>(attention.get())) return hybrid->scaled_dot.w_q.get();
  auto* dot = dynamic_cast<const nn::DotProductAttention*>(attention.get());
  return dot ? dot->w_q.get() : nullptr;
}

Tensor AttnDecoder::last_energies() const {
  const nn::AdditiveAttention* additive = additive_part();  // hybrid: its additive half's energies
  return additive ? additive->last_scores() : attention->last_scores();  // scaled dot: q·k/√d
}

AttnDecoder::Advance AttnDecoder::advance(const Tensor& embedded_step, const Tensor& embedded_projection,
                                          const Tensor& state, const Memory& memory) const {
  Tensor query = state.select(0, config_.num_layers - 1).unsqueeze(1);  // (B, 1, H)
  Tensor context = attention->attend(query, memory);                    // (B, 1, 2H)
  Tensor weights = attention->last_weights(), energies = last_energies();  // (B, 1, S) each
  Tensor embedded = embedded_step.unsqueeze(1);                         // (B, 1, E)
  auto [output, new_state] = embedded_projection.defined()
                                 ? rnn(context, {.h0 = state, .leading_projection = embedded_projection})
                                 : rnn(cat({embedded, context}, 2), {.h0 = state});  // (B, 1, H), (L, B, H)
  Tensor features = config_.deep_output ? cat({output, context, embedded}, 2) : output;  // (B, 1, F)
  return {features, new_state, weights.squeeze(1), energies.defined() ? energies.squeeze(1) : Tensor()};
}

AttnDecoder::Step AttnDecoder::step(const Tensor& y_prev, const Tensor& state, const Memory& memory) const {
  Advance a = advance(dropout(embedding(y_prev)), Tensor(), state, memory);
  return {out(a.features).squeeze(1), a.state, a.weights, a.energies};  // logits (B, V)
}

AttnDecoder::Step AttnDecoder::attend(const Tensor& y_prev, const Tensor& state, const Memory& memory) const {
  Advance a = advance(dropout(embedding(y_prev)), Tensor(), state, memory);
  return {Tensor(), a.state, a.weights, a.energies};
}

Tensor AttnDecoder::operator()(const Tensor& tgt_in, Tensor state, const Memory& memory) const {
  // What does not depend on the previous step is computed for every step at once: the embeddings,
  // their share of the GRU's input projection (one (B·T, E) product; the int8 GRU projects its
  // whole input per step) and, after the loop, the output layer (M = B·T rows, not T products of
  // B rows, and one weight-gradient product in backward).
  Tensor embedded = dropout(embedding(tgt_in));  // (B, T, E)
  Tensor projected = rnn.quantized() ? Tensor() : rnn->project_leading(embedded);  // (B, T, 3H)
  std::vector<Tensor> features;
  for (int64_t t = 0; t < tgt_in.size(1); ++t) {
    Advance a = advance(embedded.select(1, t), projected.defined() ? projected.narrow(1, t, 1) : Tensor(), state,
                        memory);
    features.push_back(a.features);
    state = a.state;
  }
  return out(cat(features, 1));  // (B, T, F) -> (B, T, V)
}

// ---- the whole model

Seq2Seq::Seq2Seq(const Seq2SeqConfig& c) : TranslationModel("Seq2Seq"), config_(c), encoder(c), decoder(c) {
  config_.validate();
  register_module("encoder", encoder);
  register_module("decoder", decoder);
}

Tensor Seq2Seq::operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const {
  SG_CHECK_SHAPE(src.ndim() == 2 && tgt_in.ndim() == 2 && src.size(0) == tgt_in.size(0),
                 "seq2seq: src {} and tgt_in {} must be (B, S) and (B, T) with the same batch", src.shape(),
                 tgt_in.shape());
  Encoded source = encode(src, src_lengths);
  return decoder(tgt_in, source.state, source.memory);
}

Seq2Seq::Encoded Seq2Seq::encode(const Tensor& src, const Tensor& src_lengths) const {
  SG_CHECK_SHAPE(src.ndim() == 2 && src_lengths.defined() && src_lengths.ndim() == 1 &&
                     src_lengths.size(0) == src.size(0),
                 "seq2seq: src {} and src_lengths {} must be (B, S) and (B,)", src.shape(),
                 src_lengths.defined() ? src_lengths.shape() : Shape{});
  Tensor keep = nn::keep_mask(src_lengths, src.size(1), "seq2seq");  // (B, S)
  Encoder::Output enc = encoder(src, keep);
  return {enc.state, decoder.prepare(enc.outputs, keep)};
}

namespace {

// A search's decoder rows: the GRU's state, and each row's sentence memory gathered from the
// batch's (only when the rows' sentences change, not at every step).
struct GruSearchState : TranslationModel::SearchState {
  Tensor state;                        // (L, N, H)
  AttnDecoder::Memory sentences, rows;  // per sentence; per row
  SentenceRows sentence_of_row{0};
};

}  // namespace

std::unique_ptr<TranslationModel::SearchState> Seq2Seq::start(const Tensor& src, const Tensor& src_lengths) const {
  Encoded e = encode(src, src_lengths);
  auto s = std::make_unique<GruSearchState>();
  s->state = e.state;
  s->sentences = s->rows = e.memory;
  s->sentence_of_row = SentenceRows(src.size(0));
  return s;
}

TranslationModel::StepOutput Seq2Seq::step(SearchState& state, const Tensor& y_prev) const {
  auto& s = dynamic_cast<GruSearchState&>(state);
  AttnDecoder::Step out = decoder.step(y_prev, s.state, s.rows);
  s.state = out.state;
  return {.logits = out.logits, .weights = out.weights, .energies = out.energies};
}

void Seq2Seq::reorder(SearchState& state, const std::vector<int64_t>& rows) const {
  auto& s = dynamic_cast<GruSearchState&>(state);
  const Device device = s.state.device();
  s.state = index_select(s.state, 1, row_index(rows, device));  // (L, N, H)
  if (std::vector<int64_t> sentences = s.sentence_of_row.reorder(rows); !sentences.empty())
    s.rows = s.sentences.select_rows(row_index(sentences, device));
}

bool Seq2Seq::can_merge(const SearchState&, const SearchState&) const {
  return true;  // a row's state is its own (L, 1, H) slice, whatever the others have decoded
}

namespace {

// The GRU attends over its encoder outputs as keys and as values, with one keep mask, in every
// part (AttnDecoder::prepare); a reorder gathers each handle into a copy of its own. As one tensor
// again (the copies are equal), a merge copies them once.
nn::AttentionMemory one_source(nn::AttentionMemory m, const Tensor& outputs, const Tensor& keep) {
  m.keys = m.values = outputs;
  m.key_keep = keep;
  for (nn::AttentionMemory& part : m.parts) part = one_source(std::move(part), outputs, keep);
  return m;
}

nn::AttentionMemory one_source(const nn::AttentionMemory& m) { return one_source(m, m.keys, m.key_keep); }

}  // namespace

void Seq2Seq::merge(SearchState& into, SearchState&& from) const {
  auto& a = dynamic_cast<GruSearchState&>(into);
  auto& b = dynamic_cast<GruSearchState&>(from);
  a.state = cat({a.state, b.state}, 1);  // (L, N_a + N_b, H)
  // The rows' memories become the sentences' (one per row): what reorder gathers from from now on
  // is no larger than the live rows, however many sentences have come and gone.
  a.rows = a.sentences = concat_memories(one_source(a.rows), one_source(b.rows), 1);  // projected keys (B, K, A)
  a.sentence_of_row = SentenceRows(a.state.size(1));
}

namespace {

// t with its `axis` cut or padded to `width` positions (padded with zeros: false for a keep mask).
Tensor fit_axis(const Tensor& t, int64_t axis, int64_t width) {
  if (axis < 0) axis += t.ndim();
  if (t.size(axis) == width) return t;
  if (t.size(axis) > width) return t.narrow(axis, 0, width);
  Shape padding = t.shape();
  padding[axis] = width - t.size(axis);
  return cat({t, zeros(padding, {.dtype = t.dtype(), .device = t.device()})}, axis);
}

// Whether x and y are one tensor's handles.
bool same_tensor(const Tensor& x, const Tensor& y) {
  return x.raw_data() == y.raw_data() && x.shape() == y.shape() && x.strides() == y.strides();
}

// A memory's keep mask, (B, 1, K) of true where it has none (every key attended).
Tensor keep_or_all(const nn::AttentionMemory& m) {
  if (m.key_keep.defined()) return m.key_keep;
  return ones({m.keys.size(0), 1, m.keys.size(1)}, {.dtype = DType::b8, .device = m.keys.device()});
}

// The key positions that some row of m attends to: up to its last kept one (every position when
// there is no keep mask). Rows that left a search may have left padding nobody needs.
int64_t used_width(const nn::AttentionMemory& m) {
  if (!m.key_keep.defined()) return m.keys.size(1);
  const int64_t width = m.key_keep.size(-1);
  const std::vector<int64_t> keep = m.key_keep.to(DType::i64).to_vector<int64_t>();  // (B, 1 | Q, K)
  int64_t used = 1;
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i] != 0) used = std::max(used, static_cast<int64_t>(i) % width + 1);
  return used;
}

// Two memories' tensors joined along the batch, each cut or padded on its key axis to `width`; a pair
// that several fields share (the GRU's keys and values) is joined once, and the result shared.
class MemoryJoin {
 public:
  MemoryJoin(int64_t width, int64_t projected_key_axis) : width_(width), projected_key_axis_(projected_key_axis) {}

  nn::AttentionMemory operator()(const nn::AttentionMemory& a, const nn::AttentionMemory& b) {
    SG_CHECK(a.projected.size() == b.projected.size() && a.parts.size() == b.parts.size(),
             "concat_memories: the memories were prepared by different attention kinds ({} and {} projections)",
             a.projected.size(), b.projected.size());
    nn::AttentionMemory m{join(a.keys, b.keys, 1), join(a.values, b.values, 1), {}, {}, {}};
    if (a.key_keep.defined() || b.key_keep.defined() || a.keys.size(1) != b.keys.size(1))
      m.key_keep = join(keep_or_all(a), keep_or_all(b), -1);
    for (size_t i = 0; i < a.projected.size(); ++i)
      m.projected.push_back(join(a.projected[i], b.projected[i], projected_key_axis_));
    for (size_t i = 0; i < a.parts.size(); ++i) m.parts.push_back((*this)(a.parts[i], b.parts[i]));
    return m;
  }

 private:
  struct Joined {
    Tensor x, y, out;
  };
  Tensor join(const Tensor& x, const Tensor& y, int64_t axis) {
    for (const Joined& j : joined_)
      if (same_tensor(j.x, x) && same_tensor(j.y, y)) return j.out;
    Tensor out = cat({fit_axis(x, axis, width_), fit_axis(y, axis, width_)}, 0);
    joined_.push_back({x, y, out});
    return out;
  }

  int64_t width_, projected_key_axis_;
  std::vector<Joined> joined_;
};

}  // namespace

nn::AttentionMemory concat_memories(const nn::AttentionMemory& a, const nn::AttentionMemory& b,
                                    int64_t projected_key_axis) {
  return MemoryJoin(std::max(used_width(a), used_width(b)), projected_key_axis)(a, b);
}

Tensor row_index(const std::vector<int64_t>& rows, Device device) {
  return from_vector(rows, {static_cast<int64_t>(rows.size())}, {.dtype = DType::i64, .device = device});
}

SentenceRows::SentenceRows(int64_t sentences) {
  for (int64_t b = 0; b < sentences; ++b) sentence_of_row_.push_back(b);
}

std::vector<int64_t> SentenceRows::reorder(const std::vector<int64_t>& rows) {
  std::vector<int64_t> sentences;
  for (int64_t r : rows) sentences.push_back(sentence_of_row_.at(r));
  if (sentences == sentence_of_row_) return {};
  sentence_of_row_ = sentences;
  return sentences;
}

void init_xavier(Seq2Seq& model) {
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    bool is_bias = name.find("bias") != std::string::npos;
    if (is_bias || p.ndim() < 2) {
      p.zero_();
      continue;
    }
    nn::init::xavier_uniform_(p);
  }
  for (nn::Embedding* e : {&*model.encoder.embedding, &*model.decoder.embedding})
    e->weight.select(0, model.config().pad_id).zero_();
}

}  // namespace seqgrad::models
