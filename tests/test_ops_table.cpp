// The op table (tools/op_cases.h) as tests: float64 gradcheck (and gradgradcheck) per row, error
// rows with CHECK_THROWS_WITH_AS, golden rows; plus tests of gradcheck itself on broken ops.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "core/autograd.h"
#include "ops/ops.h"
#include "tools/op_cases.h"
#include "tools/gradcheck.h"

using namespace seqgrad;
namespace oc = seqgrad::op_cases;

TEST_CASE("op table: float64 gradcheck and gradgradcheck of every row") {
  for (const oc::OpCase& row : oc::op_cases()) {
    SUBCASE(row.name().c_str()) {
      GradcheckReport first = gradcheck(row.fn, oc::make_inputs(row), oc::options_for(row));
      INFO(first.format());
      CHECK(first.ok());
      if (row.gradgrad()) {
        GradcheckReport second = gradgradcheck(row.fn, oc::make_inputs(row), oc::options_for(row));
        INFO(second.format());
        CHECK(second.ok());
      }
    }
  }
}

TEST_CASE("op table: error rows throw the right Error with the expected message") {
  for (const oc::ErrorCase& row : oc::error_cases()) {
    SUBCASE(row.name().c_str()) {
      doctest::Contains expected(row.expected.c_str());
      switch (row.kind) {
        case oc::ErrorKind::any: CHECK_THROWS_WITH_AS(row.call(), expected, Error); break;
        case oc::ErrorKind::shape: CHECK_THROWS_WITH_AS(row.call(), expected, ShapeError); break;
        case oc::ErrorKind::dtype: CHECK_THROWS_WITH_AS(row.call(), expected, DTypeError); break;
        case oc::ErrorKind::index: CHECK_THROWS_WITH_AS(row.call(), expected, IndexError); break;
        case oc::ErrorKind::value: CHECK_THROWS_WITH_AS(row.call(), expected, ValueError); break;
        case oc::ErrorKind::device: CHECK_THROWS_WITH_AS(row.call(), expected, DeviceError); break;
      }
    }
  }
}

TEST_CASE("op table: golden rows of the non-differentiable ops") {
  for (const oc::GoldenCase& row : oc::golden_cases()) {
    SUBCASE(row.name().c_str()) { CHECK(oc::check_golden_case(row) == ""); }
  }
}

TEST_CASE("op table: every op in ops/ops.h has rows") {
  // The functions declared in ops/ops.h (operators are covered through add/sub/mul/div rows).
  const char* declared[] = {
      "add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "clamp",
      "where", "masked_fill", "tanh_backward", "sigmoid_backward", "relu_backward", "eq", "ne", "lt", "le", "gt", "ge",
      "logical_not", "logical_and", "logical_or", "isfinite", "sum", "mean", "max", "min", "amax", "argmax",
      "argmin", "logsumexp", "sum_to", "topk", "matmul", "bmm", "linear", "softmax", "log_softmax", "view",
      "reshape", "permute", "transpose", "squeeze", "unsqueeze", "expand", "narrow", "slice", "select",
      "contiguous", "clone", "to", "cat", "stack", "split", "chunk", "slice_scatter", "index_select", "index_add",
      "gather", "scatter_add", "embedding", "dropout", "bernoulli_mask"};
  std::vector<std::string> names = oc::op_names();
  for (const char* op : declared) {
    INFO(op);
    CHECK(std::find(names.begin(), names.end(), op) != names.end());
  }
  // Every differentiable op also has a gradcheck row and an error row.
  auto has_gradcheck = [](const std::string& op) {
    return std::any_of(oc::op_cases().begin(), oc::op_cases().end(), [&](const oc::OpCase& r) { return r.op == op; });
  };
  // ... and so does every nn-level op (nn/): masked softmax, cross-entropy, the additive energies,
  // the chunked attention and the fused GRU layer.
  for (const char* op : {"add", "matmul", "embedding", "softmax", "gather", "cat", "reshape", "dropout",
                         "masked_softmax", "cross_entropy", "additive_scores", "chunked_additive_attention",
                         "gru_layer"}) {
    INFO(op);
    CHECK(has_gradcheck(op));
    CHECK(std::any_of(oc::error_cases().begin(), oc::error_cases().end(),
                      [&](const oc::ErrorCase& r) { return r.op == op; }));
  }
}

