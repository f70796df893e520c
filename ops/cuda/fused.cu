// The optional fused kernels of core/backend.h on CUDA: the GRU step and its backward (one thread
// per state element), additive-attention energies (a warp per key, a block per query) and their
// backward (a block per query row, a block per key row, then dw's per-query partials summed in a
// second pass: no atomics, a fixed order), label-smoothed cross-entropy (a block per row forward,
// one thread per logit backward) and the Adam/AdamW update (one thread per element). The
// per-element arithmetic is core/fused_math.h's, shared with the CPU (Adam) and the emulation.
#include <cmath>

#include "core/fused_math.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

constexpr int kWarp = 32;

// Threads for a block whose threads stride over A features: whole warps, at most kThreads.
unsigned feature_threads(int64_t A) {
  int64_t t = (A + kWarp - 1) / kWarp * kWarp;
  return static_cast<unsigned>(t < kWarp ? kWarp : (t > kThreads ? kThreads : t));
}

// ---- GRU step: element i = b·H + j of the state

template <class T>
__global__ void gru_cell_kernel(const T* xp, const T* hp, const T* h, const bool* keep, T* h_next, T* gates,
                                int64_t B, int64_t H) {
  SG_GRID_STRIDE_LOOP(i, B * H) {
    const int64_t b = i / H, j = i - b * H;
    if (keep != nullptr && !keep[b]) {  // padding: the state passes through
      h_next[i] = h[i];
      continue;
    }
    const T* x = xp + b * 3 * H;
    const T* p = hp + b * 3 * H;
    const math::GruGates<T> s = math::gru_cell_value(x[j], x[H + j], x[2 * H + j], p[j], p[H + j], p[2 * H + j], h[i]);
    h_next[i] = s.h_next;
    T* g = gates + b * 4 * H;
    g[j] = s.r, g[H + j] = s.z, g[2 * H + j] = s.n, g[3 * H + j] = p[2 * H + j];
  }
}

template <class T>
__global__ void gru_cell_backward_kernel(const T* gates, const T* h, const bool* keep, const T* dy, const T* dcarry,
                                         T* dxp, T* dhp, T* dh, int64_t B, int64_t H) {
  SG_GRID_STRIDE_LOOP(i, B * H) {
    const int64_t b = i / H, j = i - b * H;
    const T g = (dy != nullptr ? dy[i] : T(0)) + dcarry[i];  // dh'
    T* dx = dxp + b * 3 * H;
    T* dp = dhp + b * 3 * H;
    if (keep != nullptr && !keep[b]) {  // padding: h_next = h, so h gets all of h_next's gradient
      dh[i] = g;
      dx[j] = dx[H + j] = dx[2 * H + j] = T(0);
      dp[j] = dp[H + j] = dp[2 * H + j] = T(0);
      continue;
    }
    const T* gb = gates + b * 4 * H;
    const math::GruGrads<T> d = math::gru_cell_grad(g, gb[j], gb[H + j], gb[2 * H + j], gb[3 * H + j], h[i]);
    dx[j] = d.dar, dx[H + j] = d.daz, dx[2 * H + j] = d.dan;
    dp[j] = d.dar, dp[H + j] = d.daz, dp[2 * H + j] = d.dpn;
    dh[i] = d.dh;
  }
}

// ---- additive energies: block r = b·Q + q, warp w takes keys w, w + warps, ...; its lanes stride
// over the A features and a shuffle sums them.

template <class T>
__global__ void additive_scores_kernel(const T* qp, const T* kp, const T* w, T* scores, int64_t B, int64_t Q,
                                       int64_t K, int64_t A) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for (int64_t r = blockIdx.x; r < B * Q; r += gridDim.x) {
    const int64_t b = r / Q;
    const T* q = qp + r * A;
    for (int64_t k = warp; k < K; k += warps) {  // uniform per warp: every lane reaches warp_sum
      const T* kr = kp + (b * K + k) * A;
      T acc = 0;
      for (int64_t a = lane; a < A; a += kWarp) acc += math::additive_term(q[a], kr[a], w[a]);
      acc = warp_sum(acc);
      if (lane == 0) scores[r * K + k] = acc;
    }
  }
}

// Backward pass 1, block r = b·Q + q, a thread per feature a: dqp_bqa = Σ_k dz and dw's partial
// Σ_k ds · f for this query (keys in order, as the CPU). ds = 0 (masked keys) contributes nothing.
template <class T>
__global__ void additive_dq_kernel(const T* qp, const T* kp, const T* w, const T* ds, T* dqp, T* dw_rows, int64_t B,
                                   int64_t Q, int64_t K, int64_t A) {
  for (int64_t r = blockIdx.x; r < B * Q; r += gridDim.x) {
    const int64_t b = r / Q;
    const T* dsr = ds + r * K;
    for (int64_t a = threadIdx.x; a < A; a += blockDim.x) {
      const T q = qp[r * A + a], wa = w[a];
      T dq = 0, dw = 0;
      for (int64_t k = 0; k < K; ++k) {
        const T d = dsr[k];
        if (d == T(0)) continue;
        const math::AdditiveGrads<T> g = math::additive_term_grad(d, q, kp[(b * K + k) * A + a], wa);
        dq += g.dz;
        dw += g.dw;
      }
      dqp[r * A + a] = dq;
      dw_rows[r * A + a] = dw;
    }
  }
}

