// The translator's ONNX graphs, built with the ONNX protobuf schema and checked with the ONNX
// checker (libonnx). The mapping of each part to ONNX ops is described in onnx_export.h.
#include "tools/export/onnx_export.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "core/autograd.h"
#include "ops/quantized.h"

namespace seqgrad::tools::onnx {
namespace {

namespace pb = ::onnx;

// ---- attributes and tensors

pb::AttributeProto attr(const std::string& name, int64_t value) {
  pb::AttributeProto a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::INT);
  a.set_i(value);
  return a;
}

pb::AttributeProto attr(const std::string& name, const std::vector<int64_t>& values) {
  pb::AttributeProto a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
  return a;
}

pb::AttributeProto attr(const std::string& name, const std::string& value) {
  pb::AttributeProto a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::STRING);
  a.set_s(value);
  return a;
}

pb::AttributeProto attr(const std::string& name, pb::GraphProto graph) {
  pb::AttributeProto a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::GRAPH);
  *a.mutable_g() = std::move(graph);
  return a;
}

// A float32 TensorProto holding t's values (row-major, copied to the host).
pb::TensorProto float_tensor(const std::string& name, const Tensor& t) {
  pb::TensorProto p;
  p.set_name(name);
  p.set_data_type(pb::TensorProto::FLOAT);
  for (int64_t d : t.shape()) p.add_dims(d);
  std::vector<float> values = t.cpu().contiguous().to_vector<float>();
  p.set_raw_data(values.data(), values.size() * sizeof(float));
  return p;
}

template <typename T>
pb::TensorProto constant_tensor(const std::string& name, int data_type, const std::vector<T>& values,
                                const std::vector<int64_t>& dims) {
  pb::TensorProto p;
  p.set_name(name);
  p.set_data_type(data_type);
  for (int64_t d : dims) p.add_dims(d);
  p.set_raw_data(values.data(), values.size() * sizeof(T));
  return p;
}

// A graph input or output: element type and dims, a dim given by name (dynamic) or size.
struct Dim {
  std::string param;
  int64_t size = 0;
};
pb::ValueInfoProto value_info(const std::string& name, int elem_type, const std::vector<Dim>& dims) {
  pb::ValueInfoProto v;
  v.set_name(name);
  pb::TypeProto_Tensor* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  pb::TensorShapeProto* shape = t->mutable_shape();
  for (const Dim& d : dims) {
    if (d.param.empty()) shape->add_dim()->set_dim_value(d.size);
    else shape->add_dim()->set_dim_param(d.param);
  }
  return v;
}

// ---- the graph builder: nodes into the current graph, weights and constants into the model's
// top-level graph (a Scan body reads them from there), every value name unique in the model.

class Builder {
 public:
  explicit Builder(pb::GraphProto* top) : top_(top), graph_(top) {}

  // Adds a node and returns its output names (`outputs` of them).
  std::vector<std::string> ops(const std::string& type, const std::vector<std::string>& inputs,
                               std::initializer_list<pb::AttributeProto> attrs, int outputs) {
    std::string name = fresh(type);
    std::vector<std::string> names;
    for (int i = 0; i < outputs; ++i) names.push_back(outputs > 1 ? fmt::format("{}:{}", name, i) : name);
    add_node(name, type, inputs, attrs, names);
    return names;
  }
  std::string op(const std::string& type, const std::vector<std::string>& inputs,
                 std::initializer_list<pb::AttributeProto> attrs = {}) {
    return ops(type, inputs, attrs, 1)[0];
  }
  // Gives `value` the name `name` (for a graph's outputs).
  void rename_output(const std::string& value, const std::string& name) {
    add_node(fresh("Identity"), "Identity", {value}, {}, {name});
  }

