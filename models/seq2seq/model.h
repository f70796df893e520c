// The seq2seq translator with attention (Bahdanau et al. 2015); README.md's section on training
// the translator describes its presets and runs:
//   Encoder:  Embedding(V_src, E) -> bidirectional GRU(E, H, L) -> outputs (B, S, 2H);
//             bridge: per layer, tanh(Linear(2H -> H)(concat(h_fwd, h_bwd))) -> decoder state (L, B, H).
//   Decoder step t: query = top-layer state s_{t-1} (B, H); attention over the encoder outputs with
//             the source lengths masked -> context (B, 2H); GRU input = concat(Embedding(y_{t-1}), context);
//             logits = Linear(H [+ 2H + E with deep_output] -> V_tgt).
// The decoder holds one nn attention module chosen by kind (nn::AdditiveAttention,
// nn::ScaledDotProductAttention or nn::HybridAttention); its key projection and the source keep
// mask are prepared once per batch (Seq2Seq::encode), not at every decoder step.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "models/seq2seq/model_config.h"
#include "models/seq2seq/translation_model.h"
#include "nn/nn.h"

namespace seqgrad::models {

class Encoder : public nn::Module {
 public:
  explicit Encoder(const Seq2SeqConfig& config);
  struct Output {
    Tensor outputs;  // (B, S, 2H), zero at padded positions
    Tensor state;    // (L, B, H): the decoder's initial state
  };
  // src: (B, S) int64 ids; src_keep: (B, S) bool, true at real tokens (int64 lengths (B,) are
  // turned into it; Seq2Seq::encode does that once per batch for the encoder and the attention).
  Output operator()(const Tensor& src, const Tensor& src_keep) const;

  // Quantizable members: nn::quantize_dynamic swaps them for int8 modules (nn/quantized.h).
  nn::Quantizable<nn::Embedding> embedding;
  nn::Dropout dropout;
  nn::Quantizable<nn::GRU> rnn;
  nn::Quantizable<nn::Linear> bridge;

 private:
  int64_t num_layers_, hidden_size_;
};

class AttnDecoder : public nn::Module {
 public:
  explicit AttnDecoder(const Seq2SeqConfig& config);

  // What every decoder step attends to, prepared once per batch: keys = values = the encoder
  // outputs (B, S, 2H), the source keep mask (B, 1, S) (true = attend) from src_keep (B, S), and
  // the kind's key projection. A beam search over one sentence repeats it per hypothesis with
  // memory.expand(n).
  using Memory = nn::AttentionMemory;
  Memory prepare(const Tensor& encoder_outputs, const Tensor& src_keep) const;

  struct Step {
    Tensor logits;   // (B, V)
    Tensor state;    // (L, B, H)
    Tensor weights;  // (B, S) attention weights of this step
    Tensor energies;  // (B, S) pre-softmax scores: additive (also for hybrid), or scaled dot q·k/√d
  };
  // y_prev: (B,) previous target ids; state: (L, B, H).
  Step step(const Tensor& y_prev, const Tensor& state, const Memory& memory) const;
  // step() without the output layer (its logits undefined): the state and the attention, for what
  // reads only those (models/seq2seq/internals.h), at a fraction of a step's cost.
  Step attend(const Tensor& y_prev, const Tensor& state, const Memory& memory) const;

  // Teacher forcing over tgt_in (B, T): logits (B, T, V).
  Tensor operator()(const Tensor& tgt_in, Tensor state, const Memory& memory) const;

  nn::Quantizable<nn::Embedding> embedding;
  nn::Dropout dropout;
  // By config.attention: additive (query H, keys 2H, width A), scaled dot (w_q maps the query H
  // into the key space 2H) or hybrid (both). Checkpoint names are those of the model before it
  // used nn's classes: the additive part is "attention.*", the scaled-dot w_q is "query_proj.*".
  std::unique_ptr<nn::Attention> attention;
  nn::Quantizable<nn::GRU> rnn;
  nn::Quantizable<nn::Linear> out;

  // The attention's parts by role, for code that walks the weights (an exporter): the additive
  // part (additive, hybrid) and the scaled-dot query projection (scaled dot, hybrid); null when
  // the kind has none.
  const nn::AdditiveAttention* additive_part() const;
  const nn::Quantizable<nn::Linear>* query_projection() const;

 private:
  // A step up to the output layer's input: features (B, 1, F), F = H (+ 2H + E with deep_output).
  struct Advance {
    Tensor features, state, weights, energies;
  };
  // embedded_step (B, E): y_{t-1}'s embedding; embedded_projection (B, 1, 3H): its share of the GRU's
  // input projection computed ahead (teacher forcing), or undefined.
  Advance advance(const Tensor& embedded_step, const Tensor& embedded_projection, const Tensor& state,
                  const Memory& memory) const;
  // The pre-softmax scores of the last step (B, 1, S): the additive energies (for hybrid, its
  // additive half's), or scaled dot's q·k/√d.
  Tensor last_energies() const;

  Seq2SeqConfig config_;
};

class Seq2Seq : public TranslationModel {
 public:
  explicit Seq2Seq(const Seq2SeqConfig& config);
  // Teacher-forced logits (B, T, V) for src (B, S), src_lengths (B,), tgt_in (B, T).
  Tensor operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const override;

  // Search (TranslationModel): the state is the decoder's (L, N, H) and each row's sentence memory.
  std::unique_ptr<SearchState> start(const Tensor& src, const Tensor& src_lengths) const override;
  StepOutput step(SearchState& state, const Tensor& y_prev) const override;
  void reorder(SearchState& state, const std::vector<int64_t>& rows) const override;
  void merge(SearchState& into, SearchState&& from) const override;
  bool can_merge(const SearchState& into, const SearchState& from) const override;
  int64_t target_vocab() const override { return config_.tgt_vocab; }
  std::string architecture() const override { return "gru"; }

  // The source side of a batch, prepared once: src_lengths (B,) become the keep mask (B, S), true
  // at real tokens (nn::keep_mask; the lengths' one trip to the host), which the encoder's GRU and
  // the decoder's attention memory share.
  struct Encoded {
    Tensor state;                // (L, B, H): the decoder's initial state
    AttnDecoder::Memory memory;  // the encoder outputs (B, S, 2H) as keys and values, keep (B, 1, S)
  };
  Encoded encode(const Tensor& src, const Tensor& src_lengths) const;
  const Seq2SeqConfig& config() const { return config_; }

  Seq2SeqConfig config_;
  Encoder encoder;
  AttnDecoder decoder;
};

// Xavier-uniform weights and zero biases (the seeds' init); the embeddings' padding rows stay 0.
void init_xavier(Seq2Seq& model);

}  // namespace seqgrad::models
