// The CUDA backend: the primitives of core/backend.h on the device of their tensors. This file
// turns tensors into pointers and geometry (strides, broadcasting, dimension coalescing, as
// ops/cpu does) and checks dtypes; the kernels are in *.cu, GEMM is cuBLAS. Everything runs on the
// device's default stream, in issue order, without synchronising with the host; only copies to the
// CPU (Tensor::cpu(), item()) wait for the device.
#include <array>
#include <climits>
#include <mutex>
#include <vector>

#include <cublas_v2.h>
#include <fmt/format.h>

#include "core/backend_math.h"
#include "core/broadcast.h"
#include "core/device_memory.h"
#include "ops/cuda/check.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/device_guard.h"
#include "ops/cuda/kernels.h"

namespace seqgrad::cuda {

[[noreturn]] void throw_error(const char* library, const char* call, const char* error, const char* error_name,
                              const char* file, int line) {
  throw DeviceError(fmt::format("{}: {} failed: {} ({}) at {}:{}", library, call, error, error_name, file, line));
}

namespace {

static_assert(kDims == kMaxDims, "ops/cuda/kernels.h's kDims must equal core/shape.h's kMaxDims");
static_assert(static_cast<int>(ElemType::f32) == static_cast<int>(DType::f32) &&
              static_cast<int>(ElemType::f64) == static_cast<int>(DType::f64) &&
              static_cast<int>(ElemType::i64) == static_cast<int>(DType::i64) &&
              static_cast<int>(ElemType::b8) == static_cast<int>(DType::b8));

// The integer types of int8 inference (int8, uint8, int32) have no CUDA kernels.
ElemType elem(DType t) {
  if (static_cast<int>(t) > static_cast<int>(DType::b8))
    throw DTypeError(
        fmt::format("{} tensors are not implemented on cuda (int8 inference runs on the CPU)", dtype_name(t)));
  return static_cast<ElemType>(t);
}

// Operand strides over `shape` (core/broadcast.h: 0 where broadcast, dimensions coalesced).
template <int N>
Strided<N> strided(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  return broadcast_geometry<Strided<N>, N>(shape, ts);
}

// STYLE's "op X is not implemented on cuda": a primitive/dtype pair this backend does not provide
// (the CPU backend refuses the same pairs). There is no silent fallback to the CPU.
[[noreturn]] void not_supported(const char* what, DType dtype) {
  throw DTypeError(fmt::format("op {} is not implemented on cuda for {}", what, dtype));
}

// A dense copy on the same device for kernels that need one (no autograd: kernels sit below it).
Tensor dense(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  copy(elem(out.dtype()), out.raw_data(), elem(t.dtype()), t.raw_data(), strided<2>(t.shape(), {&out, &t}), t.numel());
  return out;
}

// Scratch device memory from the caching allocator (mixed-precision GEMM operands, partial sums);
// `op` names the request in an out-of-memory error.
class Scratch {
 public:
  Scratch(size_t bytes, Device device, const char* op = "gemm") : bytes_(bytes), device_(device) {
    memory_ = &device_memory_for(device, op);
    ptr_ = bytes > 0 ? memory_->allocate(bytes, device) : nullptr;
  }
  ~Scratch() {
    if (ptr_) memory_->deallocate(ptr_, bytes_, device_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  DeviceMemory* memory_;
  void* ptr_;
  size_t bytes_;
  Device device_;
};

// One cuBLAS handle per device, created on first use; all of them on the default stream.
cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard lock(mutex);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(device + 1, nullptr);
  if (!handles[device]) SG_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

// How cuBLAS reads a (rows, cols) row-major-indexed matrix with these strides, if it can.
struct MatrixArg {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
  bool usable = false;
};

// Column-major cuBLAS sees a row-major matrix as its transpose: a row-major layout (column stride
// 1) is OP_N of the transpose, a column-major one (row stride 1) OP_T (see gemm below).
MatrixArg as_blas(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (row_stride >= std::max<int64_t>(cols, 1) || rows == 1))
    return {CUBLAS_OP_N, std::max<int64_t>(rows == 1 ? cols : row_stride, 1), true};
  if (row_stride == 1 && (col_stride >= std::max<int64_t>(rows, 1) || cols == 1))
    return {CUBLAS_OP_T, std::max<int64_t>(cols == 1 ? rows : col_stride, 1), true};
  return {};
}

// A (batch, rows, cols) GEMM operand whose batch stride is 0 (broadcast) is converted once.
int64_t operand_copies(const Tensor& t, int64_t batch) { return t.shape()[0] == 1 || t.strides()[0] == 0 ? 1 : batch; }

// The first `copies` matrices of a float32 (batch, rows, cols) operand as dense 16-bit patterns.
void round_operand(GemmPrecision precision, const Tensor& t, int64_t copies, const Scratch& out) {
  int64_t rows = t.shape()[1], cols = t.shape()[2];
  Strided<2> g;  // operand 0: the dense output; operand 1: the strided input
  g.ndim = 3;
  int64_t shape[3] = {copies, rows, cols}, dense_strides[3] = {rows * cols, cols, 1};
  for (int d = 0; d < 3; ++d) {
    g.shape[d] = shape[d];
    g.stride[0][d] = dense_strides[d];
    g.stride[1][d] = t.strides()[d];
  }
  round_to_16bit(precision, static_cast<const float*>(t.raw_data()), g, static_cast<uint16_t*>(out.get()),
                 copies * rows * cols);
}

int as_int(int64_t v, const char* what) {
  SG_CHECK_SHAPE(v <= INT_MAX, "matmul: {} = {} exceeds cuBLAS's int range", what, v);
  return static_cast<int>(v);
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void copy(const Tensor& src, const Tensor& dst) override {
    DeviceGuard guard(dst.device().index);
    if (src.numel() == 0) return;
    if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
      SG_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.numel() * element_size(src.dtype()),
                                    cudaMemcpyDeviceToDevice, nullptr));
      return;
    }
    cuda::copy(elem(dst.dtype()), dst.raw_data(), elem(src.dtype()), src.raw_data(),
               strided<2>(dst.shape(), {&dst, &src}), dst.numel());
  }

