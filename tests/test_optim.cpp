// optim: optimizers (hand-derived steps, the Adam kernel vs its composed twin, groups, state
// save/restore), gradient clipping, schedulers against PyTorch 1.13's sequences, and a smoke test
// in which a small GRU tagger overfits 8 sequences.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/rng.h"
#include "core/serialize.h"
#include "core/threads.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "optim/optim.h"
#include "temp_dir.h"

using namespace seqgrad;
using namespace seqgrad::optim;

namespace {

Tensor param(std::initializer_list<double> values, DType dtype = DType::f64) {
  return tensor(values, {static_cast<int64_t>(values.size())}, {.dtype = dtype}).requires_grad_();
}

void set_grad(const Tensor& p, std::initializer_list<double> values) {
  p.set_grad(tensor(values, p.shape(), {.dtype = p.dtype()}));
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol = 1e-12,
                 double atol = 1e-15) {
  REQUIRE(got.size() == want.size());
  size_t bad = got.size();  // the first element out of tolerance
  for (size_t i = 0; i < got.size() && bad == got.size(); ++i)
    if (!(got[i] == want[i] || std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]))) bad = i;
  INFO("element " << bad << ": got " << (bad < got.size() ? got[bad] : 0) << ", want "
                  << (bad < got.size() ? want[bad] : 0));
  CHECK(bad == got.size());
}

// A fixed sequence of gradients for `step` (deterministic, no RNG state).
void fake_grads(const std::vector<Tensor>& params, int step) {
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<double> g(static_cast<size_t>(params[k].numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.7 * static_cast<double>(i + 1) + 1.3 * step + k);
    params[k].set_grad(from_vector(g, params[k].shape(), {.dtype = params[k].dtype()}));
  }
}

std::vector<Tensor> make_params(DType dtype = DType::f64) {
  manual_seed(42);
  return {randn({3, 4}, {.dtype = dtype}).requires_grad_(), randn({5}, {.dtype = dtype}).requires_grad_()};
}

std::vector<Tensor> copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

std::vector<double> flat(const std::vector<Tensor>& params) {
  std::vector<double> out;
  for (const Tensor& p : params)
    for (double v : p.to_vector<double>()) out.push_back(v);
  return out;
}

using seqgrad::testing::temp_path;

}  // namespace

// ---- optimizers

TEST_CASE("SGD: hand-derived steps with momentum, dampening, nesterov and weight decay") {
  SUBCASE("plain: p -= lr · g") {
    Tensor p = param({1.0});
    SGD opt({p}, {.lr = 0.1});
    set_grad(p, {0.5});
    opt.step();
    check_close(p.to_vector<double>(), {0.95});
  }
  SUBCASE("momentum 0.9: b1 = 0.5, p = 0.95; b2 = 0.9 · 0.5 + 0.5 = 0.95, p = 0.95 - 0.095") {
    Tensor p = param({1.0});
    SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
    for (int i = 0; i < 2; ++i) {
      set_grad(p, {0.5});
      opt.step();
    }
    check_close(p.to_vector<double>(), {0.855});
  }
  SUBCASE("dampening 0.5: b1 = 0.5 (no dampening on the first step), b2 = 0.45 + 0.25 = 0.7") {
    Tensor p = param({1.0});
    SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    for (int i = 0; i < 2; ++i) {
      set_grad(p, {0.5});
      opt.step();
    }
    check_close(p.to_vector<double>(), {1.0 - 0.05 - 0.07});
  }
  SUBCASE("nesterov: step 1 d = 0.5 + 0.9 · 0.5 = 0.95; step 2 b = 0.95, d = 0.5 + 0.855 = 1.355") {
    Tensor p = param({1.0});
    SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    for (int i = 0; i < 2; ++i) {
      set_grad(p, {0.5});
      opt.step();
    }
    check_close(p.to_vector<double>(), {1.0 - 0.095 - 0.1355});
  }
  SUBCASE("weight decay 0.1: g = 0.5 + 0.1 · 2 = 0.7") {
    Tensor p = param({2.0});
    SGD opt({p}, {.lr = 0.1, .weight_decay = 0.1});
    set_grad(p, {0.5});
    opt.step();
    check_close(p.to_vector<double>(), {2.0 - 0.07});
  }
}

