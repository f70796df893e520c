// DistributedDataParallel: the replica check and broadcast at construction, the bucket layout, and
// one synchronised step (hooks fill buckets during backward; the step ends by averaging them back).
#include "nn/distributed.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_set>

#include "core/autograd_hooks.h"

namespace seqgrad::nn {
namespace {

constexpr double kBytesPerMB = 1024.0 * 1024.0;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The leaves the graph behind `loss` reaches (iterative, like the engine).
std::unordered_set<const TensorImpl*> reachable_leaves(const Tensor& loss) {
  std::unordered_set<const TensorImpl*> leaves;
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack;
  if (loss.grad_fn()) stack.push_back(loss.grad_fn().get());
  else leaves.insert(loss.impl());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const InputEdge& e : n->inputs) {
      if (e.fn) stack.push_back(e.fn.get());
      else if (e.leaf) leaves.insert(e.leaf.get());
    }
  }
  return leaves;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module& module,
                                                 std::shared_ptr<dist::Communicator> communicator,
                                                 Options options)
    : module_(module), communicator_(std::move(communicator)), options_(options) {
  SG_CHECK(communicator_ != nullptr, "DistributedDataParallel: the communicator is null");
  SG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
           "DistributedDataParallel: bucket_cap_mb ({}) and first_bucket_cap_mb ({}) must be > 0",
           options.bucket_cap_mb, options.first_bucket_cap_mb);
  SG_CHECK(options.progress_interval.count() >= 0, "DistributedDataParallel: progress_interval ({} us) must be >= 0",
           options.progress_interval.count());
  for (auto& [name, tensor] : module_.named_parameters())
    if (tensor.requires_grad()) {
      params_.emplace_back();
      params_.back().name = name;
      params_.back().tensor = tensor;
    }
  check_replicas_match();
  broadcast_state();
  build_buckets(options);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook_id = autograd::register_post_accumulate_grad_hook(
        params_[i].tensor, [this, i](const Tensor&) { on_gradient_ready(i); });
  if (options.progress_interval.count() > 0)
    progress_hook_id_ = autograd::register_backward_progress_hook([this] { progress_reductions(); },
                                                                  options.progress_interval);
}

DistributedDataParallel::~DistributedDataParallel() {
  for (const Parameter& p : params_) autograd::remove_post_accumulate_grad_hook(p.hook_id);
  if (progress_hook_id_ != 0) autograd::remove_backward_progress_hook(progress_hook_id_);
}

// Different models on different ranks would make every later collective mismatch (or hang): rank
// 0's parameter count and total size are compared on every rank first.
void DistributedDataParallel::check_replicas_match() const {
  int64_t values = 0;
  for (const Parameter& p : params_) values += p.tensor.numel();
  const Device device = params_.empty() ? Device::cpu() : params_.front().tensor.device();  // NCCL: a GPU's
  Tensor root = from_vector<double>({static_cast<double>(params_.size()), static_cast<double>(values)}, {2})
                    .to(device);
  communicator_->broadcast(root, 0);
  const std::vector<double> r = root.to_vector<double>();
  SG_CHECK(r[0] == params_.size() && r[1] == values,
           "DistributedDataParallel: rank {} has {} parameters ({} values) but rank 0 has {} ({} "
           "values); every rank must build the same model",
           communicator_->rank(), params_.size(), values, static_cast<int64_t>(r[0]),
           static_cast<int64_t>(r[1]));
}

void DistributedDataParallel::broadcast_state() const {
  for (const Parameter& p : params_) communicator_->broadcast(p.tensor, 0);
  if (!options_.broadcast_buffers) return;
  for (auto& [name, buffer] : module_.named_buffers())
    if (buffer.dtype() == DType::f32 || buffer.dtype() == DType::f64) communicator_->broadcast(buffer, 0);
}

// Parameters in reverse registration order, one open bucket per (dtype, device); a bucket closes
// once it holds cap bytes (the first one of each kind first_bucket_cap_mb, as in PyTorch).
void DistributedDataParallel::build_buckets(const Options& options) {
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    bool first = true;
  };
  std::map<std::pair<int, int>, Open> open;  // (dtype, device index) -> bucket being filled
  auto close = [this](Open& o) {
    Bucket b;
    b.params = std::move(o.params);
    buckets_.push_back(std::move(b));
    o = Open();
    o.first = false;
  };
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& t = params_[i].tensor;
    Open& o = open[{static_cast<int>(t.dtype()), t.device().is_cpu() ? -1 : t.device().index}];
    o.params.push_back(i);
    o.bytes += t.numel() * static_cast<int64_t>(element_size(t.dtype()));
    const double cap_mb = o.first ? options.first_bucket_cap_mb : options.bucket_cap_mb;
    if (o.bytes >= cap_mb * kBytesPerMB) close(o);
  }
  for (auto& [kind, o] : open)
    if (!o.params.empty()) close(o);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t numel = 0;
    for (size_t i : buckets_[b].params) {
      params_[i].bucket = b;
      params_[i].offset = numel;
      numel += params_[i].tensor.numel();
    }
    const Tensor& first = params_[buckets_[b].params.front()].tensor;
    buckets_[b].flat = zeros({numel}, {.dtype = first.dtype(), .device = first.device()});
  }
}

void DistributedDataParallel::backward(const Tensor& loss, BackwardOptions options) {
  prepare_for_backward(loss);
  try {
    loss.backward({}, options);
  } catch (...) {
    in_step_ = false;  // the hooks go idle again
    throw;
  }
  finish_gradient_synchronization();
}