  void fill(const Tensor& dst, double value) override {
    DeviceGuard guard(dst.device().index);
    cuda::fill(elem(dst.dtype()), dst.raw_data(), value, strided<1>(dst.shape(), {&dst}), dst.numel());
  }

  void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams p) override {
    DeviceGuard guard(out.device().index);
    if (op == UnaryOp::logical_not) {
      if (x.dtype() != DType::b8) not_supported("logical_not", x.dtype());
    } else if (x.dtype() == DType::b8 || (x.dtype() == DType::i64 && !math::unary_works_on_integers(op))) {
      throw DTypeError(fmt::format("unary: op {} is not supported for {}", unary_op_name(op), x.dtype()));
    }
    cuda::unary(op, elem(x.dtype()), out.raw_data(), x.raw_data(), p.a, p.b, strided<2>(out.shape(), {&out, &x}),
                out.numel());
  }

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    DeviceGuard guard(out.device().index);
    bool logical = math::is_logical(op), comparison = math::is_comparison(op);
    if (logical && a.dtype() != DType::b8) not_supported(binary_op_name(op), a.dtype());
    if (!logical && !comparison && out.dtype() == DType::b8)
      throw DTypeError(fmt::format("binary: expected a numeric dtype, got {}", out.dtype()));
    cuda::binary(op, elem(a.dtype()), out.raw_data(), a.raw_data(), b.raw_data(),
                 strided<3>(out.shape(), {&out, &a, &b}), out.numel());
  }

  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
    DeviceGuard guard(out.device().index);
    cuda::where(elem(out.dtype()), out.raw_data(), static_cast<const bool*>(cond.raw_data()), a.raw_data(),
                b.raw_data(), strided<4>(out.shape(), {&out, &cond, &a, &b}), out.numel());
  }

  // Reduces x over the dims where out has size 1 and x does not (as ops/cpu).
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override {
    DeviceGuard guard(out.device().index);
    if (x.dtype() == DType::b8)
      throw DTypeError("reduce: bool tensors cannot be reduced; convert with to(DType::i64) first");
    ReduceGeometry g;
    g.n_out = out.numel();
    g.n_reduced = 1;
    for (int d = 0; d < x.ndim(); ++d) {
      if (out.shape()[d] == 1 && x.shape()[d] != 1) {
        g.reduced_shape[g.reduced_ndim] = x.shape()[d];
        g.reduced_stride[g.reduced_ndim++] = x.strides()[d];
        g.n_reduced *= x.shape()[d];
      } else {
        g.kept_shape[g.kept_ndim] = x.shape()[d];
        g.kept_stride[g.kept_ndim] = x.strides()[d];
        g.out_stride[g.kept_ndim++] = out.strides()[d];
      }
    }
    cuda::reduce(op, elem(x.dtype()), x.raw_data(), out.raw_data(), g);
  }

  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta,
            GemmPrecision precision) override;

  void index_select(const Tensor& x_in, int dim, const Tensor& index, const Tensor& out) override {
    DeviceGuard guard(out.device().index);
    Tensor x = dense(x_in);
    auto [outer, inner] = outer_inner(x, dim);
    cuda::index_select(element_size(x.dtype()), x.raw_data(), static_cast<const int64_t*>(dense(index).raw_data()),
                       out.raw_data(), outer, x.shape()[dim], index.numel(), inner);
  }

  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src_in) override {
    DeviceGuard guard(out.device().index);
    if (out.dtype() == DType::b8) not_supported("index_add", out.dtype());
    Tensor src = dense(src_in), idx = dense(index);
    auto [outer, inner] = outer_inner(out, dim);
    cuda::index_add(elem(out.dtype()), out.raw_data(), static_cast<const int64_t*>(idx.raw_data()), src.raw_data(),
                    outer, out.shape()[dim], index.numel(), inner);
  }

  void gather(const Tensor& x_in, int dim, const Tensor& index_in, const Tensor& out) override {
    DeviceGuard guard(out.device().index);
    Tensor x = dense(x_in), index = dense(index_in);
    cuda::gather(element_size(x.dtype()), x.raw_data(), static_cast<const int64_t*>(index.raw_data()), out.raw_data(),
                 index_geometry(index, x, dim), index.numel());
  }

  void scatter_add(const Tensor& out, int dim, const Tensor& index_in, const Tensor& src_in) override {
    DeviceGuard guard(out.device().index);
    if (out.dtype() == DType::b8) not_supported("scatter_add", out.dtype());
    Tensor index = dense(index_in), src = dense(src_in);
    cuda::scatter_add(elem(out.dtype()), out.raw_data(), static_cast<const int64_t*>(index.raw_data()),
                      src.raw_data(), index_geometry(index, out, dim), index.numel());
  }

  void softmax_rows(const Tensor& x, const Tensor& out, bool log) override {
    DeviceGuard guard(out.device().index);
    check_floating("softmax", x);
    auto [rows, cols] = rows_cols(x);
    cuda::softmax_rows(elem(x.dtype()), x.raw_data(), out.raw_data(), rows, cols, log);
  }

  void softmax_rows_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) override {
    DeviceGuard guard(dx.device().index);
    check_floating("softmax_backward", y);
    auto [rows, cols] = rows_cols(y);
    cuda::softmax_rows_backward(elem(y.dtype()), y.raw_data(), dy.raw_data(), dx.raw_data(), rows, cols, log);
  }

  void topk(const Tensor& x_in, int64_t k, bool largest, const Tensor& values, const Tensor& indices) override {
    DeviceGuard guard(values.device().index);
    if (x_in.dtype() == DType::b8) not_supported("topk", x_in.dtype());
    Tensor x = dense(x_in);
    auto [rows, cols] = rows_cols(x);
    cuda::topk(elem(x.dtype()), x.raw_data(), rows, cols, k, largest, values.raw_data(),
               static_cast<int64_t*>(indices.raw_data()));
  }

  // ---- fused kernels (fused.cu): every operand dense, on one CUDA device, of one floating dtype
  // The chunked attention's fused backward has no CUDA kernel yet (it uses additive_scores twice).
  // int8 inference (ops/quantized.h) runs on the CPU: Backend's int8 members say "not implemented on cuda"
  bool supports(FusedOp op) const override {
    return op != FusedOp::additive_attention_chunk && op != FusedOp::int8_gemm;
  }

  void gru_cell(const Tensor& xp, const Tensor& hp, const Tensor& h, const Tensor& keep, const Tensor& h_next,
                const Tensor& gates) override {
    const char* op = "gru_cell";
    check_operands(op, {{"h", &h}, {"xp", &xp}, {"hp", &hp}, {"h_next", &h_next}, {"gates", &gates}});
    SG_CHECK_SHAPE(h.ndim() == 2, "{}: h must be (B, H), got {} on {}", op, h.shape(), h.device());
    const int64_t B = h.size(0), H = h.size(1);
    const Shape row3{B, 3 * H}, row4{B, 4 * H};
    SG_CHECK_SHAPE(xp.shape() == row3 && hp.shape() == row3 && h_next.shape() == h.shape() && gates.shape() == row4,
                   "{}: expected xp, hp (B, 3H), h_next (B, H) and gates (B, 4H) for h (B, H) = {}; got xp {}, hp {}, "
                   "h_next {}, gates {} on {}", op, h.shape(), xp.shape(), hp.shape(), h_next.shape(), gates.shape(),
                   h.device());
    const bool* ok = keep_rows(op, keep, h);
    DeviceGuard guard(h.device().index);
    cuda::gru_cell(elem(h.dtype()), xp.raw_data(), hp.raw_data(), h.raw_data(), ok, h_next.raw_data(),
                   gates.raw_data(), B, H);
  }

  void gru_cell_backward(const Tensor& gates, const Tensor& h, const Tensor& keep, const Tensor& dy,
                         const Tensor& dcarry, const Tensor& dxp, const Tensor& dhp, const Tensor& dh) override {
    const char* op = "gru_cell_backward";
    check_operands(op, {{"h", &h}, {"gates", &gates}, {"dcarry", &dcarry}, {"dxp", &dxp}, {"dhp", &dhp}, {"dh", &dh}});
    if (dy.defined()) check_operands(op, {{"h", &h}, {"dy", &dy}});
    SG_CHECK_SHAPE(h.ndim() == 2, "{}: h must be (B, H), got {} on {}", op, h.shape(), h.device());
    const int64_t B = h.size(0), H = h.size(1);
    const Shape row3{B, 3 * H}, row4{B, 4 * H};
    SG_CHECK_SHAPE(gates.shape() == row4 && (!dy.defined() || dy.shape() == h.shape()) && dcarry.shape() == h.shape() &&
                       dxp.shape() == row3 && dhp.shape() == row3 && dh.shape() == h.shape(),
                   "{}: expected gates (B, 4H), dy, dcarry, dh (B, H) and dxp, dhp (B, 3H) for h (B, H) = {}; got "
                   "gates {}, dy {}, dcarry {}, dxp {}, dhp {}, dh {} on {}", op, h.shape(), gates.shape(),
                   dy.defined() ? fmt::format("{}", dy.shape()) : "undefined", dcarry.shape(), dxp.shape(),
                   dhp.shape(), dh.shape(), h.device());
    const bool* ok = keep_rows(op, keep, h);
    DeviceGuard guard(h.device().index);
    cuda::gru_cell_backward(elem(h.dtype()), gates.raw_data(), h.raw_data(), ok,
                            dy.defined() ? dy.raw_data() : nullptr, dcarry.raw_data(), dxp.raw_data(), dhp.raw_data(),
                            dh.raw_data(), B, H);
  }

  void additive_scores(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& scores) override {
    const char* op = "additive_scores";
    check_operands(op, {{"qp", &qp}, {"kp", &kp}, {"w", &w}, {"scores", &scores}});
    auto [B, Q, K, A] = additive_sizes(op, qp, kp, w);
    SG_CHECK_SHAPE(scores.shape() == (Shape{B, Q, K}), "{}: scores {} must be (B, Q, K) = ({}, {}, {}) on {}", op,
                   scores.shape(), B, Q, K, qp.device());
    DeviceGuard guard(qp.device().index);
    cuda::additive_scores(elem(qp.dtype()), qp.raw_data(), kp.raw_data(), w.raw_data(), scores.raw_data(), B, Q, K, A);
  }

  void additive_scores_backward(const Tensor& qp, const Tensor& kp, const Tensor& w, const Tensor& dscores,
                                const Tensor& dqp, const Tensor& dkp, const Tensor& dw) override {
    const char* op = "additive_scores_backward";
    check_operands(op, {{"qp", &qp}, {"kp", &kp}, {"w", &w}, {"dscores", &dscores}, {"dqp", &dqp}, {"dkp", &dkp},
                        {"dw", &dw}});
    auto [B, Q, K, A] = additive_sizes(op, qp, kp, w);
    SG_CHECK_SHAPE(dscores.shape() == (Shape{B, Q, K}) && dqp.shape() == qp.shape() && dkp.shape() == kp.shape() &&
                       dw.shape() == w.shape(),
                   "{}: expected dscores (B, Q, K) = ({}, {}, {}), dqp like qp {}, dkp like kp {}, dw like w {}; got "
                   "dscores {}, dqp {}, dkp {}, dw {} on {}", op, B, Q, K, qp.shape(), kp.shape(), w.shape(),
                   dscores.shape(), dqp.shape(), dkp.shape(), dw.shape(), qp.device());
    DeviceGuard guard(qp.device().index);
    Scratch dw_rows(static_cast<size_t>(B * Q * A) * element_size(qp.dtype()), qp.device(), op);
    cuda::additive_scores_backward(elem(qp.dtype()), qp.raw_data(), kp.raw_data(), w.raw_data(), dscores.raw_data(),
                                   dqp.raw_data(), dkp.raw_data(), dw.raw_data(), dw_rows.get(), B, Q, K, A);
  }

  void cross_entropy_rows(const Tensor& logits, const Tensor& targets, double eps, int64_t ignore_index,
                          const Tensor& loss, const Tensor& lse) override {
    const char* op = "cross_entropy";
    check_operands(op, {{"logits", &logits}, {"loss", &loss}, {"lse", &lse}});
    auto [N, C] = cross_entropy_sizes(op, logits, targets);
    SG_CHECK_SHAPE(loss.shape() == Shape{N} && lse.shape() == Shape{N},
                   "{}: loss {} and lse {} must be (N,) = ({},) for logits {} on {}", op, loss.shape(), lse.shape(), N,
                   logits.shape(), logits.device());
    DeviceGuard guard(logits.device().index);
    cuda::cross_entropy_rows(elem(logits.dtype()), logits.raw_data(), static_cast<const int64_t*>(targets.raw_data()),
                             eps, ignore_index, loss.raw_data(), lse.raw_data(), N, C);
  }

  void cross_entropy_rows_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                                   double eps, int64_t ignore_index, const Tensor& dlogits) override {
    const char* op = "cross_entropy_backward";
    check_operands(op, {{"logits", &logits}, {"lse", &lse}, {"dloss", &dloss}, {"dlogits", &dlogits}});
    auto [N, C] = cross_entropy_sizes(op, logits, targets);
    SG_CHECK_SHAPE(lse.shape() == Shape{N} && (dloss.numel() == N || dloss.numel() == 1) &&
                       dlogits.shape() == logits.shape(),
                   "{}: expected lse (N,) = ({},), dloss with N or 1 values and dlogits like logits {}; got lse {}, "
                   "dloss {}, dlogits {} on {}", op, N, logits.shape(), lse.shape(), dloss.shape(), dlogits.shape(),
                   logits.device());
    DeviceGuard guard(logits.device().index);
    cuda::cross_entropy_rows_backward(elem(logits.dtype()), logits.raw_data(),
                                      static_cast<const int64_t*>(targets.raw_data()), lse.raw_data(), dloss.raw_data(),
                                      dloss.numel() == 1 ? 0 : 1, eps, ignore_index, dlogits.raw_data(), N, C);
  }

  void layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) override {
    const char* op = "layer_norm";
    check_operands(op, {{"x", &x}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}});
    auto [N, D] = layer_norm_sizes(op, x, weight, bias);
    SG_CHECK_SHAPE(y.shape() == x.shape() && mean.shape() == Shape{N} && rstd.shape() == Shape{N},
                   "{}: expected y like x {} and mean, rstd (N,) = ({},); got y {}, mean {}, rstd {} on {}", op,
                   x.shape(), N, y.shape(), mean.shape(), rstd.shape(), x.device());
    DeviceGuard guard(x.device().index);
    cuda::layer_norm_rows(elem(x.dtype()), x.raw_data(), data_or_null(weight), data_or_null(bias), eps, y.raw_data(),
                          mean.raw_data(), rstd.raw_data(), N, D);
  }

  void layer_norm_rows_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                const Tensor& dy, const Tensor& dx, const Tensor& dweight,
                                const Tensor& dbias) override {
    const char* op = "layer_norm_backward";
    check_operands(op, {{"x", &x}, {"mean", &mean}, {"rstd", &rstd}, {"dy", &dy}, {"dx", &dx}});
    auto [N, D] = layer_norm_sizes(op, x, weight, Tensor());
    for (const Tensor* d : {&dweight, &dbias})
      if (d->defined()) check_operands(op, {{"x", &x}, {d == &dweight ? "dweight" : "dbias", d}});
    SG_CHECK_SHAPE(mean.shape() == Shape{N} && rstd.shape() == Shape{N} && dy.shape() == x.shape() &&
                       dx.shape() == x.shape() && (!dweight.defined() || dweight.shape() == Shape{D}) &&
                       (!dbias.defined() || dbias.shape() == Shape{D}),
                   "{}: expected mean, rstd (N,) = ({},), dy and dx like x {}, dweight and dbias (D,) = ({},); got "
                   "mean {}, rstd {}, dy {}, dx {} on {}", op, N, x.shape(), D, mean.shape(), rstd.shape(),
                   dy.shape(), dx.shape(), x.device());
    DeviceGuard guard(x.device().index);
    cuda::layer_norm_rows_backward(elem(x.dtype()), x.raw_data(), data_or_null(weight), mean.raw_data(),
                                   rstd.raw_data(), dy.raw_data(), dx.raw_data(),
                                   weight.defined() ? data_or_null(dweight) : nullptr, data_or_null(dbias), N, D);
  }

  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const AdamParams& p) override {
    const char* op = "adam_update";
    check_operands(op, {{"param", &param}, {"grad", &grad}, {"exp_avg", &exp_avg}, {"exp_avg_sq", &exp_avg_sq}});
    if (p.amsgrad) check_operands(op, {{"param", &param}, {"max_exp_avg_sq", &max_exp_avg_sq}});
    SG_CHECK_SHAPE(grad.shape() == param.shape() && exp_avg.shape() == param.shape() &&
                       exp_avg_sq.shape() == param.shape() && (!p.amsgrad || max_exp_avg_sq.shape() == param.shape()),
                   "{}: grad {}, exp_avg {}, exp_avg_sq {}{} must be shaped like the parameter {} on {}", op,
                   grad.shape(), exp_avg.shape(), exp_avg_sq.shape(),
                   p.amsgrad ? fmt::format(", max_exp_avg_sq {}", max_exp_avg_sq.shape()) : "", param.shape(),
                   param.device());
    DeviceGuard guard(param.device().index);
    cuda::adam_update(elem(param.dtype()), param.raw_data(), grad.raw_data(), exp_avg.raw_data(), exp_avg_sq.raw_data(),
                      p.amsgrad ? max_exp_avg_sq.raw_data() : nullptr, param.numel(), p);
  }

  void random_uniform(const Tensor& out, double a, double b, uint64_t seed, uint64_t offset) override {
    DeviceGuard guard(out.device().index);
    check_floating("uniform_", out);
    with_dense_output(out, [&](const Tensor& o) {
      cuda::random_uniform(elem(o.dtype()), o.raw_data(), o.numel(), a, b, seed, offset);
    });
  }

  void random_normal(const Tensor& out, double mean, double stddev, uint64_t seed, uint64_t offset) override {
    DeviceGuard guard(out.device().index);
    check_floating("normal_", out);
    with_dense_output(out, [&](const Tensor& o) {
      cuda::random_normal(elem(o.dtype()), o.raw_data(), o.numel(), mean, stddev, seed, offset);
    });
  }

  void dropout(const Tensor& x, const Tensor& out, double keep, double scale, uint64_t seed,
               uint64_t offset) override {
    DeviceGuard guard(out.device().index);
    check_floating("dropout", out);
    SG_CHECK(out.is_contiguous() && (!x.defined() || (x.dtype() == out.dtype() && x.shape() == out.shape() &&
                                                       x.is_contiguous())),
             "dropout: expected contiguous x (or none) and out of one shape and dtype; got {} and {} {}",
             x.defined() ? fmt::format("{} {}", x.dtype(), x.shape()) : "none", out.dtype(), out.shape());
    cuda::dropout(elem(out.dtype()), x.defined() ? x.raw_data() : nullptr, out.raw_data(), out.numel(), keep, scale,
                  seed, offset);
  }

 private:
  static void check_floating(const char* op, const Tensor& t) {
    SG_CHECK_DTYPE(is_floating(t.dtype()), "{}: expected a floating dtype (float32 or float64), got {}", op,
                   t.dtype());
  }

  // The fused kernels' operands: defined, dense, on the first operand's CUDA device and of its
  // floating dtype (the first names the device and dtype in the messages).
  struct Operand {
    const char* name;
    const Tensor* t;
  };
  static void check_operands(const char* op, std::initializer_list<Operand> operands) {
    const Operand& first = *operands.begin();
    for (const Operand& o : operands) {
      const Tensor& t = *o.t;
      SG_CHECK(t.defined(), "{}: {} is an undefined tensor", op, o.name);
      SG_CHECK_DEVICE(t.device().is_cuda(), "{}: {} {} is on {}, not on a CUDA device", op, o.name, t.shape(),
                      t.device());
      SG_CHECK_DEVICE(t.device() == first.t->device(),
                      "{}: {} {} is on {} but {} {} is on {}", op, o.name, t.shape(), t.device(), first.name,
                      first.t->shape(), first.t->device());
      SG_CHECK_DTYPE(t.dtype() == first.t->dtype() && is_floating(t.dtype()),
                     "{}: {} and {} must have one floating dtype (float32 or float64), got {} {} and {} {} on {}", op,
                     first.name, o.name, first.t->dtype(), first.t->shape(), t.dtype(), t.shape(), t.device());
      SG_CHECK(t.is_contiguous() || t.numel() == 0, "{}: {} {} (strides {}) on {} must be contiguous", op, o.name,
               t.shape(), t.strides(), t.device());
    }
  }

  // The GRU's per-row keep flags: undefined (every row) or bool (B,) next to h.
  static const bool* keep_rows(const char* op, const Tensor& keep, const Tensor& h) {
    if (!keep.defined()) return nullptr;
    SG_CHECK_DEVICE(keep.device() == h.device(), "{}: keep {} is on {} but h {} is on {}", op, keep.shape(),
                    keep.device(), h.shape(), h.device());
    SG_CHECK_SHAPE(keep.dtype() == DType::b8 && keep.shape() == Shape{h.size(0)} && keep.is_contiguous(),
                   "{}: keep must be a dense bool (B,) = ({},), got {} {} on {}", op, h.size(0), keep.dtype(),
                   keep.shape(), keep.device());
    return static_cast<const bool*>(keep.raw_data());
  }

  // (B, Q, K, A) of qp (B, Q, A), kp (B, K, A), w (A,)
  static std::array<int64_t, 4> additive_sizes(const char* op, const Tensor& qp, const Tensor& kp, const Tensor& w) {
    SG_CHECK_SHAPE(qp.ndim() == 3 && kp.ndim() == 3 && w.ndim() == 1 && kp.size(0) == qp.size(0) &&
                       kp.size(2) == qp.size(2) && w.size(0) == qp.size(2),
                   "{}: expected qp (B, Q, A), kp (B, K, A) and w (A,); got {}, {}, {} on {}", op, qp.shape(),
                   kp.shape(), w.shape(), qp.device());
    return {qp.size(0), qp.size(1), kp.size(1), qp.size(2)};
  }

  // (N, D) of layer normalisation's rows x (N, D), with weight and bias (D,) both or neither.
  static std::pair<int64_t, int64_t> layer_norm_sizes(const char* op, const Tensor& x, const Tensor& weight,
                                                      const Tensor& bias) {
    SG_CHECK_SHAPE(x.ndim() == 2, "{}: x must be (N, D), got {} on {}", op, x.shape(), x.device());
    const int64_t D = x.size(1);
    for (const Tensor* t : {&weight, &bias}) {
      if (!t->defined()) continue;
      check_operands(op, {{"x", &x}, {t == &weight ? "weight" : "bias", t}});
      SG_CHECK_SHAPE(t->shape() == Shape{D}, "{}: {} {} must be (D,) = ({},) for x {} on {}", op,
                     t == &weight ? "weight" : "bias", t->shape(), D, x.shape(), x.device());
    }
    return {x.size(0), D};
  }

  static void* data_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

  // (N, C) of logits (N, C) with targets int64 (N,), dense, on the logits' device
  static std::pair<int64_t, int64_t> cross_entropy_sizes(const char* op, const Tensor& logits, const Tensor& targets) {
    SG_CHECK(targets.defined(), "{}: targets is an undefined tensor", op);
    SG_CHECK_SHAPE(logits.ndim() == 2 && targets.shape() == Shape{logits.ndim() == 2 ? logits.size(0) : -1},
                   "{}: expected logits (N, C) and targets (N,); got {} and {} on {}", op, logits.shape(),
                   targets.shape(), logits.device());
    SG_CHECK_DTYPE(targets.dtype() == DType::i64, "{}: targets must be int64 class indices, got {} {}", op,
                   targets.dtype(), targets.shape());
    SG_CHECK_DEVICE(targets.device() == logits.device(), "{}: targets {} are on {} but logits {} on {}", op,
                    targets.shape(), targets.device(), logits.shape(), logits.device());
    SG_CHECK(targets.is_contiguous(), "{}: targets {} on {} must be contiguous", op, targets.shape(), targets.device());
    return {logits.size(0), logits.size(1)};
  }

  static std::pair<int64_t, int64_t> rows_cols(const Tensor& t) {
    int64_t cols = t.ndim() ? t.shape().back() : 1;
    return {t.numel() / std::max<int64_t>(cols, 1), cols};
  }

  // (outer, inner) around `dim` of a dense tensor.
  static std::pair<int64_t, int64_t> outer_inner(const Tensor& t, int dim) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= t.shape()[d];
    for (int d = dim + 1; d < t.ndim(); ++d) inner *= t.shape()[d];
    return {outer, inner};
  }

  static IndexGeometry index_geometry(const Tensor& index, const Tensor& data, int dim) {
    IndexGeometry g;
    g.ndim = index.ndim();
    g.dim = dim;
    for (int d = 0; d < index.ndim(); ++d) {
      g.index_shape[d] = index.shape()[d];
      g.data_stride[d] = data.strides()[d];
    }
    return g;
  }

  // Random values go to element i in row-major order: a strided output is filled through a dense one.
  template <class F>
  void with_dense_output(const Tensor& out, F&& fill_dense) {
    if (out.is_contiguous()) return fill_dense(out);
    Tensor tmp = Tensor::empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
    fill_dense(tmp);
    copy(tmp, out);
  }
};

