// The quantized modules and quantize_dynamic's swap (nn/quantized.h): one walk over the model
// finds every swappable module with its name; a quantized module replaces the float one in its
// parent (Module::replace_child), which drops the float module and its weights.
#include "nn/quantized.h"

#include <algorithm>
#include <optional>
#include <set>

namespace seqgrad::nn {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The kind of a module quantize_dynamic knows, float or quantized; nullopt for the others.
std::optional<QuantKind> kind_of(const Module& m, bool& quantized) {
  quantized = dynamic_cast<const QuantizedModule*>(&m) != nullptr;
  if (dynamic_cast<const Linear*>(&m) || dynamic_cast<const QuantizedLinear*>(&m)) return QuantKind::Linear;
  if (dynamic_cast<const Embedding*>(&m) || dynamic_cast<const QuantizedEmbedding*>(&m)) return QuantKind::Embedding;
  if (dynamic_cast<const GRU*>(&m) || dynamic_cast<const QuantizedGRU*>(&m)) return QuantKind::GRU;
  return std::nullopt;
}

// A module of a known kind: its parent (null for the model itself), its name there and full name.
struct Found {
  Module* parent;
  std::string name, path;
  Module* module;
  QuantKind kind;
  bool quantized;
};

void collect(Module& m, Module* parent, const std::string& name, const std::string& path, std::vector<Found>& out) {
  bool quantized = false;
  if (std::optional<QuantKind> kind = kind_of(m, quantized)) out.push_back({parent, name, path, &m, *kind, quantized});
  for (const auto& [child_name, child] : m.children()) collect(*child, &m, child_name, join(path, child_name), out);
}

std::vector<Found> modules_of(Module& model) {
  std::vector<Found> found;
  collect(model, nullptr, "", "", found);
  return found;
}

std::string shown(const std::string& path) { return path.empty() ? std::string("(the model itself)") : path; }

// The quantized counterpart of a float module of `kind`; `path` names it in errors.
std::unique_ptr<Module> quantized_copy(const Module& m, QuantKind kind, QScheme scheme, const std::string& path) {
  switch (kind) {
    case QuantKind::Linear: return QuantizedLinear::from_float(dynamic_cast<const Linear&>(m), scheme, path);
    case QuantKind::Embedding: return QuantizedEmbedding::from_float(dynamic_cast<const Embedding&>(m), scheme, path);
    case QuantKind::GRU: return QuantizedGRU::from_float(dynamic_cast<const GRU&>(m), scheme, path);
  }
  throw ValueError(fmt::format("quantize_dynamic: unknown module kind {}", static_cast<int>(kind)));
}

// The float32 bias of a quantized module, a copy outside autograd (not trained).
Tensor float_bias(const Tensor& bias) { return bias.defined() ? bias.detach().clone() : Tensor(); }

}  // namespace

const char* quant_kind_name(QuantKind kind) {
  switch (kind) {
    case QuantKind::Linear: return "Linear";
    case QuantKind::GRU: return "GRU";
    case QuantKind::Embedding: return "Embedding";
  }
  return "?";
}

QuantKind parse_quant_kind(const std::string& name) {
  for (QuantKind kind : {QuantKind::Linear, QuantKind::GRU, QuantKind::Embedding})
    if (name == quant_kind_name(kind)) return kind;
  throw ValueError(fmt::format("quantize_dynamic: unknown module kind '{}' (expected Linear, GRU or Embedding)", name));
}

// ---- QuantizedLinear

QuantizedLinear::QuantizedLinear(QuantizedWeight weight, const Tensor& bias_in)
    : QuantizedModule("QuantizedLinear"), weight_(std::move(weight)) {
  SG_CHECK_SHAPE(!bias_in.defined() || (bias_in.ndim() == 1 && bias_in.size(0) == weight_.rows),
                 "QuantizedLinear ({}): bias {} must be ({},)", weight_.name, bias_in.shape(), weight_.rows);
  bias = bias_in;
  register_buffer("bias", bias);
}

std::unique_ptr<QuantizedLinear> QuantizedLinear::from_float(const Linear& layer, QScheme scheme,
                                                             const std::string& name) {
  return std::make_unique<QuantizedLinear>(quantize_weight(layer.weight, scheme, name), float_bias(layer.bias));
}

Tensor QuantizedLinear::operator()(const Tensor& x) const { return quantized_linear(x, weight_, bias); }