  // A weight, added once to the top-level graph under `name`.
  std::string weight(const std::string& name, const Tensor& t) {
    if (names_.insert(name).second) *top_->add_initializer() = float_tensor(name, t);
    return name;
  }
  // An int8 weight (`values` holds integers in [-128, 127] as floats), added once under `name`.
  std::string int8_weight(const std::string& name, const Tensor& values) {
    if (names_.insert(name).second) {
      std::vector<float> v = values.cpu().contiguous().to_vector<float>();
      std::vector<int8_t> q(v.begin(), v.end());
      *top_->add_initializer() = constant_tensor(name, pb::TensorProto::INT8, q, values.shape().vec());
    }
    return name;
  }
  // A value computed once from weights alone, in the top-level graph (not in a Scan body, where it
  // would be computed again at every step): `emit` builds it the first time `name` is asked for.
  template <typename Emit>
  std::string weight_value(const std::string& name, Emit emit) {
    auto [it, added] = weight_values_.try_emplace(name);
    if (added) {
      Scope scope = enter(top_);
      it->second = emit();
    }
    return it->second;
  }
  std::string ints(const std::vector<int64_t>& values) {
    return constant(pb::TensorProto::INT64, values, {static_cast<int64_t>(values.size())});
  }
  std::string scalar_i64(int64_t value) { return constant(pb::TensorProto::INT64, std::vector<int64_t>{value}, {}); }
  std::string scalar_f32(float value) { return constant(pb::TensorProto::FLOAT, std::vector<float>{value}, {}); }
  std::string scalar_f64(double value) { return constant(pb::TensorProto::DOUBLE, std::vector<double>{value}, {}); }

  // Builds nodes into `sub` (a Scan body) while the returned guard lives.
  struct Scope {
    Builder& b;
    pb::GraphProto* previous;
    ~Scope() { b.graph_ = previous; }
  };
  Scope enter(pb::GraphProto* sub) { return Scope{*this, std::exchange(graph_, sub)}; }  // prvalue: no copy

 private:
  std::string fresh(const std::string& stem) { return fmt::format("{}_{}", stem, counter_++); }
  void add_node(const std::string& name, const std::string& type, const std::vector<std::string>& inputs,
                std::initializer_list<pb::AttributeProto> attrs, const std::vector<std::string>& outputs) {
    pb::NodeProto* n = graph_->add_node();
    n->set_name(name);
    n->set_op_type(type);
    for (const std::string& in : inputs) n->add_input(in);
    for (const std::string& out : outputs) n->add_output(out);
    for (const pb::AttributeProto& a : attrs) *n->add_attribute() = a;
  }
  template <typename T>
  std::string constant(int data_type, const std::vector<T>& values, const std::vector<int64_t>& dims) {
    std::string name = fresh("const");
    *top_->add_initializer() = constant_tensor(name, data_type, values, dims);
    return name;
  }

  pb::GraphProto* top_;
  pb::GraphProto* graph_;
  std::set<std::string> names_;
  std::map<std::string, std::string> weight_values_;
  int64_t counter_ = 0;
};

// ---- layers

