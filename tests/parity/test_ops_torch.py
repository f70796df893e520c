#!/usr/bin/python3
"""Parity of seqgrad's ops (ops/ops.h) with PyTorch: outputs and gradients, float32 and float64.

Usage: test_ops_torch.py PATH/TO/ops_parity [-k SUBSTRING] [-v]

Needs only Debian's python3-torch (1.13) and python3-numpy. For every case this script draws
inputs and upstream gradients with a fixed seed, writes them to a safetensors file, runs
ops_parity (which runs the op in seqgrad and backpropagates), reads its outputs and gradients
back, and compares them with torch's:

    |seqgrad - torch| <= atol + rtol * |torch|     elementwise, for outputs and every gradient
    rtol = 1e-5 (float64), 1e-4 (float32)
    atol = 64 * eps(dtype) * max(1, max |torch|)   (1.4e-14 f64, 7.6e-6 f32, per unit of scale)

The atol term only matters for values near 0 that come out of cancellation (a sum of terms of
size ~scale whose exact value is ~0 carries a rounding error of a few eps * scale in any
summation order); elsewhere the rtol term dominates. Integer and bool results must be equal.
NaN and infinities must sit at the same positions (and infinities have the same sign).

Inputs are kept away from kinks (relu/abs at 0, clamp bounds, ties in max) except in cases named
"kink" that pin down the conventions at the kink, which are deterministic: PyTorch's relu'(0) = 0,
sign(0) = 0, clamp passing the gradient at the bounds, and max over a dim sending it to the first
maximal element.

Prints one line per case and a last line "N passed, M failed"; exit status 1 on any failure.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

from safetensors_io import load_safetensors, save_safetensors

torch.set_num_threads(1)

RTOL = {torch.float32: 1e-4, torch.float64: 1e-5}
ATOL_EPS = 64  # atol = ATOL_EPS * eps(dtype) * max(1, max |reference|)


# ---------------------------------------------------------------------------------------------
# Input generators (float64 values; each case is run in float32 and float64 from the same draw).

GEN = torch.Generator().manual_seed(20240611)


def randn(*shape):
    return torch.randn(tuple(shape), generator=GEN, dtype=torch.float64)


def uniform(lo, hi, *shape):
    return lo + (hi - lo) * torch.rand(tuple(shape), generator=GEN, dtype=torch.float64)


def away(*shape, lo=0.2, hi=2.0):
    """Values with |x| in [lo, hi) and random sign: away from the kink at 0."""
    sign = torch.where(torch.rand(tuple(shape), generator=GEN) < 0.5, -1.0, 1.0).double()
    return sign * uniform(lo, hi, *shape)


def distinct(*shape):
    """Distinct values on a grid of 0.1 (no ties, in float32 too), in random order."""
    n = math.prod(shape)
    perm = torch.randperm(n, generator=GEN).double()
    return ((perm - n / 2) * 0.1 + 0.025).reshape(shape)


def grid(*shape, lo=-20, hi=20, step=0.25):
    """Values on a coarse grid (for comparisons with equal entries, exact in float32)."""
    return torch.randint(lo, hi, shape, generator=GEN).double() * step


def index(high, *shape):
    return torch.randint(0, high, shape, generator=GEN, dtype=torch.int64)


def mask(*shape, p=0.5):
    return torch.rand(tuple(shape), generator=GEN) < p


# ---------------------------------------------------------------------------------------------
# The torch side of every op (the C++ side is the table in ops_parity.cpp).

def dims_of(x, args):
    dims = args.get("dims", [])
    return dims if dims else list(range(x.dim()))


def reduce_all_or(fn, x, args):
    if x.dim() == 0:
        return fn(x)
    return fn(x, dims_of(x, args), args.get("keepdim", False))


def slice_view(x, dim, start, end, step):
    index_tuple = (slice(None),) * (dim % x.dim()) + (slice(start, end, step),)
    return x[index_tuple]


def inplace_chain(x):
    y = x[0] * 1.0
    y.add_(x[1], alpha=0.5)
    y.mul_(x[2])
    y.masked_fill_(x[3], 0.25)
    y.clamp_(-0.8, 0.9)
    y.mul_(3.0)
    return [y]


def mlp_nll(x):
    h = torch.tanh(F.linear(x[0], x[1], x[2]))
    logp = torch.log_softmax(F.linear(h, x[3], x[4]), -1)
    return [-logp.gather(1, x[5].unsqueeze(1)).mean()]


def attention(x):
    scores = x[0] @ x[1].transpose(1, 2) / math.sqrt(x[0].shape[-1])
    weights = torch.softmax(scores.masked_fill(x[3], -1e9), -1)
    return [torch.bmm(weights, x[2]), weights]


TORCH_OPS = {
    "add": lambda x, a: [x[0] + x[1]],
    "sub": lambda x, a: [x[0] - x[1]],
    "mul": lambda x, a: [x[0] * x[1]],
    "div": lambda x, a: [x[0] / x[1]],
    "pow": lambda x, a: [torch.pow(x[0], x[1])],
    "operators": lambda x, a: [(x[0] + x[1]) * x[0] - x[1] / (x[0] * x[0] + 1.0) - (-x[0])],
    "add_scalar": lambda x, a: [x[0] + a["s"]],
    "mul_scalar": lambda x, a: [x[0] * a["s"]],
    "sub_scalar": lambda x, a: [x[0] - a["s"]],
    "rsub_scalar": lambda x, a: [a["s"] - x[0]],
    "div_scalar": lambda x, a: [x[0] / a["s"]],
    "rdiv_scalar": lambda x, a: [a["s"] / x[0]],
    "pow_scalar": lambda x, a: [x[0] ** a["p"]],
    "neg": lambda x, a: [-x[0]],
    "exp": lambda x, a: [torch.exp(x[0])],
    "log": lambda x, a: [torch.log(x[0])],
    "sqrt": lambda x, a: [torch.sqrt(x[0])],
    "tanh": lambda x, a: [torch.tanh(x[0])],
    "sigmoid": lambda x, a: [torch.sigmoid(x[0])],
    "relu": lambda x, a: [torch.relu(x[0])],
    "abs": lambda x, a: [torch.abs(x[0])],
    "clamp": lambda x, a: [torch.clamp(x[0], a["min"], a["max"])],
    "where": lambda x, a: [torch.where(x[0], x[1], x[2])],
    "masked_fill": lambda x, a: [x[0].masked_fill(x[1], a["value"])],
    "masked_softmax_inf": lambda x, a: [torch.softmax(x[0].masked_fill(x[1], -math.inf), a["dim"])],
    "maximum": lambda x, a: [torch.maximum(x[0], x[1])],
    "minimum": lambda x, a: [torch.minimum(x[0], x[1])],
    "log1p": lambda x, a: [torch.log1p(x[0])],
    "expm1": lambda x, a: [torch.expm1(x[0])],
    "erf": lambda x, a: [torch.erf(x[0])],
    "log_sigmoid": lambda x, a: [F.logsigmoid(x[0])],
    "silu": lambda x, a: [F.silu(x[0])],
    "hardsigmoid": lambda x, a: [F.hardsigmoid(x[0])],
    "hardswish": lambda x, a: [F.hardswish(x[0])],
    "mish": lambda x, a: [F.mish(x[0])],
    "softplus": lambda x, a: [F.softplus(x[0], a["beta"], a["threshold"])],
    "gelu": lambda x, a: [F.gelu(x[0], approximate=a.get("approximate", "none"))],
    "where_scalar": lambda x, a: [torch.where(x[0], x[1], a["s"]), torch.where(x[0], a["s"], x[1])],
    "tanh_backward": lambda x, a: [torch.ops.aten.tanh_backward(x[0], x[1])],
    "sigmoid_backward": lambda x, a: [torch.ops.aten.sigmoid_backward(x[0], x[1])],
    "relu_backward": lambda x, a: [torch.ops.aten.threshold_backward(x[0], x[1], 0)],
    "eq": lambda x, a: [torch.eq(x[0], x[1])],
    "ne": lambda x, a: [torch.ne(x[0], x[1])],
    "lt": lambda x, a: [torch.lt(x[0], x[1])],
    "le": lambda x, a: [torch.le(x[0], x[1])],
    "gt": lambda x, a: [torch.gt(x[0], x[1])],
    "ge": lambda x, a: [torch.ge(x[0], x[1])],
    "compare_scalar": lambda x, a: [f(x[0], a["s"]) for f in (torch.eq, torch.ne, torch.lt, torch.le,
                                                               torch.gt, torch.ge)],
    "logical_not": lambda x, a: [torch.logical_not(x[0])],
    "logical_and": lambda x, a: [torch.logical_and(x[0], x[1])],
    "logical_or": lambda x, a: [torch.logical_or(x[0], x[1])],
    "isfinite": lambda x, a: [torch.isfinite(x[0])],
    "logical_xor": lambda x, a: [torch.logical_xor(x[0], x[1])],
    "compare_operators": lambda x, a: [x[0] == x[1], x[0] != x[1], x[0] < x[1], x[0] <= x[1], x[0] > x[1],
                                       x[0] >= x[1], x[0] == a["s"], a["s"] != x[0], x[0] < a["s"],
                                       a["s"] <= x[0], x[0] > a["s"], a["s"] >= x[0]],
    "logic_operators": lambda x, a: [~x[0], x[0] & x[1], x[0] | x[1], x[0] ^ x[1]],
    "sum": lambda x, a: [reduce_all_or(torch.sum, x[0], a)],
    "mean": lambda x, a: [reduce_all_or(torch.mean, x[0], a)],
    "max_all": lambda x, a: [torch.max(x[0])],
    "max_dim": lambda x, a: list(torch.max(x[0], a["dim"], a.get("keepdim", False))),
    "min_dim": lambda x, a: list(torch.min(x[0], a["dim"], a.get("keepdim", False))),
    "sort": lambda x, a: list(torch.sort(x[0], a["dim"], a.get("descending", False))),
    "amax": lambda x, a: [torch.amax(x[0], dims_of(x[0], a), a.get("keepdim", False))],
    "amin": lambda x, a: [torch.amin(x[0], dims_of(x[0], a), a.get("keepdim", False))],
    "argmax": lambda x, a: [torch.argmax(x[0], a["dim"], a.get("keepdim", False))],
    "argmin": lambda x, a: [torch.argmin(x[0], a["dim"], a.get("keepdim", False))],
    "logsumexp": lambda x, a: [torch.logsumexp(x[0], dims_of(x[0], a), a.get("keepdim", False))],
    "sum_to": lambda x, a: [x[0].sum_to_size(a["shape"])],
    "topk": lambda x, a: list(torch.topk(x[0], a["k"], a["dim"], a.get("largest", True))),
    "matmul": lambda x, a: [torch.matmul(x[0], x[1])],
    "bmm": lambda x, a: [torch.bmm(x[0], x[1])],
    "linear": lambda x, a: [F.linear(x[0], x[1], x[2] if len(x) > 2 else None)],
    "softmax": lambda x, a: [torch.softmax(x[0], a["dim"])],
    "log_softmax": lambda x, a: [torch.log_softmax(x[0], a["dim"])],
    "view": lambda x, a: [x[0].view(a["shape"])],
    "reshape": lambda x, a: [x[0].reshape(a["shape"])],
    "permute": lambda x, a: [x[0].permute(a["dims"])],
    "transpose": lambda x, a: [x[0].transpose(a["dim0"], a["dim1"])],
    "squeeze": lambda x, a: [x[0].squeeze(a["dim"])],
    "unsqueeze": lambda x, a: [x[0].unsqueeze(a["dim"])],
    "expand": lambda x, a: [x[0].expand(a["shape"])],
    "narrow": lambda x, a: [x[0].narrow(a["dim"], a["start"], a["length"])],
    "slice": lambda x, a: [slice_view(x[0], a["dim"], a["start"], a["end"], a["step"])],
    "select": lambda x, a: [x[0].select(a["dim"], a["index"])],
    "contiguous": lambda x, a: [x[0].contiguous()],
    "clone": lambda x, a: [x[0].clone()],
    "t": lambda x, a: [x[0].t()],
    "to_dtype": lambda x, a: [x[0].to(getattr(torch, a["dtype"]))],
    "flatten": lambda x, a: [x[0].flatten(a["start"], a["end"])],
    "cat": lambda x, a: [torch.cat(x, a["dim"])],
    "stack": lambda x, a: [torch.stack(x, a["dim"])],
    "split": lambda x, a: list(torch.split(x[0], a["size"], a["dim"])),
    "chunk": lambda x, a: list(torch.chunk(x[0], a["chunks"], a["dim"])),
    "slice_scatter": lambda x, a: [torch.slice_scatter(
        torch.zeros(a["shape"], dtype=x[0].dtype), x[0], a["dim"], a["start"],
        a["start"] + a["step"] * (x[0].shape[a["dim"]] - 1) + 1, a["step"])],
    "index_select": lambda x, a: [torch.index_select(x[0], a["dim"], x[1])],
    "index_add": lambda x, a: [torch.index_add(x[0], a["dim"], x[1], x[2])],
    "gather": lambda x, a: [torch.gather(x[0], a["dim"], x[1])],
    "scatter_add": lambda x, a: [torch.scatter_add(x[0], a["dim"], x[1], x[2])],
    "repeat_interleave": lambda x, a: [torch.repeat_interleave(
        x[0], x[1] if len(x) > 1 else a["repeats"], dim=a.get("dim"))],
    "embedding": lambda x, a: [F.embedding(x[1], x[0], padding_idx=a.get("padding_idx"))],
    "dropout": lambda x, a: [F.dropout(x[0], a["p"], a.get("training", False))],
    "inplace_chain": lambda x, a: inplace_chain(x),
    "reuse": lambda x, a: [(x[0] * x[0] + torch.exp(x[0]) * torch.tanh(x[0]))
                           / (x[0] * x[0]).sum(-1, keepdim=True)],
    "mlp_nll": lambda x, a: mlp_nll(x),
    "attention": lambda x, a: attention(x),
}


def apply_view(t, steps):
    for step in steps:
        kind, *rest = step
        if kind == "transpose":
            t = t.transpose(*rest)
        elif kind == "permute":
            t = t.permute(rest[0])
        elif kind == "slice":
            t = slice_view(t, *rest)
        elif kind == "expand":
            t = t.expand(rest[0])
        elif kind == "select":
            t = t.select(*rest)
        elif kind == "unsqueeze":
            t = t.unsqueeze(rest[0])
        else:
            raise ValueError(kind)
    return t


# ---------------------------------------------------------------------------------------------
# The case table.

class In:
    """One input: its values (float64 for floating inputs), whether it gets a gradient, and the
    view applied to the leaf before the op sees it."""

    def __init__(self, value, grad=None, view=None):
        self.value = value
        self.grad = value.is_floating_point() if grad is None else grad
        self.view = view or []


CASES = []  # dicts: name, op, args, inputs, dtype, order, diff (whether to backprop), check


def case(name, op, inputs, args=None, order=1, diff=True, dtypes=("float32", "float64"),
         check=None):
    inputs = [i if isinstance(i, In) else In(i) for i in inputs]
    for dtype in dtypes:
        CASES.append(dict(name=f"{op}/{name}/{dtype[5:] and 'f' + dtype[5:]}", op=op, args=args or {},
                          inputs=inputs, dtype=getattr(torch, dtype), order=order, diff=diff,
                          check=check))


def T(*steps):
    return list(steps)


def build_cases():
    # ---- element-wise binary, with broadcasting and non-contiguous operands
    pairs = {
        "same": ((3, 4), (3, 4)),
        "row": ((3, 4), (4,)),
        "col": ((2, 3, 4), (3, 1)),
        "outer": ((1, 4), (3, 1)),
        "scalar_left": ((), (2, 3)),
        "both": ((2, 1, 4), (1, 3, 1)),
    }
    for op in ("add", "sub", "mul", "div", "operators"):
        for label, (sa, sb) in pairs.items():
            b = away(*sb, lo=0.5) if op in ("div", "operators") else randn(*sb)
            case(label, op, [randn(*sa), b])
        b = away(4, 3, lo=0.5)
        case("transposed", op, [randn(3, 4), In(b, view=T(["transpose", 0, 1]))])
        case("expanded", op, [In(randn(1, 4), view=T(["expand", [3, 4]])), away(3, 4, lo=0.5)])
        case("sliced", op, [In(randn(3, 8), view=T(["slice", 1, 1, 8, 2])), away(3, 4, lo=0.5)])
    case("same", "pow", [uniform(0.5, 2.0, 3, 4), uniform(-2, 2, 3, 4)])
    case("bcast", "pow", [uniform(0.5, 2.0, 2, 3, 1), uniform(-2, 2, 4)])
    case("scalar_exp", "pow", [uniform(0.5, 2.0, 3, 4), uniform(-2, 2)])
    case("base_only", "pow", [uniform(0.5, 2.0, 3, 4), In(uniform(-2, 2, 3, 4), grad=False)])

    # ---- with a double operand
    for op, s in (("add_scalar", 1.5), ("mul_scalar", -2.5), ("sub_scalar", 0.75), ("rsub_scalar", 2.0),
                  ("div_scalar", 4.0), ("rdiv_scalar", 2.0)):
        x = away(3, 4, lo=0.5) if op == "rdiv_scalar" else randn(3, 4)
        case("s", op, [x], {"s": s})
    for p in (2.0, 3.0, 0.5, -1.5, 0.0, 1.0):
        x = uniform(0.3, 2.0, 3, 4) if p != int(p) or p < 0 else randn(3, 4)
        case(f"p{p:g}", "pow_scalar", [x], {"p": p})

    # ---- element-wise unary (contiguous, a strided view, a 0-d tensor)
    domains = {"log": lambda *s: uniform(0.1, 3.0, *s), "sqrt": lambda *s: uniform(0.1, 3.0, *s),
               "relu": away, "abs": away}
    for op in ("neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs"):
        draw = domains.get(op, randn)
        case("2d", op, [draw(3, 5)])
        case("strided", op, [In(draw(4, 6), view=T(["transpose", 0, 1], ["slice", 0, 0, 6, 2]))])
        case("0d", op, [draw()])
    case("kink", "relu", [torch.tensor([-1.0, 0.0, 0.0, 2.0])])
    case("kink", "abs", [torch.tensor([-1.0, 0.0, 0.5, -0.0])])
    x = (torch.randint(-40, 40, (4, 6), generator=GEN).double() + 0.5) * 0.05  # k/20 + 1/40: never a bound
    case("inside_outside", "clamp", [x], {"min": -0.8, "max": 0.9})
    case("kink", "clamp", [torch.tensor([-1.0, -0.5, 0.0, 1.0, 1.5])], {"min": -0.5, "max": 1.0})
    case("bcast", "where", [mask(3, 1), randn(3, 4), randn(4)])
    case("same", "where", [mask(2, 3), randn(2, 3), randn(2, 3)])
    case("bcast", "masked_fill", [randn(2, 3, 4), mask(3, 1)], {"value": 0.5})
    case("big_negative", "masked_fill", [randn(2, 5), mask(2, 5)], {"value": -1e9})
    m = mask(3, 5, p=0.4)
    m[:, 0] = False  # no fully masked row
    case("dim1", "masked_softmax_inf", [randn(3, 5), m], {"dim": 1})
    y = uniform(-0.9, 0.9, 3, 4)
    case("fused", "tanh_backward", [randn(3, 4), y])
    case("fused", "sigmoid_backward", [randn(3, 4), uniform(0.05, 0.95, 3, 4)])
    case("fused", "relu_backward", [randn(3, 4), torch.tensor([[-1.0, 0.0, 0.5, 2.0]] * 3)])

    # ---- element-wise max/min (ties on a grid: the gradient splits evenly) and the activations
    for op in ("maximum", "minimum"):
        case("bcast", op, [randn(3, 4), randn(4)])
        case("outer_view", op, [In(randn(4, 3), view=T(["transpose", 0, 1])), randn(3, 1)])
        case("ties", op, [grid(3, 4, lo=-2, hi=2), grid(3, 4, lo=-2, hi=2)])
        case("nan", op, [torch.tensor([math.nan, 1.0, 2.0]), torch.tensor([0.0, math.nan, 1.0])], diff=False)
    for op, draw in (("log1p", lambda *s: uniform(-0.9, 3.0, *s)), ("expm1", randn), ("erf", randn),
                     ("log_sigmoid", randn), ("silu", randn), ("hardsigmoid", lambda *s: uniform(-5, 5, *s)),
                     ("hardswish", lambda *s: uniform(-5, 5, *s)), ("mish", lambda *s: randn(*s) * 3), ("gelu", randn)):
        case("2d", op, [draw(3, 5)])
        case("strided", op, [In(draw(4, 6), view=T(["transpose", 0, 1], ["slice", 0, 0, 6, 2]))])
    case("tiny", "log1p", [torch.tensor([1e-10, -1e-12, 3e-8])])
    case("tiny", "expm1", [torch.tensor([1e-10, -1e-12, 3e-8])])
    case("saturated", "log_sigmoid", [torch.tensor([-60.0, -20.0, 20.0, 60.0])])
    case("kinks", "hardsigmoid", [torch.tensor([-4.0, -3.0, 0.0, 3.0, 4.0])])
    case("kinks", "hardswish", [torch.tensor([-4.0, -3.0, 0.0, 3.0, 4.0])])
    case("saturated", "mish", [torch.tensor([-60.0, -20.0, 0.0, 20.0, 60.0])])
    case("o2", "mish", [randn(3, 4)], order=2, dtypes=("float64",))
    case("default", "softplus", [randn(3, 5) * 5], {"beta": 1.0, "threshold": 20.0})
    case("beta_threshold", "softplus", [randn(3, 5) * 3], {"beta": 2.0, "threshold": 1.5})
    case("tanh", "gelu", [randn(3, 5) * 2], {"approximate": "tanh"})
    case("o2", "gelu", [randn(3, 4)], order=2, dtypes=("float64",))
    case("o2_tanh", "gelu", [randn(3, 4)], {"approximate": "tanh"}, order=2, dtypes=("float64",))
    case("o2", "silu", [randn(3, 4)], order=2, dtypes=("float64",))
    case("o2", "softplus", [randn(3, 4)], {"beta": 1.5, "threshold": 20.0}, order=2, dtypes=("float64",))
    case("o2", "log_sigmoid", [randn(3, 4)], order=2, dtypes=("float64",))
    case("s", "where_scalar", [mask(3, 4), randn(3, 4)], {"s": -0.5})

    # ---- comparisons and logic (forward only)
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        case("bcast", op, [grid(3, 4, lo=-3, hi=3), grid(4, lo=-3, hi=3)], diff=False)
    case("s", "compare_scalar", [grid(3, 4, lo=-3, hi=3)], {"s": 0.5}, diff=False)
    case("m", "logical_not", [mask(3, 4)], diff=False, dtypes=("float64",))
    case("m", "logical_and", [mask(3, 4), mask(4)], diff=False, dtypes=("float64",))
    case("m", "logical_or", [mask(3, 4), mask(3, 1)], diff=False, dtypes=("float64",))
    case("m", "logical_xor", [mask(3, 4), mask(4)], diff=False, dtypes=("float64",))
    case("bcast", "compare_operators", [grid(3, 4, lo=-3, hi=3), grid(4, lo=-3, hi=3)], {"s": 0.25}, diff=False)
    case("m", "logic_operators", [mask(3, 4), mask(3, 1)], diff=False, dtypes=("float64",))
    case("m", "isfinite", [torch.tensor([1.0, math.inf, -math.inf, math.nan, -0.0, 1e300])], diff=False)

    # ---- reductions
    x3 = randn(3, 4, 5)
    for op in ("sum", "mean"):
        case("all", op, [x3])
        case("dim1", op, [x3], {"dims": [1]})
        case("dims02_keep", op, [x3], {"dims": [0, 2], "keepdim": True})
        case("neg_keep", op, [x3], {"dims": [-1], "keepdim": True})
        case("transposed", op, [In(randn(5, 4), view=T(["transpose", 0, 1]))], {"dims": [1]})
        case("expanded", op, [In(randn(1, 4), view=T(["expand", [3, 4]]))], {"dims": [0]})
        case("0d", op, [randn()])
    case("all", "max_all", [distinct(3, 4)])
    for op in ("max_dim", "min_dim"):
        case("dim1", op, [distinct(3, 4, 5)], {"dim": 1})
        case("dim1_keep", op, [distinct(3, 4, 5)], {"dim": 1, "keepdim": True})
        case("last_view", op, [In(distinct(5, 3), view=T(["transpose", 0, 1]))], {"dim": -1})
        case("1d", op, [distinct(7)], {"dim": 0})
    case("kink_ties", "max_dim", [torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 1.0, 2.0]])], {"dim": 1})
    case("dims", "amax", [distinct(3, 4, 5)], {"dims": [0, 2], "keepdim": True})
    for op in ("amax", "amin"):
        case("dim1", op, [distinct(3, 4, 5)], {"dims": [1]})
        case("all", op, [In(distinct(5, 3), view=T(["transpose", 0, 1]))])
        case("ties", op, [torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]])],
             {"dims": [1]})
    for desc in (False, True):
        case(f"dim1_desc{desc}", "sort", [distinct(3, 6)], {"dim": 1, "descending": desc})
        case(f"dim0_desc{desc}", "sort", [In(distinct(4, 5), view=T(["transpose", 0, 1]))],
             {"dim": 0, "descending": desc})
    case("ties_stable", "sort", [torch.tensor([[2.0, 1.0, 2.0, 1.0, 0.0]])], {"dim": 1})
    for op in ("argmax", "argmin"):
        case("dim1", op, [distinct(3, 4, 5)], {"dim": 1}, diff=False)
        case("keep", op, [distinct(3, 4)], {"dim": 0, "keepdim": True}, diff=False)
        case("ties", op, [torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 1.0, 2.0]])], {"dim": 1}, diff=False)
    case("dim1", "logsumexp", [x3], {"dims": [1]})
    case("dims02_keep", "logsumexp", [x3], {"dims": [0, 2], "keepdim": True})
    case("all", "logsumexp", [x3])
    case("large", "logsumexp", [randn(4, 6) * 200.0], {"dims": [-1]})
    neg_inf = randn(3, 5)
    neg_inf[0, 1] = neg_inf[2, 4] = -math.inf
    case("some_neg_inf", "logsumexp", [In(neg_inf, grad=True)], {"dims": [1]})
    case("lead", "sum_to", [randn(2, 3, 4)], {"shape": [3, 1]})
    case("row", "sum_to", [randn(2, 3, 4)], {"shape": [4]})
    case("keep_all", "sum_to", [randn(3, 4)], {"shape": [1, 1]})
    case("largest", "topk", [distinct(3, 6)], {"k": 2, "dim": -1}, diff=False)
    case("smallest_dim0", "topk", [distinct(5, 4)], {"k": 3, "dim": 0, "largest": False}, diff=False)

    # ---- linear algebra
    mm = {
        "1d@1d": ((5,), (5,)),
        "1d@2d": ((5,), (5, 3)),
        "2d@1d": ((4, 5), (5,)),
        "2d@2d": ((4, 5), (5, 3)),
        "3d@2d": ((2, 4, 5), (5, 3)),
        "2d@3d": ((4, 5), (2, 5, 3)),
        "3d@3d": ((2, 4, 5), (2, 5, 3)),
        "1d@3d": ((5,), (2, 5, 3)),
        "3d@1d": ((2, 4, 5), (5,)),
        "bcast_batch": ((2, 1, 4, 5), (3, 5, 2)),
        "4d@4d": ((2, 3, 4, 5), (2, 3, 5, 2)),
    }
    for label, (sa, sb) in mm.items():
        case(label, "matmul", [randn(*sa), randn(*sb)])
    case("transposed_both", "matmul", [In(randn(5, 4), view=T(["transpose", 0, 1])),
                                       In(randn(3, 5), view=T(["transpose", 0, 1]))])
    case("batch_transposed", "matmul", [In(randn(4, 2, 5), view=T(["transpose", 0, 1])),
                                        In(randn(2, 3, 5), view=T(["transpose", 1, 2]))])
    case("expanded_batch", "matmul", [In(randn(1, 4, 5), view=T(["expand", [3, 4, 5]])), randn(3, 5, 2)])
    case("3d@2d_transposed", "matmul", [In(randn(2, 5, 4), view=T(["transpose", 1, 2])), randn(5, 3)])
    case("a_only", "matmul", [randn(3, 4), In(randn(4, 2), grad=False)])
    case("b", "bmm", [randn(3, 2, 4), randn(3, 4, 5)])
    case("transposed", "bmm", [In(randn(3, 4, 2), view=T(["transpose", 1, 2])), randn(3, 4, 5)])
    case("2d_bias", "linear", [randn(4, 5), randn(3, 5), randn(3)])
    case("3d_bias", "linear", [randn(2, 4, 5), randn(3, 5), randn(3)])
    case("1d", "linear", [randn(5), randn(3, 5), randn(3)])
    case("no_bias", "linear", [randn(4, 5), randn(3, 5)])
    case("weight_view", "linear", [randn(2, 4, 5), In(randn(5, 3), view=T(["transpose", 0, 1])), randn(3)])

    # ---- softmax family
    for op in ("softmax", "log_softmax"):
        for dim in (0, 1, 2, -1):
            case(f"dim{dim}", op, [randn(2, 3, 4)], {"dim": dim})
        case("view", op, [In(randn(5, 3), view=T(["transpose", 0, 1]))], {"dim": 1})
        case("1d", op, [randn(6)], {"dim": 0})
        case("large", op, [randn(3, 7) * 50.0], {"dim": -1})

    # ---- shape ops (gradients undo the view)
    case("merge", "view", [randn(2, 3, 4)], {"shape": [6, 4]})
    case("infer", "view", [randn(2, 3, 4)], {"shape": [-1, 2]})
    case("strided_ok", "view", [In(randn(4, 6), view=T(["slice", 0, 0, 4, 2]))], {"shape": [2, 2, 3]})
    case("contiguous", "reshape", [randn(2, 3, 4)], {"shape": [4, 6]})
    case("copy", "reshape", [In(randn(4, 3), view=T(["transpose", 0, 1]))], {"shape": [12]})
    case("p", "permute", [randn(2, 3, 4)], {"dims": [2, 0, 1]})
    case("neg", "permute", [randn(2, 3, 4)], {"dims": [-1, -3, -2]})
    case("t", "transpose", [randn(2, 3, 4)], {"dim0": 0, "dim1": 2})
    case("size1", "squeeze", [randn(3, 1, 4)], {"dim": 1})
    case("noop", "squeeze", [randn(3, 2)], {"dim": 1})
    case("mid", "unsqueeze", [randn(3, 4)], {"dim": 1})
    case("end", "unsqueeze", [In(randn(4, 3), view=T(["transpose", 0, 1]))], {"dim": -1})
    case("lead_and_1", "expand", [randn(3, 1)], {"shape": [2, 3, 4]})
    case("keep", "expand", [randn(3, 1)], {"shape": [-1, 5]})
    case("n", "narrow", [randn(4, 6)], {"dim": 1, "start": 1, "length": 3})
    case("neg_start", "narrow", [randn(5, 3)], {"dim": 0, "start": -3, "length": 2})
    case("step2", "slice", [randn(4, 7)], {"dim": 1, "start": 1, "end": 7, "step": 2})
    case("step3_dim0", "slice", [randn(8, 3)], {"dim": 0, "start": 0, "end": 8, "step": 3})
    case("neg_end", "slice", [randn(3, 6)], {"dim": -1, "start": -5, "end": -1, "step": 1})
    case("row", "select", [randn(3, 4)], {"dim": 0, "index": 1})
    case("neg", "select", [randn(3, 4, 2)], {"dim": 1, "index": -1})
    case("view", "contiguous", [In(randn(4, 3), view=T(["transpose", 0, 1]))])
    case("c", "clone", [randn(2, 3)])
    case("2d", "t", [randn(2, 3)])
    case("f32_to_f64", "to_dtype", [randn(3, 4)], {"dtype": "float64"}, dtypes=("float32",))
    case("f64_to_f32", "to_dtype", [randn(3, 4)], {"dtype": "float32"}, dtypes=("float64",))
    case("mid", "flatten", [randn(2, 3, 4, 2)], {"start": 1, "end": 2})
    case("all_view", "flatten", [In(randn(3, 4), view=T(["transpose", 0, 1]))], {"start": 0, "end": -1})
    case("dim1", "cat", [randn(2, 3), In(randn(4, 2), view=T(["transpose", 0, 1])), randn(2, 1)], {"dim": 1})
    case("dim0", "cat", [randn(1, 3), randn(2, 3)], {"dim": 0})
    case("partial_grad", "cat", [randn(2, 3), In(randn(2, 3), grad=False)], {"dim": -1})
    case("dim0", "stack", [randn(2, 3), randn(2, 3), randn(2, 3)], {"dim": 0})
    case("last", "stack", [randn(2, 3), In(randn(3, 2), view=T(["transpose", 0, 1]))], {"dim": -1})
    case("uneven", "split", [randn(7, 3)], {"size": 3, "dim": 0})
    case("dim1", "split", [randn(2, 6)], {"size": 2, "dim": 1})
    case("c", "chunk", [randn(3, 7)], {"chunks": 3, "dim": 1})
    case("fewer", "chunk", [randn(5, 2)], {"chunks": 4, "dim": 0})
    case("step2", "slice_scatter", [randn(3, 2)], {"shape": [3, 5], "dim": 1, "start": 1, "step": 2})
    case("dim0", "slice_scatter", [randn(2, 4)], {"shape": [6, 4], "dim": 0, "start": 3, "step": 1})

    # ---- indexing (duplicate indices: gradients accumulate)
    case("int_dim1", "repeat_interleave", [randn(2, 3)], {"repeats": 2, "dim": 1})
    case("flat", "repeat_interleave", [In(randn(3, 2), view=T(["transpose", 0, 1]))], {"repeats": 3})
    case("tensor_dim0", "repeat_interleave", [randn(4, 2), torch.tensor([1, 0, 3, 2])], {"dim": 0})
    case("tensor_one", "repeat_interleave", [randn(2, 3), torch.tensor([2])], {"dim": -1})
    case("dim0_dup", "index_select", [randn(5, 3), torch.tensor([4, 0, 4, 2])], {"dim": 0})
    case("dim1", "index_select", [In(randn(4, 3), view=T(["transpose", 0, 1])), torch.tensor([1, 3])],
         {"dim": 1})
    case("0d_index", "index_select", [randn(2, 3), torch.tensor(2)], {"dim": 1})
    case("dim0_dup", "index_add", [randn(4, 3), torch.tensor([1, 3, 1]), randn(3, 3)], {"dim": 0})
    case("dim1", "index_add", [randn(2, 5), torch.tensor([0, 4]), randn(2, 2)], {"dim": 1})
    case("dim1", "gather", [randn(3, 5), index(5, 3, 4)], {"dim": 1})
    case("dim0_small", "gather", [randn(4, 3), index(4, 2, 2)], {"dim": 0})
    case("dim0", "scatter_add", [randn(4, 3), index(4, 5, 3), randn(5, 3)], {"dim": 0})
    case("dim1", "scatter_add", [randn(2, 5), index(5, 2, 3), randn(2, 3)], {"dim": 1})
    ids = torch.tensor([[0, 3, 3, 9], [1, 0, 7, 3]])
    case("padding", "embedding", [randn(10, 4), ids], {"padding_idx": 0})
    case("no_padding", "embedding", [randn(10, 4), ids])
    case("1d", "embedding", [randn(6, 3), torch.tensor([5, 2, 2])], {"padding_idx": 2})

    # ---- dropout: identity when not training or p = 0; training checked for consistency
    case("eval", "dropout", [randn(4, 5)], {"p": 0.5, "training": False})
    case("p0", "dropout", [randn(4, 5)], {"p": 0.0, "training": True})
    case("train", "dropout", [away(64, 64)], {"p": 0.3, "training": True}, check=check_dropout)

    # ---- in-place ops on a non-leaf and small composed graphs
    case("chain", "inplace_chain", [randn(3, 4), randn(3, 4), randn(4), mask(3, 4, p=0.3)])
    case("r", "reuse", [randn(3, 4)])
    case("b", "mlp_nll", [randn(4, 5), randn(6, 5) * 0.5, randn(6) * 0.1, randn(3, 6) * 0.5, randn(3) * 0.1,
                          index(3, 4)])
    att_mask = torch.zeros(2, 1, 5, dtype=torch.bool)
    att_mask[0, 0, 3:] = True
    case("masked", "attention", [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 4), att_mask])

    # ---- larger sizes (float32 accumulation over realistic lengths)
    case("big", "matmul", [randn(8, 256), randn(256, 16)])
    case("big_batched", "matmul", [randn(4, 8, 128), randn(4, 128, 8)])
    case("big", "sum", [randn(4, 4096)], {"dims": [1]})
    case("big", "softmax", [randn(3, 1000) * 5.0], {"dim": -1})
    case("big", "log_softmax", [randn(3, 1000) * 5.0], {"dim": -1})
    case("big", "logsumexp", [randn(3, 1000) * 5.0], {"dims": [1]})

    # ---- more layouts: non-contiguous operands of indexing ops, non-collapsible batch views
    case("3d_small_index", "gather", [randn(3, 4, 5), index(4, 2, 3, 2)], {"dim": 1})
    case("index_view", "gather", [In(randn(5, 3), view=T(["transpose", 0, 1])),
                                  In(index(5, 4, 3), view=T(["transpose", 0, 1]))], {"dim": 1})
    case("3d_small_index", "scatter_add", [randn(4, 3, 5), index(4, 2, 3, 2), randn(2, 3, 2)], {"dim": 0})
    case("x_view", "scatter_add", [In(randn(3, 4), view=T(["transpose", 0, 1])), index(4, 2, 3), randn(2, 3)],
         {"dim": 0})
    case("3d_mid", "index_select", [In(randn(2, 5, 3), view=T(["transpose", 0, 2])), torch.tensor([4, 1, 1])],
         {"dim": 1})
    case("3d_mid", "index_add", [randn(2, 4, 3), torch.tensor([3, 0, 3]), randn(2, 3, 3)], {"dim": 1})
    case("weight_view", "embedding", [In(randn(4, 10), view=T(["transpose", 0, 1])), ids], {"padding_idx": 3})
    case("3d_ids", "embedding", [randn(10, 2), index(10, 2, 2, 3)], {"padding_idx": 1})
    case("permuted_batch", "matmul", [In(randn(3, 2, 4, 5), view=T(["permute", [1, 0, 2, 3]])), randn(2, 3, 5, 2)])
    case("expanded", "bmm", [In(randn(1, 2, 4), view=T(["expand", [3, 2, 4]])), randn(3, 4, 5)])
    case("a_strided", "linear", [In(randn(4, 10), view=T(["slice", 1, 0, 10, 2])), randn(3, 5), randn(3)])

    # ---- edge shapes: empty tensors, 0-d tensors, size-1 dims
    case("k0", "matmul", [randn(2, 0), randn(0, 3)])
    case("m0", "matmul", [randn(0, 4), randn(4, 3)])
    case("empty", "slice", [randn(4, 3)], {"dim": 0, "start": 5, "end": 9, "step": 1})
    case("empty_part", "cat", [randn(2, 0), randn(2, 3)], {"dim": 1})
    case("over_dim0", "sum", [randn(0, 3)], {"dims": [0]})
    case("size1", "softmax", [randn(3, 1)], {"dim": 1})
    case("0d", "softmax", [randn()], {"dim": 0})
    case("0d", "log_softmax", [randn()], {"dim": 0})
    case("0d", "max_all", [randn()])
    case("1d", "select", [randn(4)], {"dim": 0, "index": 2})
    case("0d", "unsqueeze", [randn()], {"dim": 0})
    case("0d", "expand", [randn()], {"shape": [2, 3]})
    case("0d", "flatten", [randn()], {"start": 0, "end": -1})
    case("big_size", "split", [randn(3, 2)], {"size": 5, "dim": 0})
    case("more_chunks", "chunk", [randn(2, 3)], {"chunks": 5, "dim": 0})
    case("k0", "topk", [distinct(3, 4)], {"k": 0, "dim": 1}, diff=False)

    # ---- conversions that are not differentiable (truncation toward zero; nonzero -> true)
    vals = torch.tensor([-1.7, -0.5, -0.0, 0.0, 0.3, 2.9, 1e10])
    case("to_i64", "to_dtype", [In(vals, grad=False)], {"dtype": "int64"}, diff=False)
    case("to_bool", "to_dtype", [In(vals, grad=False)], {"dtype": "bool"}, diff=False)

    # ---- IEEE special values (forward only; NaN propagation follows PyTorch)
    special = torch.tensor([[math.nan, 1.0, -2.0, math.inf], [-math.inf, 0.5, math.nan, -1.0]])
    for op in ("relu", "abs", "exp", "tanh", "sigmoid", "neg"):
        case("special", op, [In(special, grad=False)], diff=False)
    case("special", "clamp", [In(special, grad=False)], {"min": -1.5, "max": 0.75}, diff=False)
    case("special", "eq", [In(special, grad=False), In(special, grad=False)], diff=False)
    case("special", "compare_scalar", [In(special, grad=False)], {"s": 1.0}, diff=False)
    case("special", "sum", [In(special, grad=False)], {"dims": [1]}, diff=False)
    case("special", "max_dim", [In(special, grad=False)], {"dim": 1}, diff=False)
    case("special", "argmax", [In(special, grad=False)], {"dim": 1}, diff=False)
    case("special", "amax", [In(special, grad=False)], {"dims": [1]}, diff=False)
    case("special", "softmax", [In(special, grad=False)], {"dim": 1}, diff=False)
    case("special", "logsumexp", [In(special, grad=False)], {"dims": [1]}, diff=False)
    case("neg_inf_row", "softmax", [In(torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]]), grad=False)],
         {"dim": 1}, diff=False)
    case("neg_inf_row", "logsumexp", [In(torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]]), grad=False)],
         {"dims": [1]}, diff=False)
    m = mask(3, 5, p=0.4)
    m[:, 2] = False
    case("masked", "log_softmax", [In(randn(3, 5).masked_fill(m, -math.inf), grad=True)], {"dim": 1})
    case("kink", "pow", [torch.tensor([0.0, 0.0, 2.0, 0.0, 1.5]), torch.tensor([0.0, 2.0, 0.0, 1.0, 0.0])])
    case("kink_neg_exp", "pow", [torch.tensor([0.0, 0.0, 0.5]), torch.tensor([-1.0, -2.0, -1.0])])
    case("kink_zero_base", "pow_scalar", [torch.tensor([0.0, 1.0, 2.0])], {"p": 1.0})
    case("cond_bcast", "where", [mask(2, 3, 4), randn(3, 4), randn(4)])

    # ---- second order (create_graph): gradients of Σ <grad, ddy>
    case("o2", "mul", [randn(3, 4), randn(4)], order=2)
    case("o2", "div", [randn(3, 4), away(3, 4, lo=0.5)], order=2)
    case("o2", "pow", [uniform(0.5, 2.0, 3, 4), uniform(-2, 2, 3, 4)], order=2)
    case("o2", "pow_scalar", [uniform(0.3, 2.0, 3, 4)], {"p": 2.5}, order=2)
    for op in ("exp", "tanh", "sigmoid"):
        case("o2", op, [randn(3, 4)], order=2)
    case("o2", "log", [uniform(0.2, 2.0, 3, 4)], order=2)
    case("o2", "sqrt", [uniform(0.2, 2.0, 3, 4)], order=2)
    case("o2", "softmax", [randn(3, 5)], {"dim": 1}, order=2)
    case("o2", "log_softmax", [randn(2, 3, 4)], {"dim": 1}, order=2)
    case("o2", "logsumexp", [randn(3, 5)], {"dims": [1]}, order=2)
    case("o2", "matmul", [randn(2, 3, 4), randn(4, 2)], order=2)
    case("o2", "tanh_backward", [randn(3, 4), uniform(-0.9, 0.9, 3, 4)], order=2)
    case("o2", "sigmoid_backward", [randn(3, 4), uniform(0.05, 0.95, 3, 4)], order=2)
    case("o2", "mlp_nll", [randn(4, 5), randn(6, 5) * 0.5, randn(6) * 0.1, randn(3, 6) * 0.5, randn(3) * 0.1,
                           index(3, 4)], order=2)
    case("o2", "attention", [randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 4), att_mask], order=2)


# ---------------------------------------------------------------------------------------------
# Running and comparing.

def materialize(c):
    """Inputs in the case's dtype, the torch reference, and the upstream gradients."""
    leaves = [i.value.to(c["dtype"]) if i.value.is_floating_point() else i.value.clone() for i in c["inputs"]]
    ref_leaves = [t.clone().requires_grad_(i.grad) for t, i in zip(leaves, c["inputs"])]
    xs = [apply_view(t, i.view) for t, i in zip(ref_leaves, c["inputs"])]
    outs = TORCH_OPS[c["op"]](xs, c["args"])
    dys = []
    for y in outs:
        wants = c["diff"] and y.is_floating_point() and y.requires_grad
        dys.append(randn(*y.shape).to(y.dtype) if wants else None)
    ref = {"outs": [y.detach() for y in outs], "grads": {}, "grads2": {}}
    roots = [(y, dy) for y, dy in zip(outs, dys) if dy is not None]
    wanted = [k for k, i in enumerate(c["inputs"]) if i.grad]
    ddys = [None] * len(leaves)
    if roots and c["order"] == 1:
        torch.autograd.backward([y for y, _ in roots], [dy for _, dy in roots])
        ref["grads"] = {k: ref_leaves[k].grad for k in wanted if ref_leaves[k].grad is not None}
    elif roots:
        grads = torch.autograd.grad([y for y, _ in roots], [ref_leaves[k] for k in wanted],
                                    [dy for _, dy in roots], create_graph=True, allow_unused=True)
        second_roots = []
        for k, g in zip(wanted, grads):
            ddys[k] = randn(*leaves[k].shape).to(leaves[k].dtype)
            if g is None:
                continue
            ref["grads"][k] = g.detach()
            if g.requires_grad:
                second_roots.append((g, ddys[k]))
        if second_roots:
            second = torch.autograd.grad([g for g, _ in second_roots], [ref_leaves[k] for k in wanted],
                                         [d for _, d in second_roots], allow_unused=True)
            ref["grads2"] = {k: g for k, g in zip(wanted, second) if g is not None}
    return leaves, dys, ddys, ref


