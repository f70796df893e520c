// Define-by-run reverse-mode autograd: each op records a Node holding its backward function;
// backward() walks the graph in topological order without recursion.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace seqgrad {

// Grad mode is per thread. Backward runs with it off unless create_graph is set.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

struct NoGradGuard {
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

struct EnableGradGuard {
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Where the gradient for one input goes: the input's own node, or the leaf tensor itself.
struct InputEdge {
  std::shared_ptr<Node> fn;
  std::shared_ptr<TensorImpl> leaf;
  Shape shape;
  DType dtype = DType::f32;
  Device device;
  bool wants_grad() const { return fn || leaf; }
};

// A tensor kept for backward, with the storage version it had when saved: using it after an
// in-place edit throws instead of computing a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t), version_(t.defined() ? t.version() : 0) {}
  const Tensor& get() const;

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
};
inline SavedTensor save(const Tensor& t) { return SavedTensor(t); }

class Grads;
using BackwardFn = std::function<void(const Tensor& dy, Grads& g)>;

struct Node {
  const char* name = "";
  std::vector<InputEdge> inputs;
  BackwardFn backward;
  // The op's output without history (no cycle); rebuilt with this node as grad_fn when needed.
  std::shared_ptr<TensorImpl> saved_output;
  uint32_t saved_output_version = 0;
  bool released = false;  // saved tensors freed after a backward without retain_graph
  // engine scratch, valid during one backward pass
  Tensor grad;
  int dependencies = 0;
  uint64_t visit_epoch = 0;  // the pass that last reached this node (instead of a visited set)
  size_t order_index = 0;    // its place in that pass's node list

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // iterative: freeing a graph 100,000 nodes deep must not recurse 100,000 times
};

// What a backward function sees: which inputs want gradients, and where to add them.
class Grads {
 public:
  Grads(Node& node, const std::shared_ptr<Node>& self, bool into_leaves = true)
      : node_(node), self_(self), into_leaves_(into_leaves) {}
  bool needs(int i) const { return node_.inputs[i].wants_grad(); }
  // Accumulates g into input i's gradient; shape, dtype and device must equal the input's.
  void add(int i, const Tensor& g);
  // The buffer input i's gradient is already accumulating in, when the engine owns it alone and
  // the backward is not being recorded (no create_graph); undefined otherwise. A backward may add
  // its contribution straight into it (e.g. a GEMM with beta = 1: "accumulate, don't assign")
  // instead of calling add() with a fresh tensor.
  Tensor accumulator(int i) const;
  // The op's forward result (for ops whose gradient is written in terms of it: exp, tanh, ...).
  Tensor output() const;
  std::vector<Tensor>& results() { return results_; }

 private:
  Node& node_;
  const std::shared_ptr<Node>& self_;
  bool into_leaves_;  // false for autograd::grad, which must not touch .grad
  std::vector<Tensor> results_;
};

enum class SaveOutput : bool { no, yes };

bool any_requires_grad(std::span<const Tensor> inputs);
Tensor record_node(const char* op, Tensor y, std::span<const Tensor> inputs, BackwardFn fn,
                   SaveOutput save_output);

// check -> compute -> record: attaches `backward` to y when grad mode is on and an input requires
// grad; otherwise returns y untouched without building anything.
// `op` is stored as a pointer, not copied: it must outlive the graph. A string literal always
// does; for a name built at run time, pass intern_op_name(name) (or the std::string overload).
template <class F>
Tensor record(const char* op, Tensor y, std::span<const Tensor> inputs, F&& backward,
              SaveOutput save_output = SaveOutput::no) {
  if (!GradMode::is_enabled() || !any_requires_grad(inputs)) return y;
  return record_node(op, std::move(y), inputs, BackwardFn(std::forward<F>(backward)), save_output);
}
template <class F>
Tensor record(const char* op, Tensor y, std::initializer_list<Tensor> inputs, F&& backward,
              SaveOutput save_output = SaveOutput::no) {
  return record(op, std::move(y), std::span<const Tensor>(inputs.begin(), inputs.size()),
                std::forward<F>(backward), save_output);
}

// A stable copy of `name` for record(): the same pointer for equal names, alive until exit.
const char* intern_op_name(std::string_view name);
template <class F>
Tensor record(const std::string& op, Tensor y, std::initializer_list<Tensor> inputs, F&& backward,
              SaveOutput save_output = SaveOutput::no) {
  return record(intern_op_name(op), std::move(y), std::span<const Tensor>(inputs.begin(), inputs.size()),
                std::forward<F>(backward), save_output);
}

// An op with several differentiable outputs (values and a running statistic, a split, ...):
// records ys[j] with one backward shared by all of them,
//   backward(std::span<const Tensor> dys, Grads& g)
// where dys[j] is output j's upstream gradient, or undefined when output j gets none in this
// call: skip its terms. Each output is its own graph node, so backward runs once per output that
// receives a gradient, with only that dys[j] defined; the gradients add up to the same result
// as one call with every dy because backward is linear in the dys. Returns the recorded outputs.
template <class F>
std::vector<Tensor> record_outputs(const char* op, std::vector<Tensor> ys, std::span<const Tensor> inputs,
                                   F&& backward) {
  if (!GradMode::is_enabled() || !any_requires_grad(inputs)) return ys;
  auto shared = std::make_shared<std::decay_t<F>>(std::forward<F>(backward));
  size_t n = ys.size();
  for (size_t j = 0; j < n; ++j) {
    if (!ys[j].defined()) continue;
    ys[j] = record_node(op, std::move(ys[j]), inputs, [shared, j, n](const Tensor& dy, Grads& g) {
      std::vector<Tensor> dys(n);
      dys[j] = dy;
      (*shared)(std::span<const Tensor>(dys), g);
    }, SaveOutput::no);
  }
  return ys;
}
template <class F>
std::vector<Tensor> record_outputs(const char* op, std::vector<Tensor> ys, std::initializer_list<Tensor> inputs,
                                   F&& backward) {
  return record_outputs(op, std::move(ys), std::span<const Tensor>(inputs.begin(), inputs.size()),
                        std::forward<F>(backward));
}

namespace autograd {

// Gradients of sum(outputs[i] * grad_outputs[i]) with respect to `inputs`, returned instead of
// accumulated into .grad. Inputs not reached get an undefined tensor when allow_unused is set.
struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;
};
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions options = {});

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              BackwardOptions options = {});

}  // namespace autograd
}  // namespace seqgrad
