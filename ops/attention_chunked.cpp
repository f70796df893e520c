// chunked_additive_attention: exact additive attention that visits the keys in chunks with an
// online (log-sum-exp merged) softmax, as FlashAttention does. A fused op (record_fused): the
// forward runs the recurrence without recording, the backward recomputes each chunk's weights from
// the saved log-normaliser on the fused kernels; its composed twin is the same recurrence recorded
// by autograd (create_graph differentiates it). The math: ops/ops.h; nn::ChunkedAdditiveAttention
// is the module over it.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

constexpr const char* kOp = "chunked_additive_attention";
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Where the dropout masks come from: counters [first, first + B·Q·K) of the generator `seed`.
// Chunk [start, start + n) uses counters first + B·Q·start + (its (B, Q, n) row-major index), so
// forward, backward and the composed twin draw the same mask and chunks never share counters.
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

// One chunk's energies (B, Q, n) from additive_scores (its (B, Q, n, A) tanh features never
// exist), with the keys not kept at -inf.
Tensor chunk_scores(const Tensor& qp, const Tensor& kc, const Tensor& w_v, const Tensor& keep, int64_t start) {
  Tensor s = additive_scores(qp, kc, w_v);  // (B, Q, n)
  if (!keep.defined()) return s;
  return where(keep.narrow(2, start, s.size(2)), s, full({}, kNegInf, {.dtype = s.dtype(), .device = s.device()}));
}

