// Dynamic int8 quantization of a trained model, as torch.ao.quantization.quantize_dynamic:
//
//   nn::quantize_dynamic(model);                                    // Linear + GRU, per channel
//   nn::quantize_dynamic(model, {.kinds = {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding},
//                                .scheme = QScheme::per_tensor});
//
// converts the model in place. Each Linear's weight and each GRU's weight_ih / weight_hh become
// int8 (symmetric, per output channel or per tensor, ops/quantized.h); their forward then
// quantizes its input per call (uint8, from the call's min/max), multiplies in int8 with int32
// accumulation and returns float32 (+ the float32 bias). The GRU's gate math stays float32.
// Embeddings stay float32 unless QuantKind::Embedding is asked for (per-row int8 scales, the
// form that makes a quantized checkpoint small). The float parameters keep their names and hold
// the dequantized values s·q, so state_dict() still works and reads what the int8 path computes.
// Quantized modules are inference-only: backward through one throws, naming the module.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "ops/quantized.h"

namespace seqgrad::nn {

enum class QuantKind : uint8_t { Linear, GRU, Embedding };
const char* quant_kind_name(QuantKind kind);              // "Linear", "GRU", "Embedding"
QuantKind parse_quant_kind(const std::string& name);      // throws ValueError listing the kinds

struct QuantizeOptions {
  std::vector<QuantKind> kinds = {QuantKind::Linear, QuantKind::GRU};
  QScheme scheme = QScheme::per_channel;
};

// Quantizes every module of the given kinds in `model` (itself included) and returns the names of
// the parameters it quantized ("decoder.out.weight", "encoder.rnn.weight_hh_l0_reverse", ...).
// Throws ValueError when a module of those kinds is already quantized (quantizing twice would
// compound the rounding), naming it. Embeddings need Embedding in kinds; nothing else is touched.
std::vector<std::string> quantize_dynamic(Module& model, const QuantizeOptions& options = {});

// The int8 weights of a quantized model by parameter name (empty for a float model).
std::map<std::string, std::shared_ptr<const QuantizedWeight>> quantized_weights(const Module& model);

// Installs stored int8 weights (from a quantized checkpoint) by parameter name: each must name a
// quantizable weight of `model` (a Linear's or Embedding's weight, a GRU's weight_ih/weight_hh)
// with the same shape; the float parameter is set to the dequantized values. Throws ValueError
// naming the first key that does not fit.
void load_quantized_weights(Module& model, const std::map<std::string, QuantizedWeight>& weights);

}  // namespace seqgrad::nn
