// The GRU: gru_step (one step written with ops) and gru_layer, a whole layer in one direction as
// one fused op (per step one recurrent GEMM and one gate kernel each way), with its composed twin
// gru_layer_composed. nn/rnn.cpp's GRU and GRUCell call them; the derivation is in nn/rnn.h.
#include <algorithm>

#include "core/autocast.h"
#include "ops/detail.h"

namespace seqgrad {
namespace {

void check_gru_layer(const Tensor& xp, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                     const Tensor& keep) {
  detail::check_defined("gru_layer", xp, "xp");
  detail::check_defined("gru_layer", h0, "h0");
  detail::check_defined("gru_layer", w_hh, "w_hh");
  SG_CHECK_SHAPE(xp.ndim() == 3 && h0.ndim() == 2 && w_hh.ndim() == 2 && xp.size(1) == h0.size(0) &&
                     w_hh.size(0) == 3 * h0.size(1) && w_hh.size(1) == h0.size(1) && xp.size(2) == w_hh.size(0),
                 "gru_layer: expected xp (T, B, 3H), h0 (B, H), w_hh (3H, H); got xp {}, h0 {}, w_hh {}", xp.shape(),
                 h0.shape(), w_hh.shape());
  const int64_t T = xp.size(0), B = xp.size(1), H = h0.size(1);
  SG_CHECK_SHAPE(!b_hh.defined() || b_hh.shape() == Shape{3 * H}, "gru_layer: b_hh {} must be (3H,) = ({},)",
                 b_hh.shape(), 3 * H);
  SG_CHECK_SHAPE(!keep.defined() || (keep.dtype() == DType::b8 && keep.shape() == Shape{T, B}),
                 "gru_layer: keep must be bool (T, B) = ({}, {}), got {}", T, B, keep.shape());
}

// What the fused backward needs from the forward besides the inputs and the output.
struct GruLayerSaved {
  Tensor keep;  // (T, B) bool, contiguous, or undefined
  Tensor gates;  // (T, B, 4H) [r | z | n | hp_n] per step
  std::vector<bool> skip;
  Direction direction;
};

// Backward through time, in the reverse of the forward's order. Step t:
//   4. forward wrote y_t = gru_cell(xp_t, hp_t, y_prev): the fused kernel gives dxp_t, dhp_t
//      and the direct part of dy_prev, from dy_t + the gradient carried from step t + 1;
//   3. hp_t = y_prev · W_hhᵀ + b_hh, so dy_prev += dhp_t · W_hh (one GEMM per step);
// then once over all steps: dW_hh = Σ_t dhp_tᵀ · y_prev(t) (two GEMMs over time), db_hh = Σ dhp.
void gru_layer_backward(const GruLayerSaved& s, const std::vector<Tensor>& in, const Tensor& dy_in, Grads& g) {
  const Tensor &xpv = in[0], &h0v = in[1], &wv = in[2];
  const bool has_bias = in.size() > 3;
  Backend& be = backend_for(xpv);
  const int64_t T = xpv.size(0), B = xpv.size(1), H = h0v.size(1);
  const bool forward = s.direction == Direction::forward;
  const TensorOptions like{.dtype = xpv.dtype(), .device = xpv.device()};
  Autocast scope(GemmPrecision::full);  // the recurrence is float32 under autocast, its backward too
  Tensor dy = dy_in.contiguous();            // (T, B, H)
  Tensor y = g.output().detach();            // (T, B, H)
  Tensor h_init = h0v.detach().contiguous();  // (B, H)
  Tensor dxp = empty({T, B, 3 * H}, like), dhp = empty({T, B, 3 * H}, like);  // (T, B, 3H)
  Tensor carry = zeros({B, H}, like), direct = empty({B, H}, like);          // (B, H)
  for (int64_t i = T - 1; i >= 0; --i) {
    const int64_t t = forward ? i : T - 1 - i;
    const int64_t t_prev = forward ? t - 1 : t + 1;
    Tensor y_prev = i == 0 ? h_init : y.select(0, t_prev);  // (B, H)
    if (s.skip[t]) {  // a copied state: its gradient goes on to the previous one
      carry = add(carry, dy.select(0, t));
      be.fill(dxp.select(0, t), 0.0);
      be.fill(dhp.select(0, t), 0.0);
      continue;
    }
    be.gru_cell_backward(s.gates.select(0, t), y_prev, s.keep.defined() ? s.keep.select(0, t) : Tensor(),
                         dy.select(0, t), carry, dxp.select(0, t), dhp.select(0, t), direct);
    std::swap(carry, direct);
    addmm_(carry, dhp.select(0, t), wv.detach());  // (B, 3H) · (3H, H)
  }
  if (g.needs(0)) g.add(0, dxp);
  if (g.needs(1)) g.add(1, carry);
  if (g.needs(2)) {
    // forward: steps 1.. read y[0 .. T-2]; reverse: steps .. T-2 read y[1 .. T-1]; the first
    // processed step reads h0
    const int64_t first = forward ? 0 : T - 1;
    Tensor rows_dhp = forward ? dhp.narrow(0, 1, T - 1) : dhp.narrow(0, 0, T - 1);  // (T-1, B, 3H)
    Tensor rows_y = forward ? y.narrow(0, 0, T - 1) : y.narrow(0, 1, T - 1);        // (T-1, B, H)
    Tensor acc = g.accumulator(2);  // dW_hh adds straight into the gradient buffer when there is one
    const bool fresh = !acc.defined();
    if (fresh) acc = zeros(wv.shape(), like);
    if (T > 1) addmm_(acc, rows_dhp.reshape({(T - 1) * B, 3 * H}).t(), rows_y.reshape({(T - 1) * B, H}));
    addmm_(acc, dhp.select(0, first).t(), h_init);
    if (fresh) g.add(2, acc);
  }
  if (has_bias && g.needs(3)) g.add(3, sum(dhp.reshape({T * B, 3 * H}), {0}));
}

}  // namespace

// The recurrent weight is passed transposed, w_hh_t = W_hhᵀ (H, G·H), taken once per sequence:
// every step's dW_hh then accumulates contiguously at that one transpose instead of as a strided
// (transposed) add into the parameter's gradient at each step.

Tensor recurrent_product(const Tensor& h, const Tensor& w_hh_t) {
  Autocast full(GemmPrecision::full);  // matmul records the precision, so its backward is float32 too
  return matmul(h, w_hh_t);
}

// GRU step.  xp: (B, 3H) [r | z | n],  h: (B, H)  ->  h': (B, H)
Tensor gru_gates(const Tensor& xp, const Tensor& hp, const Tensor& h) {
  const int64_t H = h.size(1);
  Tensor rz = sigmoid(xp.narrow(1, 0, 2 * H) + hp.narrow(1, 0, 2 * H));  // (B, 2H): [r | z]
  Tensor r = rz.narrow(1, 0, H);                                          // (B, H)
  Tensor z = rz.narrow(1, H, H);                                          // (B, H)
  Tensor n = tanh(xp.narrow(1, 2 * H, H) + r * hp.narrow(1, 2 * H, H));   // (B, H)
  return n + z * (h - n);                                                 // (1 - z) n + z h
}

Tensor gru_step(const Tensor& xp, const Tensor& h, const Tensor& w_hh_t, const Tensor& bias_hh) {
  Tensor hp = recurrent_product(h, w_hh_t);  // (B, 3H): W_hh h
  if (bias_hh.defined()) hp = hp + bias_hh;  //          + b_hh
  return gru_gates(xp, hp, h);
}

Tensor gru_layer_steps(const Tensor& xp, const Tensor& h0, const Tensor& keep, Direction direction,
                       const GruStepFn& step) {
  const int64_t T = xp.size(0);
  std::vector<Tensor> states(T);
  const std::vector<Tensor> xp_steps = unbind(xp, 0);
  Tensor h = h0;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = direction == Direction::forward ? i : T - 1 - i;
    Tensor next = step(xp_steps[t], h);
    h = keep.defined() ? where(keep.select(0, t).unsqueeze(1), next, h) : next;  // padding keeps the state
    states[t] = h;
  }
  return stack(states, 0);  // (T, B, H)
}

