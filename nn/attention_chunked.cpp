// chunked_additive_attention: the online-softmax op (forward and recomputing backward together)
// and the ChunkedAdditiveAttention module over it.
#include "nn/attention_chunked.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/rng.h"

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "chunked_additive_attention";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Where the dropout masks come from: counters [first, first + B·Q·K) of the generator `seed`.
// Chunk [start, start + n) uses counters first + B·Q·start + (its (B, Q, n) row-major index), so
// forward and backward draw the same mask and chunks never share counters.
struct DropoutStream {
  double p = 0;
  uint64_t seed = 0;
  uint64_t first = 0;
};

// {0, 1/(1-p)} mask (B, Q, n) for keys [start, start + n).
Tensor chunk_dropout_mask(const DropoutStream& d, int64_t batch, int64_t queries, int64_t start, int64_t n,
                          const Tensor& like) {
  TensorOptions opts{.dtype = like.dtype(), .device = like.device()};
  Tensor u = Tensor::empty({batch, queries, n}, opts);  // (B, Q, n) uniform [0, 1)
  backend_for(u).random_uniform(u, 0.0, 1.0, d.seed, d.first + static_cast<uint64_t>(batch * queries * start));
  return where(lt(u, 1.0 - d.p), full({}, 1.0 / (1.0 - d.p), opts), zeros({}, opts));  // (B, Q, n)
}

// Keys [start, start + n) of kp (B, K, A) as a contiguous (B, n, A) block, the layout the fused
// energies kernels read.
Tensor key_chunk(const Tensor& kp, int64_t start, int64_t n) { return kp.narrow(1, start, n).contiguous(); }

// One chunk's energies (B, Q, n) from the fused kernel (its (B, Q, n, A) tanh features never
// exist); `raw` gets them before masking, the result has masked keys at -inf. Callers hold no-grad.
Tensor chunk_scores(const Tensor& qp, const Tensor& kc, const Tensor& w_v, const Tensor& mask, int64_t start,
                    Tensor* raw = nullptr) {
  Tensor s = additive_scores(qp, kc, w_v);  // (B, Q, n)
  if (raw) *raw = s;
  return mask.defined() ? masked_fill(s, mask.narrow(2, start, s.size(2)), kNegInf) : s;
}

// The gradients of s = additive_scores(qp, kc, w_v) for a given ds (B, Q, n): one pass of the
// fused backward kernel (tanh recomputed, nothing (B, Q, n, A) stored), or the composed twin's
// autograd on a backend without the kernel.
struct ScoreGrads {
  Tensor dqp, dkc, dw_v;  // (B, Q, A), (B, n, A), (1, A)
};
ScoreGrads additive_scores_grads(const Tensor& qp, const Tensor& kc, const Tensor& w_v, const Tensor& ds) {
  Backend& backend = backend_for(qp);
  if (backend.supports(FusedOp::additive_scores) && is_floating(qp.dtype())) {
    const int64_t hidden = qp.size(2);
    const TensorOptions like{.dtype = qp.dtype(), .device = qp.device()};
    ScoreGrads g{empty(qp.shape(), like), empty(kc.shape(), like), empty(w_v.shape(), like)};
    backend.additive_scores_backward(qp.contiguous(), kc, w_v.contiguous().view({hidden}), ds.contiguous(), g.dqp,
                                     g.dkc, g.dw_v.view({hidden}));
    return g;
  }
  EnableGradGuard grad_mode;
  Tensor q = qp.detach().requires_grad_(), k = kc.detach().requires_grad_(), w = w_v.detach().requires_grad_();
  std::vector<Tensor> g = autograd::grad({additive_scores_composed(q, k, w)}, {q, k, w}, {ds});
  return {g[0], g[1], g[2]};
}

