// The Transformer translator (Vaswani et al. 2017), beside the GRU one (model.h), on the same
// config, data, training run, checkpoints and search:
//   Encoder:  x = dropout(√E · Embedding(src) + P)   -> N encoder layers (self-attention over the
//             real source tokens)                       -> memory (B, S, E)
//   Decoder:  y = dropout(√E · Embedding(tgt_in) + P) -> N decoder layers (causal self-attention,
//             cross-attention over the memory)         -> logits = y Wᵀ (B, T, V)
// E is model.hidden_size, N model.num_layers, P the sinusoidal (or learned) positions
// (nn/positional.h), the layers nn::TransformerEncoderLayer / DecoderLayer (pre-norm with a final
// norm, or post-norm). With tie_embeddings one (V, E) matrix is the source embedding, the target
// embedding and the output projection (fairseq's share_all_embeddings), registered once as
// "embedding.weight"; otherwise "src_embedding", "tgt_embedding" and "out" hold their own.
// Search steps the decoder one position at a time from a per-layer key/value cache
// (nn::TransformerDecoder::State): the logits equal the teacher-forced ones of the same prefix.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/seq2seq/model.h"
#include "models/seq2seq/translation_model.h"
#include "nn/nn.h"
#include "nn/positional.h"
#include "nn/transformer.h"

namespace seqgrad::models {

class TransformerTranslator : public TranslationModel {
 public:
  explicit TransformerTranslator(const Seq2SeqConfig& config);

  Tensor operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const override;
  std::unique_ptr<SearchState> start(const Tensor& src, const Tensor& src_lengths) const override;
  StepOutput step(SearchState& state, const Tensor& y_prev) const override;
  void reorder(SearchState& state, const std::vector<int64_t>& rows) const override;
  void merge(SearchState& into, SearchState&& from) const override;
  bool can_merge(const SearchState& into, const SearchState& from) const override;
  int64_t target_vocab() const override { return config_.tgt_vocab; }
  std::string architecture() const override { return "transformer"; }
  const Seq2SeqConfig& config() const { return config_; }

  // fairseq's initial embeddings: N(0, E^-1/2), the padding row 0 (the layers keep torch's init).
  void init_embeddings();

  // The source embedding (the shared matrix when tied), the target embedding and the output
  // projection's weight (V_tgt, E) in float32 (s·q of the int8 one once `out` is quantized).
  const nn::Embedding& src_embedding() const { return *src_embedding_; }
  const nn::Embedding& tgt_embedding() const { return *tgt_embedding_; }
  Tensor output_weight() const { return out_ ? nn::linear_weight(*out_) : tgt_embedding_->weight; }
  // The untied output layer (float or int8), or nullptr when the tied embedding projects the output.
  const nn::Quantizable<nn::Linear>* output_layer() const { return out_.get(); }

  nn::PositionalEncoding positions;
  nn::TransformerEncoder encoder;
  nn::TransformerDecoder decoder;

 private:
  // √E · embedding(ids) + positions from `offset`, dropped out: (B, T) -> (B, T, E).
  Tensor embed(const nn::Embedding& table, const Tensor& ids, int64_t offset = 0) const;
  // The encoder's output (B, S, E) for src (B, S) and its lengths (B,).
  Tensor encode(const Tensor& src, const Tensor& src_lengths) const;
  // The decoder's output (..., E) projected to the target vocabulary (..., V_tgt): by `out` (float
  // or int8), or by the tied embedding matrix (float32: nn::quantize_dynamic swaps modules, and
  // the tied output is a product with the embedding's weight, as in fairseq and PyTorch).
  Tensor project_out(const Tensor& y) const;

  Seq2SeqConfig config_;
  std::unique_ptr<nn::Embedding> src_embedding_, tgt_embedding_own_;
  nn::Embedding* tgt_embedding_;  // src_embedding_ when tied
  std::unique_ptr<nn::Quantizable<nn::Linear>> out_;  // none when tied
};

// The model a config describes, by its architecture, as its modules construct it (a checkpoint
// loader builds it under nn::init::SkipInitGuard, then loads the values).
std::unique_ptr<TranslationModel> build_translation_model(const Seq2SeqConfig& config);
// The same with the architecture's initial weights drawn (after manual_seed: the GRU's Xavier
// init, the Transformer's embeddings), as a training run starts.
std::unique_ptr<TranslationModel> make_translation_model(const Seq2SeqConfig& config);

}  // namespace seqgrad::models
