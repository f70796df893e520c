// Module: to() in place (parameter identity kept, optimizers keep working), registration by
// declaration, the check that reports an unregistered member, and the containers Sequential,
// ModuleList and ModuleDict (names as PyTorch's, forward, indexing).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace seqgrad;

namespace {

std::vector<std::string> keys_of(const std::map<std::string, Tensor>& state) {
  std::vector<std::string> out;
  for (const auto& [k, _] : state) out.push_back(k);
  return out;
}

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [k, _] : m.named_parameters()) out.push_back(k);
  return out;
}

// Sets every parameter to 0.1, 0.2, ... in named_parameters() order (exact expected values).
void set_ramp(nn::Module& m) {
  NoGradGuard no_grad;
  double v = 0.0;
  for (auto& [_, p] : m.named_parameters()) {
    std::vector<double> values(p.numel());
    for (double& x : values) x = (v += 0.1);
    p.copy_(from_vector(values, p.shape()).to(p.dtype()));
  }
}

// The new style: every member declared and registered in one statement (README's example).
struct DeclaredNet : nn::Module {
  DeclaredNet() : Module("DeclaredNet") {}
  nn::Linear fc1 = register_module<nn::Linear>("fc1", {.in_features = 3, .out_features = 4});
  nn::Dropout drop = register_module<nn::Dropout>("drop");
  nn::Sequential head = register_module<nn::Sequential>("head",
      std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 4, .out_features = 2, .bias = false}));
  Tensor scale = register_parameter("scale", ones({2}));
  Tensor operator()(const Tensor& x) const { return head(tanh(fc1(drop(x)))) * scale; }
};

// The old style with a member forgotten: fc2 is built but never registered.
struct ForgetfulNet : nn::Module {
  nn::Linear fc1, fc2;
  ForgetfulNet()
      : Module("ForgetfulNet"), fc1({.in_features = 3, .out_features = 4}), fc2({.in_features = 4, .out_features = 2}) {
    register_module("fc1", fc1);
  }
};

// The same mistake one level down: the registered child forgot its own member.
struct Outer : nn::Module {
  ForgetfulNet inner;
  Outer() : Module("Outer") { register_module("inner", inner); }
};

// New style with a forgotten old-style member declared before a registered one.
struct MixedNet : nn::Module {
  MixedNet() : Module("MixedNet") {}
  nn::Linear forgotten{{.in_features = 2, .out_features = 2}};
  nn::Linear fc = register_module<nn::Linear>("fc", {.in_features = 2, .out_features = 2});
};

// Parts built on the heap during construction whose parameters are all registered through
// other paths (as the translator's decoder does with its attention wrapper) are not mistakes.
struct WrapperNet : nn::Module {
  std::unique_ptr<nn::HybridAttention> attention;
  WrapperNet()
      : Module("WrapperNet"),
        attention(std::make_unique<nn::HybridAttention>(
            nn::HybridAttention::Options{.query_size = 2, .key_size = 2, .hidden_size = 2})) {
    register_module("additive", attention->additive);
    register_module("scaled_dot", attention->scaled_dot);
  }
};

}  // namespace

// ---- to() in place

TEST_CASE("Module::to(dtype) converts in place: handles taken before (an optimizer's) see float64") {
  manual_seed(3);
  nn::Linear fc({.in_features = 3, .out_features = 2});
  Tensor weight = fc.weight;  // a handle, as an optimizer holds
  const std::vector<double> before = weight.to_vector<double>();
  fc.to(DType::f64);
  CHECK(weight.dtype() == DType::f64);
  CHECK(weight.impl() == fc.weight.impl());
  CHECK(weight.to_vector<double>() == before);  // the same values, widened
  CHECK(weight.requires_grad());
  CHECK(weight.is_leaf());
  CHECK(fc.parameters()[0].impl() == weight.impl());
  CHECK_THROWS_WITH_AS(fc.to(DType::i64), "Linear.to: modules convert to floating dtypes only, got int64", DTypeError);
}

