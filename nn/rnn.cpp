// GRU and LSTM: the LSTM step (the GRU's step and its fused layer are ops: ops/gru.cpp; the
// derivations are in rnn.h), the cells, and the layer runner that projects every step's input
// with one GEMM and masks padded steps (the keep mask's false steps) with where().
#include "nn/rnn.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "nn/init.h"
#include "nn/mask.h"

namespace seqgrad::nn {
namespace {

// ---- per-step math. xp is the step's input projection W_ih x + b_ih, computed outside.

// The recurrent weight is passed transposed, w_hh_t = W_hhᵀ (H, G·H), taken once per sequence
// (as gru_step in ops/gru.cpp): every step's dW_hh then accumulates contiguously at that one
// transpose instead of as a strided (transposed) add into the parameter's gradient at each step.

// LSTM step.  xp: (B, 4H) [i | f | g | o],  state h, c: (B, H)  ->  {h', c'}
LSTMState lstm_step(const Tensor& xp, const LSTMState& state, const Tensor& w_hh_t, const Tensor& bias_hh) {
  const int64_t H = state.h.size(1);
  Tensor a = xp + recurrent_product(state.h, w_hh_t);   // (B, 4H): gate pre-activations
  if (bias_hh.defined()) a = a + bias_hh;
  Tensor i = sigmoid(a.narrow(1, 0, H));                // (B, H) input gate
  Tensor f = sigmoid(a.narrow(1, H, H));                // (B, H) forget gate
  Tensor g = tanh(a.narrow(1, 2 * H, H));               // (B, H) cell candidate
  Tensor o = sigmoid(a.narrow(1, 3 * H, H));            // (B, H) output gate
  Tensor c = f * state.c + i * g;                       // (B, H)
  return {.h = o * tanh(c), .c = c};
}

// The LSTM's state type for the step loop below.
struct LSTMMath {
  using State = LSTMState;
  static State step(const Tensor& xp, const State& s, const Tensor& w_hh_t, const Tensor& bias_hh) {
    return lstm_step(xp, s, w_hh_t, bias_hh);
  }
  static const Tensor& hidden(const State& s) { return s.h; }
  static State keep_where(const Tensor& keep, const State& next, const State& prev) {
    return {.h = where(keep, next.h, prev.h), .c = where(keep, next.c, prev.c)};
  }
};

// Which steps are real, from the arguments' lengths or keep mask.
struct StepMask {
  Tensor keep;           // (T, B, 1) bool, true at real steps; undefined when every step is real
  int64_t all_real = 0;  // steps t < all_real are real in every sequence: no where() needed
  int64_t any_real = 0;  // steps t >= any_real are padding in every sequence: not computed
};

// keep (B, T) (or lengths (B,), turned into it) -> the step mask. The extents all_real and
// any_real need the mask on the host; only the step-by-step runner (LSTM) asks for them, the
// GRU reads its padding steps once per call into a StepKeep (ops.h) for its fused layers.
enum class Extents : bool { skip, compute };
StepMask make_step_mask(const char* op, const Tensor& lengths, const Tensor& keep_or_undefined, const Tensor& x,
                        Extents extents) {
  const int64_t B = x.size(0), T = x.size(1);
  SG_CHECK_VALUE(!lengths.defined() || !keep_or_undefined.defined(),
                 "{}: give lengths or a keep mask, not both (x: {})", op, x.shape());
  Tensor keep = keep_or_undefined;
  if (lengths.defined()) {
    SG_CHECK_SHAPE(lengths.ndim() == 1 && lengths.size(0) == B, "{}: lengths {} must be (B,) = ({},) (x: {})", op,
                   lengths.shape(), B, x.shape());
    keep = keep_mask(lengths, T, op);  // (B, T)
  }
  if (!keep.defined()) return {.keep = {}, .all_real = T, .any_real = T};
  SG_CHECK_DTYPE(keep.dtype() == DType::b8, "{}: keep must be bool (true at real steps), got {} {}", op, keep.dtype(),
                 keep.shape());
  SG_CHECK_SHAPE(keep.shape() == Shape({B, T}), "{}: keep {} must be (B, T) = ({}, {}) (x: {})", op, keep.shape(), B, T,
                 x.shape());
  StepMask mask{.keep = keep.t().contiguous().unsqueeze(2), .all_real = T, .any_real = T};  // (T, B, 1)
  if (extents == Extents::skip) return mask;
  const std::vector<bool> real = mask.keep.cpu().to_vector<bool>();  // row-major (T, B)
  auto real_rows = [&](int64_t t) { return std::count(real.begin() + t * B, real.begin() + (t + 1) * B, true); };
  mask.all_real = 0;
  while (mask.all_real < T && real_rows(mask.all_real) == B) ++mask.all_real;
  mask.any_real = T;
  while (mask.any_real > 0 && real_rows(mask.any_real - 1) == 0) --mask.any_real;
  return mask;
}

// A GRU direction from its states y (T, B, H) (one gru_layer node): outputs stacked along
// `stack_dim` ((T, B, H) for 0, (B, T, H) for 1), zero at padded steps, and the final state.
std::pair<Tensor, Tensor> gru_direction_outputs(Tensor y, const StepMask& mask, Direction direction,
                                                int64_t stack_dim) {
  const int64_t T = y.size(0);
  Tensor final_state = y.select(0, direction == Direction::forward ? T - 1 : 0);
  if (mask.keep.defined())  // outputs are zero at padded steps
    y = where(mask.keep, y, zeros({}, {.dtype = y.dtype(), .device = y.device()}));
  return {stack_dim == 1 ? y.transpose(0, 1) : y, final_state};
}

// Runs one LSTM layer in one direction over time-major projected inputs xp (T, B, 4H), starting
// from `state`. Returns the per-step outputs stacked along `stack_dim` ((T, B, H) for 0, (B, T, H)
// for 1) and the final state.
std::pair<Tensor, LSTMState> lstm_direction(const Tensor& xp, LSTMState state, const RNNWeights& w,
                                            const StepMask& mask, Direction direction, int64_t stack_dim) {
  const int64_t T = xp.size(0);
  using Math = LSTMMath;
  const Tensor& h0 = Math::hidden(state);
  Tensor padding = zeros(h0.shape(), {.dtype = h0.dtype(), .device = h0.device()});  // (B, H)
  const Tensor w_hh_t = w.weight_hh.t();  // (H, G·H)
  std::vector<Tensor> outputs(T, padding);
  const std::vector<Tensor> xp_steps = unbind(xp.narrow(0, 0, mask.any_real), 0);  // steps past any_real are not run
  for (int64_t i = 0; i < mask.any_real; ++i) {
    const int64_t t = direction == Direction::forward ? i : mask.any_real - 1 - i;
    Math::State next = Math::step(xp_steps[t], state, w_hh_t, w.bias_hh);
    if (t < mask.all_real) {
      state = std::move(next);
      outputs[t] = Math::hidden(state);
    } else {  // some sequences are padding at t: their state is kept and their output is zero
      Tensor keep = mask.keep.select(0, t);  // (B, 1)
      outputs[t] = where(keep, Math::hidden(next), padding);
      state = Math::keep_where(keep, next, state);
    }
  }
  return {stack(outputs, stack_dim), std::move(state)};
}

// All layers and directions. x: (B, T, F); states: one initial state per layer · dirs + direction,
// replaced by the final ones. project(k, input (T, B, F)) gives a layer's input projections
// (T, B, G·H), and run(k, xp, state, direction, stack_dim) its outputs and final state as
// lstm_direction. Returns the top layer's output (B, T, dirs · H).
template <class State, class Project, class Run>
Tensor run_layers(const RNNOptions& options, bool training, const Tensor& x, std::vector<State>& states,
                  const Project& project, const Run& run) {
  const int64_t dirs = options.bidirectional ? 2 : 1;
  // Time-major, so that each step's rows of the projection are one contiguous block.
  Tensor input = x.transpose(0, 1).contiguous();  // (T, B, F)
  for (int64_t layer = 0;; ++layer) {
    const bool last = layer + 1 == options.num_layers;
    std::vector<Tensor> outputs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t k = layer * dirs + d;
      Tensor xp = project(k, input);  // (T, B, G·H): every step in one GEMM
      const Direction direction = d == 0 ? Direction::forward : Direction::reverse;
      auto [output, final_state] = run(k, xp, states[k], direction, last ? 1 : 0);
      outputs.push_back(output);  // (B, T, H) for the last layer, else (T, B, H)
      states[k] = std::move(final_state);
    }
    Tensor y = dirs == 1 ? outputs[0] : cat(outputs, -1);  // [forward | reverse]
    if (last) return y;
    input = training && options.dropout > 0 ? dropout(y, options.dropout) : y;
  }
}

// The float GRU's products: ops' linear and gru_layer over its parameters.
class FloatGRUProducts final : public GRUProducts {
 public:
  explicit FloatGRUProducts(const std::vector<RNNWeights>& weights) : weights_(weights) {}
  Tensor project(int64_t index, const Tensor& input, int64_t first) const override {
    const Tensor& w = weights_[index].weight_ih;
    return linear(input, first == 0 ? w : w.narrow(1, first, w.size(1) - first), weights_[index].bias_ih);
  }
  Tensor recur(int64_t index, const Tensor& xp, const Tensor& h0, const StepKeep& keep,
               Direction direction) const override {
    return gru_layer(xp, h0, weights_[index].weight_hh, weights_[index].bias_hh, keep, direction);
  }

