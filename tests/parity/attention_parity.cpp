// Driver for tests/parity/test_attention_torch.py: runs one attention case in seqgrad.
//   attention_parity IN.safetensors OUT.safetensors
// IN holds q, k, v, dy, optionally lengths (int64), the parameters as "param.<state_dict name>",
// and metadata "case": a JSON object {"kind": ..., "dtype": "f32" | "f64", options...}. OUT gets
// "out" (context), "weights" (last_weights), "grad.q", "grad.k", "grad.v" and
// "grad.param.<name>" for every parameter: the gradients of sum(out * dy).
// Exit status: 0 on success, 1 on an error (message on stderr), 2 on bad usage.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "nn/attention.h"

using namespace seqgrad;
using nlohmann::json;

namespace {

std::unique_ptr<nn::Attention> make_attention(const json& c) {
  std::string kind = c.at("kind");
  auto i64 = [&](const char* key, int64_t fallback = 0) { return c.value(key, fallback); };
  if (kind == "additive")
    return std::make_unique<nn::AdditiveAttention>(nn::AdditiveAttention::Options{
        .query_size = i64("query_size"), .key_size = i64("key_size"), .hidden_size = i64("hidden_size")});
  if (kind == "chunked")
    return std::make_unique<nn::ChunkedAdditiveAttention>(nn::ChunkedAdditiveAttention::Options{
        .query_size = i64("query_size"), .key_size = i64("key_size"), .hidden_size = i64("hidden_size"),
        .chunk_size = i64("chunk_size"), .keep_weights = true});  // the weights are compared too
  if (kind == "dot" || kind == "scaled_dot") {
    nn::DotProductAttention::Options o{.query_size = i64("query_size"), .key_size = i64("key_size")};
    if (kind == "dot") return std::make_unique<nn::DotProductAttention>(o);
    return std::make_unique<nn::ScaledDotProductAttention>(o);
  }
  if (kind == "hybrid")
    return std::make_unique<nn::HybridAttention>(nn::HybridAttention::Options{
        .query_size = i64("query_size"), .key_size = i64("key_size"), .hidden_size = i64("hidden_size")});
  if (kind == "multilevel") {  // level0 additive, level1 scaled dot (same query and key size)
    std::vector<std::unique_ptr<nn::Attention>> levels;
    levels.push_back(std::make_unique<nn::AdditiveAttention>(nn::AdditiveAttention::Options{
        .query_size = i64("query_size"), .key_size = i64("key_size"), .hidden_size = i64("hidden_size")}));
    levels.push_back(std::make_unique<nn::ScaledDotProductAttention>());
    return std::make_unique<nn::MultiLevelAttention>(std::move(levels));
  }
  if (kind == "multihead")
    return std::make_unique<nn::MultiHeadAttention>(nn::MultiHeadAttention::Options{
        .embed_dim = i64("embed_dim"), .num_heads = i64("num_heads"), .bias = c.value("bias", true),
        .kdim = i64("kdim"), .vdim = i64("vdim")});
  if (kind == "local") {
    using L = nn::LocalAttention;
    return std::make_unique<L>(L::Options{
        .query_size = i64("query_size"), .key_size = i64("key_size"), .hidden_size = i64("hidden_size"),
        .window = i64("window"),
        .position = c.value("position", std::string("monotonic")) == "predictive" ? L::Position::predictive
                                                                                 : L::Position::monotonic,
        .score = c.value("score", std::string("additive")) == "scaled_dot" ? L::Score::scaled_dot
                                                                          : L::Score::additive});
  }
  throw ValueError("attention_parity: unknown kind '" + kind + "'");
}

int run(const std::string& in_path, const std::string& out_path) {
  TensorFile in = load_tensors(in_path);
  json c = json::parse(in.metadata.at("case"));
  DType dtype = c.at("dtype") == "f64" ? DType::f64 : DType::f32;
  std::unique_ptr<nn::Attention> attention = make_attention(c);
  attention->to(dtype);
  attention->eval();
  std::map<std::string, Tensor> params;
  for (const auto& [name, t] : in.tensors)
    if (name.rfind("param.", 0) == 0) params[name.substr(6)] = t;
  nn::LoadReport report = attention->load_state_dict(params, false);
  if (!report.ok()) throw ValueError("attention_parity: parameters do not match: " + report.format());

  Tensor q = in.tensors.at("q").requires_grad_(), k = in.tensors.at("k").requires_grad_(),
         v = in.tensors.at("v").requires_grad_();
  Tensor lengths = in.tensors.count("lengths") ? in.tensors.at("lengths") : Tensor();
  Tensor out = (*attention)(q, k, v, lengths);
  std::vector<Tensor> inputs = {q, k, v};
  std::vector<std::pair<std::string, Tensor>> named = attention->named_parameters();
  for (const auto& [_, p] : named) inputs.push_back(p);
  std::vector<Tensor> grads = autograd::grad({out}, inputs, {in.tensors.at("dy")}, {.allow_unused = true});

  std::map<std::string, Tensor> result = {{"out", out.detach()}, {"weights", attention->last_weights()}};
  result["grad.q"] = grads[0];
  result["grad.k"] = grads[1];
  result["grad.v"] = grads[2];
  for (size_t i = 0; i < named.size(); ++i)
    result["grad.param." + named[i].first] = grads[3 + i].defined() ? grads[3 + i] : zeros_like(named[i].second);
  save_tensors(out_path, result);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: attention_parity IN.safetensors OUT.safetensors\n");
    return 2;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_parity: %s\n", e.what());
    return 1;
  }
}
