// Collectives over NCCL on CUDA tensors. They run on the device's default stream, where ops/cuda
// issues every kernel, so an allreduce sees the gradients written before it and later kernels see
// its result without extra synchronisation. wait() polls an event recorded after the collective
// (and NCCL's asynchronous error) until the timeout, then aborts the NCCL communicator and throws.
#include "dist/communicator_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <climits>
#include <cstdlib>
#include <thread>

namespace seqgrad::dist {
namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result != ncclSuccess && result != ncclInProgress)
    throw Error(fmt::format("nccl: {} failed: {}", call, ncclGetErrorString(result)));
}
void check_cuda(cudaError_t error, const char* call) {
  if (error != cudaSuccess) throw Error(fmt::format("nccl: {} failed: {}", call, cudaGetErrorString(error)));
}
#define SG_NCCL_CHECK(call) check_nccl((call), #call)
#define SG_NCCL_CUDA_CHECK(call) check_cuda((call), #call)

constexpr cudaStream_t kDefaultStream = nullptr;  // ops/cuda's stream

class NcclWork final : public Work {
 public:
  NcclWork(ncclComm_t comm, const char* op, int rank, std::chrono::milliseconds timeout, Tensor buffer)
      : comm_(comm), op_(op), rank_(rank), timeout_(timeout), buffer_(std::move(buffer)) {
    SG_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done_event_, cudaEventDisableTiming));
    SG_NCCL_CUDA_CHECK(cudaEventRecord(done_event_, kDefaultStream));
  }
  ~NcclWork() override { cudaEventDestroy(done_event_); }
  bool test() override {
    if (done_) return true;
    cudaError_t state = cudaEventQuery(done_event_);
    if (state == cudaSuccess) return done_ = true;
    if (state != cudaErrorNotReady) check_cuda(state, "cudaEventQuery");
    ncclResult_t async_error = ncclSuccess;
    SG_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
    check_nccl(async_error, op_);
    return false;
  }
  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    while (!test()) {
      if (std::chrono::steady_clock::now() - start > timeout_) {
        ncclCommAbort(comm_);  // frees the GPU from the collective that will never complete
        throw Error(fmt::format("nccl {}: rank {} waited {} s for the other ranks without the collective "
                                "completing; a rank has probably died or stopped calling the same "
                                "collectives (the limit is SEQGRAD_DIST_TIMEOUT seconds)",
                                op_, rank_, timeout_.count() / 1000.0));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

 private:
  ncclComm_t comm_;
  const char* op_;
  int rank_;
  std::chrono::milliseconds timeout_;
  Tensor buffer_;  // the memory NCCL reads and writes until the event has passed
  cudaEvent_t done_event_ = nullptr;
  bool done_ = false;
};

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::f64 ? ncclFloat64 : ncclFloat32; }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, Device device)
      : device_(device), rank_(bootstrap->rank()), world_size_(bootstrap->world_size()), bootstrap_(std::move(bootstrap)) {
    SG_CHECK_DEVICE(device.is_cuda(), "nccl: the communicator's device must be a CUDA device, got {}", device);
    ncclUniqueId id{};
    if (rank_ == 0) SG_NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap_->broadcast_bytes(std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
    SG_NCCL_CUDA_CHECK(cudaSetDevice(device.index));
    SG_NCCL_CHECK(ncclCommInitRank(&comm_, world_size_, id, rank_));
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "nccl"; }
  void broadcast_bytes(std::span<std::byte> bytes, int root) override { bootstrap_->broadcast_bytes(bytes, root); }
  [[noreturn]] void abort(int code) override {
    ncclCommAbort(comm_);
    bootstrap_->abort(code);
    std::_Exit(code);  // not reached
  }

 protected:
  std::unique_ptr<Work> start_allreduce_sum(const Tensor& buffer) override {
    SG_NCCL_CUDA_CHECK(cudaSetDevice(device_.index));
    SG_NCCL_CHECK(ncclAllReduce(buffer.raw_data(), buffer.raw_data(), static_cast<size_t>(buffer.numel()),
                                nccl_type(buffer.dtype()), ncclSum, comm_, kDefaultStream));
    return std::make_unique<NcclWork>(comm_, "allreduce", rank_, timeout(), buffer);
  }
  void broadcast_contiguous(const Tensor& buffer, int root) override {
    SG_NCCL_CUDA_CHECK(cudaSetDevice(device_.index));
    SG_NCCL_CHECK(ncclBroadcast(buffer.raw_data(), buffer.raw_data(), static_cast<size_t>(buffer.numel()),
                                nccl_type(buffer.dtype()), root, comm_, kDefaultStream));
    NcclWork(comm_, "broadcast", rank_, timeout(), buffer).wait();
  }
  void barrier_impl() override { bootstrap_->barrier(); }
  void check_device(const char* op, const Tensor& t) const override {
    SG_CHECK_DEVICE(t.device() == device_, "nccl {}: the tensor is on {}; this rank's NCCL communicator moves "
                    "tensors on {} (the MPI communicator moves CPU tensors)", op, t.device(), device_);
  }

 private:
  Device device_;
  int rank_, world_size_;
  std::shared_ptr<Communicator> bootstrap_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, Device device) {
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device);
}

}  // namespace seqgrad::dist
