// The Transformer's layers (Vaswani et al., 2017) with torch.nn's options, semantics and parameter
// names, so a torch state_dict loads as is:
//   TransformerEncoderLayer  self_attn, linear1, linear2, norm1, norm2 (dropout, dropout1, dropout2)
//   TransformerDecoderLayer  self_attn, multihead_attn, linear1, linear2, norm1..3 (dropout, dropout1..3)
//   TransformerEncoder / TransformerDecoder  layers.<i>.…, and norm.… when Options::norm is set
// Each sublayer f (attention or the feed-forward block linear2(dropout(activation(linear1(x)))))
// is wrapped as
//   post-norm (norm_first = false, the paper's):  x = norm(x + dropout(f(x)))
//   pre-norm  (norm_first = true):                x = x + dropout(f(norm(x)))
// The attentions are nn::MultiHeadAttention (its per-head weights stay readable after a call:
// layer.self_attn.last_head_weights()).
//
// Masks are the attention family's one mask argument (nn/attention_base.h): int64 valid lengths
// (B,) for padding (torch's key_padding_mask), per-query lengths (B, T) for causal attention
// (nn::causal_lengths(lengths, T): query t sees the real keys j <= t), or a bool keep mask (true =
// attend). Differences from torch: a query with no key to attend gets a zero context, not NaN;
// there is no separate float attn_mask.
//
// Incremental decoding (search): TransformerDecoder::start projects the encoder's output once per
// layer; step(x_t, state) decodes one target position from the cached keys and values of the
// previous ones (each layer's self-attention projects only the new position), which gives the
// numbers of the full causal forward over the prefix. state.select_rows(index) keeps beam rows.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/attention_multihead.h"
#include "nn/containers.h"
#include "nn/dropout.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/quantized.h"

namespace seqgrad::nn {

enum class TransformerActivation { relu, gelu };  // gelu is the exact (erf) form, as torch's "gelu"

// torch.nn.TransformerEncoderLayer's / TransformerDecoderLayer's arguments and defaults.
struct TransformerLayerOptions {
  int64_t d_model = 0;             // E; nhead must divide it
  int64_t nhead = 1;
  int64_t dim_feedforward = 2048;  // the feed-forward block's hidden size
  double dropout = 0.1;            // on each sublayer's output, inside the feed-forward block and on
                                   // the attention weights, in [0, 1)
  TransformerActivation activation = TransformerActivation::relu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;        // (B, T, E) instead of torch's default (T, B, E)
  bool norm_first = false;         // pre-norm instead of post-norm
};

namespace detail {

// What both layers share: the options, the feed-forward block and the residual wrapping.
class TransformerLayerBase : public Module {
 public:
  using Options = TransformerLayerOptions;
  const Options& options() const { return options_; }

  // int8 after nn::quantize_dynamic, as torch's quantize_dynamic swaps a Transformer's linear1/linear2
  Quantizable<Linear> linear1;  // (dim_feedforward, E)
  Dropout dropout;
  Quantizable<Linear> linear2;  // (E, dim_feedforward)

 protected:
  TransformerLayerBase(std::string type_name, const Options& options);
  // Registers linear1, dropout and linear2; the layers call it after their attentions, so the
  // parameters come in torch's order.
  void register_feed_forward();
  // linear2(dropout(activation(linear1(x)))): (B, T, E) -> (B, T, E)
  Tensor feed_forward(const Tensor& x) const;
  // x with the sublayer f added around `norm` (post-norm or pre-norm) and its output dropped out.
  template <class F>
  Tensor residual(const Tensor& x, const LayerNorm& norm, const Dropout& drop, F&& f) const {
    return options_.norm_first ? add(x, drop(f(norm(x)))) : norm(add(x, drop(f(x))));
  }
  Options options_;
};

}  // namespace detail

class TransformerEncoderLayer : public detail::TransformerLayerBase {
 public:
  explicit TransformerEncoderLayer(Options options);
  // src (T, B, E) or (B, T, E) (batch_first) -> the same shape. mask: the self-attention's (B,)
  // valid lengths, (B, T) per-query lengths or keep mask, or undefined.
  Tensor operator()(const Tensor& src, const Tensor& mask = {}) const;
  Tensor forward_batch_first(const Tensor& x, const Tensor& mask = {}) const;  // x (B, T, E)

