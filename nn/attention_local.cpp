// LocalAttention: a window mask (and for local-p a Gaussian) around a centre, over a scorer.
#include "nn/attention_local.h"

#include <cmath>

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "local_attention";

const LocalAttention::Options& checked(const LocalAttention::Options& o) {
  SG_CHECK_VALUE(o.query_size > 0 && o.key_size > 0, "{}: query_size = {} and key_size = {} must be positive", kOp,
                 o.query_size, o.key_size);
  SG_CHECK_VALUE(o.window >= 0, "{}: window = {} must be >= 0", kOp, o.window);
  bool predictive = o.position == LocalAttention::Position::predictive;
  SG_CHECK_VALUE(!predictive || o.window >= 1, "{}: predictive positions need window >= 1 (σ = window / 2), got {}",
                 kOp, o.window);
  SG_CHECK_VALUE(o.hidden_size > 0 || (!predictive && o.score == LocalAttention::Score::scaled_dot),
                 "{}: hidden_size = {} must be positive for the additive scorer and predictive positions", kOp,
                 o.hidden_size);
  SG_CHECK_VALUE(o.dropout >= 0 && o.dropout < 1, "{}: dropout = {} not in [0, 1)", kOp, o.dropout);
  return o;
}

}  // namespace

LocalAttention::LocalAttention(Options options)
    : Attention("LocalAttention", kOp), dropout({.p = checked(options).dropout}), options_(options) {
  if (options.score == Score::additive) {
    additive = std::make_unique<AdditiveAttention>(AdditiveAttention::Options{
        .query_size = options.query_size, .key_size = options.key_size, .hidden_size = options.hidden_size});
    register_module("additive", *additive);
  } else {
    scaled_dot = std::make_unique<ScaledDotProductAttention>(
        options.query_size != options.key_size
            ? DotProductAttention::Options{.query_size = options.query_size, .key_size = options.key_size}
            : DotProductAttention::Options{});
    register_module("scaled_dot", *scaled_dot);
  }
  if (options.position == Position::predictive) {
    w_p = std::make_unique<Linear>(
        Linear::Options{.in_features = options.query_size, .out_features = options.hidden_size, .bias = false});
    v_p = std::make_unique<Linear>(Linear::Options{.in_features = options.hidden_size, .out_features = 1, .bias = false});
    register_module("w_p", *w_p);
    register_module("v_p", *v_p);
  }
  register_module("dropout", dropout);
}

void LocalAttention::prepare_keys(AttentionMemory& memory) const {
  memory.parts = {additive ? additive->prepare_part(memory) : scaled_dot->prepare_part(memory)};
}

Tensor LocalAttention::attend_queries(const Tensor& queries, const AttentionMemory& memory) const {
  check_queries(queries, memory, 0, 1);
  int64_t batch = queries.size(0), n_queries = queries.size(1), n_keys = memory.keys.size(1);
  TensorOptions opts{.dtype = queries.dtype(), .device = queries.device()};
  if (options_.position == Position::monotonic) {
    Tensor positions = arange(0, static_cast<double>(n_queries), 1.0, opts).unsqueeze(0).expand({batch, n_queries});
    return attend_window(queries, memory, positions, {});  // (B, Q, Dv)
  }
  check_feature_size(kOp, "queries", queries, options_.query_size, "query_size");
  // len: (B, 1) or (B, Q) valid lengths as floats, counted from the keep mask (K when none); centres in [0, len - 1]
  Tensor len = memory.key_keep.defined()
                   ? sum(to_dtype(memory.key_keep, queries.dtype()), {2})
                   : full({batch, 1}, static_cast<double>(n_keys), opts);
  Tensor span = where(gt(len, 0.0), add(len, -1.0), zeros({}, opts));                     // (B, 1 | Q)
  Tensor positions = mul(span, sigmoid((*v_p)(tanh((*w_p)(queries))).squeeze(-1)));      // (B, Q)
  double sigma = static_cast<double>(options_.window) / 2.0;
  Tensor offsets = sub(arange(0, static_cast<double>(n_keys), 1.0, opts).view({1, 1, n_keys}),
                       positions.unsqueeze(2));                                           // (B, Q, K) j - p
  Tensor gaussian = exp(mul(mul(offsets, offsets), -1.0 / (2.0 * sigma * sigma)));       // (B, Q, K)
  return attend_window(queries, memory, positions, gaussian);
}

Tensor LocalAttention::attend_at(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                 const Tensor& valid_lengths, const Tensor& positions) const {
  AttentionMemory memory{keys, values, check_attention_args(kOp, queries, keys, values, valid_lengths), {}, {}};
  prepare_keys(memory);
  return attend_at(queries, memory, positions);
}

Tensor LocalAttention::attend_at(const Tensor& queries, const AttentionMemory& memory, const Tensor& positions) const {
  check_queries(queries, memory, 0, 1);
  SG_CHECK_VALUE(options_.position == Position::monotonic,
                 "{}: attend_at takes centres for monotonic positions; predictive attention predicts its own", kOp);
  SG_CHECK(positions.defined(), "{}: positions are undefined", kOp);
  SG_CHECK_SHAPE(positions.ndim() == 2 && positions.size(0) == queries.size(0) && positions.size(1) == queries.size(1),
                 "{}: positions must be (B, Q) = ({}, {}), got {}", kOp, queries.size(0), queries.size(1),
                 positions.shape());
  return attend_window(queries, memory, to_dtype(positions, queries.dtype()).detach(), {});
}

Tensor LocalAttention::attend_window(const Tensor& queries, const AttentionMemory& memory, const Tensor& positions,
                                     const Tensor& gaussian) const {
  int64_t n_keys = memory.keys.size(1);
  const AttentionMemory& part = memory.parts[0];
  Tensor scores = additive ? additive->score(queries, part) : scaled_dot->score(queries, part);  // (B, Q, K)
  Tensor window;  // (B, Q, K) true inside [p - D, p + D]; the window's edges get no gradient
  {
    NoGradGuard no_grad;
    Tensor j = arange(0, static_cast<double>(n_keys), 1.0, {.dtype = scores.dtype(), .device = scores.device()});
    window = le(abs(sub(j.view({1, 1, n_keys}), positions.detach().unsqueeze(2))),
                static_cast<double>(options_.window));
  }
  const Tensor& key_keep = memory.key_keep;
  Tensor weights = softmax_with_keep(scores, key_keep.defined() ? logical_and(key_keep, window) : window);  // (B, Q, K)
  if (gaussian.defined()) weights = mul(weights, gaussian);
  keep(scores, weights);
  last_positions_ = positions.detach();
  return matmul(dropout(weights), memory.values);  // (B, Q, Dv)
}

}  // namespace seqgrad::nn