 private:
  const std::vector<RNNWeights>& weights_;
};

std::string layer_suffix(int64_t layer, int64_t direction) {
  return fmt::format("_l{}{}", layer, direction == 1 ? "_reverse" : "");
}

void check_cell_input(const char* op, const Tensor& x, int64_t input_size, const Tensor& weight) {
  SG_CHECK(x.defined(), "{}: input is undefined", op);
  SG_CHECK_SHAPE(x.ndim() == 2, "{}: expected input (B, input_size = {}), got x: {}", op, input_size, x.shape());
  SG_CHECK_SHAPE(x.size(1) == input_size, "{}: input feature size {} != input_size {} (x: {})", op, x.size(1),
                 input_size, x.shape());
  SG_CHECK_DTYPE(x.dtype() == weight.dtype(),
                 "{}: input dtype {} != parameter dtype {} (x: {}); convert the module with .to()", op, x.dtype(),
                 weight.dtype(), x.shape());
}

// A state tensor given by the caller must be `expected`, with the input's dtype; undefined means zeros.
Tensor state_or_zeros(const char* op, const char* name, const Tensor& state, const Shape& expected,
                      const Tensor& x) {
  if (!state.defined()) return zeros(expected, {.dtype = x.dtype(), .device = x.device()});
  SG_CHECK_SHAPE(state.shape() == expected, "{}: {} shape {} != {} (x: {})", op, name, state.shape(), expected,
                 x.shape());
  SG_CHECK_DTYPE(state.dtype() == x.dtype(), "{}: {} dtype {} != input dtype {}", op, name, state.dtype(),
                 x.dtype());
  return state;
}

void check_sizes(const char* op, int64_t input_size, int64_t hidden_size) {
  SG_CHECK_VALUE(input_size > 0, "{}: input_size = {} must be positive", op, input_size);
  SG_CHECK_VALUE(hidden_size > 0, "{}: hidden_size = {} must be positive", op, hidden_size);
}

void uniform_all(const std::vector<Tensor*>& params, int64_t hidden_size) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Tensor* p : params)
    if (p->defined()) init::uniform_(*p, -bound, bound);
}

}  // namespace

