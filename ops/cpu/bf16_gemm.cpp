// Native bf16 GEMMs through oneDNN (ops/cpu/bf16_gemm.h).
#include "ops/cpu/bf16_gemm.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/half.h"
#include "core/threads.h"
#ifdef SG_ONEDNN
#include "ops/cpu/onednn.h"
#endif

namespace seqgrad::cpu {
namespace {

std::atomic<bool> native_enabled{[] {
  const char* v = std::getenv("SEQGRAD_BF16_GEMM");
  return v == nullptr || std::strcmp(v, "emulate") != 0;
}()};

#ifdef SG_ONEDNN
// One (rows, cols) operand of a batch entry in bfloat16, with the element strides oneDNN reads it
// by. A dense operand, row- or column-major (a transposed weight), keeps its layout and is rounded
// in one linear pass; any other is gathered row-major.
struct Bf16Matrix {
  std::vector<uint16_t> values;
  int64_t row_stride, col_stride;
};
Bf16Matrix to_bf16(const float* p, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t size = rows * cols;
  Bf16Matrix out{std::vector<uint16_t>(static_cast<size_t>(size)), cols, 1};
  uint16_t* q = out.values.data();
  const bool row_major = col_stride == 1 && (row_stride == cols || rows == 1);
  const bool col_major = !row_major && row_stride == 1 && (col_stride == rows || cols == 1);
  if (row_major || col_major) {
    if (col_major) out.row_stride = 1, out.col_stride = rows;
    parallel_for(size, 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) q[i] = half::bf16_from_float(p[i]);
    });
    return out;
  }
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < cols; ++j) q[r * cols + j] = half::bf16_from_float(p[r * row_stride + j * col_stride]);
  });
  return out;
}

// c (m, n, leading dimension ldc) = alpha · a·b + beta · c for one batch entry. The product is
// split across seqgrad's pool (along n, or along m when it is larger), and oneDNN runs each piece
// on its calling thread: its own OpenMP team spin-waits between products on the cores the pool
// needs (a fifth of a bf16 training step's time went to libgomp's spinning, by perf).
void gemm_pieces(int64_t m, int64_t n, int64_t k, const Bf16Matrix& a, const Bf16Matrix& b, float* c, int64_t ldc,
                 float alpha, float beta) {
  auto piece = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const int64_t rows = i1 - i0, cols = j1 - j0;
    const uint16_t* ap = a.values.data() + i0 * a.row_stride;
    const uint16_t* bp = b.values.data() + j0 * b.col_stride;
    float* cp = c + i0 * ldc + j0;
    if (beta == 0.0f) {  // beta = 0 ignores c, as BLAS: the product goes straight into it
      onednn::bf16_gemm(rows, cols, k, ap, a.row_stride, a.col_stride, bp, b.row_stride, b.col_stride, cp, ldc);
      if (alpha != 1.0f)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) cp[r * ldc + j] *= alpha;
      return;
    }
    std::vector<float> product(static_cast<size_t>(rows * cols));
    onednn::bf16_gemm(rows, cols, k, ap, a.row_stride, a.col_stride, bp, b.row_stride, b.col_stride, product.data(),
                      cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) cp[r * ldc + j] = alpha * product[r * cols + j] + beta * cp[r * ldc + j];
  };
  constexpr int64_t kPieceWork = int64_t{1} << 20;  // multiply-adds below which a split costs more than it gains
  if (n >= m) {
    parallel_for(n, std::max<int64_t>(16, kPieceWork / std::max<int64_t>(m * k, 1)),
                 [&](int64_t j0, int64_t j1) { piece(0, m, j0, j1); }, 16);
  } else {
    parallel_for(m, std::max<int64_t>(16, kPieceWork / std::max<int64_t>(n * k, 1)),
                 [&](int64_t i0, int64_t i1) { piece(i0, i1, 0, n); });
  }
}
#endif

}  // namespace

bool native_bf16_gemm_available() {
#ifdef SG_ONEDNN
  return native_enabled.load(std::memory_order_relaxed) && onednn::cpu_has_bf16();
#else
  return false;
#endif
}

void set_native_bf16_gemm(bool enabled) { native_enabled.store(enabled, std::memory_order_relaxed); }

bool native_bf16_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
#ifdef SG_ONEDNN
  if (!native_bf16_gemm_available() || c.dtype() != DType::f32) return false;
  const int64_t batch = c.shape()[0], m = c.shape()[1], n = c.shape()[2], k = a.shape()[2];
  if (m == 0 || n == 0 || k == 0) return false;  // the emulation's edge cases (k = 0 zeroes c)
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = c.data<float>();
  const int64_t ldc = m == 1 ? n : c.strides()[1];
  auto operand = [](const Tensor& t, const float* p, int64_t i, int64_t rows, int64_t cols) {
    return to_bf16(p + (t.shape()[0] == 1 ? 0 : i * t.strides()[0]), rows, cols, t.strides()[1], t.strides()[2]);
  };
  // an operand shared by the whole batch (a weight) is rounded once
  std::optional<Bf16Matrix> a_shared, b_shared;
  if (a.shape()[0] == 1) a_shared = operand(a, pa, 0, m, k);
  if (b.shape()[0] == 1) b_shared = operand(b, pb, 0, k, n);
  for (int64_t i = 0; i < batch; ++i) {
    std::optional<Bf16Matrix> a_i, b_i;
    if (!a_shared) a_i = operand(a, pa, i, m, k);
    if (!b_shared) b_i = operand(b, pb, i, k, n);
    gemm_pieces(m, n, k, a_shared ? *a_shared : *a_i, b_shared ? *b_shared : *b_i, pc + i * c.strides()[0], ldc,
                static_cast<float>(alpha), static_cast<float>(beta));
  }
  return true;
#else
  (void)a, (void)b, (void)c, (void)alpha, (void)beta;
  return false;
#endif
}

}  // namespace seqgrad::cpu
