#!/usr/bin/python3
"""PyTorch parity of seqgrad's attention family: outputs, kept weights and the gradients of
queries, keys, values and every parameter, in float32 (rtol 1e-4) and float64 (rtol 1e-5).

  ScaledDotProductAttention  vs F.softmax(q kᵀ/√d, masked with -inf) v
  MultiHeadAttention         vs torch.nn.MultiheadAttention(batch_first=True) loaded with the same
                             state_dict (key_padding_mask for (B,) lengths, attn_mask for (B, Q))
  additive, chunked, dot, hybrid, multi-level, local (monotonic and predictive), and scaled dot
  with fully masked queries: vs references written below in plain PyTorch tensor ops.

Fully masked queries (length 0) are only given to the plain references: torch's own softmax and
MultiheadAttention return NaN there, seqgrad returns zeros (docs/attention.md).

Usage: test_attention_torch.py PATH/TO/attention_parity
Needs python3-torch (tested with 1.13) and numpy. Prints one line per case, then exactly
"N passed, M failed"; exit status 1 when a case fails.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from parity_check import compare_tensors
from safetensors_io import load_safetensors, save_safetensors

# ---- references in plain PyTorch


def length_mask(lengths, B, Q, K):
    """True where key j >= valid length: (B, 1, K) for (B,) lengths, (B, Q, K) for (B, Q)."""
    if lengths is None:
        return None
    j = torch.arange(K).view(1, 1, K)
    return j >= (lengths.view(B, 1, 1) if lengths.dim() == 1 else lengths.view(B, Q, 1))


def softmax_masked(s, mask):
    """Masked softmax whose fully masked rows are zeros with zero gradients (as seqgrad's)."""
    if mask is None:
        return s.softmax(-1)
    s = s.masked_fill(mask, -math.inf)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return e / torch.where(z > 0, z, torch.ones_like(z))


def additive_scores(q, k, P, prefix):
    qp = q @ P[prefix + "w_q.weight"].T                             # (B, Q, A)
    kp = k @ P[prefix + "w_k.weight"].T                             # (B, K, A)
    f = torch.tanh(qp.unsqueeze(2) + kp.unsqueeze(1))               # (B, Q, K, A)
    return (f @ P[prefix + "w_v.weight"].T).squeeze(-1)             # (B, Q, K)


def dot_scores(q, k, P, prefix, scaled):
    if prefix + "w_q.weight" in P:
        q = q @ P[prefix + "w_q.weight"].T
    s = q @ k.transpose(1, 2)
    return s / math.sqrt(k.shape[-1]) if scaled else s


def reference(case, q, k, v, lengths, P):
    """-> (context, weights)"""
    kind = case["kind"]
    B, Q, K = q.shape[0], q.shape[1], k.shape[1]
    mask = length_mask(lengths, B, Q, K)
    if kind in ("additive", "chunked"):
        w = softmax_masked(additive_scores(q, k, P, ""), mask)
        return w @ v, w
    if kind in ("dot", "scaled_dot"):
        s = dot_scores(q, k, P, "", kind == "scaled_dot")
        if case.get("torch_softmax"):  # exactly F.softmax(q kᵀ/√d) with -inf masks (no empty rows)
            w = F.softmax(s if mask is None else s.masked_fill(mask, -math.inf), dim=-1)
        else:
            w = softmax_masked(s, mask)
        return w @ v, w
    if kind == "hybrid":
        w_add = softmax_masked(additive_scores(q, k, P, "additive."), mask)
        w_dot = softmax_masked(dot_scores(q, k, P, "scaled_dot.", True), mask)
        return 0.5 * (w_add @ v + w_dot @ v), 0.5 * (w_add + w_dot)
    if kind == "multilevel":
        w0 = softmax_masked(additive_scores(q, k, P, "level0."), mask)
        w1 = softmax_masked(dot_scores(q, k, P, "level1.", True), mask)
        return torch.cat([w0 @ v, w1 @ v], dim=2), 0.5 * (w0 + w1)
    if kind == "local":
        if case.get("score", "additive") == "additive":
            s = additive_scores(q, k, P, "additive.")
        else:
            s = dot_scores(q, k, P, "scaled_dot.", True)
        D = case["window"]
        j = torch.arange(K, dtype=q.dtype).view(1, 1, K)
        if case.get("position", "monotonic") == "predictive":
            if lengths is None:
                L = torch.full((B, 1), float(K), dtype=q.dtype)
            else:
                L = (lengths.view(B, 1) if lengths.dim() == 1 else lengths).to(q.dtype)
            span = torch.clamp(L - 1, min=0)
            h = torch.tanh(q @ P["w_p.weight"].T) @ P["v_p.weight"].T
            p = span * torch.sigmoid(h.squeeze(-1))                           # (B, Q)
            sigma = D / 2
            gauss = torch.exp(-((j - p.unsqueeze(2)) ** 2) / (2 * sigma * sigma))
        else:
            p = torch.arange(Q, dtype=q.dtype).view(1, Q).expand(B, Q)
            gauss = None
        window = (j - p.detach().unsqueeze(2)).abs() > D                      # (B, Q, K)
        full = window if mask is None else (window | mask)
        w = softmax_masked(s, full)
        if gauss is not None:
            w = w * gauss
        return w @ v, w
    if kind == "multihead":
        E, h = case["embed_dim"], case["num_heads"]
        kdim, vdim = case.get("kdim") or E, case.get("vdim") or E
        mha = torch.nn.MultiheadAttention(E, h, bias=case.get("bias", True), batch_first=True, kdim=kdim,
                                          vdim=vdim, dtype=q.dtype)
        mha.load_state_dict({name: t for name, t in P.items()}, strict=True)
        kpm, attn_mask = None, None
        if lengths is not None and lengths.dim() == 1:
            kpm = length_mask(lengths, B, Q, K).view(B, K)
        elif lengths is not None:
            attn_mask = length_mask(lengths, B, Q, K).repeat_interleave(h, dim=0)  # (B·h, Q, K)
        out, w = mha(q, k, v, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=True,
                     average_attn_weights=True)
        return out, w, mha
    raise ValueError(kind)


# ---- cases


def param_shapes(case):
    kind, dq, dk, A = case["kind"], case["dq"], case["dk"], case.get("hidden_size", 0)
    add = lambda p: {p + "w_q.weight": (A, dq), p + "w_k.weight": (A, dk), p + "w_v.weight": (1, A)}
    if kind in ("additive", "chunked"):
        return add("")
    if kind in ("dot", "scaled_dot"):
        return {"w_q.weight": (dk, dq)} if case.get("query_size") else {}
    if kind == "hybrid":
        shapes = add("additive.")
        if dq != dk:
            shapes["scaled_dot.w_q.weight"] = (dk, dq)
        return shapes
    if kind == "multilevel":
        return add("level0.")
    if kind == "local":
        shapes = add("additive.") if case.get("score", "additive") == "additive" else (
            {"scaled_dot.w_q.weight": (dk, dq)} if dq != dk else {})
        if case.get("position") == "predictive":
            shapes.update({"w_p.weight": (A, dq), "v_p.weight": (1, A)})
        return shapes
    if kind == "multihead":
        E, kdim, vdim = case["embed_dim"], case.get("kdim") or case["embed_dim"], case.get("vdim") or case["embed_dim"]
        shapes = {"in_proj_weight": (3 * E, E)} if (kdim == E and vdim == E) else {
            "q_proj_weight": (E, E), "k_proj_weight": (E, kdim), "v_proj_weight": (E, vdim)}
        if case.get("bias", True):
            shapes.update({"in_proj_bias": (3 * E,), "out_proj.bias": (E,)})
        shapes["out_proj.weight"] = (E, E)
        return shapes
    raise ValueError(kind)


B, Q, K = 2, 3, 5
LENGTHS = {
    "none": None,
    "per-batch": torch.tensor([5, 3]),
    "per-query": torch.tensor([[5, 2, 4], [1, 3, 5]]),
    "per-query+empty": torch.tensor([[5, 0, 4], [1, 3, 0]]),
}


def cases():
    add = dict(dq=3, dk=6, dv=4, query_size=3, key_size=6, hidden_size=5)
    out = []
    for lengths in ("none", "per-batch", "per-query"):
        out.append(("scaled_dot vs F.softmax", dict(kind="scaled_dot", dq=4, dk=4, dv=3, torch_softmax=True), lengths))
        out.append(("multihead vs nn.MultiheadAttention", dict(kind="multihead", dq=6, dk=6, dv=6, embed_dim=6,
                                                               num_heads=2), lengths))
        out.append(("multihead kdim/vdim", dict(kind="multihead", dq=4, dk=5, dv=3, embed_dim=4, num_heads=2,
                                                kdim=5, vdim=3), lengths))
    out.append(("multihead no bias", dict(kind="multihead", dq=4, dk=4, dv=4, embed_dim=4, num_heads=4, bias=False),
                "per-batch"))
    for lengths in ("none", "per-batch", "per-query+empty"):
        out.append(("scaled_dot", dict(kind="scaled_dot", dq=4, dk=4, dv=3), lengths))
        out.append(("dot with query projection", dict(kind="dot", dq=3, dk=4, dv=3, query_size=3, key_size=4),
                    lengths))
        out.append(("additive", dict(kind="additive", **add), lengths))
        for c in (1, 2, 3, 5, 8):
            out.append((f"chunked C={c}", dict(kind="chunked", chunk_size=c, **add), lengths))
        out.append(("hybrid", dict(kind="hybrid", **add), lengths))
        out.append(("multilevel", dict(kind="multilevel", dq=4, dk=4, dv=3, query_size=4, key_size=4,
                                       hidden_size=5), lengths))
        out.append(("local monotonic additive D=1", dict(kind="local", window=1, **add), lengths))
        out.append(("local predictive scaled_dot D=2", dict(kind="local", window=2, position="predictive",
                                                            score="scaled_dot", **add), lengths))
    return out


def run_case(driver, tmp, name, case, lengths_name, dtype):
    torch.manual_seed(zlib.crc32(f"{name}/{lengths_name}/{dtype}".encode()))
    case = dict(case, dtype="f64" if dtype == torch.float64 else "f32")
    q = torch.randn(B, Q, case["dq"], dtype=dtype)
    k = torch.randn(B, K, case["dk"], dtype=dtype)
    v = torch.randn(B, K, case["dv"], dtype=dtype)
    P = {n: 0.5 * torch.randn(*shape, dtype=dtype) for n, shape in param_shapes(case).items()}
    lengths = LENGTHS[lengths_name]
    out_dim = case["dv"] * (2 if case["kind"] == "multilevel" else 1)
    if case["kind"] == "multihead":
        out_dim = case["embed_dim"]
    dy = torch.randn(B, Q, out_dim, dtype=dtype)

    tensors = {"q": q, "k": k, "v": v, "dy": dy, **{"param." + n: t for n, t in P.items()}}
    if lengths is not None:
        tensors["lengths"] = lengths
    meta = dict(case)
    meta.pop("torch_softmax", None)
    in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_safetensors(in_path, tensors, {"case": json.dumps(meta)})
    proc = subprocess.run([driver, in_path, out_path], capture_output=True, text=True)
    if proc.returncode != 0:
        return False, f"driver failed ({proc.returncode}): {proc.stderr.strip()}"
    got, _ = load_safetensors(out_path)

    # the reference, differentiated w.r.t. inputs and parameters
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    Pr = {n: t.clone().requires_grad_() for n, t in P.items()}
    result = reference(case, qr, kr, vr, lengths, Pr)
    if case["kind"] == "multihead":
        out, w, mha = result
        params = dict(mha.named_parameters())
    else:
        out, w = result
        params = Pr
    names = list(params)
    grads = torch.autograd.grad(out, [qr, kr, vr] + [params[n] for n in names], dy, allow_unused=True)
    expected = {"out": out, "weights": w, "grad.q": grads[0], "grad.k": grads[1], "grad.v": grads[2]}
    for n, g in zip(names, grads[3:]):
        expected["grad.param." + n] = g if g is not None else torch.zeros_like(params[n])

    rtol = 1e-5 if dtype == torch.float64 else 1e-4
    return compare_tensors(expected, got, rtol)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, case, lengths_name in cases():
            for dtype in (torch.float32, torch.float64):
                ok, detail = run_case(driver, tmp, name, case, lengths_name, dtype)
                dt = "f64" if dtype == torch.float64 else "f32"
                print(f"{'PASS' if ok else 'FAIL'} {name} [{dt}, lengths {lengths_name}]: {detail}", flush=True)
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