// Backward pass 2, block r = b·K + k, a thread per feature: dkp_bka = Σ_q dz (queries in order).
template <class T>
__global__ void additive_dk_kernel(const T* qp, const T* kp, const T* w, const T* ds, T* dkp, int64_t B, int64_t Q,
                                   int64_t K, int64_t A) {
  for (int64_t r = blockIdx.x; r < B * K; r += gridDim.x) {
    const int64_t b = r / K, k = r - b * K;
    for (int64_t a = threadIdx.x; a < A; a += blockDim.x) {
      const T kv = kp[r * A + a], wa = w[a];
      T dk = 0;
      for (int64_t q = 0; q < Q; ++q) {
        const T d = ds[(b * Q + q) * K + k];
        if (d == T(0)) continue;
        dk += math::additive_term_grad(d, qp[(b * Q + q) * A + a], kv, wa).dz;
      }
      dkp[r * A + a] = dk;
    }
  }
}

// Pass 3: dw_a = Σ_r dw_rows[r, a] over the B·Q query rows.
template <class T>
__global__ void sum_rows_kernel(const T* rows, T* out, int64_t n_rows, int64_t A) {
  SG_GRID_STRIDE_LOOP(a, A) {
    T acc = 0;
    for (int64_t r = 0; r < n_rows; ++r) acc += rows[r * A + a];
    out[a] = acc;
  }
}

// ---- cross-entropy with label smoothing: block per row forward, thread per logit backward

template <class T>
__global__ void cross_entropy_kernel(const T* logits, const int64_t* targets, T keep, T spread, int64_t ignore_index,
                                     T* loss, T* lse, int64_t N, int64_t C) {
  __shared__ T scratch[kRowThreads];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    if (targets[r] == ignore_index) {  // padding: no loss, and the backward reads no lse for it (as the CPU)
      if (threadIdx.x == 0) loss[r] = lse[r] = T(0);
      continue;  // the row is the whole block's, so no thread waits at a barrier alone
    }
    const T* x = logits + r * C;
    T m = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      if (m < x[c]) m = x[c];  // std::max's rule
    m = block_max(m, scratch);
    if (m == -INFINITY) m = 0;  // all -inf: avoid inf - inf
    T sum = 0, total = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      sum += std::exp(x[c] - m);
      total += x[c];
    }
    sum = block_sum(sum, scratch);
    total = block_sum(total, scratch);
    if (threadIdx.x == 0) {
      const T l = m + std::log(sum);
      const int64_t y = targets[r];
      lse[r] = l;
      // the op checked the targets on the host; an unchecked bad one gives NaN, never a stray read
      loss[r] = (y >= 0 && y < C) ? math::cross_entropy_loss(l, x[y], total, keep, spread) : T(NAN);
    }
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const T* lse, const T* dloss,
                                              int64_t dloss_stride, T keep, T spread, int64_t ignore_index,
                                              T* dlogits, int64_t N, int64_t C) {
  SG_GRID_STRIDE_LOOP(i, N * C) {
    const int64_t r = i / C, c = i - r * C;
    const int64_t y = targets[r];
    dlogits[i] = y == ignore_index
                     ? T(0)
                     : math::cross_entropy_grad(dloss[r * dloss_stride], logits[i], lse[r], c == y, keep, spread);
  }
}

// ---- Adam / AdamW, the options as template arguments (no branches per element)

template <class T, bool kDecoupled, bool kCoupled, bool kAmsgrad>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, math::AdamScalars<T> c) {
  SG_GRID_STRIDE_LOOP(i, n) {
    const math::AdamElement<T> e =
        math::adam_element<kDecoupled, kCoupled, kAmsgrad>(p[i], g[i], m[i], v[i], kAmsgrad ? vmax[i] : T(0), c);
    m[i] = e.m;
    v[i] = e.v;
    if constexpr (kAmsgrad) vmax[i] = e.vmax;
    p[i] = e.p;
  }
}

template <class T, bool kDecoupled, bool kCoupled>
void launch_adam(bool amsgrad, T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const math::AdamScalars<T>& c) {
  if (amsgrad) adam_kernel<T, kDecoupled, kCoupled, true><<<blocks_for(n), kThreads>>>(p, g, m, v, vmax, n, c);
  else adam_kernel<T, kDecoupled, kCoupled, false><<<blocks_for(n), kThreads>>>(p, g, m, v, vmax, n, c);
}

}  // namespace