Tensor gru_layer_composed(const Tensor& xp, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                          const Tensor& keep, Direction direction) {
  check_gru_layer(xp, h0, w_hh, b_hh, keep);
  const Tensor w_hh_t = w_hh.t();  // (H, 3H)
  return gru_layer_steps(xp, h0, keep, direction,
                         [&](const Tensor& xp_t, const Tensor& h) { return gru_step(xp_t, h, w_hh_t, b_hh); });
}

// Steps where every sequence is padding (the batch's longest is shorter than T): the fused
// forward copies the state there, and the backward passes its gradient straight through.
StepKeep::StepKeep(Tensor keep_mask) : keep(std::move(keep_mask)) {
  if (!keep.defined()) return;
  SG_CHECK_SHAPE(keep.ndim() == 2 && keep.dtype() == DType::b8, "gru_layer: keep must be bool (T, B), got {} {}",
                 keep.dtype(), keep.shape());
  const int64_t T = keep.size(0), B = keep.size(1);
  const std::vector<bool> v = keep.to_vector<bool>();  // the one device-to-host copy
  padding.resize(T);
  for (int64_t t = 0; t < T; ++t)
    padding[t] = std::none_of(v.begin() + t * B, v.begin() + (t + 1) * B, [](bool b) { return b; });
}

