// What every translator architecture gives, and all that search and training need of one: the GRU
// with attention (models/seq2seq/model.h) and the Transformer (models/seq2seq/transformer.h) both
// derive from TranslationModel, so greedy, beam, sampling, ensembles and forced decoding
// (models/seq2seq/decode.h), fit and the checkpoints are written once for both.
//
//   auto state = model.start(src, src_lengths);      // encode: one decoder row per sentence
//   auto out = model.step(*state, y_prev);           // next-token logits (N, V); the state advances
//   model.reorder(*state, {0, 0, 1});                // beam search: row r continues row rows[r]
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention_base.h"
#include "nn/module.h"

namespace seqgrad::models {

class TranslationModel : public nn::Module {
 public:
  using nn::Module::Module;

  // What a search holds of the model between steps, one row per hypothesis: the encoded source and
  // what the decoder has seen so far (the GRU's hidden state; the Transformer's per-layer key/value
  // cache). Each architecture has its own.
  class SearchState {
   public:
    virtual ~SearchState() = default;
  };

  struct StepOutput {
    Tensor logits;    // (N, V): the next token's scores, before the softmax
    Tensor weights;   // (N, S): attention over the source (the Transformer: the last decoder layer's
                      // cross-attention, averaged over its heads)
    Tensor energies;  // (N, S): the weights' pre-softmax scores
  };

  // Teacher forcing: logits (B, T, V) for src (B, S) ids, src_lengths (B,) and tgt_in (B, T) (<bos>
  // then the target without its last token).
  virtual Tensor operator()(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const = 0;

  // The source batch encoded: a state with one row per sentence, before the first target token.
  virtual std::unique_ptr<SearchState> start(const Tensor& src, const Tensor& src_lengths) const = 0;
  // Feeds each row its previous token y_prev (N,) (<bos> first) and advances the state one position.
  virtual StepOutput step(SearchState& state, const Tensor& y_prev) const = 0;
  // Row r of the next step continues row rows[r] of the last one (beam search keeps some hypotheses
  // and drops others; rows may repeat and be more or fewer than before).
  virtual void reorder(SearchState& state, const std::vector<int64_t>& rows) const = 0;
  // Continuous batching: the rows of `from` (another search of this model) join those of `into`,
  // after them, and are stepped with them from the next step on; sources of different lengths are
  // padded to the longer one and masked (the keep mask), so no row sees another's. Throws when
  // can_merge is false.
  virtual void merge(SearchState& into, SearchState&& from) const = 0;
  // Whether merge can join the two now: the GRU's rows always; the Transformer's when both have
  // decoded the same number of positions (its self-attention cache has one length for all rows).
  virtual bool can_merge(const SearchState& into, const SearchState& from) const = 0;

  virtual int64_t target_vocab() const = 0;
  // "gru" or "transformer", as the config's model.architecture names it.
  virtual std::string architecture() const = 0;
};

// Row numbers as an int64 (N,) tensor on `device`, for index_select and select_rows.
Tensor row_index(const std::vector<int64_t>& rows, Device device);

// Two searches' attention memories as one batch, a's rows then b's: every tensor's key axis (axis
// 1 of keys, values and the kinds' projections (B, K, ...); the last axis of the keep mask) fitted
// to the longest source of their rows, the padding masked. `projected_key_axis` is the key axis of the kind's
// projected tensors (additive (B, K, A): 1; multi-head (B, h, K, d): 2).
nn::AttentionMemory concat_memories(const nn::AttentionMemory& a, const nn::AttentionMemory& b,
                                    int64_t projected_key_axis);

// Which source sentence each row of a search translates, for the architectures' search states: a
// row's source memory (encoder outputs, cross-attention keys and values) is its sentence's, so it
// is gathered again only when a reorder changes the rows' sentences, not at every step.
class SentenceRows {
 public:
  explicit SentenceRows(int64_t sentences);  // row b translates sentence b
  // Row r continues row rows[r]: the new rows' sentences when they differ from the last ones (the
  // memory must then be gathered with them), else an empty vector.
  std::vector<int64_t> reorder(const std::vector<int64_t>& rows);

 private:
  std::vector<int64_t> sentence_of_row_;
};

}  // namespace seqgrad::models
