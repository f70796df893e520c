// The Transformer's layers and stacks: MultiHeadAttention, LayerNorm and Linear wired as
// torch.nn.TransformerEncoderLayer / TransformerDecoderLayer, and the decoder's cached step.
#include "nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "transformer";

const TransformerLayerOptions& checked(const TransformerLayerOptions& o) {
  SG_CHECK_VALUE(o.d_model > 0, "{}: d_model = {} must be positive", kOp, o.d_model);
  SG_CHECK_VALUE(o.nhead > 0 && o.d_model % o.nhead == 0, "{}: nhead = {} must be positive and divide d_model = {}",
                 kOp, o.nhead, o.d_model);
  SG_CHECK_VALUE(o.dim_feedforward > 0, "{}: dim_feedforward = {} must be positive", kOp, o.dim_feedforward);
  SG_CHECK_VALUE(o.dropout >= 0 && o.dropout < 1, "{}: dropout = {} not in [0, 1)", kOp, o.dropout);
  return o;
}

MultiHeadAttention::Options attention_options(const TransformerLayerOptions& o) {
  return {.embed_dim = checked(o).d_model, .num_heads = o.nhead, .dropout = o.dropout};
}

LayerNorm::Options norm_options(const TransformerLayerOptions& o) {
  return {.normalized_shape = {o.d_model}, .eps = o.layer_norm_eps};
}

// A module's input x (T, B, E), or (B, T, E) when batch_first, as (B, T, E); `what` names it.
Tensor batch_major(const Tensor& x, const TransformerLayerOptions& o, const char* what) {
  SG_CHECK(x.defined(), "{}: {} is undefined", kOp, what);
  SG_CHECK_SHAPE(x.ndim() == 3 && x.size(2) == o.d_model, "{}: {} must be {} with E = d_model = {}, got {}", kOp,
                 what, o.batch_first ? "(B, T, E)" : "(T, B, E)", o.d_model, x.shape());
  return o.batch_first ? x : x.transpose(0, 1);
}

// (B, T, E) back to the caller's layout.
Tensor caller_major(const Tensor& x, const TransformerLayerOptions& o) {
  return o.batch_first ? x : x.transpose(0, 1);
}

}  // namespace

// ---- the layers

namespace detail {

TransformerLayerBase::TransformerLayerBase(std::string type_name, const Options& options)
    : Module(std::move(type_name)),
      linear1({.in_features = checked(options).d_model, .out_features = options.dim_feedforward}),
      dropout({.p = options.dropout}),
      linear2({.in_features = options.dim_feedforward, .out_features = options.d_model}),
      options_(options) {}

void TransformerLayerBase::register_feed_forward() {
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
}

Tensor TransformerLayerBase::feed_forward(const Tensor& x) const {
  Tensor h = linear1(x);  // (B, T, F)
  h = options_.activation == TransformerActivation::gelu ? gelu(h) : relu(h);
  return linear2(dropout(h));  // (B, T, E)
}

}  // namespace detail

TransformerEncoderLayer::TransformerEncoderLayer(Options options)
    : TransformerLayerBase("TransformerEncoderLayer", options),
      self_attn(attention_options(options)),
      norm1(norm_options(options)),
      norm2(norm_options(options)),
      dropout1({.p = options.dropout}),
      dropout2({.p = options.dropout}) {
  register_module("self_attn", self_attn);
  register_feed_forward();
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::forward_batch_first(const Tensor& x, const Tensor& mask) const {
  Tensor h = residual(x, norm1, dropout1, [&](const Tensor& y) { return self_attn(y, y, y, mask); });  // (B, T, E)
  return residual(h, norm2, dropout2, [&](const Tensor& y) { return feed_forward(y); });
}

Tensor TransformerEncoderLayer::operator()(const Tensor& src, const Tensor& mask) const {
  return caller_major(forward_batch_first(batch_major(src, options_, "src"), mask), options_);
}

TransformerDecoderLayer::TransformerDecoderLayer(Options options)
    : TransformerLayerBase("TransformerDecoderLayer", options),
      self_attn(attention_options(options)),
      multihead_attn(attention_options(options)),
      norm1(norm_options(options)),
      norm2(norm_options(options)),
      norm3(norm_options(options)),
      dropout1({.p = options.dropout}),
      dropout2({.p = options.dropout}),
      dropout3({.p = options.dropout}) {
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_feed_forward();
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
  register_module("dropout3", dropout3);
}

template <class SelfAttend, class CrossAttend>
Tensor TransformerDecoderLayer::layer(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend) const {
  Tensor h = residual(x, norm1, dropout1, self_attend);  // (B, T, E)
  h = residual(h, norm2, dropout2, cross_attend);
  return residual(h, norm3, dropout3, [&](const Tensor& y) { return feed_forward(y); });
}

Tensor TransformerDecoderLayer::forward_batch_first(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask,
                                                    const Tensor& memory_mask) const {
  return layer(
      x, [&](const Tensor& y) { return self_attn(y, y, y, tgt_mask); },
      [&](const Tensor& y) { return multihead_attn(y, memory, memory, memory_mask); });
}

Tensor TransformerDecoderLayer::operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                           const Tensor& memory_mask) const {
  Tensor x = batch_major(tgt, options_, "tgt"), m = batch_major(memory, options_, "memory");
  return caller_major(forward_batch_first(x, m, tgt_mask, memory_mask), options_);
}

