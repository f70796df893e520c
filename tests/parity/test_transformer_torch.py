#!/usr/bin/python3
"""PyTorch parity of seqgrad's Transformer pieces: outputs and the gradients of every input and
parameter, in float32 (rtol 5e-5) and float64 (rtol 1e-12), with torch's modules loaded from the
same state_dict (which seqgrad loads strictly: the parameter names, and their order, are checked too):

  layer_norm (nn::LayerNorm)        vs torch.nn.LayerNorm (one and two trailing dims, no affine)
  TransformerEncoderLayer, -Decoder vs torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
  TransformerEncoder, -Decoder      vs torch.nn.TransformerEncoder / TransformerDecoder (with norm)
  (dropout 0; post-norm and pre-norm; relu and gelu; (T, B, E) and batch_first; no mask, padding
  (key_padding_mask), causal (a bool attn_mask) and both; the decoders' memory padded)

seqgrad's causal mask is per-query valid lengths min(t + 1, length) (nn::causal_lengths), torch's
an upper-triangular attn_mask beside key_padding_mask. No case masks every key of a query (torch
gives NaN there, seqgrad zeros).

Usage: test_transformer_torch.py PATH/TO/transformer_parity
Needs python3-torch (tested with 1.13) and numpy. Prints one line per case, then exactly
"N passed, M failed"; exit status 1 when a case fails.
"""
import json
import os
import subprocess
import sys
import tempfile
import zlib

try:
    import torch
    import torch.nn as tnn
except ImportError:
    print("SKIP: PyTorch is not installed (python3-torch; scripts/setup.sh --tests)")
    sys.exit(77)

from parity_check import compare_tensors
from safetensors_io import load_safetensors, save_safetensors  # noqa: E402 (needs torch)

B, T, S = 3, 4, 5
LENGTHS = torch.tensor([4, 2, 3])          # of x / tgt (T = 4): no row is empty
MEMORY_LENGTHS = torch.tensor([5, 1, 3])   # of memory (S = 5)


def layer_kwargs(case, dtype):
    return dict(d_model=case["d_model"], nhead=case["nhead"], dim_feedforward=case["dim_feedforward"], dropout=0.0,
                activation=case.get("activation", "relu"), batch_first=case.get("batch_first", False),
                norm_first=case.get("norm_first", False), dtype=dtype)


def make_module(case, dtype):
    kind = case["kind"]
    if kind == "layer_norm":
        return tnn.LayerNorm(case["normalized_shape"], eps=1e-5, elementwise_affine=case.get("affine", True),
                             dtype=dtype)
    norm = tnn.LayerNorm(case["d_model"], dtype=dtype) if case.get("norm") else None
    if kind == "encoder_layer":
        return tnn.TransformerEncoderLayer(**layer_kwargs(case, dtype))
    if kind == "decoder_layer":
        return tnn.TransformerDecoderLayer(**layer_kwargs(case, dtype))
    if kind == "encoder":
        return tnn.TransformerEncoder(tnn.TransformerEncoderLayer(**layer_kwargs(case, dtype)), case["num_layers"],
                                      norm=norm, enable_nested_tensor=False)
    if kind == "decoder":
        return tnn.TransformerDecoder(tnn.TransformerDecoderLayer(**layer_kwargs(case, dtype)), case["num_layers"],
                                      norm=norm)
    raise ValueError(kind)


def shaped(case, batch, steps, dtype):
    """A random (T, B, E) or (B, T, E) input."""
    E = case["d_model"]
    return torch.randn(batch, steps, E, dtype=dtype) if case.get("batch_first") else torch.randn(steps, batch, E,
                                                                                                  dtype=dtype)