// One chunk of the backward: the weights w = exp(s - L) (B, Q, n), 0 on masked keys, and the
// gradients through the energies for ds = w ∘ (dprob - Δ). One fused pass where the backend has
// it (the tanh features computed once); otherwise the energies are recomputed with the fused
// forward kernel and differentiated with its backward (the tanh evaluated twice).
struct ChunkGrads {
  Tensor probs, dqp, dkc, dw_v;  // (B, Q, n), (B, Q, A), (B, n, A), (1, A)
};
ChunkGrads chunk_backward(const Tensor& qp, const Tensor& kc, const Tensor& w_v, const Tensor& log_normalizer,
                          const Tensor& dprob, const Tensor& delta, const Tensor& mask, int64_t start) {
  Backend& backend = backend_for(qp);
  const int64_t batch = qp.size(0), queries = qp.size(1), n = kc.size(1), hidden = qp.size(2);
  if (backend.supports(FusedOp::additive_attention_chunk) && is_floating(qp.dtype())) {
    const TensorOptions like{.dtype = qp.dtype(), .device = qp.device()};
    ChunkGrads g{empty({batch, queries, n}, like), empty(qp.shape(), like), empty(kc.shape(), like),
                 empty(w_v.shape(), like)};
    Tensor mask_c = mask.defined() ? mask.narrow(2, start, n).expand({batch, queries, n}).contiguous() : Tensor();
    backend.additive_attention_chunk_backward(qp.contiguous(), kc, w_v.contiguous().view({hidden}),
                                              log_normalizer.contiguous().view({batch, queries}),
                                              dprob.contiguous(), delta.contiguous().view({batch, queries}), mask_c,
                                              g.probs, g.dqp, g.dkc, g.dw_v.view({hidden}));
    return g;
  }
  Tensor probs = exp(sub(chunk_scores(qp, kc, w_v, mask, start), log_normalizer));  // (B, Q, n); 0 if masked
  ScoreGrads sg = additive_scores_grads(qp, kc, w_v, mul(probs, sub(dprob, delta)));
  return {probs, sg.dqp, sg.dkc, sg.dw_v};
}

// Forward pass without recording: context (B, Q, Dv) and log-normaliser L (B, Q, 1).
struct Forward {
  Tensor context, log_normalizer;
};
Forward online_softmax_forward(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                               const Tensor& mask, int64_t chunk, const DropoutStream& drop) {
  NoGradGuard no_grad;
  int64_t batch = qp.size(0), queries = qp.size(1), keys = kp.size(1);
  TensorOptions opts{.dtype = qp.dtype(), .device = qp.device()};
  Tensor m = full({batch, queries, 1}, kNegInf, opts);         // (B, Q, 1) running max
  Tensor l = zeros({batch, queries, 1}, opts);                 // (B, Q, 1) running Σ exp(s - m)
  Tensor acc = zeros({batch, queries, values.size(2)}, opts);  // (B, Q, Dv) running Σ exp(s - m) v
  Tensor zero = zeros({}, opts);
  Tensor shift;  // (B, Q, 1) m with -inf (no valid key yet) replaced by 0, so exp() never sees inf - inf
  for (int64_t start = 0; start < keys; start += chunk) {
    int64_t n = std::min(chunk, keys - start);
    Tensor s = chunk_scores(qp, key_chunk(kp, start, n), w_v, mask, start);  // (B, Q, n)
    Tensor m_new = maximum(m, amax(s, {2}, true));                // (B, Q, 1)
    shift = where(eq(m_new, kNegInf), zero, m_new);               // (B, Q, 1)
    Tensor alpha = exp(sub(m, shift));                            // (B, Q, 1) rescales the old sums
    Tensor p = exp(sub(s, shift));                                // (B, Q, n); 0 on masked keys
    l = add(mul(alpha, l), sum(p, {2}, true));
    if (drop.p > 0) p = mul(p, chunk_dropout_mask(drop, batch, queries, start, n, qp));
    acc = add(mul(alpha, acc), matmul(p, values.narrow(1, start, n)));
    m = m_new;
  }
  Tensor has_key = gt(l, 0.0);                                      // (B, Q, 1)
  Tensor l_safe = where(has_key, l, ones({}, opts));               // (B, Q, 1)
  return {div(acc, l_safe), add(shift, log(l_safe))};              // (B, Q, Dv), (B, Q, 1)
}

}  // namespace

