// Driver for tests/parity/test_optim_torch.py (seqgrad losses, optimizers, clipping and schedulers
// vs PyTorch 1.13):   optim_parity IN OUT
// IN (written by the Python script) holds the cases' tensors and, in its metadata "cases", a JSON
// list of case specs, each {"name": ..., "kind": "loss" | "optimizer" | "clip" | "scheduler", ...}:
//   loss:      "loss" (cross_entropy | nll_loss | mse_loss), "args" {label_smoothing,
//              ignore_index, reduction, class_dim}; tensors <name>/input, <name>/target, <name>/dy.
//              OUT: <name>/out, <name>/grad (of the input).
//   optimizer: "optimizer" (SGD | Adam | AdamW), "groups" [{"params": [k...], "options": {...}}],
//              "steps"; tensors <name>/p<k> (initial values) and <name>/g<step>/<k> (the gradient
//              of parameter k at that step; absent: no gradient that step).
//              OUT: <name>/p<k>/s<step>, the parameters after every step.
//   clip:      "norm_type" (a number or "inf"), "max_norm"; tensors <name>/g<k>.
//              OUT: <name>/total (0-d f64), <name>/g<k> (clipped).
//   scheduler: "scheduler" spec (see make_scheduler), "base_lrs", "steps", optional tensor
//              <name>/metrics (ReduceLROnPlateau). OUT: <name>/lrs (steps, groups) f64, the
//              rates before each optimizer step (row 0: right after construction).
// A case that throws is listed with its message in OUT's metadata "errors"; the others still run.
// Exit status: 0 when OUT was written, 1 on I/O errors, 2 on bad usage.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using nlohmann::json;
using namespace seqgrad;

namespace {

using Tensors = std::map<std::string, Tensor>;

const Tensor& get(const Tensors& in, const std::string& key) {
  auto it = in.find(key);
  if (it == in.end()) throw ValueError("optim_parity: missing input tensor " + key);
  return it->second;
}

nn::Reduction reduction_arg(const std::string& r) {
  if (r == "none") return nn::Reduction::none;
  if (r == "sum") return nn::Reduction::sum;
  if (r == "mean") return nn::Reduction::mean;
  throw ValueError("optim_parity: unknown reduction " + r);
}

void run_loss(const json& c, const std::string& name, const Tensors& in, Tensors& out) {
  Tensor input = get(in, name + "/input").clone().requires_grad_();
  const Tensor& target = get(in, name + "/target");
  const json& a = c.at("args");
  nn::Reduction reduction = reduction_arg(a.value("reduction", "mean"));
  const std::string loss = c.at("loss");
  Tensor y;
  if (loss == "cross_entropy") {
    y = nn::cross_entropy(input, target, {.label_smoothing = a.value("label_smoothing", 0.0),
                                          .ignore_index = a.value("ignore_index", int64_t{-100}),
                                          .reduction = reduction,
                                          .class_dim = a.value("class_dim", int64_t{-1})});
  } else if (loss == "nll_loss") {
    y = nn::nll_loss(input, target, {.ignore_index = a.value("ignore_index", int64_t{-100}), .reduction = reduction,
                                     .class_dim = a.value("class_dim", int64_t{-1})});
  } else if (loss == "mse_loss") {
    y = nn::mse_loss(input, target, reduction);
  } else {
    throw ValueError("optim_parity: unknown loss " + loss);
  }
  y.backward(get(in, name + "/dy"));
  out[name + "/out"] = y.detach();
  out[name + "/grad"] = input.grad();
}

template <class Options>
Options sgd_options(const json& o) {
  return {.lr = o.at("lr"), .momentum = o.value("momentum", 0.0), .dampening = o.value("dampening", 0.0),
          .weight_decay = o.value("weight_decay", 0.0), .nesterov = o.value("nesterov", false)};
}

template <class Options>
Options adam_options(const json& o, double default_weight_decay) {
  std::array<double, 2> betas{0.9, 0.999};
  if (o.contains("betas")) betas = {o.at("betas")[0].get<double>(), o.at("betas")[1].get<double>()};
  return {.lr = o.at("lr"), .betas = betas, .eps = o.value("eps", 1e-8),
          .weight_decay = o.value("weight_decay", default_weight_decay), .amsgrad = o.value("amsgrad", false)};
}

void run_optimizer(const json& c, const std::string& name, const Tensors& in, Tensors& out) {
  std::vector<Tensor> params;
  for (size_t k = 0;; ++k) {
    auto it = in.find(fmt::format("{}/p{}", name, k));
    if (it == in.end()) break;
    params.push_back(it->second.clone().requires_grad_());
  }
  const std::string type = c.at("optimizer");
  std::unique_ptr<optim::Optimizer> opt;
  if (type == "SGD") {
    std::vector<optim::SGD::Group> groups;
    for (const json& g : c.at("groups")) {
      std::vector<Tensor> ps;
      for (int k : g.at("params")) ps.push_back(params.at(static_cast<size_t>(k)));
      groups.push_back({ps, sgd_options<optim::SGDOptions>(g.at("options"))});
    }
    opt = std::make_unique<optim::SGD>(groups);
  } else if (type == "Adam") {
    std::vector<optim::Adam::Group> groups;
    for (const json& g : c.at("groups")) {
      std::vector<Tensor> ps;
      for (int k : g.at("params")) ps.push_back(params.at(static_cast<size_t>(k)));
      groups.push_back({ps, adam_options<optim::AdamOptions>(g.at("options"), 0.0)});
    }
    opt = std::make_unique<optim::Adam>(groups);
  } else if (type == "AdamW") {
    std::vector<optim::AdamW::Group> groups;
    for (const json& g : c.at("groups")) {
      std::vector<Tensor> ps;
      for (int k : g.at("params")) ps.push_back(params.at(static_cast<size_t>(k)));
      groups.push_back({ps, adam_options<optim::AdamWOptions>(g.at("options"), 1e-2)});
    }
    opt = std::make_unique<optim::AdamW>(groups);
  } else {
    throw ValueError("optim_parity: unknown optimizer " + type);
  }
  const int steps = c.at("steps");
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    for (size_t k = 0; k < params.size(); ++k) {
      auto it = in.find(fmt::format("{}/g{}/{}", name, s, k));
      if (it != in.end()) params[k].set_grad(it->second.clone());
    }
    opt->step();
    for (size_t k = 0; k < params.size(); ++k) out[fmt::format("{}/p{}/s{}", name, k, s)] = params[k].detach().clone();
  }
}