TEST_CASE("Adam and AdamW: hand-derived first steps") {
  // Step 1: m = (1-β1) g, v = (1-β2) g², m̂ = g, √v̂ = |g|, so p -= lr · g / (|g| + eps).
  Tensor p = param({1.0, -2.0});
  Adam adam({p}, {.lr = 0.1});
  set_grad(p, {0.5, -4.0});
  adam.step();
  check_close(p.to_vector<double>(), {1.0 - 0.1 * 0.5 / (0.5 + 1e-8), -2.0 + 0.1 * 4.0 / (4.0 + 1e-8)});

  // Adam's weight decay is L2 (added to g): g = 0.5 + 0.5 · 1 = 1.
  Tensor q = param({1.0});
  Adam l2({q}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(q, {0.5});
  l2.step();
  check_close(q.to_vector<double>(), {1.0 - 0.1 * 1.0 / (1.0 + 1e-8)});

  // AdamW decays the weight first: p = 1 · (1 - 0.1 · 0.5) = 0.95, then the Adam step on g = 0.5.
  Tensor r = param({1.0});
  AdamW adamw({r}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(r, {0.5});
  adamw.step();
  check_close(r.to_vector<double>(), {0.95 - 0.1 * 0.5 / (0.5 + 1e-8)});
}

TEST_CASE("Adam: the CPU backend's adam_update kernel equals its composed twin over 8 steps (f64 and f32)") {
  REQUIRE(backend_for(Device::cpu()).supports(FusedOp::adam_update));
  struct Case {
    const char* name;
    AdamParams p;
  };
  const Case cases[] = {
      {"adam", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}},
      {"adam l2 amsgrad", {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true}},
      {"adamw amsgrad", {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-8, .weight_decay = 0.05, .amsgrad = true,
                         .decoupled_weight_decay = true}},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const Case& c : cases) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      manual_seed(7);
      const Shape shape{1000, 70};  // large enough for parallel_for to split it
      Tensor p1 = randn(shape, {.dtype = dtype});
      Tensor p2 = p1.clone();
      auto state = [&] { return zeros(shape, {.dtype = dtype}); };
      Tensor m1 = state(), v1 = state(), x1 = state(), m2 = state(), v2 = state(), x2 = state();
      for (int64_t t = 1; t <= 8; ++t) {
        Tensor g = randn(shape, {.dtype = dtype});
        AdamParams s = c.p;
        s.step = t;
        backend_for(Device::cpu()).adam_update(p1, g, m1, v1, x1, s);
        optim::detail::adam_update_composed(p2, g, m2, v2, x2, s);
      }
      const double rtol = dtype == DType::f64 ? 1e-12 : 2e-5;
      check_close(p1.to_vector<double>(), p2.to_vector<double>(), rtol, rtol);
      check_close(m1.to_vector<double>(), m2.to_vector<double>(), rtol, rtol);
      check_close(v1.to_vector<double>(), v2.to_vector<double>(), rtol, rtol);
      if (c.p.amsgrad) check_close(x1.to_vector<double>(), x2.to_vector<double>(), rtol, rtol);
    }
  }
}

TEST_CASE("Adam::step: the kernel for a contiguous parameter, the composed twin for a strided one, same values") {
  // p_dense and p_strided hold the same values; p_strided is a transposed (non-contiguous) leaf, so
  // detail::adam_update gives it the composed twin while p_dense takes the backend's kernel.
  for (DType dtype : {DType::f64, DType::f32}) {
    for (bool amsgrad : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(amsgrad);
      manual_seed(11);
      Tensor values = randn({40, 30}, {.dtype = dtype});
      Tensor p_dense = values.clone().requires_grad_();
      Tensor p_strided = values.t().contiguous().detach().t().requires_grad_();
      REQUIRE_FALSE(p_strided.is_contiguous());
      const AdamOptions options{.lr = 2e-2, .betas = {0.85, 0.99}, .weight_decay = 0.1, .amsgrad = amsgrad};
      Adam kernel({p_dense}, options), composed({p_strided}, options);
      for (int step = 0; step < 5; ++step) {
        Tensor g = randn({40, 30}, {.dtype = dtype});
        p_dense.set_grad(g);
        p_strided.set_grad(g);
        kernel.step();
        composed.step();
      }
      const double rtol = dtype == DType::f64 ? 1e-12 : 2e-5;
      check_close(p_dense.to_vector<double>(), p_strided.contiguous().to_vector<double>(), rtol, rtol);
    }
  }
}

TEST_CASE("Optimizer: parameter groups, lr access, parameters without gradients are skipped") {
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  SGD opt(std::vector<SGD::Group>{{{a, b}, {.lr = 0.1}}, {{c}, {.lr = 0.01, .momentum = 0.9}}});
  CHECK(opt.num_groups() == 2);
  CHECK(opt.lr(0) == 0.1);
  CHECK(opt.lr(1) == 0.01);
  CHECK(opt.hyper_params(1).at("momentum") == 0.9);
  set_grad(a, {1.0});
  set_grad(c, {1.0});
  opt.step();  // b has no gradient: untouched
  check_close(flat({a, b, c}), {0.9, 1.0, 0.99});
  opt.set_lr(0.5);
  CHECK(opt.lr(0) == 0.5);
  CHECK(opt.lr(1) == 0.5);
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK_THROWS_WITH_AS(opt.lr(2), "SGD: group 2 out of range (2 groups)", IndexError);

  // Adam's step count only advances for parameters that had a gradient.
  Tensor p = param({1.0}), q = param({1.0});
  Adam adam({p, q}, {.lr = 0.1});
  set_grad(p, {1.0});
  adam.step();
  StateDict st = adam.state_dict();
  CHECK(st.count("state.0.exp_avg") == 1);
  CHECK(st.count("state.1.exp_avg") == 0);
  CHECK(st.values["groups"][0]["params"][0]["step"] == 1);
  CHECK(st.values["groups"][0]["params"][1]["step"] == 0);
}

