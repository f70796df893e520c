// The attention family in one include. Every kind takes queries (B, Q, Dq) or (B, Dq), keys
// (B, K, Dk), values (B, K, Dv) and optionally int64 valid lengths (B,) / (B, Q) or a bool keep
// mask (B, K) / (B, 1 | Q, K) (true = attend), returns the context (B, Q, Dv) or (B, Dv) and keeps
// its last weights (B, Q, K) or (B, K) for plots. Start reading at attention_base.h;
// the derivations (formula, shapes, cost, gradient per kind) are in docs/attention.md, and
// `seqgrad attention demo --kind KIND` prints energies, weights and contexts for a toy input.
//   attention_base.h        masked_softmax, the Attention base class, argument checks
//   attention_additive.h    AdditiveAttention (Bahdanau): vᵀ tanh(W_q q + W_k k), project_keys
//   attention_dot.h         DotProductAttention, ScaledDotProductAttention: q·k (/ √d)
//   attention_hybrid.h      HybridAttention: ½ (additive + scaled dot)
//   attention_multilevel.h  MultiLevelAttention: several kinds, contexts concatenated
//   attention_multihead.h   MultiHeadAttention: torch.nn.MultiheadAttention (batch_first)
//   attention_local.h       LocalAttention: a window around a monotonic or predicted centre
//   attention_chunked.h     ChunkedAdditiveAttention: exact additive attention, keys in chunks
//                           with an online softmax (FlashAttention's recurrence)
#pragma once
#include "nn/attention_additive.h"
#include "nn/attention_base.h"
#include "nn/attention_chunked.h"
#include "nn/attention_dot.h"
#include "nn/attention_hybrid.h"
#include "nn/attention_local.h"
#include "nn/attention_multihead.h"
#include "nn/attention_multilevel.h"