Tensor chunked_additive_attention(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                                  const Tensor& mask, int64_t chunk_size, double dropout_p) {
  SG_CHECK(qp.defined() && kp.defined() && w_v.defined() && values.defined(), "{}: an input is undefined", kOp);
  SG_CHECK_SHAPE(qp.ndim() == 3 && kp.ndim() == 3 && values.ndim() == 3,
                 "{}: expected qp (B, Q, A), kp (B, K, A), values (B, K, Dv), got {}, {}, {}", kOp, qp.shape(),
                 kp.shape(), values.shape());
  int64_t batch = qp.size(0), queries = qp.size(1), keys = kp.size(1), hidden = qp.size(2);
  SG_CHECK_SHAPE(kp.size(0) == batch && values.size(0) == batch && values.size(1) == keys && kp.size(2) == hidden,
                 "{}: qp {}, kp {} and values {} must be (B, Q, A), (B, K, A), (B, K, Dv)", kOp, qp.shape(),
                 kp.shape(), values.shape());
  SG_CHECK_SHAPE(w_v.ndim() == 2 && w_v.size(0) == 1 && w_v.size(1) == hidden, "{}: w_v {} must be (1, A) = (1, {})",
                 kOp, w_v.shape(), hidden);
  SG_CHECK_SHAPE(keys > 0, "{}: kp {} needs at least one key", kOp, kp.shape());
  SG_CHECK_VALUE(chunk_size > 0, "{}: chunk_size = {} must be positive", kOp, chunk_size);
  SG_CHECK_VALUE(dropout_p >= 0 && dropout_p < 1, "{}: dropout = {} not in [0, 1)", kOp, dropout_p);
  if (mask.defined()) {
    SG_CHECK_DTYPE(mask.dtype() == DType::b8, "{}: mask must be bool, got {} {}", kOp, mask.dtype(), mask.shape());
    SG_CHECK_SHAPE(mask.ndim() == 3 && mask.size(0) == batch && (mask.size(1) == 1 || mask.size(1) == queries) &&
                       mask.size(2) == keys,
                   "{}: mask {} must be (B, 1, K) or (B, Q, K) with B = {}, Q = {}, K = {}", kOp, mask.shape(), batch,
                   queries, keys);
  }
  DropoutStream drop;
  if (dropout_p > 0) {
    Generator& gen = default_generator();
    drop = {dropout_p, gen.seed(), gen.reserve(static_cast<uint64_t>(batch * queries * keys))};
  }
  Forward fwd = online_softmax_forward(qp, kp, w_v, values, mask, chunk_size, drop);
  Tensor log_normalizer = fwd.log_normalizer;  // (B, Q, 1)

  return record(
      kOp, fwd.context, {qp, kp, w_v, values},
      [qp_s = save(qp), kp_s = save(kp), w_v_s = save(w_v), values_s = save(values), mask, log_normalizer,
       chunk_size, drop](const Tensor& dy, Grads& g) {
        SG_CHECK(!GradMode::is_enabled(),
                 "{}: double backward (create_graph) is not implemented; use AdditiveAttention for higher-order "
                 "gradients",
                 kOp);
        const Tensor &qp = qp_s.get(), &kp = kp_s.get(), &w_v = w_v_s.get(), &values = values_s.get();
        int64_t batch = qp.size(0), queries = qp.size(1), keys = kp.size(1);
        Tensor context = g.output();                        // (B, Q, Dv)
        Tensor delta = sum(mul(dy, context), {2}, true);    // (B, Q, 1) = Σ_j w_ij dw_ij
        Tensor dqp = zeros_like(qp);                        // (B, Q, A)
        Tensor dw_v = zeros_like(w_v);                      // (1, A)
        std::vector<Tensor> dkp, dvalues;                   // per chunk: (B, n, A), (B, n, Dv)
        for (int64_t start = 0; start < keys; start += chunk_size) {
          int64_t n = std::min(chunk_size, keys - start);
          // 2. context = Σ_J w_dropped · values_J, so dvalues_J = w_droppedᵀ dy and dw = dy · values_Jᵀ
          Tensor values_c = values.narrow(1, start, n);                       // (B, n, Dv)
          Tensor drop_mask = drop.p > 0 ? chunk_dropout_mask(drop, batch, queries, start, n, qp) : Tensor();
          Tensor dprob = matmul(dy, values_c.transpose(1, 2));               // (B, Q, n)
          if (drop.p > 0) dprob = mul(dprob, drop_mask);
          // 1. softmax over all K keys: ds = w ∘ (dw - Σ_j w_j dw_j), and Σ_j w_j dw_j = dy · context;
          //    w = exp(s - L) with s = w_v · tanh(qp + kp) recomputed, then back through the energies
          ChunkGrads c = chunk_backward(qp, key_chunk(kp, start, n), w_v, log_normalizer, dprob, delta, mask, start);
          Tensor w_dropped = drop.p > 0 ? mul(c.probs, drop_mask) : c.probs;  // (B, Q, n)
          if (g.needs(3)) dvalues.push_back(matmul(w_dropped.transpose(1, 2), dy));  // (B, n, Dv)
          if (g.needs(0)) dqp = add(dqp, c.dqp);
          if (g.needs(1)) dkp.push_back(c.dkc);  // (B, n, A)
          if (g.needs(2)) dw_v = add(dw_v, c.dw_v);
        }
        if (g.needs(0)) g.add(0, dqp);
        if (g.needs(1)) g.add(1, cat(dkp, 1));
        if (g.needs(2)) g.add(2, dw_v);
        if (g.needs(3)) g.add(3, cat(dvalues, 1));
      },
      SaveOutput::yes);
}