// An int8 weight (rows, cols) as float32 tensors that the tensor ops can rearrange: its values
// q (exact: |q| <= 128) and its scales s (rows, 1), W ≈ s · q.
struct Int8Weight {
  Tensor q, scale;
};
Int8Weight int8_tensors(const QuantizedWeight& w) {
  std::vector<float> scales(static_cast<size_t>(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) scales[static_cast<size_t>(r)] = w.scale(r);
  return {w.int8_values().to(DType::f32), from_vector(scales, {w.rows, 1})};
}

// s · q in float32 from an int8 initializer and its scales: the stored weight is int8, the value
// the graph computes with is exactly seqgrad's dequantized weight (ops/quantized.h's dequantize).
std::string dequantized(Builder& b, const Int8Weight& w, const std::string& name) {
  return b.weight_value(name, [&] {
    std::string q = b.op("Cast", {b.int8_weight(name + "_q", w.q)}, {attr("to", int64_t{pb::TensorProto::FLOAT})});
    return b.op("Mul", {q, b.weight(name + "_scale", w.scale)});
  });
}

std::string cast(Builder& b, const std::string& x, int to) { return b.op("Cast", {x}, {attr("to", int64_t{to})}); }

// Each row of x (..., K) as uint8 codes with its own scale and zero point, exactly as seqgrad's
// quantized_linear chooses them (ops/quantized.h: PyTorch's ChooseQuantizationParams on each row,
// in its double arithmetic): DynamicQuantizeLinear has one range per tensor, so the rows would
// depend on the batch.
//   lo = min(min_k x, 0), hi = max(max_k x, 0)           (double)
//   s = float((hi - lo) / 255), 0.1 where that is 0 or 1/s overflows
//   z = clamp(round(-lo/s or 255 - hi/s, from the end whose rounding loses less), 0, 255)
//   codes = clamp(round(x · (1/s)) + z, 0, 255)
struct RowCodes {
  std::string codes, scale, zero_point;  // (..., K) uint8, (..., 1) float, (..., 1) int32
};
RowCodes quantize_rows(Builder& b, const std::string& x) {
  constexpr int kFloat = pb::TensorProto::FLOAT, kDouble = pb::TensorProto::DOUBLE;
  const std::vector<int64_t> last = {-1};
  const std::string zero = b.scalar_f32(0.0f), one = b.scalar_f32(1.0f), q_max = b.scalar_f64(255.0);
  const std::string lo = cast(b, b.op("Min", {b.op("ReduceMin", {x}, {attr("axes", last)}), zero}), kDouble);
  const std::string hi = cast(b, b.op("Max", {b.op("ReduceMax", {x}, {attr("axes", last)}), zero}), kDouble);
  std::string s = cast(b, b.op("Div", {b.op("Sub", {hi, lo}), q_max}), kFloat);  // (..., 1)
  const std::string unusable = b.op("Or", {b.op("Equal", {s, zero}), b.op("IsInf", {b.op("Div", {one, s})})});
  s = b.op("Where", {unusable, b.scalar_f32(0.1f), s});
  // the zero point from whichever end of the range loses less precision: from_min = -lo/s with
  // error |0| - |lo/s| = lo/s (lo <= 0), from_max = 255 - hi/s with error 255 - |hi/s| = from_max
  const std::string s_d = cast(b, s, kDouble), lo_s = b.op("Div", {lo, s_d});
  const std::string from_max = b.op("Sub", {q_max, b.op("Div", {hi, s_d})});
  const std::string initial = b.op("Where", {b.op("Less", {lo_s, from_max}), b.op("Neg", {lo_s}), from_max});
  const std::string z = b.op("Clip", {b.op("Round", {initial}), b.scalar_f64(0.0), q_max});  // (..., 1) double
  const std::string scaled = b.op("Round", {b.op("Mul", {x, b.op("Div", {one, s})})});
  const std::string codes = b.op("Clip", {b.op("Add", {scaled, cast(b, z, kFloat)}), zero, b.scalar_f32(255.0f)});
  return {cast(b, codes, pb::TensorProto::UINT8), s, cast(b, z, pb::TensorProto::INT32)};
}

// Linear: y = x · Wᵀ (+ b) over the last axis; W is stored transposed, (in, out), for MatMul.
// An int8 layer (nn::quantize_dynamic) computes as seqgrad's quantized_linear: each row's codes
// (quantize_rows), MatMulInteger's exact int32 product acc = codes · W_qᵀ, the zero points taken
// off as z · Σ_k W_q[n, k] (onnxruntime's MatMulInteger takes one zero point per tensor), and
// y = (s_x · s_w) · float(acc - z · Σ W_q), the same float operations in the same order.
std::string linear(Builder& b, const std::string& x, const nn::Quantizable<nn::Linear>& layer,
                   const std::string& name) {
  std::string y;
  const nn::QuantizedLinear* quantized = layer.quantized();
  if (quantized) {
    Int8Weight w = int8_tensors(quantized->weight());
    RowCodes xq = quantize_rows(b, x);
    const std::string w_q = b.int8_weight(name + ".weight_t_q", w.q.transpose(0, 1));  // (in, out)
    const std::string sums = b.weight_value(name + ".weight_sums", [&] {                // (out,) int32
      return b.op("ReduceSum", {cast(b, w_q, pb::TensorProto::INT32), b.ints({0})}, {attr("keepdims", int64_t{0})});
    });
    const std::string acc = b.op("MatMulInteger", {xq.codes, w_q});  // (..., out) int32
    const std::string centred = b.op("Sub", {acc, b.op("Mul", {xq.zero_point, sums})});
    const std::string scale = b.op("Mul", {xq.scale, b.weight(name + ".weight_scale", w.scale.reshape({-1}))});
    y = b.op("Mul", {scale, cast(b, centred, pb::TensorProto::FLOAT)});
  } else {
    y = b.op("MatMul", {x, b.weight(name + ".weight_t", layer->weight.transpose(0, 1))});
  }
  const Tensor& bias = quantized ? quantized->bias : layer->bias;
  if (!bias.defined()) return y;
  return b.op("Add", {y, b.weight(name + ".bias", bias)});
}

// Embedding: Gather over the table; an int8 table gathers its rows and their scales.
std::string embedding(Builder& b, const nn::Quantizable<nn::Embedding>& table, const std::string& ids,
                      const std::string& name) {
  if (!table.quantized()) return b.op("Gather", {b.weight(name + ".weight", table->weight), ids});
  Int8Weight w = int8_tensors(table.quantized()->weight());
  std::string rows = b.op("Gather", {b.int8_weight(name + ".weight_q", w.q), ids});  // (..., E) int8
  std::string scales = b.op("Gather", {b.weight(name + ".weight_scale", w.scale), ids});  // (..., 1)
  return b.op("Mul", {b.op("Cast", {rows}, {attr("to", int64_t{pb::TensorProto::FLOAT})}), scales});
}

// PyTorch's gate rows [r; z; n] in ONNX's order [z; r; h] (n and h are the same candidate gate).
Tensor onnx_gate_order(const Tensor& w, int64_t hidden) {
  return cat({w.narrow(0, hidden, hidden), w.narrow(0, 0, hidden), w.narrow(0, 2 * hidden, hidden)}, 0);
}

// One of ONNX's GRU weight inputs, W or R (dirs, 3H, F) in ONNX's gate order, from each
// direction's (3H, F) weight. An int8 GRU stores its int8 values and scales and runs the ONNX GRU
// on their dequantized values: ONNX has no int8 GRU (onnxruntime's quantize_dynamic keeps GRUs
// float too), so the recurrence computes in float32 where seqgrad's int8 GRU quantizes its inputs.
std::string gru_input(Builder& b, const std::vector<Tensor>& weights,
                      const std::vector<const QuantizedWeight*>& quantized, int64_t hidden, const std::string& name) {
  std::vector<Tensor> values, scales;
  for (size_t d = 0; d < quantized.size(); ++d) {
    if (!quantized[d]) {
      values.push_back(onnx_gate_order(weights[d], hidden));
      continue;
    }
    Int8Weight w = int8_tensors(*quantized[d]);
    values.push_back(onnx_gate_order(w.q, hidden));
    scales.push_back(onnx_gate_order(w.scale, hidden));
  }
  if (scales.empty()) return b.weight(name, stack(values, 0));
  SG_CHECK(scales.size() == values.size(), "onnx export: {}: one direction is int8 and the other is not", name);
  return dequantized(b, {stack(values, 0), stack(scales, 0)}, name);
}

// The W, R and B inputs of ONNX's GRU for one layer: (dirs, 3H, F), (dirs, 3H, H), (dirs, 6H).
std::vector<std::string> gru_weights(Builder& b, const nn::Quantizable<nn::GRU>& gru, int64_t layer,
                                     const std::string& name) {
  const nn::QuantizedGRU* quantized = gru.quantized();
  const nn::RNNOptions& options = quantized ? quantized->options() : gru->options();
  const int64_t H = options.hidden_size;
  std::vector<Tensor> w, r;
  std::vector<const QuantizedWeight*> w_q, r_q;
  std::vector<Tensor> bias;
  for (int64_t d = 0; d < (options.bidirectional ? 2 : 1); ++d) {
    const nn::Direction direction = d == 0 ? nn::Direction::forward : nn::Direction::reverse;
    Tensor b_ih_in, b_hh_in;
    if (quantized) {
      const nn::QuantizedGRU::Layer& p = quantized->layer(layer, direction);
      w.emplace_back(), w_q.push_back(&p.weight_ih);
      r.emplace_back(), r_q.push_back(&p.weight_hh);
      b_ih_in = p.bias_ih, b_hh_in = p.bias_hh;
    } else {
      const nn::RNNWeights& p = gru->weights(layer, direction);
      w.push_back(p.weight_ih), w_q.push_back(nullptr);
      r.push_back(p.weight_hh), r_q.push_back(nullptr);
      b_ih_in = p.bias_ih, b_hh_in = p.bias_hh;
    }
    Tensor b_ih = b_ih_in.defined() ? onnx_gate_order(b_ih_in, H) : zeros({3 * H});
    Tensor b_hh = b_hh_in.defined() ? onnx_gate_order(b_hh_in, H) : zeros({3 * H});
    bias.push_back(cat({b_ih, b_hh}, 0));
  }
  std::string prefix = fmt::format("{}.l{}", name, layer);
  return {gru_input(b, w, w_q, H, prefix + ".W"), gru_input(b, r, r_q, H, prefix + ".R"),
          b.weight(prefix + ".B", stack(bias, 0))};
}

// Where(keep, Softmax(Where(keep, scores, -inf)), 0): scores (B, S), keep (B, S) true at real
// tokens (the library's keep mask, nn/mask.h).
std::string masked_softmax(Builder& b, const std::string& scores, const std::string& keep) {
  std::string minus_inf = b.scalar_f32(-std::numeric_limits<float>::infinity());
  std::string zero = b.scalar_f32(0.0f);
  std::string w = b.op("Softmax", {b.op("Where", {keep, scores, minus_inf})}, {attr("axis", int64_t{-1})});
  return b.op("Where", {keep, w, zero});  // a row without a real token: NaN -> 0
}

// weights (B, S) · memory (B, S, 2H) -> context (B, 2H)
std::string context_of(Builder& b, const std::string& weights, const std::string& memory) {
  std::string w3 = b.op("Unsqueeze", {weights, b.ints({1})});  // (B, 1, S)
  return b.op("Squeeze", {b.op("MatMul", {w3, memory}), b.ints({1})});
}

// ---- encoder: src, src_lengths -> memory, keys, state, src_keep (names of the values)

struct EncoderValues {
  std::string memory, keys, state, keep;
};

EncoderValues emit_encoder(Builder& b, const models::Seq2Seq& model, const std::string& src,
                           const std::string& lengths) {
  const models::Seq2SeqConfig& c = model.config();
  const models::Encoder& enc = model.encoder;
  std::string x = embedding(b, enc.embedding, src, "encoder.embedding");  // (B, S, E)
  x = b.op("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0, 2})});                         // (S, B, E)
  std::string lens32 = b.op("Cast", {lengths}, {attr("to", int64_t{pb::TensorProto::INT32})});
  std::vector<std::string> final_states;  // per layer (1, B, 2H): [h_fwd | h_bwd]
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::vector<std::string> w = gru_weights(b, enc.rnn, l, "encoder.rnn");
    std::vector<std::string> y = b.ops("GRU", {x, w[0], w[1], w[2], lens32},
                                       {attr("hidden_size", c.hidden_size), attr("direction", std::string("bidirectional")),
                                        attr("linear_before_reset", int64_t{1})},
                                       2);  // Y (S, 2, B, H), Y_h (2, B, H)
    x = b.op("Transpose", {y[0]}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})});  // (S, B, 2, H)
    x = b.op("Reshape", {x, b.ints({0, 0, -1})});                                      // (S, B, 2H)
    std::string h = b.op("Transpose", {y[1]}, {attr("perm", std::vector<int64_t>{1, 0, 2})});  // (B, 2, H)
    h = b.op("Reshape", {h, b.ints({0, -1})});                                                  // (B, 2H)
    final_states.push_back(b.op("Unsqueeze", {h, b.ints({0})}));                                // (1, B, 2H)
  }
  EncoderValues v;
  std::string pairs = b.op("Concat", final_states, {attr("axis", int64_t{0})});  // (L, B, 2H)
  v.state = b.op("Tanh", {linear(b, pairs, enc.bridge, "encoder.bridge")});      // (L, B, H)
  v.memory = b.op("Transpose", {x}, {attr("perm", std::vector<int64_t>{1, 0, 2})});  // (B, S, 2H)
  v.keys = c.attention == models::AttentionKind::scaled_dot
               ? b.op("Identity", {v.memory})
               : linear(b, v.memory, model.decoder.additive_part()->w_k, "decoder.attention.w_k");  // (B, S, A)
  // keep (B, S): position < length, true at real tokens
  std::string steps = b.op("Gather", {b.op("Shape", {src}), b.scalar_i64(1)}, {attr("axis", int64_t{0})});
  std::string positions = b.op("Range", {b.scalar_i64(0), steps, b.scalar_i64(1)});  // (S,)
  v.keep = b.op("Less", {b.op("Unsqueeze", {positions, b.ints({0})}), b.op("Unsqueeze", {lengths, b.ints({1})})});
  return v;
}