// The recurrence: context (B, Q, Dv) and log-normaliser L (B, Q, 1). Written with differentiable
// ops: the fused op runs it without recording, its composed twin with.
struct Forward {
  Tensor context, log_normalizer;
};
Forward online_softmax(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                       const Tensor& keep, int64_t chunk, const DropoutStream& drop) {
  int64_t batch = qp.size(0), queries = qp.size(1), keys = kp.size(1);
  TensorOptions opts{.dtype = qp.dtype(), .device = qp.device()};
  Tensor m = full({batch, queries, 1}, kNegInf, opts);         // (B, Q, 1) running max
  Tensor l = zeros({batch, queries, 1}, opts);                 // (B, Q, 1) running Σ exp(s - m)
  Tensor acc = zeros({batch, queries, values.size(2)}, opts);  // (B, Q, Dv) running Σ exp(s - m) v
  Tensor zero = zeros({}, opts);
  Tensor shift;  // (B, Q, 1) m with -inf (no valid key yet) replaced by 0, so exp() never sees inf - inf
  for (int64_t start = 0; start < keys; start += chunk) {
    int64_t n = std::min(chunk, keys - start);
    Tensor s = chunk_scores(qp, key_chunk(kp, start, n), w_v, keep, start);  // (B, Q, n)
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

// One chunk of the backward: the weights w = exp(s - L) (B, Q, n), 0 on keys not kept, and the
// gradients through the energies for ds = w ∘ (dprob - Δ). One fused pass where the backend has
// it (the tanh features computed once); otherwise the energies are recomputed and differentiated
// with additive_scores' kernels (the tanh evaluated twice) or its composed twin.
struct ChunkGrads {
  Tensor probs, dqp, dkc, dw_v;  // (B, Q, n), (B, Q, A), (B, n, A), (1, A)
};
ChunkGrads chunk_backward(const Tensor& qp, const Tensor& kc, const Tensor& w_v, const Tensor& log_normalizer,
                          const Tensor& dprob, const Tensor& delta, const Tensor& keep, int64_t start) {
  Backend& backend = backend_for(qp);
  const int64_t batch = qp.size(0), queries = qp.size(1), n = kc.size(1), hidden = qp.size(2);
  if (backend.supports(FusedOp::additive_attention_chunk) && is_floating(qp.dtype())) {
    const TensorOptions like{.dtype = qp.dtype(), .device = qp.device()};
    ChunkGrads g{empty({batch, queries, n}, like), empty(qp.shape(), like), empty(kc.shape(), like),
                 empty(w_v.shape(), like)};
    Tensor keep_c = keep.defined() ? keep.narrow(2, start, n).expand({batch, queries, n}).contiguous() : Tensor();
    backend.additive_attention_chunk_backward(qp.contiguous(), kc, w_v.contiguous().view({hidden}),
                                              log_normalizer.contiguous().view({batch, queries}),
                                              dprob.contiguous(), delta.contiguous().view({batch, queries}), keep_c,
                                              g.probs, g.dqp, g.dkc, g.dw_v.view({hidden}));
    return g;
  }
  Tensor probs = exp(sub(chunk_scores(qp, kc, w_v, keep, start), log_normalizer));  // (B, Q, n); 0 if masked
  detail::AdditiveScoreGrads sg = detail::additive_scores_grads(qp, kc, w_v, mul(probs, sub(dprob, delta)));
  return {probs, sg.dqp, sg.dkp, sg.dw_v};
}

// The fused backward: inputs {qp, kp, w_v, values}, the op's output context (B, Q, Dv) and dy.
void chunked_backward(const std::vector<Tensor>& in, const Tensor& context, const Tensor& dy, Grads& g,
                      const Tensor& keep, const Tensor& log_normalizer, int64_t chunk, const DropoutStream& drop) {
  const Tensor &qp = in[0], &kp = in[1], &w_v = in[2], &values = in[3];
  int64_t batch = qp.size(0), queries = qp.size(1), keys = kp.size(1);
  Tensor delta = sum(mul(dy, context), {2}, true);    // (B, Q, 1) = Σ_j w_ij dw_ij
  Tensor dqp = zeros_like(qp);                        // (B, Q, A)
  Tensor dw_v = zeros_like(w_v);                      // (1, A)
  std::vector<Tensor> dkp, dvalues;                   // per chunk: (B, n, A), (B, n, Dv)
  for (int64_t start = 0; start < keys; start += chunk) {
    int64_t n = std::min(chunk, keys - start);
    // 2. context = Σ_J w_dropped · values_J, so dvalues_J = w_droppedᵀ dy and dw = dy · values_Jᵀ
    Tensor values_c = values.narrow(1, start, n);                       // (B, n, Dv)
    Tensor drop_mask = drop.p > 0 ? chunk_dropout_mask(drop, batch, queries, start, n, qp) : Tensor();
    Tensor dprob = matmul(dy, values_c.transpose(1, 2));               // (B, Q, n)
    if (drop.p > 0) dprob = mul(dprob, drop_mask);
    // 1. softmax over all K keys: ds = w ∘ (dw - Σ_j w_j dw_j), and Σ_j w_j dw_j = dy · context;
    //    w = exp(s - L) with s = w_v · tanh(qp + kp) recomputed, then back through the energies
    ChunkGrads c = chunk_backward(qp, key_chunk(kp, start, n), w_v, log_normalizer, dprob, delta, keep, start);
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
}

void check_chunked(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                   const Tensor& key_keep, int64_t chunk_size, double dropout_p) {
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
  if (!key_keep.defined()) return;
  SG_CHECK_DTYPE(key_keep.dtype() == DType::b8, "{}: key_keep must be bool (true = attend), got {} {}", kOp,
                 key_keep.dtype(), key_keep.shape());
  SG_CHECK_SHAPE(key_keep.ndim() == 3 && key_keep.size(0) == batch &&
                     (key_keep.size(1) == 1 || key_keep.size(1) == queries) && key_keep.size(2) == keys,
                 "{}: key_keep {} must be (B, 1, K) or (B, Q, K) with B = {}, Q = {}, K = {}", kOp, key_keep.shape(),
                 batch, queries, keys);
}

}  // namespace

Tensor chunked_additive_attention(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                                  const Tensor& key_keep, int64_t chunk_size, double dropout_p) {
  check_chunked(qp, kp, w_v, values, key_keep, chunk_size, dropout_p);
  DropoutStream drop;
  if (dropout_p > 0) {
    Generator& gen = default_generator();
    drop = {dropout_p, gen.seed(), gen.reserve(static_cast<uint64_t>(qp.size(0) * qp.size(1) * kp.size(1)))};
  }
  Forward fwd;
  {
    NoGradGuard no_grad;
    fwd = online_softmax(qp, kp, w_v, values, key_keep, chunk_size, drop);
  }
  auto composed = [key_keep, chunk_size, drop](const std::vector<Tensor>& in) {
    return online_softmax(in[0], in[1], in[2], in[3], key_keep, chunk_size, drop).context;
  };
  auto backward = [key_keep, log_normalizer = fwd.log_normalizer, chunk_size, drop](
                      const std::vector<Tensor>& in, const Tensor& dy, Grads& g) {
    chunked_backward(in, g.output(), dy, g, key_keep, log_normalizer, chunk_size, drop);
  };
  const Tensor inputs[] = {qp, kp, w_v, values};
  return detail::record_fused(kOp, fwd.context, inputs, composed, backward, SaveOutput::yes);
}

}  // namespace seqgrad
