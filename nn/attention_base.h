// What every attention kind shares: masked_softmax over valid lengths (a fully masked row gives
// zeros, never NaN), the argument checks, and the Attention base class with the last weights and
// scores kept for plots. The derivations are in docs/attention.md.
//
// Shapes (README legend; the attention family uses Q query positions and K key positions):
//   queries (B, Q, Dq) or (B, Dq) (one query per row)   keys (B, K, Dk)   values (B, K, Dv)
//   context (B, Q, Dv), or (B, Dv) for 2-D queries
//   the mask argument (lengths_or_keep) is either of
//     valid lengths: int64 (B,) (one length per batch row) or (B, Q) (one per query), each in [0, K];
//                    key positions j >= valid length are masked;
//     a keep mask:   bool (B, K), (B, 1, K) or (B, Q, K), true = attend to that key (the seeds'
//                    convention, `scores.masked_fill(mask == 0, -inf)`), false = masked.
//   Lengths become a keep mask once (nn/mask.h), at prepare(); every mask inside is a keep mask.
#pragma once
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/module.h"

namespace seqgrad::nn {

// softmax over the last dimension of scores (B, ..., Q, K) with keys j >= valid_lengths masked:
//   w_ij = exp(s_ij) / Σ_{j' < len_i} exp(s_ij')   for j < len_i,   0 otherwise.
// lengths_or_keep: int64 valid lengths (B,) or (B, Q) (Q = scores.size(-2)), values in [0, K], or a
// bool keep mask (true = attend) that broadcasts to scores' shape; undefined = no mask.
// A row with no valid key (length 0) gives all zeros and a zero gradient.
//   ds_ij = w_ij (dw_ij - Σ_j' w_ij' dw_ij')   (zero on masked keys and on fully masked rows)
Tensor masked_softmax(const Tensor& scores, const Tensor& lengths_or_keep);

// The same with a bool keep mask (true = attend) that broadcasts to scores' shape. This is the
// primitive every kind calls: masked_softmax builds its keep mask with key_keep_mask and calls
// it. Scores of keys not kept become -inf; a row that keeps no key is softmaxed unmasked and
// multiplied by 0, so it gives zeros with a zero (not NaN) gradient.
Tensor softmax_with_keep(const Tensor& scores, const Tensor& keep);

// The keep mask (true = attend) (B, 1 | Q, K) for the family's mask argument: int64 valid lengths
// (B,) -> (B, 1, K) or (B, Q) -> (B, Q, K) (nn::keep_mask, values checked to lie in [0, K]), or a
// bool keep mask (B, K) -> (B, 1, K), (B, 1 | Q, K) as given (its shape checked); undefined stays
// undefined. `op` names the caller in error messages.
Tensor key_keep_mask(const Tensor& lengths_or_keep, int64_t batch, int64_t queries, int64_t keys, const char* op);

// Argument checks shared by the family; each error names `op` and prints the shapes:
//   queries, keys, values are defined, 3-D, floating, of one dtype and device; one batch size;
//   keys and values have the same number of positions K; lengths_or_keep as above.
// Returns key_keep_mask(lengths_or_keep) (B, 1 | Q, K), or an undefined tensor when there is none.
Tensor check_attention_args(const char* op, const Tensor& queries, const Tensor& keys, const Tensor& values,
                            const Tensor& lengths_or_keep);
// The keys and values half of check_attention_args; per-query lengths (B, Q) or a keep mask
// (B, Q, K) fix Q to their size(1).
Tensor check_memory_args(const char* op, const Tensor& keys, const Tensor& values, const Tensor& lengths_or_keep);
// The feature size `what` of `t` (its last dimension) must equal `expected` (an option).
void check_feature_size(const char* op, const char* what, const Tensor& t, int64_t expected,
                        const char* option);

// Keys and values prepared once for many calls. A decoder attends to the same encoder outputs at
// every step, so Attention::prepare builds the keep mask (lengths go to the host once, for their
// range check) and applies the kind's key projection once per batch, not once per step.
struct AttentionMemory {
  Tensor keys;      // (B, K, Dk) as given
  Tensor values;    // (B, K, Dv) as given
  Tensor key_keep;  // bool (B, 1 | Q, K), true = attend; undefined = every key is attended
  std::vector<Tensor> projected;       // the kind's per-batch projections (each kind's header says which)
  std::vector<AttentionMemory> parts;  // composite kinds (hybrid, multi-level, local): one per part