TEST_CASE("Optimizer: constructor and argument errors") {
  Tensor p = param({1.0});
  CHECK_THROWS_WITH_AS(Adam({p}, {.betas = {1.2, 0.999}}), "Adam: betas[0] = 1.2 not in [0, 1)", ValueError);
  CHECK_THROWS_WITH_AS(AdamW({p}, {.lr = -1}), "AdamW: lr = -1 must be >= 0", ValueError);
  CHECK_THROWS_WITH_AS(SGD({p}, {.lr = 0.1, .nesterov = true}),
                       "SGD: nesterov momentum needs momentum > 0 and dampening = 0, got momentum = 0, dampening = 0",
                       ValueError);
  CHECK_THROWS_WITH_AS(SGD({p, p}), doctest::Contains("appears more than once"), ValueError);
  CHECK_THROWS_WITH_AS(SGD(std::vector<Tensor>{}), "SGD: parameter group 0 is empty", ValueError);
  Tensor derived = mul(p, 2.0);
  CHECK_THROWS_WITH_AS(Adam({derived}), doctest::Contains("is not a leaf tensor"), Error);
  Tensor ints = tensor({1, 2}, {2}, {.dtype = DType::i64});
  CHECK_THROWS_WITH_AS(Adam({ints}), doctest::Contains("must be floating, got int64 (2,)"), DTypeError);
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(zeros({2}, {.dtype = DType::f64}));
  CHECK_THROWS_WITH_AS(opt.step(), "SGD.step: gradient float64 (2,) does not match its parameter float64 (1,)",
                       ShapeError);
}

TEST_CASE("Optimizer state: save, restore (also through a safetensors file) and continue identically") {
  auto run = [](auto make) {
    // Reference: 10 uninterrupted steps.
    std::vector<Tensor> ref = make_params();
    auto opt_ref = make(ref);
    for (int t = 0; t < 10; ++t) {
      fake_grads(ref, t);
      opt_ref->step();
    }
    // Interrupted: 5 steps, save, fresh optimizer over copies, load, 5 more steps.
    std::vector<Tensor> first = make_params();
    auto opt1 = make(first);
    for (int t = 0; t < 5; ++t) {
      fake_grads(first, t);
      opt1->step();
    }
    StateDict saved = opt1->state_dict();
    const std::string path = temp_path("state.safetensors");
    save_tensors(path, saved, {{"optimizer", saved.values.dump()}});
    TensorFile file = load_tensors(path);
    std::filesystem::remove(path);

    std::vector<Tensor> second = copies(first);
    auto opt2 = make(second);
    opt2->set_lr(123.0);  // overwritten by the loaded hyper-parameters
    opt2->load_state_dict(StateDict(file.tensors, nlohmann::json::parse(file.metadata.at("optimizer"))));
    for (int t = 5; t < 10; ++t) {
      fake_grads(second, t);
      opt2->step();
    }
    CHECK(flat(second) == flat(ref));  // bit-identical
  };
  SUBCASE("SGD nesterov + weight decay") {
    run([](std::vector<Tensor>& p) {
      return std::make_unique<SGD>(p, SGD::Options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01,
                                                   .nesterov = true});
    });
  }
  SUBCASE("Adam amsgrad + weight decay") {
    run([](std::vector<Tensor>& p) {
      return std::make_unique<Adam>(p, Adam::Options{.lr = 0.01, .weight_decay = 0.01, .amsgrad = true});
    });
  }
  SUBCASE("AdamW") {
    run([](std::vector<Tensor>& p) { return std::make_unique<AdamW>(p, AdamW::Options{.lr = 0.01}); });
  }
}