std::vector<std::pair<std::string, const QuantizedWeight*>> QuantizedLinear::int8_weights() const {
  return {{"weight", &weight_}};
}

// ---- QuantizedEmbedding

QuantizedEmbedding::QuantizedEmbedding(QuantizedWeight weight)
    : QuantizedModule("QuantizedEmbedding"), weight_(std::move(weight)) {
  SG_CHECK_VALUE(weight_.values.defined(), "QuantizedEmbedding ({}): the table must be held row by row "
                 "(Int8Use::rows)", weight_.name);
}

std::unique_ptr<QuantizedEmbedding> QuantizedEmbedding::from_float(const Embedding& table, QScheme scheme,
                                                                   const std::string& name) {
  return std::make_unique<QuantizedEmbedding>(quantize_weight(table.weight, scheme, name, Int8Use::rows));
}

Tensor QuantizedEmbedding::operator()(const Tensor& ids) const { return quantized_embedding(ids, weight_); }

std::vector<std::pair<std::string, const QuantizedWeight*>> QuantizedEmbedding::int8_weights() const {
  return {{"weight", &weight_}};
}

// ---- QuantizedGRU

namespace {

// QuantizedGRU's products: quantized_linear over all steps, gru_layer_quantized per step.
class Int8GRUProducts final : public GRUProducts {
 public:
  explicit Int8GRUProducts(const std::vector<QuantizedGRU::Layer>& layers) : layers_(layers) {}
  Tensor project(int64_t index, const Tensor& input, int64_t first) const override {
    SG_CHECK_VALUE(first == 0, "quantized_gru: a leading projection is not supported (its input weights are "
                   "quantized whole); pass the whole input");
    return quantized_linear(input, layers_[index].weight_ih, layers_[index].bias_ih);
  }
  Tensor recur(int64_t index, const Tensor& xp, const Tensor& h0, const StepKeep& keep,
               Direction direction) const override {
    return gru_layer_quantized(xp, h0, layers_[index].weight_hh, layers_[index].bias_hh, keep.keep, direction);
  }

 private:
  const std::vector<QuantizedGRU::Layer>& layers_;
};

std::string layer_suffix(int64_t index, int64_t dirs) {
  return fmt::format("_l{}{}", index / dirs, index % dirs == 1 ? "_reverse" : "");
}

}  // namespace

QuantizedGRU::QuantizedGRU(RNNOptions options, std::vector<Layer> layers)
    : QuantizedModule("QuantizedGRU"), options_(options), layers_(std::move(layers)) {
  const int64_t dirs = num_directions(), H = options.hidden_size;
  SG_CHECK_VALUE(static_cast<int64_t>(layers_.size()) == options.num_layers * dirs,
                 "QuantizedGRU: {} layers of weights for num_layers {} × {} direction(s)", layers_.size(),
                 options.num_layers, dirs);
  for (size_t k = 0; k < layers_.size(); ++k) {
    Layer& l = layers_[k];
    const int64_t in = k < static_cast<size_t>(dirs) ? options.input_size : dirs * H;
    SG_CHECK_SHAPE(l.weight_ih.rows == 3 * H && l.weight_ih.cols == in && l.weight_hh.rows == 3 * H &&
                       l.weight_hh.cols == H,
                   "QuantizedGRU ({}): weights ({}, {}) and ({}, {}) must be ({}, {}) and ({}, {})", l.weight_ih.name,
                   l.weight_ih.rows, l.weight_ih.cols, l.weight_hh.rows, l.weight_hh.cols, 3 * H, in, 3 * H, H);
    const std::string suffix = layer_suffix(static_cast<int64_t>(k), dirs);
    register_buffer("bias_ih" + suffix, l.bias_ih);
    register_buffer("bias_hh" + suffix, l.bias_hh);
  }
}

std::unique_ptr<QuantizedGRU> QuantizedGRU::from_float(const GRU& gru, QScheme scheme, const std::string& name) {
  std::vector<Layer> layers;
  const int64_t dirs = gru.num_directions();
  for (int64_t k = 0; k < gru.options().num_layers * dirs; ++k) {
    const RNNWeights& w = gru.weights(k / dirs, k % dirs == 0 ? Direction::forward : Direction::reverse);
    const std::string suffix = layer_suffix(k, dirs);
    layers.push_back({.weight_ih = quantize_weight(w.weight_ih, scheme, join(name, "weight_ih" + suffix)),
                      .weight_hh = quantize_weight(w.weight_hh, scheme, join(name, "weight_hh" + suffix)),
                      .bias_ih = float_bias(w.bias_ih),
                      .bias_hh = float_bias(w.bias_hh)});
  }
  return std::make_unique<QuantizedGRU>(gru.options(), std::move(layers));
}