  // A memory of batch 1 repeated n times, as views (beam search): every (1, ...) becomes (n, ...).
  AttentionMemory expand(int64_t n) const;
  // The batch rows `index` (int64 (N,)) of every tensor, in that order (a batched beam search:
  // one row per open hypothesis, taken from its sentence's row).
  AttentionMemory select_rows(const Tensor& index) const;
  // Every tensor (parts included) through f; undefined ones stay undefined.
  AttentionMemory map(const std::function<Tensor(const Tensor&)>& f) const;
};

// The base of every attention kind: context = forward(queries, keys, values, lengths_or_keep), or,
// for many queries over the same keys, memory = prepare(keys, values, lengths_or_keep) once and
// context = attend(queries, memory) per call; both give the same numbers. lengths_or_keep is int64
// valid lengths or a bool keep mask (true = attend), as above. Queries may be 3-D (B, Q, Dq) or 2-D
// (B, Dq) (a decoder's state): a 2-D query is attended as Q = 1 and gives a 2-D context (B, Dv)
// and 2-D last weights and scores (B, K).
// After each call the kind keeps, detached, for visualisation (docs/attention.md says what each
// kind stores; the weights are taken before dropout):
//   last_weights()  (B, Q, K) the attention distribution over keys (rows sum to 1, or 0 when
//                   fully masked); (B, K) after a 2-D query;
//   last_scores()   (B, Q, K) the pre-softmax energies before masking (undefined for kinds that
//                   have no single score, e.g. hybrid); (B, K) after a 2-D query.
class Attention : public Module {
 public:
  // queries (B, Q, Dq) or (B, Dq), keys (B, K, Dk), values (B, K, Dv), lengths_or_keep: valid
  // lengths int64 (B,) / (B, Q), a keep mask bool (B, K) / (B, 1 | Q, K), or undefined
  //   -> context (B, Q, Dv) or (B, Dv) (MultiLevelAttention: the levels' contexts concatenated).
  Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                 const Tensor& lengths_or_keep = {}) const;
  Tensor operator()(const Tensor& queries, const Tensor& keys, const Tensor& values,
                    const Tensor& lengths_or_keep = {}) const {
    return forward(queries, keys, values, lengths_or_keep);
  }

  // Checks keys (B, K, Dk), values (B, K, Dv) and lengths_or_keep ((B,) lengths or a (B, K) /
  // (B, 1, K) keep mask; (B, Q) lengths or a (B, Q, K) keep mask for exactly Q queries per call),
  // builds the keep mask and applies the kind's key projection.
  AttentionMemory prepare(const Tensor& keys, const Tensor& values, const Tensor& lengths_or_keep = {}) const;
  // queries (B, Q, Dq) or (B, Dq) over a memory from this module's prepare() -> context (B, Q, Dv)
  // or (B, Dv).
  Tensor attend(const Tensor& queries, const AttentionMemory& memory) const;
  // A composite kind prepares its parts with this: `checked`'s keys, values and keep mask (already
  // checked and built) with this kind's projections added.
  AttentionMemory prepare_part(const AttentionMemory& checked) const;

  const Tensor& last_weights() const {
    settle_kept();
    return last_weights_;
  }
  const Tensor& last_scores() const {
    settle_kept();
    return last_scores_;
  }

 protected:
  // `op` names the kind in error messages (e.g. "additive_attention").
  Attention(std::string type_name, const char* op) : Module(std::move(type_name)), op_(op) {}

  // What each kind computes: queries (B, Q, Dq) (3-D; attend() handles 2-D) over a prepared
  // memory -> context (B, Q, Dv), keeping its weights and scores.
  virtual Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const = 0;
  // Fills memory.projected / memory.parts from memory.keys and memory.values (already checked).
  virtual void prepare_keys(AttentionMemory& memory) const { (void)memory; }
  // queries against a prepared memory: 3-D, floating, one batch, dtype and device, and a keep
  // mask with 1 or Q query rows; `projected` and `parts` say what this kind's prepare_keys makes.
  void check_queries(const Tensor& queries, const AttentionMemory& memory, size_t projected = 0,
                     size_t parts = 0) const;

  // Stores detached copies of the handles (no graph is kept alive by them).
  void keep(const Tensor& scores, const Tensor& weights) const;
  // Runs before the kept weights or scores are read: a kind that keeps them per part and derives
  // what it shows from them (MultiHeadAttention's head averages) does that here, when someone
  // looks, not on every call (training never looks).
  virtual void settle_kept() const {}

  const char* op_;
  mutable Tensor last_scores_;   // (B, Q, K)
  mutable Tensor last_weights_;  // (B, Q, K)
};

}  // namespace seqgrad::nn
