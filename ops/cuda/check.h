// Every CUDA runtime and cuBLAS call goes through a check that throws seqgrad::DeviceError naming
// the call, the error and file:line, e.g.
//   cuda: cudaMalloc(&ptr, bytes) failed: out of memory (cudaErrorMemoryAllocation) at ops/cuda/memory.cpp:80
// Kernel launches are checked with SG_CUDA_CHECK_LAUNCH() right after the launch.
#pragma once
#include <cuda_runtime.h>

namespace seqgrad::cuda {
// Defined in backend.cpp (it formats the message; nvcc never sees the formatting headers).
[[noreturn]] void throw_error(const char* library, const char* call, const char* error, const char* error_name,
                              const char* file, int line);
}  // namespace seqgrad::cuda

#define SG_CUDA_CHECK(call)                                                                          \
  do {                                                                                               \
    cudaError_t sg_status_ = (call);                                                                 \
    if (sg_status_ != cudaSuccess) [[unlikely]]                                                      \
      ::seqgrad::cuda::throw_error("cuda", #call, cudaGetErrorString(sg_status_),                    \
                                   cudaGetErrorName(sg_status_), __FILE__, __LINE__);                \
  } while (0)

#define SG_CUDA_CHECK_LAUNCH() SG_CUDA_CHECK(cudaGetLastError())

// Needs <cublas_v2.h> where it is used.
#define SG_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                               \
    cublasStatus_t sg_status_ = (call);                                                              \
    if (sg_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                            \
      ::seqgrad::cuda::throw_error("cublas", #call, cublasGetStatusString(sg_status_),               \
                                   cublasGetStatusName(sg_status_), __FILE__, __LINE__);             \
  } while (0)