GRUOutput QuantizedGRU::operator()(const Tensor& x, const GRUArgs& args) const {
  return gru_forward("quantized_gru", options_, DType::f32, false, x, args, Int8GRUProducts(layers_));
}

const QuantizedGRU::Layer& QuantizedGRU::layer(int64_t layer, Direction direction) const {
  SG_CHECK_INDEX(layer >= 0 && layer < options_.num_layers, "quantized_gru: layer {} out of range for num_layers = {}",
                 layer, options_.num_layers);
  SG_CHECK_INDEX(direction == Direction::forward || options_.bidirectional,
                 "quantized_gru: the reverse direction exists only when bidirectional");
  return layers_[layer * num_directions() + (direction == Direction::reverse ? 1 : 0)];
}

std::vector<std::pair<std::string, const QuantizedWeight*>> QuantizedGRU::int8_weights() const {
  std::vector<std::pair<std::string, const QuantizedWeight*>> out;
  for (size_t k = 0; k < layers_.size(); ++k) {
    const std::string suffix = layer_suffix(static_cast<int64_t>(k), num_directions());
    out.emplace_back("weight_ih" + suffix, &layers_[k].weight_ih);
    out.emplace_back("weight_hh" + suffix, &layers_[k].weight_hh);
  }
  return out;
}

// ---- the swap

Tensor linear_weight(const Quantizable<Linear>& layer) {
  return layer.quantized() ? dequantize(layer.quantized()->weight()) : layer->weight;
}

std::vector<std::string> quantize_dynamic(Module& model, const QuantizeOptions& options) {
  auto wanted = [&](QuantKind kind) {
    return std::find(options.kinds.begin(), options.kinds.end(), kind) != options.kinds.end();
  };
  const std::vector<Found> found = modules_of(model);
  for (const Found& f : found) {  // refuse before changing anything
    if (!wanted(f.kind)) continue;
    SG_CHECK_VALUE(!f.quantized, "quantize_dynamic: {} '{}' is already quantized (quantizing twice would round "
                   "twice); quantize the float32 model", quant_kind_name(f.kind), shown(f.path));
    SG_CHECK_VALUE(f.parent != nullptr && f.parent->is_replaceable(f.name),
                   "quantize_dynamic: {} '{}' cannot be swapped for its quantized counterpart: hold it in an "
                   "nn::Quantizable<nn::{}> member of its parent", quant_kind_name(f.kind), shown(f.path),
                   quant_kind_name(f.kind));
  }
  std::vector<std::string> done;
  for (const Found& f : found) {
    if (!wanted(f.kind)) continue;
    std::unique_ptr<Module> q = quantized_copy(*f.module, f.kind, options.scheme, f.path);
    for (const auto& [name, weight] : static_cast<const QuantizedModule&>(*q).int8_weights())
      done.push_back(join(f.path, name));
    f.parent->replace_child(f.name, std::move(q));  // the float module is destroyed here
  }
  return done;
}

std::map<std::string, const QuantizedWeight*> quantized_weights(const Module& model) {
  std::map<std::string, const QuantizedWeight*> found;
  for (const auto& [path, m] : model.named_modules())
    if (auto* q = dynamic_cast<const QuantizedModule*>(m))
      for (const auto& [name, weight] : q->int8_weights()) found[join(path, name)] = weight;
  return found;
}