TEST_CASE("Module::to(dtype) after building SGD and Adam: step updates the converted parameters") {
  for (const char* kind : {"SGD", "Adam"}) {
    CAPTURE(kind);
    nn::Linear fc({.in_features = 2, .out_features = 1});
    set_ramp(fc);  // weight [0.1, 0.2], bias [0.3]
    std::unique_ptr<optim::Optimizer> opt;
    if (std::string(kind) == "SGD") opt = std::make_unique<optim::SGD>(fc.parameters(), optim::SGDOptions{.lr = 0.5});
    else opt = std::make_unique<optim::Adam>(fc.parameters(), optim::AdamOptions{.lr = 0.5});
    fc.to(DType::f64);
    Tensor x = tensor({1, 2}, {1, 2}, {.dtype = DType::f64});
    fc(x).sum().backward();  // dL/dw = x = [1, 2], dL/db = 1
    opt->step();
    // SGD: w - 0.5 · g. Adam's first step moves each element by lr · g/|g| (bias-corrected m/√v = ±1,
    // up to eps): also -0.5 for every element here, all gradients being positive.
    const std::vector<double> w = fc.weight.to_vector<double>(), b = fc.bias.to_vector<double>();
    if (std::string(kind) == "SGD") {
      CHECK(w[0] == doctest::Approx(0.1 - 0.5).epsilon(1e-6));  // 0.1 was a float32 before to()
      CHECK(w[1] == doctest::Approx(0.2 - 1.0).epsilon(1e-6));
      CHECK(b[0] == doctest::Approx(0.3 - 0.5).epsilon(1e-6));
    } else {
      CHECK(w[0] == doctest::Approx(0.1 - 0.5).epsilon(1e-6));
      CHECK(w[1] == doctest::Approx(0.2 - 0.5).epsilon(1e-6));
      CHECK(b[0] == doctest::Approx(0.3 - 0.5).epsilon(1e-6));
    }
    CHECK(fc.weight.dtype() == DType::f64);
  }
}

TEST_CASE("Module::to(dtype) between Adam steps: gradients convert and the moments follow the parameter") {
  nn::Linear fc({.in_features = 2, .out_features = 1, .bias = false});
  set_ramp(fc);
  optim::Adam opt(fc.parameters(), {.lr = 0.1});
  Tensor x = tensor({1, -2}, {1, 2});
  fc(x).sum().backward();
  opt.step();  // float32 moments exist now
  fc(x).sum().backward();  // a second gradient accumulates, then the model widens
  fc.to(DType::f64);
  REQUIRE(fc.weight.grad().defined());
  CHECK(fc.weight.grad().dtype() == DType::f64);
  CHECK(fc.weight.grad().to_vector<double>() == std::vector<double>{2, -4});
  opt.step();
  CHECK(fc.weight.dtype() == DType::f64);
  const StateDict state = opt.state_dict();
  CHECK(state.at("state.0.exp_avg").dtype() == DType::f64);
  CHECK(state.at("state.0.exp_avg_sq").dtype() == DType::f64);
  // m = 0.9 · m1 + 0.1 · g with m1 = 0.1 · [1, -2], g = [2, -4]: [0.29, -0.58]
  const std::vector<double> m = state.at("state.0.exp_avg").to_vector<double>();
  CHECK(m[0] == doctest::Approx(0.29).epsilon(1e-6));
  CHECK(m[1] == doctest::Approx(-0.58).epsilon(1e-6));
}

TEST_CASE("Module::to(dtype) between SGD steps: the momentum buffer follows the parameter") {
  nn::Linear fc({.in_features = 2, .out_features = 1, .bias = false});
  optim::SGD opt(fc.parameters(), {.lr = 0.1, .momentum = 0.9});
  Tensor x = tensor({1, -2}, {1, 2});
  fc(x).sum().backward();
  opt.step();  // b = g = [1, -2] (float32)
  fc.to(DType::f64);
  opt.step();  // the same gradient again, now float64: b = 0.9 · b + g = [1.9, -3.8]
  const Tensor b = opt.state_dict().at("state.0.momentum_buffer");
  CHECK(b.dtype() == DType::f64);
  CHECK(b.to_vector<double>() == std::vector<double>{1.9, -3.8});
}

// ---- registration

TEST_CASE("registration by declaration: members registered in order, with PyTorch-style names") {
  DeclaredNet net;
  CHECK(names_of(net) == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "head.0.weight"});
  CHECK(keys_of(net.state_dict()) == std::vector<std::string>{"fc1.bias", "fc1.weight", "head.0.weight", "scale"});
  CHECK(net.scale.requires_grad());
  CHECK(net.named_parameters()[0].second.impl() == net.scale.impl());  // the member is the parameter
  std::vector<std::string> visited;
  net.apply([&](nn::Module& m) { visited.push_back(m.type_name()); });
  CHECK(visited == std::vector<std::string>{"Linear", "Dropout", "Linear", "Sequential", "DeclaredNet"});
  net.to(DType::f64);
  CHECK(net.scale.dtype() == DType::f64);  // the member handle follows to() too
  CHECK(net.fc1.weight.dtype() == DType::f64);
  CHECK(net(ones({1, 3}, {.dtype = DType::f64})).shape() == Shape{1, 2});
}

