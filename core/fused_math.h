// The per-element arithmetic of the fused kernels (core/backend.h: GRU step, additive-attention
// energies, layer normalisation, label-smoothed cross-entropy, Adam), defined once for the CUDA
// kernels (ops/cuda/fused.cu, layer_norm.cu), their host emulation (tests/cuda_emulation) and, for
// Adam and layer normalisation, the CPU loops (optim/optimizer.cpp, ops/cpu/layer_norm.cpp).
// The CPU's other fused kernels (ops/cpu/fused.cpp) write the same formulas with their vectorised
// float32 exp/tanh (ops/cpu/vec_math.h); the derivations are next to the ops that use them.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/backend_math.h"
#include "core/backend_ops.h"
#include "core/host_device.h"

namespace seqgrad::math {

// ---- GRU step (ops/gru.cpp): pre-activations a_r = x_r + p_r, a_z = x_z + p_z, with p = W_hh h + b_hh
//   r = σ(a_r)   z = σ(a_z)   n = tanh(x_n + r · p_n)   h' = n + z (h - n)
template <class T>
struct GruGates {
  T r, z, n, h_next;
};

template <class T>
SG_HOST_DEVICE inline GruGates<T> gru_cell_value(T xr, T xz, T xn, T pr, T pz, T pn, T h) {
  const T r = sigmoid(xr + pr);
  const T z = sigmoid(xz + pz);
  const T n = std::tanh(xn + r * pn);
  return {r, z, n, n + z * (h - n)};
}

// Its backward for g = dh': the pre-activation gradients (dxp = [dar | daz | dan],
// dhp = [dar | daz | dan · r]) and h's direct part dh = g · z.
template <class T>
struct GruGrads {
  T dar, daz, dan, dpn, dh;
};

template <class T>
SG_HOST_DEVICE inline GruGrads<T> gru_cell_grad(T g, T r, T z, T n, T pn, T h) {
  const T dn = g * (T(1) - z);
  const T dz = g * (h - n);
  const T dan = dn * (T(1) - n * n);
  const T daz = dz * z * (T(1) - z);
  const T dar = dan * pn * r * (T(1) - r);
  return {dar, daz, dan, dan * r, g * z};
}

// ---- additive energies (ops/additive_scores.cpp): s_bqk = Σ_a w_a tanh(qp_bqa + kp_bka).
// One term's backward for ds = ∂L/∂s_bqk, with f = tanh(qp + kp) recomputed:
//   dqp_bqa += dz and dkp_bka += dz with dz = ds · w_a (1 - f²);  dw_a += ds · f
template <class T>
SG_HOST_DEVICE inline T additive_term(T q, T k, T w) {
  return w * std::tanh(q + k);
}

template <class T>
struct AdditiveGrads {
  T dz, dw;
};

template <class T>
SG_HOST_DEVICE inline AdditiveGrads<T> additive_term_grad(T ds, T q, T k, T w) {
  const T f = std::tanh(q + k);
  return {ds * w * (T(1) - f * f), ds * f};
}

// ---- layer normalisation (ops/layer_norm.cpp), one element of a row with mean μ and
// r = 1/√(σ² + eps):  y = (x - μ) r w + b;  with x̂ = (x - μ) r, g = dy w and the row means ḡ, (g x̂)‾:
//   dx = r (g - ḡ - x̂ (g x̂)‾)
template <class T>
SG_HOST_DEVICE inline T layer_norm_value(T x, T mean, T rstd, T w, T b) {
  return (x - mean) * rstd * w + b;
}

template <class T>
SG_HOST_DEVICE inline T layer_norm_grad(T g, T xhat, T rstd, T mean_g, T mean_gxhat) {
  return rstd * (g - mean_g - xhat * mean_gxhat);
}

// ---- cross-entropy with label smoothing ε over C classes (ops/loss.cpp), per row:
//   lse = m + log Σ_c exp(x_c - m) with m = max x (0 when every logit is -inf: no inf - inf)
//   loss = lse - (1 - ε) x_y - ε/C Σ_c x_c
//   dx_c = dloss · (exp(x_c - lse) - ε/C) - [c == y] dloss · (1 - ε)
template <class T>
SG_HOST_DEVICE inline T cross_entropy_loss(T lse, T x_target, T x_total, T keep, T spread) {
  return lse - keep * x_target - spread * x_total;
}

template <class T>
SG_HOST_DEVICE inline T cross_entropy_grad(T dloss, T x, T lse, bool is_target, T keep, T spread) {
  const T d = dloss * (std::exp(x - lse) - spread);
  return is_target ? d - dloss * keep : d;
}

// ---- Adam / AdamW (optim/optimizer.h): the step's scalars, rounded to T once as PyTorch's
// tensor-scalar ops do, and the update of one element.
template <class T>
struct AdamScalars {
  T neg_step_size, bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay;
};

template <class T>
inline AdamScalars<T> adam_scalars(const AdamParams& s) {
  const double bias_correction1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  return {static_cast<T>(-(s.lr / bias_correction1)), static_cast<T>(std::sqrt(bias_correction2)),
          static_cast<T>(s.beta1), static_cast<T>(1.0 - s.beta1), static_cast<T>(s.beta2),
          static_cast<T>(1.0 - s.beta2), static_cast<T>(s.eps), static_cast<T>(s.weight_decay),
          static_cast<T>(1.0 - s.lr * s.weight_decay)};
}

template <class T>
struct AdamElement {
  T p, m, v, vmax;
};

// kDecoupled: AdamW's p *= 1 - lr·wd; kCoupled: Adam's g += wd·p; kAmsgrad: v̂ = max(v_max, v).
// vmax is read only with kAmsgrad.
template <bool kDecoupled, bool kCoupled, bool kAmsgrad, class T>
SG_HOST_DEVICE inline AdamElement<T> adam_element(T p, T g, T m, T v, T vmax, const AdamScalars<T>& c) {
  if constexpr (kDecoupled) p = p * c.decay;          // p.mul_(1 - lr · wd)
  if constexpr (kCoupled) g = g + c.weight_decay * p;  // grad.add(p, alpha=wd)
  m = m * c.beta1 + c.one_minus_beta1 * g;             // exp_avg.mul_(β1).add_(g, alpha=1-β1)
  v = v * c.beta2 + c.one_minus_beta2 * g * g;         // exp_avg_sq.mul_(β2).addcmul_(g, g, value=1-β2)
  T vhat = v;
  if constexpr (kAmsgrad) vhat = vmax > v ? vmax : v;  // torch.maximum(max_exp_avg_sq, exp_avg_sq)
  const T denom = std::sqrt(vhat) / c.bias_correction2_sqrt + c.eps;
  return {p + c.neg_step_size * m / denom, m, v, vhat};  // p.addcdiv_(m, denom, value=-step_size)
}

}  // namespace seqgrad::math
