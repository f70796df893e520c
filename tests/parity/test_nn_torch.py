#!/usr/bin/python3
"""Parity of seqgrad's nn layers with PyTorch: same weights and inputs give the same outputs and
the same gradients (w.r.t. every input and every parameter).

Covers Linear, Embedding (with padding_idx), the containers (Sequential of Linear, Tanh, Linear;
a module holding a ModuleList and a ModuleDict: state_dict names "layers.0.weight", "heads.out.bias"), GRUCell, LSTMCell, GRU and LSTM (multi-layer,
bidirectional, initial states, per-sequence lengths through pack_padded_sequence(enforce_sorted=
False) + pad_packed_sequence, inter-layer dropout disabled by eval()), in float32 and float64.

PyTorch builds each module with its default init, runs forward and backward of
sum(output * dy) for a random dy, and writes state_dict, inputs, dy and the results to a
safetensors file (written here with numpy: no `safetensors` package needed). The C++ program
nn_parity loads the state_dict into the seqgrad module, does the same, and writes its results;
this script compares them. A tensor matches when max|ours - torch| <= rtol * max|torch|
(rtol 1e-4 in float32, 1e-5 in float64).

Needs python3-torch (tested with 1.13) and numpy.
Usage: test_nn_torch.py PATH/TO/nn_parity
Prints one line per case, then exactly "N passed, M failed"; exit status 1 on any failure.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from safetensors_io import load_safetensors, save_safetensors

RTOL = {"f32": 1e-4, "f64": 1e-5}
TORCH_DTYPE = {"f32": torch.float32, "f64": torch.float64}


# ---- the cases: (name, kind, options); each runs in float32 and float64
B, T, F, H = 3, 5, 6, 7
LENGTHS = [5, 2, 4]  # unsorted on purpose (enforce_sorted=False); one full-length sequence

CASES = [
    ("linear", "linear", dict(in_features=F, out_features=4, bias=True)),
    ("linear_no_bias", "linear", dict(in_features=F, out_features=4, bias=False)),
    ("embedding", "embedding", dict(num_embeddings=10, embedding_dim=4, padding_idx=None)),
    ("embedding_padding_idx", "embedding", dict(num_embeddings=10, embedding_dim=4, padding_idx=1)),
    ("sequential", "sequential", dict(in_features=F, hidden=5, out_features=4)),
    ("containers", "containers", dict(in_features=F, hidden=5, out_features=4)),
    ("gru_cell", "gru_cell", dict(input_size=F, hidden_size=H, bias=True)),
    ("lstm_cell", "lstm_cell", dict(input_size=F, hidden_size=H, bias=True)),
]
for kind in ("gru", "lstm"):
    base = dict(input_size=F, hidden_size=H, num_layers=1, bias=True, bidirectional=False, dropout=0.0,
                train=False, h0=False, lengths=False)
    for suffix, extra in [
        ("", {}),
        ("_h0", dict(h0=True)),
        ("_no_bias", dict(bias=False, h0=True)),
        ("_2layers_lengths", dict(num_layers=2, lengths=True)),
        ("_bidirectional", dict(bidirectional=True, h0=True)),
        ("_2layers_bidirectional_lengths_h0", dict(num_layers=2, bidirectional=True, lengths=True, h0=True)),
        ("_3layers_bidirectional_dropout_eval", dict(num_layers=3, bidirectional=True, dropout=0.3, lengths=True)),
    ]:
        CASES.append((kind + suffix, kind, {**base, **extra}))


class Containers(nn.Module):
    """A ModuleList of two Linear+tanh layers and a ModuleDict of two heads whose outputs add up."""

    def __init__(self, f, hidden, out):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(f, hidden), nn.Linear(hidden, hidden)])
        self.heads = nn.ModuleDict({"out": nn.Linear(hidden, out), "skip": nn.Linear(hidden, out, bias=False)})

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.heads["out"](x) + self.heads["skip"](x)


def torch_module(kind, o):
    if kind == "sequential":
        return nn.Sequential(nn.Linear(o["in_features"], o["hidden"]), nn.Tanh(),
                             nn.Linear(o["hidden"], o["out_features"]))
    if kind == "containers":
        return Containers(o["in_features"], o["hidden"], o["out_features"])
    if kind == "linear":
        return nn.Linear(o["in_features"], o["out_features"], bias=o["bias"])
    if kind == "embedding":
        return nn.Embedding(o["num_embeddings"], o["embedding_dim"], padding_idx=o["padding_idx"])
    if kind == "gru_cell":
        return nn.GRUCell(o["input_size"], o["hidden_size"], bias=o["bias"])
    if kind == "lstm_cell":
        return nn.LSTMCell(o["input_size"], o["hidden_size"], bias=o["bias"])
    cls = nn.GRU if kind == "gru" else nn.LSTM
    return cls(o["input_size"], o["hidden_size"], num_layers=o["num_layers"], bias=o["bias"], batch_first=True,
               bidirectional=o["bidirectional"], dropout=o["dropout"])


def run_torch(kind, o, dtype):
    """Returns (module, inputs, outputs) with the backward of sum(output * dy) done."""
    m = torch_module(kind, o).to(dtype)
    m.train(o.get("train", False))
    randn = lambda *shape: torch.randn(*shape, dtype=dtype, requires_grad=True)
    inputs, outputs = {}, {}
    if kind in ("linear", "sequential", "containers"):
        inputs["x"] = randn(2, 3, o["in_features"])
        outputs["output"] = m(inputs["x"])
    elif kind == "embedding":
        ids = torch.tensor([[1, 3, 9, 1], [0, 3, 1, 5]])  # repeats and (for padding_idx=1) padding
        inputs["ids"] = ids
        outputs["output"] = m(ids)
    elif kind == "gru_cell":
        inputs.update(x=randn(B, F), h0=randn(B, H))
        outputs["h"] = m(inputs["x"], inputs["h0"])
    elif kind == "lstm_cell":
        inputs.update(x=randn(B, F), h0=randn(B, H), c0=randn(B, H))
        outputs["h"], outputs["c"] = m(inputs["x"], (inputs["h0"], inputs["c0"]))
    else:
        n = o["num_layers"] * (2 if o["bidirectional"] else 1)
        x = randn(B, T, F)
        inputs["x"] = x
        state = None
        if o["h0"]:
            inputs["h0"] = randn(n, B, H)
            state = inputs["h0"]
            if kind == "lstm":
                inputs["c0"] = randn(n, B, H)
                state = (inputs["h0"], inputs["c0"])
        if o["lengths"]:
            lengths = torch.tensor(LENGTHS)
            inputs["lengths"] = lengths
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out, final = m(packed, state)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
        else:
            out, final = m(x, state)
        outputs["output"] = out
        if kind == "gru":
            outputs["h_n"] = final
        else:
            outputs["h_n"], outputs["c_n"] = final
    dys = {k: torch.randn_like(v) for k, v in outputs.items()}
    sum((v * dys[k]).sum() for k, v in outputs.items()).backward()
    return m, inputs, outputs, dys


def numpy_of(t):
    return t.detach().cpu().numpy()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    parity = sys.argv[1]
    torch.manual_seed(1234)
    tensors, expected, meta = {}, {}, []
    for base_name, kind, o in CASES:
        for dt in ("f32", "f64"):
            name = f"{base_name}_{dt}"
            m, inputs, outputs, dys = run_torch(kind, o, TORCH_DTYPE[dt])
            meta.append({"name": name, "kind": kind, "dtype": dt, **o})
            for k, p in m.state_dict().items():
                tensors[f"{name}/param/{k}"] = numpy_of(p)
            for k, v in inputs.items():
                tensors[f"{name}/input/{k}"] = numpy_of(v)
            for k, v in dys.items():
                tensors[f"{name}/dy/{k}"] = numpy_of(v)
            want = {f"output/{k}": numpy_of(v) for k, v in outputs.items()}
            want.update({f"grad/param/{k}": numpy_of(p.grad) for k, p in m.named_parameters()})
            want.update({f"grad/input/{k}": numpy_of(v.grad) for k, v in inputs.items() if v.requires_grad})
            expected[name] = (dt, want)

    with tempfile.TemporaryDirectory() as tmp:
        path_in, path_out = os.path.join(tmp, "cases.safetensors"), os.path.join(tmp, "results.safetensors")
        save_safetensors(path_in, tensors, {"cases": json.dumps(meta)})
        run = subprocess.run([parity, path_in, path_out], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL: nn_parity exited with {run.returncode}: {run.stderr.strip()}")
            print(f"0 passed, {len(expected)} failed")
            return 1
        got, got_meta = load_safetensors(path_out, as_numpy=True)
    errors = json.loads(got_meta.get("errors", "{}"))

    passed = failed = 0
    for name, (dt, want) in expected.items():
        rtol = RTOL[dt]
        problems, worst = [], 0.0
        if name in errors:
            problems.append(f"threw: {errors[name]}")
        else:
            for key, w in want.items():
                g = got.get(f"{name}/{key}")
                if g is None:
                    problems.append(f"{key}: missing")
                    continue
                if g.shape != w.shape:
                    problems.append(f"{key}: shape {g.shape} != torch {w.shape}")
                    continue
                scale = float(np.abs(w).max()) if w.size else 0.0
                err = float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) if w.size else 0.0
                rel = err / scale if scale > 0 else err
                worst = max(worst, rel)
                if rel > rtol:
                    problems.append(f"{key}: max abs err {err:.3g} = {rel:.3g} of max|torch| {scale:.3g}")
            extra = [k[len(name) + 1:] for k in got if k.startswith(name + "/") and k[len(name) + 1:] not in want]
            if extra:
                problems.append(f"unexpected results: {extra}")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"PASS {name}: {len(want)} tensors, worst relative error {worst:.2g} (rtol {rtol:g})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
