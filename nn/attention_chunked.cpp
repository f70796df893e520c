// ChunkedAdditiveAttention: AdditiveAttention's parameters over the chunked op (ops'
// chunked_additive_attention), with the (B, Q, K) weights for plots only when asked for.
#include "nn/attention_chunked.h"

#include <algorithm>
#include <vector>

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "chunked_additive_attention";

}  // namespace

ChunkedAdditiveAttention::ChunkedAdditiveAttention(Options options)
    : AdditiveAttention("ChunkedAdditiveAttention", kOp,
                        {.query_size = options.query_size, .key_size = options.key_size,
                         .hidden_size = options.hidden_size, .dropout = options.dropout}),
      chunked_options_(options) {
  SG_CHECK_VALUE(options.chunk_size > 0, "{}: chunk_size = {} must be positive", kOp, options.chunk_size);
}

Tensor ChunkedAdditiveAttention::attend_keys(const Tensor& queries, const Tensor& projected_keys,
                                             const Tensor& values, const Tensor& key_keep) const {
  Tensor qp = w_q(queries);  // (B, Q, A)
  double p = is_training() ? options().dropout : 0.0;
  const int64_t chunk = chunked_options_.chunk_size;
  Tensor context =  // (B, Q, Dv)
      chunked_additive_attention(qp, projected_keys, linear_weight(w_v), values, key_keep, chunk, p);
  if (!chunked_options_.keep_weights) {
    keep({}, {});
    return context;
  }
  // For plots only, under no-grad: the (B, Q, K) energies chunk by chunk (the (B, Q, C, A) features
  // never exist for all keys at once), then their masked softmax.
  NoGradGuard no_grad;
  Tensor qp_d = qp.detach().contiguous(), kp_d = projected_keys.detach(), w_v_d = linear_weight(w_v).detach();
  std::vector<Tensor> scores;
  const int64_t keys = kp_d.size(1);
  for (int64_t start = 0; start < keys; start += chunk)
    scores.push_back(additive_scores(qp_d, kp_d.narrow(1, start, std::min(chunk, keys - start)).contiguous(), w_v_d));
  Tensor all_scores = cat(scores, 2);  // (B, Q, K)
  keep(all_scores, softmax_with_keep(all_scores, key_keep));
  return context;
}

}  // namespace seqgrad::nn
