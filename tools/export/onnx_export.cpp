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

pb::AttributeProto attr(const std::string& name, float value) {
  pb::AttributeProto a;
  a.set_name(name);
  a.set_type(pb::AttributeProto::FLOAT);
  a.set_f(value);
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
// depend on the batch. Q is 2^bits - 1 for int8_activation_bits(): 255, or 127 where seqgrad's
// own int8 products use 7 bits (a CPU without VNNI), so the graph computes what seqgrad does there.
//   lo = min(min_k x, 0), hi = max(max_k x, 0)           (double)
//   s = float((hi - lo) / Q), 0.1 where that is 0 or 1/s overflows
//   z = clamp(round(-lo/s or Q - hi/s, from the end whose rounding loses less), 0, Q)
//   codes = clamp(round(x · (1/s)) + z, 0, Q)
struct RowCodes {
  std::string codes, scale, zero_point;  // (..., K) uint8, (..., 1) float, (..., 1) int32
};
RowCodes quantize_rows(Builder& b, const std::string& x) {
  constexpr int kFloat = pb::TensorProto::FLOAT, kDouble = pb::TensorProto::DOUBLE;
  const std::vector<int64_t> last = {-1};
  const double top = static_cast<double>((int64_t{1} << int8_activation_bits()) - 1);
  const std::string zero = b.scalar_f32(0.0f), one = b.scalar_f32(1.0f), q_max = b.scalar_f64(top);
  const std::string lo = cast(b, b.op("Min", {b.op("ReduceMin", {x}, {attr("axes", last)}), zero}), kDouble);
  const std::string hi = cast(b, b.op("Max", {b.op("ReduceMax", {x}, {attr("axes", last)}), zero}), kDouble);
  std::string s = cast(b, b.op("Div", {b.op("Sub", {hi, lo}), q_max}), kFloat);  // (..., 1)
  const std::string unusable = b.op("Or", {b.op("Equal", {s, zero}), b.op("IsInf", {b.op("Div", {one, s})})});
  s = b.op("Where", {unusable, b.scalar_f32(0.1f), s});
  // the zero point from whichever end of the range loses less precision: from_min = -lo/s with
  // error |0| - |lo/s| = lo/s (lo <= 0), from_max = Q - hi/s with error Q - |hi/s| = from_max
  const std::string s_d = cast(b, s, kDouble), lo_s = b.op("Div", {lo, s_d});
  const std::string from_max = b.op("Sub", {q_max, b.op("Div", {hi, s_d})});
  const std::string initial = b.op("Where", {b.op("Less", {lo_s, from_max}), b.op("Neg", {lo_s}), from_max});
  const std::string z = b.op("Clip", {b.op("Round", {initial}), b.scalar_f64(0.0), q_max});  // (..., 1) double
  const std::string scaled = b.op("Round", {b.op("Mul", {x, b.op("Div", {one, s})})});
  const std::string codes = b.op("Clip", {b.op("Add", {scaled, cast(b, z, kFloat)}), zero, b.scalar_f32(static_cast<float>(top))});
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

// 0, 1, ..., T - 1 (T,) for ids (B, T)
std::string positions_of(Builder& b, const std::string& ids) {
  std::string steps = b.op("Gather", {b.op("Shape", {ids}), b.scalar_i64(1)}, {attr("axis", int64_t{0})});
  return b.op("Range", {b.scalar_i64(0), steps, b.scalar_i64(1)});
}

// keep (B, S): position < length, true at real tokens (the library's keep mask, nn/mask.h)
std::string keep_mask(Builder& b, const std::string& src, const std::string& lengths) {
  return b.op("Less", {b.op("Unsqueeze", {positions_of(b, src), b.ints({0})}),
                       b.op("Unsqueeze", {lengths, b.ints({1})})});
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
  v.keep = keep_mask(b, src, lengths);
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

// ---- the Transformer translator (models/seq2seq/transformer.h)

// A multi-head attention's keys and values projected and split into heads: (B, h, K, d) each.
struct Heads {
  std::string keys, values;
};

// What the encoder hands the decoder: memory (B, S, E), src_keep (B, S), the keep mask as the
// heads' scores take it (B, 1, 1, S), and per decoder layer the cross-attention's heads (B, h, S, d).
struct TransformerMemory {
  std::string memory, keep, key_keep;
  std::vector<Heads> cross;
};

// keep (B, S) -> (B, 1, 1, S): the same keys for every head and query.
std::string heads_keep(Builder& b, const std::string& keep) { return b.op("Unsqueeze", {keep, b.ints({1, 2})}); }

// One target position of the decoder.
struct TransformerStep {
  std::string logits;          // (B, V)
  std::string weights;         // (B, S): the last layer's cross-attention averaged over its heads
  std::vector<Heads> present;  // per layer: the self-attention's cache with this position's heads appended
};

// The Transformer's modules in ONNX ops, their weights stored under their parameter names.
class TransformerGraph {
 public:
  TransformerGraph(Builder& b, const models::TransformerTranslator& model, int64_t opset)
      : b_(b), model_(model), layers_(model.config().num_layers), opset_(opset),
        norm_first_(model.encoder.options().layer.norm_first) {}

  // src (B, S), src_lengths (B,) -> the encoder's output and each decoder layer's cross heads
  TransformerMemory encode(const std::string& src, const std::string& lengths) {
    TransformerMemory m;
    m.keep = keep_mask(b_, src, lengths);
    m.key_keep = heads_keep(b_, m.keep);
    std::string x = embed(model_.src_embedding(), src_table(), src, positions_of(b_, src));  // (B, S, E)
    for (int64_t i = 0; i < layers_; ++i) {
      const nn::TransformerEncoderLayer& layer = model_.encoder.layer(i);
      const std::string name = fmt::format("encoder.layers.{}", i);
      x = residual(x, layer.norm1, name + ".norm1", [&](const std::string& y) {
        const std::string attn = name + ".self_attn";
        return attend(y, heads_of(y, layer.self_attn, attn), m.key_keep, layer.self_attn, attn).output;
      });
      x = residual(x, layer.norm2, name + ".norm2", [&](const std::string& y) { return feed_forward(y, layer, name); });
    }
    m.memory = final_norm(x, model_.encoder.norm.get(), "encoder.norm");
    for (int64_t i = 0; i < layers_; ++i)
      m.cross.push_back(heads_of(m.memory, model_.decoder.layer(i).multihead_attn,
                                 fmt::format("decoder.layers.{}.multihead_attn", i)));
    return m;
  }

  // Teacher forcing: tgt (B, T) -> logits (B, T, V), position t attending to the positions <= t.
  std::string decode(const std::string& tgt, const TransformerMemory& m) {
    const std::string positions = positions_of(b_, tgt);  // (T,)
    // causal (T, T): query t keeps the keys j <= t, nn::causal_lengths' rows
    const std::string causal = b_.op("LessOrEqual", {b_.op("Unsqueeze", {positions, b_.ints({0})}),
                                                      b_.op("Unsqueeze", {positions, b_.ints({1})})});
    std::string x = embed(model_.tgt_embedding(), tgt_table(), tgt, positions);  // (B, T, E)
    for (int64_t i = 0; i < layers_; ++i) {
      const nn::MultiHeadAttention& self_attn = model_.decoder.layer(i).self_attn;
      const std::string attn = fmt::format("decoder.layers.{}.self_attn", i);
      x = decoder_layer(x, i, m, [&](const std::string& y) {
        return attend(y, heads_of(y, self_attn, attn), causal, self_attn, attn).output;
      });
    }
    return project_out(final_norm(x, model_.decoder.norm.get(), "decoder.norm"));
  }

  // One position: y_prev (B,) after the t positions whose self-attention heads `past` holds
  // (B, h, t, d) per layer; t, the position, is the caches' length (nn::TransformerDecoder::step).
  TransformerStep step(const std::string& y_prev, const std::vector<Heads>& past, const TransformerMemory& m) {
    TransformerStep s;
    const std::string t = b_.op("Gather", {b_.op("Shape", {past[0].keys}), b_.scalar_i64(2)}, {attr("axis", int64_t{0})});
    const std::string position = b_.op("Range", {t, b_.op("Add", {t, b_.scalar_i64(1)}), b_.scalar_i64(1)});  // (1,)
    const std::string ids = b_.op("Unsqueeze", {y_prev, b_.ints({1})});                                      // (B, 1)
    std::string x = embed(model_.tgt_embedding(), tgt_table(), ids, position);                                // (B, 1, E)
    std::string cross_weights;  // (B, h, 1, S)
    for (int64_t i = 0; i < layers_; ++i) {
      const nn::MultiHeadAttention& self_attn = model_.decoder.layer(i).self_attn;
      const std::string attn = fmt::format("decoder.layers.{}.self_attn", i);
      x = decoder_layer(
          x, i, m,
          [&](const std::string& y) {
            // this position's heads appended to the cache; its query attends to every cached
            // position, which is the causal mask's row for it
            const Heads own = heads_of(y, self_attn, attn);  // (B, h, 1, d)
            const Heads all{b_.op("Concat", {past[i].keys, own.keys}, {attr("axis", int64_t{2})}),
                            b_.op("Concat", {past[i].values, own.values}, {attr("axis", int64_t{2})})};
            s.present.push_back(all);
            return attend(y, all, "", self_attn, attn).output;
          },
          &cross_weights);
    }
    const std::string logits = project_out(final_norm(x, model_.decoder.norm.get(), "decoder.norm"));  // (B, 1, V)
    s.logits = b_.op("Squeeze", {logits, b_.ints({1})});
    s.weights = b_.op("ReduceMean", {cross_weights}, {attr("axes", std::vector<int64_t>{1, 2}),
                                                      attr("keepdims", int64_t{0})});
    return s;
  }

 private:
  // The embedding tables' parameter names: one shared matrix when tied.
  std::string src_table() const { return model_.config().tie_embeddings ? "embedding" : "src_embedding"; }
  std::string tgt_table() const { return model_.config().tie_embeddings ? "embedding" : "tgt_embedding"; }

  // √E · table[ids] + P[positions]: ids (B, T), positions (T,) -> (B, T, E). The sinusoidal table,
  // which seqgrad computes per call, is stored for as many positions as a learned one holds.
  std::string embed(const nn::Embedding& table, const std::string& name, const std::string& ids,
                    const std::string& positions) {
    const nn::PositionalEncoding& p = model_.positions;
    const std::string encodings = b_.weight("positions.table", p.encodings(p.options().max_len, 0, {}));  // (P, E)
    const float scale = static_cast<float>(std::sqrt(static_cast<double>(model_.config().hidden_size)));
    const std::string x = b_.op("Mul", {b_.op("Gather", {b_.weight(name + ".weight", table.weight), ids}),
                                        b_.scalar_f32(scale)});
    return b_.op("Add", {x, b_.op("Gather", {encodings, positions})});
  }

  // LayerNorm over the last axis: ONNX's LayerNormalization from opset 17; before, composed as
  // seqgrad's layer_norm_composed: (x - mean) / √(biased variance + eps) · weight + bias.
  std::string layer_norm(const std::string& x, const nn::LayerNorm& norm, const std::string& name) {
    const nn::LayerNorm::Options& o = norm.options();
    SG_CHECK_VALUE(o.normalized_shape.size() == 1, "onnx export: {} normalises over {}; the export handles the last "
                   "axis only", name, o.normalized_shape);
    const float eps = static_cast<float>(o.eps);
    if (opset_ >= 17) {
      std::vector<std::string> inputs = {x, b_.weight(name + ".weight", norm.weight.defined()
                                                                            ? norm.weight
                                                                            : ones(o.normalized_shape))};
      if (norm.bias.defined()) inputs.push_back(b_.weight(name + ".bias", norm.bias));
      return b_.op("LayerNormalization", inputs, {attr("axis", int64_t{-1}), attr("epsilon", eps)});
    }
    const std::vector<int64_t> last = {-1};
    const std::string centred = b_.op("Sub", {x, b_.op("ReduceMean", {x}, {attr("axes", last)})});
    const std::string variance = b_.op("ReduceMean", {b_.op("Mul", {centred, centred})}, {attr("axes", last)});
    std::string y = b_.op("Div", {centred, b_.op("Sqrt", {b_.op("Add", {variance, b_.scalar_f32(eps)})})});
    if (norm.weight.defined()) y = b_.op("Mul", {y, b_.weight(name + ".weight", norm.weight)});
    if (norm.bias.defined()) y = b_.op("Add", {y, b_.weight(name + ".bias", norm.bias)});
    return y;
  }
  std::string final_norm(const std::string& x, const nn::LayerNorm* norm, const std::string& name) {
    return norm ? layer_norm(x, *norm, name) : x;
  }

  // A sublayer f around its norm: post-norm norm(x + f(x)), pre-norm x + f(norm(x)) (dropout is
  // the identity at inference).
  template <class F>
  std::string residual(const std::string& x, const nn::LayerNorm& norm, const std::string& name, F&& f) {
    if (norm_first_) return b_.op("Add", {x, f(layer_norm(x, norm, name))});
    return layer_norm(b_.op("Add", {x, f(x)}), norm, name);
  }

  // x (B, T, E) through the attention's input projection `which` (0 query, 1 key, 2 value),
  // split into heads (B, h, T, d). The packed in_proj_weight (3E, E) is stored as three (E, E).
  std::string project_heads(const std::string& x, const nn::MultiHeadAttention& attn, int which,
                            const std::string& name) {
    const int64_t E = attn.options().embed_dim, heads = attn.options().num_heads;
    const Tensor& separate = which == 0 ? attn.q_proj_weight : which == 1 ? attn.k_proj_weight : attn.v_proj_weight;
    const Tensor w = attn.packed() ? attn.in_proj_weight.narrow(0, which * E, E) : separate;  // (E, E | kdim | vdim)
    const std::string prefix = fmt::format("{}.{}_proj", name, "qkv"[which]);
    std::string y = b_.op("MatMul", {x, b_.weight(prefix + ".weight_t", w.transpose(0, 1))});  // (B, T, E)
    if (attn.in_proj_bias.defined())
      y = b_.op("Add", {y, b_.weight(prefix + ".bias", attn.in_proj_bias.narrow(0, which * E, E))});
    y = b_.op("Reshape", {y, b_.ints({0, 0, heads, E / heads})});                        // (B, T, h, d)
    return b_.op("Transpose", {y}, {attr("perm", std::vector<int64_t>{0, 2, 1, 3})});  // (B, h, T, d)
  }
  Heads heads_of(const std::string& x, const nn::MultiHeadAttention& attn, const std::string& name) {
    return {project_heads(x, attn, 1, name), project_heads(x, attn, 2, name)};
  }

  // Queries x (B, T, E) over the heads: per head softmax(q kᵀ / √d) v, masked by `keep`
  // (broadcast to (B, h, T, K); "" keeps every key), the heads concatenated, then out_proj.
  struct Attended {
    std::string output, weights;  // (B, T, E), (B, h, T, K)
  };
  Attended attend(const std::string& x, const Heads& heads, const std::string& keep,
                  const nn::MultiHeadAttention& attn, const std::string& name) {
    const int64_t E = attn.options().embed_dim, h = attn.options().num_heads;
    const std::string q = project_heads(x, attn, 0, name);  // (B, h, T, d)
    const std::string keys_t = b_.op("Transpose", {heads.keys}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})});
    const std::string scores = b_.op("Mul", {b_.op("MatMul", {q, keys_t}),
                                             b_.scalar_f32(static_cast<float>(1.0 / std::sqrt(static_cast<double>(E / h))))});
    const std::string weights =
        keep.empty() ? b_.op("Softmax", {scores}, {attr("axis", int64_t{-1})}) : masked_softmax(b_, scores, keep);
    std::string merged = b_.op("Transpose", {b_.op("MatMul", {weights, heads.values})},
                               {attr("perm", std::vector<int64_t>{0, 2, 1, 3})});  // (B, T, h, d)
    merged = b_.op("Reshape", {merged, b_.ints({0, 0, E})});                      // (B, T, E)
    return {linear(b_, merged, attn.out_proj, name + ".out_proj"), weights};
  }

  // linear2(relu(linear1(x))), float or int8 (dropout is the identity at inference)
  std::string feed_forward(const std::string& x, const nn::detail::TransformerLayerBase& layer,
                           const std::string& name) {
    SG_CHECK_VALUE(layer.options().activation == nn::TransformerActivation::relu,
                   "onnx export: {}'s feed-forward activation is gelu; the export writes relu only", name);
    return linear(b_, b_.op("Relu", {linear(b_, x, layer.linear1, name + ".linear1")}), layer.linear2,
                  name + ".linear2");
  }

  // Decoder layer i: self-attention (given: teacher-forced or cached), cross-attention over the
  // memory, feed-forward; the cross-attention's weights (B, h, T, S) go to `cross_weights`.
  template <class SelfAttend>
  std::string decoder_layer(const std::string& x, int64_t i, const TransformerMemory& m, SelfAttend&& self_attend,
                            std::string* cross_weights = nullptr) {
    const nn::TransformerDecoderLayer& layer = model_.decoder.layer(i);
    const std::string name = fmt::format("decoder.layers.{}", i);
    std::string h = residual(x, layer.norm1, name + ".norm1", self_attend);
    h = residual(h, layer.norm2, name + ".norm2", [&](const std::string& y) {
      Attended a = attend(y, m.cross[i], m.key_keep, layer.multihead_attn, name + ".multihead_attn");
      if (cross_weights) *cross_weights = a.weights;
      return a.output;
    });
    return residual(h, layer.norm3, name + ".norm3", [&](const std::string& y) { return feed_forward(y, layer, name); });
  }

  // The decoder's output (..., E) -> logits (..., V): the output layer (float or int8), or the
  // tied embedding matrix, stored once and transposed by the runtime when it loads the graph.
  std::string project_out(const std::string& y) {
    if (const nn::Quantizable<nn::Linear>* out = model_.output_layer()) return linear(b_, y, *out, "out");
    const std::string table = b_.weight("embedding.weight", model_.tgt_embedding().weight);  // (V, E)
    const std::string table_t = b_.weight_value("embedding.weight_t", [&] {
      return b_.op("Transpose", {table}, {attr("perm", std::vector<int64_t>{1, 0})});
    });
    return b_.op("MatMul", {y, table_t});
  }

  Builder& b_;
  const models::TransformerTranslator& model_;
  const int64_t layers_, opset_;
  const bool norm_first_;
};

