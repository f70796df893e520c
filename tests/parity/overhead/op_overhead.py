# PyTorch's side of op_overhead.cpp: the same loops, same statistics.
import time
import torch

torch.set_num_threads(1)


def measure(label, body, block=2000, repeats=41):
    ns = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(block):
            body()
        ns.append((time.perf_counter_ns() - t0) / block)
    ns.sort()
    print(f"torch   {label:<28} median {ns[len(ns) // 2]:8.0f} ns   min {ns[0]:8.0f} ns")


x = torch.ones(1, requires_grad=True)


def no_grad():
    with torch.no_grad():
        y = x * 1.0


def recording():
    y = x * 1.0


def fwd_bwd():
    y = x * 1.0
    y.backward()
    x.grad = None


measure("forward, no grad", no_grad)
measure("forward, recording", recording)
measure("forward + backward", fwd_bwd)
