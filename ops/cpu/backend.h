// The CPU backend's class, shared by its kernel files (one per family, as ops/cuda/*.cu): each
// file defines its family's members. Compiled once per instruction set (ops/meson.build):
// SG_CPU_ISA names the namespace, and ops/cpu/dispatch.cpp picks the build the CPU can run.
#pragma once
#include "core/backend.h"
#include "ops/cpu/kernels.h"

#ifndef SG_CPU_ISA
#define SG_CPU_ISA base
#endif

namespace seqgrad::cpu::SG_CPU_ISA {

constexpr int64_t kGrain = 32768;  // elements per thread below which loops stay serial

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  // elementwise.cpp
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  // The arithmetic is core/backend_math.h's (shared with CUDA); the switch on the op is hoisted out
  // of the loop so each op's loop vectorises.
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  // reduce.cpp
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  // gemm.cpp
  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta,
            GemmPrecision precision) override;

  // index.cpp
  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  // rows.cpp
  void softmax_rows(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) override;
  void topk(const Tensor& x, int64_t k, bool largest, const Tensor& values, const Tensor& indices) override;

  // fused.cpp, adam.cpp and layer_norm.cpp: every fused kernel.
  bool supports(FusedOp) const override { return true; }
  void gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h, const Tensor& keep, const Tensor& h_next,
                const Tensor& gates) override;
  void gru_cell_backward(const Tensor& gates, const Tensor& h, const Tensor& keep, const Tensor& dy,
                         const Tensor& dcarry, const Tensor& dxp, const Tensor& dhp, const Tensor& dh) override;
  void additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& scores) override;
  void additive_scores_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& dscores,
                                const Tensor& dqp, const Tensor& dkp, const Tensor& dw) override;
  void additive_attention_chunk_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& lse,
                                         const Tensor& dprob, const Tensor& delta, const Tensor& keep,
                                         const Tensor& probs, const Tensor& dqp, const Tensor& dkp,
                                         const Tensor& dw) override;
  void cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index,
                          const Tensor& loss, const Tensor& lse) override;
  void cross_entropy_rows_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& dloss, double eps, int64_t ignore_index,
                                   const Tensor& dlogits) override;
  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const AdamParams& p) override;
  // layer_norm.cpp
  void layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_rows_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                const Tensor& dy, const Tensor& dx, const Tensor& dweight,
                                const Tensor& dbias) override;

  // int8.cpp: the kernels ops/cpu/dispatch.cpp chose (ops/cpu/int8.h)
  void int8_gemm(const Tensor& a, const Tensor& w, const Tensor& c) override;
  Tensor int8_pack(const Tensor& w) override;
  void int8_unpack(const Tensor& packed, const Tensor& w) override;
  Int8GemmInfo int8_gemm_info() const override;

  // random.cpp: random values go to element i in row-major order; a strided output is filled
  // through a dense one.
  void random_uniform(const Tensor& out_in, double a, double b, uint64_t seed, uint64_t offset) override;
  void random_normal(const Tensor& out_in, double mean, double stddev, uint64_t seed, uint64_t offset) override;
  void dropout(const Tensor& x, const Tensor& out, double keep, double scale, uint64_t seed,
               uint64_t offset) override;

 private:
  void compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
};

// A contiguous copy for kernels that need one (no autograd: kernels sit below it).
Tensor dense(const Tensor& t);

}  // namespace seqgrad::cpu::SG_CPU_ISA
