// seqgrad's differentiable ops: the public API. Each op's forward, backward and math comment sit
// together in ops/<family>.cpp. Binary ops broadcast like NumPy; both tensor operands must have
// the same dtype and device (a double operand takes the tensor's dtype).
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace seqgrad {

// ---- element-wise (ops/elementwise.cpp)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor clamp(const Tensor& x, double min, double max);
// Element-wise max/min with broadcasting; NaN if either operand is NaN. The gradient goes to the
// larger (smaller) operand, half to each on ties (torch.maximum's rule).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate for small x
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate for small x
Tensor erf(const Tensor& x);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, double b);
Tensor where(const Tensor& condition, double a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Fused backward helpers with composed twins (used when the backward is itself recorded).
Tensor tanh_backward(const Tensor& dy, const Tensor& y);
Tensor sigmoid_backward(const Tensor& dy, const Tensor& y);
Tensor relu_backward(const Tensor& dy, const Tensor& x);  // dy where x > 0, else 0 (x: relu's input)

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);

// ---- activations (ops/activation.cpp), with torch.nn.functional's names and defaults
Tensor log_sigmoid(const Tensor& x);  // log σ(x), finite for large |x| (F.logsigmoid)
Tensor silu(const Tensor& x);         // x σ(x)
Tensor hardsigmoid(const Tensor& x);  // clamp(x / 6 + 1/2, 0, 1)
Tensor hardswish(const Tensor& x);    // x · hardsigmoid(x)
Tensor mish(const Tensor& x);         // x tanh(softplus(x))
// log(1 + exp(βx)) / β, and x itself where βx > threshold (F.softplus); beta > 0
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
enum class GeluApproximate { none, tanh };  // F.gelu's approximate="none" / "tanh"
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::none);

// ---- comparisons and logic: bool results, not differentiable
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor isfinite(const Tensor& x);
// Operators for the above, as in PyTorch: x > 0, a == b, 0.5 <= x (bool tensors, broadcasting);
// ~mask, mask & other, mask | other, mask ^ other on bool tensors.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator==(double a, const Tensor& b);
Tensor operator!=(double a, const Tensor& b);
Tensor operator<(double a, const Tensor& b);
Tensor operator<=(double a, const Tensor& b);
Tensor operator>(double a, const Tensor& b);
Tensor operator>=(double a, const Tensor& b);
Tensor operator~(const Tensor& x);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);

// ---- reductions (ops/reduce.cpp); empty dims = all dims
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Over all elements. Its gradient goes to the first maximal element (row-major), like max over a
// dim; PyTorch's torch.max(x) instead splits it evenly between tied maxima.
Tensor max(const Tensor& x);
// Along dim: the values and their int64 indices (the first on ties), as torch.max(x, dim):
//   auto [values, indices] = max(x, 1);   the gradient of values goes to the indices.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// The largest (smallest) value over dims; the gradient is split evenly among tied extremes
// (torch.amax / torch.amin).
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim = false);
// x sorted along dim, ascending (or descending), and where each value came from (ties keep their
// order); the gradient of values goes back to the indices (torch.sort). It runs the topk kernel
// with k = the dimension's size: O(n log n) per row on the CPU, a selection loop (O(n²) per row)
// on CUDA, which suits the short rows of decoding rather than sorting long rows on the GPU.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
// The k largest (or smallest) values along dim, in order, and their int64 indices. Ties keep
// index order, and NaN ranks after every number either way (torch.topk ranks it first with
// largest: a NaN logit would win a search's step). Not differentiable (unlike torch.topk): it
// serves decoding; gather(x, dim, indices) gives values with a gradient.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// ---- linear algebra (ops/matmul.cpp)
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul semantics (1-D, 2-D, batched)
Tensor bmm(const Tensor& a, const Tensor& b);     // (N, M, K) · (N, K, P) -> (N, M, P)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});  // x·Wᵀ + b
// c += a·b in place for 2-D a, b and a contiguous c; not differentiable (backward passes use it to
// add a product into a gradient buffer with one GEMM).
void addmm_(const Tensor& c, const Tensor& a, const Tensor& b);

// ---- softmax family (ops/softmax.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- shape (ops/shape_ops.cpp); views share storage
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dtype);
// A contiguous copy on another device (x itself when already there); the gradient goes back.
Tensor to_device(const Tensor& x, Device device);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// The slices of x along dim as views (torch.unbind). Taken by recursive halving, so that the
// backward of all the slices costs O(n log n) instead of n full-size passes.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
// A zero tensor of `shape` with `src` written into the slice [start : start + step * n : step]
// of `dim` (the backward of slice; differentiable for higher-order gradients).
Tensor slice_scatter(const Shape& shape, const Tensor& src, int64_t dim, int64_t start, int64_t step);

