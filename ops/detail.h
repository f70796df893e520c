// Helpers shared by the op files: argument checks that name the op, and output allocation.
#pragma once
#include <functional>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace seqgrad::detail {

inline Tensor empty_like_shape(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, {.dtype = like.dtype(), .device = like.device()});
}

// y = op(x) in a new tensor of x's shape, dtype and device (ops/elementwise.cpp).
Tensor unary_kernel(UnaryOp op, const Tensor& x, UnaryParams p = {});

inline void check_defined(const char* op, const Tensor& t, const char* name = "input") {
  SG_CHECK(t.defined(), "{}: {} is an undefined tensor ({})", op, name, t.why_undefined());
}

inline void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  SG_CHECK_DTYPE(is_floating(t.dtype()), "{}: expected a floating tensor (float32 or float64), got {} {}",
                 op, t.dtype(), t.shape());
}

inline void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  SG_CHECK_DEVICE(a.device() == b.device(), "{}: operands on different devices: {} on {}, {} on {}", op,
                  a.shape(), a.device(), b.shape(), b.device());
  SG_CHECK_DTYPE(a.dtype() == b.dtype(),
                 "{}: dtype mismatch: {} {} and {} {}; convert one with .to(DType::...)", op, a.dtype(),
                 a.shape(), b.dtype(), b.shape());
}

// An index, mask or condition must live on the device of the tensor it addresses.
inline void check_device_of(const char* op, const Tensor& input, const Tensor& aux, const char* aux_name) {
  SG_CHECK_DEVICE(aux.device() == input.device(), "{}: {} {} is on {}, but the input {} is on {}", op, aux_name,
                  aux.shape(), aux.device(), input.shape(), input.device());
}

inline void check_index_tensor(const char* op, const Tensor& index) {
  check_defined(op, index, "index");
  SG_CHECK_DTYPE(index.dtype() == DType::i64, "{}: indices must be int64, got {} {}", op, index.dtype(),
                 index.shape());
}

// In-place ops: a leaf that requires grad may only be edited under NoGradGuard (as optimizers
// do); views of tensors in a graph are not rebased, so edits to them are refused.
void check_inplace(const char* op, const Tensor& self, bool recording);

// Replaces self's contents and history with those of `result` (an in-place op recorded as its
// out-of-place twin); bumps the version counter.
void commit_inplace(const Tensor& self, const Tensor& result);

// ---- recording a fused op (ops/fused.cpp)
// A fused op's backward runs fused kernels, which are not themselves differentiable. When the
// backward is recorded (create_graph, for higher-order gradients) the gradients come instead from
// the op's composed twin (the same math written with differentiable ops), re-run on the saved
// inputs. `inputs` may hold undefined tensors (an absent bias); both functions see them as given.
using ComposedFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;
using FusedBackwardFn = std::function<void(const std::vector<Tensor>& inputs, const Tensor& dy, Grads& g)>;
Tensor record_fused(const char* op, Tensor y, std::span<const Tensor> inputs, ComposedFn composed,
                    FusedBackwardFn backward, SaveOutput save_output = SaveOutput::no);

// ---- additive attention's energies (ops/additive_scores.cpp), shared with the chunked attention
// The gradients of s = additive_scores(qp, kp, w_v) (qp (B, Q, A), kp (B, K, A), w_v (1, A)) for
// a given ds (B, Q, K): one pass of the backend's fused backward kernel (tanh recomputed), or the
// composed twin's autograd on a backend without it.
struct AdditiveScoreGrads {
  Tensor dqp, dkp, dw_v;  // (B, Q, A), (B, K, A), (1, A)
};
AdditiveScoreGrads additive_scores_grads(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& ds);

}  // namespace seqgrad::detail
