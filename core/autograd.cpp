// The backward engine: dependency counting over the graph reachable from the roots, then nodes
// run in an order where each sees its complete output gradient. No recursion anywhere.
#include "core/autograd.h"

#include "core/autograd_hooks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/ops_hooks.h"

namespace seqgrad {
namespace {

thread_local bool grad_enabled = true;
thread_local const char* current_backward_op = nullptr;
Tensor add_grads(const Tensor& a, const Tensor& b) { return ops_hooks("gradient accumulation").add(a, b); }

// A gradient buffer nobody else can see: no other handle, no view of its storage, no history.
bool exclusively_owned(const std::shared_ptr<TensorImpl>& t) {
  return t.use_count() == 1 && t->storage.use_count() == 1 && !t->grad_fn && Tensor(t).is_contiguous();
}

// acc + g. Without create_graph (the backward is not itself recorded), a buffer the engine owns
// alone is updated in place instead of being replaced by a fresh sum: a parameter used at every
// decoder step would otherwise allocate and write a new full-size gradient per step.
void accumulate(Tensor& acc, const Tensor& g, bool create_graph) {
  if (!acc.defined()) {
    acc = g;
    return;
  }
  const auto add_inplace = ops_hooks("gradient accumulation").add_inplace;
  if (!create_graph && add_inplace && acc.shape() == g.shape() && acc.dtype() == g.dtype() &&
      acc.impl() != g.impl() && exclusively_owned(acc.impl_ptr())) {
    add_inplace(acc, g);
    return;
  }
  acc = add_grads(acc, g);
}

}  // namespace

// Each node owns its inputs' nodes, so letting the members go would free a chain recursively, one
// stack frame per node. Instead the nodes this one solely owns are collected and released in a loop.
// Saved tensors go first: they may hold further references to the input nodes, never the last one.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  auto release = [&pending](Node& n) {
    n.backward = nullptr;
    n.saved_output.reset();
    n.grad = Tensor();
    for (InputEdge& e : n.inputs)
      if (e.fn) pending.push_back(std::move(e.fn));
    n.inputs.clear();
  };
  release(*this);
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    if (n.use_count() == 1) release(*n);  // n's destructor then has nothing left to free
  }
}

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

const Tensor& SavedTensor::get() const {
  if (tensor_.defined() && tensor_.version() != version_) {
    throw Error(fmt::format(
        "{}: a tensor it saved for backward (shape {}, {}) was modified by an in-place operation "
        "(version {}, saved at version {}); use an out-of-place op or clone() before modifying it",
        current_backward_op ? current_backward_op : "backward", tensor_.shape(), tensor_.dtype(),
        tensor_.version(), version_));
  }
  return tensor_;
}

void Grads::add(int i, const Tensor& g) {
  const InputEdge& in = node_.inputs[i];
  if (!in.wants_grad() || !g.defined()) return;
  SG_CHECK_SHAPE(g.shape() == in.shape, "{} backward: gradient for input {} has shape {}, expected {}",
                 node_.name, i, g.shape(), in.shape);
  SG_CHECK_DTYPE(g.dtype() == in.dtype, "{} backward: gradient for input {} has dtype {}, expected {}",
                 node_.name, i, g.dtype(), in.dtype);
  SG_CHECK_DEVICE(g.device() == in.device, "{} backward: gradient for input {} is on {}, expected {}",
                  node_.name, i, g.device(), in.device);
  accumulate(results_[i], g, GradMode::is_enabled());
}

Tensor Grads::accumulator(int i) const {
  if (GradMode::is_enabled() || results_[i].defined()) return {};
  const InputEdge& in = node_.inputs[i];
  const std::shared_ptr<TensorImpl>* acc = nullptr;
  if (in.fn) acc = &in.fn->grad.impl_ptr();
  else if (in.leaf && into_leaves_) acc = &in.leaf->grad;
  if (acc == nullptr || !*acc || !exclusively_owned(*acc)) return {};
  if ((*acc)->shape != in.shape || (*acc)->dtype != in.dtype || (*acc)->storage->device != in.device) return {};
  return Tensor(*acc);
}

