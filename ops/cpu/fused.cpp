// CPU fused kernels: GRU step, additive attention energies, label-smoothed cross-entropy (as
// ops/cuda/fused.cu); the ops using them are in ops/gru.cpp, ops/additive_scores.cpp, ops/loss.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/loop.h"
#include "ops/cpu/vec_math.h"

namespace seqgrad::cpu::SG_CPU_ISA {

// ---- fused GRU step (the math and its derivation: nn/rnn.h; the op: gru_layer in ops/gru.cpp)

void CpuBackend::gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h, const Tensor& keep,
                          const Tensor& h_next, const Tensor& gates) {
  const int64_t B = h.size(0), H = h.size(1);
  const bool* ok = keep.defined() ? keep.data<bool>() : nullptr;
  dispatch_floating(h.dtype(), "gru_cell", [&]<class T>() {
    const T* px = xp.data<T>();
    const T* pp = hp.data<T>();
    const T* ph = h.data<T>();
    T* pn = h_next.data<T>();
    T* pg = gates.data<T>();
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(8 * H, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* x = px + b * 3 * H;
        const T* p = pp + b * 3 * H;
        const T* hb = ph + b * H;
        T* out = pn + b * H;
        T* g = pg + b * 4 * H;
        if (ok && !ok[b]) {  // padding: the state passes through
          std::copy(hb, hb + H, out);
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          const T r = vec::sigmoid(x[j] + p[j]);
          const T z = vec::sigmoid(x[H + j] + p[H + j]);
          const T hn = p[2 * H + j];
          const T n = vec::tanh(x[2 * H + j] + r * hn);
          out[j] = n + z * (hb[j] - n);
          g[j] = r, g[H + j] = z, g[2 * H + j] = n, g[3 * H + j] = hn;
        }
      }
    });
  });
}

void CpuBackend::gru_cell_backward(const Tensor& gates, const Tensor& h, const Tensor& keep, const Tensor& dy,
                                   const Tensor& dcarry, const Tensor& dxp, const Tensor& dhp, const Tensor& dh) {
  const int64_t B = h.size(0), H = h.size(1);
  const bool* ok = keep.defined() ? keep.data<bool>() : nullptr;
  dispatch_floating(h.dtype(), "gru_cell_backward", [&]<class T>() {
    const T* pg = gates.data<T>();
    const T* ph = h.data<T>();
    const T* pdy = dy.defined() ? dy.data<T>() : nullptr;
    const T* pc = dcarry.data<T>();
    T* pdx = dxp.data<T>();
    T* pdp = dhp.data<T>();
    T* pdh = dh.data<T>();
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(12 * H, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* g = pg + b * 4 * H;
        const T* hb = ph + b * H;
        const T* yb = pdy ? pdy + b * H : nullptr;
        const T* cb = pc + b * H;
        T* dx = pdx + b * 3 * H;
        T* dp = pdp + b * 3 * H;
        T* d = pdh + b * H;
        if (ok && !ok[b]) {  // padding: h_next = h, so h gets all of h_next's gradient
          for (int64_t j = 0; j < H; ++j) d[j] = (yb ? yb[j] : T(0)) + cb[j];
          std::fill(dx, dx + 3 * H, T(0));
          std::fill(dp, dp + 3 * H, T(0));
          continue;
        }
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          const T gj = (yb ? yb[j] : T(0)) + cb[j];  // dh'
          const T r = g[j], z = g[H + j], n = g[2 * H + j], hn = g[3 * H + j];
          const T dn = gj * (T(1) - z);
          const T dz = gj * (hb[j] - n);
          const T dan = dn * (T(1) - n * n);
          const T daz = dz * z * (T(1) - z);
          const T dar = dan * hn * r * (T(1) - r);
          dx[j] = dar, dx[H + j] = daz, dx[2 * H + j] = dan;
          dp[j] = dar, dp[H + j] = daz, dp[2 * H + j] = dan * r;
          d[j] = gj * z;
        }
      }
    });
  });
}

// ---- fused additive attention energies (the op: additive_scores in ops/additive_scores.cpp)

