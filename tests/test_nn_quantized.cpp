// nn::quantize_dynamic (nn/quantized.h): which modules it swaps, the quantized Linear against an
// independent int8 computation, the quantized model against its float32 self, inference-only
// backward, refusing to quantize twice, and building quantized modules from stored int8 weights.
// PyTorch parity is in tests/parity/test_quantized_torch.py.
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/rng.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/quantized.h"
#include "nn/rnn.h"

using namespace seqgrad;
using namespace seqgrad::nn;

namespace {

// A small model with every quantizable kind, named as the translator's parts are.
struct Toy : Module {
  Quantizable<Embedding> embedding{{.num_embeddings = 10, .embedding_dim = 6}};
  Quantizable<GRU> rnn{{.input_size = 6, .hidden_size = 8, .num_layers = 2, .bidirectional = true}};
  Quantizable<Linear> out{{.in_features = 16, .out_features = 5}};
  Toy() : Module("Toy") {
    register_module("embedding", embedding);
    register_module("rnn", rnn);
    register_module("out", out);
  }
  Tensor operator()(const Tensor& ids, const Tensor& lengths) const {
    auto [y, h_n] = rnn(embedding(ids), {.lengths = lengths});  // (B, T, 16)
    return out(y);                                              // (B, T, 5)
  }
};

Tensor ids_batch() { return tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}).to(DType::i64); }
Tensor lengths_batch() { return tensor({4, 2}).to(DType::i64); }

// quantized_linear's arithmetic (ops/quantized.h) written out independently: each row of x
// quantized to uint8 with its own range, Σ_k (xq - z) q in 64-bit integers, y = s_x s_w[n] acc + b[n].
std::vector<float> int8_linear_by_hand(const Tensor& x, const QuantizedWeight& w, const Tensor& bias) {
  const std::vector<float> xv = x.contiguous().to_vector<float>();
  const std::vector<int64_t> q = w.int8_values().to(DType::i64).to_vector<int64_t>();
  const std::vector<float> b = bias.to_vector<float>();
  const int64_t k = w.cols, n = w.rows, m = static_cast<int64_t>(xv.size()) / k;
  std::vector<float> y(m * n);
  for (int64_t r = 0; r < m; ++r) {
    float lo = 0, hi = 0;
    for (int64_t c = 0; c < k; ++c) lo = std::min(lo, xv[r * k + c]), hi = std::max(hi, xv[r * k + c]);
    const ActivationParams p = choose_activation_params(lo, hi, int8_needs_reduce_range());
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        const float code = std::nearbyint(xv[r * k + c] * (1.0f / p.scale)) + static_cast<float>(p.zero_point);
        acc += (static_cast<int64_t>(std::clamp(code, 0.0f, static_cast<float>(p.q_max))) - p.zero_point) *
               q[j * k + c];
      }
      y[r * n + j] = p.scale * w.scale(j) * static_cast<float>(acc) + b[j];
    }
  }
  return y;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  return worst;
}

}  // namespace

