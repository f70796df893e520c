// The autograd engine: leaf accumulation, retain_graph, create_graph (second order), NoGradGuard,
// detach, autograd::grad, deep graphs, version counters, and the errors users hit most.
#include <doctest/doctest.h>

#include <pthread.h>

#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/autograd_hooks.h"
#include "ops/ops.h"
#include "tests/check_values.h"

using namespace seqgrad;

namespace {
constexpr TensorOptions kF64 = {.dtype = DType::f64};

Tensor leaf(std::initializer_list<double> v) { return tensor(v, kF64).requires_grad_(); }

using testing::check_values;
}  // namespace

TEST_CASE("leaf gradients accumulate across backward calls") {
  Tensor x = leaf({1, -2, 3});
  sum(mul(x, x)).backward();  // d(Σx²)/dx = 2x
  check_values(x.grad(), {2, -4, 6});
  sum(mul(x, x)).backward();  // a second graph: accumulates
  check_values(x.grad(), {4, -8, 12});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  sum(x).backward();
  check_values(x.grad(), {1, 1, 1});
}

TEST_CASE("an input used several times, and a diamond, get the summed gradient") {
  Tensor x = leaf({2});
  (mul(x, x) + x).sum().backward();  // d(x² + x) = 2x + 1 = 5
  check_values(x.grad(), {5});
  // a = 2x; b = 3a; c = 4a; d = b + c = 14x
  Tensor y = leaf({1.5});
  Tensor a = mul(y, 2.0);
  add(mul(a, 3.0), mul(a, 4.0)).sum().backward();
  check_values(y.grad(), {14});
  CHECK_FALSE(a.grad().defined());  // non-leaf gradients are not kept
}

TEST_CASE("retain_graph lets backward run twice; without it the second backward fails clearly") {
  Tensor x = leaf({1, 2});
  Tensor loss = sum(mul(exp(x), x));  // d/dx = e^x (1 + x)
  loss.backward({}, {.retain_graph = true});
  loss.backward();
  check_values(x.grad(), {2 * std::exp(1.0) * 2, 2 * std::exp(2.0) * 3});
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("trying to backward through the graph a second time"), Error);
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("pass retain_graph = true to the first backward()"), Error);
  // the error names the op whose saved tensors were freed
  Tensor y = leaf({1});
  Tensor t = tanh(y).sum();
  t.backward();
  CHECK_THROWS_WITH_AS(t.backward(), doctest::Contains("sum: trying to backward through the graph a second time"),
                       Error);
}

TEST_CASE("create_graph: second derivatives of x³ and tanh") {
  Tensor x = leaf({0.5, -1.0, 2.0});
  // y = Σ x³: dy/dx = 3x², d²y/dx² = 6x, d³y/dx³ = 6
  for (int form = 0; form < 2; ++form) {
    CAPTURE(form);
    Tensor y = form == 0 ? sum(pow(x, 3.0)) : sum(mul(mul(x, x), x));
    Tensor g = autograd::grad({y}, {x}, {}, {.create_graph = true})[0];
    check_values(g, {0.75, 3.0, 12.0});
    CHECK(g.requires_grad());
    Tensor gg = autograd::grad({sum(g)}, {x}, {}, {.create_graph = true})[0];
    check_values(gg, {3.0, -6.0, 12.0});
    Tensor ggg = autograd::grad({sum(gg)}, {x})[0];
    check_values(ggg, {6, 6, 6});
  }
  // tanh: t' = 1 - t², t'' = -2 t (1 - t²)
  Tensor z = leaf({0.3, -1.2});
  Tensor g = autograd::grad({sum(tanh(z))}, {z}, {}, {.create_graph = true})[0];
  Tensor gg = autograd::grad({sum(g)}, {z})[0];
  std::vector<double> expected_g, expected_gg;
  for (double v : {0.3, -1.2}) {
    double t = std::tanh(v);
    expected_g.push_back(1 - t * t);
    expected_gg.push_back(-2 * t * (1 - t * t));
  }
  check_values(g, expected_g);
  check_values(gg, expected_gg);
  // backward(create_graph) leaves a .grad that is itself differentiable
  Tensor w = leaf({3});
  sum(pow(w, 3.0)).backward({}, {.create_graph = true});
  Tensor wg = w.grad();
  CHECK(wg.requires_grad());
  check_values(autograd::grad({sum(wg)}, {w})[0], {18});  // 6w
  // w.grad's graph refers back to w: a reference cycle (as in PyTorch, which warns about it), so
  // a program that uses backward(create_graph) clears the gradient when done
  w.zero_grad();
}