// The Transformer's per-layer heads as graph inputs or outputs: (batch, h, `length`, d).
pb::ValueInfoProto heads_info(const std::string& name, const models::Seq2SeqConfig& c, const std::string& length) {
  return value_info(name, kF32, {{"batch"}, {"", c.heads}, {length}, {"", c.hidden_size / c.heads}});
}

// Per layer i the graph inputs `stem`_key_i and `stem`_value_i (batch, h, `length`, d), as Heads.
std::vector<Heads> input_heads(pb::GraphProto* g, const std::string& stem, const models::Seq2SeqConfig& c,
                               const std::string& length) {
  std::vector<Heads> heads;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    heads.push_back({fmt::format("{}_key_{}", stem, i), fmt::format("{}_value_{}", stem, i)});
    *g->add_input() = heads_info(heads.back().keys, c, length);
    *g->add_input() = heads_info(heads.back().values, c, length);
  }
  return heads;
}

// Per layer i, heads[i] as the graph outputs `stem`_key_i and `stem`_value_i (batch, h, `length`, d).
void output_heads(Builder& b, pb::GraphProto* g, const std::vector<Heads>& heads, const std::string& stem,
                  const models::Seq2SeqConfig& c, const std::string& length) {
  for (size_t i = 0; i < heads.size(); ++i) {
    for (const auto& [value, kind] : {std::pair{heads[i].keys, "key"}, std::pair{heads[i].values, "value"}}) {
      const std::string name = fmt::format("{}_{}_{}", stem, kind, i);
      b.rename_output(value, name);
      *g->add_output() = heads_info(name, c, length);
    }
  }
}

