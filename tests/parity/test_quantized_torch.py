#!/usr/bin/python3
"""Parity of seqgrad's nn::quantize_dynamic with PyTorch 1.13's torch.ao.quantization.quantize_dynamic.

The same float32 Linear and GRU (2 layers, bidirectional) are quantized by both, per tensor
(default_dynamic_qconfig) and per output channel (per_channel_dynamic_qconfig), on each quantized
engine this PyTorch has of 'onednn' and 'qnnpack' (Debian's build has both; fbgemm is absent).
seqgrad quantizes each row of an activation matrix with its own range (ops/quantized.h), PyTorch
each call's whole input with one: so seqgrad's batch is compared row by row with PyTorch run on each
row alone, which is the same arithmetic. For a Linear that is each input row; for the GRU each
sequence, one step per call, each layer and direction a one-layer GRU of its own with the same
weights (PyTorch projects a call's whole input at once, so a call of T steps would share one range
over them). The rows' ranges differ by up to a factor of 100, so one range for the whole batch would
not pass. Checked:
  - the int8 weights equal PyTorch's int_repr() exactly, and the scales to float32 rounding;
  - Linear outputs agree within one quantization step of the activations: for row m and output n,
    step = s_x[m] · s_w[n] · Σ_k |Wq[n, k]| (every input moved by one uint8 step), s_x[m] = row m's
    range / 255;
  - GRU outputs and final states agree within TOL_GRU[engine]. qnnpack rounds exactly as seqgrad's
    8-bit kernels do (measured: Linear identical, GRU within 1.2e-7; see seqgrad_env), so its bound
    is float32 rounding through the recurrence. PyTorch's onednn engine quantizes activations differently (its Linear differs
    by a third of a step), and each step's difference feeds the next through the recurrence: its
    bound is a few activation steps of the gates (|output| <= 1; measured 0.044 on the sequence
    scaled by 3, whose steps are the largest, 0.002 on the one scaled by 0.05).

Usage: test_quantized_torch.py PATH/TO/quant_parity
Prints one line per case, then "N passed, M failed"; exit status 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_safetensors, save_safetensors  # noqa: E402  (the parity scripts' helper)

TOL_GRU = {"qnnpack": 1e-5, "onednn": 0.06}
QCONFIG = {"per_tensor": default_dynamic_qconfig, "per_channel": per_channel_dynamic_qconfig}


def to_np(t):
    """A tensor as a float32 array without torch's NumPy bridge (which a NumPy 2 install next to
    Debian's torch 1.13 breaks)."""
    return np.array(t.detach().double().tolist(), dtype=np.float32)


def torch_weights(qmodule):
    """{param name: (int8 values, scales)} of a dynamically quantized Linear or GRU."""
    found = {}
    if isinstance(qmodule, torch.ao.nn.quantized.dynamic.Linear):
        found["weight"] = qmodule.weight()
    else:
        for name, w in qmodule.get_weight().items():
            found[name] = w
    out = {}
    for name, w in found.items():
        if w.qscheme() in (torch.per_channel_symmetric, torch.per_channel_affine):
            scales = to_np(w.q_per_channel_scales())
        else:
            scales = np.array([w.q_scale()], dtype=np.float32)
        out[name] = (to_np(w.int_repr()), scales)
    return out