// dw (A,) = Σ_b rows[b]: the per-batch-row partial sums of the additive energies' backward
// kernels, added in a fixed order (no races between threads, the same bits every run).
template <class T>
void sum_batch_rows(const std::vector<T>& rows, int64_t B, int64_t A, T* dw) {
  for (int64_t a = 0; a < A; ++a) {
    T acc = 0;
    for (int64_t b = 0; b < B; ++b) acc += rows[b * A + a];
    dw[a] = acc;
  }
}

void CpuBackend::additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& scores) {
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  dispatch_floating(qp.dtype(), "additive_scores", [&]<class T>() {
    const T* pq = qp.data<T>();
    const T* pk = kp.data<T>();
    const T* pw = w.data<T>();
    T* ps = scores.data<T>();
    parallel_for(B * Q, std::max<int64_t>(1, kGrain / std::max<int64_t>(K * A, 1)), [&](int64_t r0, int64_t r1) {
      const T* wv = pw;  // a local copy: the vectoriser cannot hoist loads through the closure
      for (int64_t r = r0; r < r1; ++r) {  // r = b·Q + q
        const int64_t b = r / Q;
        const T* q = pq + r * A;
        for (int64_t k = 0; k < K; ++k) {
          const T* kr = pk + (b * K + k) * A;
          T acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t a = 0; a < A; ++a) acc += wv[a] * vec::tanh(q[a] + kr[a]);
          ps[r * K + k] = acc;
        }
      }
    });
  });
}

void CpuBackend::additive_scores_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& dscores,
                                          const Tensor& dqp, const Tensor& dkp, const Tensor& dw) {
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  dispatch_floating(qp.dtype(), "additive_scores_backward", [&]<class T>() {
    const T* pq = qp.data<T>();
    const T* pk = kp.data<T>();
    const T* pw = w.data<T>();
    const T* pds = dscores.data<T>();
    T* pdq = dqp.data<T>();
    T* pdk = dkp.data<T>();
    std::vector<T> dw_rows(B * A, T(0));  // per batch row, summed below: no races, a fixed order
    std::fill(pdq, pdq + B * Q * A, T(0));
    std::fill(pdk, pdk + B * K * A, T(0));
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(Q * K * A, 1)), [&](int64_t b0, int64_t b1) {
      const T* wv = pw;  // a local copy: the vectoriser cannot hoist loads through the closure
      for (int64_t b = b0; b < b1; ++b) {
        T* dwb = dw_rows.data() + b * A;
        for (int64_t q = 0; q < Q; ++q) {
          const T* qr = pq + (b * Q + q) * A;
          T* dqr = pdq + (b * Q + q) * A;
          for (int64_t k = 0; k < K; ++k) {
            const T d = pds[(b * Q + q) * K + k];
            if (d == T(0)) continue;  // masked keys: their weights, and so ds, are exactly 0
            const T* kr = pk + (b * K + k) * A;
            T* dkr = pdk + (b * K + k) * A;
#pragma omp simd
            for (int64_t a = 0; a < A; ++a) {
              const T f = vec::tanh(qr[a] + kr[a]);  // recomputed instead of saved (B·Q·K·A values)
              const T dz = d * wv[a] * (T(1) - f * f);
              dwb[a] += d * f;
              dqr[a] += dz;
              dkr[a] += dz;
            }
          }
        }
      }
    });
    sum_batch_rows(dw_rows, B, A, dw.data<T>());
  });
}