std::string build_transformer_encoder(const models::TransformerTranslator& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_transformer_encoder", options);
  pb::GraphProto* g = m.mutable_graph();
  const models::Seq2SeqConfig& c = model.config();
  *g->add_input() = value_info("src", kI64, {{"batch"}, {"src_seq"}});
  *g->add_input() = value_info("src_lengths", kI64, {{"batch"}});
  Builder b(g);
  TransformerMemory v = TransformerGraph(b, model, options.opset).encode("src", "src_lengths");
  b.rename_output(v.memory, "memory");
  *g->add_output() = value_info("memory", kF32, {{"batch"}, {"src_seq"}, {"", c.hidden_size}});
  output_heads(b, g, v.cross, "cross", c, "src_seq");
  b.rename_output(v.keep, "src_keep");
  *g->add_output() = value_info("src_keep", kBool, {{"batch"}, {"src_seq"}});
  return checked_bytes(m, "encoder.onnx");
}

std::string build_transformer_decoder_step(const models::TransformerTranslator& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_transformer_decoder_step", options);
  pb::GraphProto* g = m.mutable_graph();
  const models::Seq2SeqConfig& c = model.config();
  *g->add_input() = value_info("y_prev", kI64, {{"batch"}});
  const std::vector<Heads> past = input_heads(g, "past", c, "past_seq");
  TransformerMemory memory;  // the encoder's values as inputs (the step needs no memory itself)
  memory.cross = input_heads(g, "cross", c, "src_seq");
  memory.keep = "src_keep";
  *g->add_input() = value_info(memory.keep, kBool, {{"batch"}, {"src_seq"}});
  Builder b(g);
  memory.key_keep = heads_keep(b, memory.keep);
  TransformerStep s = TransformerGraph(b, model, options.opset).step("y_prev", past, memory);
  b.rename_output(b.op("LogSoftmax", {s.logits}, {attr("axis", int64_t{-1})}), "log_probs");
  *g->add_output() = value_info("log_probs", kF32, {{"batch"}, {"", c.tgt_vocab}});
  output_heads(b, g, s.present, "present", c, "present_seq");
  b.rename_output(s.weights, "weights");
  *g->add_output() = value_info("weights", kF32, {{"batch"}, {"src_seq"}});
  return checked_bytes(m, "decoder_step.onnx");
}