  MultiHeadAttention self_attn;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
};

class TransformerDecoderLayer : public detail::TransformerLayerBase {
 public:
  explicit TransformerDecoderLayer(Options options);
  // tgt (T, B, E), memory (S, B, E) (or batch-first) -> tgt's shape. tgt_mask: the self-attention's
  // mask (causal: causal_lengths(tgt_lengths, T)); memory_mask: the cross-attention's (source
  // valid lengths (B,)).
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                    const Tensor& memory_mask = {}) const;
  Tensor forward_batch_first(const Tensor& x, const Tensor& memory, const Tensor& tgt_mask = {},
                             const Tensor& memory_mask = {}) const;  // x (B, T, E), memory (B, S, E)
  // One target position x (B, E) after the `cached` positions before it, whose self-attention
  // heads are the first `cached` of `keys` and `values` (B, h, capacity, d) (undefined when
  // cached = 0); this position's are written after them, in place (the buffers grow, doubling,
  // when full); memory: multihead_attn.prepare(memory, memory, memory_mask). -> (B, E)
  Tensor step(const Tensor& x, Tensor& keys, Tensor& values, int64_t cached, const AttentionMemory& memory) const;

  MultiHeadAttention self_attn;
  MultiHeadAttention multihead_attn;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  // The three sublayers around the two attentions given as functions of the normed input.
  template <class SelfAttend, class CrossAttend>
  Tensor layer(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend) const;
};

// torch.nn.TransformerEncoder / TransformerDecoder: num_layers copies of a layer (each with its
// own parameters), then an optional final LayerNorm (pre-norm stacks want one).
struct TransformerStackOptions {
  TransformerLayerOptions layer = {};
  int64_t num_layers = 1;
  bool norm = false;  // a final LayerNorm "norm" over the last layer's output
};

namespace detail {

// What both stacks share: the layers, the final norm and the options.
template <class Layer>
class TransformerStack : public Module {
 public:
  using Options = TransformerStackOptions;
  Layer& layer(int64_t i) const { return layers.at<Layer>(i); }
  const Options& options() const { return options_; }

  ModuleList layers;                // "layers.<i>"
  std::unique_ptr<LayerNorm> norm;  // when options.norm

 protected:
  TransformerStack(std::string type_name, Options options);
  Tensor final_norm(const Tensor& x) const { return norm ? (*norm)(x) : x; }
  Options options_;
};

}  // namespace detail

class TransformerEncoder : public detail::TransformerStack<TransformerEncoderLayer> {
 public:
  explicit TransformerEncoder(Options options) : TransformerStack("TransformerEncoder", std::move(options)) {}
  // src (T, B, E) or (B, T, E) -> the same shape; mask as TransformerEncoderLayer's.
  Tensor operator()(const Tensor& src, const Tensor& mask = {}) const;
};

class TransformerDecoder : public detail::TransformerStack<TransformerDecoderLayer> {
 public:
  explicit TransformerDecoder(Options options) : TransformerStack("TransformerDecoder", std::move(options)) {}
  // tgt (T, B, E), memory (S, B, E) (or batch-first) -> tgt's shape; masks as the layer's.
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                    const Tensor& memory_mask = {}) const;

  // What incremental decoding carries from one position to the next, for a batch of B rows.
  struct State {
    // per layer: the self-attention heads so far, the first `steps` positions of (B, h, capacity, d)
    // buffers written in place (cached_keys/cached_values: those positions)
    std::vector<Tensor> keys, values;
    std::vector<AttentionMemory> memory;  // per layer: the cross-attention's keys and values, projected once
    int64_t steps = 0;                    // target positions decoded so far
    Tensor cached_keys(size_t layer) const { return keys[layer].narrow(2, 0, steps); }      // (B, h, steps, d)
    Tensor cached_values(size_t layer) const { return values[layer].narrow(2, 0, steps); }  // (B, h, steps, d)
    // The rows `index` (int64 (N,)) of every tensor, in that order: a beam search's surviving
    // hypotheses (N may differ from B, e.g. B sentences expanded to B·beam rows).
    State select_rows(const Tensor& index) const;
  };
  // memory (S, B, E) or (B, S, E), memory_mask as the layer's -> the state before position 0.
  State start(const Tensor& memory, const Tensor& memory_mask = {}) const;
  // x (B, E): the target input at position state.steps (embedded, position-encoded) -> the
  // decoder's output there (B, E) (after the final norm); the state advances by one position.
  Tensor step(const Tensor& x, State& state) const;
};

}  // namespace seqgrad::nn
