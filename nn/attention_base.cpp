// masked_softmax, the valid-length mask and the argument checks shared by the attention family.
#include "nn/attention_base.h"

#include <limits>
#include <vector>

namespace seqgrad::nn {

Tensor length_mask(const Tensor& valid_lengths, int64_t batch, int64_t queries, int64_t keys, const char* op) {
  SG_CHECK(valid_lengths.defined(), "{}: valid_lengths is undefined", op);
  SG_CHECK_DTYPE(valid_lengths.dtype() == DType::i64, "{}: valid_lengths must be int64, got {} {}", op,
                 valid_lengths.dtype(), valid_lengths.shape());
  bool per_batch = valid_lengths.ndim() == 1 && valid_lengths.size(0) == batch;
  bool per_query = valid_lengths.ndim() == 2 && valid_lengths.size(0) == batch && valid_lengths.size(1) == queries;
  SG_CHECK_SHAPE(per_batch || per_query,
                 "{}: valid_lengths must have shape (B,) = ({},) or (B, Q) = ({}, {}), got {}", op, batch, batch,
                 queries, valid_lengths.shape());
  // Values are checked on the host: a length outside [0, K] is a caller's bug that would otherwise
  // silently mean "no mask" (too long) or "everything masked" (negative).
  std::vector<int64_t> lengths = valid_lengths.cpu().to_vector<int64_t>();
  for (size_t i = 0; i < lengths.size(); ++i) {
    SG_CHECK_VALUE(lengths[i] >= 0 && lengths[i] <= keys,
                   "{}: valid length {} at index {} of valid_lengths {} is outside [0, K = {}] (K = number of keys)",
                   op, lengths[i], i, valid_lengths.shape(), keys);
  }
  Tensor positions = arange(0, static_cast<double>(keys)).view({1, 1, keys});  // (1, 1, K)
  positions = positions.to(valid_lengths.device());
  Tensor lengths3 = per_batch ? valid_lengths.view({batch, 1, 1})                // (B, 1, 1)
                              : valid_lengths.reshape({batch, queries, 1});      // (B, Q, 1)
  return ge(positions, lengths3);  // (B, 1, K) or (B, Q, K): true where j >= length
}

Tensor softmax_with_mask(const Tensor& scores, const Tensor& mask) {
  SG_CHECK(scores.defined(), "masked_softmax: scores are undefined");
  SG_CHECK_DTYPE(is_floating(scores.dtype()), "masked_softmax: scores must be floating, got {} {}", scores.dtype(),
                 scores.shape());
  SG_CHECK_SHAPE(scores.ndim() >= 1 && scores.size(-1) > 0, "masked_softmax: scores {} need a non-empty last dimension",
                 scores.shape());
  if (!mask.defined()) return softmax(scores, -1);
  SG_CHECK_DTYPE(mask.dtype() == DType::b8, "masked_softmax: mask must be bool, got {} {}", mask.dtype(), mask.shape());
  SG_CHECK_SHAPE(broadcast_shapes(scores.shape(), mask.shape(), "masked_softmax") == scores.shape(),
                 "masked_softmax: mask {} must broadcast to the scores' shape {}", mask.shape(), scores.shape());
  int last = mask.ndim() - 1;
  // has_key: (..., 1) 1 where the row keeps at least one key, 0 where every key is masked
  Tensor has_key = amax(to_dtype(logical_not(mask), scores.dtype()), {last}, true);
  // Rows with no key are left unmasked (finite softmax) and zeroed afterwards: softmax of a row of
  // -inf would be 0/0 = NaN, and so would its gradient.
  Tensor effective = logical_and(mask, gt(has_key, 0.0));  // mask's shape
  Tensor weights = softmax(masked_fill(scores, effective, -std::numeric_limits<double>::infinity()), -1);
  return mul(weights, has_key);  // scores' shape
}

Tensor masked_softmax(const Tensor& scores, const Tensor& valid_lengths) {
  if (!valid_lengths.defined()) return softmax_with_mask(scores, {});
  SG_CHECK_SHAPE(scores.defined() && scores.ndim() >= 2,
                 "masked_softmax: scores must be (B, ..., Q, K) when valid_lengths are given, got {}",
                 scores.defined() ? scores.shape() : Shape{});
  int64_t batch = scores.size(0), queries = scores.size(-2), keys = scores.size(-1);
  Tensor mask = length_mask(valid_lengths, batch, queries, keys);  // (B, 1 | Q, K)
  if (scores.ndim() > 3) {  // (B, ..., Q, K): insert the middle dims as 1s
    Shape shape = {batch};
    for (int d = 1; d < scores.ndim() - 2; ++d) shape.push_back(1);
    shape.push_back(mask.size(1));
    shape.push_back(keys);
    mask = mask.view(shape);
  } else if (scores.ndim() == 2) {  // (B, K): one query per row
    SG_CHECK_SHAPE(valid_lengths.ndim() == 1, "masked_softmax: scores (B, K) = {} take valid_lengths (B,), got {}",
                   scores.shape(), valid_lengths.shape());
    mask = mask.view({batch, keys});
  }
  return softmax_with_mask(scores, mask);
}

Tensor check_attention_args(const char* op, const Tensor& queries, const Tensor& keys, const Tensor& values,
                            const Tensor& valid_lengths) {
  SG_CHECK(queries.defined() && keys.defined() && values.defined(), "{}: queries, keys and values must be defined",
           op);
  SG_CHECK_SHAPE(queries.ndim() == 3, "{}: queries must be 3-D (B, Q, Dq), got {}", op, queries.shape());
  SG_CHECK_SHAPE(keys.ndim() == 3, "{}: keys must be 3-D (B, K, Dk), got {}", op, keys.shape());
  SG_CHECK_SHAPE(values.ndim() == 3, "{}: values must be 3-D (B, K, Dv), got {}", op, values.shape());
  SG_CHECK_SHAPE(queries.size(0) == keys.size(0) && keys.size(0) == values.size(0),
                 "{}: batch sizes differ: queries {}, keys {}, values {} (dimension 0 is the batch B)", op,
                 queries.shape(), keys.shape(), values.shape());
  SG_CHECK_SHAPE(keys.size(1) == values.size(1),
                 "{}: keys {} and values {} must have the same number of positions K (dimension 1)", op,
                 keys.shape(), values.shape());
  SG_CHECK_SHAPE(keys.size(1) > 0, "{}: keys {} need at least one position", op, keys.shape());
  SG_CHECK_DTYPE(is_floating(queries.dtype()) && queries.dtype() == keys.dtype() && keys.dtype() == values.dtype(),
                 "{}: queries {} {}, keys {} {} and values {} {} must share one floating dtype", op, queries.dtype(),
                 queries.shape(), keys.dtype(), keys.shape(), values.dtype(), values.shape());
  SG_CHECK_DEVICE(queries.device() == keys.device() && keys.device() == values.device(),
                  "{}: queries on {}, keys on {}, values on {}: move them to one device", op, queries.device(),
                  keys.device(), values.device());
  if (!valid_lengths.defined()) return {};
  return length_mask(valid_lengths, queries.size(0), queries.size(1), keys.size(1), op);
}

void check_feature_size(const char* op, const char* what, const Tensor& t, int64_t expected, const char* option) {
  SG_CHECK_SHAPE(t.size(-1) == expected, "{}: {} feature size {} != {} {} ({}: {})", op, what, t.size(-1), option,
                 expected, what, t.shape());
}

void Attention::keep(const Tensor& scores, const Tensor& weights) const {
  last_scores_ = scores.defined() ? scores.detach() : Tensor();
  last_weights_ = weights.defined() ? weights.detach() : Tensor();
}

}  // namespace seqgrad::nn
