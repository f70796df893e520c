#!/usr/bin/python3
"""Parity of seqgrad's losses, optimizers, gradient clipping and LR schedulers with PyTorch 1.13.

Usage: test_optim_torch.py PATH/TO/optim_parity [-k SUBSTRING] [-v]

Needs only Debian's python3-torch (1.13) and python3-numpy. The script builds every case's inputs
with a fixed seed, writes them to a safetensors file, runs optim_parity (seqgrad's side), reads its
results back and compares them with torch's:

  losses      values and input gradients (upstream gradient random), float32 and float64;
              cross_entropy with label smoothing and ignore_index on (N, C) and (B, T, C)
              (torch gets the latter as (B, C, T)), every reduction, all targets ignored (NaN)
  optimizers  SGD / Adam / AdamW over 100 steps on the same parameters and the same sequence of
              gradients (some steps leave a parameter without gradient): parameters after every
              step, float32 and float64; momentum, dampening, nesterov, weight decay, amsgrad,
              betas/eps, two parameter groups
  clipping    clip_grad_norm_ total norm and clipped gradients for norm types 1, 2, 3 and inf
  schedulers  the LR of two groups before each of up to 100 optimizer steps, for every scheduler

Tolerances:  |seqgrad - torch| <= atol + rtol * |torch|, elementwise
  losses, clipping: rtol 1e-5 (f64), 1e-4 (f32);  atol 64 eps(dtype) max(1, max |torch|)
  optimizers:       rtol 1e-10 (f64), 1e-4 (f32); same atol (values are O(1))
  schedulers:       rtol 1e-12, atol 1e-15 (PyTorch updates rates multiplicatively, seqgrad uses
                    closed forms: they differ by rounding only)
NaN must sit at the same positions. Prints one line per case and a last line "N passed, M failed";
exit status 1 on any failure.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler as L

from safetensors_io import load_safetensors, save_safetensors

torch.set_num_threads(1)
warnings.filterwarnings("ignore")  # PyTorch's deprecation notes about schedulers


GEN = torch.Generator().manual_seed(20240612)
DTYPES = (torch.float32, torch.float64)
DNAME = {torch.float32: "f32", torch.float64: "f64"}


def randn(*shape, dtype=torch.float64):
    return torch.randn(tuple(shape), generator=GEN, dtype=torch.float64).to(dtype)


def targets(classes, *shape, ignore=None, p_ignore=0.3):
    t = torch.randint(0, classes, shape, generator=GEN, dtype=torch.int64)
    if ignore is not None:
        t = torch.where(torch.rand(shape, generator=GEN) < p_ignore, torch.full_like(t, ignore), t)
    return t


def compare(label, got, want, rtol, atol):
    """None when got matches want within tolerance, else a one-line description."""
    if got is None:
        return f"{label}: missing"
    got, want = got.double(), want.detach().double()
    if tuple(got.shape) != tuple(want.shape):
        return f"{label}: shape {tuple(got.shape)} vs torch {tuple(want.shape)}"
    nan_g, nan_w = torch.isnan(got), torch.isnan(want)
    if not torch.equal(nan_g, nan_w):
        return f"{label}: NaN at different positions (seqgrad {int(nan_g.sum())}, torch {int(nan_w.sum())})"
    ok = ~nan_w
    err = (got[ok] - want[ok]).abs()
    tol = atol + rtol * want[ok].abs()
    if err.numel() and bool((err > tol).any()):
        i = int(torch.argmax(err / tol))
        return (f"{label}: max error {float(err[i]):.3g} at flat index {i} "
                f"(seqgrad {float(got[ok][i]):.10g}, torch {float(want[ok][i]):.10g}, tol {float(tol[i]):.3g})")
    return None


def scaled_atol(dtype, ref):
    finite = ref[torch.isfinite(ref)] if ref.numel() else ref
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    return 64 * torch.finfo(dtype).eps * scale


CASES = []  # each: {"spec": json for the driver, "tensors": {...}, "check": fn(results) -> [problems]}


# ---- losses ----------------------------------------------------------------------------------

def torch_loss(loss, x, target, args, torch_layout):
    reduction = args.get("reduction", "mean")
    if loss == "mse_loss":
        return F.mse_loss(x, target, reduction=reduction)
    xt = torch_layout(x)
    tt = target
    if loss == "nll_loss":
        return F.nll_loss(xt, tt, ignore_index=args.get("ignore_index", -100), reduction=reduction)
    return F.cross_entropy(xt, tt, ignore_index=args.get("ignore_index", -100), reduction=reduction,
                           label_smoothing=args.get("label_smoothing", 0.0))


def add_loss_case(name, loss, x64, target, args):
    # seqgrad puts classes last unless class_dim says otherwise; torch wants (N, C) or (N, C, d...):
    # move the class dim to 1.
    def torch_layout(x):
        return x if x.dim() <= 2 or args.get("class_dim") == 1 else x.movedim(-1, 1)

    for dtype in DTYPES:
        full = f"loss/{name}/{DNAME[dtype]}"
        x = x64.to(dtype)
        tgt = target.to(dtype) if loss == "mse_loss" else target
        xr = x.clone().requires_grad_()
        ref = torch_loss(loss, xr, tgt, args, torch_layout)
        dy = randn(*ref.shape, dtype=dtype)
        ref.backward(dy)
        rtol = 1e-5 if dtype == torch.float64 else 1e-4

        def check(results, full=full, ref=ref.detach(), grad=xr.grad, dtype=dtype, rtol=rtol):
            problems = []
            for label, want in (("out", ref), ("grad", grad)):
                p = compare(label, results.get(f"{full}/{label}"), want, rtol, scaled_atol(dtype, want))
                if p:
                    problems.append(p)
            return problems

        CASES.append({"spec": {"name": full, "kind": "loss", "loss": loss, "args": args},
                      "tensors": {f"{full}/input": x, f"{full}/target": tgt, f"{full}/dy": dy},
                      "check": check})


def build_loss_cases():
    for red in ("mean", "sum", "none"):
        x, t = randn(6, 5), targets(5, 6)
        add_loss_case(f"ce/NC/{red}", "cross_entropy", x, t, {"reduction": red})
        x, t = randn(6, 5), targets(5, 6, ignore=-100)
        add_loss_case(f"ce/NC/smooth0.1+ignore/{red}", "cross_entropy", 3 * x, t,
                      {"reduction": red, "label_smoothing": 0.1})
        x, t = randn(3, 4, 7), targets(7, 3, 4, ignore=0)
        add_loss_case(f"ce/BTC/smooth0.2+ignore0/{red}", "cross_entropy", x, t,
                      {"reduction": red, "label_smoothing": 0.2, "ignore_index": 0})
        x, t = randn(5, 4), targets(4, 5, ignore=-100)
        add_loss_case(f"nll/NC+ignore/{red}", "nll_loss", torch.log_softmax(x, -1), t, {"reduction": red})
        x, t = randn(2, 3, 4), targets(4, 2, 3, ignore=2)
        add_loss_case(f"nll/BTC+ignore2/{red}", "nll_loss", torch.log_softmax(x, -1), t,
                      {"reduction": red, "ignore_index": 2})
        # PyTorch's layout, given as is with class_dim = 1: (N, C, d1) and (N, C, d1, d2)
        x, t = randn(3, 5, 4), targets(5, 3, 4, ignore=1)
        add_loss_case(f"ce/NCd/smooth0.1+ignore1/{red}", "cross_entropy", x, t,
                      {"reduction": red, "label_smoothing": 0.1, "ignore_index": 1, "class_dim": 1})
        x, t = randn(2, 4, 3, 2), targets(4, 2, 3, 2)
        add_loss_case(f"ce/NCdd/{red}", "cross_entropy", x, t, {"reduction": red, "class_dim": 1})
        x, t = randn(2, 3, 5), targets(3, 2, 5, ignore=0)
        add_loss_case(f"nll/NCd+ignore0/{red}", "nll_loss", torch.log_softmax(x, 1), t,
                      {"reduction": red, "ignore_index": 0, "class_dim": 1})
        add_loss_case(f"mse/{red}", "mse_loss", randn(3, 4), randn(3, 4), {"reduction": red})
    add_loss_case("ce/smooth1.0/mean", "cross_entropy", randn(4, 3), targets(3, 4), {"label_smoothing": 1.0})
    add_loss_case("ce/all_ignored/mean(NaN)", "cross_entropy", randn(3, 4), torch.full((3,), -100),
                  {"label_smoothing": 0.1})
    add_loss_case("ce/all_ignored/sum", "cross_entropy", randn(3, 4), torch.full((3,), -100),
                  {"reduction": "sum", "label_smoothing": 0.1})
    add_loss_case("ce/large_logits", "cross_entropy", 40 * randn(4, 6), targets(6, 4), {"label_smoothing": 0.05})


# ---- optimizers --------------------------------------------------------------------------------

STEPS = 100
SHAPES = [(3, 4), (5,), (2, 3)]


def add_optimizer_case(name, optimizer, groups, skip_every=0):
    """groups: [(param indices, options)]; skip_every: parameter 1 has no gradient every nth step."""
    init = [randn(*s) for s in SHAPES]
    # Gradients of assorted scales (like a real run's), changing sign, with a slow drift.
    grads = [[randn(*s) * (0.5 + (step % 7) / 3) + 0.1 * math.sin(step / 10) for s in SHAPES]
             for step in range(STEPS)]
    for dtype in DTYPES:
        full = f"optim/{name}/{DNAME[dtype]}"
        params = [p.to(dtype).clone().requires_grad_() for p in init]
        torch_groups = [dict(options, params=[params[k] for k in idx]) for idx, options in groups]
        opt = getattr(torch.optim, optimizer)(torch_groups)
        tensors = {f"{full}/p{k}": p.to(dtype) for k, p in enumerate(init)}
        trajectory = []
        for step in range(STEPS):
            opt.zero_grad(set_to_none=True)
            for k, p in enumerate(params):
                if skip_every and k == 1 and step % skip_every == 0:
                    continue
                g = grads[step][k].to(dtype)
                p.grad = g.clone()
                tensors[f"{full}/g{step}/{k}"] = g
            opt.step()
            trajectory.append([p.detach().clone() for p in params])
        rtol = 1e-10 if dtype == torch.float64 else 1e-4

        def check(results, full=full, trajectory=trajectory, dtype=dtype, rtol=rtol):
            for step, ps in enumerate(trajectory):
                for k, want in enumerate(ps):
                    p = compare(f"step {step + 1} param {k}", results.get(f"{full}/p{k}/s{step}"), want, rtol,
                                scaled_atol(dtype, want))
                    if p:
                        return [p]  # the first divergence says it all
            return []

        spec_groups = [{"params": idx, "options": {k: (list(v) if isinstance(v, tuple) else v)
                                                   for k, v in options.items()}} for idx, options in groups]
        CASES.append({"spec": {"name": full, "kind": "optimizer", "optimizer": optimizer, "groups": spec_groups,
                               "steps": STEPS},
                      "tensors": tensors, "check": check})


def build_optimizer_cases():
    one = lambda **o: [([0, 1, 2], o)]  # noqa: E731 (all parameters in one group)
    add_optimizer_case("sgd/plain", "SGD", one(lr=0.05))
    add_optimizer_case("sgd/momentum", "SGD", one(lr=0.02, momentum=0.9))
    add_optimizer_case("sgd/momentum+dampening", "SGD", one(lr=0.02, momentum=0.8, dampening=0.3))
    add_optimizer_case("sgd/nesterov+wd", "SGD", one(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01),
                       skip_every=3)
    add_optimizer_case("sgd/wd", "SGD", one(lr=0.05, weight_decay=0.1))
    add_optimizer_case("sgd/groups", "SGD", [([0, 2], {"lr": 0.05}), ([1], {"lr": 0.01, "momentum": 0.5})])
    add_optimizer_case("adam/default", "Adam", one(lr=1e-3))
    add_optimizer_case("adam/lr1e-2", "Adam", one(lr=1e-2), skip_every=4)
    add_optimizer_case("adam/wd", "Adam", one(lr=1e-2, weight_decay=0.05))
    add_optimizer_case("adam/amsgrad", "Adam", one(lr=1e-2, amsgrad=True))
    add_optimizer_case("adam/amsgrad+wd+betas+eps", "Adam",
                       one(lr=2e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, amsgrad=True), skip_every=3)
    add_optimizer_case("adam/groups", "Adam", [([0], {"lr": 1e-2}), ([1, 2], {"lr": 5e-3, "amsgrad": True})])
    add_optimizer_case("adamw/default", "AdamW", one(lr=1e-2))
    add_optimizer_case("adamw/wd0.1", "AdamW", one(lr=1e-2, weight_decay=0.1), skip_every=5)
    add_optimizer_case("adamw/amsgrad", "AdamW", one(lr=1e-2, weight_decay=0.05, amsgrad=True, betas=(0.9, 0.98)))


# ---- clipping ----------------------------------------------------------------------------------

def build_clip_cases():
    for norm_type in (2.0, 1.0, 3.0, "inf"):
        for max_norm in (0.5, 100.0):
            shapes = [(3, 4), (7,), (2, 2, 2)]
            g64 = [randn(*s) for s in shapes]
            for dtype in DTYPES:
                full = f"clip/norm{norm_type}/max{max_norm}/{DNAME[dtype]}"
                params = []
                for g in g64:
                    p = torch.zeros(g.shape, dtype=dtype, requires_grad=True)
                    p.grad = g.to(dtype).clone()
                    params.append(p)
                total = torch.nn.utils.clip_grad_norm_(params, max_norm, math.inf if norm_type == "inf" else norm_type)
                rtol = 1e-5 if dtype == torch.float64 else 1e-4

                def check(results, full=full, total=total.double().reshape(()), grads=[p.grad for p in params],
                          dtype=dtype, rtol=rtol):
                    problems = []
                    p = compare("total", results.get(f"{full}/total"), total, rtol, scaled_atol(dtype, total))
                    if p:
                        problems.append(p)
                    for k, want in enumerate(grads):
                        p = compare(f"grad{k}", results.get(f"{full}/g{k}"), want, rtol, scaled_atol(dtype, want))
                        if p:
                            problems.append(p)
                    return problems

                CASES.append({"spec": {"name": full, "kind": "clip", "norm_type": norm_type, "max_norm": max_norm},
                              "tensors": {f"{full}/g{k}": g.to(dtype) for k, g in enumerate(g64)},
                              "check": check})


# ---- schedulers --------------------------------------------------------------------------------

LAMBDAS = {
    "inverse": lambda e: 1.0 / (e + 1.0),
    "rsqrt_warmup": lambda e: min((e + 1.0) / 5.0, math.sqrt(5.0 / (e + 1.0))),
    "staircase": lambda e: 0.8 ** (e // 4),
}


def torch_scheduler(spec, opt):
    t = spec["type"]
    if t == "StepLR":
        return L.StepLR(opt, spec["step_size"], spec.get("gamma", 0.1))
    if t == "MultiStepLR":
        return L.MultiStepLR(opt, spec["milestones"], spec.get("gamma", 0.1))
    if t == "ExponentialLR":
        return L.ExponentialLR(opt, spec["gamma"])
    if t == "CosineAnnealingLR":
        return L.CosineAnnealingLR(opt, spec["T_max"], spec.get("eta_min", 0.0))
    if t == "LinearLR":
        return L.LinearLR(opt, spec.get("start_factor", 1.0 / 3), spec.get("end_factor", 1.0),
                          spec.get("total_iters", 5))
    if t == "LambdaLR":
        return L.LambdaLR(opt, [LAMBDAS[n] for n in spec["lambdas"]])
    if t == "SequentialLR":
        return L.SequentialLR(opt, [torch_scheduler(s, opt) for s in spec["schedulers"]], spec["milestones"])
    raise ValueError(t)


def add_scheduler_case(name, spec, steps=100, base_lrs=(0.1, 0.05), metrics=None):
    full = f"sched/{name}"
    params = [torch.zeros(1, requires_grad=True) for _ in base_lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, base_lrs)], lr=base_lrs[0])
    if spec["type"] == "ReduceLROnPlateau":
        kwargs = {k: v for k, v in spec.items() if k != "type"}
        sched = L.ReduceLROnPlateau(opt, **kwargs)
    else:
        sched = torch_scheduler(spec, opt)
    lrs = [[g["lr"] for g in opt.param_groups]]
    for i in range(1, steps):
        opt.step()
        if metrics is not None:
            sched.step(float(metrics[i - 1]))
        else:
            sched.step()
        lrs.append([g["lr"] for g in opt.param_groups])
    want = torch.tensor(lrs, dtype=torch.float64)

    def check(results, full=full, want=want):
        p = compare("lrs", results.get(f"{full}/lrs"), want, 1e-12, 1e-15)
        return [p] if p else []

    tensors = {} if metrics is None else {f"{full}/metrics": metrics}
    CASES.append({"spec": {"name": full, "kind": "scheduler", "scheduler": spec, "steps": steps,
                           "base_lrs": list(base_lrs)},
                  "tensors": tensors, "check": check})


def build_scheduler_cases():
    add_scheduler_case("StepLR", {"type": "StepLR", "step_size": 7, "gamma": 0.5})
    add_scheduler_case("StepLR/default_gamma", {"type": "StepLR", "step_size": 30})
    add_scheduler_case("MultiStepLR", {"type": "MultiStepLR", "milestones": [10, 35, 20, 20], "gamma": 0.3})
    add_scheduler_case("ExponentialLR", {"type": "ExponentialLR", "gamma": 0.95})
    add_scheduler_case("CosineAnnealingLR/past_T_max", {"type": "CosineAnnealingLR", "T_max": 25, "eta_min": 0.001})
    add_scheduler_case("CosineAnnealingLR/eta0", {"type": "CosineAnnealingLR", "T_max": 100})
    add_scheduler_case("LinearLR/warmup", {"type": "LinearLR", "start_factor": 0.1, "total_iters": 10})
    add_scheduler_case("LinearLR/decay", {"type": "LinearLR", "start_factor": 1.0, "end_factor": 0.2,
                                          "total_iters": 40})
    add_scheduler_case("LambdaLR/per_group", {"type": "LambdaLR", "lambdas": ["rsqrt_warmup", "staircase"]})
    add_scheduler_case("LambdaLR/inverse", {"type": "LambdaLR", "lambdas": ["inverse", "inverse"]})
    add_scheduler_case("SequentialLR/warmup+cosine", {
        "type": "SequentialLR", "milestones": [5],
        "schedulers": [{"type": "LinearLR", "start_factor": 0.2, "total_iters": 5},
                       {"type": "CosineAnnealingLR", "T_max": 60, "eta_min": 1e-4}]})
    add_scheduler_case("SequentialLR/three", {
        "type": "SequentialLR", "milestones": [4, 30],
        "schedulers": [{"type": "LinearLR", "start_factor": 0.5, "total_iters": 3},
                       {"type": "ExponentialLR", "gamma": 0.97},
                       {"type": "StepLR", "step_size": 10, "gamma": 0.5}]})
    add_scheduler_case("SequentialLR/warmup+multistep", {
        "type": "SequentialLR", "milestones": [10],
        "schedulers": [{"type": "LambdaLR", "lambdas": ["rsqrt_warmup", "inverse"]},
                       {"type": "MultiStepLR", "milestones": [0, 20, 50], "gamma": 0.5}]})
    noisy = torch.tensor([5.0 / (1 + i / 8) + 0.3 * math.sin(i) for i in range(100)], dtype=torch.float64)
    add_scheduler_case("ReduceLROnPlateau/min_rel", {"type": "ReduceLROnPlateau", "patience": 2, "factor": 0.5,
                                                     "threshold": 0.02, "cooldown": 1, "min_lr": [1e-3, 2e-3]},
                       metrics=noisy)
    accuracy = torch.tensor([min(0.9, 0.5 + 0.01 * i) + 0.02 * math.cos(3 * i) for i in range(100)],
                            dtype=torch.float64)
    add_scheduler_case("ReduceLROnPlateau/max_abs", {"type": "ReduceLROnPlateau", "mode": "max", "patience": 3,
                                                     "threshold": 0.005, "threshold_mode": "abs", "cooldown": 2,
                                                     "factor": 0.3, "min_lr": [0.0, 0.0]},
                       metrics=accuracy)


# ---------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("optim_parity", help="path to the optim_parity program")
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print every case's problems in full")
    opts = parser.parse_args()

    build_loss_cases()
    build_optimizer_cases()
    build_clip_cases()
    build_scheduler_cases()
    cases = [c for c in CASES if opts.k in c["spec"]["name"]]
    names = [c["spec"]["name"] for c in cases]
    assert len(set(names)) == len(names), "duplicate case names"

    tensors = {}
    for c in cases:
        tensors.update(c["tensors"])
    with tempfile.TemporaryDirectory(prefix="seqgrad_optim_parity_") as tmp:
        in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
        save_safetensors(in_path, tensors, {"cases": json.dumps([c["spec"] for c in cases])})
        run = subprocess.run([opts.optim_parity, in_path, out_path], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: optim_parity exited with {run.returncode}: {run.stderr.strip()}")
            print(f"0 passed, {len(cases)} failed")
            return 1
        results, metadata = load_safetensors(out_path)
    errors = json.loads(metadata.get("errors", "{}"))

    passed = failed = 0
    for c in cases:
        name = c["spec"]["name"]
        problems = [f"seqgrad threw: {errors[name]}"] if name in errors else c["check"](results)
        if problems:
            failed += 1
            shown = problems if opts.v else problems[:3]
            print(f"FAIL {name}: " + "; ".join(shown))
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
