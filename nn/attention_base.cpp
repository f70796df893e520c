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

Tensor keep_mask_to_mask(const Tensor& keep, int64_t batch, int64_t queries, int64_t keys, const char* op) {
  SG_CHECK(keep.defined(), "{}: the keep mask is undefined", op);
  SG_CHECK_DTYPE(keep.dtype() == DType::b8, "{}: a mask must be bool (true = keep), got {} {}", op, keep.dtype(),
                 keep.shape());
  bool per_batch = keep.ndim() == 2 && keep.size(0) == batch && keep.size(1) == keys;
  bool per_query = keep.ndim() == 3 && keep.size(0) == batch && (keep.size(1) == 1 || keep.size(1) == queries) &&
                   keep.size(2) == keys;
  SG_CHECK_SHAPE(per_batch || per_query,
                 "{}: a keep mask must have shape (B, K) = ({}, {}), (B, 1, K) or (B, Q, K) = ({}, {}, {}), got {}",
                 op, batch, keys, batch, queries, keys, keep.shape());
  Tensor masked = logical_not(keep);  // true = masked, as softmax_with_mask takes it
  return per_batch ? masked.view({batch, 1, keys}) : masked;  // (B, 1 | Q, K)
}

Tensor key_mask(const Tensor& lengths_or_mask, int64_t batch, int64_t queries, int64_t keys, const char* op) {
  if (!lengths_or_mask.defined()) return {};
  DType dtype = lengths_or_mask.dtype();
  SG_CHECK_DTYPE(dtype == DType::i64 || dtype == DType::b8,
                 "{}: the mask must be int64 valid lengths or a bool keep mask (true = keep), got {} {}", op, dtype,
                 lengths_or_mask.shape());
  if (dtype == DType::b8) return keep_mask_to_mask(lengths_or_mask, batch, queries, keys, op);
  return length_mask(lengths_or_mask, batch, queries, keys, op);
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
  if (valid_lengths.dtype() == DType::b8) return softmax_with_mask(scores, logical_not(valid_lengths));  // keep mask
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

namespace {

// keys (B, K, Dk) and values (B, K, Dv): 3-D, one batch, one K > 0, one floating dtype, one device.
void check_keys_values(const char* op, const Tensor& keys, const Tensor& values) {
  SG_CHECK(keys.defined() && values.defined(), "{}: keys and values must be defined", op);
  SG_CHECK_SHAPE(keys.ndim() == 3, "{}: keys must be 3-D (B, K, Dk), got {}", op, keys.shape());
  SG_CHECK_SHAPE(values.ndim() == 3, "{}: values must be 3-D (B, K, Dv), got {}", op, values.shape());
  SG_CHECK_SHAPE(keys.size(0) == values.size(0),
                 "{}: batch sizes differ: keys {}, values {} (dimension 0 is the batch B)", op, keys.shape(),
                 values.shape());
  SG_CHECK_SHAPE(keys.size(1) == values.size(1),
                 "{}: keys {} and values {} must have the same number of positions K (dimension 1)", op,
                 keys.shape(), values.shape());
  SG_CHECK_SHAPE(keys.size(1) > 0, "{}: keys {} need at least one position", op, keys.shape());
  SG_CHECK_DTYPE(is_floating(keys.dtype()) && keys.dtype() == values.dtype(),
                 "{}: keys {} {} and values {} {} must share one floating dtype", op, keys.dtype(), keys.shape(),
                 values.dtype(), values.shape());
  SG_CHECK_DEVICE(keys.device() == values.device(), "{}: keys on {}, values on {}: move them to one device", op,
                  keys.device(), values.device());
}

// queries (B, Q, Dq) against checked keys and values: 3-D, their batch, dtype and device.
void check_queries_against(const char* op, const Tensor& queries, const Tensor& keys, const Tensor& values) {
  SG_CHECK(queries.defined(), "{}: queries must be defined", op);
  SG_CHECK_SHAPE(queries.ndim() == 3, "{}: queries must be (B, Q, Dq) or (B, Dq), got {}", op, queries.shape());
  SG_CHECK_SHAPE(queries.size(0) == keys.size(0),
                 "{}: batch sizes differ: queries {}, keys {}, values {} (dimension 0 is the batch B)", op,
                 queries.shape(), keys.shape(), values.shape());
  SG_CHECK_DTYPE(queries.dtype() == keys.dtype(),
                 "{}: queries {} {}, keys {} {} and values {} {} must share one floating dtype", op, queries.dtype(),
                 queries.shape(), keys.dtype(), keys.shape(), values.dtype(), values.shape());
  SG_CHECK_DEVICE(queries.device() == keys.device(), "{}: queries on {}, keys on {}, values on {}: move them to one device",
                  op, queries.device(), keys.device(), values.device());
}

}  // namespace

Tensor check_attention_args(const char* op, const Tensor& queries, const Tensor& keys, const Tensor& values,
                            const Tensor& lengths_or_mask) {
  SG_CHECK(queries.defined() && keys.defined() && values.defined(), "{}: queries, keys and values must be defined",
           op);
  SG_CHECK_SHAPE(queries.ndim() == 3, "{}: queries must be (B, Q, Dq) or (B, Dq), got {}", op, queries.shape());
  check_keys_values(op, keys, values);
  check_queries_against(op, queries, keys, values);
  return key_mask(lengths_or_mask, queries.size(0), queries.size(1), keys.size(1), op);
}

Tensor check_memory_args(const char* op, const Tensor& keys, const Tensor& values, const Tensor& lengths_or_mask) {
  check_keys_values(op, keys, values);
  if (!lengths_or_mask.defined()) return {};
  // Per-query lengths (B, Q) and keep masks (B, Q, K) fix Q; anything else applies to every query.
  bool is_mask = lengths_or_mask.dtype() == DType::b8;
  int per_query_ndim = is_mask ? 3 : 2;
  int64_t queries = lengths_or_mask.ndim() == per_query_ndim ? lengths_or_mask.size(1) : 1;
  return key_mask(lengths_or_mask, keys.size(0), queries, keys.size(1), op);
}

void check_feature_size(const char* op, const char* what, const Tensor& t, int64_t expected, const char* option) {
  SG_CHECK_SHAPE(t.size(-1) == expected, "{}: {} feature size {} != {} {} ({}: {})", op, what, t.size(-1), option,
                 expected, what, t.shape());
}

AttentionMemory AttentionMemory::map(const std::function<Tensor(const Tensor&)>& f) const {
  auto apply = [&f](const Tensor& t) { return t.defined() ? f(t) : t; };
  AttentionMemory m{apply(keys), apply(values), apply(mask), {}, {}};
  for (const Tensor& p : projected) m.projected.push_back(apply(p));
  for (const AttentionMemory& part : parts) m.parts.push_back(part.map(f));
  return m;
}

AttentionMemory AttentionMemory::expand(int64_t n) const {
  return map([n](const Tensor& t) {
    SG_CHECK_SHAPE(t.ndim() >= 1 && t.size(0) == 1, "AttentionMemory::expand: needs a batch of 1, got {}", t.shape());
    Shape shape = t.shape();
    shape[0] = n;
    return t.expand(shape);
  });
}

AttentionMemory AttentionMemory::select_rows(const Tensor& index) const {
  return map([&index](const Tensor& t) { return index_select(t, 0, index); });
}

namespace {

// A 2-D query (B, Dq) is one query per batch row: (B, 1, Dq).
bool is_single_query(const Tensor& queries) { return queries.defined() && queries.ndim() == 2; }

}  // namespace

Tensor Attention::forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
                          const Tensor& lengths_or_mask) const {
  Tensor queries3 = is_single_query(queries) ? queries.unsqueeze(1) : queries;  // (B, Q, Dq)
  AttentionMemory memory{keys, values, check_attention_args(op_, queries3, keys, values, lengths_or_mask), {}, {}};
  prepare_keys(memory);
  return attend(queries, memory);
}

