// Collectives over MPI: each one is started non-blocking (MPI_Iallreduce, MPI_Ibcast,
// MPI_Ibarrier) and waited for by polling MPI_Test, so a wait can give up after the timeout.
#include "dist/communicator_mpi.h"

#define OMPI_SKIP_MPICXX 1  // the C API only: no deprecated C++ bindings (and their warnings)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <thread>

namespace seqgrad::dist {
namespace {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, length);
}

void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS) throw Error(fmt::format("mpi: {} failed: {}", call, mpi_error_string(code)));
}
#define SG_MPI_CHECK(call) check_mpi((call), #call)

// MPI itself: initialised on first use and finalised at exit. After a collective timed out the
// other ranks are not coming, and MPI_Finalize would wait for them: the job is aborted instead,
// which makes mpirun stop every rank.
struct MpiEnvironment {
  bool owns_mpi = false;
  bool collective_failed = false;

  MpiEnvironment() {
    int initialized = 0;
    SG_MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
      int provided = 0;  // only the thread that initialised MPI calls it (backward runs there)
      SG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      owns_mpi = true;
    }
    SG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
  ~MpiEnvironment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || !owns_mpi) return;
    if (collective_failed) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }
};

MpiEnvironment& environment() {
  static MpiEnvironment env;
  return env;
}

MPI_Datatype mpi_type(DType dtype) { return dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT; }

int mpi_count(const char* op, const Tensor& t) {
  SG_CHECK(t.numel() <= INT_MAX, "mpi {}: {} elements exceed MPI's count limit {} (shape {})", op,
           t.numel(), INT_MAX, t.shape());
  return static_cast<int>(t.numel());
}

struct RankInfo {
  int rank;
  int world_size;
  std::chrono::milliseconds timeout;
};

// One MPI request. wait() polls it: first by spinning (a small allreduce finishes in microseconds),
// then with short sleeps, and throws once the communicator's timeout has passed without completion.
class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, const char* op, RankInfo info, Tensor buffer)
      : request_(request), op_(op), info_(info), buffer_(std::move(buffer)) {}
  ~MpiWork() override {
    // MPI may not free a running collective's request; keep its buffer alive for MPI instead of
    // letting it write into freed memory (reached only when an exception abandons the collective).
    if (!done_) new Tensor(std::move(buffer_));
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    SG_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    done_ = flag != 0;
    return done_;
  }
  void wait() override {
    constexpr int kSpins = 20000;
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0; !test(); ++polls) {
      if (polls < kSpins) continue;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > info_.timeout) fail(waited);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  [[noreturn]] void fail(std::chrono::steady_clock::duration waited) {
    environment().collective_failed = true;
    const double seconds = std::chrono::duration<double>(waited).count();
    const std::string message = fmt::format(
        "mpi {}: rank {} of {} waited {:.1f} s for the other ranks without the collective "
        "completing; a rank has probably died or stopped calling the same collectives (the limit "
        "is SEQGRAD_DIST_TIMEOUT seconds); aborting the job",
        op_, info_.rank, info_.world_size, seconds);
    throw Error(message);
  }

  MPI_Request request_;
  const char* op_;
  RankInfo info_;
  Tensor buffer_;  // the memory MPI reads and writes until the request completes
  bool done_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    environment();
    // A communicator of our own: user code's MPI traffic on MPI_COMM_WORLD cannot match ours.
    SG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    SG_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    SG_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    SG_MPI_CHECK(MPI_Comm_size(comm_, &world_size_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !environment().collective_failed) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "mpi"; }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

  void broadcast_bytes(std::span<std::byte> bytes, int root) override {
    SG_CHECK(bytes.size() <= INT_MAX, "mpi broadcast: {} bytes exceed MPI's count limit", bytes.size());
    MPI_Request request;
    SG_MPI_CHECK(MPI_Ibcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, comm_, &request));
    MpiWork(request, "broadcast", info(), Tensor()).wait();
  }

 protected:
  std::unique_ptr<Work> start_allreduce_sum(const Tensor& buffer) override {
    MPI_Request request;
    SG_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer.raw_data(), mpi_count("allreduce", buffer),
                                mpi_type(buffer.dtype()), MPI_SUM, comm_, &request));
    return std::make_unique<MpiWork>(request, "allreduce", info(), buffer);
  }
  void broadcast_contiguous(const Tensor& buffer, int root) override {
    MPI_Request request;
    SG_MPI_CHECK(MPI_Ibcast(buffer.raw_data(), mpi_count("broadcast", buffer), mpi_type(buffer.dtype()),
                            root, comm_, &request));
    MpiWork(request, "broadcast", info(), buffer).wait();
  }
  void barrier_impl() override {
    MPI_Request request;
    SG_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    MpiWork(request, "barrier", info(), Tensor()).wait();
  }
  void check_device(const char* op, const Tensor& t) const override {
    SG_CHECK_DEVICE(t.device().is_cpu(),
                    "mpi {}: the tensor is on {}; the MPI communicator moves CPU tensors (the NCCL "
                    "communicator moves CUDA tensors)",
                    op, t.device());
  }

 private:
  RankInfo info() const { return {rank_, world_size_, timeout()}; }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_world() { return std::make_shared<MpiCommunicator>(); }

}  // namespace seqgrad::dist
