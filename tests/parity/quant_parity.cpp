// quant_parity IN.safetensors OUT.safetensors: the C++ half of tests/parity/test_quantized_torch.py.
//
// IN holds, per case, a float32 state_dict ("<case>/param/<name>") and inputs ("<case>/input/x",
// optional "<case>/input/lengths"); its metadata "cases" is a JSON list of {name, kind ("linear" or
// "gru"), scheme ("per_channel" or "per_tensor"), sizes}. For each case this builds the module,
// loads the state_dict, runs nn::quantize_dynamic and the forward without grad, and writes
// "<case>/output/<name>", and per quantized weight "<case>/int8/<param>" (its int8 values, as
// float32) and "<case>/scale/<param>".
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/serialize.h"
#include "nn/linear.h"
#include "nn/quantized.h"
#include "nn/rnn.h"

using namespace seqgrad;
using json = nlohmann::json;

namespace {

std::map<std::string, Tensor> group(const std::map<std::string, Tensor>& in, const std::string& prefix) {
  std::map<std::string, Tensor> found;
  for (const auto& [key, t] : in)
    if (key.rfind(prefix, 0) == 0) found[key.substr(prefix.size())] = t;
  return found;
}

// The module under test as the member "m" of a model: quantize_dynamic swaps members.
template <class Float>
struct Holder : nn::Module {
  nn::Quantizable<Float> m;
  explicit Holder(typename Float::Options options) : Module("Holder"), m(std::move(options)) { register_module("m", m); }
};

void put_weights(const nn::Module& model, const std::string& name, std::map<std::string, Tensor>& out) {
  for (const auto& [param, q] : nn::quantized_weights(model)) {
    const std::string own = param.substr(2);  // "m.weight" -> "weight"
    out[name + "/int8/" + own] = q->int8_values().to(DType::f32);
    out[name + "/scale/" + own] = q->scales;
  }
}

void run_case(const json& j, const std::map<std::string, Tensor>& in, std::map<std::string, Tensor>& out) {
  const std::string name = j.at("name"), kind = j.at("kind");
  const nn::QuantizeOptions options{.kinds = {nn::QuantKind::Linear, nn::QuantKind::GRU},
                                    .scheme = j.at("scheme") == "per_tensor" ? QScheme::per_tensor
                                                                             : QScheme::per_channel};
  const std::map<std::string, Tensor> params = group(in, name + "/param/");
  const Tensor x = in.at(name + "/input/x");
  NoGradGuard no_grad;
  if (kind == "linear") {
    Holder<nn::Linear> model({.in_features = j.at("in_features"), .out_features = j.at("out_features")});
    model.m->load_state_dict(params);
    nn::quantize_dynamic(model, options);
    out[name + "/output/y"] = model.m(x);
    put_weights(model, name, out);
  } else if (kind == "gru") {
    Holder<nn::GRU> model({.input_size = j.at("input_size"), .hidden_size = j.at("hidden_size"),
                           .num_layers = j.at("num_layers"), .bidirectional = j.at("bidirectional")});
    model.m->load_state_dict(params);
    model.eval();
    nn::quantize_dynamic(model, options);
    auto it = in.find(name + "/input/lengths");
    auto [output, h_n] = model.m(x, {.lengths = it == in.end() ? Tensor() : it->second});
    out[name + "/output/output"] = output;
    out[name + "/output/h_n"] = h_n;
    put_weights(model, name, out);
  } else {
    throw ValueError("unknown case kind '" + kind + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
    return 2;
  }
  TensorFile in = load_tensors(argv[1]);
  std::map<std::string, Tensor> out;
  json errors = json::array();
  for (const json& j : json::parse(in.metadata.at("cases"))) {
    try {
      run_case(j, in.tensors, out);
    } catch (const std::exception& e) {
      errors.push_back({{"name", j.at("name")}, {"error", e.what()}});
    }
  }
  save_tensors(argv[2], out, {{"errors", errors.dump()}});
  return 0;
}
