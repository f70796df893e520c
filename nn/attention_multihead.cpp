// MultiHeadAttention, composed from ops: input projections, per-head scaled dot, output projection.
#include "nn/attention_multihead.h"

#include <cmath>

#include "nn/init.h"

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "multihead_attention";

const MultiHeadAttention::Options& checked(const MultiHeadAttention::Options& o) {
  SG_CHECK_VALUE(o.embed_dim > 0, "{}: embed_dim = {} must be positive", kOp, o.embed_dim);
  SG_CHECK_VALUE(o.num_heads > 0 && o.embed_dim % o.num_heads == 0,
                 "{}: num_heads = {} must be positive and divide embed_dim = {}", kOp, o.num_heads, o.embed_dim);
  SG_CHECK_VALUE(o.kdim >= 0 && o.vdim >= 0, "{}: kdim = {} and vdim = {} must be >= 0 (0 = embed_dim)", kOp, o.kdim,
                 o.vdim);
  SG_CHECK_VALUE(o.dropout >= 0 && o.dropout < 1, "{}: dropout = {} not in [0, 1)", kOp, o.dropout);
  return o;
}

// (B, T, E) -> (B, h, T, d)
Tensor split_heads(const Tensor& x, int64_t heads) {
  int64_t batch = x.size(0), steps = x.size(1), head_dim = x.size(2) / heads;
  return x.reshape({batch, steps, heads, head_dim}).permute({0, 2, 1, 3});
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(Options options)
    : Attention("MultiHeadAttention", kOp),
      out_proj({.in_features = checked(options).embed_dim, .out_features = options.embed_dim, .bias = options.bias}),
      dropout({.p = options.dropout}),
      options_(options) {
  int64_t e = options.embed_dim;
  if (options_.kdim == 0) options_.kdim = e;
  if (options_.vdim == 0) options_.vdim = e;
  if (options_.kdim == e && options_.vdim == e) {
    in_proj_weight = empty({3 * e, e});
    register_parameter("in_proj_weight", in_proj_weight);
  } else {
    q_proj_weight = empty({e, e});
    k_proj_weight = empty({e, options_.kdim});
    v_proj_weight = empty({e, options_.vdim});
    register_parameter("q_proj_weight", q_proj_weight);
    register_parameter("k_proj_weight", k_proj_weight);
    register_parameter("v_proj_weight", v_proj_weight);
  }
  if (options.bias) {
    in_proj_bias = empty({3 * e});
    register_parameter("in_proj_bias", in_proj_bias);
  }
  register_module("out_proj", out_proj);
  register_module("dropout", dropout);
  reset_parameters();
}

void MultiHeadAttention::reset_parameters() {
  if (packed()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  out_proj->reset_parameters();
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

Tensor MultiHeadAttention::project_heads(const Tensor& x, int which) const {
  int64_t e = options_.embed_dim;
  const Tensor& separate = which == 0 ? q_proj_weight : which == 1 ? k_proj_weight : v_proj_weight;
  Tensor w = packed() ? in_proj_weight.narrow(0, which * e, e) : separate;               // (E, E | kdim | vdim)
  Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * e, e) : Tensor();  // (E,)
  return split_heads(linear(x, w, b), options_.num_heads);                              // (B, h, T, d)
}

void MultiHeadAttention::prepare_keys(AttentionMemory& memory) const {
  check_feature_size(kOp, "keys", memory.keys, options_.kdim, "kdim");
  check_feature_size(kOp, "values", memory.values, options_.vdim, "vdim");
  // (B, h, K, d) each, laid out as such once: every decoder step's products read them as one
  // stride-collapsible batch (a head-split view would be copied by each product, every step)
  memory.projected = {project_heads(memory.keys, 1).contiguous(), project_heads(memory.values, 2).contiguous()};
}

Tensor MultiHeadAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 2);
  int64_t e = options_.embed_dim, heads = options_.num_heads;
  check_feature_size(kOp, "queries", queries, e, "embed_dim");
  int64_t batch = queries.size(0), n_queries = queries.size(1);
  const Tensor &k = memory.projected[0], &v = memory.projected[1], &key_keep = memory.key_keep;  // (B, h, K, d)
  Tensor q = project_heads(queries, 0);                                                  // (B, h, Q, d)
  double scale = 1.0 / std::sqrt(static_cast<double>(e / heads));
  Tensor scores = mul(matmul(q, k.transpose(2, 3)), scale);                              // (B, h, Q, K)
  Tensor weights = softmax_with_keep(scores, key_keep.defined() ? key_keep.unsqueeze(1) : key_keep);  // (B, h, Q, K)
  Tensor heads_out = matmul(dropout(weights), v);                                        // (B, h, Q, d)
  Tensor merged = heads_out.permute({0, 2, 1, 3}).reshape({batch, n_queries, e});         // (B, Q, E)
  last_head_scores_ = scores.detach();
  last_head_weights_ = weights.detach();
  last_head_queries_ = q.detach();
  last_head_keys_ = k.detach();  // the memory's (or the cache's) tensor itself: nothing copied
  head_averages_due_ = true;  // last_weights() and last_scores() average the heads when read
  return out_proj(merged);     // (B, Q, E)
}

void MultiHeadAttention::settle_kept() const {
  if (!head_averages_due_) return;
  head_averages_due_ = false;
  keep(mean(last_head_scores_, {1}), mean(last_head_weights_, {1}));  // (B, Q, K)
}

}  // namespace seqgrad::nn
