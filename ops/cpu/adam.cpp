// The CPU backend's Adam/AdamW step (Backend::adam_update; the formulas: optim/optimizer.h): one
// branch-free loop per parameter, threaded with parallel_for, whose element math is
// core/fused_math.h's adam_element, the CUDA kernel's too. ops/meson.build compiles this file
// without FMA contraction in both instruction-set builds, so it rounds as the baseline build, the
// composed twin's separate tensor ops and CUDA (--fmad=false) do.
#include "core/fused_math.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {
namespace {

// The options become template arguments so the loop has no branches and vectorises.
template <class T, bool kDecoupled, bool kCoupled, bool kAmsgrad>
void adam_loop(T* p_all, const T* g_all, T* m_all, T* v_all, T* vmax_all, int64_t n, const math::AdamScalars<T>& c) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    T* p = p_all;  // locals, not loads through the closure, so the loop vectorises
    const T* g = g_all;
    T* m = m_all;
    T* v = v_all;
    T* vmax = vmax_all;
    const math::AdamScalars<T> k = c;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const math::AdamElement<T> e =
          math::adam_element<kDecoupled, kCoupled, kAmsgrad>(p[i], g[i], m[i], v[i], kAmsgrad ? vmax[i] : T(0), k);
      m[i] = e.m;
      v[i] = e.v;
      if constexpr (kAmsgrad) vmax[i] = e.vmax;
      p[i] = e.p;
    }
  });
}

template <class T, bool kDecoupled, bool kCoupled>
void adam_loop(bool amsgrad, T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const math::AdamScalars<T>& c) {
  if (amsgrad) adam_loop<T, kDecoupled, kCoupled, true>(p, g, m, v, vmax, n, c);
  else adam_loop<T, kDecoupled, kCoupled, false>(p, g, m, v, vmax, n, c);
}

}  // namespace

void CpuBackend::adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamParams& s) {
  const int64_t n = param.numel();
  const bool decoupled = s.decoupled_weight_decay, coupled = !decoupled && s.weight_decay != 0.0;
  dispatch_floating(param.dtype(), "adam_update", [&]<class T>() {
    const math::AdamScalars<T> c = math::adam_scalars<T>(s);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    T* vmax = s.amsgrad ? max_exp_avg_sq.data<T>() : nullptr;
    if (decoupled) adam_loop<T, true, false>(s.amsgrad, p, g, m, v, vmax, n, c);
    else if (coupled) adam_loop<T, false, true>(s.amsgrad, p, g, m, v, vmax, n, c);
    else adam_loop<T, false, false>(s.amsgrad, p, g, m, v, vmax, n, c);
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