void CpuBackend::additive_attention_chunk_backward(const Tensor& qp, const Tensor& kp, const Tensor& w,
                                                   const Tensor& lse, const Tensor& dprob, const Tensor& delta,
                                                   const Tensor& keep, const Tensor& probs, const Tensor& dqp,
                                                   const Tensor& dkp, const Tensor& dw) {
  const int64_t B = qp.size(0), Q = qp.size(1), K = kp.size(1), A = qp.size(2);
  const bool* kept = keep.defined() ? keep.data<bool>() : nullptr;
  dispatch_floating(qp.dtype(), "additive_attention_chunk_backward", [&]<class T>() {
    const T *pq = qp.data<T>(), *pk = kp.data<T>(), *pw = w.data<T>();
    const T *plse = lse.data<T>(), *pdp = dprob.data<T>(), *pdelta = delta.data<T>();
    T *pp = probs.data<T>(), *pdq = dqp.data<T>(), *pdk = dkp.data<T>();
    std::vector<T> dw_rows(B * A, T(0));  // per batch row, summed below: no races, a fixed order
    std::fill(pdq, pdq + B * Q * A, T(0));
    std::fill(pdk, pdk + B * K * A, T(0));
    parallel_for(B, std::max<int64_t>(1, kGrain / std::max<int64_t>(Q * K * A, 1)), [&](int64_t b0, int64_t b1) {
      const T* wv = pw;  // a local copy: the vectoriser cannot hoist loads through the closure
      std::vector<T> f(A);  // this (b, i, j)'s tanh features, computed once
      T* fv = f.data();
      for (int64_t b = b0; b < b1; ++b) {
        T* dwb = dw_rows.data() + b * A;
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t row = b * Q + q;
          const T* qr = pq + row * A;
          T* dqr = pdq + row * A;
          for (int64_t k = 0; k < K; ++k) {
            const int64_t at = row * K + k;
            if (kept && !kept[at]) {  // a key not kept: weight 0, no gradient
              pp[at] = T(0);
              continue;
            }
            const T* kr = pk + (b * K + k) * A;
            T s = 0;
#pragma omp simd reduction(+ : s)
            for (int64_t a = 0; a < A; ++a) {
              fv[a] = vec::tanh(qr[a] + kr[a]);
              s += wv[a] * fv[a];
            }
            const T p = std::exp(s - plse[row]);
            pp[at] = p;
            const T ds = p * (pdp[at] - pdelta[row]);
            if (ds == T(0)) continue;
            T* dkr = pdk + (b * K + k) * A;
#pragma omp simd
            for (int64_t a = 0; a < A; ++a) {
              const T dz = ds * wv[a] * (T(1) - fv[a] * fv[a]);
              dwb[a] += ds * fv[a];
              dqr[a] += dz;
              dkr[a] += dz;
            }
          }
        }
      }
    });
    sum_batch_rows(dw_rows, B, A, dw.data<T>());
  });
}

// ---- fused cross-entropy with label smoothing (the op: cross_entropy_rows in ops/loss.cpp)
// lse = m + log Σ exp(x - m) with m = max x (no overflow);
// loss = (1 - eps)(lse - x_y) + eps/C Σ_c (lse - x_c) = lse - (1 - eps) x_y - eps/C Σ_c x_c.

void CpuBackend::cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index,
                                    const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* py = targets.data<int64_t>();
  dispatch_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    const T* px = logits.data<T>();
    T* pl = loss.data<T>();
    T* pe = lse.data<T>();
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (py[r] == ignore_index) {  // padding: no loss, and the backward reads no lse for it
          pl[r] = pe[r] = 0;
          continue;
        }
        const T* x = px + r * C;
        T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
        for (int64_t c = 0; c < C; ++c) m = x[c] > m ? x[c] : m;
        if (m == -std::numeric_limits<T>::infinity()) m = 0;  // all -inf: avoid inf - inf
        T sum = 0, total = 0;
#pragma omp simd reduction(+ : sum, total)
        for (int64_t c = 0; c < C; ++c) {
          sum += vec::exp(x[c] - m);
          total += x[c];
        }
        const T l = m + std::log(sum);
        pe[r] = l;
        pl[r] = l - keep * x[py[r]] - spread * total;
      }
    });
  });
}

void CpuBackend::cross_entropy_rows_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                             const Tensor& dloss, double eps, int64_t ignore_index,
                                             const Tensor& dlogits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* py = targets.data<int64_t>();
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T* px = logits.data<T>();
    const T* pe = lse.data<T>();
    const T* pg = dloss.data<T>();
    const int64_t g_stride = dloss.numel() == 1 ? 0 : 1;  // a broadcast scalar (mean / sum) or per row
    T* pd = dlogits.data<T>();
    const T keep = static_cast<T>(1.0 - eps), spread = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* x = px + r * C;
        T* d = pd + r * C;
        if (py[r] == ignore_index) {
          std::fill(d, d + C, T(0));
          continue;
        }
        const T g = pg[r * g_stride], l = pe[r];
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) d[c] = g * (vec::exp(x[c] - l) - spread);
        d[py[r]] -= g * keep;
      }
    });
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
