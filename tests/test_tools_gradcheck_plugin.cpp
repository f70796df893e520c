// A `seqgrad gradcheck --plugin` library, as an op author builds one: ops with custom backwards
// and their rows. Loaded by tests/test_tools_gradcheck.cpp and tests/test_tools_gradcheck_cli.py.
// "cubic_wrong" and "bias_wrong" (a broadcast weight's gradient not summed back: sum_to forgotten)
// are deliberately wrong, so the tests see plugin rows fail; "relu_at_zero" sits on a kink it
// declares, "relu_kink_undeclared" on one it does not (and so fails); "dropout" draws random numbers.
#include "core/autograd.h"
#include "ops/ops.h"
#include "tools/op_cases.h"

using namespace seqgrad;
using namespace seqgrad::op_cases;

namespace {

using X = const std::vector<Tensor>&;

// y = x³ + x;  dx = dy (3x² + 1)   (wrong: dy 3x², the + 1 term missing)
Tensor cubic(const Tensor& x, bool wrong) {
  SG_CHECK_DTYPE(is_floating(x.dtype()), "cubic: x must be floating, got {} {}", x.dtype(), x.shape());
  Tensor y;
  {
    NoGradGuard no_grad;
    y = add(pow(x, 3.0), x);
  }
  return record(wrong ? "cubic_wrong" : "cubic", y, {x}, [x = save(x), wrong](const Tensor& dy, Grads& g) {
    Tensor slope = mul(pow(x.get(), 2.0), 3.0);
    g.add(0, mul(dy, wrong ? slope : add(slope, 1.0)));
  });
}

// Two differentiable outputs from one backward: y = x w (rows scaled) and norm = Σ_j x_ij² per row.
//   dx = dy w + 2 x dnorm,   dw = Σ_i dy_ij x_ij
std::vector<Tensor> scaled_rows(const Tensor& x, const Tensor& w) {
  Tensor y, norm;
  {
    NoGradGuard no_grad;
    y = mul(x, w);                       // (B, H)
    norm = sum(mul(x, x), {-1}, true);   // (B, 1)
  }
  return record_outputs("scaled_rows", {y, norm}, {x, w}, [x = save(x), w = save(w)](std::span<const Tensor> dys, Grads& g) {
    if (dys[0].defined()) {
      g.add(0, mul(dys[0], w.get()));
      g.add(1, sum_to(mul(dys[0], x.get()), w.get().shape()));
    }
    if (dys[1].defined()) g.add(0, mul(mul(x.get(), 2.0), dys[1]));
  });
}

// y = x + b, b (H,) broadcast over x (B, H);  db = Σ_rows dy (the wrong one forgets sum_to)
Tensor add_bias(const Tensor& x, const Tensor& b, bool wrong) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = add(x, b);
  }
  return record(wrong ? "bias_wrong" : "bias", y, {x, b}, [shape = b.shape(), wrong](const Tensor& dy, Grads& g) {
    g.add(0, dy);
    g.add(1, wrong ? dy : sum_to(dy, shape));
  });
}

}  // namespace

SG_REGISTER_OP_CASES(registry) {
  registry.add(OpCase{.op = "cubic", .inputs = {in({3, 4})}, .fn = [](X x) { return cubic(x[0], false); },
                      .jacobian = Jacobian::elementwise()});
  registry.add(OpCase{.op = "cubic", .variant = "transposed", .inputs = {in({3, 4}, Layout::transposed)},
                      .fn = [](X x) { return cubic(x[0], false); }, .jacobian = Jacobian::elementwise()});
  registry.add(OpCase{.op = "scaled_rows", .inputs = {in({2, 3}), in({3})},
                      .outputs = [](X x) { return scaled_rows(x[0], x[1]); }});
  registry.add(OpCase{.op = "cubic_wrong", .inputs = {in({3})}, .fn = [](X x) { return cubic(x[0], true); },
                      .jacobian = Jacobian::elementwise()});
  registry.add(OpCase{.op = "bias_wrong", .inputs = {in({2, 3}), in({3})}, .fn = [](X x) { return add_bias(x[0], x[1], true); }});
  registry.add(OpCase{.op = "relu_at_zero", .inputs = {values({-1, 0, 2}, {3})}, .fn = [](X x) { return relu(x[0]); },
                      .kinks = {0.0}});
  registry.add(OpCase{.op = "relu_kink_undeclared", .inputs = {values({-1, 0, 2}, {3})},
                      .fn = [](X x) { return relu(x[0]); }});
  // kNoFloat32: the float32 kernel draws its mask from other numbers than the float64 one
  registry.add(OpCase{.op = "dropout", .inputs = {in({3, 4})}, .fn = [](X x) { return dropout(x[0], 0.3); },
                      .flags = kNoFloat32});
  registry.add(ErrorCase{"cubic", "integer", [] { cubic(zeros({2}, {.dtype = DType::i64}), false); },
                         "cubic: x must be floating, got int64 (2,)", ErrorKind::dtype});
  registry.add(GoldenCase{"cubic", "values", [] { return cubic(tensor({0, 1, 2}, {.dtype = DType::f64}), false); }, {3},
                          DType::f64, {0, 2, 10}});
}
