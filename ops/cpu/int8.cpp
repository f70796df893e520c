// The CPU backend's int8 GEMM primitives (core/backend.h): checks of the raw layout, then the
// kernels ops/cpu/dispatch.cpp chose (oneDNN's or the reference loops, ops/cpu/int8.h).
#include "ops/cpu/backend.h"
#include "ops/cpu/int8.h"

namespace seqgrad::cpu::SG_CPU_ISA {

void CpuBackend::int8_gemm(const Tensor& a, const Tensor& w, const Tensor& c) {
  const Int8Kernels& kernels = int8_kernels();
  const int64_t m = a.size(0), k = a.size(1), n = c.size(1);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    fill(c, 0);
    return;
  }
  const uint8_t* pa = a.data<uint8_t>();
  int32_t* pc = c.data<int32_t>();
  if (w.ndim() == 1) kernels.gemm_packed(m, n, k, pa, w.data<int8_t>(), pc);  // int8_pack's layout
  else kernels.gemm(m, n, k, pa, w.data<int8_t>(), pc);
}

Tensor CpuBackend::int8_pack(const Tensor& w) {
  const Int8Kernels& kernels = int8_kernels();
  const int64_t n = w.size(0), k = w.size(1), bytes = kernels.packed_bytes(n, k);
  if (bytes == 0) return {};
  Tensor packed = Tensor::empty({bytes}, {.dtype = DType::i8});
  kernels.pack(n, k, w.data<int8_t>(), packed.data<int8_t>());
  return packed;
}

void CpuBackend::int8_unpack(const Tensor& packed, const Tensor& w) {
  int8_kernels().unpack(w.size(0), w.size(1), packed.data<int8_t>(), w.data<int8_t>());
}

Int8GemmInfo CpuBackend::int8_gemm_info() const {
  const Int8Kernels& kernels = int8_kernels();
  return {.kernels = kernels.name, .saturates = kernels.saturates()};
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
