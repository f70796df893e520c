// What core needs from ops/, the layer above it: the few ops the autograd engine and host reads
// call (add to accumulate gradients, clone, a copy to another device). ops/ registers them once at
// start-up (ops/elementwise.cpp); this is the ONE way core reaches ops, so the core library links
// without ops (tests/core_links_alone.cpp links every core object alone). The Tensor members that
// core/tensor.h declares for ops/ (sum, softmax, clone, to, ...) are ops' API: core never calls them.
#pragma once

#include "core/tensor.h"

namespace seqgrad {

struct OpsHooks {
  Tensor (*add)(const Tensor& a, const Tensor& b) = nullptr;      // differentiable a + b
  void (*add_inplace)(const Tensor& acc, const Tensor& g) = nullptr;  // acc += g, same shape and dtype
  Tensor (*clone)(const Tensor& t) = nullptr;                     // differentiable copy
  Tensor (*to_device)(const Tensor& t, Device device) = nullptr;  // differentiable; t itself when already there
};

// Called by ops/ during static initialisation.
void register_ops_hooks(const OpsHooks& hooks);
// The registered hooks; throws "core: <what> needs the ops library (link seqgrad's ops)" when
// ops/ is not linked.
const OpsHooks& ops_hooks(const char* what);

}  // namespace seqgrad