// ---- GRUCell

GRUCell::GRUCell(Options options) : Module("GRUCell"), options_(options) {
  check_sizes("gru_cell", options.input_size, options.hidden_size);
  const int64_t H = options.hidden_size;
  weight_ih = empty({3 * H, options.input_size});
  weight_hh = empty({3 * H, H});
  if (options.bias) {
    bias_ih = empty({3 * H});
    bias_hh = empty({3 * H});
  }
  register_parameter("weight_ih", weight_ih);
  register_parameter("weight_hh", weight_hh);
  register_parameter("bias_ih", bias_ih);
  register_parameter("bias_hh", bias_hh);
  reset_parameters();
}

void GRUCell::reset_parameters() { uniform_all({&weight_ih, &weight_hh, &bias_ih, &bias_hh}, options_.hidden_size); }

Tensor GRUCell::operator()(const Tensor& x, const Tensor& h) const {
  check_cell_input("gru_cell", x, options_.input_size, weight_ih);
  Tensor h0 = state_or_zeros("gru_cell", "h", h, {x.size(0), options_.hidden_size}, x);  // (B, H)
  return gru_step(linear(x, weight_ih, bias_ih), h0, weight_hh.t(), bias_hh);
}

// ---- LSTMCell

LSTMCell::LSTMCell(Options options) : Module("LSTMCell"), options_(options) {
  check_sizes("lstm_cell", options.input_size, options.hidden_size);
  const int64_t H = options.hidden_size;
  weight_ih = empty({4 * H, options.input_size});
  weight_hh = empty({4 * H, H});
  if (options.bias) {
    bias_ih = empty({4 * H});
    bias_hh = empty({4 * H});
  }
  register_parameter("weight_ih", weight_ih);
  register_parameter("weight_hh", weight_hh);
  register_parameter("bias_ih", bias_ih);
  register_parameter("bias_hh", bias_hh);
  reset_parameters();
}

void LSTMCell::reset_parameters() { uniform_all({&weight_ih, &weight_hh, &bias_ih, &bias_hh}, options_.hidden_size); }

