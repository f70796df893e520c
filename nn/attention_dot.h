// DotProductAttention (score q·k) and ScaledDotProductAttention (score q·k / √d, Vaswani et al.
// 2017). Queries and keys must live in one space: either the same size, or give query_size and
// key_size to learn W (key_size × query_size) that maps queries into key space (Luong's "general"
// score qᵀ Wᵀ k). Derivation, cost and gradients: docs/attention.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nn/attention_base.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/quantized.h"

namespace seqgrad::nn {

class DotProductAttention : public Attention {
 public:
  struct Options {
    double dropout = 0.0;    // on the attention weights, in [0, 1)
    int64_t query_size = 0;  // Dq; with key_size > 0, queries are first projected by w_q
    int64_t key_size = 0;    // Dk
  };
  DotProductAttention();  // no dropout, no projection
  explicit DotProductAttention(Options options);

  // queries (B, Q, D), keys (B, K, D), values (B, K, Dv), valid_lengths (B,) / (B, Q) -> (B, Q, Dv)
  //   scores = q kᵀ (· 1/√D when scaled)   weights = masked_softmax(scores)   context = dropout(weights) · values
  // forward(q, k, v, lengths) = attend(q, prepare(k, v, lengths)); the keys need no projection
  // (w_q maps queries), so prepare() only builds the keep mask: memory.projected is empty.
  Tensor attend_queries(const Tensor& queries, const AttentionMemory& memory) const override;

  // The unmasked energies: queries (B, Q, Dq), keys (B, K, Dk) -> (B, Q, K).
  Tensor score(const Tensor& queries, const Tensor& keys) const;
  // The same over a prepared memory: queries (B, Q, Dq) -> (B, Q, K).
  Tensor score(const Tensor& queries, const AttentionMemory& memory) const;

  bool scaled() const { return scaled_; }
  const Options& options() const { return options_; }

  std::unique_ptr<Quantizable<Linear>> w_q;  // weight (Dk, Dq), no bias; only when query_size and key_size are given
  Dropout dropout;

 protected:
  DotProductAttention(std::string type_name, const char* op, Options options, bool scaled);

 private:
  void prepare_keys(AttentionMemory& memory) const override;
  void check_sizes(const Tensor& queries, const Tensor& keys) const;
  Tensor scores_of(const Tensor& queries, const Tensor& keys) const;  // (B, Q, K), no checks
  Options options_;
  bool scaled_;
};

class ScaledDotProductAttention : public DotProductAttention {
 public:
  ScaledDotProductAttention();
  explicit ScaledDotProductAttention(Options options);
};

}  // namespace seqgrad::nn