namespace {

// `cache` (B, h, capacity, d) holding t positions, with `heads` (B, h, 1, d) written at position t.
// In place while there is room; when there is none, into a buffer twice as long, so T steps copy
// O(T) positions in all (a cat per step copies O(T²)). Under autograd the graph must reach every
// cached position, which an in-place write into a view cannot keep: then the cache grows by cat.
Tensor append_position(const Tensor& cache, int64_t t, const Tensor& heads) {
  if (GradMode::is_enabled() && (heads.requires_grad() || (cache.defined() && cache.requires_grad())))
    return t == 0 ? heads : cat({cache.narrow(2, 0, t), heads}, 2);
  Tensor out = cache;
  if (!cache.defined() || cache.size(2) <= t || cache.size(0) != heads.size(0)) {
    const int64_t capacity = std::max<int64_t>(16, 2 * (t + 1));
    out = empty({heads.size(0), heads.size(1), capacity, heads.size(3)},
                {.dtype = heads.dtype(), .device = heads.device()});
    if (t > 0) out.narrow(2, 0, t).copy_(cache.narrow(2, 0, t));
  }
  out.narrow(2, t, 1).copy_(heads);
  return out;
}

}  // namespace

Tensor TransformerDecoderLayer::step(const Tensor& x, Tensor& keys, Tensor& values, int64_t cached,
                                     const AttentionMemory& memory) const {
  SG_CHECK(x.defined(), "{}: the step's input is undefined", kOp);
  SG_CHECK_SHAPE(x.ndim() == 2 && x.size(1) == options_.d_model,
                 "{}: a step's input must be (B, E) with E = d_model = {}, got {}", kOp, options_.d_model, x.shape());
  // The new position's keys and values are projected once and appended; its query then attends to
  // every cached position, which is the causal mask's row for it.
  auto self_attend = [&](const Tensor& y) {  // y (B, 1, E)
    AttentionMemory own = self_attn.prepare(y, y);  // projected: this position's heads (B, h, 1, d)
    keys = append_position(keys, cached, own.projected[0]);
    values = append_position(values, cached, own.projected[1]);
    own.projected = {keys.narrow(2, 0, cached + 1), values.narrow(2, 0, cached + 1)};  // (B, h, t + 1, d)
    return self_attn.attend(y, own);
  };
  auto cross_attend = [&](const Tensor& y) { return multihead_attn.attend(y, memory); };
  return layer(x.unsqueeze(1), self_attend, cross_attend).squeeze(1);  // (B, E)
}

// ---- the stacks

namespace detail {

template <class Layer>
TransformerStack<Layer>::TransformerStack(std::string type_name, Options options)
    : Module(std::move(type_name)), options_(std::move(options)) {
  SG_CHECK_VALUE(options_.num_layers > 0, "{}: num_layers = {} must be positive", kOp, options_.num_layers);
  for (int64_t i = 0; i < options_.num_layers; ++i) layers.push_back<Layer>(options_.layer);
  register_module("layers", layers);
  if (options_.norm) {
    norm = std::make_unique<LayerNorm>(norm_options(options_.layer));
    register_module("norm", *norm);
  }
}

template class TransformerStack<TransformerEncoderLayer>;
template class TransformerStack<TransformerDecoderLayer>;

}  // namespace detail

Tensor TransformerEncoder::operator()(const Tensor& src, const Tensor& mask) const {
  Tensor x = batch_major(src, options_.layer, "src");  // (B, T, E)
  for (int64_t i = 0; i < options_.num_layers; ++i) x = layer(i).forward_batch_first(x, mask);
  return caller_major(final_norm(x), options_.layer);
}

Tensor TransformerDecoder::operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                      const Tensor& memory_mask) const {
  Tensor x = batch_major(tgt, options_.layer, "tgt"), m = batch_major(memory, options_.layer, "memory");
  for (int64_t i = 0; i < options_.num_layers; ++i) x = layer(i).forward_batch_first(x, m, tgt_mask, memory_mask);
  return caller_major(final_norm(x), options_.layer);
}

TransformerDecoder::State TransformerDecoder::start(const Tensor& memory, const Tensor& memory_mask) const {
  Tensor m = batch_major(memory, options_.layer, "memory");  // (B, S, E)
  State state;
  for (int64_t i = 0; i < options_.num_layers; ++i) {
    state.memory.push_back(layer(i).multihead_attn.prepare(m, m, memory_mask));
    state.keys.emplace_back();
    state.values.emplace_back();
  }
  return state;
}

Tensor TransformerDecoder::step(const Tensor& x, State& state) const {
  SG_CHECK(state.memory.size() == static_cast<size_t>(options_.num_layers) &&
               state.keys.size() == state.memory.size() && state.values.size() == state.memory.size(),
           "{}: the decoder state holds {} layers for a decoder of {}: make it with this decoder's start()", kOp,
           state.memory.size(), options_.num_layers);
  Tensor h = x;  // (B, E)
  for (int64_t i = 0; i < options_.num_layers; ++i)
    h = layer(i).step(h, state.keys[i], state.values[i], state.steps, state.memory[i]);
  ++state.steps;
  return final_norm(h);
}

TransformerDecoder::State TransformerDecoder::State::select_rows(const Tensor& index) const {
  State out;
  // the rows of the whole buffer (its capacity at most twice the positions cached): the appends go on in place
  auto rows = [&index](const Tensor& t) { return t.defined() ? index_select(t, 0, index) : t; };
  for (size_t i = 0; i < memory.size(); ++i) {
    out.keys.push_back(rows(keys[i]));
    out.values.push_back(rows(values[i]));
    out.memory.push_back(memory[i].select_rows(index));
  }
  out.steps = steps;
  return out;
}

}  // namespace seqgrad::nn