TEST_CASE("Optimizer state: mismatches throw naming the key and change nothing") {
  std::vector<Tensor> ps = make_params();
  Adam adam(ps, {.lr = 0.01});
  fake_grads(ps, 0);
  adam.step();
  StateDict st = adam.state_dict();

  std::vector<Tensor> other = {randn({4, 3}, {.dtype = DType::f64}).requires_grad_(),
                               randn({5}, {.dtype = DType::f64}).requires_grad_()};
  Adam wrong_shape(other);
  CHECK_THROWS_WITH_AS(wrong_shape.load_state_dict(st),
                       "Adam.load_state_dict: group 0 parameter 0: saved shape (3, 4) vs parameter (4, 3)", ShapeError);
  SGD sgd(copies(ps));
  CHECK_THROWS_WITH_AS(sgd.load_state_dict(st), "SGD.load_state_dict: the state was saved by Adam", ValueError);

  Adam fresh(copies(ps), {.lr = 0.5});
  StateDict missing = st;
  missing.erase("state.1.exp_avg_sq");
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(missing),
                       doctest::Contains("missing tensor 'state.1.exp_avg_sq' (parameter 1 of group 0 has taken 1 "
                                         "steps)"),
                       ValueError);
  CHECK(fresh.lr() == 0.5);  // untouched
  StateDict extra = st;
  extra["state.9.exp_avg"] = zeros({5}, {.dtype = DType::f64});
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(extra), doctest::Contains("unexpected tensor 'state.9.exp_avg'"),
                       ValueError);
  StateDict not_object = st;  // e.g. a file's JSON string where an object belongs
  not_object.values = "{\"type\": \"Adam\"}";
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(not_object),
                       doctest::Contains("Adam.load_state_dict: the state's values must be a JSON object, got \"{"),
                       ValueError);
  StateDict bad_groups = st;
  bad_groups.values["groups"] = 5;
  CHECK_THROWS_WITH_AS(fresh.load_state_dict(bad_groups),
                       "Adam.load_state_dict: the state has 0 parameter groups, the optimizer 1", ValueError);
  CHECK_NOTHROW(fresh.load_state_dict(st));
  CHECK(fresh.lr() == 0.01);
}

TEST_CASE("Optimizer state: a non-finite moment is refused, naming the tensor, and nothing changes") {
  std::vector<Tensor> ps = make_params();
  Adam adam(ps, {.lr = 0.01});
  fake_grads(ps, 0);
  adam.step();
  const StateDict good = adam.state_dict();
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    StateDict st = good;
    Tensor moment = st.at("state.1.exp_avg_sq").clone();
    moment.data<double>()[2] = bad;
    st["state.1.exp_avg_sq"] = moment;
    std::vector<Tensor> qs = copies(ps);
    Adam fresh(qs, {.lr = 0.5});
    CHECK_THROWS_WITH_AS(fresh.load_state_dict(st),
                         "Adam.load_state_dict: tensor 'state.1.exp_avg_sq' (5,) holds 1 non-finite value(s); the "
                         "state is unusable (saved after a diverged step?)",
                         ValueError);
    CHECK(fresh.lr() == 0.5);  // untouched
    fresh.load_state_dict(good);
    CHECK(fresh.lr() == 0.01);
  }
}

TEST_CASE("schedulers: a non-finite learning rate or a NaN best metric in a state is refused") {
  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 1.0});
  StepLR step(opt, {.step_size = 2});
  StateDict state = step.state_dict();
  state.values["last_lr"] = {"nan"};
  CHECK_THROWS_WITH_AS(step.load_state_dict(state),
                       "StepLR.load_state_dict: last_lr[0] = nan is not a finite learning rate", ValueError);
  state.values["last_lr"] = {1.0};
  state.values["base_lrs"] = {"inf"};
  CHECK_THROWS_WITH_AS(step.load_state_dict(state),
                       "StepLR.load_state_dict: base_lrs[0] = inf is not a finite learning rate", ValueError);
  CHECK(opt.lr() == 1.0);  // untouched
  CHECK_THROWS_WITH_AS(step.load_state_dict(StateDict({}, "garbage")),
                       "StepLR.load_state_dict: the state's values must be a JSON object, got \"garbage\"",
                       ValueError);

  ReduceLROnPlateau plateau(opt);
  StateDict plateau_state = plateau.state_dict();
  CHECK(plateau_state.values["best"] == "inf");  // no metric yet: +inf is a valid best
  CHECK_NOTHROW(plateau.load_state_dict(plateau_state));
  plateau_state.values["best"] = "nan";
  CHECK_THROWS_WITH_AS(plateau.load_state_dict(plateau_state), doctest::Contains("best = nan"), ValueError);
  plateau_state.values["best"] = 1.0;
  plateau_state.values["last_lr"] = {"-inf"};
  CHECK_THROWS_WITH_AS(plateau.load_state_dict(plateau_state),
                       "ReduceLROnPlateau.load_state_dict: last_lr[0] = -inf is not a finite learning rate",
                       ValueError);
}

// ---- clipping