// ---- one decoder step: y_prev (B,), state (L, B, H) and the encoder's values -> logits (B, V),
// new state (L, B, H), attention weights (B, S)

struct StepValues {
  std::string logits, state, weights;
};

StepValues emit_decoder_step(Builder& b, const models::Seq2Seq& model, const std::string& y_prev,
                             const std::string& state, const EncoderValues& enc) {
  const models::Seq2SeqConfig& c = model.config();
  const models::AttnDecoder& dec = model.decoder;
  std::string query = b.op("Gather", {state, b.scalar_i64(c.num_layers - 1)}, {attr("axis", int64_t{0})});  // (B, H)
  std::string context, weights;  // (B, 2H), (B, S)
  if (c.attention != models::AttentionKind::scaled_dot) {
    std::string qp = b.op("Unsqueeze", {linear(b, query, dec.additive_part()->w_q, "decoder.attention.w_q"), b.ints({1})});
    std::string features = b.op("Tanh", {b.op("Add", {qp, enc.keys})});                    // (B, S, A)
    std::string energies = linear(b, features, dec.additive_part()->w_v, "decoder.attention.w_v");  // (B, S, 1)
    weights = masked_softmax(b, b.op("Squeeze", {energies, b.ints({2})}), enc.keep);
    context = context_of(b, weights, enc.memory);
  }
  if (c.attention != models::AttentionKind::additive) {
    std::string q = b.op("Unsqueeze", {linear(b, query, *dec.query_projection(), "decoder.query_proj"), b.ints({2})});  // (B, 2H, 1)
    std::string scores = b.op("Squeeze", {b.op("MatMul", {enc.memory, q}), b.ints({2})});                    // (B, S)
    scores = b.op("Mul", {scores, b.scalar_f32(static_cast<float>(1.0 / std::sqrt(2.0 * c.hidden_size)))});
    std::string w = masked_softmax(b, scores, enc.keep);
    std::string ctx = context_of(b, w, enc.memory);
    if (context.empty()) {
      context = ctx, weights = w;
    } else {  // hybrid: the mean of the additive and scaled-dot contexts and weights
      std::string half = b.scalar_f32(0.5f);
      context = b.op("Mul", {b.op("Add", {context, ctx}), half});
      weights = b.op("Mul", {b.op("Add", {weights, w}), half});
    }
  }
  std::string embedded = embedding(b, dec.embedding, y_prev, "decoder.embedding");  // (B, E)
  std::string x = b.op("Unsqueeze", {b.op("Concat", {embedded, context}, {attr("axis", int64_t{1})}), b.ints({0})});
  std::vector<std::string> new_states;  // per layer (1, B, H)
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::vector<std::string> w = gru_weights(b, dec.rnn, l, "decoder.rnn");
    std::string h0 = b.op("Slice", {state, b.ints({l}), b.ints({l + 1}), b.ints({0})});  // (1, B, H)
    std::vector<std::string> y = b.ops("GRU", {x, w[0], w[1], w[2], "", h0},
                                       {attr("hidden_size", c.hidden_size), attr("linear_before_reset", int64_t{1})},
                                       2);             // Y (1, 1, B, H), Y_h (1, B, H)
    x = b.op("Squeeze", {y[0], b.ints({1})});          // (1, B, H): the next layer's input
    new_states.push_back(y[1]);
  }
  StepValues s;
  s.state = b.op("Concat", new_states, {attr("axis", int64_t{0})});  // (L, B, H)
  std::string output = b.op("Squeeze", {x, b.ints({0})});           // (B, H)
  std::string features = c.deep_output ? b.op("Concat", {output, context, embedded}, {attr("axis", int64_t{1})})
                                       : output;  // (B, F)
  s.logits = linear(b, features, dec.out, "decoder.out");  // (B, V)
  s.weights = weights;
  return s;
}