def compare(label, got, want, dtype):
    """'' when got matches want within the tolerances, else a description. Also returns the worst
    error / tolerance ratio seen (<= 1 passes)."""
    if got is None:
        got = torch.zeros_like(want)
    if want is None:
        want = torch.zeros_like(got)
    if got.dtype != want.dtype:
        return f"{label}: dtype {got.dtype} != torch {want.dtype}", 0.0
    if tuple(got.shape) != tuple(want.shape):
        return f"{label}: shape {tuple(got.shape)} != torch {tuple(want.shape)}", 0.0
    if not want.is_floating_point():
        bad = (got != want).nonzero()
        return (f"{label}: {len(bad)} elements differ, first at {tuple(bad[0].tolist())}: "
                f"{got[tuple(bad[0])].item()} != {want[tuple(bad[0])].item()}" if len(bad) else ""), 0.0
    got, want = got.double(), want.double()
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return f"{label}: NaN positions differ", 0.0
    finite = torch.isfinite(want)
    if not torch.equal(got[~finite & ~torch.isnan(want)], want[~finite & ~torch.isnan(want)]):
        return f"{label}: infinities differ", 0.0
    if not finite.any():
        return "", 0.0
    w, g = want[finite], got[finite]
    scale = max(1.0, w.abs().max().item())
    atol = ATOL_EPS * torch.finfo(dtype).eps * scale
    tol = atol + RTOL[dtype] * w.abs()
    err = (g - w).abs()
    ratio = err / tol
    worst = ratio.argmax()
    if ratio[worst] > 1 or not torch.isfinite(g).all():
        return (f"{label}: max |err| {err[worst].item():.3g} at torch value {w[worst].item():.6g} "
                f"(seqgrad {g[worst].item():.6g}; tolerance {tol[worst].item():.3g})"), ratio[worst].item()
    return "", ratio[worst].item()