std::string build_transformer_model(const models::TransformerTranslator& model, const ExportOptions& options) {
  pb::ModelProto m = new_model("seqgrad_transformer", options);
  pb::GraphProto* g = m.mutable_graph();
  *g->add_input() = value_info("src", kI64, {{"batch"}, {"src_seq"}});
  *g->add_input() = value_info("src_lengths", kI64, {{"batch"}});
  *g->add_input() = value_info("tgt", kI64, {{"batch"}, {"tgt_seq"}});
  Builder b(g);
  TransformerGraph transformer(b, model, options.opset);
  b.rename_output(transformer.decode("tgt", transformer.encode("src", "src_lengths")), "output");
  *g->add_output() = value_info("output", kF32, {{"batch"}, {"tgt_seq"}, {"", model.config().tgt_vocab}});
  return checked_bytes(m, "model.onnx");
}

}  // namespace

bool onnx_available() { return true; }

Graphs export_graphs(const models::TranslationModel& model, const ExportOptions& options) {
  check_options(options);
  NoGradGuard no_grad;
  if (const auto* gru = dynamic_cast<const models::Seq2Seq*>(&model))
    return {build_model(*gru, options), build_encoder(*gru, options), build_decoder_step(*gru, options)};
  const auto* transformer = dynamic_cast<const models::TransformerTranslator*>(&model);
  SG_CHECK_VALUE(transformer != nullptr, "onnx export: no ONNX export for the {} architecture", model.architecture());
  return {build_transformer_model(*transformer, options), build_transformer_encoder(*transformer, options),
          build_transformer_decoder_step(*transformer, options)};
}

}  // namespace seqgrad::tools::onnx