LSTMState LSTMCell::operator()(const Tensor& x, const LSTMState& state) const {
  check_cell_input("lstm_cell", x, options_.input_size, weight_ih);
  const Shape shape{x.size(0), options_.hidden_size};  // (B, H)
  LSTMState s{.h = state_or_zeros("lstm_cell", "h", state.h, shape, x),
              .c = state_or_zeros("lstm_cell", "c", state.c, shape, x)};
  return lstm_step(linear(x, weight_ih, bias_ih), s, weight_hh.t(), bias_hh);
}

// ---- RNNBase

RNNBase::RNNBase(std::string type_name, const char* op, RNNOptions options, int64_t gates)
    : Module(std::move(type_name)), op_(op), options_(options), gates_(gates) {
  check_sizes(op, options.input_size, options.hidden_size);
  SG_CHECK_VALUE(options.num_layers > 0, "{}: num_layers = {} must be positive", op, options.num_layers);
  SG_CHECK_VALUE(options.dropout >= 0 && options.dropout < 1, "{}: dropout = {} not in [0, 1)", op, options.dropout);
  const int64_t H = options.hidden_size, dirs = num_directions();
  weights_.resize(options.num_layers * dirs);  // registered by address below: never resized again
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    for (int64_t d = 0; d < dirs; ++d) {
      RNNWeights& w = weights_[layer * dirs + d];
      const int64_t in = layer == 0 ? options.input_size : dirs * H;
      w.weight_ih = empty({gates * H, in});
      w.weight_hh = empty({gates * H, H});
      if (options.bias) {
        w.bias_ih = empty({gates * H});
        w.bias_hh = empty({gates * H});
      }
      const std::string suffix = layer_suffix(layer, d);
      register_parameter("weight_ih" + suffix, w.weight_ih);
      register_parameter("weight_hh" + suffix, w.weight_hh);
      register_parameter("bias_ih" + suffix, w.bias_ih);
      register_parameter("bias_hh" + suffix, w.bias_hh);
    }
  }
  reset_parameters();
}

RNNWeights& RNNBase::weights(int64_t layer, Direction direction) {
  return const_cast<RNNWeights&>(std::as_const(*this).weights(layer, direction));
}

const RNNWeights& RNNBase::weights(int64_t layer, Direction direction) const {
  SG_CHECK_INDEX(layer >= 0 && layer < options_.num_layers, "{}: layer {} out of range for num_layers = {}", op_,
                 layer, options_.num_layers);
  SG_CHECK_INDEX(direction == Direction::forward || options_.bidirectional,
                 "{}: the reverse direction exists only when bidirectional", op_);
  return weights_[layer * num_directions() + (direction == Direction::reverse ? 1 : 0)];
}

void RNNBase::reset_parameters() {
  for (RNNWeights& w : weights_) uniform_all({&w.weight_ih, &w.weight_hh, &w.bias_ih, &w.bias_hh}, options_.hidden_size);
}

namespace {

// `leading` input features are given as their projection (GRUArgs::leading_projection), not in x.
void check_sequence_input(const char* op, const Tensor& x, const RNNOptions& options, DType dtype,
                          int64_t leading = 0) {
  SG_CHECK(x.defined(), "{}: input is undefined", op);
  SG_CHECK_SHAPE(x.ndim() == 3, "{}: expected a batch-first input (B, T, input_size = {}), got x: {}", op,
                 options.input_size, x.shape());
  SG_CHECK_SHAPE(x.size(2) + leading == options.input_size, "{}: input feature size {} != input_size {} (x: {})", op,
                 x.size(2), options.input_size, x.shape());
  SG_CHECK_SHAPE(x.size(1) > 0, "{}: input has no time steps (x: {})", op, x.shape());
  SG_CHECK_DTYPE(x.dtype() == dtype,
                 "{}: input dtype {} != parameter dtype {} (x: {}); convert the module with .to()", op, x.dtype(),
                 dtype, x.shape());
}

// P, the input features given as GRUArgs::leading_projection (B, T, 3H): input_size minus x's.
int64_t leading_features(const char* op, const RNNOptions& options, const Tensor& x, const Tensor& projection) {
  if (!projection.defined()) return 0;
  SG_CHECK_VALUE(!options.bidirectional, "{}: a leading projection needs a unidirectional GRU", op);
  SG_CHECK_SHAPE(x.defined() && x.ndim() == 3 && x.size(2) < options.input_size && projection.ndim() == 3 &&
                     projection.size(0) == x.size(0) && projection.size(1) == x.size(1) &&
                     projection.size(2) == 3 * options.hidden_size,
                 "{}: leading_projection {} must be (B, T, 3H = {}) beside x {} (B, T, F < input_size = {})", op,
                 projection.shape(), 3 * options.hidden_size, x.defined() ? x.shape() : Shape{}, options.input_size);
  return options.input_size - x.size(2);
}

}  // namespace

