// Collective communication between the processes of a data-parallel job (PyTorch's process group):
// allreduce, broadcast and barrier on float32/float64 tensors, over MPI (dist/communicator_mpi.cpp), NCCL for
// CUDA tensors (dist/communicator_nccl.cpp), or within one process (world size 1).
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ops/ops.h"

namespace seqgrad::dist {

enum class ReduceOp { sum, mean };

// A collective in flight. wait() returns when this rank's result is in the tensor; it throws when
// the collective fails or does not finish within the communicator's timeout.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Whether the collective has finished; also lets MPI progress it (MPI moves non-blocking
  // collectives forward only inside MPI calls).
  virtual bool test() = 0;
};

// Every rank must call the same collectives in the same order with tensors of the same shape and
// dtype (as with MPI and torch.distributed); the tensors may be non-contiguous views.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl" or "local"

  // t becomes the element-wise sum (or mean) of every rank's t, in place.
  void allreduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // The same, started now and finished by the returned Work's wait() (t must not be touched before).
  std::unique_ptr<Work> allreduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // t becomes root's t on every rank, in place.
  void broadcast(const Tensor& t, int root = 0);
  void barrier();
  // Raw bytes from root to every rank (for bootstrap data such as NCCL's unique id).
  virtual void broadcast_bytes(std::span<std::byte> bytes, int root) = 0;
  // Whether `value` is true on any rank (one allreduce): decisions such as "stop now" that one
  // rank may reach alone (a Ctrl-C) must be taken by all, or the others wait in a collective.
  bool any_rank(bool value);
  // Ends every process of the job at once (MPI_Abort) with exit code `code`.
  [[noreturn]] virtual void abort(int code) = 0;

  // How long a collective may wait for the other ranks before it throws: a rank that died or hangs
  // then takes the job down with a message instead of leaving the others blocked for ever.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout);

 protected:
  Communicator();
  // The backends' part: contiguous tensors of a supported dtype and device, at least one element.
  virtual std::unique_ptr<Work> start_allreduce_sum(const Tensor& buffer) = 0;
  virtual void broadcast_contiguous(const Tensor& buffer, int root) = 0;
  virtual void barrier_impl() = 0;
  // Throws when the backend cannot move tensors on this device (e.g. MPI and CUDA tensors).
  virtual void check_device(const char* op, const Tensor& t) const = 0;

 private:
  void check_tensor(const char* op, const Tensor& t) const;
  std::chrono::milliseconds timeout_;
};

// The single process of a job without MPI: every collective leaves its tensor as it is (the sum
// over one rank), so code written for N ranks runs unchanged on one.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void broadcast_bytes(std::span<std::byte>, int root) override;
  [[noreturn]] void abort(int code) override;

 protected:
  std::unique_ptr<Work> start_allreduce_sum(const Tensor& buffer) override;
  void broadcast_contiguous(const Tensor&, int root) override;
  void barrier_impl() override {}
  void check_device(const char*, const Tensor&) const override {}
};

// Whether this build has the MPI backend (meson option mpi).
bool mpi_available();
// Whether this process was started by an MPI launcher (mpirun/mpiexec/srun set its environment).
bool launched_by_mpi();

// The job's communicator over all its processes: MPI when this process was started by mpirun (and
// the build has MPI), otherwise a LocalCommunicator. Created on first call and shared; the MPI
// environment is finalised at exit. SEQGRAD_DIST_TIMEOUT (seconds) sets the collectives' timeout
// (default 300).
std::shared_ptr<Communicator> world();

// The job's NCCL communicator for CUDA tensors on `device` (this rank's GPU), bootstrapped over
// world(). Throws when seqgrad was built without NCCL (it needs the CUDA backend and libnccl).
std::shared_ptr<Communicator> nccl_world(Device device);
bool nccl_available();

// Runs a program's body. In a job of several ranks an error that escapes it is printed with the
// rank and then ends the whole job (the other ranks may be waiting in a collective for this one);
// otherwise it propagates as usual.
int run_on_every_rank(const std::function<int()>& body);

}  // namespace seqgrad::dist