Tensor Attention::attend(const Tensor& queries, const AttentionMemory& memory) const {
  if (!is_single_query(queries)) return attend_queries(queries, memory);
  Tensor context = attend_queries(queries.unsqueeze(1), memory);  // (B, 1, Dv)
  // The kept weights and scores follow the query's shape: (B, 1, K) -> (B, K).
  keep(last_scores_.defined() ? last_scores_.squeeze(1) : Tensor(),
       last_weights_.defined() ? last_weights_.squeeze(1) : Tensor());
  return context.squeeze(1);  // (B, Dv)
}

AttentionMemory Attention::prepare(const Tensor& keys, const Tensor& values, const Tensor& lengths_or_mask) const {
  AttentionMemory memory{keys, values, check_memory_args(op_, keys, values, lengths_or_mask), {}, {}};
  prepare_keys(memory);
  return memory;
}

AttentionMemory Attention::prepare_part(const AttentionMemory& checked) const {
  AttentionMemory memory{checked.keys, checked.values, checked.mask, {}, {}};
  prepare_keys(memory);
  return memory;
}

void Attention::check_queries(const Tensor& queries, const AttentionMemory& memory, size_t projected,
                              size_t parts) const {
  SG_CHECK(memory.keys.defined() && memory.projected.size() == projected && memory.parts.size() == parts,
           "{}: the memory was not prepared by this attention kind (call its prepare(keys, values, lengths))", op_);
  check_queries_against(op_, queries, memory.keys, memory.values);
  const Tensor& mask = memory.mask;
  SG_CHECK_SHAPE(!mask.defined() || mask.size(1) == 1 || mask.size(1) == queries.size(1),
                 "{}: the memory's valid_lengths or keep mask were per query for {} queries, got queries {}", op_, mask.size(1),
                 queries.shape());
}

void Attention::keep(const Tensor& scores, const Tensor& weights) const {
  last_scores_ = scores.defined() ? scores.detach() : Tensor();
  last_weights_ = weights.defined() ? weights.detach() : Tensor();
}

}  // namespace seqgrad::nn