GRUOutput gru_forward(const char* op, const RNNOptions& options, DType dtype, bool training, const Tensor& x,
                      const GRUArgs& args, const GRUProducts& products) {
  const int64_t leading = leading_features(op, options, x, args.leading_projection);
  check_sequence_input(op, x, options, dtype, leading);
  const int64_t B = x.size(0), H = options.hidden_size, n = options.num_layers * (options.bidirectional ? 2 : 1);
  StepMask mask = make_step_mask(op, args.lengths, args.keep, x, Extents::skip);
  Tensor h0 = state_or_zeros(op, "h0", args.h0, {n, B, H}, x);  // (L·dirs, B, H)
  std::vector<Tensor> states;
  for (int64_t k = 0; k < n; ++k) states.push_back(h0.select(0, k));
  // (T, B), its all-padding steps read on the host once for every layer and direction
  const StepKeep keep(mask.keep.defined() ? mask.keep.squeeze(2) : Tensor());
  auto run = [&](int64_t k, const Tensor& xp, const Tensor& state, Direction direction, int64_t stack_dim) {
    // the whole direction is one gru_layer node: (T, B, H) states
    return gru_direction_outputs(products.recur(k, xp, state, keep, direction), mask, direction, stack_dim);
  };
  auto project = [&](int64_t k, const Tensor& input) {  // input (T, B, F)
    if (k > 0 || leading == 0) return products.project(k, input, 0);
    return add(products.project(0, input, leading), args.leading_projection.transpose(0, 1));
  };
  Tensor output = run_layers(options, training, x, states, project, run);
  return {.output = output, .h_n = stack(states, 0)};
}

// ---- GRU

GRU::GRU(Options options) : RNNBase("GRU", "gru", options, 3) {}

GRUOutput GRU::operator()(const Tensor& x, const GRUArgs& args) const {
  return gru_forward(op_, options_, weights_[0].weight_ih.dtype(), is_training(), x, args, FloatGRUProducts(weights_));
}

Tensor GRU::project_leading(const Tensor& x_lead) const {
  SG_CHECK(x_lead.defined(), "gru: project_leading's input is undefined");
  SG_CHECK_SHAPE(x_lead.ndim() == 3 && x_lead.size(2) > 0 && x_lead.size(2) < options_.input_size,
                 "gru: project_leading expects (B, T, P) with 0 < P < input_size = {}, got {}", options_.input_size,
                 x_lead.shape());
  SG_CHECK_VALUE(!options_.bidirectional, "gru: a leading projection needs a unidirectional GRU");
  const Tensor& w = weights_[0].weight_ih;
  return linear(x_lead, w.narrow(1, 0, x_lead.size(2)), Tensor());
}

// ---- LSTM

LSTM::LSTM(Options options) : RNNBase("LSTM", "lstm", options, 4) {}

LSTMOutput LSTM::operator()(const Tensor& x, const LSTMArgs& args) const {
  check_sequence_input(op_, x, options_, weights_[0].weight_ih.dtype());
  const int64_t B = x.size(0), H = options_.hidden_size, n = options_.num_layers * num_directions();
  StepMask mask = make_step_mask(op_, args.lengths, args.keep, x, Extents::compute);
  Tensor h0 = state_or_zeros(op_, "h0", args.h0, {n, B, H}, x);  // (L·dirs, B, H)
  Tensor c0 = state_or_zeros(op_, "c0", args.c0, {n, B, H}, x);
  std::vector<LSTMState> states;
  for (int64_t k = 0; k < n; ++k) states.push_back({.h = h0.select(0, k), .c = c0.select(0, k)});
  auto project = [&](int64_t k, const Tensor& input) {
    return linear(input, weights_[k].weight_ih, weights_[k].bias_ih);
  };
  auto run = [&](int64_t k, const Tensor& xp, const LSTMState& state, Direction direction, int64_t stack_dim) {
    return lstm_direction(xp, state, weights_[k], mask, direction, stack_dim);
  };
  Tensor output = run_layers(options_, is_training(), x, states, project, run);
  std::vector<Tensor> h, c;
  for (const LSTMState& s : states) {
    h.push_back(s.h);
    c.push_back(s.c);
  }
  return {.output = output, .state = {.h = stack(h, 0), .c = stack(c, 0)}};
}

}  // namespace seqgrad::nn
