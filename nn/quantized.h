// Dynamic int8 quantization of a trained model, as torch.ao.quantization.quantize_dynamic:
//
//   nn::quantize_dynamic(model);                                    // Linear + GRU, per channel
//   nn::quantize_dynamic(model, {.kinds = {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding},
//                                .scheme = QScheme::per_tensor});
//
// swaps, in place, every Linear, GRU (and, when asked, Embedding) held in an nn::Quantizable
// member for its quantized counterpart, as PyTorch replaces modules by those of
// torch.ao.nn.quantized.dynamic: QuantizedLinear, QuantizedGRU, QuantizedEmbedding. Their weights
// are int8 tensors with float32 scales (symmetric, per output channel or per tensor,
// ops/quantized.h); the float module and its float weights are gone. A QuantizedLinear quantizes
// its input per call, each row from its own min/max (uint8; a row's result does not depend on the
// other rows of the batch), multiplies in int8 with int32 accumulation and returns float32 (+ the
// float32 bias); the QuantizedGRU's gate math stays float32; a QuantizedEmbedding gathers int8 rows
// and scales them (per-row scales). Quantized modules are inference-only: backward through one
// throws, naming the module.
//
// A quantized module's int8 weight lives where its product reads it (the backend's packed layout
// for the GEMM), so it is not a registered tensor: state_dict() lists the float tensors (biases),
// quantized_weights() the int8 ones, as PyTorch keeps its packed params apart.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/rnn.h"
#include "ops/quantized.h"

namespace seqgrad::nn {

enum class QuantKind : uint8_t { Linear, GRU, Embedding };
const char* quant_kind_name(QuantKind kind);              // "Linear", "GRU", "Embedding"
QuantKind parse_quant_kind(const std::string& name);      // throws ValueError listing the kinds

struct QuantizeOptions {
  std::vector<QuantKind> kinds = {QuantKind::Linear, QuantKind::GRU};
  QScheme scheme = QScheme::per_channel;
};

// What the quantized modules share: their int8 weights by parameter name ("weight",
// "weight_hh_l0_reverse"), for checkpoints and exporters.
class QuantizedModule : public Module {
 public:
  using Module::Module;
  virtual std::vector<std::pair<std::string, const QuantizedWeight*>> int8_weights() const = 0;
};

// torch.ao.nn.quantized.dynamic.Linear: y = quantized_linear(x, W_q) + b.
class QuantizedLinear : public QuantizedModule {
 public:
  // weight (out_features, in_features); bias (out_features,) float32 or undefined
  QuantizedLinear(QuantizedWeight weight, const Tensor& bias);
  static std::unique_ptr<QuantizedLinear> from_float(const Linear& layer, QScheme scheme, const std::string& name);
  // x: (..., in_features) float32 -> (..., out_features)
  Tensor operator()(const Tensor& x) const;
  const QuantizedWeight& weight() const { return weight_; }
  std::vector<std::pair<std::string, const QuantizedWeight*>> int8_weights() const override;

  Tensor bias;  // buffer "bias" (out_features,), undefined without bias

 private:
  QuantizedWeight weight_;
};

// torch.ao.nn.quantized.Embedding (weight-only int8, per-row scales): int8 rows gathered and scaled.
class QuantizedEmbedding : public QuantizedModule {
 public:
  explicit QuantizedEmbedding(QuantizedWeight weight);
  static std::unique_ptr<QuantizedEmbedding> from_float(const Embedding& table, QScheme scheme,
                                                        const std::string& name);
  // ids: int64 of any shape -> (ids..., embedding_dim) float32
  Tensor operator()(const Tensor& ids) const;
  const QuantizedWeight& weight() const { return weight_; }
  std::vector<std::pair<std::string, const QuantizedWeight*>> int8_weights() const override;

 private:
  QuantizedWeight weight_;
};

// torch.ao.nn.quantized.dynamic.GRU: both products of every layer and direction in int8
// (quantized_linear over all steps, gru_layer_quantized per step), gate math in float32. The
// layers run as the float GRU's (nn/rnn.h's gru_forward).
class QuantizedGRU : public QuantizedModule {
 public:
  // One layer and direction: int8 weight_ih (3H, F) and weight_hh (3H, H), float32 biases.
  struct Layer {
    QuantizedWeight weight_ih, weight_hh;
    Tensor bias_ih, bias_hh;  // (3H,) each, undefined without bias
  };
  // layers: index layer · dirs + direction, as GRU::weights
  QuantizedGRU(RNNOptions options, std::vector<Layer> layers);
  static std::unique_ptr<QuantizedGRU> from_float(const GRU& gru, QScheme scheme, const std::string& name);
  // x: (B, T, input_size) float32, batch first -> as GRU
  GRUOutput operator()(const Tensor& x, const GRUArgs& args = {}) const;
  const RNNOptions& options() const { return options_; }
  int64_t num_directions() const { return options_.bidirectional ? 2 : 1; }
  const Layer& layer(int64_t layer, Direction direction = Direction::forward) const;
  std::vector<std::pair<std::string, const QuantizedWeight*>> int8_weights() const override;

