// record_fused: how every fused op (ops/gru.cpp, ops/additive_scores.cpp, ops/attention_chunked.cpp,
// ops/layer_norm.cpp, ops/loss.cpp) records itself: the fused backward normally, its composed twin's gradients under
// create_graph.
#include "ops/detail.h"

namespace seqgrad::detail {
namespace {

// Under create_graph: the gradients of the composed twin with respect to the inputs that want
// one, recorded so that they can be differentiated again.
void add_composed_gradients(const ComposedFn& composed, const std::vector<Tensor>& inputs, const Tensor& dy,
                            Grads& g) {
  std::vector<Tensor> wanted;
  std::vector<int> index;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i)
    if (g.needs(i) && inputs[i].defined() && inputs[i].requires_grad()) wanted.push_back(inputs[i]), index.push_back(i);
  if (wanted.empty()) return;
  std::vector<Tensor> grads = autograd::grad({composed(inputs)}, wanted, {dy},
                                             {.retain_graph = true, .create_graph = true, .allow_unused = true});
  for (size_t k = 0; k < index.size(); ++k)
    if (grads[k].defined()) g.add(index[k], grads[k]);  // an input the twin does not reach gets nothing
}

}  // namespace

Tensor record_fused(const char* op, Tensor y, std::span<const Tensor> inputs, ComposedFn composed,
                    FusedBackwardFn backward, SaveOutput save_output) {
  std::vector<SavedTensor> saved(inputs.begin(), inputs.end());
  return record(
      op, std::move(y), inputs,
      [saved = std::move(saved), composed = std::move(composed), backward = std::move(backward)](const Tensor& dy,
                                                                                               Grads& g) {
        std::vector<Tensor> values;
        for (const SavedTensor& s : saved) values.push_back(s.get());
        if (GradMode::is_enabled()) add_composed_gradients(composed, values, dy, g);  // create_graph
        else backward(values, dy, g);
      },
      save_output);
}

}  // namespace seqgrad::detail