void gru_cell(ElemType type, const void* xp, const void* hp, const void* h, const bool* keep, void* h_next,
              void* gates, int64_t B, int64_t H) {
  if (B * H == 0) return;
  dispatch_floating(type, [&]<class T>() {
    gru_cell_kernel<T><<<blocks_for(B * H), kThreads>>>(static_cast<const T*>(xp), static_cast<const T*>(hp),
                                                        static_cast<const T*>(h), keep, static_cast<T*>(h_next),
                                                        static_cast<T*>(gates), B, H);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void gru_cell_backward(ElemType type, const void* gates, const void* h, const bool* keep, const void* dy,
                       const void* dcarry, void* dxp, void* dhp, void* dh, int64_t B, int64_t H) {
  if (B * H == 0) return;
  dispatch_floating(type, [&]<class T>() {
    gru_cell_backward_kernel<T><<<blocks_for(B * H), kThreads>>>(
        static_cast<const T*>(gates), static_cast<const T*>(h), keep, static_cast<const T*>(dy),
        static_cast<const T*>(dcarry), static_cast<T*>(dxp), static_cast<T*>(dhp), static_cast<T*>(dh), B, H);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void additive_scores(ElemType type, const void* qp, const void* kp, const void* w, void* scores, int64_t B, int64_t Q,
                     int64_t K, int64_t A) {
  if (B * Q * K == 0) return;
  // up to 8 warps per query, fewer when there are fewer keys
  const unsigned threads = static_cast<unsigned>(kWarp * (K < 8 ? K : 8));
  dispatch_floating(type, [&]<class T>() {
    additive_scores_kernel<T><<<row_blocks(B * Q), threads>>>(static_cast<const T*>(qp), static_cast<const T*>(kp),
                                                                 static_cast<const T*>(w), static_cast<T*>(scores), B,
                                                                 Q, K, A);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void additive_scores_backward(ElemType type, const void* qp, const void* kp, const void* w, const void* dscores,
                              void* dqp, void* dkp, void* dw, void* dw_rows, int64_t B, int64_t Q, int64_t K,
                              int64_t A) {
  if (A == 0) return;
  const unsigned threads = feature_threads(A);
  dispatch_floating(type, [&]<class T>() {
    const T* q = static_cast<const T*>(qp);
    const T* k = static_cast<const T*>(kp);
    const T* wv = static_cast<const T*>(w);
    const T* ds = static_cast<const T*>(dscores);
    T* rows = static_cast<T*>(dw_rows);
    if (B * Q > 0) {
      additive_dq_kernel<T><<<row_blocks(B * Q), threads>>>(q, k, wv, ds, static_cast<T*>(dqp), rows, B, Q, K, A);
      SG_CUDA_CHECK_LAUNCH();
    }
    if (B * K > 0) {
      additive_dk_kernel<T><<<row_blocks(B * K), threads>>>(q, k, wv, ds, static_cast<T*>(dkp), B, Q, K, A);
      SG_CUDA_CHECK_LAUNCH();
    }
    sum_rows_kernel<T><<<blocks_for(A), kThreads>>>(rows, static_cast<T*>(dw), B * Q, A);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void cross_entropy_rows(ElemType type, const void* logits, const int64_t* targets, double eps, int64_t ignore_index,
                        void* loss, void* lse, int64_t N, int64_t C) {
  if (N == 0) return;
  dispatch_floating(type, [&]<class T>() {
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    cross_entropy_kernel<T><<<row_blocks(N), kRowThreads>>>(static_cast<const T*>(logits), targets, keep, spread,
                                                               ignore_index, static_cast<T*>(loss),
                                                               static_cast<T*>(lse), N, C);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void cross_entropy_rows_backward(ElemType type, const void* logits, const int64_t* targets, const void* lse,
                                 const void* dloss, int64_t dloss_stride, double eps, int64_t ignore_index,
                                 void* dlogits, int64_t N, int64_t C) {
  if (N * C == 0) return;
  dispatch_floating(type, [&]<class T>() {
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    cross_entropy_backward_kernel<T><<<blocks_for(N * C), kThreads>>>(
        static_cast<const T*>(logits), targets, static_cast<const T*>(lse), static_cast<const T*>(dloss), dloss_stride,
        keep, spread, ignore_index, static_cast<T*>(dlogits), N, C);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void adam_update(ElemType type, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
                 int64_t n, const AdamParams& s) {
  if (n == 0) return;
  const bool decoupled = s.decoupled_weight_decay, coupled = !decoupled && s.weight_decay != 0.0;
  dispatch_floating(type, [&]<class T>() {
    const math::AdamScalars<T> c = math::adam_scalars<T>(s);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* m = static_cast<T*>(exp_avg);
    T* v = static_cast<T*>(exp_avg_sq);
    T* vmax = static_cast<T*>(max_exp_avg_sq);
    if (decoupled) launch_adam<T, true, false>(s.amsgrad, p, g, m, v, vmax, n, c);
    else if (coupled) launch_adam<T, false, true>(s.amsgrad, p, g, m, v, vmax, n, c);
    else launch_adam<T, false, false>(s.amsgrad, p, g, m, v, vmax, n, c);
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