 private:
  RNNOptions options_;
  std::vector<Layer> layers_;  // never resized after construction: its biases are registered by address
};

template <class Float> struct QuantizedCounterpart;
template <> struct QuantizedCounterpart<Linear> { using type = QuantizedLinear; };
template <> struct QuantizedCounterpart<Embedding> { using type = QuantizedEmbedding; };
template <> struct QuantizedCounterpart<GRU> { using type = QuantizedGRU; };

// The float module's tensors as members of its Quantizable slot, by the float module's names, so
// that a program written against the float modules reads `attention.w_q.weight` as it reads
// `linear.weight` (and as PyTorch spells it). They are the float module's own tensors (references:
// assigning, fill_ and .grad() act on the registered parameter); after quantize_dynamic they are
// undefined tensors, the float weights being gone. A GRU's per-layer tensors are reached through
// `->` or named_parameters().
template <class Float>
struct FloatTensorsOf {
  explicit FloatTensorsOf(Float&) {}
};
template <>
struct FloatTensorsOf<Linear> {
  explicit FloatTensorsOf(Linear& m) : weight(m.weight), bias(m.bias) {}
  Tensor& weight;  // (out_features, in_features)
  Tensor& bias;    // (out_features,); undefined without bias
};
template <>
struct FloatTensorsOf<Embedding> {
  explicit FloatTensorsOf(Embedding& m) : weight(m.weight) {}
  Tensor& weight;  // (num_embeddings, embedding_dim)
};

// A member module that quantize_dynamic may swap for its quantized counterpart (PyTorch's
// setattr on the parent module). Calls go to the module it holds now; `->` and `*` reach the
// float module and throw once it has been swapped out; a Linear's or Embedding's tensors are also
// members (FloatTensorsOf: `out.weight`). Register it as any member:
//   nn::Quantizable<nn::Linear> out{{.in_features = 16, .out_features = 5}};
//   Net() : Module("Net") { register_module("out", out); }
template <class Float>
class Quantizable : public FloatTensorsOf<Float> {
 public:
  using Quantized = typename QuantizedCounterpart<Float>::type;
  explicit Quantizable(typename Float::Options options) : Quantizable(std::make_unique<Float>(std::move(options))) {}

  Tensor operator()(const Tensor& x) const
    requires(!std::is_same_v<Float, GRU>)
  {
    return quantized_ ? (*quantized_)(x) : (*float_)(x);
  }
  GRUOutput operator()(const Tensor& x, const GRUArgs& args = {}) const
    requires std::is_same_v<Float, GRU>
  {
    return quantized_ ? (*quantized_)(x, args) : (*float_)(x, args);
  }

  Float& operator*() const { return float_module(); }
  Float* operator->() const { return &float_module(); }
  const Quantized* quantized() const { return quantized_.get(); }
  // The module held now (the registry's child).
  Module& module() const { return quantized_ ? static_cast<Module&>(*quantized_) : static_cast<Module&>(*float_); }
  // Module::replace_child's hand-over: takes the quantized module and drops the float one.
  void replace(std::unique_ptr<Module> replacement) {
    auto* quantized = dynamic_cast<Quantized*>(replacement.get());
    SG_CHECK_VALUE(quantized != nullptr, "{}: can only be replaced by its quantized counterpart, got {}",
                   module().type_name(), replacement ? replacement->type_name() : std::string("nothing"));
    replacement.release();
    quantized_.reset(quantized);
    if constexpr (std::is_empty_v<FloatTensorsOf<Float>>) {
      float_.reset();
    } else {  // the float weights go; the emptied module stays, for the members above to refer to
      for (const auto& [name, tensor] : float_->own_parameters()) *tensor = Tensor();
    }
  }

 private:
  explicit Quantizable(std::unique_ptr<Float> module) : FloatTensorsOf<Float>(*module), float_(std::move(module)) {}
  Float& float_module() const {
    SG_CHECK_VALUE(quantized_ == nullptr, "{}: the float module was swapped for its quantized counterpart "
                   "(nn::quantize_dynamic); its float weights are gone", quantized_->type_name());
    return *float_;
  }
  std::unique_ptr<Float> float_;
  std::unique_ptr<Quantized> quantized_;
};

// The weight a Linear slot computes with, in float32: the float layer's, or s·q of its int8 one
// (for a weight used outside the layer's forward, as AdditiveAttention's w_v in its energies).
Tensor linear_weight(const Quantizable<Linear>& layer);

// Swaps every module of the given kinds in `model` (held in nn::Quantizable members) for its
// quantized counterpart and returns the names of the weights it quantized ("decoder.out.weight",
// "encoder.rnn.weight_hh_l0_reverse", ...). Throws ValueError naming the module when one of those
// kinds is a plain member (it cannot be swapped), or when a module is already quantized
// (quantizing twice would compound the rounding; a quantized module is no longer of the kind).
std::vector<std::string> quantize_dynamic(Module& model, const QuantizeOptions& options = {});

// The int8 weights of a quantized model by parameter name (empty for a float model).
std::map<std::string, const QuantizedWeight*> quantized_weights(const Module& model);

// Builds quantized modules straight from stored int8 weights (a quantized checkpoint) and swaps
// them in: `weights` by parameter name ("decoder.out.weight"); each must name the weight of a
// Linear or Embedding, or every weight of a GRU, with the model's shape. The quantized modules'
// biases are then loaded with the model's other tensors (load_state_dict). Throws ValueError
// naming the first key that does not fit.
void load_quantized_weights(Module& model, const std::map<std::string, QuantizedWeight>& weights);

}  // namespace seqgrad::nn