TEST_CASE("NoGradGuard: nothing is recorded; guards nest and restore") {
  Tensor x = leaf({1, 2});
  CHECK(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(GradMode::is_enabled());
    Tensor y = mul(x, 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    {
      EnableGradGuard enable;
      CHECK(mul(x, 2.0).requires_grad());
      {
        NoGradGuard inner;
        CHECK_FALSE(GradMode::is_enabled());
      }
      CHECK(GradMode::is_enabled());
    }
    CHECK_FALSE(GradMode::is_enabled());
    // parameter updates on a leaf that requires grad are allowed here (what optimizers do)
    uint32_t v = x.version();
    x.add_(ones({2}, kF64), -0.5);
    CHECK(x.version() == v + 1);
    check_values(x, {0.5, 1.5});
  }
  CHECK(GradMode::is_enabled());
  CHECK(mul(x, 2.0).requires_grad());
  // ops on tensors that do not require grad build no graph either
  Tensor c = mul(tensor({1.0}, kF64), 2.0);
  CHECK_FALSE(c.requires_grad());
  CHECK(c.is_leaf());
}

TEST_CASE("detach shares storage and stops gradients") {
  Tensor x = leaf({2, 3});
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.impl()->storage == x.impl()->storage);
  // y = x.detach() * x: only the second factor carries gradient, so dy/dx = x
  sum(mul(d, x)).backward();
  check_values(x.grad(), {2, 3});
}

TEST_CASE("autograd::grad: leaves and non-leaves, .grad untouched, allow_unused") {
  Tensor x = leaf({1, 2});
  Tensor h = mul(x, 2.0);                // h = 2x
  Tensor y = sum(mul(h, h));             // y = Σ h² = 4 Σ x²
  std::vector<Tensor> g = autograd::grad({y}, {h, x}, {}, {.retain_graph = true});
  check_values(g[0], {4, 8});            // dy/dh = 2h
  check_values(g[1], {8, 16});           // dy/dx = 8x
  CHECK_FALSE(x.grad().defined());
  // explicit upstream gradients for a non-scalar output: d(Σ v ⊙ h)/dx = 2v
  Tensor v = tensor({10, 100}, kF64);
  check_values(autograd::grad({h}, {x}, {v})[0], {20, 200});
  // an input that does not influence the output
  Tensor unused = leaf({5});
  Tensor z = sum(mul(x, 3.0));
  CHECK_THROWS_WITH_AS(autograd::grad({z}, {x, unused}, {}, {.retain_graph = true}),
                       doctest::Contains("autograd::grad: input 1 (shape (1,)) was not used"), Error);
  std::vector<Tensor> r = autograd::grad({z}, {x, unused}, {}, {.allow_unused = true});
  check_values(r[0], {3, 3});
  CHECK_FALSE(r[1].defined());
  CHECK_THROWS_WITH_AS(autograd::grad({z}, {tensor({1.0}, kF64)}), doctest::Contains("every input must require grad"),
                       Error);
}

namespace {
// cube(x) = x³ as one node whose create_graph backward differentiates x · x · x with a nested
// autograd::grad, as the fused ops (GRU, additive scores, cross-entropy) do.
Tensor cube(const Tensor& x) {
  Tensor y = mul(mul(x.detach(), x.detach()), x.detach());
  return record("cube", y, {x}, [x = save(x)](const Tensor& dy, Grads& g) {
    const Tensor& xv = x.get();
    if (!GradMode::is_enabled()) return g.add(0, mul(mul(mul(xv, xv), 3.0), dy));
    g.add(0, autograd::grad({mul(mul(xv, xv), xv)}, {xv}, {dy}, {.retain_graph = true, .create_graph = true})[0]);
  });
}
}  // namespace

