"""The ring-allreduce model of docs/scaling.md: predicted data-parallel efficiency of the presets on
N machines. python3 docs/scaling_model.py prints the tables the document shows."""
import math

ALPHA = 50e-6  # s per message step over TCP (latency); NCCL/RDMA is ~5-10x lower
LINKS = {"10 Gbit/s": 10e9 / 8, "100 Gbit/s": 100e9 / 8}  # bytes/s per direction
MACHINES = (8, 64, 256)
GLOBAL_BATCH = 64
BACKWARD_SHARE = 0.66  # backward's part of a training step

# word-level preset: (parameters, one machine's time per step on 2 threads in s (an epoch of 454
# batches: docs/results.md#word-level-default and #word-level-seed), its gradient buckets in launch
# order as (MB, launch time before the end of backward as a share of backward), measured on 2 ranks
# (docs/results.md#data-parallel-overlap): every gradient but the output layer's is final only
# near the end of backward, when the decoder's time loop and the encoder have been run back)
PRESETS = {
    "default": (7_002_220, 82.0 / 454, [(16.46, 0.475), (11.55, 0.037)]),
    "seed": (26_974_801, 295.0 / 454, [(42.81, 0.692), (26.59, 0.059), (28.89, 0.036), (9.62, 0.010)]),
}


def ring_allreduce_seconds(n, size, bandwidth):
    """Reduce-scatter then all-gather: 2 (n-1) steps, each sending size/n bytes."""
    return 2 * (n - 1) * (ALPHA + size / n / bandwidth)


def exposed_seconds(n, buckets, backward, bandwidth):
    """The buckets' allreduces one after another, each from its launch (or the previous one's end):
    the part that runs past the end of backward."""
    end = -math.inf
    for mb, launch_share in buckets:
        end = max(end, -launch_share * backward) + ring_allreduce_seconds(n, mb * 1e6, bandwidth)
    return max(0.0, end)


def efficiency(compute, exposed):
    return compute / (compute + exposed)


for preset, (params, t1, buckets) in PRESETS.items():
    size = 4 * params
    print(f"{preset}: {size / 1e6:.1f} MB per step, 1 machine {t1 * 1e3:.0f} ms/step")
    for link, bandwidth in LINKS.items():
        cells = []
        for n in MACHINES:
            comm = ring_allreduce_seconds(n, size, bandwidth)
            # strong scaling: the global batch of 64 split n ways (compute / n), no overlap counted
            strong = "-" if n > GLOBAL_BATCH else f"{efficiency(t1 / n, comm):.0%}"
            # weak scaling: 64 pairs per machine; one allreduce after backward, and the buckets
            # launched at the measured times (each pays the latency term: more buckets, more of it)
            weak = efficiency(t1, comm)
            overlapped = efficiency(t1, exposed_seconds(n, buckets, BACKWARD_SHARE * t1, bandwidth))
            cells.append(f"N={n}: comm {comm * 1e3:.0f} ms, strong {strong}, "
                         f"weak {weak:.0%} (buckets {overlapped:.0%})")
        print(f"  {link}: " + "; ".join(cells))