TEST_CASE("registration: a member that holds parameters but was never registered is reported") {
  ForgetfulNet net;
  const auto forgotten = doctest::Contains(
      "ForgetfulNet: a Linear holding 'weight' (2, 4) was built as part of ForgetfulNet but is not registered, "
      "so parameters() and state_dict() cannot see it; declare it with register_module<Linear>(\"name\", ...) or "
      "call register_module(\"name\", member) in ForgetfulNet's constructor");
  CHECK_THROWS_WITH_AS(net.parameters(), forgotten, Error);
  CHECK_THROWS_WITH_AS(net.state_dict(), forgotten, Error);
  CHECK_THROWS_WITH_AS(optim::Adam(net.parameters()), forgotten, Error);

  Outer outer;  // one level down: the path names where
  CHECK_THROWS_WITH_AS(outer.named_parameters(), doctest::Contains("Outer: a Linear holding 'weight' (2, 4) was built "
                                                                   "as part of ForgetfulNet ('inner') but is not "
                                                                   "registered"), Error);
  MixedNet mixed;
  CHECK_THROWS_WITH_AS(mixed.parameters(), doctest::Contains("MixedNet: a Linear holding 'weight' (2, 2) was built as "
                                                             "part of MixedNet but is not registered"), Error);
}

TEST_CASE("registration: modules built beside a model, or reachable another way, are not reported") {
  DeclaredNet net;
  nn::Linear probe({.in_features = 2, .out_features = 2});  // built after net, not part of it
  CHECK(net.parameters().size() == 4);
  WrapperNet wrapper;  // the HybridAttention wrapper is not registered, its parts are
  CHECK(wrapper.parameters().size() == wrapper.attention->parameters().size());
  // A temporary module built in a constructor and gone by then is not a member.
  struct BuildsTemporary : nn::Module {
    nn::Linear fc{{.in_features = 2, .out_features = 2}};
    BuildsTemporary() : Module("BuildsTemporary") {
      nn::Linear scratch({.in_features = 2, .out_features = 2});
      register_module("fc", fc);
    }
  } temporary;
  CHECK(temporary.parameters().size() == 2);
}

TEST_CASE("registration: names are checked, and a destroyed child leaves its parent") {
  struct Twice : nn::Module {
    nn::Linear a{{.in_features = 1, .out_features = 1}};
    Twice() : Module("Twice") {
      register_module("a", a);
      register_module("a", a);
    }
  };
  CHECK_THROWS_WITH_AS(Twice(), "Twice: submodule 'a' registered twice", ValueError);
  struct BadName : nn::Module {
    BadName() : Module("BadName") {}
    Tensor w = register_parameter("w.x", ones({1}));
  };
  CHECK_THROWS_WITH_AS(BadName(), "BadName: parameter name 'w.x' must be non-empty and contain no '.'", ValueError);

  // A member whose constructor throws leaves nothing registered behind; the error is the member's.
  struct BadMember : nn::Module {
    BadMember() : Module("BadMember") {}
    nn::Dropout drop = register_module<nn::Dropout>("drop");
    nn::Linear fc = register_module<nn::Linear>("fc", {.in_features = 0, .out_features = 1});
  };
  CHECK_THROWS_WITH_AS(BadMember(), "linear: in_features = 0 must be positive", ValueError);
  struct BadChildName : nn::Module {
    BadChildName() : Module("BadChildName") {}
    nn::Dropout drop = register_module<nn::Dropout>("a.b");
  };
  CHECK_THROWS_WITH_AS(BadChildName(), "BadChildName: submodule name 'a.b' must be non-empty and contain no '.'",
                       ValueError);
  DeclaredNet after;  // registration still works after those failures
  CHECK(after.parameters().size() == 4);

  nn::Linear kept({.in_features = 1, .out_features = 1});
  struct Holder3 : nn::Module {
    nn::Linear* l;
    explicit Holder3(nn::Linear& l) : Module("Holder3"), l(&l) {}
    void adopt() { register_module("l", *l); }
  };
  auto holder3 = std::make_unique<Holder3>(kept);
  holder3->adopt();
  {
    auto doomed = std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 1, .out_features = 1});
    struct Holder4 : nn::Module {
      explicit Holder4(nn::Linear& l) : Module("Holder4") { register_module("l", l); }
    } holder4(*doomed);
    doomed.reset();  // the child dies first: the parent forgets it instead of holding a dangling pointer
    CHECK(holder4.children().empty());
    CHECK(holder4.parameters().empty());
  }
  holder3.reset();  // the parent dies first: the child forgets it
  CHECK(kept.parameters().size() == 2);
}

// ---- containers

