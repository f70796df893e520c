// The terms of every attention energy along one translation, for learners who check them by hand
// (the serve explorer's cell details, docs/attention.md's formulas):
//   additive (Bahdanau et al. 2015):  e_ti = vᵀ tanh(W_q s_{t-1} + W_k h_i)
//   scaled dot:                       e_ti = (W_q s_{t-1}) · h_i / √(2H)
//   a_t = softmax(e_t) over the source,  c_t = Σ_i a_ti h_i
// t runs over the output tokens (its <eos> included when finished), i over the source tokens and
// the source's <eos>; s_{t-1} is the decoder's top-layer state before step t, h_i the encoder's
// output at i.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/seq2seq/model.h"
#include "models/seq2seq/transformer.h"

namespace seqgrad::models {

struct AttentionInternals {
  AttentionKind kind = AttentionKind::additive;  // hybrid: the terms of its additive half (Hypothesis::energies')
  std::vector<std::vector<float>> query_terms;  // per step t: W_q s_{t-1} (A values; scaled dot: 2H)
  std::vector<std::vector<float>> key_terms;    // per source position i: W_k h_i (A values; scaled dot: h_i, 2H)
  std::vector<float> v;                         // additive: v (A values); scaled dot: empty
  std::vector<std::vector<float>> energies;     // per step t: e_t (S values), as the decoder computed them
  std::vector<std::vector<float>> weights;      // per step t: a_t (S values)
  std::vector<std::vector<float>> contexts;     // per step t: c_t (2H values)
};

// Runs the decoder teacher-forced along `tokens` (the output's ids without <bos> and <eos>; one
// step more, for <eos>, when `finished`) over one sentence src (1, S) (its <eos> included), in
// eval mode under NoGradGuard, and returns each step's terms.
AttentionInternals attention_internals(Seq2Seq& model, const Tensor& src, const std::vector<int64_t>& tokens,
                                       bool finished, int64_t bos_id = 1, int64_t eos_id = 2);

// attention_internals one decoder step at a time (the model in eval mode), so that a server can
// interleave explaining a translation with its search's steps instead of holding them up for the
// whole pass: the constructor encodes the sentence, each step() adds one step's terms and says
// whether another remains; take() once it has none.
class AttentionInternalsPass {
 public:
  AttentionInternalsPass(Seq2Seq& model, const Tensor& src, std::vector<int64_t> tokens, bool finished,
                         int64_t bos_id = 1, int64_t eos_id = 2);
  bool step();
  bool done() const { return out_.query_terms.size() == steps_; }
  AttentionInternals take() { return std::move(out_); }

 private:
  Seq2Seq& model_;
  std::vector<int64_t> tokens_;
  size_t steps_;
  int64_t previous_, eos_id_;
  Tensor outputs_, state_;
  AttnDecoder::Memory memory_;
  AttentionInternals out_;
};

// A Transformer's attention along one translation, every layer and head (BertViz's views): for
// layer l and head j, q_t = W_q y_t and k_i = W_k m_i split into heads of d = E / h values,
//   e_ti = q_t · k_i / √d,   a_t = softmax(e_t) over the source positions
// (likewise the encoder's self-attention over the source and the decoder's causal self-attention
// over the output positions so far). T steps (the output tokens, <eos> included when finished), S
// source positions (its <eos> included). Every tensor is float32 on the host, and all come from one
// pass, so a score's terms add up to that pass's score.
struct TransformerInternals {
  int64_t heads = 0, head_dim = 0;  // h, d
  struct Layer {
    Tensor encoder_weights;  // (h, S, S): the encoder's self-attention, query position down
    Tensor decoder_weights;  // (h, T, T): the decoder's causal self-attention; row t covers 0..t, 0 after
    Tensor cross_weights;    // (h, T, S): a_t, the cross-attention over the source
    Tensor cross_scores;     // (h, T, S): e_t, its scores before the softmax
    Tensor cross_queries;    // (h, T, d): q_t
    Tensor cross_keys;       // (h, S, d): k_i
  };
  std::vector<Layer> layers;  // encoder layer l and decoder layer l, from the first
};

// The pass is the model's own incremental decoding (start, then one step per token with the
// key/value cache, in eval mode under NoGradGuard) of the sentence src (1, S) alone, fed `tokens`
// (the output's ids without <bos> and <eos>; one step more, for <eos>, when `finished`): what greedy
// search computes for it, so the report of a sentence is the same whatever batch its search ran in.
TransformerInternals transformer_internals(TransformerTranslator& model, const Tensor& src,
                                           const std::vector<int64_t>& tokens, bool finished, int64_t bos_id = 1,
                                           int64_t eos_id = 2);

// transformer_internals one step at a time, as AttentionInternalsPass. Each step() reads what its
// own model step left in the attention modules, so passes and searches of one model may be
// interleaved on one thread (never run on two at once).
class TransformerInternalsPass {
 public:
  TransformerInternalsPass(TransformerTranslator& model, const Tensor& src, std::vector<int64_t> tokens,
                           bool finished, int64_t bos_id = 1, int64_t eos_id = 2);
  bool step();
  bool done() const { return done_; }
  TransformerInternals take() { return std::move(out_); }

 private:
  TransformerTranslator& model_;
  std::vector<int64_t> tokens_;
  size_t steps_;
  int64_t previous_, eos_id_;
  Device device_;
  std::unique_ptr<TranslationModel::SearchState> state_;
  std::vector<std::vector<Tensor>> self_rows_, weights_, scores_, queries_;
  TransformerInternals out_;
  bool done_ = false;
};

}  // namespace seqgrad::models