void DistributedDataParallel::prepare_for_backward(const Tensor& loss) {
  if (no_sync_depth_ > 0) return;
  SG_CHECK(!loss.defined() || loss.requires_grad(),
           "DistributedDataParallel: the loss does not require grad (was it computed under NoGradGuard?)");
  SG_CHECK(!in_step_,
           "DistributedDataParallel: prepare_for_backward called twice without "
           "finish_gradient_synchronization in between");
  for (Parameter& p : params_) p.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.timeline = {};
  }
  next_bucket_ = 0;
  in_step_ = true;
  step_thread_ = std::this_thread::get_id();
  stats_.last_step_start = std::chrono::steady_clock::now();
  if (options_.find_unused_parameters || !loss.defined()) mark_unreached_parameters_ready(loss);
}

void DistributedDataParallel::mark_unreached_parameters_ready(const Tensor& loss) {
  std::unordered_set<const TensorImpl*> reached;
  if (loss.defined()) reached = reachable_leaves(loss);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].tensor.impl())) on_gradient_ready(i);
}

// A parameter's gradient is final for this step: copy it into its bucket; the bucket's allreduce
// starts once its last gradient arrived (and every earlier bucket has started).
void DistributedDataParallel::on_gradient_ready(size_t index) {
  if (!in_step_) return;  // a plain loss.backward() or one within no_sync()
  Parameter& p = params_[index];
  SG_CHECK(!p.ready,
           "DistributedDataParallel: parameter '{}' received its gradient twice in one step "
           "(backward through the same graph twice inside one DistributedDataParallel::backward?)",
           p.name);
  p.ready = true;
  Bucket& bucket = buckets_[p.bucket];
  {
    NoGradGuard no_grad;
    Tensor slot = bucket.flat.narrow(0, p.offset, p.tensor.numel());  // (numel,)
    Tensor grad = p.tensor.grad();
    if (grad.defined()) slot.copy_(grad.reshape({p.tensor.numel()}));
    else slot.zero_();
  }
  if (--bucket.pending == 0) launch_ready_buckets();
  progress_reductions();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    b.timeline.launched = seconds_since(stats_.last_step_start);
    b.work = communicator_->allreduce_async(b.flat, dist::ReduceOp::mean);
    stats_.bytes_allreduced += b.flat.numel() * static_cast<int64_t>(element_size(b.flat.dtype()));  // (n,)
  }
}

// Tests the reductions in flight (which lets MPI move them forward) and notes when each completes.
void DistributedDataParallel::progress_reductions() {
  if (!in_step_ || std::this_thread::get_id() != step_thread_) return;  // another thread's backward
  for (size_t b = 0; b < next_bucket_; ++b) {
    Bucket& bucket = buckets_[b];
    if (bucket.timeline.completed == 0 && bucket.work->test())
      bucket.timeline.completed = seconds_since(stats_.last_step_start);
  }
}

void DistributedDataParallel::missing_gradients() const {
  std::string missing;
  for (const Parameter& p : params_)
    if (!p.ready) missing += (missing.empty() ? "" : ", ") + p.name;
  throw Error(fmt::format(
      "DistributedDataParallel: backward finished but these parameters received no gradient on rank "
      "{}: {}; construct it with find_unused_parameters = true if they are unused on purpose",
      communicator_->rank(), missing));
}

void DistributedDataParallel::finish_gradient_synchronization() {
  if (!in_step_) return;  // within no_sync()
  in_step_ = false;
  if (next_bucket_ < buckets_.size()) missing_gradients();
  const auto wait_start = std::chrono::steady_clock::now();
  stats_.last_backward_end = seconds_since(stats_.last_step_start);
  NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    b.work->wait();
    if (b.timeline.completed == 0) b.timeline.completed = seconds_since(stats_.last_step_start);
    for (size_t i : b.params) {
      const Parameter& p = params_[i];
      Tensor mean = b.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
      Tensor grad = p.tensor.grad();
      if (grad.defined()) grad.copy_(mean);
      else p.tensor.set_grad(mean.clone());
    }
  }
  stats_.exposed_wait_seconds += seconds_since(wait_start);
  stats_.last_step_end = seconds_since(stats_.last_step_start);
  stats_.backward_seconds += stats_.last_step_end;
  stats_.last_step_buckets.clear();
  for (const Bucket& b : buckets_) stats_.last_step_buckets.push_back(b.timeline);
  ++stats_.steps;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& b : buckets_) {
    names.emplace_back();
    for (size_t i : b.params) names.back().push_back(params_[i].name);
  }
  return names;
}

std::vector<int64_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<int64_t> bytes;
  for (const Bucket& b : buckets_) bytes.push_back(b.flat.numel() * static_cast<int64_t>(element_size(b.flat.dtype())));
  return bytes;
}

int64_t DistributedDataParallel::bytes_per_step() const {
  int64_t total = 0;
  for (int64_t b : bucket_bytes()) total += b;
  return total;
}

GlobalMeanLoss global_mean_loss(dist::Communicator& communicator, const Tensor& local_mean, int64_t local_count,
                                Device device) {
  SG_CHECK(local_count == 0 || local_mean.defined(), "global_mean_loss: {} items but no loss", local_count);
  const double local_sum = local_count > 0 ? local_mean.item() * static_cast<double>(local_count) : 0.0;
  Tensor totals = from_vector<double>({local_sum, static_cast<double>(local_count)}, {2}).to(device);  // (sum, count)
  communicator.allreduce(totals);
  const std::vector<double> t = totals.to_vector<double>();
  GlobalMeanLoss out;
  out.count = static_cast<int64_t>(t[1]);
  out.mean = out.count > 0 ? t[0] / t[1] : 0.0;
  if (local_count > 0)
    out.local = local_mean * (static_cast<double>(local_count) * communicator.world_size() / t[1]);
  return out;
}

}  // namespace seqgrad::nn
