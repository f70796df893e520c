// The reference int8 GEMM (ops/cpu/int8.h): plain loops with int32 accumulation, split over the
// pool by output column. Compiled once, for the baseline instruction set.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/threads.h"
#include "ops/cpu/int8.h"

namespace seqgrad::cpu {
namespace {

// Products smaller than this many multiply-adds run on one thread.
constexpr int64_t kInt8SplitWork = int64_t{1} << 18;

void gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, const int8_t* b, int32_t* c) {
  const int64_t grain = std::max<int64_t>(1, kInt8SplitWork / std::max<int64_t>(m * k, 1));
  parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {  // b's row j stays in cache for every row of a
      const int8_t* bj = b + j * k;
      for (int64_t i = 0; i < m; ++i) {
        const uint8_t* ai = a + i * k;
        int32_t acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t kk = 0; kk < k; ++kk) acc += static_cast<int32_t>(ai[kk]) * static_cast<int32_t>(bj[kk]);
        c[i * n + j] = acc;
      }
    }
  });
}

bool never_saturates() { return false; }
int64_t no_packed_layout(int64_t, int64_t) { return 0; }
// The plain layout is this kernel's own: nothing is ever packed, so these are never called.
[[noreturn]] void no_pack(int64_t n, int64_t k, const int8_t*, int8_t*) {
  throw Error(fmt::format("int8_gemm (reference): no packed layout for weight ({}, {})", n, k));
}
[[noreturn]] void no_packed_gemm(int64_t m, int64_t n, int64_t k, const uint8_t*, const int8_t*, int32_t*) {
  throw Error(fmt::format("int8_gemm (reference): no packed layout for ({}, {}) x ({}, {})", m, k, k, n));
}

}  // namespace

const Int8Kernels& int8_reference_kernels() {
  static const Int8Kernels kernels{.name = "reference",
                                   .saturates = never_saturates,
                                   .gemm = gemm,
                                   .packed_bytes = no_packed_layout,
                                   .pack = no_pack,
                                   .unpack = no_pack,
                                   .gemm_packed = no_packed_gemm};
  return kernels;
}

}  // namespace seqgrad::cpu
