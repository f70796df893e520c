// masked_softmax, the keep mask and the argument checks shared by the attention family.
#include "nn/attention_base.h"

#include <limits>

#include "nn/mask.h"

namespace seqgrad::nn {

Tensor key_keep_mask(const Tensor& lengths_or_keep, int64_t batch, int64_t queries, int64_t keys, const char* op) {
  if (!lengths_or_keep.defined()) return {};
  const Tensor& m = lengths_or_keep;
  SG_CHECK_DTYPE(m.dtype() == DType::i64 || m.dtype() == DType::b8,
                 "{}: the mask must be int64 valid lengths or a bool keep mask (true = keep), got {} {}", op, m.dtype(),
                 m.shape());
  if (m.dtype() == DType::i64) {
    bool per_batch = m.ndim() == 1 && m.size(0) == batch;
    bool per_query = m.ndim() == 2 && m.size(0) == batch && m.size(1) == queries;
    SG_CHECK_SHAPE(per_batch || per_query,
                   "{}: valid_lengths must have shape (B,) = ({},) or (B, Q) = ({}, {}), got {}", op, batch, batch,
                   queries, m.shape());
    Tensor keep = keep_mask(m, keys, op);                       // (B, K) or (B, Q, K)
    return per_batch ? keep.view({batch, 1, keys}) : keep;  // (B, 1 | Q, K)
  }
  bool per_batch = m.ndim() == 2 && m.size(0) == batch && m.size(1) == keys;
  bool per_query = m.ndim() == 3 && m.size(0) == batch && (m.size(1) == 1 || m.size(1) == queries) &&
                   m.size(2) == keys;
  SG_CHECK_SHAPE(per_batch || per_query,
                 "{}: a keep mask must have shape (B, K) = ({}, {}), (B, 1, K) or (B, Q, K) = ({}, {}, {}), got {}",
                 op, batch, keys, batch, queries, keys, m.shape());
  return per_batch ? m.view({batch, 1, keys}) : m;  // (B, 1 | Q, K)
}

Tensor softmax_with_keep(const Tensor& scores, const Tensor& keep) {
  SG_CHECK(scores.defined(), "masked_softmax: scores are undefined");
  SG_CHECK_DTYPE(is_floating(scores.dtype()), "masked_softmax: scores must be floating, got {} {}", scores.dtype(),
                 scores.shape());
  SG_CHECK_SHAPE(scores.ndim() >= 1 && scores.size(-1) > 0, "masked_softmax: scores {} need a non-empty last dimension",
                 scores.shape());
  if (!keep.defined()) return softmax(scores, -1);
  SG_CHECK_DTYPE(keep.dtype() == DType::b8, "masked_softmax: the keep mask must be bool, got {} {}", keep.dtype(),
                 keep.shape());
  SG_CHECK_SHAPE(broadcast_shapes(scores.shape(), keep.shape(), "masked_softmax") == scores.shape(),
                 "masked_softmax: the keep mask {} must broadcast to the scores' shape {}", keep.shape(),
                 scores.shape());
  int last = keep.ndim() - 1;
  // has_key: (..., 1) 1 where the row keeps at least one key, 0 where it keeps none
  Tensor has_key = amax(to_dtype(keep, scores.dtype()), {last}, true);
  // Rows with no key are left unmasked (finite softmax) and zeroed afterwards: softmax of a row of
  // -inf would be 0/0 = NaN, and so would its gradient.
  Tensor dropped = logical_and(logical_not(keep), gt(has_key, 0.0));  // keep's shape: keys set to -inf
  Tensor weights = softmax(masked_fill(scores, dropped, -std::numeric_limits<double>::infinity()), -1);
  return mul(weights, has_key);  // scores' shape
}

Tensor masked_softmax(const Tensor& scores, const Tensor& lengths_or_keep) {
  if (!lengths_or_keep.defined() || lengths_or_keep.dtype() == DType::b8)
    return softmax_with_keep(scores, lengths_or_keep);
  const Tensor& valid_lengths = lengths_or_keep;
  SG_CHECK_SHAPE(scores.defined() && scores.ndim() >= 2,
                 "masked_softmax: scores must be (B, ..., Q, K) when valid_lengths are given, got {}",
                 scores.defined() ? scores.shape() : Shape{});
  int64_t batch = scores.size(0), queries = scores.size(-2), keys = scores.size(-1);
  Tensor keep = key_keep_mask(valid_lengths, batch, queries, keys, "masked_softmax");  // (B, 1 | Q, K)
  if (scores.ndim() > 3) {  // (B, ..., Q, K): insert the middle dims as 1s
    Shape shape = {batch};
    for (int d = 1; d < scores.ndim() - 2; ++d) shape.push_back(1);
    shape.push_back(keep.size(1));
    shape.push_back(keys);
    keep = keep.view(shape);
  } else if (scores.ndim() == 2) {  // (B, K): one query per row
    SG_CHECK_SHAPE(valid_lengths.ndim() == 1, "masked_softmax: scores (B, K) = {} take valid_lengths (B,), got {}",
                   scores.shape(), valid_lengths.shape());
    keep = keep.view({batch, keys});
  }
  return softmax_with_keep(scores, keep);
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
                            const Tensor& lengths_or_keep) {
  SG_CHECK(queries.defined() && keys.defined() && values.defined(), "{}: queries, keys and values must be defined",
           op);
  SG_CHECK_SHAPE(queries.ndim() == 3, "{}: queries must be (B, Q, Dq) or (B, Dq), got {}", op, queries.shape());
  check_keys_values(op, keys, values);
  check_queries_against(op, queries, keys, values);
  return key_keep_mask(lengths_or_keep, queries.size(0), queries.size(1), keys.size(1), op);
}

Tensor check_memory_args(const char* op, const Tensor& keys, const Tensor& values, const Tensor& lengths_or_keep) {
  check_keys_values(op, keys, values);
  if (!lengths_or_keep.defined()) return {};
  // Per-query lengths (B, Q) and keep masks (B, Q, K) fix Q; anything else applies to every query.
  bool is_keep = lengths_or_keep.dtype() == DType::b8;
  int per_query_ndim = is_keep ? 3 : 2;
  int64_t queries = lengths_or_keep.ndim() == per_query_ndim ? lengths_or_keep.size(1) : 1;
  return key_keep_mask(lengths_or_keep, keys.size(0), queries, keys.size(1), op);
}

void check_feature_size(const char* op, const char* what, const Tensor& t, int64_t expected, const char* option) {
  SG_CHECK_SHAPE(t.size(-1) == expected, "{}: {} feature size {} != {} {} ({}: {})", op, what, t.size(-1), option,
                 expected, what, t.shape());
}

AttentionMemory AttentionMemory::map(const std::function<Tensor(const Tensor&)>& f) const {
  auto apply = [&f](const Tensor& t) { return t.defined() ? f(t) : t; };
  AttentionMemory m{apply(keys), apply(values), apply(key_keep), {}, {}};
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
                          const Tensor& lengths_or_keep) const {
  Tensor queries3 = is_single_query(queries) ? queries.unsqueeze(1) : queries;  // (B, Q, Dq)
  AttentionMemory memory{keys, values, check_attention_args(op_, queries3, keys, values, lengths_or_keep), {}, {}};
  prepare_keys(memory);
  return attend(queries, memory);
}

Tensor Attention::attend(const Tensor& queries, const AttentionMemory& memory) const {
  if (!is_single_query(queries)) return attend_queries(queries, memory);
  Tensor context = attend_queries(queries.unsqueeze(1), memory);  // (B, 1, Dv)
  // The kept weights and scores follow the query's shape: (B, 1, K) -> (B, K).
  const Tensor &scores = last_scores(), &weights = last_weights();
  keep(scores.defined() ? scores.squeeze(1) : Tensor(), weights.defined() ? weights.squeeze(1) : Tensor());
  return context.squeeze(1);  // (B, Dv)
}

AttentionMemory Attention::prepare(const Tensor& keys, const Tensor& values, const Tensor& lengths_or_keep) const {
  AttentionMemory memory{keys, values, check_memory_args(op_, keys, values, lengths_or_keep), {}, {}};
  prepare_keys(memory);
  return memory;
}

AttentionMemory Attention::prepare_part(const AttentionMemory& checked) const {
  AttentionMemory memory{checked.keys, checked.values, checked.key_keep, {}, {}};
  prepare_keys(memory);
  return memory;
}

void Attention::check_queries(const Tensor& queries, const AttentionMemory& memory, size_t projected,
                              size_t parts) const {
  SG_CHECK(memory.keys.defined() && memory.projected.size() == projected && memory.parts.size() == parts,
           "{}: the memory was not prepared by this attention kind (call its prepare(keys, values, lengths))", op_);
  check_queries_against(op_, queries, memory.keys, memory.values);
  const Tensor& key_keep = memory.key_keep;
  SG_CHECK_SHAPE(!key_keep.defined() || key_keep.size(1) == 1 || key_keep.size(1) == queries.size(1),
                 "{}: the memory's valid_lengths or keep mask were per query for {} queries, got queries {}", op_,
                 key_keep.size(1), queries.shape());
}

void Attention::keep(const Tensor& scores, const Tensor& weights) const {
  last_scores_ = scores.defined() ? scores.detach() : Tensor();
  last_weights_ = weights.defined() ? weights.detach() : Tensor();
}

}  // namespace seqgrad::nn
