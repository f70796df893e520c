// The backend-independent half of every collective (checks, non-contiguous staging, mean), the
// single-process communicator, and the choice of the job's communicator (the one place that knows
// whether MPI was built).
#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#ifdef SG_MPI
#include "dist/communicator_mpi.h"
#endif
#ifdef SG_NCCL
#include "dist/communicator_nccl.h"
#endif

namespace seqgrad::dist {
namespace {

// A collective already finished (a zero-element tensor, or one rank).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Finishes a collective that ran on `buffer`: scales the sum into a mean and copies the buffer
// back into the caller's tensor when that was a non-contiguous view (staged through a copy).
class StagedWork final : public Work {
 public:
  StagedWork(std::unique_ptr<Work> inner, Tensor dst, Tensor buffer, double scale)
      : inner_(std::move(inner)), dst_(std::move(dst)), buffer_(std::move(buffer)), scale_(scale) {}
  void wait() override {
    if (finished_) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (!finished_ && inner_->test()) finish();
    return finished_;
  }

 private:
  void finish() {
    NoGradGuard no_grad;
    if (scale_ != 1.0) buffer_.mul_(scale_);
    if (buffer_.impl() != dst_.impl()) dst_.copy_(buffer_);
    else if (scale_ == 1.0) dst_.bump_version();  // the backend wrote into dst's memory
    finished_ = true;
  }
  std::unique_ptr<Work> inner_;
  Tensor dst_, buffer_;
  double scale_;
  bool finished_ = false;
};

std::chrono::milliseconds timeout_from_environment() {
  constexpr std::chrono::milliseconds kDefault{300'000};
  const char* text = std::getenv("SEQGRAD_DIST_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefault;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  SG_CHECK(end != text && *end == '\0' && seconds > 0 && seconds < 1e7,
           "SEQGRAD_DIST_TIMEOUT: expected a number of seconds > 0, got '{}'", text);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return std::atoi(value);
  }
  return 1;
}

}  // namespace

Communicator::Communicator() : timeout_(timeout_from_environment()) {}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  SG_CHECK(timeout.count() > 0, "communicator: timeout must be > 0 ms, got {} ms", timeout.count());
  timeout_ = timeout;
}

void Communicator::check_tensor(const char* op, const Tensor& t) const {
  SG_CHECK(t.defined(), "{}: the tensor is undefined", op);
  SG_CHECK_DTYPE(t.dtype() == DType::f32 || t.dtype() == DType::f64,
                 "{}: expected a float32 or float64 tensor, got {} (shape {})", op, t.dtype(), t.shape());
  check_device(op, t);
}

std::unique_ptr<Work> Communicator::allreduce_async(const Tensor& t, ReduceOp op) {
  check_tensor("allreduce", t);
  if (t.numel() == 0) return std::make_unique<CompletedWork>();
  const double scale = op == ReduceOp::mean ? 1.0 / world_size() : 1.0;
  NoGradGuard no_grad;
  Tensor buffer = t.is_contiguous() ? t : t.contiguous();  // a view is staged through a copy
  return std::make_unique<StagedWork>(start_allreduce_sum(buffer), t, buffer, scale);
}

void Communicator::allreduce(const Tensor& t, ReduceOp op) { allreduce_async(t, op)->wait(); }

void Communicator::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t);
  SG_CHECK(root >= 0 && root < world_size(), "broadcast: root {} is not a rank of this job (world size {})",
           root, world_size());
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  if (t.is_contiguous()) {
    broadcast_contiguous(t, root);
    t.bump_version();
    return;
  }
  Tensor buffer = t.contiguous();
  broadcast_contiguous(buffer, root);
  Tensor(t).copy_(buffer);
}

void Communicator::barrier() { barrier_impl(); }

bool Communicator::any_rank(bool value) {
  Tensor flag = full({1}, value ? 1.0 : 0.0);
  allreduce(flag);
  return flag.item() > 0;
}

std::unique_ptr<Work> LocalCommunicator::start_allreduce_sum(const Tensor&) {
  return std::make_unique<CompletedWork>();
}

void LocalCommunicator::broadcast_contiguous(const Tensor&, int) {}
void LocalCommunicator::abort(int code) { std::exit(code); }
void LocalCommunicator::broadcast_bytes(std::span<std::byte>, int root) {
  SG_CHECK(root == 0, "broadcast: root {} is not a rank of this job (world size 1)", root);
}

bool mpi_available() {
#ifdef SG_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() { return launcher_world_size() > 1 || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr; }

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> communicator = []() -> std::shared_ptr<Communicator> {
#ifdef SG_MPI
    if (launched_by_mpi()) return make_mpi_world();
#endif
    SG_CHECK(launcher_world_size() <= 1,
             "distributed: this process was started by an MPI launcher with {} processes, but seqgrad "
             "was built without MPI (install libopenmpi-dev and rebuild; meson option mpi)",
             launcher_world_size());
    return std::make_shared<LocalCommunicator>();
  }();
  return communicator;
}

bool nccl_available() {
#ifdef SG_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> nccl_world(Device device) {
#ifdef SG_NCCL
  return make_nccl_communicator(world(), device);
#else
  throw DeviceError(fmt::format("distributed: NCCL collectives for {} need seqgrad built with the CUDA backend and "
                                "NCCL (meson options cuda and nccl); this build has none", device));
#endif
}

int run_on_every_rank(const std::function<int()>& body) {
  if (!launched_by_mpi()) return body();
  try {
    return body();
  } catch (const std::exception& e) {
    std::shared_ptr<Communicator> job = world();
    if (job->world_size() == 1) throw;
    fmt::print(stderr, "error: rank {} of {}: {}\n", job->rank(), job->world_size(), e.what());
    std::fflush(stderr);
    job->abort(1);
  }
  return 1;  // not reached: abort() ends the process
}

}  // namespace seqgrad::dist