ChunkedAdditiveAttention::ChunkedAdditiveAttention(Options options)
    : AdditiveAttention("ChunkedAdditiveAttention", kOp,
                        {.query_size = options.query_size, .key_size = options.key_size,
                         .hidden_size = options.hidden_size, .dropout = options.dropout}),
      chunked_options_(options) {
  SG_CHECK_VALUE(options.chunk_size > 0, "{}: chunk_size = {} must be positive", kOp, options.chunk_size);
}

Tensor ChunkedAdditiveAttention::attend_keys(const Tensor& queries, const Tensor& projected_keys,
                                             const Tensor& values, const Tensor& mask) const {
  Tensor qp = w_q(queries);  // (B, Q, A)
  double p = is_training() ? options().dropout : 0.0;
  Tensor context = chunked_additive_attention(qp, projected_keys, linear_weight(w_v), values, mask,
                                              chunked_options_.chunk_size, p);  // (B, Q, Dv)
  if (!chunked_options_.keep_weights) {
    keep({}, {});
    return context;
  }
  // For plots only, under no-grad: the (B, Q, K) energies chunk by chunk (the (B, Q, C, A) features
  // never exist for all keys at once), then their masked softmax.
  NoGradGuard no_grad;
  Tensor qp_d = qp.detach().contiguous(), kp_d = projected_keys.detach(), w_v_d = linear_weight(w_v).detach();
  std::vector<Tensor> raw, scores;
  int64_t keys = kp_d.size(1), chunk = chunked_options_.chunk_size;
  for (int64_t start = 0; start < keys; start += chunk) {
    Tensor raw_chunk;  // (B, Q, n)
    scores.push_back(chunk_scores(qp_d, key_chunk(kp_d, start, std::min(chunk, keys - start)), w_v_d, mask, start,
                                  &raw_chunk));
    raw.push_back(raw_chunk);
  }
  Tensor all_scores = cat(scores, 2);  // (B, Q, K) with masked keys at -inf
  TensorOptions opts{.dtype = all_scores.dtype(), .device = all_scores.device()};
  Tensor shift = amax(all_scores, {2}, true);                  // (B, Q, 1)
  shift = where(eq(shift, kNegInf), zeros({}, opts), shift);   // rows with no valid key: 0
  Tensor e = exp(sub(all_scores, shift));                      // (B, Q, K)
  Tensor total = sum(e, {2}, true);                            // (B, Q, 1)
  keep(cat(raw, 2), div(e, where(gt(total, 0.0), total, ones({}, opts))));
  return context;
}

}  // namespace seqgrad::nn
