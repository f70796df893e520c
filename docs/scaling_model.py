"""The ring-allreduce model of docs/scaling.md: predicted data-parallel efficiency of the presets on
N machines. python3 docs/scaling_model.py prints the tables the document shows."""

ALPHA = 50e-6  # s per message step over TCP (latency); NCCL/RDMA is ~5-10x lower
LINKS = {"10 Gbit/s": 10e9 / 8, "100 Gbit/s": 100e9 / 8}  # bytes/s per direction
MACHINES = (8, 64, 256)
GLOBAL_BATCH = 64

# word-level preset: (parameters, one machine's time per step on 2 threads in s (an epoch of 454
# batches: docs/results.md#word-level-default and #word-level-seed), bytes of the buckets before the
# last one (seqgrad train's closing data-parallel line: docs/results.md#data-parallel))
PRESETS = {
    "default": (7_002_220, 82.0 / 454, 16.46e6),
    "seed": (26_974_801, 295.0 / 454, (42.81 + 26.59 + 28.89) * 1e6),
}


def ring_allreduce_seconds(n, size, bandwidth):
    """Reduce-scatter then all-gather: 2 (n-1) steps, each sending size/n bytes."""
    return 2 * (n - 1) * (ALPHA + size / n / bandwidth)


def efficiency(compute, comm, hidden):
    return compute / (compute + max(0.0, comm - hidden))


for preset, (params, t1, early_bytes) in PRESETS.items():
    size = 4 * params
    overlap = early_bytes / size  # at most the buckets launched before backward ends are hidden
    print(f"{preset}: {size / 1e6:.1f} MB per step, 1 machine {t1 * 1e3:.0f} ms/step, "
          f"hideable share {overlap:.0%}")
    for link, bandwidth in LINKS.items():
        cells = []
        for n in MACHINES:
            comm = ring_allreduce_seconds(n, size, bandwidth)
            strong = "-" if n > GLOBAL_BATCH else f"{efficiency(t1 / n, comm, 0):.0%}"
            weak0 = efficiency(t1, comm, 0)
            weak = efficiency(t1, comm, min(comm * overlap, 0.66 * t1))  # backward ~2/3 of a step
            cells.append(f"N={n}: comm {comm * 1e3:.0f} ms, strong {strong}, weak {weak0:.0%}-{weak:.0%}")
        print(f"  {link}: " + "; ".join(cells))