TEST_CASE("op table: inputs are deterministic f64 leaves, non-contiguous where asked") {
  const oc::OpCase* row = nullptr;
  for (const oc::OpCase& r : oc::op_cases())
    if (r.name() == "add/noncontiguous") row = &r;
  REQUIRE(row != nullptr);
  std::vector<Tensor> a = oc::make_inputs(*row), b = oc::make_inputs(*row);
  REQUIRE(a.size() == 2);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].dtype() == DType::f64);
    CHECK(a[i].is_leaf());
    CHECK(a[i].requires_grad());
    CHECK_FALSE(a[i].is_contiguous());
    CHECK(a[i].shape() == Shape{3, 4});
    CHECK(a[i].to_vector<double>() == b[i].to_vector<double>());
  }
}

// ---- gradcheck on deliberately broken ops: it must fail, and say where

namespace {

// y = 3x with a wrong backward (2 dy instead of 3 dy) for elements past the first.
Tensor wrong_triple(const Tensor& x) {
  Tensor y = mul(x.detach(), 3.0);
  return record("wrong_triple", y, {x}, [](const Tensor& dy, Grads& g) {
    Tensor scale = ones_like(dy).mul_(2.0);
    NoGradGuard no_grad;
    scale.reshape({-1}).narrow(0, 0, 1).fill_(3.0);
    g.add(0, mul(dy, scale));
  });
}

}  // namespace

TEST_CASE("gradcheck: a wrong backward fails, naming the op, the input and the worst elements") {
  Tensor x = randn({2, 3}, {.dtype = DType::f64}).requires_grad_();
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return wrong_triple(in[0]); }, {x},
                                {.name = "wrong_triple"});
  CHECK_FALSE(r.ok());
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].failed_elements == 5);
  CHECK(r.inputs[0].worst.size() == 5);
  const GradcheckElement& worst = r.inputs[0].worst[0];
  CHECK(worst.analytical / worst.numerical == doctest::Approx(2.0 / 3.0).epsilon(1e-6));
  CHECK(worst.abs_err == doctest::Approx(std::abs(worst.analytical - worst.numerical)));
  std::string text = r.format();
  CHECK(text.find("gradcheck wrong_triple: FAILED") != std::string::npos);
  CHECK(text.find("input 0 (2, 3)") != std::string::npos);
  CHECK(text.find("5 of 6 gradient elements differ") != std::string::npos);
  CHECK(text.find("numerical") != std::string::npos);
}

TEST_CASE("gradcheck: a correct op passes with tiny errors and the report lists its elements") {
  Tensor a = randn({2, 3}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({3, 2}, {.dtype = DType::f64}).requires_grad_();
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return tanh(matmul(in[0], in[1])); }, {a, b},
                                {.name = "tanh_matmul"});
  INFO(r.format());
  CHECK(r.ok());
  REQUIRE(r.inputs.size() == 2);
  CHECK(r.inputs[1].input == 1);
  CHECK(r.inputs[1].worst.size() == 5);
  CHECK(r.max_abs_err() < 1e-8);
  CHECK(r.format().find("gradcheck tanh_matmul: ok") == 0);
}

