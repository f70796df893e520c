// nn_parity IN.safetensors OUT.safetensors: the C++ half of tests/parity/test_nn_torch.py.
//
// IN holds, per case, PyTorch's state_dict ("<case>/param/<name>"), the inputs
// ("<case>/input/<name>") and upstream gradients ("<case>/dy/<output>"); its metadata "cases" is a
// JSON list of {name, kind, dtype, options...}. For each case this builds the seqgrad module, loads
// the state_dict (strictly: PyTorch's names and shapes must match one to one), runs forward, then
// backward of Σ sum(output · dy), and writes "<case>/output/<name>" and "<case>/grad/param/<name>",
// "<case>/grad/input/<name>" to OUT. A case that throws is listed in OUT's metadata "errors".
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "nn/containers.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/rnn.h"

using namespace seqgrad;
using json = nlohmann::json;

namespace {

struct Case {
  std::string name;
  const std::map<std::string, Tensor>& in;
  std::map<std::string, Tensor>& out;

  // "<case>/<group>/<key>" of IN, or undefined when absent.
  Tensor get(const std::string& group, const std::string& key) const {
    auto it = in.find(name + "/" + group + "/" + key);
    return it == in.end() ? Tensor() : it->second;
  }
  std::map<std::string, Tensor> group(const std::string& group) const {
    std::map<std::string, Tensor> found;
    const std::string prefix = name + "/" + group + "/";
    for (const auto& [key, t] : in)
      if (key.rfind(prefix, 0) == 0) found[key.substr(prefix.size())] = t;
    return found;
  }
  // A floating input as a leaf that requires grad (so its gradient is reported), or undefined.
  Tensor input(const std::string& key, DType dtype) const {
    Tensor t = get("input", key);
    if (!t.defined()) return t;
    return t.to(dtype).detach().requires_grad_();
  }
  void put(const std::string& key, const Tensor& t) const {
    if (t.defined()) out[name + "/" + key] = t.detach().contiguous();
  }
};

// Σ sum(outputs[k] · dy[k]) over the named outputs, backward, then everything written out.
void finish(const Case& c, nn::Module& m, const std::map<std::string, Tensor>& outputs,
            const std::map<std::string, Tensor>& inputs) {
  Tensor loss;
  for (const auto& [key, y] : outputs) {
    c.put("output/" + key, y);
    Tensor dy = c.get("dy", key);
    SG_CHECK(dy.defined(), "{}: no upstream gradient dy/{}", c.name, key);
    Tensor term = (y * dy.to(y.dtype())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  loss.backward();
  for (const auto& [key, p] : m.named_parameters()) c.put("grad/param/" + key, p.grad());
  for (const auto& [key, x] : inputs)
    if (x.defined() && x.requires_grad()) c.put("grad/input/" + key, x.grad());
}

void load(const Case& c, nn::Module& m, DType dtype) {
  m.to(dtype);
  m.load_state_dict(c.group("param"), /*strict=*/true);
}

nn::RNNOptions rnn_options(const json& j) {
  return {.input_size = j.at("input_size"),
          .hidden_size = j.at("hidden_size"),
          .num_layers = j.at("num_layers"),
          .bias = j.at("bias"),
          .bidirectional = j.at("bidirectional"),
          .dropout = j.at("dropout")};
}

// test_nn_torch.py's Containers: a ModuleList of two Linear+tanh layers, a ModuleDict of two heads.
struct Containers : nn::Module {
  Containers(int64_t f, int64_t hidden, int64_t out) : Module("Containers") {
    layers.push_back<nn::Linear>({.in_features = f, .out_features = hidden});
    layers.push_back<nn::Linear>({.in_features = hidden, .out_features = hidden});
    heads.insert<nn::Linear>("out", {.in_features = hidden, .out_features = out});
    heads.insert<nn::Linear>("skip", {.in_features = hidden, .out_features = out, .bias = false});
  }
  Tensor operator()(Tensor x) const {
    for (size_t i = 0; i < layers.size(); ++i) x = tanh(layers.at<nn::Linear>(i)(x));
    return heads.at<nn::Linear>("out")(x) + heads.at<nn::Linear>("skip")(x);
  }
  nn::ModuleList layers = register_module<nn::ModuleList>("layers");
  nn::ModuleDict heads = register_module<nn::ModuleDict>("heads");
};

void run_case(const json& j, const Case& c) {
  const std::string kind = j.at("kind");
  const DType dtype = j.at("dtype") == "f64" ? DType::f64 : DType::f32;
  if (kind == "sequential") {
    const int64_t f = j.at("in_features"), hidden = j.at("hidden"), out = j.at("out_features");
    nn::Sequential m(std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = f, .out_features = hidden}),
                     [](const Tensor& x) { return tanh(x); },
                     std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = hidden, .out_features = out}));
    load(c, m, dtype);
    Tensor x = c.input("x", dtype);
    finish(c, m, {{"output", m(x)}}, {{"x", x}});
  } else if (kind == "containers") {
    Containers m(j.at("in_features"), j.at("hidden"), j.at("out_features"));
    load(c, m, dtype);
    Tensor x = c.input("x", dtype);
    finish(c, m, {{"output", m(x)}}, {{"x", x}});
  } else if (kind == "linear") {
    nn::Linear m({.in_features = j.at("in_features"), .out_features = j.at("out_features"), .bias = j.at("bias")});
    load(c, m, dtype);
    Tensor x = c.input("x", dtype);
    finish(c, m, {{"output", m(x)}}, {{"x", x}});
  } else if (kind == "embedding") {
    std::optional<int64_t> padding_idx;
    if (!j.at("padding_idx").is_null()) padding_idx = j.at("padding_idx").get<int64_t>();
    nn::Embedding m({.num_embeddings = j.at("num_embeddings"), .embedding_dim = j.at("embedding_dim"),
                     .padding_idx = padding_idx});
    load(c, m, dtype);
    finish(c, m, {{"output", m(c.get("input", "ids"))}}, {});
  } else if (kind == "gru_cell" || kind == "lstm_cell") {
    const int64_t F = j.at("input_size"), H = j.at("hidden_size");
    Tensor x = c.input("x", dtype), h = c.input("h0", dtype), cell_c = c.input("c0", dtype);
    if (kind == "gru_cell") {
      nn::GRUCell m({.input_size = F, .hidden_size = H, .bias = j.at("bias")});
      load(c, m, dtype);
      finish(c, m, {{"h", m(x, h)}}, {{"x", x}, {"h0", h}});
    } else {
      nn::LSTMCell m({.input_size = F, .hidden_size = H, .bias = j.at("bias")});
      load(c, m, dtype);
      auto [h1, c1] = m(x, {.h = h, .c = cell_c});
      finish(c, m, {{"h", h1}, {"c", c1}}, {{"x", x}, {"h0", h}, {"c0", cell_c}});
    }
  } else if (kind == "gru" || kind == "lstm") {
    Tensor x = c.input("x", dtype), h0 = c.input("h0", dtype), c0 = c.input("c0", dtype);
    Tensor lengths = c.get("input", "lengths");
    const bool train = j.at("train");
    if (kind == "gru") {
      nn::GRU m(rnn_options(j));
      load(c, m, dtype);
      m.train(train);
      auto [output, h_n] = m(x, {.h0 = h0, .lengths = lengths});
      finish(c, m, {{"output", output}, {"h_n", h_n}}, {{"x", x}, {"h0", h0}});
    } else {
      nn::LSTM m(rnn_options(j));
      load(c, m, dtype);
      m.train(train);
      auto [output, state] = m(x, {.h0 = h0, .c0 = c0, .lengths = lengths});
      finish(c, m, {{"output", output}, {"h_n", state.h}, {"c_n", state.c}}, {{"x", x}, {"h0", h0}, {"c0", c0}});
    }
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
  try {
    TensorFile in = load_tensors(argv[1]);
    std::map<std::string, Tensor> out;
    json errors = json::object();
    for (const json& j : json::parse(in.metadata.at("cases"))) {
      const std::string name = j.at("name");
      try {
        run_case(j, Case{.name = name, .in = in.tensors, .out = out});
      } catch (const std::exception& e) {
        errors[name] = e.what();
      }
    }
    save_tensors(argv[2], out, {{"errors", errors.dump()}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nn_parity: %s\n", e.what());
    return 1;
  }
  return 0;
}