TEST_CASE("clip_grad_norm_: total norm over all gradients, PyTorch's coefficient, inf and p norms") {
  Tensor a = param({0, 0}), b = param({0}), none = param({0});
  auto reset = [&] {
    set_grad(a, {3.0, 0.0});
    set_grad(b, {-4.0});
  };
  reset();
  double total = clip_grad_norm_({a, b, none}, 1.0);  // √(9 + 16) = 5
  CHECK(total == doctest::Approx(5.0).epsilon(1e-15));
  const double coef = 1.0 / (5.0 + 1e-6);
  check_close(flat({a.grad(), b.grad()}), {3.0 * coef, 0.0, -4.0 * coef});
  CHECK(!none.grad().defined());

  reset();
  CHECK(clip_grad_norm_({a, b}, 10.0) == doctest::Approx(5.0));  // coefficient clamped to 1: unchanged
  check_close(flat({a.grad(), b.grad()}), {3.0, 0.0, -4.0});

  reset();
  CHECK(clip_grad_norm_({a, b}, 2.0, kInfNorm) == 4.0);
  check_close(flat({a.grad(), b.grad()}), {3.0 * 2 / (4 + 1e-6), 0.0, -4.0 * 2 / (4 + 1e-6)});

  reset();
  CHECK(clip_grad_norm_({a, b}, 100.0, 1.0) == doctest::Approx(7.0));
  reset();
  CHECK(clip_grad_norm_({a, b}, 100.0, 3.0) == doctest::Approx(std::cbrt(27.0 + 64.0)));
  CHECK(clip_grad_norm_({none}, 1.0) == 0.0);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({a}, 1.0, 0.0), doctest::Contains("norm_type = 0 must be > 0"), ValueError);
}

TEST_CASE("clip_grad_norm_: a gradient of many blocks (summed on the pool) gives the exact sum, on any thread count") {
  // 20,003 float32 values in {-3, ..., 3}: every square and partial sum is an integer below 2^53, so
  // the blocked sum in double is exact whatever its order; the p = 1 and p = 3 sums likewise.
  const int64_t n = 20003;  // 4 blocks of 4096 and a tail that is not a multiple of 8
  std::vector<float> values(n);
  double squares = 0, absolutes = 0, cubes = 0;
  for (int64_t i = 0; i < n; ++i) {
    values[i] = static_cast<float>(i % 7 - 3);
    squares += values[i] * values[i], absolutes += std::abs(values[i]), cubes += std::pow(std::abs(values[i]), 3);
  }
  Tensor p = zeros({n}).requires_grad_();
  const int threads = get_num_threads();
  for (int t : {1, 2}) {
    CAPTURE(t);
    set_num_threads(t);
    p.set_grad(from_vector(values, {n}));
    CHECK(clip_grad_norm_({p}, 1e9) == std::sqrt(squares));
    CHECK(clip_grad_norm_({p}, 1e9, 1.0) == absolutes);
    CHECK(clip_grad_norm_({p}, 1e9, 3.0) == doctest::Approx(std::cbrt(cubes)).epsilon(1e-15));
  }
  set_num_threads(threads);
}

TEST_CASE("clip_grad_norm_: non-finite norms throw on request, else scale as PyTorch does") {
  Tensor a = param({0, 0});
  const double inf = std::numeric_limits<double>::infinity();
  set_grad(a, {inf, 1.0});
  CHECK_THROWS_WITH_AS(clip_grad_norm_({a}, 1.0, 2.0, true),
                       doctest::Contains("clip_grad_norm_: the total norm of order 2 of the gradients of 1 parameters "
                                         "is inf"),
                       ValueError);
  check_close(a.grad().to_vector<double>(), {inf, 1.0}, 0, 0);  // untouched when it throws
  CHECK(std::isinf(clip_grad_norm_({a}, 1.0)));                 // coefficient 1/inf = 0: inf·0 = NaN, 1·0 = 0
  std::vector<double> g = a.grad().to_vector<double>();
  CHECK(std::isnan(g[0]));
  CHECK(g[1] == 0.0);

  set_grad(a, {std::nan(""), 1.0});
  CHECK(std::isnan(clip_grad_norm_({a}, 1.0)));  // coefficient NaN: every gradient becomes NaN
  g = a.grad().to_vector<double>();
  CHECK((std::isnan(g[0]) && std::isnan(g[1])));
}

TEST_CASE("clip_grad_value_") {
  Tensor a = param({0, 0, 0});
  set_grad(a, {-3.0, 0.5, 2.0});
  clip_grad_value_({a}, 1.0);
  check_close(a.grad().to_vector<double>(), {-1.0, 0.5, 1.0});
  CHECK_THROWS_WITH_AS(clip_grad_value_({a}, -1.0), "clip_grad_value_: clip_value = -1 must be >= 0", ValueError);
}

// ---- schedulers (expected sequences: PyTorch 1.13, base lr 1, lr read after each step)

