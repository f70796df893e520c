// Driver for tests/parity/test_ops_torch.py (seqgrad ops vs PyTorch):
//   ops_parity IN OUT
// IN (written by the Python script) holds, for every case, its input tensors and upstream
// gradients, and in its metadata "cases" a JSON list of case specs:
//   {"name": "matmul/3d@2d/f64", "op": "matmul", "args": {...},
//    "inputs": [{"key": "<name>/in0", "grad": true, "view": [["transpose", 0, 1]]}, ...],
//    "dys": ["<name>/dy0", null, ...],   one per output (null: not differentiated)
//    "order": 1 or 2, "ddys": [...]}     order 2: also the gradient of sum(grad_i * ddy_i)
// Each input is loaded as a leaf (requiring grad when "grad" is set), "view" is applied to it
// (so the op sees a non-contiguous view and the gradient flows back through the view), the op
// runs, and backward runs with the dys. OUT gets "<name>/out<k>", "<name>/grad<i>" (the leaf's
// gradient; absent when none reached it) and for order 2 "<name>/grad2_<i>"; a case that throws
// is listed with its message in OUT's metadata "errors" (a JSON object) and the others still run.
// Exit status: 0 when OUT was written (per-case errors included), 1 on I/O errors, 2 on bad usage.
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/serialize.h"
#include "ops/ops.h"

using nlohmann::json;
using namespace seqgrad;

namespace {

using Tensors = std::vector<Tensor>;
using OpFn = std::function<Tensors(const Tensors& x, const json& args)>;

Shape shape_arg(const json& j) { return Shape(j.get<std::vector<int64_t>>()); }
int64_t int_arg(const json& args, const char* key) { return args.at(key).get<int64_t>(); }
double num_arg(const json& args, const char* key) { return args.at(key).get<double>(); }
bool flag_arg(const json& args, const char* key, bool fallback = false) {
  return args.contains(key) ? args.at(key).get<bool>() : fallback;
}
Shape dims_arg(const json& args) { return args.contains("dims") ? shape_arg(args.at("dims")) : Shape{}; }
DType dtype_arg(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "float64") return DType::f64;
  if (name == "int64") return DType::i64;
  if (name == "bool") return DType::b8;
  throw ValueError("ops_parity: unknown dtype " + name);
}

