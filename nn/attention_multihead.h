// MultiHeadAttention with torch.nn.MultiheadAttention's semantics and parameter layout
// (batch_first = True; key padding given as valid lengths). h heads of size d = E / h:
//   q_i = (x_q W_q^T + b_q) split into heads   (B, h, Q, d), likewise k_i, v_i (B, h, K, d)
//   head_i = softmax(q_i k_iᵀ / √d, masked) v_i      out = concat(head_1..h) W_oᵀ + b_o   (B, Q, E)
// Parameters: in_proj_weight (3E, E) = [W_q; W_k; W_v] and in_proj_bias (3E,) when kdim = vdim = E,
// else q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim) (and in_proj_bias);
// out_proj.weight (E, E), out_proj.bias (E,). A torch state_dict loads as is.
// Differences from torch: a query whose keys are all masked gets a zero context (then out_proj's
// bias), where torch gives NaN; last weights are taken before dropout; no bias_k/bias_v,
// add_zero_attn or attn_mask (the valid lengths may be per query instead).
#pragma once
#include <cstdint>

#include "nn/attention_base.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/quantized.h"

namespace seqgrad::nn {

class MultiHeadAttention : public Attention {
 public:
  struct Options {
    int64_t embed_dim = 0;  // E (query size and output size)
    int64_t num_heads = 1;  // h; must divide E
    double dropout = 0.0;   // on the attention weights, in [0, 1)
    bool bias = true;       // in_proj_bias and out_proj.bias
    int64_t kdim = 0;       // key size (0 = E)
    int64_t vdim = 0;       // value size (0 = E)
  };
  explicit MultiHeadAttention(Options options);

  // queries (B, Q, E), keys (B, K, kdim), values (B, K, vdim), valid_lengths (B,) (torch's
  // key_padding_mask) or (B, Q) -> (B, Q, E)
  // prepare(): memory.projected = {keys' heads, values' heads} (B, h, K, d), projected once.
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;

  // torch's init: xavier_uniform on the input projections, zero biases, out_proj.weight as Linear.
  void reset_parameters();

  // last_weights(): averaged over heads (B, Q, K), as torch's average_attn_weights = True;
  // per head: last_head_weights() (B, h, Q, K) and last_head_scores() (B, h, Q, K) (scaled,
  // before masking). last_scores() is the head average of the energies. The scores' factors, so
  // that a score can be taken apart (the explorer's terms, models/seq2seq/internals.h):
  // last_head_queries() (B, h, Q, d) and last_head_keys() (B, h, K, d), the projected heads, with
  // score = q·k / √d.
  const Tensor& last_head_weights() const { return last_head_weights_; }
  const Tensor& last_head_scores() const { return last_head_scores_; }
  const Tensor& last_head_queries() const { return last_head_queries_; }
  const Tensor& last_head_keys() const { return last_head_keys_; }
  const Options& options() const { return options_; }
  bool packed() const { return in_proj_weight.defined(); }

  Tensor in_proj_weight;  // (3E, E) when kdim = vdim = E
  Tensor q_proj_weight;   // (E, E)    otherwise
  Tensor k_proj_weight;   // (E, kdim) otherwise
  Tensor v_proj_weight;   // (E, vdim) otherwise
  Tensor in_proj_bias;    // (3E,) when bias
  Quantizable<Linear> out_proj;  // weight (E, E), bias (E,); int8 after nn::quantize_dynamic
  Dropout dropout;

 private:
  void prepare_keys(AttentionMemory& memory) const override;
  void settle_kept() const override;
  // The input projection `which` (0 = query, 1 = key, 2 = value) of x, split into heads (B, h, T, d).
  Tensor project_heads(const Tensor& x, int which) const;
  Options options_;
  mutable Tensor last_head_weights_;  // (B, h, Q, K)
  mutable Tensor last_head_scores_;   // (B, h, Q, K)
  mutable Tensor last_head_queries_;  // (B, h, Q, d)
  mutable Tensor last_head_keys_;     // (B, h, K, d)
  mutable bool head_averages_due_ = false;  // the kept heads are newer than last_weights_/last_scores_
};

}  // namespace seqgrad::nn