// ---- models

const int kF32 = pb::TensorProto::FLOAT, kI64 = pb::TensorProto::INT64, kBool = pb::TensorProto::BOOL;

pb::ModelProto new_model(const std::string& name, const ExportOptions& options) {
  pb::ModelProto m;
  m.set_ir_version(8);  // IR 8 (ONNX 1.10+) covers opsets 13..17
  m.set_producer_name("seqgrad");
  m.set_producer_version(SEQGRAD_VERSION);
  m.set_doc_string("seq2seq translator with attention, exported by seqgrad export");
  pb::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  m.mutable_graph()->set_name(name);
  return m;
}

std::string checked_bytes(const pb::ModelProto& m, const std::string& file) {
  try {
    // The checker, then strict shape inference with type checks: what Python's
    // onnx.checker.check_model(model, full_check=True) does.
    pb::checker::check_model(m);
    pb::ModelProto inferred = m;
    pb::shape_inference::InferShapes(inferred, pb::OpSchemaRegistry::Instance(),
                                     pb::ShapeInferenceOptions(/*check_type_val=*/true, /*strict_mode_val=*/1));
  } catch (const std::exception& e) {
    throw Error(fmt::format("onnx export: {} fails the ONNX checker: {}", file, e.what()));
  }
  std::string bytes;
  SG_CHECK(m.SerializeToString(&bytes), "onnx export: {} could not be serialized (over 2 GiB?)", file);
  return bytes;
}

