"""The parity scripts' comparison of seqgrad's outputs with PyTorch's references.

    from parity_check import compare_tensors
    ok, detail = compare_tensors(expected, got, rtol)
"""
import torch


def max_rel_err(a, b):
    """max |a - b| / (|b| + mean |b|): elementwise relative, floored by the tensor's scale."""
    a, b = a.double(), b.double()
    floor = b.abs().mean().item() + 1e-300
    return ((a - b).abs() / (b.abs() + floor)).max().item() if b.numel() else 0.0


def compare_tensors(expected, got, rtol):
    """expected {name: torch reference (None: no gradient, i.e. zeros)} against got {name: tensor}
    -> (ok, detail): every name present with its shape, finite references, max_rel_err <= rtol,
    and nothing unexpected; detail lists the problems or the worst error."""
    worst, problems = 0.0, []
    for key, ref in expected.items():
        if key not in got:
            problems.append(f"{key} missing from seqgrad's output")
            continue
        if ref is None:
            ref = torch.zeros_like(got[key])
        if tuple(got[key].shape) != tuple(ref.shape):
            problems.append(f"{key}: shape {tuple(got[key].shape)} != torch {tuple(ref.shape)}")
            continue
        if not torch.isfinite(ref).all():
            problems.append(f"{key}: the torch reference is not finite (bad case)")
            continue
        err = max_rel_err(got[key], ref.detach())
        worst = max(worst, err)
        if not err <= rtol:
            problems.append(f"{key}: rel err {err:.2e} > {rtol:.0e}")
    extra = sorted(set(got) - set(expected))
    if extra:
        problems.append(f"unexpected outputs {extra}")
    detail = "; ".join(problems) if problems else f"{len(expected)} tensors, worst rel err {worst:.1e}"
    return not problems, detail