TEST_CASE("a backward function may run autograd::grad itself (a nested pass over shared nodes)") {
  // x = exp(a) is a non-leaf that the outer pass also reaches through `+ x`: the nested pass
  // inside cube's backward walks x's node too and must leave the outer pass's pending gradient.
  for (bool through_leaf : {false, true}) {
    CAPTURE(through_leaf);
    Tensor a = leaf({0.5, -1.5, 2.0});
    Tensor x = through_leaf ? a : exp(a);
    Tensor y = sum(add(cube(x), x));
    Tensor ga = autograd::grad({y}, {a}, {}, {.create_graph = true})[0];
    std::vector<double> first, second;
    for (double v : {0.5, -1.5, 2.0}) {
      double e = through_leaf ? v : std::exp(v);
      first.push_back(through_leaf ? 3 * v * v + 1 : (3 * e * e + 1) * e);  // dy/da
      second.push_back(through_leaf ? 6 * v : 9 * e * e * e + e);             // d²y/da²
    }
    check_values(ga, first);
    check_values(autograd::grad({sum(ga)}, {a})[0], second);
  }
}

namespace {
// Runs f on a thread with a 1 MiB stack (as a worker thread might have), so that anything
// recursing once per graph node (building, backward or freeing) overflows it and crashes the test.
void run_on_small_stack(void (*f)()) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  REQUIRE(pthread_create(&thread, &attr, [](void* arg) -> void* {
            reinterpret_cast<void (*)()>(arg)();
            return nullptr;
          }, reinterpret_cast<void*>(f)) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

double chain_gradient = 0;
}  // namespace

TEST_CASE("a chain of 100,000 ops backpropagates (and is freed) without stack overflow") {
  run_on_small_stack([] {
    Tensor x = tensor({1.0}, kF64).requires_grad_();
    {
      Tensor y = x;
      for (int i = 0; i < 100000; ++i) y = add(y, 1e-6);
      sum(y).backward();
    }  // the graph is freed here: 100,000 nodes deep
    {
      Tensor y = x;
      for (int i = 0; i < 100000; ++i) y = mul(y, 1.0);
    }  // freed without ever running backward (mul also saves its inputs)
    chain_gradient = x.grad().item();
  });
  CHECK(chain_gradient == 1);
}

TEST_CASE("in-place modification of a saved tensor throws an error naming the op") {
  Tensor x = leaf({1, 2});
  SUBCASE("an input saved by mul") {
    Tensor h = mul(x, 1.0);
    Tensor y = sum(mul(h, x));  // mul saves h
    h.add_(tensor({1, 1}, kF64));
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("mul: a tensor it saved for backward (shape (2,), float64) was "
                                                         "modified by an in-place operation"),
                         Error);
  }
  SUBCASE("an output saved by exp") {
    Tensor e = exp(x);
    Tensor y = sum(e);
    e.mul_(2.0);
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("exp: its output was modified by an in-place operation"), Error);
  }
  SUBCASE("edits under NoGradGuard count too") {
    Tensor h = mul(x, 1.0);
    Tensor y = sum(mul(h, h));
    {
      NoGradGuard no_grad;
      h.fill_(0);
    }
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("mul: a tensor it saved for backward"), Error);
  }
  SUBCASE("in-place ops recorded on non-leaves still differentiate correctly") {
    Tensor h = mul(x, 1.0);
    h.mul_(x);                      // h = x²
    h.add_(x, 2.0);                 // h = x² + 2x
    sum(h.clamp_(-100, 100)).backward();
    check_values(x.grad(), {4, 6});  // 2x + 2
  }
}

TEST_CASE("backward on a non-scalar needs a gradient; a tensor without history cannot backward") {
  Tensor x = leaf({1, 2});
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("grad can be implicitly created only for scalar outputs; output has "
                                                       "shape (2,)"),
                       Error);
  CHECK_THROWS_WITH_AS(y.backward(ones({3}, kF64)), doctest::Contains("gradient shape (3,) does not match output shape (2,)"),
                       ShapeError);
  y.backward(tensor({1, 10}, kF64));
  check_values(x.grad(), {2, 20});
  CHECK_THROWS_WITH_AS(tensor({1.0}, kF64).backward(), doctest::Contains("does not require grad and does not have a grad_fn"),
                       Error);
  NoGradGuard no_grad;
  CHECK_THROWS_WITH_AS(sum(x).backward(), doctest::Contains("did you run it under NoGradGuard"), Error);
}