Tensor Grads::output() const {
  SG_CHECK(node_.saved_output != nullptr, "{} backward: the op did not save its output", node_.name);
  if (node_.saved_output->storage->version != node_.saved_output_version) {
    throw Error(fmt::format(
        "{}: its output was modified by an in-place operation after being saved for backward "
        "(version {}, saved at version {}); use an out-of-place op or clone() first",
        node_.name, node_.saved_output->storage->version, node_.saved_output_version));
  }
  auto impl = std::make_shared<TensorImpl>(*node_.saved_output);
  if (GradMode::is_enabled()) {  // create_graph: the output keeps its history
    impl->grad_fn = self_;
    impl->requires_grad = true;
  }
  return Tensor(std::move(impl));
}

const char* intern_op_name(std::string_view name) {
  // A node-based set: an element's address survives rehashing, so the pointers stay valid.
  static std::mutex mutex;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.emplace(name).first->c_str();
}

bool any_requires_grad(std::span<const Tensor> inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record_node(const char* op, Tensor y, std::span<const Tensor> inputs, BackwardFn fn,
                   SaveOutput save_output) {
  auto node = std::make_shared<Node>();
  node->name = op;
  node->backward = std::move(fn);
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    InputEdge edge;
    if (t.defined()) {
      edge.shape = t.shape();
      edge.dtype = t.dtype();
      edge.device = t.device();
      if (t.requires_grad()) {
        if (t.grad_fn()) edge.fn = t.grad_fn();
        else edge.leaf = t.impl_ptr();
      }
    }
    node->inputs.push_back(std::move(edge));
  }
  if (save_output == SaveOutput::yes) {
    node->saved_output = std::make_shared<TensorImpl>(*y.impl());
    node->saved_output->grad_fn.reset();
    node->saved_output->requires_grad = false;
    node->saved_output_version = y.version();
  }
  TensorImpl* impl = y.impl();
  impl->grad_fn = std::move(node);
  impl->requires_grad = true;
  return y;
}