namespace {
template <class MakeScheduler>
std::vector<double> lr_sequence(MakeScheduler make, int n) {
  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 1.0});
  auto sched = make(opt);
  std::vector<double> out{opt.lr()};
  for (int i = 1; i < n; ++i) {
    opt.step();
    sched->step();
    out.push_back(opt.lr());
    CHECK(sched->last_lr()[0] == opt.lr());
  }
  return out;
}
}  // namespace

TEST_CASE("schedulers: LR sequences equal PyTorch 1.13's") {
  check_close(lr_sequence([](Optimizer& o) { return std::make_unique<StepLR>(o, StepLR::Options{3, 0.5}); }, 10),
              {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125});
  check_close(lr_sequence([](Optimizer& o) {
                return std::make_unique<MultiStepLR>(o, MultiStepLR::Options{{5, 2, 5}, 0.1});
              }, 8),
              {1, 1, 0.1, 0.1, 0.1, 0.001, 0.001, 0.001}, 1e-12);
  check_close(lr_sequence([](Optimizer& o) { return std::make_unique<ExponentialLR>(o, ExponentialLR::Options{0.5}); },
                          5),
              {1, 0.5, 0.25, 0.125, 0.0625});
  // eta_min + (1 - eta_min)(1 + cos(π t / 4)) / 2 with eta_min = 0.1; periodic past T_max.
  check_close(lr_sequence([](Optimizer& o) {
                return std::make_unique<CosineAnnealingLR>(o, CosineAnnealingLR::Options{.t_max = 4, .eta_min = 0.1});
              }, 10),
              {1.0, 0.8681980515339464, 0.55, 0.23180194846605368, 0.1, 0.2318019484660536, 0.55, 0.8681980515339467,
               1.0000000000000004, 0.8681980515339468}, 1e-12);
  check_close(lr_sequence([](Optimizer& o) {
                return std::make_unique<LinearLR>(o, LinearLR::Options{.start_factor = 0.25, .total_iters = 4});
              }, 7),
              {0.25, 0.4375, 0.625, 0.8125, 1, 1, 1});
  check_close(lr_sequence([](Optimizer& o) {
                return std::make_unique<LambdaLR>(o, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
              }, 5),
              {1, 0.5, 1.0 / 3, 0.25, 0.2});
  // Warm-up LinearLR(0.5, 1, 2) for 3 epochs, then CosineAnnealingLR(T_max = 4) counted from 0.
  check_close(lr_sequence([](Optimizer& o) {
                auto warmup = std::make_shared<LinearLR>(o, LinearLR::Options{.start_factor = 0.5, .total_iters = 2});
                auto cosine = std::make_shared<CosineAnnealingLR>(o, CosineAnnealingLR::Options{.t_max = 4});
                return std::make_unique<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                                      std::vector<int64_t>{3});
              }, 10),
              {0.5, 0.75, 1.0, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0, 0.1464466094067262,
               0.5000000000000001}, 1e-12, 1e-15);
}

TEST_CASE("InverseSqrtLR: fairseq's inverse_sqrt by hand; its state restores options and position") {
  // warmup 4 from 0.2 to the base rate 1: 0.2 + 0.8 t / 4, then √(4 / t)
  auto make = [](Optimizer& o) {
    return std::make_unique<InverseSqrtLR>(o, InverseSqrtLR::Options{.warmup_updates = 4, .warmup_init_lr = 0.2});
  };
  check_close(lr_sequence(make, 9), {0.2, 0.4, 0.6, 0.8, 1.0, std::sqrt(0.8), std::sqrt(2.0 / 3.0),
                                     std::sqrt(4.0 / 7.0), std::sqrt(0.5)}, 1e-15);
  // fairseq's defaults: warm-up from 0; one update of warm-up jumps to the base rate
  check_close(lr_sequence([](Optimizer& o) {
                return std::make_unique<InverseSqrtLR>(o, InverseSqrtLR::Options{.warmup_updates = 1});
              }, 5),
              {0.0, 1.0, std::sqrt(0.5), std::sqrt(1.0 / 3.0), 0.5}, 1e-15);

  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 1.0});
  auto sched = make(opt);
  for (int e = 0; e < 3; ++e) opt.step(), sched->step();
  const StateDict state = sched->state_dict();
  Tensor q = param({0.0});
  SGD opt2({q}, {.lr = 1.0});
  InverseSqrtLR restored(opt2, {.warmup_updates = 100});  // its options come back from the state
  restored.load_state_dict(state);
  CHECK(opt2.lr() == doctest::Approx(0.8).epsilon(1e-15));
  restored.step();
  CHECK(opt2.lr() == 1.0);
  restored.step();
  CHECK(opt2.lr() == doctest::Approx(std::sqrt(0.8)).epsilon(1e-15));

  CHECK_THROWS_WITH_AS(InverseSqrtLR(opt2, {.warmup_updates = 0}), "InverseSqrtLR: warmup_updates = 0 must be >= 1",
                       ValueError);
  CHECK_THROWS_WITH_AS(InverseSqrtLR(opt2, {.warmup_init_lr = -1}),
                       "InverseSqrtLR: warmup_init_lr = -1 must be finite and >= 0", ValueError);
}

