// Source snippet: d2l's xavier_init_weights, applied to a seq2seq model with net.apply(fn):
//   if type(m) == nn.Linear: xavier_uniform_(m.weight)
//   if type(m) == nn.GRU: xavier_uniform_ every parameter whose name contains "weight"
// Demonstrates Module::apply (fn visits every submodule, children first, then the module itself),
// dispatch on the module's type with dynamic_cast, and nn::init::xavier_uniform_ filling
// parameters in place. Checked: every initialised weight lies in ±√(6 / (fan_in + fan_out)) with
// the standard deviation of that uniform distribution (bound / √3, within 10%), and the biases and
// the embedding are left as they were.
#include <fmt/core.h>

#include <cmath>
#include <map>
#include <string>

#include <seqgrad/core/rng.h>
#include <seqgrad/nn/nn.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;
using examples::max_abs_diff;

struct Decoder : nn::Module {
  Decoder() : nn::Module("Decoder") {}
  nn::Embedding embedding = register_module<nn::Embedding>("embedding", {.num_embeddings = 50, .embedding_dim = 16});
  nn::GRU rnn = register_module<nn::GRU>("rnn", {.input_size = 16, .hidden_size = 32, .num_layers = 2});
  nn::Linear dense = register_module<nn::Linear>("dense", {.in_features = 32, .out_features = 50});
};

void xavier_init_weights(nn::Module& m) {
  if (auto* linear = dynamic_cast<nn::Linear*>(&m)) nn::init::xavier_uniform_(linear->weight);
  if (auto* gru = dynamic_cast<nn::GRU*>(&m)) {
    for (const auto& [name, parameter] : gru->named_parameters())
      if (name.find("weight") != std::string::npos) nn::init::xavier_uniform_(parameter);
  }
}

int main() {
  manual_seed(0);
  Decoder net;
  std::map<std::string, Tensor> before;
  for (const auto& [name, p] : net.named_parameters()) before[name] = p.clone();

  int visited = 0;
  net.apply([&visited](nn::Module& m) {
    fmt::print("apply visits {}\n", m.type_name());
    ++visited;
  });
  expect(visited == 4, "apply visits the three children and then the model itself");
  net.apply(xavier_init_weights);

  for (const auto& [name, p] : net.named_parameters()) {
    bool initialised = name != "embedding.weight" && name.find("weight") != std::string::npos;
    if (!initialised) {
      expect(max_abs_diff(p, before[name]) == 0.0, fmt::format("{} is left as it was", name));
      continue;
    }
    nn::init::Fans fans = nn::init::calculate_fan_in_and_fan_out(p);
    double bound = std::sqrt(6.0 / static_cast<double>(fans.fan_in + fans.fan_out));
    double largest = max(abs(p)).item();
    double std_dev = std::sqrt(mean(p * p).item());
    double expected_std = bound / std::sqrt(3.0);
    fmt::print("{:20} {:>9}  bound {:.4f}  max |w| {:.4f}  std {:.4f} (expected {:.4f})\n", name,
               fmt::format("({}, {})", p.size(0), p.size(1)), bound, largest, std_dev, expected_std);
    expect(largest <= bound && largest > 0.9 * bound && std::abs(std_dev / expected_std - 1) < 0.1 &&
               max_abs_diff(p, before[name]) > 0,
           fmt::format("{} is xavier-uniform", name));
  }
  return examples::exit_code();
}