TEST_CASE("in-place on a leaf that requires grad throws; on a view of a graph tensor too") {
  Tensor w = leaf({1, 2});
  CHECK_THROWS_WITH_AS(w.mul_(2.0), doctest::Contains("mul_: a leaf tensor that requires grad (shape (2,)) is used in an "
                                                      "in-place operation; do parameter updates under NoGradGuard"),
                       Error);
  CHECK_THROWS_WITH_AS(w.fill_(0), doctest::Contains("fill_: a leaf tensor that requires grad"), Error);
  CHECK_THROWS_WITH_AS(w.uniform_(0, 1), doctest::Contains("uniform_: a leaf tensor that requires grad"), Error);
  Tensor h = mul(w, 1.0);
  CHECK_THROWS_WITH_AS(h.narrow(0, 0, 1).mul_(2.0), doctest::Contains("in-place operations on a view of a tensor in "
                                                                      "the autograd graph are not supported"),
                       Error);
}

TEST_CASE("leaf gradients never alias each other or the upstream gradient") {
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  add(a, b).backward(ones({2}, kF64));  // both gradients are the same dy
  check_values(a.grad(), {1, 1});
  check_values(b.grad(), {1, 1});
  CHECK(a.grad().impl()->storage != b.grad().impl()->storage);
  a.grad().mul_(2.0);
  check_values(a.grad(), {2, 2});
  check_values(b.grad(), {1, 1});
  // a leaf passed straight through: its gradient is not the caller's seed tensor
  Tensor c = leaf({5});
  Tensor seed = ones({1}, kF64);
  c.backward(seed);
  c.grad().mul_(3.0);
  check_values(seed, {1});
  // a view-producing op (its backward returns a view of dy) still yields an independent gradient
  Tensor d = leaf({1, 2, 3, 4});
  Tensor upstream = ones({2, 2}, kF64);
  d.view({2, 2}).backward(upstream);
  d.grad().mul_(5.0);
  check_values(upstream, {1, 1, 1, 1});
  CHECK(d.grad().is_contiguous());
}

TEST_CASE("a tensor sliced step by step: each slice's gradient lands in its part, held gradients untouched") {
  // Slices and lookups add into the gradient buffer in place when the engine owns it alone
  // (a decoder's loop); the values here are the loss's coefficients, by hand.
  auto loss_of = [](const Tensor& x) {
    Tensor loss = mul(x.select(0, 1), 10.0).sum();  // row 1: +10
    for (int64_t t = 0; t < 3; ++t) loss = add(loss, mul(narrow(x, 1, t, 1), t + 1.0).sum());  // column t: +(t+1)
    return add(loss, mul(slice(x, 1, 0, 3, 2), 100.0).sum());  // columns 0 and 2: +100
  };
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, kF64).reshape({2, 3}).detach().requires_grad_();
  loss_of(x).backward();
  check_values(x.grad(), {101, 2, 103, 111, 12, 113});
  loss_of(mul(x, 2.0)).backward();  // through a non-leaf's buffer: twice the coefficients, accumulated
  check_values(x.grad(), {303, 6, 309, 333, 36, 339});
  Tensor held = x.grad();  // a gradient the user holds is never written by a later pass
  loss_of(x).backward();
  check_values(held, {303, 6, 309, 333, 36, 339});
  check_values(x.grad(), {404, 8, 412, 444, 48, 452});

  // one table looked up at every step, padding row 0 left at zero
  Tensor table = zeros({4, 2}, kF64).requires_grad_();
  Tensor lookups = zeros({}, kF64);
  const int64_t ids[3][2] = {{1, 2}, {2, 0}, {3, 2}};
  for (int64_t t = 0; t < 3; ++t) {
    Tensor step_ids = from_vector<int64_t>({ids[t][0], ids[t][1]}, {2}, {.dtype = DType::i64});
    lookups = add(lookups, mul(embedding(table, step_ids, 0), t + 1.0).sum());
  }
  lookups.backward();
  check_values(table.grad(), {0, 0, 1, 1, 6, 6, 3, 3});  // id 2 at steps 0, 1 and 2: 1 + 2 + 3
}