TEST_CASE("ReduceLROnPlateau: patience, relative threshold, cooldown and min_lr as in PyTorch 1.13") {
  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 1.0});
  ReduceLROnPlateau sched(opt, {.factor = 0.5, .patience = 1, .threshold = 0.1, .cooldown = 1, .min_lr = 0.1});
  const double metrics[] = {10, 9.5, 9, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  const std::vector<double> want = {1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.1};
  std::vector<double> got;
  StateDict mid_state;
  for (int i = 0; i < 12; ++i) {
    sched.step(metrics[i]);
    got.push_back(opt.lr());
    if (i == 5) mid_state = sched.state_dict();
  }
  check_close(got, want);

  // Restored mid-way (with the optimizer's rate), it continues identically.
  Tensor q = param({0.0});
  SGD opt2({q}, {.lr = 0.25});
  ReduceLROnPlateau restored(opt2);
  restored.load_state_dict(mid_state);
  for (int i = 6; i < 12; ++i) {
    restored.step(metrics[i]);
    CHECK(opt2.lr() == want[static_cast<size_t>(i)]);
  }
  // max mode with an absolute threshold: 1.05 is not > 1 + 0.1.
  SGD opt3({q}, {.lr = 1.0});
  ReduceLROnPlateau max_mode(opt3, {.mode = PlateauMode::max, .patience = 0, .threshold = 0.1,
                                    .threshold_mode = ThresholdMode::abs});
  max_mode.step(1.0);
  CHECK(opt3.lr() == 1.0);
  max_mode.step(1.05);
  CHECK(opt3.lr() == doctest::Approx(0.1));
  CHECK_THROWS_WITH_AS(ReduceLROnPlateau(opt3, {.factor = 1.0}), "ReduceLROnPlateau: factor = 1 must be < 1",
                       ValueError);
}

TEST_CASE("schedulers: state save/restore continues identically, whatever the restore order") {
  auto make = [](Optimizer& o) {
    auto warmup = std::make_shared<LinearLR>(o, LinearLR::Options{.start_factor = 0.1, .total_iters = 3});
    auto decay = std::make_shared<StepLR>(o, StepLR::Options{.step_size = 2, .gamma = 0.5});
    return std::make_unique<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warmup, decay},
                                          std::vector<int64_t>{4});
  };
  Tensor p = param({0.0});
  SGD opt({p}, {.lr = 0.2});
  auto sched = make(opt);
  std::vector<double> want;
  StateDict sched_state;
  StateDict opt_state;
  for (int e = 0; e < 12; ++e) {
    if (e == 5) {
      sched_state = sched->state_dict();
      opt_state = opt.state_dict();
    }
    if (e >= 5) want.push_back(opt.lr());
    opt.step();
    sched->step();
  }
  // Scheduler first, then optimizer; and the other way round.
  for (bool optimizer_first : {false, true}) {
    CAPTURE(optimizer_first);
    Tensor q = param({0.0});
    SGD opt2({q}, {.lr = 0.2});
    if (optimizer_first) opt2.load_state_dict(opt_state);
    auto sched2 = make(opt2);
    sched2->load_state_dict(sched_state);
    if (!optimizer_first) opt2.load_state_dict(opt_state);
    std::vector<double> got;
    for (int e = 5; e < 12; ++e) {
      got.push_back(opt2.lr());
      opt2.step();
      sched2->step();
    }
    check_close(got, want);
    CHECK(sched2->last_epoch() == 12);
  }
  Tensor r = param({0.0});
  SGD opt3({r}, {.lr = 0.2});
  StepLR step(opt3, {.step_size = 2});
  CHECK_THROWS_WITH_AS(step.load_state_dict(sched_state), "StepLR.load_state_dict: the state was saved by SequentialLR",
                       ValueError);
  CHECK_THROWS_WITH_AS(StepLR(opt3, {.step_size = 0}), "StepLR: step_size = 0 must be >= 1", ValueError);
  CHECK_THROWS_WITH_AS(SequentialLR(opt3, {std::make_shared<StepLR>(opt3, StepLR::Options{})}, {3}),
                       "SequentialLR: 1 schedulers need 0 milestones, got 1", ValueError);
}

