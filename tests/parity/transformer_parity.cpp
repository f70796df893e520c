// Driver for tests/parity/test_transformer_torch.py: runs one case of the Transformer's pieces.
//   transformer_parity IN.safetensors OUT.safetensors
// IN holds the inputs ("x" for layer_norm and the encoders; "tgt" and "memory" for the decoders),
// "dy", optionally "lengths" (the padding of x or tgt) and "memory_lengths" (int64 (B,)), the
// parameters as "param.<torch state_dict name>", and metadata "case": a JSON object {"kind":
// "layer_norm" | "encoder_layer" | "decoder_layer" | "encoder" | "decoder", "dtype": "f32" | "f64",
// "causal": bool, "parameter_order": torch's named_parameters() names, options...}. The parameters
// load strictly, so torch's names are checked too, and their order against parameter_order.
// OUT gets "out" and "grad.<input>", "grad.param.<name>": the gradients of sum(out * dy).
// Exit status: 0 on success, 1 on an error (message on stderr), 2 on bad usage.
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "nn/nn.h"

using namespace seqgrad;
using nlohmann::json;

namespace {

nn::TransformerLayerOptions layer_options(const json& c) {
  return {.d_model = c.at("d_model"), .nhead = c.at("nhead"), .dim_feedforward = c.at("dim_feedforward"),
          .dropout = 0.0,
          .activation = c.value("activation", "relu") == std::string("gelu") ? nn::TransformerActivation::gelu
                                                                              : nn::TransformerActivation::relu,
          .batch_first = c.value("batch_first", false), .norm_first = c.value("norm_first", false)};
}

int run(const std::string& in_path, const std::string& out_path) {
  TensorFile in = load_tensors(in_path);
  json c = json::parse(in.metadata.at("case"));
  const std::string kind = c.at("kind");
  const DType dtype = c.at("dtype") == "f64" ? DType::f64 : DType::f32;
  auto input = [&](const char* name) { return in.tensors.count(name) ? in.tensors.at(name) : Tensor(); };
  const Tensor lengths = input("lengths"), memory_lengths = input("memory_lengths");

  // The self-attention's mask over T positions of dimension `time_dim` of x: causal per-query lengths,
  // padding lengths (B,), or none.
  auto self_mask = [&](const Tensor& x, int time_dim) {
    if (!c.value("causal", false)) return lengths;
    const int64_t B = x.size(1 - time_dim), T = x.size(time_dim);
    return nn::causal_lengths(lengths.defined() ? lengths : full({B}, static_cast<double>(T), {.dtype = DType::i64}),
                              T);
  };
  const int time_dim = c.value("batch_first", false) ? 1 : 0;

  std::unique_ptr<nn::Module> module;
  std::vector<std::pair<std::string, Tensor>> inputs;  // name, leaf
  std::function<Tensor()> forward;
  if (kind == "layer_norm") {
    auto m = std::make_unique<nn::LayerNorm>(nn::LayerNorm::Options{
        .normalized_shape = Shape(c.at("normalized_shape").get<std::vector<int64_t>>()),
        .eps = c.value("eps", 1e-5), .elementwise_affine = c.value("affine", true)});
    forward = [m = m.get(), &inputs] { return (*m)(inputs[0].second); };
    inputs = {{"x", input("x")}};
    module = std::move(m);
  } else if (kind == "encoder_layer" || kind == "encoder") {
    inputs = {{"x", input("x")}};
    const Tensor mask = self_mask(inputs[0].second, time_dim);
    if (kind == "encoder_layer") {
      auto m = std::make_unique<nn::TransformerEncoderLayer>(layer_options(c));
      forward = [m = m.get(), &inputs, mask] { return (*m)(inputs[0].second, mask); };
      module = std::move(m);
    } else {
      auto m = std::make_unique<nn::TransformerEncoder>(nn::TransformerEncoder::Options{
          .layer = layer_options(c), .num_layers = c.at("num_layers"), .norm = c.value("norm", false)});
      forward = [m = m.get(), &inputs, mask] { return (*m)(inputs[0].second, mask); };
      module = std::move(m);
    }
  } else if (kind == "decoder_layer" || kind == "decoder") {
    inputs = {{"tgt", input("tgt")}, {"memory", input("memory")}};
    const Tensor mask = self_mask(inputs[0].second, time_dim);
    if (kind == "decoder_layer") {
      auto m = std::make_unique<nn::TransformerDecoderLayer>(layer_options(c));
      forward = [m = m.get(), &inputs, mask, memory_lengths] {
        return (*m)(inputs[0].second, inputs[1].second, mask, memory_lengths);
      };
      module = std::move(m);
    } else {
      auto m = std::make_unique<nn::TransformerDecoder>(nn::TransformerDecoder::Options{
          .layer = layer_options(c), .num_layers = c.at("num_layers"), .norm = c.value("norm", false)});
      forward = [m = m.get(), &inputs, mask, memory_lengths] {
        return (*m)(inputs[0].second, inputs[1].second, mask, memory_lengths);
      };
      module = std::move(m);
    }
  } else {
    throw ValueError("unknown kind '" + kind + "'");
  }
  module->to(dtype);
  module->eval();
  std::map<std::string, Tensor> params;
  for (const auto& [name, t] : in.tensors)
    if (name.rfind("param.", 0) == 0) params[name.substr(6)] = t;
  module->load_state_dict(params);  // strict: every torch name, and nothing else
  std::vector<std::string> order;
  for (const auto& [name, _] : module->named_parameters()) order.push_back(name);
  if (c.contains("parameter_order") && order != c.at("parameter_order").get<std::vector<std::string>>())
    throw ValueError("named_parameters() are not in torch's order: " + json(order).dump());

  std::vector<Tensor> leaves;
  for (auto& [_, t] : inputs) leaves.push_back(t.requires_grad_());
  std::vector<std::pair<std::string, Tensor>> named = module->named_parameters();
  for (const auto& [_, p] : named) leaves.push_back(p);
  Tensor out = forward();
  std::vector<Tensor> grads = autograd::grad({out}, leaves, {in.tensors.at("dy")}, {.allow_unused = true});

  std::map<std::string, Tensor> result = {{"out", out.detach()}};
  for (size_t i = 0; i < leaves.size(); ++i) {
    const std::string name = i < inputs.size() ? "grad." + inputs[i].first : "grad.param." + named[i - inputs.size()].first;
    result[name] = grads[i].defined() ? grads[i] : zeros_like(leaves[i]);
  }
  save_tensors(out_path, result);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: transformer_parity IN.safetensors OUT.safetensors\n");
    return 2;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transformer_parity: %s\n", e.what());
    return 1;
  }
}