def check_dropout(c, leaves, dys, got):
    """seqgrad dropout(training): each output is 0 or x / (1 - p), the gradient is dy where kept
    (scaled by 1 / (1 - p)), and the kept fraction is within 5 standard deviations of 1 - p."""
    x, p = leaves[0].double(), c["args"]["p"]
    y, dx, dy = got["outs"][0].double(), got["grads"].get(0), dys[0].double()
    if dx is None:
        return ["no gradient for x"]
    kept = y != 0
    eps = torch.finfo(c["dtype"]).eps * 8
    errors = []
    if not torch.allclose(y[kept], x[kept] / (1 - p), rtol=eps, atol=0):
        errors.append("kept values are not x / (1 - p)")
    if not torch.allclose(dx.double(), kept.double() * dy / (1 - p), rtol=eps, atol=eps):
        errors.append("gradient is not dy * mask / (1 - p)")
    n, frac = kept.numel(), kept.double().mean().item()
    if abs(frac - (1 - p)) > 5 * math.sqrt(p * (1 - p) / n):
        errors.append(f"kept fraction {frac:.3f}, expected {1 - p:.3f}")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ops_parity", help="path to the ops_parity program")
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print the worst error/tolerance ratio per case")
    opts = parser.parse_args()

    build_cases()
    cases = [c for c in CASES if opts.k in c["name"]]
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"

    tensors, specs, refs = {}, [], {}
    for c in cases:
        leaves, dys, ddys, ref = materialize(c)
        refs[c["name"]] = (leaves, dys, ref)
        spec = {"name": c["name"], "op": c["op"], "args": c["args"], "order": c["order"], "inputs": []}
        for k, (t, i) in enumerate(zip(leaves, c["inputs"])):
            key = f"{c['name']}/in{k}"
            tensors[key] = t
            spec["inputs"].append({"key": key, "grad": i.grad, "view": i.view})
        spec["dys"] = []
        for k, dy in enumerate(dys):
            spec["dys"].append(None if dy is None else f"{c['name']}/dy{k}")
            if dy is not None:
                tensors[f"{c['name']}/dy{k}"] = dy
        spec["ddys"] = []
        for k, ddy in enumerate(ddys):
            spec["ddys"].append(None if ddy is None else f"{c['name']}/ddy{k}")
            if ddy is not None:
                tensors[f"{c['name']}/ddy{k}"] = ddy
        specs.append(spec)

    with tempfile.TemporaryDirectory(prefix="seqgrad_ops_parity_") as tmp:
        in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        save_safetensors(in_path, tensors, {"cases": json.dumps(specs)})
        run = subprocess.run([opts.ops_parity, in_path, out_path], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: ops_parity exited with {run.returncode}: {run.stderr.strip()}")
            print(f"0 passed, {len(cases)} failed")
            return 1
        results, metadata = load_safetensors(out_path)
    errors = json.loads(metadata.get("errors", "{}"))

    passed, failed = 0, 0
    worst = {torch.float32: (0.0, ""), torch.float64: (0.0, "")}
    for c in cases:
        name = c["name"]
        leaves, dys, ref = refs[name]
        problems = []
        if name in errors:
            problems.append(f"seqgrad threw: {errors[name]}")
        else:
            got = {"outs": [], "grads": {}, "grads2": {}}
            for k in range(len(ref["outs"])):
                got["outs"].append(results.get(f"{name}/out{k}"))
            for k in range(len(c["inputs"])):
                for field, prefix in (("grads", "grad"), ("grads2", "grad2_")):
                    if f"{name}/{prefix}{k}" in results:
                        got[field][k] = results[f"{name}/{prefix}{k}"]
            if c["check"] is not None:
                problems += c["check"](c, leaves, dys, got)
            else:
                pairs = [(f"out{k}", got["outs"][k], want) for k, want in enumerate(ref["outs"])]
                for field, prefix in (("grads", "grad"), ("grads2", "grad2_")):
                    for k in sorted(set(got[field]) | set(ref[field])):
                        pairs.append((f"{prefix}{k}", got[field].get(k), ref[field].get(k)))
                ratio = 0.0
                for label, g, w in pairs:
                    if g is None and label.startswith("out"):
                        problems.append(f"{label}: missing")
                        continue
                    problem, r = compare(label, g, w, c["dtype"])
                    ratio = max(ratio, r)
                    if problem:
                        problems.append(problem)
                if ratio > worst[c["dtype"]][0]:
                    worst[c["dtype"]] = (ratio, name)
                if opts.v:
                    print(f"      worst err/tol {ratio:.3g}  {name}")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"PASS {name}")
    for dtype, (ratio, name) in worst.items():
        print(f"# worst error/tolerance in {str(dtype)[6:]}: {ratio:.3g} ({name or '-'})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