TEST_CASE("EarlyStopping: best, patience and min_delta; restored mid-patience it goes on counting") {
  // max mode, min_delta 0.5: 10 is the first best; 10.4 is no improvement (not > 10.5), 11 is.
  EarlyStopping stopping({.metric = "sacrebleu", .mode = PlateauMode::max, .patience = 3, .min_delta = 0.5});
  CHECK_FALSE(stopping.best().has_value());
  auto u = stopping.update(10);
  CHECK((u.improved && !u.should_stop));
  u = stopping.update(10.4);
  CHECK((!u.improved && !u.should_stop));
  CHECK(stopping.validations_since_best() == 1);
  u = stopping.update(11);
  CHECK(u.improved);
  CHECK(stopping.best() == 11.0);
  CHECK(stopping.validations_since_best() == 0);
  stopping.update(9), stopping.update(11.5);  // 11.5 is not > 11 + 0.5: two without a new best
  const StateDict saved = stopping.state_dict();
  CHECK(saved.values == nlohmann::json{{"metric", "sacrebleu"}, {"mode", "max"}, {"patience", 3}, {"min_delta", 0.5},
                                       {"best", 11.0}, {"validations_since_best", 2}});
  // A resumed run (its own object) counts on from 2: the third validation without a new best stops it.
  EarlyStopping resumed;
  resumed.load_state_dict(saved);
  CHECK(resumed.best() == 11.0);
  CHECK(resumed.validations_since_best() == 2);
  CHECK_FALSE(resumed.should_stop());
  u = resumed.update(11.2);
  CHECK((!u.improved && u.should_stop));
  // patience 0 never stops; a larger patience lets a stopped run go on
  resumed.set_patience(0);
  CHECK_FALSE(resumed.should_stop());
  resumed.set_patience(5);  // 3 so far
  CHECK_FALSE(resumed.update(10).should_stop);
  CHECK(resumed.update(10).should_stop);

  // min mode: lower is better
  EarlyStopping loss({.metric = "loss", .mode = PlateauMode::min, .patience = 1});
  CHECK(loss.update(2.0).improved);
  CHECK(loss.update(1.5).improved);
  u = loss.update(1.5);  // equal is no improvement
  CHECK((!u.improved && u.should_stop));

  // errors name the field
  CHECK_THROWS_WITH_AS(EarlyStopping({.patience = -1}), "EarlyStopping: patience = -1 must be >= 0", ValueError);
  CHECK_THROWS_WITH_AS(EarlyStopping({.min_delta = -0.1}), "EarlyStopping: min_delta = -0.1 must be a finite number "
                       ">= 0", ValueError);
  CHECK_THROWS_WITH_AS(loss.update(std::nan("")), "EarlyStopping.update: loss = nan is not a finite score", ValueError);
  StateDict bad = saved;
  bad.values["mode"] = "up";
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(bad), "EarlyStopping.load_state_dict: mode must be \"min\" or "
                       "\"max\", got \"up\"", ValueError);
  bad = saved;
  bad.values["validations_since_best"] = -2;
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(bad), "EarlyStopping.load_state_dict: validations_since_best = -2 "
                       "must be >= 0", ValueError);
  bad = saved;
  bad.values.erase("best");
  CHECK_THROWS_WITH_AS(resumed.load_state_dict(bad), "EarlyStopping.load_state_dict: the state has no 'best'",
                       ValueError);
  CHECK(resumed.best() == 11.0);  // a refused state changes nothing
}

// ---- smoke test

namespace {
// Per-step tagging: GRU(4 -> 16) then Linear(16 -> 5) at every step.
struct Tagger : nn::Module {
  nn::GRU gru{{.input_size = 4, .hidden_size = 16}};
  nn::Linear out{{.in_features = 16, .out_features = 5}};
  Tagger() : Module("Tagger") {
    register_module("gru", gru);
    register_module("out", out);
  }
  Tensor operator()(const Tensor& x) const { return out(gru(x).output); }  // (B, T, 4) -> (B, T, 5)
};
}  // namespace

TEST_CASE("smoke: a GRU tagger overfits 8 sequences with Adam + StepLR + clip_grad_norm_") {
  manual_seed(2024);
  Tagger model;
  Tensor x = randn({8, 6, 4});                        // (B, T, E)
  Tensor y = (rand({8, 6}) * 5.0).to(DType::i64);     // (B, T) classes in [0, 5)
  Tensor pad = ge(arange(0, 6).unsqueeze(0).expand({8, 6}),
                  full({8, 1}, 4.0, {.dtype = DType::i64}));  // the last 2 steps are padding
  y = where(pad, full({}, -100.0, {.dtype = DType::i64}), y);
  Adam opt(model.parameters(), {.lr = 0.03});
  StepLR sched(opt, {.step_size = 150, .gamma = 0.3});
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(model(x), y);
    loss.backward();
    clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    sched.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 1.0);
  CHECK(last < 0.02);
  CHECK(opt.lr() == doctest::Approx(0.03 * 0.3 * 0.3));
}
