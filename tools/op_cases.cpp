// The op table's rows (see op_cases.h): gradcheck rows, error rows and golden rows for every op
// in ops/ops.h, plus the in-place Tensor methods.
#include "tools/op_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/rng.h"
#include "nn/attention.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "ops/ops.h"

namespace seqgrad::op_cases {
namespace {

using Inputs = std::vector<Tensor>;
using X = const Inputs&;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Each part scaled by its position, flattened and concatenated: one output for multi-output ops
// (split, chunk), in which every part's gradient is distinguishable.
Tensor weighted_cat(const std::vector<Tensor>& parts) {
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < parts.size(); ++i) scaled.push_back(mul(parts[i].reshape({-1}), static_cast<double>(i + 1)));
  return cat(scaled);
}

Tensor f64(std::initializer_list<double> v, Shape shape) { return tensor(v, shape, {.dtype = DType::f64}); }
Tensor f64(std::initializer_list<double> v) { return tensor(v, {.dtype = DType::f64}); }
Tensor i64(std::initializer_list<double> v, Shape shape) { return tensor(v, shape, {.dtype = DType::i64}); }
Tensor i64(std::initializer_list<double> v) { return tensor(v, {.dtype = DType::i64}); }
Tensor b8(std::initializer_list<double> v) { return tensor(v, {.dtype = DType::b8}); }

// ---------------------------------------------------------------------------------------------
// gradcheck rows

std::vector<OpCase> build_op_cases() {
  const Layout T = Layout::transposed, S = Layout::sliced;
  // Declared Jacobian sparsity (`seqgrad gradcheck --compress`): element-wise, or rows along a dim.
  const Jacobian E = Jacobian::elementwise();
  auto R = [](int dim) { return Jacobian::rowwise(dim); };
  std::vector<OpCase> rows = {
      // ---- element-wise, broadcasting, scalars
      {.op = "add", .variant = "same_shape", .inputs = {in({2, 3}), in({2, 3})}, .fn = [](X x) { return add(x[0], x[1]); }, .jacobian = E},
      {.op = "add", .variant = "broadcast_row", .inputs = {in({2, 3}), in({3})}, .fn = [](X x) { return add(x[0], x[1]); }},
      {.op = "add", .variant = "broadcast_both", .inputs = {in({2, 1, 3}), in({4, 1})},
       .fn = [](X x) { return x[0] + x[1]; }},
      {.op = "add", .variant = "noncontiguous", .inputs = {in({3, 4}, T), in({3, 4}, S)},
       .fn = [](X x) { return add(x[0], x[1]); }, .jacobian = E},
      {.op = "add", .variant = "scalar", .inputs = {in({2, 3})}, .fn = [](X x) { return add(x[0], 1.5) + 2.0; }, .jacobian = E},
      {.op = "add", .variant = "one_input_twice", .inputs = {in({2, 3})}, .fn = [](X x) { return add(x[0], x[0]); }, .jacobian = E},
      {.op = "sub", .variant = "broadcast", .inputs = {in({2, 3}), in({2, 1})}, .fn = [](X x) { return sub(x[0], x[1]); }},
      {.op = "sub", .variant = "scalar_operators", .inputs = {in({3})}, .fn = [](X x) { return (2.0 - x[0]) - 0.5; }, .jacobian = E},
      {.op = "mul", .variant = "broadcast", .inputs = {in({2, 3}), in({1, 3})}, .fn = [](X x) { return mul(x[0], x[1]); }},
      {.op = "mul", .variant = "transposed", .inputs = {in({3, 2}, T), in({3, 2})}, .fn = [](X x) { return x[0] * x[1]; }, .jacobian = E},
      {.op = "mul", .variant = "scalar", .inputs = {in({2, 3})}, .fn = [](X x) { return -1.5 * mul(x[0], 2.0); }, .jacobian = E},
      {.op = "mul", .variant = "square_by_reuse", .inputs = {in({4})}, .fn = [](X x) { return mul(x[0], x[0]); }, .jacobian = E},
      // denominators kept at least 0.1 from 0
      // kNoBf16: a divisor of 0.29 against bf16's step of 0.125: a / b³ (second order) changes too much within it
      {.op = "div", .variant = "broadcast", .inputs = {in({2, 3}), in({3})}, .fn = [](X x) { return div(x[0], x[1]); },
       .kinks = {0.0}, .flags = kNoBf16},
      {.op = "div", .variant = "scalar_operators", .inputs = {in({2, 2})}, .fn = [](X x) { return 1.0 / x[0] + x[0] / 4.0; },
       .kinks = {0.0}, .jacobian = E},
      {.op = "pow", .variant = "tensor", .inputs = {positive({2, 3}), in({2, 3})}, .fn = [](X x) { return pow(x[0], x[1]); }, .jacobian = E},
      {.op = "pow", .variant = "tensor_broadcast", .inputs = {positive({2, 3}), in({3})},
       .fn = [](X x) { return pow(x[0], x[1]); }},
      {.op = "pow", .variant = "scalar_fractional", .inputs = {positive({2, 3})}, .fn = [](X x) { return pow(x[0], 2.5); }, .jacobian = E},
      {.op = "pow", .variant = "scalar_square", .inputs = {in({2, 3})}, .fn = [](X x) { return pow(x[0], 2.0); }, .jacobian = E},
      {.op = "pow", .variant = "scalar_cube", .inputs = {in({4})}, .fn = [](X x) { return x[0].pow(3.0); }, .jacobian = E},
      {.op = "pow", .variant = "scalar_negative", .inputs = {positive({3})}, .fn = [](X x) { return pow(x[0], -1.5); }, .jacobian = E},
      {.op = "pow", .variant = "scalar_zero", .inputs = {in({3})}, .fn = [](X x) { return pow(x[0], 0.0); }, .jacobian = E},
      {.op = "neg", .variant = "transposed", .inputs = {in({2, 3}, T)}, .fn = [](X x) { return neg(x[0]); }, .jacobian = E},
      {.op = "exp", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return exp(x[0]); }, .jacobian = E},
      {.op = "exp", .variant = "sliced", .inputs = {in({2, 3}, S)}, .fn = [](X x) { return x[0].exp(); }, .jacobian = E},
      {.op = "log", .variant = "", .inputs = {positive({2, 3})}, .fn = [](X x) { return log(x[0]); }, .jacobian = E},
      {.op = "log", .variant = "transposed", .inputs = {positive({2, 3}, T)}, .fn = [](X x) { return x[0].log(); }, .jacobian = E},
      {.op = "sqrt", .variant = "", .inputs = {positive({2, 3})}, .fn = [](X x) { return sqrt(x[0]); }, .jacobian = E},
      {.op = "tanh", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return tanh(x[0]); }, .jacobian = E},
      {.op = "tanh", .variant = "transposed", .inputs = {in({3, 2}, T)}, .fn = [](X x) { return x[0].tanh(); }, .jacobian = E},
      {.op = "sigmoid", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return sigmoid(x[0]); }, .jacobian = E},
      {.op = "sigmoid", .variant = "saturated", .inputs = {values({-30, -4, 0.5, 4, 30}, {5})},
       .fn = [](X x) { return x[0].sigmoid(); }, .jacobian = E},
      {.op = "relu", .variant = "", .inputs = {in({3, 4})}, .fn = [](X x) { return relu(x[0]); }, .kinks = {0.0}, .jacobian = E},
      {.op = "abs", .variant = "", .inputs = {in({3, 4})}, .fn = [](X x) { return abs(x[0]); }, .kinks = {0.0}, .jacobian = E},
      {.op = "clamp", .variant = "", .inputs = {in({3, 4})}, .fn = [](X x) { return clamp(x[0], -0.5, 0.7); },
       .kinks = {-0.5, 0.7}, .jacobian = E},
      // kKinksAtTies: bf16's step (0.125) reaches across where the two inputs tie
      {.op = "maximum", .variant = "broadcast", .inputs = {in({2, 3}), in({3})},
       .fn = [](X x) { return maximum(x[0], x[1]); }, .flags = kKinksAtTies},
      {.op = "minimum", .variant = "broadcast", .inputs = {in({2, 1}), in({2, 3})},
       .fn = [](X x) { return minimum(x[0], x[1]); }, .flags = kKinksAtTies},
      // ties: gradcheck cannot see the kink's even split (only one side of it), so a tie is built
      // with one input on both sides: maximum(x, x) = x has derivative 1 = ½ + ½
      {.op = "maximum", .variant = "tie_splits_evenly", .inputs = {in({4})}, .fn = [](X x) { return maximum(x[0], x[0]); }, .jacobian = E},
      {.op = "minimum", .variant = "tie_splits_evenly", .inputs = {in({4})}, .fn = [](X x) { return minimum(x[0], x[0]); }, .jacobian = E},
      {.op = "log1p", .variant = "", .inputs = {positive({2, 3})}, .fn = [](X x) { return log1p(x[0]); }, .jacobian = E},
      {.op = "log1p", .variant = "near_zero", .inputs = {values({-0.5, -1e-3, 1e-8, 0.25}, {4})},
       .fn = [](X x) { return log1p(x[0]); }, .jacobian = E},
      {.op = "expm1", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return expm1(x[0]); }, .jacobian = E},
      {.op = "erf", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return erf(x[0]); }, .jacobian = E},
      {.op = "log_sigmoid", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return log_sigmoid(x[0]); }, .jacobian = E},
      {.op = "log_sigmoid", .variant = "saturated", .inputs = {values({-40, -5, 0.5, 5, 40}, {5})},
       .fn = [](X x) { return log_sigmoid(x[0]); }, .jacobian = E},
      {.op = "silu", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return silu(x[0]); }, .jacobian = E},
      // kinks at ±3: 2.9 is 0.1 from one, within bf16's step there (0.36)
      {.op = "hardsigmoid", .variant = "", .inputs = {values({-4, -2.5, -0.5, 0.7, 2.9, 3.5}, {2, 3})},
       .fn = [](X x) { return hardsigmoid(x[0]); }, .kinks = {-3.0, 3.0}, .jacobian = E},
      {.op = "hardswish", .variant = "", .inputs = {values({-4, -2.5, -0.5, 0.7, 2.9, 3.5}, {2, 3})},
       .fn = [](X x) { return hardswish(x[0]); }, .kinks = {-3.0, 3.0}, .jacobian = E},
      {.op = "mish", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return mish(x[0]); }, .jacobian = E},
      {.op = "mish", .variant = "wide", .inputs = {values({-30, -4, -0.5, 0.5, 4, 25}, {2, 3})},
       .fn = [](X x) { return mish(x[0]); }, .jacobian = E},
      {.op = "softplus", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return softplus(x[0]); }, .jacobian = E},
      // beta 2, threshold 1: x > 0.5 is the linear branch (kink at 0.5 kept away from)
      {.op = "softplus", .variant = "beta_threshold", .inputs = {in({3, 4})},
       .fn = [](X x) { return softplus(x[0], 2.0, 1.0); }, .kinks = {0.5}, .jacobian = E},
      {.op = "gelu", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return gelu(x[0]); }, .jacobian = E},
      {.op = "gelu", .variant = "tanh", .inputs = {in({2, 3})},
       .fn = [](X x) { return gelu(x[0], GeluApproximate::tanh); }, .jacobian = E},
      {.op = "where", .variant = "scalar_operands", .inputs = {mask({1, 0, 0, 1, 1, 0}, {2, 3}), in({2, 3})},
       .fn = [](X x) { return where(x[0], x[1], 0.5) + where(x[0], -1.0, x[1]); }, .jacobian = E},
      {.op = "where", .variant = "", .inputs = {mask({1, 0, 0, 1, 1, 0}, {2, 3}), in({2, 3}), in({2, 3})},
       .fn = [](X x) { return where(x[0], x[1], x[2]); }, .jacobian = E},
      {.op = "where", .variant = "broadcast", .inputs = {mask({1, 0, 1}, {3}), in({2, 3}), in({2, 1})},
       .fn = [](X x) { return where(x[0], x[1], x[2]); }},
      {.op = "masked_fill", .variant = "", .inputs = {in({2, 3}), mask({1, 0, 0, 1, 1, 0}, {2, 3})},
       .fn = [](X x) { return masked_fill(x[0], x[1], -1.0); }, .jacobian = E},
      {.op = "masked_fill", .variant = "broadcast_mask", .inputs = {in({2, 3}), mask({0, 1, 0}, {3})},
       .fn = [](X x) { return x[0].masked_fill(x[1], -1e9); }},
      // fused backward helpers: autograd records the composed twin, the numerical pass runs the fused kernel
      {.op = "tanh_backward", .variant = "", .inputs = {in({2, 3}), in({2, 3})},
       .fn = [](X x) { return tanh_backward(x[0], x[1]); }, .jacobian = E},
      {.op = "sigmoid_backward", .variant = "", .inputs = {in({2, 3}), in({2, 3})},
       .fn = [](X x) { return sigmoid_backward(x[0], x[1]); }, .jacobian = E},
      {.op = "relu_backward", .variant = "", .inputs = {in({2, 3}), in({2, 3})},
       .fn = [](X x) { return relu_backward(x[0], x[1]); }, .jacobian = E},

      // ---- reductions
      {.op = "sum", .variant = "all", .inputs = {in({2, 3})}, .fn = [](X x) { return sum(x[0]); }},
      {.op = "sum", .variant = "dims", .inputs = {in({2, 3, 4})}, .fn = [](X x) { return sum(x[0], {0, 2}); }},
      {.op = "sum", .variant = "keepdim", .inputs = {in({2, 3})}, .fn = [](X x) { return x[0].sum({-1}, true); }},
      {.op = "sum", .variant = "transposed", .inputs = {in({3, 4}, T)}, .fn = [](X x) { return sum(x[0], {0}); }},
      {.op = "mean", .variant = "all", .inputs = {in({2, 3})}, .fn = [](X x) { return mean(x[0]); }},
      {.op = "mean", .variant = "dim_keepdim", .inputs = {in({2, 3, 2})}, .fn = [](X x) { return mean(x[0], {1}, true); }},
      {.op = "max", .variant = "all", .inputs = {distinct({2, 3})}, .fn = [](X x) { return max(x[0]); }},
      {.op = "max", .variant = "dim", .inputs = {distinct({3, 4})}, .fn = [](X x) { return max(x[0], 1).values; }},
      {.op = "max", .variant = "dim_keepdim", .inputs = {distinct({3, 4})},
       .fn = [](X x) { return x[0].max(0, true).values; }},
      {.op = "max", .variant = "transposed", .inputs = {distinct({3, 4}, T)},
       .fn = [](X x) { return max(x[0], -1).values; }},
      {.op = "max", .variant = "structured_binding", .inputs = {distinct({2, 3, 2})},
       .fn = [](X x) {
         auto [values, indices] = max(x[0], 1);
         return mul(values, add(to_dtype(indices, values.dtype()), 1.0));  // the indices weigh the values
       }},
      {.op = "min", .variant = "dim", .inputs = {distinct({3, 4})}, .fn = [](X x) { return min(x[0], 1).values; }},
      {.op = "min", .variant = "dim_keepdim", .inputs = {distinct({2, 3, 2})},
       .fn = [](X x) { return x[0].min(1, true).values; }},
      // kKinksAtTies: distinct values 0.3 apart, bf16's step near 3.2 is 0.4
      {.op = "amax", .variant = "dims", .inputs = {distinct({2, 3, 4})}, .fn = [](X x) { return amax(x[0], {0, 2}); },
       .flags = kKinksAtTies},
      {.op = "amax", .variant = "all_keepdim", .inputs = {distinct({2, 3})},
       .fn = [](X x) { return amax(x[0], {}, true); }},
      {.op = "amin", .variant = "dim", .inputs = {distinct({3, 4})}, .fn = [](X x) { return amin(x[0], {1}, true); }},
      {.op = "sort", .variant = "ascending", .inputs = {distinct({3, 4})}, .fn = [](X x) { return sort(x[0], 1).values; }},
      {.op = "sort", .variant = "descending_dim0", .inputs = {distinct({3, 2, 2})},
       .fn = [](X x) {
         auto [values, indices] = sort(x[0], 0, true);
         return mul(values, add(to_dtype(indices, values.dtype()), 1.0));
       }},
      {.op = "logsumexp", .variant = "dim", .inputs = {in({3, 4})}, .fn = [](X x) { return logsumexp(x[0], {1}); }},
      {.op = "logsumexp", .variant = "all_keepdim", .inputs = {in({2, 3})},
       .fn = [](X x) { return logsumexp(x[0], {0, 1}, true); }},
      // kNoBf16: bf16 spaces values near 1000 by 4, far coarser than the op's unit scale
      {.op = "logsumexp", .variant = "large_values", .inputs = {values({1000, 1001, 999, 1000.5}, {2, 2})},
       .fn = [](X x) { return logsumexp(x[0], {1}); }, .flags = kNoBf16},
      {.op = "sum_to", .variant = "", .inputs = {in({2, 3, 4})}, .fn = [](X x) { return sum_to(x[0], {3, 1}); }},

      // ---- linear algebra
      {.op = "matmul", .variant = "vector_vector", .inputs = {in({3}), in({3})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "vector_matrix", .inputs = {in({3}), in({3, 2})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "matrix_vector", .inputs = {in({2, 3}), in({3})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "matrix", .inputs = {in({2, 3}), in({3, 4})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "transposed_operands", .inputs = {in({2, 3}, T), in({3, 4}, T)},
       .fn = [](X x) { return x[0].matmul(x[1]); }},
      {.op = "matmul", .variant = "sliced_operand", .inputs = {in({2, 3}, S), in({3, 2})},
       .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "batched_broadcast", .inputs = {in({2, 1, 2, 3}), in({3, 3, 2})},
       .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "3d_2d", .inputs = {in({2, 3, 4}), in({4, 2})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "2d_3d", .inputs = {in({2, 3}), in({4, 3, 2})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "matmul", .variant = "batched_vector", .inputs = {in({2, 3, 4}), in({4})}, .fn = [](X x) { return matmul(x[0], x[1]); }},
      {.op = "bmm", .variant = "", .inputs = {in({2, 2, 3}), in({2, 3, 4})}, .fn = [](X x) { return bmm(x[0], x[1]); }},
      {.op = "bmm", .variant = "transposed", .inputs = {in({2, 2, 3}, T), in({2, 3, 4})}, .fn = [](X x) { return bmm(x[0], x[1]); }},
      {.op = "linear", .variant = "bias", .inputs = {in({2, 3}), in({4, 3}), in({4})},
       .fn = [](X x) { return linear(x[0], x[1], x[2]); }},
      {.op = "linear", .variant = "no_bias", .inputs = {in({2, 3}), in({4, 3})}, .fn = [](X x) { return linear(x[0], x[1]); }},
      {.op = "linear", .variant = "3d_input", .inputs = {in({2, 2, 3}), in({4, 3}), in({4})},
       .fn = [](X x) { return linear(x[0], x[1], x[2]); }},

      // ---- softmax family
      {.op = "softmax", .variant = "last", .inputs = {in({2, 3})}, .fn = [](X x) { return softmax(x[0], -1); }, .jacobian = R(-1)},
      {.op = "softmax", .variant = "dim0", .inputs = {in({3, 2})}, .fn = [](X x) { return softmax(x[0], 0); }, .jacobian = R(0)},
      {.op = "softmax", .variant = "middle", .inputs = {in({2, 3, 2})}, .fn = [](X x) { return x[0].softmax(1); }, .jacobian = R(1)},
      {.op = "softmax", .variant = "transposed", .inputs = {in({3, 4}, T)}, .fn = [](X x) { return softmax(x[0], 1); }, .jacobian = R(1)},
      {.op = "log_softmax", .variant = "last", .inputs = {in({2, 3})}, .fn = [](X x) { return log_softmax(x[0], -1); }, .jacobian = R(-1)},
      {.op = "log_softmax", .variant = "dim0", .inputs = {in({3, 2})}, .fn = [](X x) { return log_softmax(x[0], 0); }, .jacobian = R(0)},
      {.op = "log_softmax", .variant = "sliced", .inputs = {in({2, 3}, S)}, .fn = [](X x) { return x[0].log_softmax(-1); }, .jacobian = R(-1)},

      // ---- shape ops
      {.op = "view", .variant = "", .inputs = {in({2, 6})}, .fn = [](X x) { return view(x[0], {3, -1}); }},
      {.op = "reshape", .variant = "contiguous", .inputs = {in({2, 3, 2})}, .fn = [](X x) { return reshape(x[0], {6, 2}); }},
      {.op = "reshape", .variant = "transposed_copies", .inputs = {in({3, 4}, T)}, .fn = [](X x) { return x[0].reshape({-1}); }},
      {.op = "reshape", .variant = "flatten", .inputs = {in({2, 3, 2})}, .fn = [](X x) { return x[0].flatten(1); }},
      {.op = "permute", .variant = "", .inputs = {in({2, 3, 4})}, .fn = [](X x) { return permute(x[0], {2, 0, 1}); }},
      {.op = "transpose", .variant = "", .inputs = {in({2, 3, 4})}, .fn = [](X x) { return transpose(x[0], 0, 2); }},
      {.op = "transpose", .variant = "t", .inputs = {in({2, 3})}, .fn = [](X x) { return x[0].t(); }},
      {.op = "squeeze", .variant = "", .inputs = {in({2, 1, 3})}, .fn = [](X x) { return squeeze(x[0], 1); }},
      {.op = "unsqueeze", .variant = "", .inputs = {in({2, 3})}, .fn = [](X x) { return unsqueeze(x[0], -1); }},
      {.op = "expand", .variant = "", .inputs = {in({3, 1})}, .fn = [](X x) { return expand(x[0], {2, 3, 4}); }},
      {.op = "expand", .variant = "operand", .inputs = {in({1, 3}), in({2, 3})},
       .fn = [](X x) { return mul(x[0].expand_as(x[1]), x[1]); }},
      {.op = "narrow", .variant = "", .inputs = {in({4, 3})}, .fn = [](X x) { return narrow(x[0], 0, 1, 2); }},
      {.op = "slice", .variant = "step", .inputs = {in({3, 7})}, .fn = [](X x) { return slice(x[0], 1, 1, 6, 2); }},
      {.op = "slice", .variant = "negative_start", .inputs = {in({5})}, .fn = [](X x) { return x[0].slice(0, -3, 5); }},
      {.op = "select", .variant = "", .inputs = {in({3, 4})}, .fn = [](X x) { return select(x[0], 1, -1); }},
      {.op = "contiguous", .variant = "", .inputs = {in({3, 4}, T)}, .fn = [](X x) { return contiguous(x[0]); }, .jacobian = E},
      {.op = "clone", .variant = "", .inputs = {in({2, 3}, S)}, .fn = [](X x) { return clone(x[0]); }, .jacobian = E},
      // a float32 round trip: exact for the linear map, but the step must exceed float32 rounding
      {.op = "to", .variant = "float32_roundtrip", .inputs = {in({2, 3})},
       .fn = [](X x) { return to_dtype(mul(to_dtype(x[0], DType::f32), 3.0), DType::f64); },
       .eps = 1e-2, .atol = 1e-4},
      {.op = "cat", .variant = "dim0", .inputs = {in({2, 3}), in({1, 3})}, .fn = [](X x) { return cat({x[0], x[1]}, 0); }},
      {.op = "cat", .variant = "dim1_three", .inputs = {in({2, 1}), in({2, 3}), in({2, 2})},
       .fn = [](X x) { return cat({x[0], x[1], x[2]}, 1); }},
      {.op = "cat", .variant = "noncontiguous", .inputs = {in({2, 3}, T), in({2, 3}, S)},
       .fn = [](X x) { return cat({x[0], x[1]}, -1); }},
      {.op = "stack", .variant = "dim0", .inputs = {in({2, 3}), in({2, 3})}, .fn = [](X x) { return stack({x[0], x[1]}); }},
      {.op = "stack", .variant = "last", .inputs = {in({2, 3}), in({2, 3}, T)}, .fn = [](X x) { return stack({x[0], x[1]}, -1); }},
      {.op = "split", .variant = "", .inputs = {in({5, 2})}, .fn = [](X x) { return weighted_cat(split(x[0], 2)); }},
      {.op = "chunk", .variant = "", .inputs = {in({2, 6})}, .fn = [](X x) { return weighted_cat(x[0].chunk(3, 1)); }},
      {.op = "slice_scatter", .variant = "", .inputs = {in({2, 2})},
       .fn = [](X x) { return slice_scatter({2, 5}, x[0], 1, 1, 2); }},

      // ---- indexing (repeated ids check accumulation)
      {.op = "index_select", .variant = "dim0", .inputs = {in({4, 3}), ids({2, 0, 2}, {3})},
       .fn = [](X x) { return index_select(x[0], 0, x[1]); }},
      {.op = "index_select", .variant = "dim1_transposed", .inputs = {in({2, 4}, T), ids({3, 1}, {2})},
       .fn = [](X x) { return index_select(x[0], 1, x[1]); }},
      {.op = "index_add", .variant = "", .inputs = {in({4, 3}), ids({1, 3, 1}, {3}), in({3, 3})},
       .fn = [](X x) { return index_add(x[0], 0, x[1], x[2]); }},
      {.op = "gather", .variant = "dim1", .inputs = {in({3, 4}), ids({0, 3, 3, 1, 2, 0}, {3, 2})},
       .fn = [](X x) { return gather(x[0], 1, x[1]); }},
      {.op = "gather", .variant = "dim0", .inputs = {in({3, 2}), ids({2, 0, 1, 1}, {2, 2})},
       .fn = [](X x) { return gather(x[0], 0, x[1]); }},
      // an index smaller than the input in the other dims: out[i][j][k] = x[index[i][j][k]][j][k]
      {.op = "gather", .variant = "smaller_index_3d", .inputs = {in({2, 3, 4}), ids({1, 0, 0, 1}, {1, 2, 2})},
       .fn = [](X x) { return gather(x[0], 0, x[1]); }},
      {.op = "scatter_add", .variant = "dim1", .inputs = {in({3, 4}), ids({0, 3, 3, 1, 2, 0}, {3, 2}), in({3, 2})},
       .fn = [](X x) { return scatter_add(x[0], 1, x[1], x[2]); }},
      {.op = "scatter_add", .variant = "smaller_index_3d",
       .inputs = {in({2, 3, 4}), ids({1, 0, 0, 1}, {1, 2, 2}), in({1, 2, 2})},
       .fn = [](X x) { return scatter_add(x[0], 0, x[1], x[2]); }},
      {.op = "embedding", .variant = "", .inputs = {in({5, 3}), ids({1, 4, 1, 0, 2, 4}, {2, 3})},
       .fn = [](X x) { return embedding(x[0], x[1]); }},
      // Rows equal to padding_idx get no gradient by definition, so the output is masked there too
      // (then the numerical gradient of row 0 is also zero and every other row is still checked).
      {.op = "embedding", .variant = "padding_idx", .inputs = {in({5, 3}), ids({1, 0, 1, 0, 2, 4}, {2, 3})},
       .fn = [](X x) {
         Tensor keep = to_dtype(ne(x[1], 0.0), x[0].dtype()).unsqueeze(-1);
         return mul(embedding(x[0], x[1], 0), keep);
       }},

      {.op = "repeat_interleave", .variant = "int_dim1", .inputs = {in({2, 3})},
       .fn = [](X x) { return repeat_interleave(x[0], 2, 1); }},
      {.op = "repeat_interleave", .variant = "tensor_with_zero", .inputs = {in({3, 2}), ids({2, 0, 3}, {3})},
       .fn = [](X x) { return repeat_interleave(x[0], x[1], 0); }},
      {.op = "repeat_interleave", .variant = "flattened", .inputs = {in({2, 2}, T)},
       .fn = [](X x) { return repeat_interleave(x[0], 3); }},

      // ---- randomness: reseeded on every call, so every evaluation draws the same mask
      // kNoFloat32: the mask is drawn in the input's dtype, so float32 and float64 drop other elements
      {.op = "dropout", .variant = "seeded", .inputs = {in({4, 5})},
       .fn = [](X x) {
         manual_seed(1234);
         return dropout(x[0], 0.4);
       },
       .flags = kNoFloat32},
      {.op = "dropout", .variant = "eval", .inputs = {in({2, 3})}, .fn = [](X x) { return dropout(x[0], 0.4, false); }},

      // ---- in-place Tensor methods on non-leaf tensors (recorded as their out-of-place twins)
      {.op = "add_", .variant = "broadcast_alpha", .inputs = {in({2, 3}), in({3})},
       .fn = [](X x) {
         Tensor h = mul(x[0], 1.0);
         h.add_(x[1], 0.5);
         return h;
       }, .jacobian = E},
      {.op = "mul_", .variant = "", .inputs = {in({2, 3}), in({2, 3})},
       .fn = [](X x) {
         Tensor h = mul(x[0], 1.0);
         h.mul_(x[1]);
         return h.mul_(2.0);
       }, .jacobian = E},
      {.op = "copy_", .variant = "broadcast", .inputs = {in({2, 3}), in({3})},
       .fn = [](X x) {
         Tensor h = mul(x[0], 2.0);
         return h.copy_(x[1]);
       }},
      {.op = "masked_fill_", .variant = "", .inputs = {in({2, 3}), mask({0, 1, 1}, {3})},
       .fn = [](X x) {
         Tensor h = mul(x[0], 3.0);
         return h.masked_fill_(x[1], 0.25);
       }, .jacobian = E},
      {.op = "clamp_", .variant = "", .inputs = {in({3, 3})},
       .fn = [](X x) {
         Tensor h = mul(x[0], 1.0);
         return h.clamp_(-0.5, 0.5);
       },
       .kinks = {-0.5, 0.5}, .jacobian = E},
      // ---- nn-level ops (nn/): the fused ones are checked through their fused path; their
      // second order goes through the composed twin
      {.op = "masked_softmax", .variant = "per_batch", .inputs = {in({2, 3, 4}), ids({4, 2}, {2})},
       .fn = [](X x) { return nn::masked_softmax(x[0], x[1]); }, .jacobian = R(-1)},
      {.op = "masked_softmax", .variant = "per_query_with_empty_row", .inputs = {in({2, 3, 4}), ids({4, 0, 1, 2, 3, 4}, {2, 3})},
       .fn = [](X x) { return nn::masked_softmax(x[0], x[1]); }, .jacobian = R(-1)},
      {.op = "masked_softmax", .variant = "keep_mask", .inputs = {in({2, 4}), mask({1, 0, 1, 1, 0, 0, 0, 0}, {2, 4})},
       .fn = [](X x) { return nn::softmax_with_keep(x[0], x[1]); }, .jacobian = R(-1)},
      {.op = "cross_entropy", .variant = "smoothed_ignore_index", .inputs = {in({4, 5}), ids({1, 0, 4, 2}, {4})},
       .fn = [](X x) { return nn::cross_entropy(x[0], x[1], {.label_smoothing = 0.1, .ignore_index = 0}); }},
      {.op = "cross_entropy", .variant = "sum", .inputs = {in({3, 4}), ids({3, 0, 1}, {3})},
       .fn = [](X x) { return nn::cross_entropy(x[0], x[1], {.reduction = nn::Reduction::sum}); }},
      {.op = "cross_entropy", .variant = "pytorch_layout_smoothed", .inputs = {in({2, 4, 3}), ids({1, 0, 3, 2, 2, 0}, {2, 3})},
       .fn = [](X x) { return nn::cross_entropy(x[0], x[1], {.label_smoothing = 0.2, .ignore_index = 0, .class_dim = 1}); }},
      {.op = "cross_entropy", .variant = "pytorch_layout_4d_none", .inputs = {in({2, 3, 2, 2}), ids({0, 1, 2, 2, 1, 0, 0, 1}, {2, 2, 2})},
       .fn = [](X x) { return nn::cross_entropy(x[0], x[1], {.reduction = nn::Reduction::none, .class_dim = 1}); }},
      {.op = "nll_loss", .variant = "pytorch_layout", .inputs = {in({2, 3, 2}), ids({0, 2, 1, 1}, {2, 2})},
       .fn = [](X x) { return nn::nll_loss(log_softmax(x[0], 1), x[1], {.class_dim = 1}); }},
      {.op = "layer_norm", .variant = "affine", .inputs = {in({3, 5}), in({5}), in({5})},
       .fn = [](X x) { return layer_norm(x[0], {5}, x[1], x[2]); }},
      {.op = "layer_norm", .variant = "two_dims_no_affine", .inputs = {in({2, 3, 4})},
       .fn = [](X x) { return layer_norm(x[0], {3, 4}); }},
      {.op = "layer_norm", .variant = "transposed_weight_only", .inputs = {in({4, 3}, T), in({3})},
       .fn = [](X x) { return layer_norm(x[0], {3}, x[1], {}, 1e-3); }, .jacobian = R(-1)},
      {.op = "layer_norm", .variant = "sliced_bias_only", .inputs = {in({2, 4}, S), in({4})},
       .fn = [](X x) { return layer_norm(x[0], {4}, {}, x[1]); }},
      {.op = "additive_scores", .variant = "", .inputs = {in({2, 3, 4}), in({2, 5, 4}), in({1, 4})},
       .fn = [](X x) { return additive_scores(x[0], x[1], x[2]); }},
      // kNoBf16: the attention weights round to bf16 between its two products, which puts jumps of
      // up to 0.08 into its finite differences (key (1, 1, 1): numerical -0.018, analytical 0.065);
      // an older checker passed it in bf16 only by taking them for kinks
      {.op = "chunked_additive_attention", .variant = "masked", .inputs = {in({2, 3, 4}), in({2, 5, 4}), in({1, 4}), in({2, 5, 3}), mask({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 1, 5})},
       .fn = [](X x) { return chunked_additive_attention(x[0], x[1], x[2], x[3], x[4], 2); }, .flags = kNoBf16},
      {.op = "gru_layer", .variant = "forward_padded", .inputs = {in({3, 2, 6}), in({2, 2}), in({6, 2}), in({6}), mask({1, 1, 1, 1, 1, 0}, {3, 2})},
       .fn = [](X x) { return gru_layer(x[0], x[1], x[2], x[3], x[4], nn::Direction::forward); }},
      {.op = "gru_layer", .variant = "reverse_no_bias", .inputs = {in({3, 2, 6}), in({2, 2}), in({6, 2})},
       .fn = [](X x) { return gru_layer(x[0], x[1], x[2], {}, {}, nn::Direction::reverse); }},
  };
  return rows;
}

// ---------------------------------------------------------------------------------------------
// error rows: the bad call and a substring of the message it must throw

std::vector<ErrorCase> build_error_cases() {
  using K = ErrorKind;
  auto x23 = [] { return zeros({2, 3}, {.dtype = DType::f64}); };
  return {
      {"add", "broadcast_mismatch", [=] { add(x23(), zeros({4}, {.dtype = DType::f64})); },
       "add: shapes (2, 3) and (4,) cannot be broadcast together", K::shape},
      {"sub", "broadcast_mismatch", [=] { sub(x23(), zeros({3, 3}, {.dtype = DType::f64})); },
       "sub: shapes (2, 3) and (3, 3) cannot be broadcast together", K::shape},
      {"mul", "dtype_mismatch", [=] { mul(x23(), zeros({2, 3})); }, "mul: dtype mismatch: float64 (2, 3) and float32 (2, 3)",
       K::dtype},
      {"div", "dtype_mismatch", [=] { div(x23(), zeros({2, 3}, {.dtype = DType::i64})); }, "div: dtype mismatch", K::dtype},
      {"pow", "integer_base", [] { pow(zeros({2}, {.dtype = DType::i64}), 2.0); },
       "pow: expected a floating tensor (float32 or float64), got int64 (2,)", K::dtype},
      {"exp", "integer", [] { exp(zeros({2}, {.dtype = DType::i64})); }, "exp: expected a floating tensor", K::dtype},
      {"log", "bool", [] { log(zeros({2}, {.dtype = DType::b8})); }, "log: expected a floating tensor", K::dtype},
      {"tanh", "integer", [] { tanh(zeros({3}, {.dtype = DType::i64})); },
       "tanh: expected a floating tensor (float32 or float64), got int64 (3,)", K::dtype},
      {"sigmoid", "integer", [] { sigmoid(zeros({3}, {.dtype = DType::i64})); }, "sigmoid: expected a floating tensor",
       K::dtype},
      {"maximum", "broadcast_mismatch", [=] { maximum(x23(), zeros({2}, {.dtype = DType::f64})); },
       "maximum: shapes (2, 3) and (2,) cannot be broadcast together", K::shape},
      {"minimum", "dtype_mismatch", [=] { minimum(x23(), zeros({2, 3})); }, "minimum: dtype mismatch: float64 (2, 3) and float32",
       K::dtype},
      {"log1p", "integer", [] { log1p(zeros({2}, {.dtype = DType::i64})); }, "log1p: expected a floating tensor", K::dtype},
      {"expm1", "bool", [] { expm1(zeros({2}, {.dtype = DType::b8})); }, "expm1: expected a floating tensor", K::dtype},
      {"erf", "integer", [] { erf(zeros({2}, {.dtype = DType::i64})); }, "erf: expected a floating tensor", K::dtype},
      {"log_sigmoid", "integer", [] { log_sigmoid(zeros({2}, {.dtype = DType::i64})); },
       "log_sigmoid: expected a floating tensor", K::dtype},
      {"silu", "undefined", [] { silu(Tensor()); }, "silu: input is an undefined tensor", K::any},
      {"hardsigmoid", "integer", [] { hardsigmoid(zeros({2}, {.dtype = DType::i64})); },
       "hardsigmoid: expected a floating tensor", K::dtype},
      {"hardswish", "integer", [] { hardswish(zeros({2}, {.dtype = DType::i64})); },
       "hardswish: expected a floating tensor", K::dtype},
      {"mish", "undefined", [] { mish(Tensor()); }, "mish: input is an undefined tensor", K::any},
      {"softplus", "beta", [=] { softplus(x23(), 0.0); }, "softplus: beta = 0 must be positive", K::value},
      {"gelu", "integer", [] { gelu(zeros({2}, {.dtype = DType::i64})); }, "gelu: expected a floating tensor", K::dtype},
      {"logical_and", "float_operand", [=] { zeros({2, 3}, {.dtype = DType::b8}) & x23(); }, "logical_and: dtype mismatch",
       K::dtype},
      {"logical_not", "float", [=] { ~x23(); }, "logical_not: expected bool, got float64 (2, 3)", K::dtype},
      {"logical_xor", "float", [=] { x23() ^ x23(); }, "logical_xor: expected bool, got float64", K::dtype},
      {"gt", "broadcast_mismatch", [=] { (void)(x23() > zeros({4}, {.dtype = DType::f64})); },
       "gt: shapes (2, 3) and (4,) cannot be broadcast together", K::shape},
      {"relu", "undefined", [] { relu(Tensor()); }, "relu: input is an undefined tensor", K::any},
      {"clamp", "min_above_max", [=] { clamp(x23(), 1.0, -1.0); }, "clamp: min 1 is greater than max -1", K::value},
      {"where", "condition_not_bool", [=] { where(x23(), x23(), x23()); }, "where: condition must be bool, got float64",
       K::dtype},
      {"where", "broadcast_mismatch",
       [=] { where(zeros({4}, {.dtype = DType::b8}), x23(), x23()); }, "where: shapes (4,) and (2, 3) cannot be broadcast",
       K::shape},
      {"masked_fill", "mask_not_bool", [=] { masked_fill(x23(), x23(), 0.0); }, "masked_fill: mask must be bool", K::dtype},
      {"masked_fill", "mask_grows_input", [] {
         masked_fill(zeros({3}, {.dtype = DType::f64}), zeros({2, 3}, {.dtype = DType::b8}), 0.0);
       }, "masked_fill: mask (2, 3) must broadcast to the input's shape (3,)", K::shape},
      {"sum", "repeated_dim", [=] { sum(x23(), {0, -2}); }, "sum: dimension -2 appears twice in (0, -2)", K::value},
      {"sum", "dim_out_of_range", [=] { sum(x23(), {2}); }, "sum: dimension 2 out of range for a tensor of 2 dimensions",
       K::index},
      {"sum", "bool", [] { sum(zeros({2}, {.dtype = DType::b8})); }, "sum: cannot sum a bool tensor", K::dtype},
      {"mean", "integer", [] { mean(zeros({2}, {.dtype = DType::i64})); }, "mean: expected a floating tensor", K::dtype},
      {"max", "dim_out_of_range", [=] { max(x23(), 3); }, "max: dimension 3 out of range", K::index},
      {"max", "empty", [] { max(zeros({0}, {.dtype = DType::f64})); }, "max: cannot reduce an empty tensor (0,)",
       K::shape},
      {"argmax", "empty", [] { argmax(zeros({0, 2}, {.dtype = DType::f64}), 0); },
       "argmax: cannot reduce an empty tensor (0, 2)", K::shape},
      {"logsumexp", "integer", [] { logsumexp(zeros({2}, {.dtype = DType::i64}), {0}); },
       "logsumexp: expected a floating tensor", K::dtype},
      {"amax", "dim_out_of_range", [=] { amax(x23(), {2}); }, "amax: dimension 2 out of range", K::index},
      {"amin", "bool", [] { amin(zeros({2}, {.dtype = DType::b8}), {0}); }, "amin: expected a numeric tensor, got bool",
       K::dtype},
      {"min", "dim_out_of_range", [=] { min(x23(), -3); }, "min: dimension -3 out of range", K::index},
      {"sort", "dim_out_of_range", [=] { sort(x23(), 2); }, "sort: dimension 2 out of range", K::index},
      {"layer_norm", "normalized_shape_not_trailing", [=] { layer_norm(x23(), {2}); },
       "layer_norm: normalized_shape (2,) must be the last dimensions of the input (2, 3)", K::shape},
      {"layer_norm", "weight_shape", [=] { layer_norm(x23(), {3}, zeros({4}, {.dtype = DType::f64})); },
       "layer_norm: weight (4,) must have the normalized_shape (3,) (input (2, 3))", K::shape},
      {"layer_norm", "bias_dtype", [=] { layer_norm(x23(), {3}, {}, zeros({3})); },
       "layer_norm: dtype mismatch: float64 (2, 3) and float32 (3,)", K::dtype},
      {"layer_norm", "integer", [] { layer_norm(zeros({2}, {.dtype = DType::i64}), {2}); },
       "layer_norm: expected a floating tensor", K::dtype},
      {"layer_norm", "negative_eps", [=] { layer_norm(x23(), {3}, {}, {}, -1.0); },
       "layer_norm: eps = -1 must be finite and >= 0", K::value},
      {"sum_to", "larger_target", [=] { sum_to(x23(), {4, 2, 3}); }, "sum_to: cannot reduce (2, 3) to the larger shape",
       K::shape},
      {"topk", "k_too_large", [=] { topk(x23(), 4); }, "topk: k = 4 out of range for dimension -1 of size 3", K::value},
      {"matmul", "inner_mismatch", [=] { matmul(x23(), zeros({4, 5}, {.dtype = DType::f64})); },
       "matmul: inner dimensions differ: (2, 3) @ (4, 5)", K::shape},
      {"matmul", "vector_mismatch",
       [] { matmul(zeros({3}, {.dtype = DType::f64}), zeros({4}, {.dtype = DType::f64})); },
       "matmul: inner dimensions differ: (3,) @ (4,)", K::shape},
      {"matmul", "batch_mismatch",
       [] { matmul(zeros({2, 3, 4}, {.dtype = DType::f64}), zeros({3, 4, 5}, {.dtype = DType::f64})); },
       "matmul: batch dimensions (2,) and (3,) cannot be broadcast together: (2, 3, 4) @ (3, 4, 5)", K::shape},
      {"matmul", "scalar_operand", [=] { matmul(zeros({}, {.dtype = DType::f64}), x23()); },
       "matmul: both operands need at least one dimension", K::shape},
      {"matmul", "integer", [] { matmul(zeros({2, 2}, {.dtype = DType::i64}), zeros({2, 2}, {.dtype = DType::i64})); },
       "matmul: expected a floating tensor", K::dtype},
      {"bmm", "not_3d", [=] { bmm(x23(), zeros({3, 2}, {.dtype = DType::f64})); },
       "bmm: expected 3-D tensors, got (2, 3) and (3, 2)", K::shape},
      {"bmm", "batch_mismatch",
       [] { bmm(zeros({2, 2, 3}, {.dtype = DType::f64}), zeros({3, 3, 2}, {.dtype = DType::f64})); },
       "bmm: batch sizes differ: (2, 2, 3) and (3, 3, 2)", K::shape},
      {"linear", "in_features", [=] { linear(x23(), zeros({4, 2}, {.dtype = DType::f64})); },
       "linear: input feature size 3 != in_features 2 (x: (2, 3), weight: (4, 2))", K::shape},
      {"linear", "bias_shape",
       [=] { linear(x23(), zeros({4, 3}, {.dtype = DType::f64}), zeros({3}, {.dtype = DType::f64})); },
       "linear: bias shape (3,) != (4,)", K::shape},
      {"softmax", "dim_out_of_range", [=] { softmax(x23(), 2); }, "softmax: dimension 2 out of range", K::index},
      {"log_softmax", "integer", [] { log_softmax(zeros({2}, {.dtype = DType::i64}), 0); },
       "log_softmax: expected a floating tensor", K::dtype},
      {"view", "element_count", [=] { view(x23(), {4}); }, "view: shape (4,) is invalid for input of size 6", K::shape},
      {"view", "noncontiguous", [=] { view(x23().t(), {6}); },
       "view: size (6,) is not compatible with input (3, 2) of strides (1, 3)", K::shape},
      {"reshape", "element_count", [=] { reshape(x23(), {4, 2}); },
       "reshape: shape (4, 2) is invalid for input of size 6 (shape (2, 3))", K::shape},
      {"reshape", "two_inferred", [=] { reshape(x23(), {-1, -1}); }, "reshape: only one dimension can be -1", K::shape},
      {"permute", "wrong_rank", [=] { permute(x23(), {0}); }, "permute: got 1 dims (0,) for a tensor of shape (2, 3)",
       K::shape},
      {"permute", "repeated", [=] { permute(x23(), {1, 1}); }, "permute: dimension 1 repeated in (1, 1)", K::shape},
      {"transpose", "dim_out_of_range", [=] { transpose(x23(), 0, 2); }, "transpose: dimension 2 out of range", K::index},
      {"squeeze", "dim_out_of_range", [=] { squeeze(x23(), -3); }, "squeeze: dimension -3 out of range", K::index},
      {"unsqueeze", "dim_out_of_range", [=] { unsqueeze(x23(), 4); }, "unsqueeze: dimension 4 out of range", K::index},
      {"expand", "incompatible", [=] { expand(x23(), {2, 4}); },
       "expand: the expanded size 4 must match the existing size 3 at dimension 1", K::shape},
      {"expand", "fewer_dims", [=] { expand(x23(), {6}); }, "expand: target (6,) has fewer dims than the input (2, 3)",
       K::shape},
      {"narrow", "past_end", [=] { narrow(x23(), 1, 2, 2); },
       "narrow: start 2 + length 2 exceeds dimension 1 of size 3 (shape (2, 3))", K::index},
      {"slice", "zero_step", [=] { slice(x23(), 1, 0, 3, 0); }, "slice: step must be positive, got 0", K::value},
      {"select", "index_out_of_range", [=] { select(x23(), 0, 2); },
       "select: index 2 is out of range for dimension 0 of size 2 (shape (2, 3))", K::index},
      {"cat", "empty_list", [] { cat({}); }, "cat: expected a non-empty list of tensors", K::value},
      {"cat", "size_mismatch", [=] { cat({x23(), zeros({2, 2}, {.dtype = DType::f64})}, 0); },
       "cat: sizes must match except in dimension 0: tensor 0 (2, 3) vs tensor 1 (2, 2)", K::shape},
      {"cat", "dtype_mismatch", [=] { cat({x23(), zeros({2, 3})}); }, "cat: dtype mismatch: float64 (2, 3) and float32",
       K::dtype},
      {"stack", "shape_mismatch", [=] { stack({x23(), zeros({3, 2}, {.dtype = DType::f64})}); },
       "stack: all tensors must have the same shape: tensor 0 (2, 3) vs tensor 1 (3, 2)", K::shape},
      {"split", "zero_size", [=] { split(x23(), 0); }, "split: split_size must be positive, got 0", K::value},
      {"chunk", "zero_chunks", [=] { chunk(x23(), 0); }, "chunk: number of chunks must be positive, got 0", K::value},
      // cuda:99 is missing in every build: CPU-only, CUDA without a GPU, or with fewer GPUs
      {"to", "missing_device", [=] { x23().to(Device::cuda(99)); }, "to: cuda:99 is not available", K::device},
      {"index_select", "out_of_range", [] { index_select(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({1, 3})); },
       "index_select: index 3 is out of range for dimension 0 of size 3", K::index},
      {"index_select", "negative", [] { index_select(zeros({3, 2}, {.dtype = DType::f64}), 1, i64({-1})); },
       "index_select: index -1 is out of range for dimension 1 of size 2", K::index},
      {"index_select", "float_index", [] { index_select(zeros({3, 2}, {.dtype = DType::f64}), 0, f64({1})); },
       "index_select: indices must be int64, got float64 (1,)", K::dtype},
      {"index_add", "source_shape", [] {
         index_add(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({0, 1}), zeros({3, 2}, {.dtype = DType::f64}));
       }, "index_add: source shape (3, 2) != (2, 2) (input (3, 2), 2 indices)", K::shape},
      {"index_add", "out_of_range", [] {
         index_add(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({5}), zeros({1, 2}, {.dtype = DType::f64}));
       }, "index_add: index 5 is out of range for dimension 0 of size 3", K::index},
      {"gather", "rank_mismatch", [] { gather(zeros({3, 2}, {.dtype = DType::f64}), 1, i64({0, 1})); },
       "gather: index (2,) must have as many dims as the input (3, 2)", K::shape},
      {"gather", "out_of_range", [] { gather(zeros({3, 2}, {.dtype = DType::f64}), 1, i64({0, 2}, {1, 2})); },
       "gather: index 2 is out of range for dimension 1 of size 2", K::index},
      {"scatter_add", "index_source_shape", [] {
         scatter_add(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({0, 1}, {1, 2}), zeros({2, 2}, {.dtype = DType::f64}));
       }, "scatter_add: index (1, 2) and source (2, 2) must have the same shape", K::shape},
      {"scatter_add", "out_of_range", [] {
         scatter_add(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({0, 3}, {1, 2}), zeros({1, 2}, {.dtype = DType::f64}));
       }, "scatter_add: index 3 is out of range for dimension 0 of size 3", K::index},
      {"scatter_add", "index_larger_than_input", [] {
         scatter_add(zeros({3, 2}, {.dtype = DType::f64}), 0, i64({0, 1, 2}, {1, 3}), zeros({1, 3}, {.dtype = DType::f64}));
       }, "scatter_add: index (1, 3) is larger than the input (3, 2) in dimension 1", K::shape},
      {"repeat_interleave", "negative", [=] { repeat_interleave(x23(), -1, 0); },
       "repeat_interleave: repeats must not be negative, got -1", K::value},
      {"repeat_interleave", "negative_in_tensor", [=] { repeat_interleave(x23(), i64({1, -2}), 0); },
       "repeat_interleave: repeats must not be negative, got -2", K::value},
      {"repeat_interleave", "count_mismatch", [=] { repeat_interleave(x23(), i64({1, 2}), 1); },
       "repeat_interleave: repeats (2,) must hold one count or one per element of dimension 1 (size 3)", K::shape},
      {"repeat_interleave", "float_repeats", [=] { repeat_interleave(x23(), f64({1, 2}), 0); },
       "repeat_interleave: repeats must be int64, got float64", K::dtype},
      {"repeat_interleave", "dim_out_of_range", [=] { repeat_interleave(x23(), 2, 2); },
       "repeat_interleave: dimension 2 out of range", K::index},
      {"embedding", "id_out_of_range", [] { embedding(zeros({5, 3}, {.dtype = DType::f64}), i64({1, 7})); },
       "embedding: id 7 is out of range for a table of 5 rows", K::index},
      {"embedding", "negative_id", [] { embedding(zeros({5, 3}, {.dtype = DType::f64}), i64({-1})); },
       "embedding: id -1 is out of range for a table of 5 rows", K::index},
      {"embedding", "float_ids", [] { embedding(zeros({5, 3}, {.dtype = DType::f64}), f64({1})); },
       "embedding: ids must be int64, got float64 (1,)", K::dtype},
      {"embedding", "weight_rank", [] { embedding(zeros({5}, {.dtype = DType::f64}), i64({1})); },
       "embedding: weight must be 2-D (num_embeddings, dim), got (5,)", K::shape},
      {"dropout", "probability", [=] { dropout(x23(), 1.5); }, "dropout: probability p = 1.5 not in [0, 1]", K::value},
      {"dropout", "integer", [] { dropout(zeros({2}, {.dtype = DType::i64}), 0.5); }, "dropout: expected a floating tensor",
       K::dtype},
      {"add_", "leaf_requires_grad", [] {
         Tensor w = zeros({2}, {.dtype = DType::f64, .requires_grad = true});
         w.add_(ones({2}, {.dtype = DType::f64}));
       }, "add_: a leaf tensor that requires grad (shape (2,)) is used in an in-place operation", K::any},
      {"copy_", "broadcast_mismatch", [=] { x23().copy_(zeros({4}, {.dtype = DType::f64})); },
       "copy_: shapes (2, 3) and (4,) cannot be broadcast together", K::shape},
      {"masked_softmax", "length_out_of_range",
       [] { nn::masked_softmax(zeros({2, 3}, {.dtype = DType::f64}), from_vector<int64_t>({1, 4}, {2}, {.dtype = DType::i64})); },
       "masked_softmax: lengths[1] = 4 not in [0, 3]", K::value},
      {"cross_entropy", "targets_mismatch",
       [] { nn::cross_entropy(zeros({4, 7}, {.dtype = DType::f64}), zeros({3}, {.dtype = DType::i64})); },
       "cross_entropy", K::shape},
      {"cross_entropy", "pytorch_layout_without_class_dim",
       [] { nn::cross_entropy(zeros({2, 5, 3}, {.dtype = DType::f64}), zeros({2, 3}, {.dtype = DType::i64})); },
       "cross_entropy: targets (2, 3) match PyTorch's (N, C, d1, ...) layout of logits (2, 5, 3); pass class_dim = 1",
       K::shape},
      {"cross_entropy", "class_dim_out_of_range",
       [] { nn::cross_entropy(zeros({2, 5}, {.dtype = DType::f64}), zeros({2}, {.dtype = DType::i64}), {.class_dim = 2}); },
       "cross_entropy: dimension 2 out of range", K::index},
      {"cross_entropy", "pytorch_layout_targets_mismatch",
       [] { nn::cross_entropy(zeros({2, 5, 3}, {.dtype = DType::f64}), zeros({2, 5}, {.dtype = DType::i64}), {.class_dim = 1}); },
       "cross_entropy: targets (2, 5) must match logits (2, 5, 3) without their class dimension 1: (2, 3)", K::shape},
      {"additive_scores", "hidden_mismatch",
       [] { additive_scores(zeros({2, 3, 4}), zeros({2, 5, 3}), zeros({1, 4})); },
       "additive_scores: expected projected queries (B, Q, A), keys (B, K, A) and w_v (1, A)", K::shape},
      {"chunked_additive_attention", "bad_chunk",
       [] { chunked_additive_attention(zeros({2, 3, 4}), zeros({2, 5, 4}), zeros({1, 4}), zeros({2, 5, 3}), {}, 0); },
       "chunked_additive_attention: chunk_size = 0 must be positive", K::value},
      {"gru_layer", "hidden_mismatch",
       [] { gru_layer(zeros({3, 2, 6}), zeros({2, 3}), zeros({6, 2}), {}, {}, nn::Direction::forward); },
       "gru_layer", K::shape},
      {"gru_layer", "keep_mask_transposed",  // the mask is (T, B), time-major as xp
       [] {
         gru_layer(zeros({3, 2, 6}), zeros({2, 2}), zeros({6, 2}), {}, zeros({2, 3}, {.dtype = DType::b8}),
                   nn::Direction::forward);
       },
       "gru_layer: keep must be bool (T, B) = (3, 2), got (2, 3)", K::shape},
  };
}

// ---------------------------------------------------------------------------------------------
// golden rows for the non-differentiable ops

std::vector<GoldenCase> build_golden_cases() {
  std::vector<double> all_true(1000, 1.0);
  return {
      {"eq", "tensor", [] { return eq(f64({1, 2, 3}), f64({1, 0, 3})); }, {3}, DType::b8, {1, 0, 1}},
      {"ne", "scalar", [] { return ne(f64({1, 2, 3}), 2.0); }, {3}, DType::b8, {1, 0, 1}},
      // (3, 1) vs (1, 2) broadcast to (3, 2): row r compares r + 1 with 2
      {"lt", "broadcast", [] { return lt(f64({1, 2, 3}, {3, 1}), f64({2, 2}, {1, 2})); }, {3, 2}, DType::b8,
       {1, 1, 0, 0, 0, 0}},
      {"le", "scalar", [] { return le(f64({1, 2, 3}), 2.0); }, {3}, DType::b8, {1, 1, 0}},
      {"gt", "integer", [] { return gt(i64({-1, 0, 5}), i64({0, 0, 0})); }, {3}, DType::b8, {0, 0, 1}},
      {"ge", "nan_is_false", [] { return ge(f64({kNaN, 1}), 0.0); }, {2}, DType::b8, {0, 1}},
      {"logical_not", "", [] { return logical_not(b8({1, 0})); }, {2}, DType::b8, {0, 1}},
      {"logical_and", "", [] { return logical_and(b8({1, 1, 0, 0}), b8({1, 0, 1, 0})); }, {4}, DType::b8, {1, 0, 0, 0}},
      {"logical_or", "", [] { return logical_or(b8({1, 1, 0, 0}), b8({1, 0, 1, 0})); }, {4}, DType::b8, {1, 1, 1, 0}},
      {"isfinite", "", [] { return isfinite(f64({1, kInf, -kInf, kNaN})); }, {4}, DType::b8, {1, 0, 0, 0}},
      {"argmax", "ties_first", [] { return argmax(f64({1, 3, 3, 2}), 0); }, {}, DType::i64, {1}},
      {"argmax", "dim1_keepdim", [] { return argmax(f64({1, 5, 2, 7, 0, 7}, {2, 3}), 1, true); }, {2, 1}, DType::i64,
       {1, 0}},
      {"argmin", "ties_first", [] { return argmin(f64({2, 1, 1}), 0); }, {}, DType::i64, {1}},
      {"amax", "dim0", [] { return amax(f64({1, 5, 4, 2}, {2, 2}), {0}); }, {2}, DType::f64, {4, 5}},
      {"max", "all_value", [] { return max(f64({1, 7, 3})); }, {}, DType::f64, {7}},
      {"min", "dim_value", [] { return min(f64({1, 7, 3, -2}, {2, 2}), 1).values; }, {2}, DType::f64, {1, -2}},
      {"topk", "largest_values", [] { return topk(f64({1, 5, 3, 5, 2}), 2).first; }, {2}, DType::f64, {5, 5}},
      {"topk", "largest_indices_ties_first", [] { return topk(f64({1, 5, 3, 5, 2}), 2).second; }, {2}, DType::i64, {1, 3}},
      {"topk", "smallest", [] { return topk(f64({1, 5, 3, 5, 2}), 2, -1, false).second; }, {2}, DType::i64, {0, 4}},
      // dim 0 of [[1, 9], [8, 2], [5, 5]]: column 0 -> 8 (row 1), 5 (row 2); column 1 -> 9 (row 0), 5 (row 2)
      {"topk", "dim0", [] { return topk(f64({1, 9, 8, 2, 5, 5}, {3, 2}), 2, 0).second; }, {2, 2}, DType::i64,
       {1, 0, 2, 2}},
      {"max", "dim_indices", [] { return max(f64({1, 7, 7, -2}, {2, 2}), 1).indices; }, {2}, DType::i64, {1, 0}},
      {"min", "dim_indices_keepdim", [] { return min(f64({1, 7, 3, -2}, {2, 2}), 0, true).indices; }, {1, 2}, DType::i64,
       {0, 1}},
      {"sort", "ascending_values", [] { return sort(f64({3, 1, 2, 1})).values; }, {4}, DType::f64, {1, 1, 2, 3}},
      // ties keep their input order: the two 1s come from positions 1 and 3
      {"sort", "ascending_indices_stable", [] { return sort(f64({3, 1, 2, 1})).indices; }, {4}, DType::i64, {1, 3, 2, 0}},
      {"sort", "descending_dim0", [] { return sort(f64({1, 9, 8, 2, 5, 5}, {3, 2}), 0, true).indices; }, {3, 2},
       DType::i64, {1, 0, 2, 2, 0, 1}},
      {"maximum", "nan_propagates", [] { return maximum(f64({kNaN, 1, 2}), f64({0, kNaN, 1})); }, {3}, DType::f64,
       {kNaN, kNaN, 2}},
      {"minimum", "integer", [] { return minimum(i64({-1, 5, 2}), i64({0, 0, 2})); }, {3}, DType::i64, {-1, 0, 2}},
      {"amin", "dim1", [] { return amin(f64({1, 5, 4, 2}, {2, 2}), {1}); }, {2}, DType::f64, {1, 2}},
      {"repeat_interleave", "int", [] { return repeat_interleave(i64({4, 5}), 2); }, {4}, DType::i64, {4, 4, 5, 5}},
      {"repeat_interleave", "tensor_dim1", [] { return repeat_interleave(f64({1, 2, 3, 4}, {2, 2}), i64({0, 2}), 1); },
       {2, 2}, DType::f64, {2, 2, 4, 4}},
      {"logical_xor", "", [] { return logical_xor(b8({1, 1, 0, 0}), b8({1, 0, 1, 0})); }, {4}, DType::b8, {0, 1, 1, 0}},
      {"operators", "compare_scalar_left", [] { return 2.0 < f64({1, 2, 3}); }, {3}, DType::b8, {0, 0, 1}},
      {"operators", "compare_broadcast", [] { return f64({1, 2, 3}, {3, 1}) >= f64({2, 2}, {1, 2}); }, {3, 2}, DType::b8,
       {0, 0, 1, 1, 1, 1}},
      {"operators", "equal_tensors", [] { return f64({1, 2, 3}) == f64({1, 0, 3}); }, {3}, DType::b8, {1, 0, 1}},
      {"operators", "logic", [] {
         Tensor x = f64({-1, 0.5, 2, 3});
         return (~(x > 0) | (x == 3.0)) ^ ((x != 2.0) & (x >= -1.0));
       }, {4}, DType::b8, {0, 1, 0, 0}},
      {"to", "int64_truncates", [] { return to_dtype(f64({3.7, -3.7, 0.2}), DType::i64); }, {3}, DType::i64, {3, -3, 0}},
      {"to", "bool", [] { return to_dtype(f64({0, -0.5, 2}), DType::b8); }, {3}, DType::b8, {0, 1, 1}},
      {"sum", "int64", [] { return sum(i64({1, 2, 3})); }, {}, DType::i64, {6}},
      {"bernoulli_mask", "values_are_0_or_inverse_keep",
       [] {
         manual_seed(3);
         Tensor m = bernoulli_mask({1000}, 0.75, {.dtype = DType::f64});
         return logical_or(eq(m, 0.0), eq(m, 1.0 / 0.75));
       },
       {1000}, DType::b8, all_true},
      {"dropout", "eval_is_identity", [] { return dropout(f64({1, 2}), 0.5, false); }, {2}, DType::f64, {1, 2}},
  };
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> rows = build_op_cases();
  return rows;
}

const std::vector<ErrorCase>& error_cases() {
  static const std::vector<ErrorCase> rows = build_error_cases();
  return rows;
}

const std::vector<GoldenCase>& golden_cases() {
  static const std::vector<GoldenCase> rows = build_golden_cases();
  return rows;
}

std::vector<std::string> op_names() { return builtin_registry().op_names(); }

const OpCaseRegistry& builtin_registry() {
  static const OpCaseRegistry registry = [] {
    OpCaseRegistry r;
    for (const OpCase& row : op_cases()) r.add(row);
    for (const ErrorCase& row : error_cases()) r.add(row);
    for (const GoldenCase& row : golden_cases()) r.add(row);
    return r;
  }();
  return registry;
}

}  // namespace seqgrad::op_cases