TEST_CASE("quantize_dynamic: Linear and GRU by default, embeddings only when asked") {
  manual_seed(3);
  Toy model;
  std::vector<std::string> names = quantize_dynamic(model);
  CHECK(names.size() == 1 + 2 * 2 * 2);  // out.weight + (ih, hh) × 2 layers × 2 directions
  CHECK(std::find(names.begin(), names.end(), "out.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "rnn.weight_hh_l1_reverse") != names.end());
  CHECK(!model.embedding.quantized());
  REQUIRE(model.out.quantized());
  CHECK(model.rnn.quantized());
  CHECK(quantized_weights(model).size() == names.size());
  // the float modules are gone: their weights with them; the biases stay float32
  CHECK_THROWS_WITH_AS(model.out->weight, doctest::Contains("QuantizedLinear: the float module was swapped"),
                       ValueError);
  std::map<std::string, Tensor> state = model.state_dict();
  CHECK(state.count("out.weight") == 0);
  CHECK(state.count("rnn.weight_hh_l0") == 0);
  CHECK(state.at("out.bias").dtype() == DType::f32);
  CHECK(state.count("embedding.weight") == 1);
  // embeddings on request, the rest refused as already quantized
  CHECK_THROWS_WITH_AS(quantize_dynamic(model), doctest::Contains("GRU 'rnn' is already quantized"), ValueError);
  names = quantize_dynamic(model, {.kinds = {QuantKind::Embedding}});
  CHECK(names == std::vector<std::string>{"embedding.weight"});
  CHECK(parse_quant_kind("GRU") == QuantKind::GRU);
  CHECK_THROWS_WITH_AS(parse_quant_kind("LSTM"), doctest::Contains("unknown module kind 'LSTM'"), ValueError);
}

TEST_CASE("quantize_dynamic: the quantized model stays close to float32; backward is refused by name") {
  manual_seed(4);
  Toy model;
  model.eval();
  Tensor ids = ids_batch(), lengths = lengths_batch();
  Tensor y_float = model(ids, lengths).detach();
  for (QScheme scheme : {QScheme::per_channel, QScheme::per_tensor}) {
    const std::string scheme_name = qscheme_name(scheme);
    CAPTURE(scheme_name);
    Toy q;
    q.load_state_dict(model.state_dict());
    q.eval();
    quantize_dynamic(q, {.scheme = scheme});
    Tensor y = q(ids, lengths);
    // outputs of size ~1 from int8 products: well under 0.05 (measured ~0.003)
    const double diff = max_abs_diff(y, y_float);
    MESSAGE(scheme_name << ": max |quantized - float32| = " << diff);
    CHECK(diff < 0.05);
    // it really ran in int8: the output layer equals, bit for bit, the int8 arithmetic written out
    // here on its own (uint8 codes, exact integer sums, the float epilogue)
    Tensor features = q.rnn(q.embedding(ids), {.lengths = lengths}).output.detach();
    CHECK(q.out(features).to_vector<float>() == int8_linear_by_hand(features, q.out.quantized()->weight(),
                                                                     q.out.quantized()->bias));
    CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("backward is not supported"), Error);
    {
      NoGradGuard no_grad;  // inference: no graph, no error
      CHECK(q(ids, lengths).to_vector<float>() == y.to_vector<float>());
    }
  }
}

TEST_CASE("quantized GRU: padded steps keep the state and output zeros, as the float GRU") {
  manual_seed(5);
  struct Holder : Module {
    Quantizable<GRU> gru{{.input_size = 4, .hidden_size = 6, .num_layers = 1, .bidirectional = true}};
    Holder() : Module("Holder") { register_module("gru", gru); }
  } holder;
  quantize_dynamic(holder);
  REQUIRE(holder.gru.quantized());
  Tensor x = zeros({2, 3, 4}) + 0.5;
  NoGradGuard no_grad;
  auto [y, h_n] = holder.gru(x, {.lengths = tensor({3, 1}).to(DType::i64)});
  std::vector<float> v = y.to_vector<float>();  // (2, 3, 12)
  for (int64_t t = 1; t < 3; ++t)
    for (int64_t j = 0; j < 12; ++j) CHECK(v[(1 * 3 + t) * 12 + j] == 0.0f);
  // sequence 1's forward final state is its step-0 output
  std::vector<float> h = h_n.to_vector<float>();  // (2, 2, 6): [direction][batch][H]
  for (int64_t j = 0; j < 6; ++j) CHECK(h[(0 * 2 + 1) * 6 + j] == v[(1 * 3 + 0) * 12 + j]);
}

TEST_CASE("quantized model: a sequence's output is the same bit for bit alone and in a batch") {
  // Every product of the quantized Toy (the GRU's input and recurrent ones, the output layer) is
  // int8 with per-row activation scales, and the rest is row-wise float32 arithmetic, so a
  // sequence's output cannot depend on the other sequences or on the padding beside it.
  manual_seed(7);
  const std::vector<std::vector<int64_t>> sequences = {{1, 2, 3, 4, 5}, {9, 8}, {3, 3, 7, 1}};
  const int64_t batch = 3, T = 5;
  std::vector<int64_t> ids(batch * T, 0);  // padded with id 0
  for (int64_t b = 0; b < batch; ++b)
    std::copy(sequences[b].begin(), sequences[b].end(), ids.begin() + b * T);
  const Tensor batch_ids = from_vector(ids, {batch, T}), lengths = tensor({5, 2, 4}).to(DType::i64);
  for (QScheme scheme : {QScheme::per_channel, QScheme::per_tensor}) {
    const std::string scheme_name = qscheme_name(scheme);
    CAPTURE(scheme_name);
    Toy q;
    q.eval();
    quantize_dynamic(q, {.kinds = {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding}, .scheme = scheme});
    NoGradGuard no_grad;
    const std::vector<float> together = q(batch_ids, lengths).to_vector<float>();  // (B, T, 5)
    for (int64_t b = 0; b < batch; ++b) {
      CAPTURE(b);
      const int64_t len = static_cast<int64_t>(sequences[b].size());
      const std::vector<float> alone =
          q(from_vector(sequences[b], {1, len}), tensor({static_cast<double>(len)}).to(DType::i64)).to_vector<float>();
      CHECK(alone == std::vector<float>(together.begin() + b * T * 5, together.begin() + (b * T + len) * 5));
    }
  }
}

TEST_CASE("quantized GRU: a leading projection is refused by name (its input weights are quantized whole)") {
  struct Holder : Module {
    Quantizable<GRU> gru{{.input_size = 4, .hidden_size = 6}};
    Holder() : Module("Holder") { register_module("gru", gru); }
  } holder;
  quantize_dynamic(holder);
  REQUIRE(holder.gru.quantized());
  NoGradGuard no_grad;
  CHECK_THROWS_WITH_AS(holder.gru(zeros({2, 3, 3}), {.leading_projection = zeros({2, 3, 18})}),
                       doctest::Contains("quantized_gru: a leading projection is not supported"), ValueError);
}

TEST_CASE("load_quantized_weights: stored int8 weights reproduce the quantized model exactly; bad keys named") {
  manual_seed(6);
  Toy a;
  quantize_dynamic(a, {.kinds = {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding}});
  std::map<std::string, QuantizedWeight> stored;
  for (const auto& [name, q] : quantized_weights(a)) stored.emplace(name, *q);
  Toy b;  // different float weights; the int8 modules replace them, biases come from the state dict
  load_quantized_weights(b, stored);
  b.load_state_dict(a.state_dict());
  CHECK(b.out.quantized());
  NoGradGuard no_grad;
  CHECK(b(ids_batch(), lengths_batch()).to_vector<float>() == a(ids_batch(), lengths_batch()).to_vector<float>());
  std::map<std::string, QuantizedWeight> bad;
  bad.emplace("out.bias", stored.at("out.weight"));
  CHECK_THROWS_WITH_AS(load_quantized_weights(b, bad),
                       doctest::Contains("'out.bias' is not the weight of a Linear, Embedding or GRU"), ValueError);
  bad.clear();
  bad.emplace("out.weight", stored.at("rnn.weight_ih_l0"));
  Toy c;
  CHECK_THROWS_WITH_AS(load_quantized_weights(c, bad), doctest::Contains("'out.weight' is (24, 6) but the model's is (5, 16)"),
                       ValueError);
  CHECK(!c.out.quantized());  // refused before anything was swapped
}

TEST_CASE("quantize_dynamic: a plain (not Quantizable) member is named, not skipped") {
  struct Plain : Module {
    Linear fc{{.in_features = 3, .out_features = 2}};
    Plain() : Module("Plain") { register_module("fc", fc); }
  } plain;
  CHECK_THROWS_WITH_AS(quantize_dynamic(plain), doctest::Contains("Linear 'fc' cannot be swapped"), ValueError);
}

// A program written against the float modules reads a Quantizable slot's tensors as a Linear's:
// `toy.out.weight` is the registered parameter itself (PyTorch's spelling); quantizing empties it.
TEST_CASE("quantize: a Linear or Embedding slot's tensors are members, the registered parameters themselves") {
  manual_seed(0);
  Toy toy;
  CHECK(&toy.out.weight == &toy.out->weight);
  CHECK(&toy.out.bias == &toy.out->bias);
  CHECK(&toy.embedding.weight == &toy.embedding->weight);
  {
    NoGradGuard no_grad;
    toy.out.weight.fill_(0.25);  // through the member: the parameter the model computes with
  }
  std::vector<float> registered;
  for (const auto& [name, p] : toy.named_parameters())
    if (name == "out.weight") registered = p.to_vector<float>();
  CHECK(registered == std::vector<float>(5 * 16, 0.25f));
  const Tensor before = toy(ids_batch(), lengths_batch());
  quantize_dynamic(toy, {.kinds = {QuantKind::Linear, QuantKind::Embedding}});
  CHECK_FALSE(toy.out.weight.defined());  // the float weights are gone
  CHECK_FALSE(toy.embedding.weight.defined());
  CHECK(toy.out.quantized() != nullptr);
  CHECK_THROWS_WITH_AS(toy.out->weight, doctest::Contains("its float weights are gone"), ValueError);
  const Tensor after = toy(ids_batch(), lengths_batch());  // the quantized modules compute
  CHECK(max(abs(sub(after, before))).item() < 0.05);
}
