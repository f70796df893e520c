// DistributedDataParallel: data-parallel training of a Module over a dist::Communicator, with
// PyTorch's design. Each rank holds a full replica and runs forward and backward on its shard of the
// batch; rank 0's parameters and buffers are broadcast at construction; gradients are grouped into
// buckets (about 25 MB, parameters in reverse registration order, which is roughly the order
// backward produces them) and each bucket's allreduce starts from a post-accumulate-grad hook as
// soon as its last gradient is ready, so communication overlaps the rest of backward.
//
//   nn::DistributedDataParallel ddp(model, dist::world());
//   Tensor loss = loss_on_my_shard(model, batch);   // mean over this rank's examples
//   ddp.backward(loss);                             // .grad = mean over ranks of each rank's .grad
//   opt.step();
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "nn/module.h"

namespace seqgrad::nn {

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25.0;       // PyTorch's bucket_cap_mb
  double first_bucket_cap_mb = 1.0;  // the first bucket is small so its allreduce starts early
  bool broadcast_buffers = true;     // buffers (state that is not trained) from rank 0 as well
  // A parameter this rank's loss does not reach (e.g. a layer the batch skipped) is found by walking
  // the graph before backward and contributes its current .grad (zeros if none), so every rank
  // completes every bucket. Off: such a parameter is an error naming it (saves the walk).
  bool find_unused_parameters = true;
  // MPI moves a non-blocking allreduce forward only inside MPI calls: while backward runs, the
  // engine lets the communicator progress the reductions in flight at most this often
  // (autograd::register_backward_progress_hook). Zero: only when a parameter's gradient arrives.
  std::chrono::microseconds progress_interval{200};
};

// When each bucket's allreduce of the last synchronised step started and was seen complete, in
// seconds since the step's start (prepare_for_backward). Completion is seen at a progress call or
// in the final wait, so `completed` is an upper bound, as close as the progress interval.
struct BucketTimeline {
  double launched = 0;
  double completed = 0;
};

// Communication of the synchronised steps so far (for logs and docs/scaling.md), and the timeline
// of the last one.
struct DistributedStats {
  int64_t steps = 0;                // backward() calls that averaged gradients
  int64_t bytes_allreduced = 0;     // gradient bytes this rank handed to allreduce
  double backward_seconds = 0;      // prepare_for_backward to finish_gradient_synchronization
  double exposed_wait_seconds = 0;  // of which waiting for allreduces after backward had finished
  // prepare_for_backward's time (the ranks of one machine share this clock)
  std::chrono::steady_clock::time_point last_step_start;
  double last_backward_end = 0;     // finish_gradient_synchronization's start, seconds since last_step_start
  double last_step_end = 0;         // its end: every bucket reduced and copied back
  std::vector<BucketTimeline> last_step_buckets;
};

class DistributedDataParallel {
 public:
  using Options = DistributedDataParallelOptions;
  // Broadcasts rank 0's parameters (and buffers) into `module` on every rank; collective: every
  // rank builds its DistributedDataParallel at the same point with the same model architecture.
  DistributedDataParallel(Module& module, std::shared_ptr<dist::Communicator> communicator,
                          Options options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() const { return module_; }
  dist::Communicator& communicator() const { return *communicator_; }

  // loss.backward(); when it returns, every parameter's .grad is the mean over ranks of the ranks'
  // .grad. Collective (every rank calls it once per step). Within no_sync(), a plain local backward.
  void backward(const Tensor& loss, BackwardOptions options = {});
  // backward() in two halves, for code that runs the backward itself (e.g. through a GradScaler):
  // prepare_for_backward(loss), then any backward of loss (its hooks start the allreduces), then
  // finish_gradient_synchronization() before the gradients are read. Within no_sync() both do nothing.
  // A rank without examples in this step passes an undefined loss and runs no backward: it
  // contributes its current gradients (zeros after zero_grad) and still takes part in every bucket.
  void prepare_for_backward(const Tensor& loss);
  void finish_gradient_synchronization();

  // While the guard lives, backward() only accumulates local gradients (gradient accumulation over
  // micro-batches); the first backward() after it averages everything accumulated.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp) { ++ddp_.no_sync_depth_; }
    ~NoSyncGuard() { --ddp_.no_sync_depth_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The parameters of each bucket, in allreduce order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // Gradient bytes each rank allreduces per synchronised step, in all and per bucket.
  int64_t bytes_per_step() const;
  std::vector<int64_t> bucket_bytes() const;
  const DistributedStats& stats() const { return stats_; }

 private:
  struct Parameter {
    std::string name;
    Tensor tensor;
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer, in elements
    bool ready = false;  // its gradient is in the bucket for this step
    uint64_t hook_id = 0;
  };
  struct Bucket {
    Tensor flat;                 // (n,) every gradient of the bucket, concatenated
    std::vector<size_t> params;  // indices into params_
    size_t pending = 0;          // parameters not ready yet in this step
    std::unique_ptr<dist::Work> work;
    BucketTimeline timeline;
  };

  void check_replicas_match() const;
  void broadcast_state() const;
  void build_buckets(const Options& options);
  void mark_unreached_parameters_ready(const Tensor& loss);
  void on_gradient_ready(size_t index);
  void launch_ready_buckets();
  void progress_reductions();
  [[noreturn]] void missing_gradients() const;

  Module& module_;
  std::shared_ptr<dist::Communicator> communicator_;
  Options options_;
  std::vector<Parameter> params_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;  // buckets are launched in index order, the same on every rank
  bool in_step_ = false;  // between prepare_for_backward and finish_gradient_synchronization
  uint64_t progress_hook_id_ = 0;  // 0: none
  std::thread::id step_thread_;    // MPI is called from this thread only (MPI_THREAD_FUNNELED)
  int no_sync_depth_ = 0;
  DistributedStats stats_;
};

// The ranks' shards of a global batch may hold different numbers of items (tokens, examples).
// DDP averages gradients over ranks, so each rank's mean loss is weighted by
// local_count x world_size / global_count: the averaged gradient is then exactly the gradient of the
// mean over the global batch. One allreduce of two numbers (on `device`: the communicator's, e.g. a
// GPU for NCCL); collective.
struct GlobalMeanLoss {
  Tensor local;             // this rank's weighted loss, for backward (undefined for an empty shard)
  double mean = 0;          // the global batch's mean loss (the same on every rank)
  int64_t count = 0;        // the global batch's items
};
GlobalMeanLoss global_mean_loss(dist::Communicator& communicator, const Tensor& local_mean, int64_t local_count,
                                Device device = Device::cpu());

}  // namespace seqgrad::nn