namespace {

// A node's engine scratch as an enclosing pass left it. A backward function may itself call
// autograd::grad (the fused ops do under create_graph); that nested pass reuses the scratch of the
// nodes it shares with the running pass, so it saves them first and puts them back when it ends.
struct NodeScratch {
  std::shared_ptr<Node> node;
  Tensor grad;
  int dependencies;
  uint64_t visit_epoch;
  size_t order_index;
};
thread_local int passes_running = 0;

// Post-accumulate-grad hooks, by leaf. A table here rather than a field of every TensorImpl: only
// DDP's parameters have hooks, and a pass without any hooked leaf checks one atomic counter.
struct LeafHooks {
  std::weak_ptr<TensorImpl> leaf;  // tells the hooked leaf from a later tensor at the same address
  std::vector<std::pair<uint64_t, autograd::PostAccumulateGradHook>> hooks;
  int pending_edges = 0;  // edges into the leaf that this pass has not run yet
  uint64_t epoch = 0;     // the pass that counted them
};
std::mutex leaf_hooks_mutex;
std::unordered_map<const TensorImpl*, LeafHooks> leaf_hooks;
std::atomic<size_t> hooked_leaves{0};

LeafHooks* find_leaf_hooks(const TensorImpl* leaf) {  // with leaf_hooks_mutex held
  auto it = leaf_hooks.find(leaf);
  if (it == leaf_hooks.end() || it->second.leaf.lock().get() != leaf) return nullptr;
  return &it->second;
}

// A hooked leaf learns how many edges of this pass lead to it, so its hooks run once, after the last.
void count_hooked_leaf_edges(const std::vector<std::shared_ptr<Node>>& order, uint64_t epoch) {
  if (hooked_leaves.load() == 0) return;
  std::lock_guard<std::mutex> lock(leaf_hooks_mutex);
  for (const std::shared_ptr<Node>& n : order)
    for (const InputEdge& e : n->inputs) {
      LeafHooks* h = e.leaf ? find_leaf_hooks(e.leaf.get()) : nullptr;
      if (h == nullptr) continue;
      if (h->epoch != epoch) h->pending_edges = 0;
      h->epoch = epoch;
      ++h->pending_edges;
    }
}

// One more edge into a leaf has run; after the last one, its hooks see the finished .grad.
void leaf_edge_done(const std::shared_ptr<TensorImpl>& leaf) {
  if (hooked_leaves.load() == 0) return;
  std::vector<std::pair<uint64_t, autograd::PostAccumulateGradHook>> ready;
  {
    std::lock_guard<std::mutex> lock(leaf_hooks_mutex);
    LeafHooks* h = find_leaf_hooks(leaf.get());
    if (h == nullptr || h->pending_edges <= 0 || --h->pending_edges != 0) return;
    ready = h->hooks;  // a copy, called unlocked: a hook may register or remove hooks
  }
  for (const auto& [id, hook] : ready) hook(Tensor(leaf));
}

// Backward progress hooks (autograd_hooks.h); a pass without any checks one atomic counter per node.
struct ProgressHook {
  uint64_t id;
  autograd::BackwardProgressHook hook;
  std::chrono::steady_clock::duration interval;
  std::chrono::steady_clock::time_point last_call;
};
std::mutex progress_hooks_mutex;
std::vector<ProgressHook> progress_hooks;
std::atomic<size_t> progress_hook_count{0};

void run_due_progress_hooks() {
  if (progress_hook_count.load(std::memory_order_relaxed) == 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<autograd::BackwardProgressHook> due;
  {
    std::lock_guard<std::mutex> lock(progress_hooks_mutex);
    for (ProgressHook& h : progress_hooks)
      if (now - h.last_call >= h.interval) {
        h.last_call = now;
        due.push_back(h.hook);  // called unlocked: a hook may register or remove hooks
      }
  }
  for (const autograd::BackwardProgressHook& hook : due) hook();
}

// Sets up dependency counts for every node reachable from the roots (iterative DFS). Nodes are
// marked with the pass's epoch instead of being kept in a visited set (no hashing per node); the
// returned list holds each node once and keeps it alive for the pass. In a nested pass, `saved`
// receives each node's previous scratch.
std::vector<std::shared_ptr<Node>> collect_graph(const std::vector<std::shared_ptr<Node>>& roots,
                                                 std::vector<NodeScratch>* saved, bool count_hooked_leaves) {
  static std::atomic<uint64_t> epochs{0};
  const uint64_t epoch = ++epochs;
  std::vector<std::shared_ptr<Node>> order;
  std::vector<Node*> stack;
  auto visit = [&](const std::shared_ptr<Node>& n) {
    if (!n || n->visit_epoch == epoch) return;
    if (saved) {
      saved->push_back({n, std::move(n->grad), n->dependencies, n->visit_epoch, n->order_index});
      n->grad = Tensor();
    }
    n->visit_epoch = epoch;
    n->dependencies = 0;
    n->order_index = order.size();
    order.push_back(n);
    stack.push_back(n.get());
  };
  for (const std::shared_ptr<Node>& r : roots) visit(r);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const InputEdge& e : n->inputs) visit(e.fn);
  }
  for (const std::shared_ptr<Node>& n : order)
    for (const InputEdge& e : n->inputs)
      if (e.fn) ++e.fn->dependencies;
  if (count_hooked_leaves) count_hooked_leaf_edges(order, epoch);
  return order;
}

// Leaf accumulation: .grad owns its memory (never aliases another gradient), like PyTorch.
void accumulate_leaf(TensorImpl& leaf, Tensor g, bool create_graph) {
  if (!create_graph) g = g.detach();
  if (!leaf.grad) {
    bool exclusive = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 &&
                     g.is_contiguous();
    leaf.grad = exclusive ? g.impl_ptr() : ops_hooks("gradient accumulation").clone(g).impl_ptr();
  } else {
    Tensor acc(std::move(leaf.grad));  // the leaf's reference moves into acc: use_count stays 1
    accumulate(acc, g, create_graph);
    leaf.grad = acc.impl_ptr();
  }
}

struct BackwardTargets {  // for autograd::grad: capture instead of accumulating into .grad
  std::unordered_map<const TensorImpl*, Tensor>* leaf_grads = nullptr;
  std::unordered_map<const Node*, Tensor>* node_grads = nullptr;
};

