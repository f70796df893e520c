// SG_HOST_DEVICE marks small inline functions that both the C++ compiler and nvcc compile, so the
// CPU backend and the CUDA kernels share one definition of their arithmetic (Philox, elementwise
// math). Headers that use it include nothing that nvcc cannot parse.
#pragma once

#if defined(__CUDACC__)
#define SG_HOST_DEVICE __host__ __device__
#else
#define SG_HOST_DEVICE
#endif
