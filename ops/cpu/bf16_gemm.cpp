// Native bf16 GEMMs through oneDNN (ops/cpu/bf16_gemm.h).
#include "ops/cpu/bf16_gemm.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
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
// One (rows, cols) matrix of a batch, read through its strides, rounded to bfloat16 (row-major).
std::vector<uint16_t> to_bf16(const float* p, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = half::bf16_from_float(p[r * row_stride + j * col_stride]);
  });
  return out;
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
  std::vector<float> product(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < batch; ++i) {
    const float* ai = pa + (a.shape()[0] == 1 ? 0 : i * a.strides()[0]);
    const float* bi = pb + (b.shape()[0] == 1 ? 0 : i * b.strides()[0]);
    std::vector<uint16_t> a16 = to_bf16(ai, m, k, a.strides()[1], a.strides()[2]);
    std::vector<uint16_t> b16 = to_bf16(bi, k, n, b.strides()[1], b.strides()[2]);
    onednn::bf16_gemm(m, n, k, a16.data(), k, 1, b16.data(), n, 1, product.data(), n);
    float* ci = pc + i * c.strides()[0];
    const int64_t ldc = m == 1 ? n : c.strides()[1];
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        float& cij = ci[r * ldc + j];
        cij = al * product[r * n + j] + (be == 0.0f ? 0.0f : be * cij);  // beta = 0 ignores c, as BLAS
      }
  }
  return true;
#else
  (void)a, (void)b, (void)c, (void)alpha, (void)beta;
  return false;
#endif
}

}  // namespace seqgrad::cpu