void run_node(const std::shared_ptr<Node>& node, bool retain_graph, bool create_graph,
              std::vector<Node*>& ready, const BackwardTargets& targets) {
  Tensor dy = std::move(node->grad);
  node->grad = Tensor();
  if (targets.node_grads && targets.node_grads->count(node.get()))
    (*targets.node_grads)[node.get()] = dy;
  std::vector<Tensor> results;
  if (dy.defined()) {
    if (node->released) {
      throw Error(fmt::format(
          "{}: trying to backward through the graph a second time, but its saved tensors were "
          "freed; pass retain_graph = true to the first backward()",
          node->name));
    }
    Grads g(*node, node, targets.leaf_grads == nullptr);
    g.results().resize(node->inputs.size());
    const char* previous = current_backward_op;
    current_backward_op = node->name;
    try {
      node->backward(dy, g);
    } catch (...) {
      current_backward_op = previous;
      throw;
    }
    current_backward_op = previous;
    results = std::move(g.results());
    if (!retain_graph) {
      node->backward = nullptr;
      node->saved_output.reset();
      node->released = true;
    }
  }
  for (size_t i = 0; i < node->inputs.size(); ++i) {
    const InputEdge& e = node->inputs[i];
    Tensor gi = i < results.size() ? std::move(results[i]) : Tensor();
    if (e.fn) {
      if (gi.defined()) accumulate(e.fn->grad, gi, create_graph);
      if (--e.fn->dependencies == 0) ready.push_back(e.fn.get());
    } else if (e.leaf && targets.leaf_grads) {
      auto it = targets.leaf_grads->find(e.leaf.get());
      if (gi.defined() && it != targets.leaf_grads->end())
        it->second = it->second.defined() ? add_grads(it->second, gi) : gi;
    } else if (e.leaf) {
      if (gi.defined()) accumulate_leaf(*e.leaf, std::move(gi), create_graph);
      leaf_edge_done(e.leaf);
    }
  }
}

void check_root(const Tensor& out, const Tensor& grad, const char* what) {
  SG_CHECK(out.defined(), "{}: output tensor is undefined", what);
  SG_CHECK(out.requires_grad(),
           "{}: element 0 of tensors does not require grad and does not have a grad_fn "
           "(shape {}); did you run it under NoGradGuard or forget requires_grad_()?",
           what, out.shape());
  if (grad.defined()) {
    SG_CHECK_SHAPE(grad.shape() == out.shape(), "{}: gradient shape {} does not match output shape {}",
                   what, grad.shape(), out.shape());
  } else {
    SG_CHECK(out.numel() == 1,
             "{}: grad can be implicitly created only for scalar outputs; output has shape {}, pass a "
             "gradient of that shape",
             what, out.shape());
  }
}

struct GradModeRestore {
  bool previous = GradMode::is_enabled();
  ~GradModeRestore() { GradMode::set_enabled(previous); }
};

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                  bool retain_graph, bool create_graph, const BackwardTargets& targets,
                  const char* what) {
  SG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
           "{}: got {} outputs but {} gradients", what, outputs.size(), grad_outputs.size());
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    check_root(outputs[i], g, what);
    if (!g.defined()) g = ones_like(outputs[i]);
    seeds.push_back(g);
    roots.push_back(outputs[i].grad_fn());
  }
  struct PassScope {  // counts running passes; a nested one restores the scratch it borrowed
    std::vector<NodeScratch> saved;
    PassScope() { ++passes_running; }
    ~PassScope() {
      --passes_running;
      for (NodeScratch& s : saved) {
        s.node->grad = std::move(s.grad);
        s.node->dependencies = s.dependencies;
        s.node->visit_epoch = s.visit_epoch;
        s.node->order_index = s.order_index;
      }
    }
  } scope;
  std::vector<std::shared_ptr<Node>> order = collect_graph(roots, passes_running > 1 ? &scope.saved : nullptr,
                                                          targets.leaf_grads == nullptr);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!roots[i]) {  // a leaf passed as output: its gradient is the seed itself (summed if passed twice)
      if (targets.leaf_grads) {
        auto it = targets.leaf_grads->find(outputs[i].impl());
        if (it != targets.leaf_grads->end())
          it->second = it->second.defined() ? add_grads(it->second, seeds[i]) : seeds[i];
      } else {
        accumulate_leaf(*outputs[i].impl(), seeds[i], create_graph);
      }
      continue;
    }
    roots[i]->grad = roots[i]->grad.defined() ? add_grads(roots[i]->grad, seeds[i]) : seeds[i];
  }
  GradMode::set_enabled(create_graph);  // the caller restores the previous mode
  std::vector<Node*> ready;
  for (const std::shared_ptr<Node>& r : roots)
    if (r && r->dependencies == 0 && std::find(ready.begin(), ready.end(), r.get()) == ready.end())
      ready.push_back(r.get());
  try {
    while (!ready.empty()) {
      Node* n = ready.back();
      ready.pop_back();
      run_node(order[n->order_index], retain_graph, create_graph, ready, targets);
      run_due_progress_hooks();
    }
  } catch (...) {
    for (const std::shared_ptr<Node>& n : order) n->grad = Tensor();
    throw;
  }
}

}  // namespace

