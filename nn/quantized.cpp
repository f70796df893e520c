// quantize_dynamic and the int8 weights' bookkeeping (nn/quantized.h): one walk over the model
// finds every quantizable weight with its name and the slot its int8 form goes in.
#include "nn/quantized.h"

#include <algorithm>

#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/rnn.h"

namespace seqgrad::nn {
namespace {

// A quantizable weight: its full parameter name, the module kind, the float tensor and the slot
// for its int8 form.
struct Slot {
  std::string name;
  QuantKind kind;
  Tensor* weight;
  std::shared_ptr<const QuantizedWeight>* quantized;
};

// The parameter name of `member` among module m's own parameters.
std::string param_name(const Module& m, const std::string& prefix, const Tensor* member) {
  for (const auto& [name, tensor] : m.own_parameters())
    if (tensor == member) return prefix + name;
  throw Error(fmt::format("quantize_dynamic: a weight of module '{}' is not a registered parameter", prefix));
}

void collect_slots(Module& m, const std::string& prefix, std::vector<Slot>& out) {
  if (auto* linear = dynamic_cast<Linear*>(&m)) {
    out.push_back({param_name(m, prefix, &linear->weight), QuantKind::Linear, &linear->weight, &linear->qweight});
  } else if (auto* embedding = dynamic_cast<Embedding*>(&m)) {
    out.push_back(
        {param_name(m, prefix, &embedding->weight), QuantKind::Embedding, &embedding->weight, &embedding->qweight});
  } else if (auto* gru = dynamic_cast<GRU*>(&m)) {
    for (int64_t layer = 0; layer < gru->options().num_layers; ++layer)
      for (int64_t d = 0; d < gru->num_directions(); ++d) {
        RNNWeights& w = gru->weights(layer, d == 0 ? Direction::forward : Direction::reverse);
        out.push_back({param_name(m, prefix, &w.weight_ih), QuantKind::GRU, &w.weight_ih, &w.qweight_ih});
        out.push_back({param_name(m, prefix, &w.weight_hh), QuantKind::GRU, &w.weight_hh, &w.qweight_hh});
      }
  }
  for (const auto& [name, child] : m.children()) collect_slots(*child, prefix + name + ".", out);
}

std::vector<Slot> slots_of(Module& model) {
  std::vector<Slot> slots;
  collect_slots(model, "", slots);
  return slots;
}

// "decoder.out.weight" -> "decoder.out" (the module, for messages)
std::string module_of(const std::string& param) {
  const auto dot = param.rfind('.');
  return dot == std::string::npos ? std::string("(the model itself)") : param.substr(0, dot);
}

// Puts q in the slot and s·q into the float parameter, so both paths read the same numbers.
void install(const Slot& slot, QuantizedWeight q) {
  NoGradGuard no_grad;
  slot.weight->copy_(dequantize(q).to(slot.weight->dtype()).to(slot.weight->device()));
  *slot.quantized = std::make_shared<const QuantizedWeight>(std::move(q));
}

}  // namespace

const char* quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::Linear: return "Linear";
    case QuantKind::GRU: return "GRU";
    case QuantKind::Embedding: return "Embedding";
  }
  return "?";
}

QuantKind parse_quant_kind(const std::string& name) {
  for (QuantKind kind : {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding})
    if (name == quant_kind_name(kind)) return kind;
  throw ValueError(fmt::format("quantize_dynamic: unknown module kind '{}' (expected Linear, GRU or Embedding)", name));
}

std::vector<std::string> quantize_dynamic(Module& model, const QuantizeOptions& options) {
  auto wanted = [&](QuantKind kind) {
    return std::find(options.kinds.begin(), options.kinds.end(), kind) != options.kinds.end();
  };
  const std::vector<Slot> slots = slots_of(model);
  for (const Slot& slot : slots)  // refuse before changing anything
    SG_CHECK_VALUE(!wanted(slot.kind) || !*slot.quantized,
                   "quantize_dynamic: {} '{}' is already quantized (quantizing twice would round twice); quantize "
                   "the float32 model",
                   quant_kind_name(slot.kind), module_of(slot.name));
  std::vector<std::string> done;
  for (const Slot& slot : slots) {
    if (!wanted(slot.kind)) continue;
    install(slot, quantize_weight(*slot.weight, options.scheme, module_of(slot.name)));
    done.push_back(slot.name);
  }
  return done;
}

std::map<std::string, std::shared_ptr<const QuantizedWeight>> quantized_weights(const Module& model) {
  std::map<std::string, std::shared_ptr<const QuantizedWeight>> found;
  // the walk only reads through the slots here
  for (const Slot& slot : slots_of(const_cast<Module&>(model)))
    if (*slot.quantized) found[slot.name] = *slot.quantized;
  return found;
}

void load_quantized_weights(Module& model, const std::map<std::string, QuantizedWeight>& weights) {
  std::map<std::string, Slot> by_name;
  for (const Slot& slot : slots_of(model)) by_name.emplace(slot.name, slot);
  for (const auto& [name, q] : weights) {
    auto it = by_name.find(name);
    SG_CHECK_VALUE(it != by_name.end(),
                   "load_quantized_weights: '{}' is not the weight of a Linear, Embedding or GRU in this model", name);
    const Tensor& w = *it->second.weight;
    SG_CHECK_VALUE((w.shape() == Shape{q.rows, q.cols}), "load_quantized_weights: '{}' is ({}, {}) but the model's is {}",
                   name, q.rows, q.cols, w.shape());
    install(it->second, q);
  }
}

}  // namespace seqgrad::nn