void run_clip(const json& c, const std::string& name, const Tensors& in, Tensors& out) {
  std::vector<Tensor> params;
  for (size_t k = 0;; ++k) {
    auto it = in.find(fmt::format("{}/g{}", name, k));
    if (it == in.end()) break;
    Tensor p = zeros_like(it->second).requires_grad_();
    p.set_grad(it->second.clone());
    params.push_back(p);
  }
  const json& nt = c.at("norm_type");
  double norm_type = nt.is_string() ? optim::kInfNorm : nt.get<double>();
  double total = optim::clip_grad_norm_(params, c.at("max_norm"), norm_type);
  out[name + "/total"] = scalar_tensor(total, {.dtype = DType::f64});
  for (size_t k = 0; k < params.size(); ++k) out[fmt::format("{}/g{}", name, k)] = params[k].grad();
}

double named_lambda(const std::string& name, int64_t e) {
  const double x = static_cast<double>(e);
  if (name == "inverse") return 1.0 / (x + 1.0);
  if (name == "rsqrt_warmup") return std::min((x + 1.0) / 5.0, std::sqrt(5.0 / (x + 1.0)));  // Noam-like
  if (name == "staircase") return std::pow(0.8, static_cast<double>(e / 4));
  throw ValueError("optim_parity: unknown lambda " + name);
}