// The values every graph shares: dims and the encoder's outputs as graph inputs/outputs.
struct Dims {
  int64_t layers, hidden, keys, vocab;
};
Dims dims_of(const models::Seq2SeqConfig& c) {
  int64_t keys = c.attention == models::AttentionKind::scaled_dot
                     ? 2 * c.hidden_size
                     : (c.attention_size ? c.attention_size : c.hidden_size);
  return {c.num_layers, c.hidden_size, keys, c.tgt_vocab};
}

void add_encoder_value_infos(google::protobuf::RepeatedPtrField<pb::ValueInfoProto>* list, const Dims& d,
                             const EncoderValues& names) {
  *list->Add() = value_info(names.memory, kF32, {{"batch"}, {"src_seq"}, {"", 2 * d.hidden}});
  *list->Add() = value_info(names.keys, kF32, {{"batch"}, {"src_seq"}, {"", d.keys}});
  *list->Add() = value_info(names.state, kF32, {{"", d.layers}, {"batch"}, {"", d.hidden}});
  *list->Add() = value_info(names.keep, kBool, {{"batch"}, {"src_seq"}});
}

std::string build_encoder(const models::Seq2Seq& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_encoder", options);
  pb::GraphProto* g = m.mutable_graph();
  *g->add_input() = value_info("src", kI64, {{"batch"}, {"src_seq"}});
  *g->add_input() = value_info("src_lengths", kI64, {{"batch"}});
  Builder b(g);
  EncoderValues v = emit_encoder(b, model, "src", "src_lengths");
  EncoderValues out{"memory", "keys", "state", "src_keep"};
  b.rename_output(v.memory, out.memory);
  b.rename_output(v.keys, out.keys);
  b.rename_output(v.state, out.state);
  b.rename_output(v.keep, out.keep);
  add_encoder_value_infos(g->mutable_output(), dims_of(model.config()), out);
  return checked_bytes(m, "encoder.onnx");
}