def cases():
    out = [
        ("layer_norm (E,)", dict(kind="layer_norm", normalized_shape=[6], affine=True)),
        ("layer_norm (T, E)", dict(kind="layer_norm", normalized_shape=[3, 6], affine=True)),
        ("layer_norm no affine", dict(kind="layer_norm", normalized_shape=[6], affine=False)),
    ]
    sizes = dict(d_model=8, nhead=2, dim_feedforward=12)
    for norm_first in (False, True):
        for padded in (False, True):
            for causal in (False, True):
                order = "pre-norm" if norm_first else "post-norm"
                masks = f"{'padding' if padded else 'no padding'}, {'causal' if causal else 'not causal'}"
                c = dict(sizes, norm_first=norm_first, padded=padded, causal=causal)
                out.append((f"encoder layer {order}, {masks}", dict(c, kind="encoder_layer")))
                out.append((f"decoder layer {order}, {masks}", dict(c, kind="decoder_layer")))
        out.append((f"encoder layer {order} gelu batch_first", dict(sizes, kind="encoder_layer", norm_first=norm_first,
                                                                   activation="gelu", batch_first=True, padded=True)))
        out.append((f"decoder layer {order} gelu batch_first", dict(sizes, kind="decoder_layer", norm_first=norm_first,
                                                                   activation="gelu", batch_first=True, padded=True,
                                                                   causal=True)))
        out.append((f"encoder 2 layers {order} + norm", dict(sizes, kind="encoder", num_layers=2, norm=True,
                                                            norm_first=norm_first, padded=True)))
        out.append((f"decoder 2 layers {order} + norm", dict(sizes, kind="decoder", num_layers=2, norm=True,
                                                            norm_first=norm_first, padded=True, causal=True)))
    return out


def run_case(driver, tmp, name, case, dtype):
    torch.manual_seed(zlib.crc32(f"{name}/{dtype}".encode()))
    case = dict(case, dtype="f64" if dtype == torch.float64 else "f32")
    kind = case["kind"]
    module = make_module(case, dtype)
    with torch.no_grad():  # away from torch's init (LayerNorm's 1 and 0), so every parameter matters
        for p in module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    module.eval()

    # inputs and the torch forward
    tensors, kwargs = {}, {}
    if kind == "layer_norm":
        inputs = {"x": torch.randn(B, *case["normalized_shape"], dtype=dtype)}
    elif kind in ("encoder_layer", "encoder"):
        inputs = {"x": shaped(case, B, T, dtype)}
    else:
        inputs = {"tgt": shaped(case, B, T, dtype), "memory": shaped(case, B, S, dtype)}
        tensors["memory_lengths"] = MEMORY_LENGTHS
        kwargs["memory_key_padding_mask"] = torch.arange(S).view(1, S) >= MEMORY_LENGTHS.view(B, 1)
    if case.get("padded"):
        tensors["lengths"] = LENGTHS
        padding = torch.arange(T).view(1, T) >= LENGTHS.view(B, 1)
        kwargs["src_key_padding_mask" if kind.startswith("encoder") else "tgt_key_padding_mask"] = padding
    if case.get("causal"):
        kwargs["mask" if kind.startswith("encoder") else "tgt_mask"] = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    if kind == "encoder_layer":  # torch's layer calls its arguments src_mask
        kwargs = {("src_mask" if k == "mask" else k): v for k, v in kwargs.items()}

    leaves = {n: t.clone().requires_grad_() for n, t in inputs.items()}
    out = module(*leaves.values(), **kwargs)
    dy = torch.randn_like(out)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(out, list(leaves.values()) + list(params.values()), dy, allow_unused=True)
    expected = {"out": out}
    for n, g in zip(list(leaves) + ["param." + p for p in params], grads):
        expected["grad." + n] = g

    meta = {k: v for k, v in case.items() if k != "padded"}
    meta["parameter_order"] = list(params)  # named_parameters() must list them in torch's order
    tensors.update(inputs)
    tensors["dy"] = dy
    tensors.update({"param." + n: p.detach() for n, p in module.state_dict().items()})
    in_path, out_path = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
    save_safetensors(in_path, tensors, {"case": json.dumps(meta)})
    proc = subprocess.run([driver, in_path, out_path], capture_output=True, text=True)
    if proc.returncode != 0:
        return False, f"driver failed ({proc.returncode}): {proc.stderr.strip()}"
    got, _ = load_safetensors(out_path)

    rtol = 1e-12 if dtype == torch.float64 else 5e-5
    return compare_tensors(expected, got, rtol)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases():
            for dtype in (torch.float32, torch.float64):
                ok, detail = run_case(driver, tmp, name, case, dtype)
                dt = "f64" if dtype == torch.float64 else "f32"
                print(f"{'PASS' if ok else 'FAIL'} {name} [{dt}]: {detail}", flush=True)
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