// C = alpha · A · B + beta · C for a batch of row-major matrices. cuBLAS is column-major, where
// C's buffer reads as Cᵀ; so it computes Cᵀ = Bᵀ · Aᵀ, i.e. gemm(B, A) with m and n swapped, each
// operand passed as stored (MatrixArg). Broadcast batch operands have batch stride 0.
void CudaBackend::gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& c, double alpha, double beta,
                       GemmPrecision precision) {
  DeviceGuard guard(c.device().index);
  int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a_in.shape()[2];
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {  // the product of empty matrices is zero: C = beta · C
    if (beta == 0) fill(c, 0.0);
    else unary(UnaryOp::affine, c, c, {beta, 0.0});
    return;
  }
  SG_ASSERT(c.strides()[2] == 1 || n == 1);  // rows of C are dense (one column: its stride is never read)
  int ldc = as_int(std::max<int64_t>(m == 1 ? n : c.strides()[1], 1), "ldc");
  int64_t c_stride = c.strides()[0];
  cublasHandle_t handle = cublas_handle(c.device().index);
  int bm = as_int(m, "rows"), bn = as_int(n, "columns"), bk = as_int(k, "inner size"),
      bbatch = as_int(batch, "batch");

  if (precision != GemmPrecision::full && c.dtype() == DType::f32) {
    // Mixed precision: each operand rounded to 16 bits (core/half.h's rounding, as the CPU does)
    // into a dense row-major buffer, then a float32-accumulating GEMM writing float32.
    int64_t a_copies = operand_copies(a_in, batch), b_copies = operand_copies(b_in, batch);
    Scratch a16(a_copies * m * k * sizeof(uint16_t), c.device()), b16(b_copies * k * n * sizeof(uint16_t), c.device());
    round_operand(precision, a_in, a_copies, a16);
    round_operand(precision, b_in, b_copies, b16);
    int64_t a_stride = a_copies == 1 ? 0 : m * k, b_stride = b_copies == 1 ? 0 : k * n;
    cudaDataType type16 = precision == GemmPrecision::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    SG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, bn, bm, bk, &alpha_f, b16.get(),
                                               type16, bn, b_stride, a16.get(), type16, bk, a_stride, &beta_f,
                                               c.raw_data(), CUDA_R_32F, ldc, c_stride, bbatch, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT));
    return;
  }

  auto prepare = [](const Tensor& t) {
    return as_blas(t.shape()[1], t.shape()[2], t.strides()[1], t.strides()[2]).usable ? t : dense(t);
  };
  Tensor a = prepare(a_in), b = prepare(b_in);
  MatrixArg ma = as_blas(m, k, a.strides()[1], a.strides()[2]);
  MatrixArg mb = as_blas(k, n, b.strides()[1], b.strides()[2]);
  int64_t a_stride = a.shape()[0] == 1 ? 0 : a.strides()[0];
  int64_t b_stride = b.shape()[0] == 1 ? 0 : b.strides()[0];
  int lda = as_int(ma.ld, "lda"), ldb = as_int(mb.ld, "ldb");
  if (c.dtype() == DType::f32) {
    float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
    SG_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, mb.op, ma.op, bn, bm, bk, &alpha_f,
                                              static_cast<const float*>(b.raw_data()), ldb, b_stride,
                                              static_cast<const float*>(a.raw_data()), lda, a_stride, &beta_f,
                                              static_cast<float*>(c.raw_data()), ldc, c_stride, bbatch));
  } else if (c.dtype() == DType::f64) {
    SG_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, mb.op, ma.op, bn, bm, bk, &alpha,
                                              static_cast<const double*>(b.raw_data()), ldb, b_stride,
                                              static_cast<const double*>(a.raw_data()), lda, a_stride, &beta,
                                              static_cast<double*>(c.raw_data()), ldc, c_stride, bbatch));
  } else {
    not_supported("matmul", c.dtype());
  }
}

}  // namespace

Backend& backend() {
  static CudaBackend instance;
  return instance;
}

}  // namespace seqgrad::cuda
