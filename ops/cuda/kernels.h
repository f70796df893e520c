// The launch interface of the CUDA kernels (*.cu, compiled by nvcc) for the backend in
// ops/cuda/backend.cpp (compiled by the C++ compiler). Plain pointers and small geometry structs
// only: nvcc never parses the tensor headers. All launches go to the current device's default
// stream, so they run in the order issued; none of them synchronises with the host.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/backend_ops.h"

namespace seqgrad::cuda {

constexpr int kDims = 8;  // core/shape.h's kMaxDims (checked in backend.cpp)

enum class ElemType : uint8_t { f32, f64, i64, b8 };  // core/dtype.h's DType (checked in backend.cpp)

// N operands over one iteration shape (dimensions coalesced, broadcast ones with stride 0), in
// element strides; element i of the row-major iteration is at sum_d index_d * stride[k][d].
template <int N>
struct Strided {
  int ndim = 0;
  int64_t shape[kDims] = {};
  int64_t stride[N][kDims] = {};
};

// ---- element-wise (elementwise.cu); n is the iteration's element count
void copy(ElemType dst_type, void* dst, ElemType src_type, const void* src, const Strided<2>& g, int64_t n);
void fill(ElemType type, void* dst, double value, const Strided<1>& g, int64_t n);
void fill_pattern(void* dst, const void* pattern, size_t element_size, size_t count);  // dense
void unary(UnaryOp op, ElemType type, void* out, const void* x, double a, double b, const Strided<2>& g,
           int64_t n);
// out's type: the inputs' for arithmetic ops, bool for comparisons and logical ops
void binary(BinaryOp op, ElemType in_type, void* out, const void* a, const void* b, const Strided<3>& g,
            int64_t n);
void where(ElemType type, void* out, const bool* cond, const void* a, const void* b, const Strided<4>& g,
           int64_t n);

// ---- reductions (reduce.cu): output o reduces the block at o's kept coordinates
struct ReduceGeometry {
  int kept_ndim = 0, reduced_ndim = 0;
  int64_t kept_shape[kDims] = {}, kept_stride[kDims] = {}, out_stride[kDims] = {};
  int64_t reduced_shape[kDims] = {}, reduced_stride[kDims] = {};
  int64_t n_out = 0, n_reduced = 0;
};
// out has x's type (sum, max, min) or int64 (argmax, argmin)
void reduce(ReduceOp op, ElemType type, const void* x, void* out, const ReduceGeometry& g);

// ---- rows of a contiguous (rows, cols) matrix (rows.cu)
void softmax_rows(ElemType type, const void* x, void* out, int64_t rows, int64_t cols, bool log);
void softmax_rows_backward(ElemType type, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols,
                           bool log);
void topk(ElemType type, const void* x, int64_t rows, int64_t cols, int64_t k, bool largest, void* values,
          int64_t* indices);

// ---- indexing (index.cu); x and src dense, out dense, index int64
// out[o, j, i] = x[o, index[j], i] over (outer, n_index, inner)
void index_select(size_t element_size, const void* x, const int64_t* index, void* out, int64_t outer, int64_t n_in,
                  int64_t n_index, int64_t inner);
// out[o, index[j], i] += src[o, j, i] (atomic: repeated indices accumulate)
void index_add(ElemType type, void* out, const int64_t* index, const void* src, int64_t outer, int64_t n_out,
               int64_t n_index, int64_t inner);
// gather / scatter_add along `dim`: element e of the (dense) index, at multi-index (i_0, ..., i_n),
// addresses the data tensor at sum_{d != dim} i_d * stride[d] + index[e] * stride[dim].
struct IndexGeometry {
  int ndim = 0, dim = 0;
  int64_t index_shape[kDims] = {};
  int64_t data_stride[kDims] = {};
};
void gather(size_t element_size, const void* x, const int64_t* index, void* out, const IndexGeometry& g, int64_t n);
void scatter_add(ElemType type, void* out, const int64_t* index, const void* src, const IndexGeometry& g,
                 int64_t n);

// ---- random (random.cu): element i of dense out from core/philox.h's streams
void random_uniform(ElemType type, void* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset);
void random_normal(ElemType type, void* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset);
// out = x · (u < keep ? scale : 0) with u the uniform stream above (dense x and out), or the
// factor itself when x is null
void dropout(ElemType type, const void* x, void* out, int64_t n, double keep, double scale, uint64_t seed,
             uint64_t offset);

// ---- mixed precision (elementwise.cu): a strided float32 tensor as dense, row-major bfloat16 or
// float16 patterns (core/half.h's rounding), the operands of a reduced-precision GEMM
void round_to_16bit(GemmPrecision precision, const float* x, const Strided<2>& g, uint16_t* out, int64_t n);

// ---- fused kernels (fused.cu; contracts in core/backend.h, arithmetic in core/fused_math.h), on
// dense row-major buffers of floating `type`.
// GRU step over (B, H): xp, hp (B, 3H), h (B, H), keep (B,) or null -> h_next (B, H), gates (B, 4H)
void gru_cell(ElemType type, const void* xp, const void* hp, const void* h, const bool* keep, void* h_next,
              void* gates, int64_t B, int64_t H);
// dy may be null (zero); -> dxp, dhp (B, 3H), dh (B, H)
void gru_cell_backward(ElemType type, const void* gates, const void* h, const bool* keep, const void* dy,
                       const void* dcarry, void* dxp, void* dhp, void* dh, int64_t B, int64_t H);
// qp (B, Q, A), kp (B, K, A), w (A,) -> scores (B, Q, K)
void additive_scores(ElemType type, const void* qp, const void* kp, const void* w, void* scores, int64_t B, int64_t Q,
                     int64_t K, int64_t A);
// -> dqp, dkp, dw (overwritten); dw_rows: scratch for B·Q·A values (dw's per-query partial sums,
// added up in a second pass: no atomics, a fixed order)
void additive_scores_backward(ElemType type, const void* qp, const void* kp, const void* w, const void* dscores,
                              void* dqp, void* dkp, void* dw, void* dw_rows, int64_t B, int64_t Q, int64_t K,
                              int64_t A);
// logits (N, C), targets (N,) -> loss, lse (N,)
void cross_entropy_rows(ElemType type, const void* logits, const int64_t* targets, double eps, int64_t ignore_index,
                        void* loss, void* lse, int64_t N, int64_t C);
// dloss[r * dloss_stride] (stride 0: one value for every row) -> dlogits (N, C)
void cross_entropy_rows_backward(ElemType type, const void* logits, const int64_t* targets, const void* lse,
                                 const void* dloss, int64_t dloss_stride, double eps, int64_t ignore_index,
                                 void* dlogits, int64_t N, int64_t C);
// ---- layer normalisation (layer_norm.cu) over dense (N, D) rows; weight and bias (D,) both or
// both null (1 and 0) -> y (N, D), mean and rstd (N,)
void layer_norm_rows(ElemType type, const void* x, const void* weight, const void* bias, double eps, void* y,
                     void* mean, void* rstd, int64_t N, int64_t D);
// -> dx (N, D); dweight and dbias (D,) each overwritten, or skipped when null
void layer_norm_rows_backward(ElemType type, const void* x, const void* weight, const void* mean, const void* rstd,
                              const void* dy, void* dx, void* dweight, void* dbias, int64_t N, int64_t D);
// n elements of param, grad, exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq, else null
void adam_update(ElemType type, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
                 int64_t n, const AdamParams& p);

}  // namespace seqgrad::cuda