TEST_CASE("gradcheck: a non-deterministic backward and a backward that ignores dy are caught") {
  Tensor x = randn({3}, {.dtype = DType::f64}).requires_grad_();
  SUBCASE("backward twice differs") {
    auto calls = std::make_shared<int>(0);
    GradcheckFn fn = [calls](const std::vector<Tensor>& in) {
      Tensor y = mul(in[0].detach(), 2.0);
      return record("flaky", y, {in[0]}, [calls](const Tensor& dy, Grads& g) {
        g.add(0, mul(dy, 2.0 + 1e-3 * (++*calls % 2)));
      });
    };
    GradcheckReport r = gradcheck(fn, {x}, {.atol = 1e-2, .name = "flaky"});
    CHECK_FALSE(r.ok());
    CHECK(r.format().find("a second backward gives a different gradient") != std::string::npos);
  }
  SUBCASE("zero upstream gradient gives a non-zero gradient") {
    GradcheckFn fn = [](const std::vector<Tensor>& in) {
      Tensor y = mul(in[0].detach(), 2.0);
      return record("biased", y, {in[0]}, [](const Tensor& dy, Grads& g) { g.add(0, add(mul(dy, 2.0), 1e-9)); });
    };
    GradcheckReport r = gradcheck(fn, {x}, {.name = "biased"});
    CHECK_FALSE(r.ok());
    CHECK(r.format().find("a zero upstream gradient gives a non-zero gradient") != std::string::npos);
  }
  SUBCASE("a backward that throws is reported, not propagated") {
    GradcheckFn fn = [](const std::vector<Tensor>& in) {
      Tensor y = mul(in[0].detach(), 2.0);
      return record("broken", y, {in[0]}, [](const Tensor&, Grads&) {
        throw Error("broken: backward not implemented");
      });
    };
    GradcheckReport r = gradcheck(fn, {x}, {.name = "broken"});
    CHECK_FALSE(r.ok());
    CHECK(r.format().find("broken: backward not implemented") != std::string::npos);
  }
}

TEST_CASE("gradcheck: refuses float32 unless asked, expanded inputs, and nothing to check") {
  Tensor x32 = randn({3}).requires_grad_();
  GradcheckFn square = [](const std::vector<Tensor>& in) { return mul(in[0], in[0]); };
  CHECK_THROWS_WITH_AS(gradcheck(square, {x32}), doctest::Contains("gradcheck fn: input 0 (shape (3,)) is float32"),
                       DTypeError);
  GradcheckReport r32 = gradcheck(square, {x32}, {.eps = 1e-2, .atol = 1e-2, .rtol = 1e-2, .allow_float32 = true});
  INFO(r32.format());
  CHECK(r32.ok());

  Tensor expanded = randn({1, 3}, {.dtype = DType::f64}).expand({2, 3});
  expanded.requires_grad_();
  CHECK_THROWS_WITH_AS(gradcheck(square, {expanded}), doctest::Contains("has elements that share memory"), ValueError);
  CHECK_THROWS_WITH_AS(gradcheck(square, {randn({2}, {.dtype = DType::f64})}), doctest::Contains("no input requires grad"),
                       ValueError);
}

TEST_CASE("gradcheck: inputs are restored after perturbation") {
  Tensor x = randn({2, 2}, {.dtype = DType::f64}).requires_grad_();
  std::vector<double> before = x.to_vector<double>();
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x});
  CHECK(r.ok());
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(x.grad().defined());  // gradcheck returns gradients instead of accumulating them
  NoGradGuard no_grad;                // and it records what it needs even when called without grad
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}).ok());
  CHECK(gradgradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}).ok());
}

TEST_CASE("gradgradcheck: catches a first-order gradient that is not differentiable correctly") {
  // y = x³ whose backward returns 3 x² dy computed from a detached x: first order is right, but the
  // gradient of the gradient (6 x dy) is missing.
  GradcheckFn cube = [](const std::vector<Tensor>& in) {
    Tensor y = pow(in[0].detach(), 3.0);
    return record("detached_cube", y, {in[0]}, [x = in[0].detach()](const Tensor& dy, Grads& g) {
      g.add(0, mul(dy, mul(pow(x, 2.0), 3.0)));
    });
  };
  Tensor x = tensor({0.5, -1.5, 2.0}, {.dtype = DType::f64}).requires_grad_();
  CHECK(gradcheck(cube, {x}, {.name = "detached_cube"}).ok());
  GradcheckReport second = gradgradcheck(cube, {x}, {.name = "detached_cube"});
  CHECK_FALSE(second.ok());
  CHECK(second.format().find("detached_cube (second order)") != std::string::npos);
}