def gru_rows_alone(gru, qconfig, x):
    """(output, h_n) of PyTorch's quantized `gru` on x (B, T, F) with every int8 product on one row:
    each sequence alone, one step per call, each layer and direction a quantized one-layer GRU."""
    H, dirs = gru.hidden_size, 2 if gru.bidirectional else 1
    cells = {}
    for layer in range(gru.num_layers):
        for d in range(dirs):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            one = nn.GRU(gru.input_size if layer == 0 else dirs * H, H, batch_first=True)
            one.load_state_dict({f"{k}_l0": getattr(gru, k + suffix) for k in
                                 ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
            cells[layer, d] = quantize_dynamic(nn.Sequential(one), {nn.GRU: qconfig})[0]
    outputs, finals = [], []
    for b in range(x.shape[0]):
        seq, h_n = x[b:b + 1], []
        for layer in range(gru.num_layers):
            outs = []
            for d in range(dirs):
                h, steps = torch.zeros(1, 1, H), [None] * seq.shape[1]
                for t in (range(seq.shape[1]) if d == 0 else reversed(range(seq.shape[1]))):
                    steps[t], h = cells[layer, d](seq[:, t:t + 1], h)
                outs.append(torch.cat(steps, dim=1))
                h_n.append(h)
            seq = torch.cat(outs, dim=2)
        outputs.append(seq)
        finals.append(torch.cat(h_n))
    return torch.cat(outputs), torch.cat(finals, dim=1)


def make_cases(engine):
    torch.manual_seed(0)
    cases, tensors, expected = [], {}, {}
    linear = nn.Linear(64, 48)
    # asymmetric ranges (non-zero zero points), each row's own size
    x_lin = (torch.randn(5, 64) + 0.3) * torch.tensor([[0.1], [1.0], [10.0], [0.5], [3.0]])
    gru = nn.GRU(24, 32, num_layers=2, bidirectional=True, batch_first=True).eval()
    x_gru = torch.randn(3, 7, 24) * torch.tensor([0.05, 1.0, 3.0]).reshape(3, 1, 1)
    for scheme, qconfig in QCONFIG.items():
        name = f"linear_{scheme}_{engine}"
        cases.append({"name": name, "kind": "linear", "scheme": scheme, "in_features": 64, "out_features": 48})
        for k, v in linear.state_dict().items():
            tensors[f"{name}/param/{k}"] = to_np(v)
        tensors[f"{name}/input/x"] = to_np(x_lin)
        q = quantize_dynamic(nn.Sequential(linear), {nn.Linear: qconfig})[0]
        y = torch.cat([q(x_lin[m:m + 1]) for m in range(x_lin.shape[0])])  # each row alone
        expected[name] = {"outputs": {"y": to_np(y)}, "weights": torch_weights(q), "x": to_np(x_lin)}

        name = f"gru_{scheme}_{engine}"
        cases.append({"name": name, "kind": "gru", "scheme": scheme, "input_size": 24, "hidden_size": 32,
                      "num_layers": 2, "bidirectional": True})
        for k, v in gru.state_dict().items():
            tensors[f"{name}/param/{k}"] = to_np(v)
        tensors[f"{name}/input/x"] = to_np(x_gru)
        q = quantize_dynamic(nn.Sequential(gru), {nn.GRU: qconfig})[0]
        output, h_n = gru_rows_alone(gru, qconfig, x_gru)
        expected[name] = {"outputs": {"output": to_np(output.detach()), "h_n": to_np(h_n.detach())},
                          "weights": torch_weights(q)}
    return cases, tensors, expected


def compare(name, want, got, engine):
    problems = []
    for param, (values, scales) in want["weights"].items():
        ours_q, ours_s = got.get(f"{name}/int8/{param}"), got.get(f"{name}/scale/{param}")
        if ours_q is None or ours_s is None:
            problems.append(f"{param}: no int8 weight from seqgrad")
            continue
        mismatched = int((ours_q != values).sum())
        if mismatched:
            problems.append(f"{param}: {mismatched} of {values.size} int8 values differ")
        if not np.allclose(ours_s, scales, rtol=1e-6, atol=0):
            problems.append(f"{param}: scales differ by up to {np.abs(ours_s - scales).max():.3g}")
    for key, ref in want["outputs"].items():
        ours = got.get(f"{name}/output/{key}")
        if ours is None:
            problems.append(f"{key}: no output from seqgrad")
            continue
        err = np.abs(ours - ref)
        if "x" in want:  # Linear: one activation step per output, each row's own
            x = want["x"]
            s_x = (np.maximum(x.max(axis=1), 0) - np.minimum(x.min(axis=1), 0)) / 255  # (M,)
            values, scales = want["weights"]["weight"]
            step = s_x[:, None] * (scales if scales.size > 1 else scales[0]) * np.abs(values).sum(axis=1)
            worst = float((err / step).max())
            detail = f"{key}: max err {err.max():.3g}, {worst:.2f} steps"
            if worst > 1:
                problems.append(detail)
        else:
            detail = f"{key}: max err {err.max():.3g} (tol {TOL_GRU[engine]})"
            if err.max() > TOL_GRU[engine]:
                problems.append(detail)
        print(f"  {name} {detail}")
    return problems


def seqgrad_env(engine):
    """The environment seqgrad's side runs in. qnnpack quantizes activations to 8 bits whatever
    reduce_range says, while seqgrad's oneDNN kernels on a CPU without VNNI use 7 (their int16 pair
    sums would saturate, ops/quantized.h): against qnnpack, seqgrad runs its reference kernels,
    exact and 8-bit everywhere, so the comparison is of the same arithmetic on any CPU."""
    return {**os.environ, "SEQGRAD_INT8_GEMM": "reference"} if engine == "qnnpack" else None


def main():
    parity = sys.argv[1]
    engines = [e for e in ("onednn", "qnnpack") if e in torch.backends.quantized.supported_engines]
    if not engines:
        print("SKIP: this PyTorch has neither the onednn nor the qnnpack quantized engine")
        sys.exit(77)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            torch.backends.quantized.engine = engine
            cases, tensors, expected = make_cases(engine)
            path_in, path_out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
            save_safetensors(path_in, tensors, {"cases": json.dumps(cases)})
            run = subprocess.run([parity, path_in, path_out], capture_output=True, text=True, env=seqgrad_env(engine))
            if run.returncode != 0:
                print(run.stdout, run.stderr)
                sys.exit(1)
            got, meta = load_safetensors(path_out, as_numpy=True)
            errors = {e["name"]: e["error"] for e in json.loads(meta.get("errors", "[]"))}
            for case in cases:
                name = case["name"]
                problems = [errors[name]] if name in errors else compare(name, expected[name], got, engine)
                print(f"{'FAIL' if problems else 'ok  '} {name}" + "".join(f"\n    {p}" for p in problems))
                passed, failed = (passed, failed + 1) if problems else (passed + 1, failed)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
