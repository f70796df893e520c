// Collectives over NCCL on CUDA tensors, on a stream of their own: an allreduce started from a
// gradient hook overlaps the kernels ops/cuda issues on the default stream for the rest of
// backward. Events order the two, as in PyTorch's ProcessGroupNCCL: the communication stream waits
// for an event recorded on the default stream when the collective starts (the gradients written
// before it), and wait() makes the default stream wait for the collective's completion event (later
// kernels see its result). wait() also polls that event (and NCCL's asynchronous error) until the
// timeout, then aborts the NCCL communicator and throws. tests/test_nccl_streams.cpp checks this
// order on tests/cuda_emulation's fake runtime and NCCL; no GPU has run it.
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

// An event recorded on `stream` now (completed once the stream's work so far has run).
cudaEvent_t record_event(cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  SG_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  SG_NCCL_CUDA_CHECK(cudaEventRecord(event, stream));
  return event;
}

// The collective enqueued on the communication stream; completed when done_event_ has passed.
class NcclWork final : public Work {
 public:
  NcclWork(ncclComm_t comm, cudaStream_t stream, const char* op, int rank, std::chrono::milliseconds timeout,
           Tensor buffer)
      : comm_(comm), op_(op), rank_(rank), timeout_(timeout), buffer_(std::move(buffer)),
        done_event_(record_event(stream)) {}
  ~NcclWork() override {
    // The buffer goes back to the caching allocator, whose next user runs on the default stream: an
    // abandoned collective must finish before that (wait() made this order already).
    if (!done_) cudaStreamWaitEvent(kDefaultStream, done_event_, 0);
    cudaEventDestroy(done_event_);
  }
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
    SG_NCCL_CUDA_CHECK(cudaStreamWaitEvent(kDefaultStream, done_event_, 0));  // later kernels see the result
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
    // non-blocking: no implicit synchronisation with the legacy default stream, only the events'
    SG_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
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
    wait_for_default_stream();
    SG_NCCL_CHECK(ncclAllReduce(buffer.raw_data(), buffer.raw_data(), static_cast<size_t>(buffer.numel()),
                                nccl_type(buffer.dtype()), ncclSum, comm_, stream_));
    return std::make_unique<NcclWork>(comm_, stream_, "allreduce", rank_, timeout(), buffer);
  }
  void broadcast_contiguous(const Tensor& buffer, int root) override {
    SG_NCCL_CUDA_CHECK(cudaSetDevice(device_.index));
    wait_for_default_stream();
    SG_NCCL_CHECK(ncclBroadcast(buffer.raw_data(), buffer.raw_data(), static_cast<size_t>(buffer.numel()),
                                nccl_type(buffer.dtype()), root, comm_, stream_));
    NcclWork(comm_, stream_, "broadcast", rank_, timeout(), buffer).wait();
  }
  void barrier_impl() override { bootstrap_->barrier(); }
  void check_device(const char* op, const Tensor& t) const override {
    SG_CHECK_DEVICE(t.device() == device_, "nccl {}: the tensor is on {}; this rank's NCCL communicator moves "
                    "tensors on {} (the MPI communicator moves CPU tensors)", op, t.device(), device_);
  }

 private:
  // What the default stream has been given so far (the tensor's values) comes before the next collective.
  void wait_for_default_stream() {
    cudaEvent_t written = record_event(kDefaultStream);
    const cudaError_t waited = cudaStreamWaitEvent(stream_, written, 0);
    cudaEventDestroy(written);  // legal at once: the wait keeps what it needs
    SG_NCCL_CUDA_CHECK(waited);
  }

  Device device_;
  int rank_, world_size_;
  std::shared_ptr<Communicator> bootstrap_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the collectives' own
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, Device device) {
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), device);
}

}  // namespace seqgrad::dist
