// The primitive list every device implements. Ops in ops/ are compositions of these; backward
// formulas are written with ops, so a new device only supplies these kernels.
#pragma once
#include <cstdint>

#include "core/backend_ops.h"
#include "core/tensor.h"

namespace seqgrad {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // memory and layout
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;  // same shape, any strides/dtypes
  virtual void fill(const Tensor& dst, double value) = 0;
  // element-wise; inputs are broadcast views of out's shape (stride 0 where broadcast)
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out has x's rank with size 1 on every reduced dimension
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) = 0;
  // c[i] = alpha * a[i] · b[i] + beta * c[i] over a batch; a: (N, M, K), b: (N, K, N'), c: (N, M, N')
  // given as strided views: transposes of a and b are read from the strides, not copied; c's rows
  // are dense (unit column stride unless c has one column). `precision` other than full applies to
  // float32 only: the operands are rounded first, products accumulate in f32.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta,
                    GemmPrecision precision) = 0;
  // indexing along `dim`
  virtual void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  virtual void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // fused softmax over the last dimension (contiguous rows)
  virtual void softmax_rows(const Tensor& x, const Tensor& out, bool log) = 0;
  virtual void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) = 0;
  virtual void topk(const Tensor& x, int64_t k, bool largest, const Tensor& values,
                    const Tensor& indices) = 0;  // along the last dimension
  // random fill from the counter-based generator: uniform [a, b) or normal(a, b)
  virtual void random_uniform(const Tensor& out, double a, double b, uint64_t seed, uint64_t offset) = 0;
  virtual void random_normal(const Tensor& out, double mean, double stddev, uint64_t seed,
                             uint64_t offset) = 0;
  // dropout's mask and scale in one pass (ops/random.cpp): out_i = x_i · (u_i < keep ? scale : 0),
  // or the mask itself, (u_i < keep ? scale : 0), when x is undefined; u_i is element i of the
  // stream random_uniform(out, 0, 1, seed, offset) draws (core/philox.h's dropout_factor); keep
  // and scale rounded to the dtype. x and out contiguous, one floating dtype.
  virtual void dropout(const Tensor& x, const Tensor& out, double keep, double scale, uint64_t seed,
                       uint64_t offset) = 0;

  // ---- optional fused kernels: supports() says which this backend has; the others throw.
  // All tensors contiguous; the math and the op using each kernel are in the file named.
  virtual bool supports(FusedOp) const { return false; }
  // GRU step (ops/gru.cpp): xp, hp (B, 3H) the step's input and recurrent projections [r | z | n]
  // (hp includes b_hh), h (B, H), keep (B,) bool or undefined (every row kept) -> h_next (B, H),
  // the new state or h where !keep; gates (B, 4H) = [r | z | n | hp_n] for the backward.
  virtual void gru_cell(const Tensor& xp, const Tensor& /*hp*/, const Tensor& /*h*/, const Tensor& /*keep*/,
                        const Tensor& /*h_next*/, const Tensor& /*gates*/) {
    unsupported(FusedOp::gru_cell, xp);
  }
  // Its backward for g = dy + dcarry, the gradient of h_next (dy may be undefined: zero) -> dxp,
  // dhp (B, 3H) and dh (B, H), the part of h's gradient that does not go through W_hh.
  virtual void gru_cell_backward(const Tensor& gates, const Tensor& /*h*/, const Tensor& /*keep*/,
                                 const Tensor& /*dy*/, const Tensor& /*dcarry*/, const Tensor& /*dxp*/,
                                 const Tensor& /*dhp*/, const Tensor& /*dh*/) {
    unsupported(FusedOp::gru_cell, gates);
  }
  // Additive attention energies (ops/additive_scores.cpp): qp (B, Q, A), kp (B, K, A), w (A,)
  //   -> scores (B, Q, K), s_bqk = Σ_a w_a tanh(qp_bqa + kp_bka)
  virtual void additive_scores(const Tensor& qp, const Tensor& /*kp*/, const Tensor& /*w*/, const Tensor& /*scores*/) {
    unsupported(FusedOp::additive_scores, qp);
  }
  // Its backward from dscores (B, Q, K): dqp, dkp, dw (overwritten); tanh is recomputed.
  virtual void additive_scores_backward(const Tensor& qp, const Tensor& /*kp*/, const Tensor& /*w*/,
                                        const Tensor& /*dscores*/, const Tensor& /*dqp*/, const Tensor& /*dkp*/,
                                        const Tensor& /*dw*/) {
    unsupported(FusedOp::additive_scores, qp);
  }
  // The chunked attention's backward over one chunk of n keys (ops/attention_chunked.cpp), with
  // the tanh features computed once per (b, i, j) instead of once for the energies and once more
  // for their backward: where keep is true (or undefined),
  //   f = tanh(qp_bi + kp_bj)   p_bij = exp(w · f - lse_bi)   ds = p_bij (dprob_bij - delta_bi)
  //   dqp_bi += ds w ∘ (1 - f²)   dkp_bj += ds w ∘ (1 - f²)   dw += ds f
  // qp (B, Q, A), kp (B, n, A), w (A,), lse and delta (B, Q), dprob (B, Q, n), keep (B, Q, n)
  // bool (true = attend) or undefined -> probs (B, Q, n) (0 where not kept), dqp, dkp, dw
  // (overwritten).
  virtual void additive_attention_chunk_backward(const Tensor& qp, const Tensor& /*kp*/, const Tensor& /*w*/,
                                                 const Tensor& /*lse*/, const Tensor& /*dprob*/,
                                                 const Tensor& /*delta*/, const Tensor& /*keep*/,
                                                 const Tensor& /*probs*/, const Tensor& /*dqp*/,
                                                 const Tensor& /*dkp*/, const Tensor& /*dw*/) {
    unsupported(FusedOp::additive_attention_chunk, qp);
  }
  // Cross-entropy with label smoothing over rows (ops/loss.cpp): logits (N, C), targets (N,) int64
  //   -> loss (N,) = lse - (1 - eps) x_y - eps/C Σ_c x_c (0 where target == ignore_index), and
  //   lse (N,) = log Σ_c exp(x_c) for the backward.
  virtual void cross_entropy_rows(const Tensor& logits, const Tensor& /*targets*/, double /*eps*/,
                                  int64_t /*ignore_index*/, const Tensor& /*loss*/, const Tensor& /*lse*/) {
    unsupported(FusedOp::cross_entropy, logits);
  }
  // dlogits = dloss_r · (softmax(x_r) - (1 - eps) onehot(y_r) - eps/C), 0 for ignored rows.
  virtual void cross_entropy_rows_backward(const Tensor& logits, const Tensor& /*targets*/, const Tensor& /*lse*/,
                                           const Tensor& /*dloss*/, double /*eps*/, int64_t /*ignore_index*/,
                                           const Tensor& /*dlogits*/) {
    unsupported(FusedOp::cross_entropy, logits);
  }
  // Layer normalisation over rows (ops/layer_norm.cpp): x (N, D), weight and bias (D,) or
  // undefined (1 and 0) -> y (N, D) = (x - μ) r w + b, and per row mean μ and rstd r = 1/√(σ² + eps)
  // (N,) for the backward (σ² the biased variance).
  virtual void layer_norm_rows(const Tensor& x, const Tensor& /*weight*/, const Tensor& /*bias*/, double /*eps*/,
                               const Tensor& /*y*/, const Tensor& /*mean*/, const Tensor& /*rstd*/) {
    unsupported(FusedOp::layer_norm, x);
  }
  // Its backward from dy (N, D), with x̂ = (x - μ) r and g = dy w: dx = r (g - mean(g) - x̂ mean(g x̂))
  // per row; dweight = Σ_rows dy x̂ and dbias = Σ_rows dy (D,), each overwritten, or skipped when
  // undefined (dweight is also skipped without a weight).
  virtual void layer_norm_rows_backward(const Tensor& x, const Tensor& /*weight*/, const Tensor& /*mean*/,
                                        const Tensor& /*rstd*/, const Tensor& /*dy*/, const Tensor& /*dx*/,
                                        const Tensor& /*dweight*/, const Tensor& /*dbias*/) {
    unsupported(FusedOp::layer_norm, x);
  }
  // One Adam/AdamW step of one parameter (optim/optimizer.cpp, formulas in optim/optimizer.h):
  // param, exp_avg, exp_avg_sq and, with p.amsgrad, max_exp_avg_sq (else undefined) are updated in
  // place from grad; all contiguous, of one shape and floating dtype.
  virtual void adam_update(const Tensor& param, const Tensor& /*grad*/, const Tensor& /*exp_avg*/,
                           const Tensor& /*exp_avg_sq*/, const Tensor& /*max_exp_avg_sq*/, const AdamParams& /*p*/) {
    unsupported(FusedOp::adam_update, param);
  }

  // The int8 GEMM of dynamic quantization (ops/quantized.cpp), supports(FusedOp::int8_gemm):
  // c (M, N) int32 = a (M, K) uint8 · wᵀ with exact int32 sums, w the int8 weight (N, K) or its
  // packed form (1-D int8 from int8_pack; N and K then come from c and a). All contiguous.
  virtual void int8_gemm(const Tensor& a, const Tensor& /*w*/, const Tensor& /*c*/) {
    unsupported(FusedOp::int8_gemm, a);
  }
  // w (N, K) int8 in the layout int8_gemm reads without repacking, as a 1-D int8 tensor (PyTorch
  // prepacks its weights likewise); undefined when the plain layout is that layout.
  virtual Tensor int8_pack(const Tensor& w) { unsupported(FusedOp::int8_gemm, w); }
  // The plain values of a packed weight into w (N, K) int8.
  virtual void int8_unpack(const Tensor& packed, const Tensor& /*w*/) { unsupported(FusedOp::int8_gemm, packed); }
  virtual Int8GemmInfo int8_gemm_info() const {
    throw DeviceError(fmt::format("op {} is not implemented on {}", fused_op_name(FusedOp::int8_gemm), name()));
  }

 protected:
  [[noreturn]] void unsupported(FusedOp op, const Tensor& t) const {
    throw DeviceError(fmt::format("op {} is not implemented on {} for {}", fused_op_name(op), name(), t.dtype()));
  }
};

Backend& backend_for(Device device);
inline Backend& backend_for(const Tensor& t) { return backend_for(t.device()); }

}  // namespace seqgrad