TEST_CASE("a backward that returns the wrong shape is caught with the op name") {
  Tensor x = leaf({1, 2});
  Tensor y = record("bad_op", mul(x.detach(), 2.0), {x}, [](const Tensor& dy, Grads& g) { g.add(0, sum(dy)); });
  CHECK_THROWS_WITH_AS(sum(y).backward(), "bad_op backward: gradient for input 0 has shape (), expected (2,)", ShapeError);
  Tensor z = record("bad_dtype", mul(x.detach(), 2.0), {x},
                    [](const Tensor& dy, Grads& g) { g.add(0, dy.to(DType::f32)); });
  CHECK_THROWS_WITH_AS(sum(z).backward(), "bad_dtype backward: gradient for input 0 has dtype float32, expected float64",
                       DTypeError);
}

TEST_CASE("float32 graphs work the same way") {
  Tensor x = tensor({0.5f, -0.25f}).requires_grad_();
  sum(mul(tanh(x), x)).backward();  // d(x tanh x) = tanh x + x (1 - tanh² x)
  std::vector<float> g = x.grad().to_vector<float>();
  CHECK(x.grad().dtype() == DType::f32);
  for (int i = 0; i < 2; ++i) {
    double v = i == 0 ? 0.5 : -0.25, t = std::tanh(v);
    CHECK(g[i] == doctest::Approx(t + v * (1 - t * t)).epsilon(1e-6));
  }
}

// A parameter used three times (like a weight at every decoder step): the hook runs once per
// pass, after the last contribution, and sees the whole gradient; autograd::grad runs none.
TEST_CASE("post-accumulate-grad hooks run once per pass with the finished gradient") {
  Tensor w = leaf({2.0});
  Tensor unused = leaf({5.0});
  std::vector<double> seen;
  const uint64_t id = autograd::register_post_accumulate_grad_hook(
      w, [&seen](const Tensor& t) { seen.push_back(t.grad().item()); });
  int unused_calls = 0;
  const uint64_t unused_id =
      autograd::register_post_accumulate_grad_hook(unused, [&](const Tensor&) { ++unused_calls; });
  auto loss = [&] { return (w * 3.0 + w * w + w.exp()).sum(); };  // d/dw = 3 + 2w + e^w
  loss().backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == doctest::Approx(3.0 + 4.0 + std::exp(2.0)).epsilon(1e-12));
  loss().backward();  // accumulates: the hook sees the sum of both passes
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == doctest::Approx(2 * (7.0 + std::exp(2.0))).epsilon(1e-12));
  autograd::grad({loss()}, {w});
  CHECK(seen.size() == 2);
  CHECK(unused_calls == 0);  // not reached by the graph: no edge, no call
  autograd::remove_post_accumulate_grad_hook(id);
  autograd::remove_post_accumulate_grad_hook(unused_id);
  loss().backward();
  CHECK(seen.size() == 2);
  CHECK_THROWS_WITH_AS(autograd::register_post_accumulate_grad_hook(w * 2.0, [](const Tensor&) {}),
                       doctest::Contains("must be a leaf that requires grad"), Error);
}

// Progress hooks run between the nodes of a backward pass: after each of them with interval 0, at
// most once per interval otherwise, never once removed.
TEST_CASE("backward progress hooks run between nodes, at most once per interval") {
  Tensor w = leaf({2.0});
  auto loss = [&] { return (w * 3.0 + w * w + w.exp()).sum(); };  // 6 nodes: 2 mul, exp, 2 add, sum
  int every_node = 0, hourly = 0;
  const uint64_t each = autograd::register_backward_progress_hook([&] { ++every_node; }, std::chrono::microseconds(0));
  const uint64_t rare = autograd::register_backward_progress_hook([&] { ++hourly; }, std::chrono::hours(1));
  loss().backward();
  CHECK(every_node == 6);
  CHECK(hourly == 1);  // the first node of the first pass
  loss().backward();
  CHECK(every_node == 12);
  CHECK(hourly == 1);
  autograd::remove_backward_progress_hook(each);
  autograd::remove_backward_progress_hook(rare);
  loss().backward();
  CHECK(every_node == 12);
  CHECK(hourly == 1);
  CHECK_THROWS_WITH_AS(autograd::register_backward_progress_hook([] {}, std::chrono::microseconds(-1)),
                       doctest::Contains("interval >= 0"), Error);
}