Tensor gru_layer(const Tensor& xp, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, const StepKeep& steps,
                 Direction direction) {
  const Tensor& keep = steps.keep;
  check_gru_layer(xp, h0, w_hh, b_hh, keep);
  const int64_t T = xp.size(0), B = xp.size(1), H = h0.size(1);
  Backend& backend = backend_for(xp);
  if (!backend.supports(FusedOp::gru_cell)) return gru_layer_composed(xp, h0, w_hh, b_hh, keep, direction);
  const TensorOptions like{.dtype = xp.dtype(), .device = xp.device()};
  Tensor x = xp.detach().contiguous(), h_init = h0.detach().contiguous(), w = w_hh.detach();
  Tensor ok = keep.defined() ? keep.contiguous() : Tensor();
  const std::vector<bool> skip = keep.defined() ? steps.padding : std::vector<bool>(T, false);
  SG_CHECK(skip.size() == static_cast<size_t>(T), "gru_layer: the StepKeep's padding has {} steps, keep {} has {}",
           skip.size(), keep.shape(), T);
  Tensor y = empty({T, B, H}, like);          // (T, B, H) the state after each step
  Tensor gates = empty({T, B, 4 * H}, like);  // (T, B, 4H) [r | z | n | hp_n] per step, for backward
  Tensor hp = empty({1, B, 3 * H}, like);     // (1, B, 3H) W_hh h + b_hh of the current step
  const Tensor w_t = w.t().unsqueeze(0);      // (1, H, 3H)
  Tensor prev = h_init;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = direction == Direction::forward ? i : T - 1 - i;
    Tensor y_t = y.select(0, t);
    if (skip[t]) {
      backend.copy(prev, y_t);
    } else {
      if (b_hh.defined()) backend.copy(b_hh.detach().expand({1, B, 3 * H}), hp);
      // float32 under autocast too, as recurrent_product
      backend.gemm(prev.unsqueeze(0), w_t, hp, 1.0, b_hh.defined() ? 1.0 : 0.0, GemmPrecision::full);
      backend.gru_cell(x.select(0, t), hp.squeeze(0), prev, ok.defined() ? ok.select(0, t) : Tensor(), y_t,
                       gates.select(0, t));
    }
    prev = y_t;
  }
  auto composed = [keep = ok, direction](const std::vector<Tensor>& in) {
    return gru_layer_composed(in[0], in[1], in[2], in.size() > 3 ? in[3] : Tensor(), keep, direction);
  };
  auto backward = [saved = GruLayerSaved{ok, gates, skip, direction}](
                      const std::vector<Tensor>& in, const Tensor& dy, Grads& g) { gru_layer_backward(saved, in, dy, g); };
  const Tensor inputs[] = {xp, h0, w_hh, b_hh};
  return detail::record_fused("gru_layer", y, std::span<const Tensor>(inputs, b_hh.defined() ? 4 : 3), composed,
                              backward, SaveOutput::yes);
}

}  // namespace seqgrad