void Tensor::backward(const Tensor& grad, BackwardOptions options) const {
  SG_CHECK(defined(), "backward: called on an undefined tensor ({})", why_undefined());
  GradModeRestore restore;
  std::vector<Tensor> grads;
  if (grad.defined()) grads.push_back(grad);
  run_backward({*this}, grads, options.retain_graph, options.create_graph, {}, "backward");
}

namespace autograd {

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  SG_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
           "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad (shape {})",
           leaf.defined() ? leaf.shape() : Shape{});
  static uint64_t next_id = 0;
  std::lock_guard<std::mutex> lock(leaf_hooks_mutex);
  auto [it, inserted] = leaf_hooks.try_emplace(leaf.impl());
  if (inserted) ++hooked_leaves;
  if (it->second.leaf.lock() != leaf.impl_ptr()) {  // new, or a dead leaf's entry at this address
    it->second = LeafHooks();
    it->second.leaf = leaf.impl_ptr();
  }
  it->second.hooks.emplace_back(++next_id, std::move(hook));
  return next_id;
}

void remove_post_accumulate_grad_hook(uint64_t id) {
  std::lock_guard<std::mutex> lock(leaf_hooks_mutex);
  for (auto it = leaf_hooks.begin(); it != leaf_hooks.end(); ++it) {
    if (std::erase_if(it->second.hooks, [id](const auto& entry) { return entry.first == id; }) == 0) continue;
    if (it->second.hooks.empty()) {
      leaf_hooks.erase(it);
      --hooked_leaves;
    }
    return;
  }
}

uint64_t register_backward_progress_hook(BackwardProgressHook hook, std::chrono::microseconds interval) {
  SG_CHECK(hook != nullptr && interval.count() >= 0,
           "register_backward_progress_hook: needs a callable and an interval >= 0 (got {} us)", interval.count());
  static uint64_t next_id = 0;
  std::lock_guard<std::mutex> lock(progress_hooks_mutex);
  progress_hooks.push_back({++next_id, std::move(hook), interval, std::chrono::steady_clock::now() - interval});
  ++progress_hook_count;
  return next_id;
}

void remove_backward_progress_hook(uint64_t id) {
  std::lock_guard<std::mutex> lock(progress_hooks_mutex);
  if (std::erase_if(progress_hooks, [id](const ProgressHook& h) { return h.id == id; }) > 0) --progress_hook_count;
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              BackwardOptions options) {
  GradModeRestore restore;
  run_backward(outputs, grad_outputs, options.retain_graph, options.create_graph, {},
               "autograd::backward");
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions options) {
  std::unordered_map<const TensorImpl*, Tensor> leaf_grads;
  std::unordered_map<const Node*, Tensor> node_grads;
  for (const Tensor& x : inputs) {
    SG_CHECK(x.defined() && x.requires_grad(),
             "autograd::grad: every input must require grad (got shape {})",
             x.defined() ? x.shape() : Shape{});
    if (x.grad_fn()) node_grads[x.grad_fn().get()] = Tensor();
    else leaf_grads[x.impl()] = Tensor();
  }
  {
    GradModeRestore restore;
    run_backward(outputs, grad_outputs, options.retain_graph || options.create_graph,
                 options.create_graph, {&leaf_grads, &node_grads}, "autograd::grad");
  }
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    Tensor g = x.grad_fn() ? node_grads[x.grad_fn().get()] : leaf_grads[x.impl()];
    SG_CHECK(g.defined() || options.allow_unused,
             "autograd::grad: input {} (shape {}) was not used to compute the outputs; pass "
             "allow_unused = true to get an undefined gradient for it",
             i, x.shape());
    result.push_back(g);
  }
  return result;
}

}  // namespace autograd
}  // namespace seqgrad