// The op table: each entry calls seqgrad exactly as the Python side calls torch.
std::map<std::string, OpFn> make_ops() {
  std::map<std::string, OpFn> ops;
  auto unary = [&](const char* name, Tensor (*f)(const Tensor&)) {
    ops[name] = [f](const Tensors& x, const json&) -> Tensors { return {f(x[0])}; };
  };
  auto binary = [&](const char* name, Tensor (*f)(const Tensor&, const Tensor&)) {
    ops[name] = [f](const Tensors& x, const json&) -> Tensors { return {f(x[0], x[1])}; };
  };

  // element-wise
  binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
  binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  binary("div", [](const Tensor& a, const Tensor& b) { return div(a, b); });
  binary("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); });
  binary("operators", [](const Tensor& a, const Tensor& b) { return (a + b) * a - b / (a * a + 1.0) - (-a); });
  ops["add_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {add(x[0], num_arg(a, "s"))}; };
  ops["mul_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {mul(x[0], num_arg(a, "s"))}; };
  ops["sub_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {x[0] - num_arg(a, "s")}; };
  ops["rsub_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {num_arg(a, "s") - x[0]}; };
  ops["div_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {x[0] / num_arg(a, "s")}; };
  ops["rdiv_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {num_arg(a, "s") / x[0]}; };
  ops["pow_scalar"] = [](const Tensors& x, const json& a) -> Tensors { return {pow(x[0], num_arg(a, "p"))}; };
  unary("neg", [](const Tensor& x) { return neg(x); });
  unary("exp", [](const Tensor& x) { return exp(x); });
  unary("log", [](const Tensor& x) { return log(x); });
  unary("sqrt", [](const Tensor& x) { return sqrt(x); });
  unary("tanh", [](const Tensor& x) { return tanh(x); });
  unary("sigmoid", [](const Tensor& x) { return sigmoid(x); });
  unary("relu", [](const Tensor& x) { return relu(x); });
  unary("abs", [](const Tensor& x) { return abs(x); });
  ops["clamp"] = [](const Tensors& x, const json& a) -> Tensors {
    return {clamp(x[0], num_arg(a, "min"), num_arg(a, "max"))};
  };
  ops["where"] = [](const Tensors& x, const json&) -> Tensors { return {where(x[0], x[1], x[2])}; };
  ops["masked_fill"] = [](const Tensors& x, const json& a) -> Tensors {
    return {masked_fill(x[0], x[1], num_arg(a, "value"))};
  };
  ops["masked_softmax_inf"] = [](const Tensors& x, const json& a) -> Tensors {
    return {softmax(masked_fill(x[0], x[1], -INFINITY), int_arg(a, "dim"))};
  };
  binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  unary("log1p", [](const Tensor& x) { return log1p(x); });
  unary("expm1", [](const Tensor& x) { return expm1(x); });
  unary("erf", [](const Tensor& x) { return erf(x); });
  unary("log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); });
  unary("silu", [](const Tensor& x) { return silu(x); });
  unary("hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); });
  unary("hardswish", [](const Tensor& x) { return hardswish(x); });
  unary("mish", [](const Tensor& x) { return mish(x); });
  ops["softplus"] = [](const Tensors& x, const json& a) -> Tensors {
    return {softplus(x[0], num_arg(a, "beta"), num_arg(a, "threshold"))};
  };
  ops["gelu"] = [](const Tensors& x, const json& a) -> Tensors {
    return {gelu(x[0], a.value("approximate", "none") == "tanh" ? GeluApproximate::tanh : GeluApproximate::none)};
  };
  ops["where_scalar"] = [](const Tensors& x, const json& a) -> Tensors {
    return {where(x[0], x[1], num_arg(a, "s")), where(x[0], num_arg(a, "s"), x[1])};
  };
  binary("tanh_backward", [](const Tensor& dy, const Tensor& y) { return tanh_backward(dy, y); });
  binary("sigmoid_backward", [](const Tensor& dy, const Tensor& y) { return sigmoid_backward(dy, y); });
  binary("relu_backward", [](const Tensor& dy, const Tensor& x) { return relu_backward(dy, x); });

  // comparisons and logic (forward only)
  binary("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); });
  binary("ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); });
  binary("lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); });
  binary("le", [](const Tensor& a, const Tensor& b) { return le(a, b); });
  binary("gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); });
  binary("ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); });
  ops["compare_scalar"] = [](const Tensors& x, const json& a) -> Tensors {
    double s = num_arg(a, "s");
    return {eq(x[0], s), ne(x[0], s), lt(x[0], s), le(x[0], s), gt(x[0], s), ge(x[0], s)};
  };
  unary("logical_not", [](const Tensor& x) { return logical_not(x); });
  binary("logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); });
  binary("logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); });
  unary("isfinite", [](const Tensor& x) { return isfinite(x); });
  binary("logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); });
  // the operators: every comparison of two tensors and with a scalar on either side, then logic
  ops["compare_operators"] = [](const Tensors& x, const json& a) -> Tensors {
    const Tensor &p = x[0], &q = x[1];
    double s = num_arg(a, "s");
    return {p == q, p != q, p < q, p <= q, p > q, p >= q, p == s, s != p, p < s, s <= p, p > s, s >= p};
  };
  ops["logic_operators"] = [](const Tensors& x, const json&) -> Tensors {
    return {~x[0], x[0] & x[1], x[0] | x[1], x[0] ^ x[1]};
  };

  // reductions
  ops["sum"] = [](const Tensors& x, const json& a) -> Tensors { return {sum(x[0], dims_arg(a), flag_arg(a, "keepdim"))}; };
  ops["mean"] = [](const Tensors& x, const json& a) -> Tensors { return {mean(x[0], dims_arg(a), flag_arg(a, "keepdim"))}; };
  ops["max_all"] = [](const Tensors& x, const json&) -> Tensors { return {max(x[0])}; };
  ops["max_dim"] = [](const Tensors& x, const json& a) -> Tensors {
    auto [values, indices] = max(x[0], int_arg(a, "dim"), flag_arg(a, "keepdim"));
    return {values, indices};
  };
  ops["min_dim"] = [](const Tensors& x, const json& a) -> Tensors {
    auto [values, indices] = min(x[0], int_arg(a, "dim"), flag_arg(a, "keepdim"));
    return {values, indices};
  };
  ops["sort"] = [](const Tensors& x, const json& a) -> Tensors {
    auto [values, indices] = sort(x[0], int_arg(a, "dim"), flag_arg(a, "descending"));
    return {values, indices};
  };
  ops["amax"] = [](const Tensors& x, const json& a) -> Tensors { return {amax(x[0], dims_arg(a), flag_arg(a, "keepdim"))}; };
  ops["amin"] = [](const Tensors& x, const json& a) -> Tensors { return {amin(x[0], dims_arg(a), flag_arg(a, "keepdim"))}; };
  ops["argmax"] = [](const Tensors& x, const json& a) -> Tensors {
    return {argmax(x[0], int_arg(a, "dim"), flag_arg(a, "keepdim"))};
  };
  ops["argmin"] = [](const Tensors& x, const json& a) -> Tensors {
    return {argmin(x[0], int_arg(a, "dim"), flag_arg(a, "keepdim"))};
  };
  ops["logsumexp"] = [](const Tensors& x, const json& a) -> Tensors {
    return {logsumexp(x[0], dims_arg(a), flag_arg(a, "keepdim"))};
  };
  ops["sum_to"] = [](const Tensors& x, const json& a) -> Tensors { return {sum_to(x[0], shape_arg(a.at("shape")))}; };
  ops["topk"] = [](const Tensors& x, const json& a) -> Tensors {
    auto [values, indices] = topk(x[0], int_arg(a, "k"), int_arg(a, "dim"), flag_arg(a, "largest", true));
    return {values, indices};
  };

  // linear algebra
  binary("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  binary("bmm", [](const Tensor& a, const Tensor& b) { return bmm(a, b); });
  ops["linear"] = [](const Tensors& x, const json&) -> Tensors {
    return {linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor())};
  };

  // softmax family
  ops["softmax"] = [](const Tensors& x, const json& a) -> Tensors { return {softmax(x[0], int_arg(a, "dim"))}; };
  ops["log_softmax"] = [](const Tensors& x, const json& a) -> Tensors { return {log_softmax(x[0], int_arg(a, "dim"))}; };

  // shape
  ops["view"] = [](const Tensors& x, const json& a) -> Tensors { return {view(x[0], shape_arg(a.at("shape")))}; };
  ops["reshape"] = [](const Tensors& x, const json& a) -> Tensors { return {reshape(x[0], shape_arg(a.at("shape")))}; };
  ops["permute"] = [](const Tensors& x, const json& a) -> Tensors { return {permute(x[0], shape_arg(a.at("dims")))}; };
  ops["transpose"] = [](const Tensors& x, const json& a) -> Tensors {
    return {transpose(x[0], int_arg(a, "dim0"), int_arg(a, "dim1"))};
  };
  ops["squeeze"] = [](const Tensors& x, const json& a) -> Tensors { return {squeeze(x[0], int_arg(a, "dim"))}; };
  ops["unsqueeze"] = [](const Tensors& x, const json& a) -> Tensors { return {unsqueeze(x[0], int_arg(a, "dim"))}; };
  ops["expand"] = [](const Tensors& x, const json& a) -> Tensors { return {expand(x[0], shape_arg(a.at("shape")))}; };
  ops["narrow"] = [](const Tensors& x, const json& a) -> Tensors {
    return {narrow(x[0], int_arg(a, "dim"), int_arg(a, "start"), int_arg(a, "length"))};
  };
  ops["slice"] = [](const Tensors& x, const json& a) -> Tensors {
    return {slice(x[0], int_arg(a, "dim"), int_arg(a, "start"), int_arg(a, "end"), int_arg(a, "step"))};
  };
  ops["select"] = [](const Tensors& x, const json& a) -> Tensors {
    return {select(x[0], int_arg(a, "dim"), int_arg(a, "index"))};
  };
  unary("contiguous", [](const Tensor& x) { return contiguous(x); });
  unary("clone", [](const Tensor& x) { return clone(x); });
  unary("t", [](const Tensor& x) { return x.t(); });
  ops["to_dtype"] = [](const Tensors& x, const json& a) -> Tensors {
    return {to_dtype(x[0], dtype_arg(a.at("dtype").get<std::string>()))};
  };
  ops["flatten"] = [](const Tensors& x, const json& a) -> Tensors {
    return {x[0].flatten(int_arg(a, "start"), int_arg(a, "end"))};
  };
  ops["cat"] = [](const Tensors& x, const json& a) -> Tensors { return {cat(x, int_arg(a, "dim"))}; };
  ops["stack"] = [](const Tensors& x, const json& a) -> Tensors { return {stack(x, int_arg(a, "dim"))}; };
  ops["split"] = [](const Tensors& x, const json& a) -> Tensors { return split(x[0], int_arg(a, "size"), int_arg(a, "dim")); };
  ops["chunk"] = [](const Tensors& x, const json& a) -> Tensors { return chunk(x[0], int_arg(a, "chunks"), int_arg(a, "dim")); };
  ops["slice_scatter"] = [](const Tensors& x, const json& a) -> Tensors {
    return {slice_scatter(shape_arg(a.at("shape")), x[0], int_arg(a, "dim"), int_arg(a, "start"), int_arg(a, "step"))};
  };

  // indexing
  ops["index_select"] = [](const Tensors& x, const json& a) -> Tensors {
    return {index_select(x[0], int_arg(a, "dim"), x[1])};
  };
  ops["index_add"] = [](const Tensors& x, const json& a) -> Tensors {
    return {index_add(x[0], int_arg(a, "dim"), x[1], x[2])};
  };
  ops["gather"] = [](const Tensors& x, const json& a) -> Tensors { return {gather(x[0], int_arg(a, "dim"), x[1])}; };
  ops["scatter_add"] = [](const Tensors& x, const json& a) -> Tensors {
    return {scatter_add(x[0], int_arg(a, "dim"), x[1], x[2])};
  };
  ops["repeat_interleave"] = [](const Tensors& x, const json& a) -> Tensors {
    std::optional<int64_t> dim;
    if (a.contains("dim")) dim = int_arg(a, "dim");
    if (x.size() > 1) return {repeat_interleave(x[0], x[1], dim)};
    return {repeat_interleave(x[0], int_arg(a, "repeats"), dim)};
  };
  ops["embedding"] = [](const Tensors& x, const json& a) -> Tensors {
    return {embedding(x[0], x[1], a.contains("padding_idx") ? int_arg(a, "padding_idx") : -1)};
  };

  // randomness: the Python side checks consistency (kept values scaled, gradient = mask / (1 - p))
  ops["dropout"] = [](const Tensors& x, const json& a) -> Tensors {
    return {dropout(x[0], num_arg(a, "p"), flag_arg(a, "training"))};
  };

  // in-place ops on a non-leaf, recorded as their out-of-place twins
  ops["inplace_chain"] = [](const Tensors& x, const json&) -> Tensors {
    Tensor y = mul(x[0], 1.0);
    y.add_(x[1], 0.5);
    y.mul_(x[2]);
    y.masked_fill_(x[3], 0.25);
    y.clamp_(-0.8, 0.9);
    y.mul_(3.0);
    return {y};
  };

  // small composed graphs: shared inputs (gradients accumulate from several uses)
  ops["reuse"] = [](const Tensors& x, const json&) -> Tensors {
    const Tensor& a = x[0];
    return {add(mul(a, a), mul(exp(a), tanh(a))) / sum(a * a, {-1}, true)};
  };
  ops["mlp_nll"] = [](const Tensors& x, const json&) -> Tensors {
    // x: (B, I), w1: (H, I), b1: (H), w2: (C, H), b2: (C), target: (B) -> mean NLL
    Tensor h = tanh(linear(x[0], x[1], x[2]));
    Tensor logp = log_softmax(linear(h, x[3], x[4]), -1);
    return {neg(mean(gather(logp, 1, x[5].unsqueeze(1))))};
  };
  ops["attention"] = [](const Tensors& x, const json&) -> Tensors {
    // q: (B, Q, D), k: (B, K, D), v: (B, K, D), mask: (B, 1, K) bool (true = masked)
    Tensor scores = matmul(x[0], x[1].transpose(1, 2)) / std::sqrt(static_cast<double>(x[0].size(-1)));
    Tensor weights = softmax(masked_fill(scores, x[3], -1e9), -1);
    return {bmm(weights, x[2]), weights};
  };
  return ops;
}

Tensor apply_view(Tensor t, const json& steps) {
  for (const json& step : steps) {
    std::string kind = step.at(0).get<std::string>();
    if (kind == "transpose") t = transpose(t, step.at(1).get<int64_t>(), step.at(2).get<int64_t>());
    else if (kind == "permute") t = permute(t, shape_arg(step.at(1)));
    else if (kind == "slice")
      t = slice(t, step.at(1).get<int64_t>(), step.at(2).get<int64_t>(), step.at(3).get<int64_t>(),
                step.at(4).get<int64_t>());
    else if (kind == "expand") t = expand(t, shape_arg(step.at(1)));
    else if (kind == "select") t = select(t, step.at(1).get<int64_t>(), step.at(2).get<int64_t>());
    else if (kind == "unsqueeze") t = unsqueeze(t, step.at(1).get<int64_t>());
    else throw ValueError("ops_parity: unknown view step " + kind);
  }
  return t;
}

// Runs one case, adding its results to `out`.
void run_case(const json& spec, const std::map<std::string, OpFn>& ops, const TensorFile& in,
              std::map<std::string, Tensor>& out) {
  const std::string name = spec.at("name").get<std::string>();
  auto op = ops.find(spec.at("op").get<std::string>());
  if (op == ops.end()) throw ValueError("ops_parity: no such op " + spec.at("op").get<std::string>());
  auto tensor_at = [&](const std::string& key) {
    auto it = in.tensors.find(key);
    if (it == in.tensors.end()) throw ValueError("ops_parity: input file lacks " + key);
    return clone(it->second);  // a private leaf per case
  };

  Tensors leaves, xs;
  for (const json& input : spec.at("inputs")) {
    Tensor leaf = tensor_at(input.at("key").get<std::string>());
    if (input.value("grad", false)) leaf.requires_grad_();
    leaves.push_back(leaf);
    xs.push_back(input.contains("view") ? apply_view(leaf, input.at("view")) : leaf);
  }
  const json args = spec.value("args", json::object());
  Tensors ys = op->second(xs, args);
  for (size_t k = 0; k < ys.size(); ++k) out[fmt::format("{}/out{}", name, k)] = ys[k].detach();

  Tensors roots, dys;
  const json dy_keys = spec.value("dys", json::array());
  for (size_t k = 0; k < dy_keys.size() && k < ys.size(); ++k) {
    if (dy_keys[k].is_null()) continue;
    roots.push_back(ys[k]);
    dys.push_back(tensor_at(dy_keys[k].get<std::string>()));
  }
  if (roots.empty()) return;

  Tensors wanted;
  std::vector<size_t> wanted_index;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (leaves[i].requires_grad()) wanted.push_back(leaves[i]), wanted_index.push_back(i);

  if (spec.value("order", 1) == 1) {
    // The user's path: backward() accumulating into .grad.
    autograd::backward(roots, dys);
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].requires_grad() && leaves[i].grad().defined())
        out[fmt::format("{}/grad{}", name, i)] = leaves[i].grad();
    return;
  }
  // Order 2: first gradients with create_graph, then the gradient of Σ_i <grad_i, ddy_i>.
  Tensors grads = autograd::grad(roots, wanted, dys, {.create_graph = true, .allow_unused = true});
  Tensors second_roots, ddys;
  const json ddy_keys = spec.at("ddys");
  for (size_t j = 0; j < grads.size(); ++j) {
    size_t i = wanted_index[j];
    if (!grads[j].defined()) continue;
    out[fmt::format("{}/grad{}", name, i)] = grads[j].detach();
    if (grads[j].requires_grad() && !ddy_keys.at(i).is_null()) {
      second_roots.push_back(grads[j]);
      ddys.push_back(tensor_at(ddy_keys.at(i).get<std::string>()));
    }
  }
  if (second_roots.empty()) return;
  Tensors second = autograd::grad(second_roots, wanted, ddys, {.allow_unused = true});
  for (size_t j = 0; j < second.size(); ++j)
    if (second[j].defined()) out[fmt::format("{}/grad2_{}", name, wanted_index[j])] = second[j];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    TensorFile in = load_tensors(argv[1]);
    json cases = json::parse(in.metadata.at("cases"));
    const auto ops = make_ops();
    std::map<std::string, Tensor> out;
    json errors = json::object();
    for (const json& spec : cases) {
      std::string name = spec.at("name").get<std::string>();
      std::map<std::string, Tensor> results;
      try {
        run_case(spec, ops, in, results);
        out.insert(results.begin(), results.end());
      } catch (const std::exception& e) {
        errors[name] = e.what();
      }
    }
    save_tensors(argv[2], out, {{"errors", errors.dump()}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_parity: %s\n", e.what());
    return 1;
  }
  return 0;
}
