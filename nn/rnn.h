// Recurrent layers: GRUCell, LSTMCell (one step) and GRU, LSTM (multi-layer, optionally
// bidirectional, over padded batches with per-sequence valid lengths). Parameter names, shapes
// and gate layouts are PyTorch's, so a torch state_dict loads one to one. The equations and their
// gradients are in the block below.
//
// Sequence inputs are BATCH-FIRST: x (B, T, F), like torch's batch_first=True.
//
// ---- GRU (gates r, z, n; weight_ih (3H, F) = [W_ir; W_iz; W_in], weight_hh (3H, H) likewise)
//   r  = σ(W_ir x + b_ir + W_hr h + b_hr)                 reset gate
//   z  = σ(W_iz x + b_iz + W_hz h + b_hz)                 update gate
//   n  = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))        candidate (r gates the *projected* h)
//   h' = (1 - z) ⊙ n + z ⊙ h  =  n + z ⊙ (h - n)
// Backward of one step, given dh' (a = pre-activation, hn = W_hn h + b_hn):
//   dn = dh' ⊙ (1 - z)     dz = dh' ⊙ (h - n)     dh = dh' ⊙ z  (+ the terms through W_hh below)
//   da_n = dn ⊙ (1 - n²);  da_z = dz ⊙ z(1 - z);   dr = da_n ⊙ hn;  da_r = dr ⊙ r(1 - r)
//   d(W_ih x + b_ih) = [da_r, da_z, da_n]          d(W_hh h + b_hh) = [da_r, da_z, da_n ⊙ r]
//   dh += d(W_hh h + b_hh) · W_hh,   dW_hh += d(W_hh h + b_hh)ᵀ h,   dW_ih = Σ_t d(W_ih x_t)ᵀ x_t.
//
// ---- LSTM (gates i, f, g, o; weight_ih (4H, F) = [W_ii; W_if; W_ig; W_io])
//   i = σ(a_i)   f = σ(a_f)   g = tanh(a_g)   o = σ(a_o),   a = W_ih x + b_ih + W_hh h + b_hh
//   c' = f ⊙ c + i ⊙ g        h' = o ⊙ tanh(c')
// Backward, given dh' and dc' (from the next step):
//   do = dh' ⊙ tanh(c');   dc' += dh' ⊙ o ⊙ (1 - tanh²(c'))
//   di = dc' ⊙ g;   df = dc' ⊙ c;   dg = dc' ⊙ i;   dc = dc' ⊙ f
//   da = [di ⊙ i(1 - i), df ⊙ f(1 - f), dg ⊙ (1 - g²), do ⊙ o(1 - o)], then as for the GRU.
//
// ---- How the layers compute (the hot path of the translator)
// Per layer and direction, the input projections of ALL steps are one GEMM, (T·B, F) · W_ihᵀ.
// GRU: the direction then runs as ONE autograd node, gru_layer (ops/gru.cpp): per step one recurrent
// GEMM h · W_hhᵀ + b_hh and one fused kernel for the gate math above, forward and backward
// (Backend::gru_cell); in backward dW_hh is two GEMMs over all steps and dxp comes back for every
// step at once. gru_layer_composed is the same layer written with ordinary ops (its twin in the
// tests, and the path for create_graph and for backends without the fused kernel).
// LSTM: each step is one recurrent GEMM plus the element-wise gate math written with ops
// (autograd derives the backward); W_hhᵀ is taken once per sequence and the projections are split
// into steps by recursive halving, O(T log T) instead of O(T²) work in the slices' backward.
// Padding: a keep mask (B, T), true at real steps (or lengths (B,), turned into one: sequence b is
// real at steps t < lengths[b]; nn/mask.h). A padded step keeps the state,
//   h_t = where(keep_bt, h'_t, h_{t-1}),   output_t = where(keep_bt, h'_t, 0),
// so dh'_t is zero there and the gradient passes straight to h_{t-1}. Outputs at padded steps are
// zero and h_n is the state at each sequence's last valid step, as PyTorch's
// pack_padded_sequence + pad_packed_sequence give; the reverse direction starts at each
// sequence's last valid step (its state stays h0 until then). Padded steps are still computed
// (and discarded), so padded inputs must be finite: a NaN there would reach the weight gradients
// as 0 · NaN.
// Between layers (not after the last) dropout with probability `dropout` applies in training.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace seqgrad::nn {

// ---- cells (one step; x (B, input_size), states (B, hidden_size))

class GRUCell : public Module {
 public:
  struct Options {
    int64_t input_size = 0;
    int64_t hidden_size = 0;
    bool bias = true;
  };
  explicit GRUCell(Options options);

  // x: (B, input_size), h: (B, hidden_size) or undefined for zeros -> h': (B, hidden_size)
  Tensor operator()(const Tensor& x, const Tensor& h = {}) const;

  // PyTorch's default: every parameter ~ U(±1/√hidden_size).
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight_ih;  // (3H, input_size)   rows [r; z; n]
  Tensor weight_hh;  // (3H, H)
  Tensor bias_ih;    // (3H,), undefined without bias
  Tensor bias_hh;    // (3H,)

 private:
  Options options_;
};

// An LSTM's state; for the cell each is (B, H), for LSTM each is (num_layers · dirs, B, H).
struct LSTMState {
  Tensor h = {};
  Tensor c = {};
};

class LSTMCell : public Module {
 public:
  struct Options {
    int64_t input_size = 0;
    int64_t hidden_size = 0;
    bool bias = true;
  };
  explicit LSTMCell(Options options);