TEST_CASE("Sequential: variadic construction, push_back, forward, indexing and PyTorch's names") {
  nn::Sequential mlp(std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 2, .out_features = 3}),
                     [](const Tensor& x) { return tanh(x); },
                     std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 3, .out_features = 1}));
  CHECK(mlp.size() == 3);
  CHECK(keys_of(mlp.state_dict()) == std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight"});
  CHECK(mlp[1].type_name() == "Functional");
  CHECK(&mlp[-1] == &mlp[2]);
  CHECK(mlp.at<nn::Linear>(2).options().in_features == 3);
  CHECK_THROWS_WITH_AS(mlp.at<nn::Linear>(1), "Sequential[1]: the module is a Functional, not the type asked for",
                       Error);
  CHECK_THROWS_WITH_AS(mlp[3], "Sequential[3]: index out of range (3 modules)", IndexError);
  CHECK_THROWS_WITH_AS(mlp[-4], "Sequential[-4]: index out of range (3 modules)", IndexError);

  mlp.to(DType::f64);
  set_ramp(mlp);
  // 0.weight [[.1,.2],[.3,.4],[.5,.6]], 0.bias [.7,.8,.9], 2.weight [1.0,1.1,1.2], 2.bias [1.3]
  Tensor x = tensor({1, -1}, {1, 2}, {.dtype = DType::f64});
  const double h0 = std::tanh(0.1 - 0.2 + 0.7), h1 = std::tanh(0.3 - 0.4 + 0.8), h2 = std::tanh(0.5 - 0.6 + 0.9);
  CHECK(mlp(x).item() == doctest::Approx(1.0 * h0 + 1.1 * h1 + 1.2 * h2 + 1.3).epsilon(1e-12));

  nn::Linear& added = mlp.push_back<nn::Linear>({.in_features = 1, .out_features = 2});
  CHECK(&mlp.at<nn::Linear>(3) == &added);
  CHECK(mlp.named_parameters().back().first == "3.bias");
  nn::Sequential empty;
  CHECK(empty(x).impl() == x.impl());  // the identity
}

TEST_CASE("ModuleList and ModuleDict: names, apply, to and train reach every child") {
  struct Net : nn::Module {
    Net() : Module("Net") {
      for (int i = 0; i < 2; ++i) layers.push_back<nn::Linear>({.in_features = 2, .out_features = 2});
      heads.insert<nn::Linear>("en", {.in_features = 2, .out_features = 1});
      heads.emplace<nn::Dropout>("drop", nn::Dropout::Options{.p = 0.5});
    }
    nn::ModuleList layers = register_module<nn::ModuleList>("layers");
    nn::ModuleDict heads = register_module<nn::ModuleDict>("heads");
  } net;
  CHECK(names_of(net) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                                  "layers.1.bias", "heads.en.weight", "heads.en.bias"});
  CHECK(net.heads.keys() == std::vector<std::string>{"en", "drop"});
  CHECK(net.heads.contains("en"));
  CHECK_FALSE(net.heads.contains("fr"));
  CHECK_THROWS_WITH_AS(net.heads["fr"], "ModuleDict: no module under key 'fr' (keys: en, drop)", IndexError);
  CHECK_THROWS_WITH_AS(net.heads.insert<nn::Linear>("en", {.in_features = 1, .out_features = 1}),
                       "ModuleDict: key 'en' is already taken (by a Linear)", ValueError);
  CHECK_THROWS_WITH_AS(net.heads.insert<nn::Linear>("a.b", {.in_features = 1, .out_features = 1}),
                       "ModuleDict: submodule name 'a.b' must be non-empty and contain no '.'", ValueError);
  CHECK(net.heads.at<nn::Dropout>("drop").options().p == 0.5);
  int linears = 0;
  net.apply([&](nn::Module& m) { linears += m.type_name() == "Linear"; });
  CHECK(linears == 3);
  net.eval();
  CHECK_FALSE(net.heads["drop"].is_training());
  Tensor held = net.layers.at<nn::Linear>(1).weight;
  net.to(DType::f64);
  CHECK(held.dtype() == DType::f64);
  CHECK(net.layers.modules().size() == 2);
  nn::ModuleList list(std::make_unique<nn::Linear>(nn::Linear::Options{.in_features = 1, .out_features = 1}),
                      std::make_unique<nn::Dropout>());
  CHECK(list.size() == 2);
  CHECK(names_of(list) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(list.emplace_back<nn::Dropout>(nn::Dropout::Options{.p = 0.2}).options().p == 0.2);
  CHECK_THROWS_WITH_AS(list.at<nn::Linear>(1), "ModuleList[1]: the module is a Dropout, not the type asked for", Error);
  // load_state_dict by PyTorch's names
  std::map<std::string, Tensor> state = net.state_dict();
  state["layers.1.bias"] = tensor({7, 8}, {.dtype = DType::f64});
  net.load_state_dict(state);
  CHECK(net.layers.at<nn::Linear>(1).bias.to_vector<double>() == std::vector<double>{7, 8});
}