// ---- indexing (ops/index.cpp); indices are int64
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Rows of weight (V, E) for ids of any shape -> (ids..., E); rows equal to padding_idx get no
// gradient (pass -1 for none).
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);
// Each element repeated `repeats` times along dim (or repeats[i] times for element i, repeats
// int64 with one count or one per element), in order: [a, b] -> [a, a, b, b]. Without dim, x is
// flattened first (torch.repeat_interleave). The gradient sums over each element's copies.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);

// ---- randomness (ops/random.cpp), drawn from the seeded default generator
// dropout  y = x * mask, mask_i = 1/(1-p) with probability 1 - p, else 0;  dx = dy * mask
// Identity when training is false. Fused: one pass draws the mask and scales (Backend::dropout);
// under autograd it writes the mask, and y = x · mask and dx = dy · mask are one product each.
// dropout_composed is its twin: bernoulli_mask times x, drawing the same numbers.
Tensor dropout(const Tensor& x, double p, bool training = true);
Tensor dropout_composed(const Tensor& x, double p, bool training = true);
// A float mask of {0, 1 / p_keep} values, each kept with probability p_keep.
Tensor bernoulli_mask(const Shape& shape, double p_keep, TensorOptions options);

// ---- fused ops: one autograd node with one kernel each way (the Backend's optional fused
// kernels, core/backend.h), each with a composed twin, the same math written with the ops above.
// The twin serves backends without the kernel and second-order gradients (create_graph; see
// detail::record_fused), and tests/test_nn_fused.cpp checks that the two agree.

// GRU (ops/gru.cpp; derivation in nn/rnn.h).
// recurrent_product  h · w_hh_t, always in float32: under Autocast (core/autocast.h) the
// recurrent products of GRU and LSTM keep full precision. This is seqgrad's choice, not PyTorch's:
// PyTorch 1.13's CPU autocast rounds h to bf16 before the product (its nn.GRUCell equals such a
// step bit for bit). The reason is measured: trained with bf16 recurrences, the default preset
// lost 8.5 test sacreBLEU (README, "Low precision"); over 50 steps the rounded product leaves the
// state's error at one rounding but makes the gradient through time several times less accurate
// (tests/test_ops_autocast.cpp measures both).
Tensor recurrent_product(const Tensor& h, const Tensor& w_hh_t);
// gru_step  xp (B, 3H) = W_ih x + b_ih as [r | z | n], h (B, H), w_hh_t = W_hhᵀ (H, 3H),
// bias_hh (3H,) or undefined -> h' (B, H); composed from ops (GRUCell and gru_layer_composed).
Tensor gru_step(const Tensor& xp, const Tensor& h, const Tensor& w_hh_t, const Tensor& bias_hh);
// gru_gates: the step's gate math given both projections, xp and hp = W_hh h + b_hh (B, 3H) -> h'
// (gru_step is matmul + gru_gates; the int8 GRU of ops/quantized.h computes hp in int8).
Tensor gru_gates(const Tensor& xp, const Tensor& hp, const Tensor& h);
enum class Direction { forward, reverse };
// A GRU layer written with ops over any step(xp_t (B, 3H), h (B, H)) -> h' (B, H): the loop of
// gru_layer_composed (padding keeps the state), shared with the int8 GRU.
using GruStepFn = std::function<Tensor(const Tensor& xp_t, const Tensor& h)>;
Tensor gru_layer_steps(const Tensor& xp, const Tensor& h0, const Tensor& keep, Direction direction,
                       const GruStepFn& step);
// A GRU layer's keep mask with what the fused layer reads of it on the host: keep (T, B) bool,
// true at real steps (undefined: every step real), and padding[t], whether no row keeps step t
// (there the layer copies the state and skips the GEMM). Reading padding is a device-to-host
// copy (a sync on CUDA), so a GRU makes one StepKeep per call and passes it to every layer and
// direction; a Tensor converts to one, read on the spot.
struct StepKeep {
  StepKeep() = default;
  StepKeep(Tensor keep);  // a keep mask converts implicitly, its padding read on the host here
  Tensor keep;
  std::vector<bool> padding;  // (T,); empty when keep is undefined
};
// gru_layer: one layer in one direction
//   xp (T, B, 3H): every step's input projection W_ih x_t + b_ih (one GEMM, time-major);
//   h0 (B, H); w_hh (3H, H); b_hh (3H,) or undefined; keep (T, B) bool or undefined (every step real)
//   -> y (T, B, H): y[t] the state after step t (h_{t-1} again where the step is padding).
// Forward: per step one GEMM (W_hh h + b_hh) and one fused gate kernel; backward: per step the
// fused gate backward and one GEMM for the carried dh, then dW_hh as two GEMMs over all steps and
// db_hh as one sum; dxp comes back for every step at once, so the input projection's backward is
// one GEMM too. gru_layer_composed: gru_step over the steps, with where() for padding.
Tensor gru_layer(const Tensor& xp, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh, const StepKeep& keep,
                 Direction direction);