  // x: (B, input_size), state: h and c (B, hidden_size), undefined for zeros -> {h', c'}
  LSTMState operator()(const Tensor& x, const LSTMState& state = {}) const;

  void reset_parameters();  // every parameter ~ U(±1/√hidden_size)
  const Options& options() const { return options_; }

  Tensor weight_ih;  // (4H, input_size)   rows [i; f; g; o]
  Tensor weight_hh;  // (4H, H)
  Tensor bias_ih;    // (4H,), undefined without bias
  Tensor bias_hh;    // (4H,)

 private:
  Options options_;
};

// ---- multi-layer recurrent networks

struct RNNOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  bool bidirectional = false;
  double dropout = 0.0;  // on each layer's output except the last, in training; in [0, 1)
};

using seqgrad::Direction;  // forward, reverse (ops/ops.h)

// The parameters of one layer and direction. Their state_dict names are PyTorch's:
// weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, with suffix _reverse for the
// reverse direction. weight_ih is (G·H, F) for layer 0 and (G·H, dirs·H) above it; G = 3 (GRU), 4
// (LSTM).
struct RNNWeights {
  Tensor weight_ih = {};
  Tensor weight_hh = {};
  Tensor bias_ih = {};  // undefined without bias
  Tensor bias_hh = {};
};

// What GRU returns; use with structured bindings: auto [output, h_n] = gru(x);
struct GRUOutput {
  Tensor output = {};  // (B, T, dirs · H): the top layer's states, [forward | reverse]; 0 at padded steps
  Tensor h_n = {};     // (num_layers · dirs, B, H), row layer · dirs + direction
};
struct GRUArgs {
  Tensor h0 = {};       // (num_layers · dirs, B, H), undefined for zeros
  // Padding, given as one of (neither when every sequence has T steps):
  Tensor lengths = {};  // int64 (B,), each in [0, T], turned into the keep mask below
  Tensor keep = {};     // bool (B, T), true at real steps
  // Layer 0's input projection of the first P input features, computed ahead (GRU::project_leading):
  // (B, T, 3H); x then holds only the other input_size - P features. A decoder hoists its
  // embeddings' share of the projection out of its step loop this way (unidirectional GRUs).
  Tensor leading_projection = {};
};

// What LSTM returns: auto [output, state] = lstm(x); state.h, state.c: (num_layers · dirs, B, H)
struct LSTMOutput {
  Tensor output = {};  // (B, T, dirs · H)
  LSTMState state = {};
};
struct LSTMArgs {
  Tensor h0 = {};  // (num_layers · dirs, B, H), undefined for zeros
  Tensor c0 = {};  // likewise
  Tensor lengths = {};  // padding as GRUArgs'
  Tensor keep = {};
};

// What GRU and LSTM share: options, validation and the per-layer parameters.
class RNNBase : public Module {
 public:
  const RNNOptions& options() const { return options_; }
  int64_t num_directions() const { return options_.bidirectional ? 2 : 1; }
  RNNWeights& weights(int64_t layer, Direction direction = Direction::forward);
  const RNNWeights& weights(int64_t layer, Direction direction = Direction::forward) const;
  void reset_parameters();  // every parameter ~ U(±1/√hidden_size), as PyTorch

 protected:
  // `op` names the layer in error messages ("gru"); `gates` is G.
  RNNBase(std::string type_name, const char* op, RNNOptions options, int64_t gates);

  const char* op_;
  RNNOptions options_;
  int64_t gates_;
  std::vector<RNNWeights> weights_;  // index layer · dirs + direction; never resized after construction
};

// How one layer and direction of a GRU (index layer · dirs + direction) computes its two
// products: the float GRU from its RNNWeights, QuantizedGRU (nn/quantized.h) in int8.
class GRUProducts {
 public:
  virtual ~GRUProducts() = default;
  // W_ih[:, first:] x + b_ih for every step: input (T, B, F - first) -> (T, B, 3H); first > 0 only
  // for layer 0 given a leading projection (GRUArgs::leading_projection).
  virtual Tensor project(int64_t index, const Tensor& input, int64_t first) const = 0;
  // The layer's states (T, B, H) from xp (T, B, 3H) and h0 (B, H), as ops' gru_layer; keep.keep
  // (T, B) bool, true at real steps, or undefined (every step real), read on the host once per
  // GRU call for all its layers and directions.
  virtual Tensor recur(int64_t index, const Tensor& xp, const Tensor& h0, const StepKeep& keep,
                       Direction direction) const = 0;
};

// GRU's forward over any products: x (B, T, input_size) with parameters of `dtype`; checks x,
// args.h0 and args.lengths, naming `op`.
GRUOutput gru_forward(const char* op, const RNNOptions& options, DType dtype, bool training, const Tensor& x,
                      const GRUArgs& args, const GRUProducts& products);

class GRU : public RNNBase {
 public:
  using Options = RNNOptions;
  explicit GRU(Options options);
  // x: (B, T, input_size), batch first; with args.leading_projection (B, T, input_size - P)
  GRUOutput operator()(const Tensor& x, const GRUArgs& args = {}) const;
  // x_lead (B, T, P), the first P < input_size input features -> their share of layer 0's input
  // projection, x_lead · W_ih[:, :P]ᵀ (B, T, 3H), for GRUArgs::leading_projection.
  Tensor project_leading(const Tensor& x_lead) const;
};

class LSTM : public RNNBase {
 public:
  using Options = RNNOptions;
  explicit LSTM(Options options);
  // x: (B, T, input_size), batch first
  LSTMOutput operator()(const Tensor& x, const LSTMArgs& args = {}) const;
};

}  // namespace seqgrad::nn
