// Makes a CUDA device current for a scope and restores the previous one (cudaSetDevice is per host
// thread; every backend call and memory operation runs on the device of its tensors).
#pragma once
#include "ops/cuda/check.h"

namespace seqgrad::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) : index_(index) {
    SG_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index_) SG_CUDA_CHECK(cudaSetDevice(index_));
  }
  ~DeviceGuard() {
    if (previous_ != index_) cudaSetDevice(previous_);  // best effort: destructors do not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int index_;
  int previous_ = 0;
};

}  // namespace seqgrad::cuda