std::shared_ptr<optim::LRScheduler> make_scheduler(const json& s, optim::Optimizer& opt) {
  const std::string type = s.at("type");
  if (type == "StepLR")
    return std::make_shared<optim::StepLR>(opt, optim::StepLROptions{s.at("step_size"), s.value("gamma", 0.1)});
  if (type == "MultiStepLR")
    return std::make_shared<optim::MultiStepLR>(
        opt, optim::MultiStepLROptions{s.at("milestones").get<std::vector<int64_t>>(), s.value("gamma", 0.1)});
  if (type == "ExponentialLR") return std::make_shared<optim::ExponentialLR>(opt, optim::ExponentialLROptions{s.at("gamma")});
  if (type == "CosineAnnealingLR")
    return std::make_shared<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{s.at("T_max"),
                                                                                           s.value("eta_min", 0.0)});
  if (type == "LinearLR")
    return std::make_shared<optim::LinearLR>(
        opt, optim::LinearLROptions{s.value("start_factor", 1.0 / 3.0), s.value("end_factor", 1.0),
                                    s.value("total_iters", int64_t{5})});
  if (type == "LambdaLR") {
    std::vector<optim::LambdaLR::Lambda> lambdas;
    for (const json& n : s.at("lambdas"))
      lambdas.push_back([n = n.get<std::string>()](int64_t e) { return named_lambda(n, e); });
    return std::make_shared<optim::LambdaLR>(opt, lambdas);
  }
  if (type == "SequentialLR") {
    std::vector<std::shared_ptr<optim::LRScheduler>> subs;
    for (const json& sub : s.at("schedulers")) subs.push_back(make_scheduler(sub, opt));
    return std::make_shared<optim::SequentialLR>(opt, subs, s.at("milestones").get<std::vector<int64_t>>());
  }
  throw ValueError("optim_parity: unknown scheduler " + type);
}

void run_scheduler(const json& c, const std::string& name, const Tensors& in, Tensors& out) {
  std::vector<optim::SGD::Group> groups;
  for (double lr : c.at("base_lrs")) groups.push_back({{zeros({1}).requires_grad_()}, {.lr = lr}});
  optim::SGD opt(groups);
  const json& s = c.at("scheduler");
  const int steps = c.at("steps");
  const size_t n_groups = groups.size();
  std::vector<double> lrs;
  auto record = [&] {
    for (size_t g = 0; g < n_groups; ++g) lrs.push_back(opt.lr(g));
  };
  if (s.at("type") == "ReduceLROnPlateau") {
    optim::ReduceLROnPlateauOptions o{
        .mode = s.value("mode", "min") == "min" ? optim::PlateauMode::min : optim::PlateauMode::max,
        .factor = s.value("factor", 0.1),
        .patience = s.value("patience", int64_t{10}),
        .threshold = s.value("threshold", 1e-4),
        .threshold_mode = s.value("threshold_mode", "rel") == "rel" ? optim::ThresholdMode::rel
                                                                     : optim::ThresholdMode::abs,
        .cooldown = s.value("cooldown", int64_t{0}),
        .min_lrs = s.value("min_lr", std::vector<double>{}),
        .eps = s.value("eps", 1e-8)};
    optim::ReduceLROnPlateau sched(opt, o);
    std::vector<double> metrics = get(in, name + "/metrics").to_vector<double>();
    record();
    for (int i = 1; i < steps; ++i) {
      opt.step();
      sched.step(metrics.at(static_cast<size_t>(i - 1)));
      record();
    }
  } else {
    auto sched = make_scheduler(s, opt);
    record();
    for (int i = 1; i < steps; ++i) {
      opt.step();
      sched->step();
      record();
    }
  }
  out[name + "/lrs"] = from_vector(lrs, {steps, static_cast<int64_t>(n_groups)}, {.dtype = DType::f64});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: optim_parity IN OUT\n");
    return 2;
  }
  try {
    TensorFile file = load_tensors(argv[1]);
    json cases = json::parse(file.metadata.at("cases"));
    Tensors out;
    json errors = json::object();
    for (const json& c : cases) {
      const std::string name = c.at("name");
      try {
        const std::string kind = c.at("kind");
        if (kind == "loss") run_loss(c, name, file.tensors, out);
        else if (kind == "optimizer") run_optimizer(c, name, file.tensors, out);
        else if (kind == "clip") run_clip(c, name, file.tensors, out);
        else if (kind == "scheduler") run_scheduler(c, name, file.tensors, out);
        else throw ValueError("optim_parity: unknown kind " + kind);
      } catch (const std::exception& e) {
        errors[name] = e.what();
      }
    }
    save_tensors(argv[2], out, {{"errors", errors.dump()}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_parity: %s\n", e.what());
    return 1;
  }
  return 0;
}