std::string build_decoder_step(const models::Seq2Seq& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_decoder_step", options);
  pb::GraphProto* g = m.mutable_graph();
  const Dims d = dims_of(model.config());
  EncoderValues enc{"memory", "keys", "state", "src_keep"};
  *g->add_input() = value_info("y_prev", kI64, {{"batch"}});
  add_encoder_value_infos(g->mutable_input(), d, enc);
  Builder b(g);
  StepValues s = emit_decoder_step(b, model, "y_prev", enc.state, enc);
  b.rename_output(b.op("LogSoftmax", {s.logits}, {attr("axis", int64_t{-1})}), "log_probs");
  b.rename_output(s.state, "new_state");
  b.rename_output(s.weights, "weights");
  *g->add_output() = value_info("log_probs", kF32, {{"batch"}, {"", d.vocab}});
  *g->add_output() = value_info("new_state", kF32, {{"", d.layers}, {"batch"}, {"", d.hidden}});
  *g->add_output() = value_info("weights", kF32, {{"batch"}, {"src_seq"}});
  return checked_bytes(m, "decoder_step.onnx");
}

// Teacher forcing: the encoder, then Scan over tgt's time axis with the decoder step as its body
// (state carried, logits stacked along axis 1).
std::string build_model(const models::Seq2Seq& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_seq2seq", options);
  pb::GraphProto* g = m.mutable_graph();
  const Dims d = dims_of(model.config());
  *g->add_input() = value_info("src", kI64, {{"batch"}, {"src_seq"}});
  *g->add_input() = value_info("src_lengths", kI64, {{"batch"}});
  *g->add_input() = value_info("tgt", kI64, {{"batch"}, {"tgt_seq"}});
  Builder b(g);
  EncoderValues enc = emit_encoder(b, model, "src", "src_lengths");

  pb::GraphProto body;
  body.set_name("decoder_step");
  *body.add_input() = value_info("scan_state_in", kF32, {{"", d.layers}, {"batch"}, {"", d.hidden}});
  *body.add_input() = value_info("scan_y_prev", kI64, {{"batch"}});
  {
    Builder::Scope scope = b.enter(&body);
    StepValues s = emit_decoder_step(b, model, "scan_y_prev", "scan_state_in", enc);
    b.rename_output(s.state, "scan_state_out");
    b.rename_output(s.logits, "scan_logits");
  }
  *body.add_output() = value_info("scan_state_out", kF32, {{"", d.layers}, {"batch"}, {"", d.hidden}});
  *body.add_output() = value_info("scan_logits", kF32, {{"batch"}, {"", d.vocab}});

  std::vector<std::string> y = b.ops("Scan", {enc.state, "tgt"},
                                     {attr("num_scan_inputs", int64_t{1}), attr("scan_input_axes", std::vector<int64_t>{1}),
                                      attr("scan_output_axes", std::vector<int64_t>{1}), attr("body", std::move(body))},
                                     2);  // final state, logits (B, T, V)
  b.rename_output(y[1], "output");
  *g->add_output() = value_info("output", kF32, {{"batch"}, {"tgt_seq"}, {"", d.vocab}});
  return checked_bytes(m, "model.onnx");
}

}  // namespace

bool onnx_available() { return true; }

Graphs export_graphs(const models::Seq2Seq& model, const ExportOptions& options) {
  check_options(options);
  NoGradGuard no_grad;
  return {build_model(model, options), build_encoder(model, options), build_decoder_step(model, options)};
}

}  // namespace seqgrad::tools::onnx