Tensor gru_layer_composed(const Tensor& xp, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                          const Tensor& keep, Direction direction);

// Additive attention energies (ops/additive_scores.cpp; derivation in docs/attention.md):
//   s_bqk = w_v · tanh(qp_bq + kp_bk)
// qp (B, Q, A), kp (B, K, A), w_v (1, A) -> scores (B, Q, K).
//   dqp_bq = Σ_k dz_bqk   dkp_bk = Σ_q dz_bqk   dw_v = Σ_bqk ds_bqk · f_bqk
//   with f = tanh(qp + kp) and dz_bqk = ds_bqk · w_v ∘ (1 - f_bqk²)
// The fused op never stores anything of size B·Q·K·A (backward recomputes tanh); the composed
// twin materialises the (B, Q, K, A) features (tanh of a broadcast add, then a linear).
Tensor additive_scores(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v);
Tensor additive_scores_composed(const Tensor& projected_queries, const Tensor& projected_keys, const Tensor& w_v);

// Exact additive attention over the keys in chunks of C with an online (log-sum-exp merged)
// softmax, as FlashAttention does (ops/attention_chunked.cpp; why averaging per-chunk contexts is
// not attention: docs/attention.md). qp (B, Q, A) = W_q q, kp (B, K, A) = W_k k, w_v (1, A),
// values (B, K, Dv), key_keep bool (B, 1 | Q, K) (true = attend) or undefined -> context (B, Q, Dv).
//   Forward, per chunk J of keys (running max m, normaliser l, weighted sum acc per row):
//     s_J = w_v · tanh(qp + kp_J) (additive_scores, (B, Q, C))   m' = max(m, max_J s)
//     α = exp(m - m')   p = exp(s_J - m')   l = α l + Σ_J p   acc = α acc + (p ∘ drop_J) · values_J
//   context = acc / l; the log-normaliser L = m + log l is saved. Rows with no key kept give 0.
//   Backward recomputes each chunk's scores from (qp, kp) and L (nothing (B, Q, K)-sized is saved):
//     w_J = exp(s_J - L)   Δ = Σ_v dy ∘ context   dvalues_J = (w_J ∘ drop_J)ᵀ dy
//     ds_J = w_J ∘ (drop_J ∘ (dy · values_Jᵀ) - Δ), then dqp, dkp_J, dw_v through the energies
//     (Backend::additive_attention_chunk_backward: one tanh pass per chunk).
// Memory is O(B·Q·(C + A + Dv) + B·K·(A + Dv)), linear in the lengths. dropout_p > 0 drops weights
// with a mask regenerated per chunk from the counter-based generator (the same mask in backward;
// AdditiveAttention's draw when chunk_size >= K). The composed twin is the same recurrence
// recorded by autograd: create_graph differentiates it.
Tensor chunked_additive_attention(const Tensor& qp, const Tensor& kp, const Tensor& w_v, const Tensor& values,
                                  const Tensor& key_keep, int64_t chunk_size, double dropout_p = 0.0);

// Layer normalisation over the trailing dimensions `normalized_shape` of x (ops/layer_norm.cpp),
// as torch.nn.functional.layer_norm: per row of D = numel(normalized_shape) values
//   y = (x - μ) / √(σ² + eps) · weight + bias   (μ, σ² the row's mean and biased variance)
// weight, bias: normalized_shape, or undefined (1 and 0). Fused (one pass per row each way:
// Backend::layer_norm_rows); layer_norm_composed is its twin in ops (mean, sub, mul, pow).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor layer_norm_composed(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                           const Tensor& bias = {}, double eps = 1e-5);

// Per-target losses over class scores on the last dimension (ops/loss.cpp); nn/loss.h adds the
// reductions. scores (..., C), targets (...) int64 -> (...), 0 where the target is ignore_index.
// Both validate the targets (int64, shape, every one in [0, C) or ignore_index).
//   nll_rows            loss = -scores[y]
//   cross_entropy_rows  loss = lse - (1 - ε) x_y - ε/C Σ_c x_c, lse = log Σ_c exp(x_c)
//                       dx_c = dloss · (softmax(x)_c - ε/C) - [c == y] dloss · (1 - ε)
// (ε = label_smoothing in [0, 1]: the mass spread over all C classes, the target included, as
// PyTorch does). cross_entropy_rows is fused (one pass per row each way); its composed twin is
// log_softmax, gather and a class sum.
Tensor nll_rows(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index);
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, double label_smoothing, int64_t ignore_index);
Tensor cross_entropy_rows_composed(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                   int64_t ignore_index);
// The one check of a label smoothing value (in [0, 1]), for the losses and for configurations
// that carry one: "cross_entropy: label_smoothing = 1.5 not in [0, 1]".
void check_label_smoothing(double label_smoothing);

}  // namespace seqgrad
