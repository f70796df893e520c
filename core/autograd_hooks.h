// Post-accumulate-grad hooks on leaf tensors (PyTorch's Tensor.register_post_accumulate_grad_hook):
// a hook runs once per backward pass, after the leaf's .grad has received every contribution of
// that pass (the engine counts the pass's edges into the leaf, so a parameter used at every decoder
// step fires once, after its last use). DistributedDataParallel starts a bucket's allreduce from
// here while backward goes on. autograd::grad, which leaves .grad alone, runs none.
//
// Backward progress hooks: called by the engine between nodes of every backward pass (of this
// thread or any other), each at most once per its interval. DistributedDataParallel lets MPI
// progress its allreduces there: MPI moves a non-blocking collective forward only inside MPI calls,
// so without them a reduction started early in backward would mostly run after backward's end.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace seqgrad::autograd {

using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// `leaf` must be a leaf that requires grad; returns an id for remove_post_accumulate_grad_hook.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);
void remove_post_accumulate_grad_hook(uint64_t id);

using BackwardProgressHook = std::function<void()>;

// Returns an id for remove_backward_progress_hook. interval 0: after every node.
uint64_t register_backward_progress_hook(BackwardProgressHook hook, std::chrono::microseconds interval);
void remove_backward_progress_hook(uint64_t id);

}  // namespace seqgrad::autograd