namespace {

// The stored weight `name` of a module at `path`, removed from `left`; ValueError when missing or
// of another shape.
QuantizedWeight take(std::map<std::string, QuantizedWeight>& left, const std::string& path, const std::string& name,
                     const Tensor& model_weight, Int8Use use) {
  const std::string key = join(path, name);
  auto it = left.find(key);
  SG_CHECK_VALUE(it != left.end(), "load_quantized_weights: '{}' is missing (the other weights of module '{}' are "
                 "int8)", key, shown(path));
  QuantizedWeight q = std::move(it->second);
  left.erase(it);
  SG_CHECK_VALUE((model_weight.shape() == Shape{q.rows, q.cols}), "load_quantized_weights: '{}' is ({}, {}) but "
                 "the model's is {}", key, q.rows, q.cols, model_weight.shape());
  if (use == Int8Use::gemm && q.values.defined()) return make_quantized_weight(q.values, q.scales, key, use);
  if (use == Int8Use::rows && !q.values.defined())
    return make_quantized_weight(q.int8_values(), q.scales, key, use);
  q.name = key;
  return q;
}

// The quantized module for a float one whose stored int8 weights are in `left` (its biases are
// copied from the float module: load_state_dict then sets them).
std::unique_ptr<Module> stored_copy(const Found& f, std::map<std::string, QuantizedWeight>& left) {
  switch (f.kind) {
    case QuantKind::Linear: {
      const auto& layer = dynamic_cast<const Linear&>(*f.module);
      return std::make_unique<QuantizedLinear>(take(left, f.path, "weight", layer.weight, Int8Use::gemm),
                                               float_bias(layer.bias));
    }
    case QuantKind::Embedding: {
      const auto& table = dynamic_cast<const Embedding&>(*f.module);
      return std::make_unique<QuantizedEmbedding>(take(left, f.path, "weight", table.weight, Int8Use::rows));
    }
    case QuantKind::GRU: {
      const auto& gru = dynamic_cast<const GRU&>(*f.module);
      std::vector<QuantizedGRU::Layer> layers;
      const int64_t dirs = gru.num_directions();
      for (int64_t k = 0; k < gru.options().num_layers * dirs; ++k) {
        const RNNWeights& w = gru.weights(k / dirs, k % dirs == 0 ? Direction::forward : Direction::reverse);
        const std::string suffix = layer_suffix(k, dirs);
        layers.push_back({.weight_ih = take(left, f.path, "weight_ih" + suffix, w.weight_ih, Int8Use::gemm),
                          .weight_hh = take(left, f.path, "weight_hh" + suffix, w.weight_hh, Int8Use::gemm),
                          .bias_ih = float_bias(w.bias_ih),
                          .bias_hh = float_bias(w.bias_hh)});
      }
      return std::make_unique<QuantizedGRU>(gru.options(), std::move(layers));
    }
  }
  throw ValueError(fmt::format("load_quantized_weights: unknown module kind {}", static_cast<int>(f.kind)));
}

// The parameter names of a module's weights that quantization makes int8.
std::vector<std::string> int8_names(const Found& f) {
  if (f.kind != QuantKind::GRU) return {"weight"};
  std::vector<std::string> names;
  const auto& gru = dynamic_cast<const GRU&>(*f.module);
  const int64_t dirs = gru.num_directions();
  for (int64_t k = 0; k < gru.options().num_layers * dirs; ++k)
    for (const char* w : {"weight_ih", "weight_hh"}) names.push_back(w + layer_suffix(k, dirs));
  return names;
}

}  // namespace

void load_quantized_weights(Module& model, const std::map<std::string, QuantizedWeight>& weights) {
  const std::vector<Found> found = modules_of(model);
  std::set<std::string> int8_able;  // the weights of the float modules that have an int8 counterpart
  for (const Found& f : found)
    if (!f.quantized)
      for (const std::string& name : int8_names(f)) int8_able.insert(join(f.path, name));
  for (const auto& [key, q] : weights)
    SG_CHECK_VALUE(int8_able.count(key), "load_quantized_weights: '{}' is not the weight of a Linear, Embedding or GRU "
                   "in this model", key);
  std::map<std::string, QuantizedWeight> left = weights;
  std::vector<std::pair<const Found*, std::unique_ptr<Module>>> swaps;
  for (const Found& f : found) {
    if (f.quantized || !weights.count(join(f.path, int8_names(f).front()))) continue;
    SG_CHECK_VALUE(f.parent != nullptr && f.parent->is_replaceable(f.name), "load_quantized_weights: {} '{}' cannot "
                   "be swapped for its quantized counterpart: hold it in an nn::Quantizable<nn::{}> member",
                   quant_kind_name(f.kind), shown(f.path), quant_kind_name(f.kind));
    swaps.emplace_back(&f, stored_copy(f, left));  // every check before the model changes
  }
  SG_CHECK_VALUE(left.empty(), "load_quantized_weights: '{}' is stored int8 but the other weights of its module "
                 "are not", left.empty() ? std::string() : left.begin()->first);
  for (auto& [f, q] : swaps) f->parent->replace_child(f->name, std::move(q));
}

}  // namespace seqgrad::nn
