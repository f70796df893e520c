#!/usr/bin/env python3
"""onnxruntime's side of bench/run.sh's decoding workloads: greedy and beam-5 decoding of one
sentence with the benchmark's model exported by `seqgrad export --bench-data` (encoder.onnx once,
then decoder_step.onnx once per step), on the CPU provider with --threads intra-op threads. The
search loops are models/seq2seq/decode.cpp's, in numpy; the timings include that Python loop and
onnxruntime's per-call overhead, as a Python service built on the exported graphs would see.

Usage: ort_bench.py --data DIR --onnx DIR_PRESET_PATTERN [--threads N] [--quick] [--json FILE] WORKLOAD...
(--onnx holds '{preset}', replaced by seed, d2l or seed_int8: the folders `seqgrad export` wrote;
seed_int8 is the seed model quantized as `seqgrad bench`'s int8 workloads, exported int8 with
`seqgrad export --bench-data DIR/seed --bench-int8`.)
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort

from torch_bench import Plan, Reporter, load_average, scaled, time_blocks

BOS, EOS = 1, 2
WORKLOADS = ["greedy_seed", "beam5_seed", "greedy_d2l", "beam5_d2l", "greedy_seed_int8", "beam5_seed_int8"]


class Exported:
    def __init__(self, folder, threads):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.encoder = ort.InferenceSession(os.path.join(folder, "encoder.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.step = ort.InferenceSession(os.path.join(folder, "decoder_step.onnx"), options,
                                         providers=["CPUExecutionProvider"])

    def encode(self, src_ids):
        return self.encoder.run(["memory", "keys", "state", "src_keep"],
                                {"src": np.array([src_ids], dtype=np.int64),
                                 "src_lengths": np.array([len(src_ids)], dtype=np.int64)})

    def decode_step(self, y, state, memory, keys, src_keep):
        return self.step.run(None, {"y_prev": y, "state": state, "memory": memory, "keys": keys, "src_keep": src_keep})


def greedy_decode(m, src_ids, max_len):
    memory, keys, state, src_keep = m.encode(src_ids)
    y, tokens = np.array([BOS], dtype=np.int64), []
    for _ in range(max_len):
        log_probs, state, _ = m.decode_step(y, state, memory, keys, src_keep)
        y = log_probs.argmax(-1)
        if int(y[0]) == EOS:
            break
        tokens.append(int(y[0]))
    return tokens


def beam_search(m, src_ids, max_len, beam_size, length_penalty=1.0):
    memory, keys, state, src_keep = m.encode(src_ids)
    beams = [([], 0.0, BOS)]  # tokens, log_prob, last
    finished = []

    def normalized(tokens, log_prob):
        return log_prob / (len(tokens) + 1) ** length_penalty

    for _ in range(max_len):
        if not beams:
            break
        n = len(beams)
        last = np.array([b[2] for b in beams], dtype=np.int64)
        log_probs, new_state, _ = m.decode_step(last, state, np.repeat(memory, n, 0), np.repeat(keys, n, 0),
                                                np.repeat(src_keep, n, 0))
        k = min(beam_size, log_probs.shape[1])
        top_id = np.argsort(-log_probs, axis=1, kind="stable")[:, :k]
        cands = sorted(((beams[b][1] + float(log_probs[b, j]), b, int(j)) for b in range(n) for j in top_id[b]),
                       key=lambda c: -c[0])
        nxt, parents = [], []
        for log_prob, b, token in cands:
            if len(nxt) >= beam_size:
                break
            if token == EOS:
                finished.append((normalized(beams[b][0], log_prob), beams[b][0]))
                if len(finished) >= beam_size:
                    break
                continue
            nxt.append((beams[b][0] + [token], log_prob, token))
            parents.append(b)
        if len(finished) >= beam_size or not nxt:
            break
        state = new_state[:, parents]
        beams = nxt
    finished += [(normalized(t, lp), t) for t, lp, _ in beams]
    return max(finished, key=lambda f: f[0])[1]


def bench_decode(preset, beam, plan, onnx_pattern, threads, out, variant=""):
    """variant "_int8": the int8 export of the preset's model (`seqgrad export --bench-int8`)."""
    with open(os.path.join(plan.data, preset + ".json")) as f:
        j = json.load(f)
    m = Exported(onnx_pattern.format(preset=preset + variant), threads)
    src, max_len = j["decode_src"], j["decode_max_len"]
    produced = [0]

    def run():
        tokens = greedy_decode(m, src, max_len) if beam == 1 else beam_search(m, src, max_len, beam)
        produced[0] = len(tokens)

    cpu = []
    ms = scaled(time_blocks(run, plan, 0.5, cpu), 1e3)
    name = "greedy" if beam == 1 else f"beam{beam}"
    out.report(f"{name}_{preset}{variant}", "ms/sent", ms, {"tokens": float(produced[0]), "cpu_ms": scaled(cpu, 1e3)["median"]})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workloads", nargs="*")
    p.add_argument("--data", required=True, help="folder written by `seqgrad bench --export`")
    p.add_argument("--onnx", required=True, help="folder of `seqgrad export --bench-data`, with {preset}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default="")
    a = p.parse_args()
    plan = Plan(1 if a.quick else a.warmup, 2 if a.quick else a.repeats, a.quick, a.data)
    out = Reporter(a.json, a.threads, "onnxruntime")
    print(f"ort_bench: onnxruntime {ort.__version__}, {a.threads} threads, load average {load_average():.2f}", flush=True)
    for w in a.workloads or WORKLOADS:
        if w not in WORKLOADS:
            sys.exit(f"ort_bench: no onnxruntime side for workload '{w}'; choose from: {' '.join(WORKLOADS)}")
        search, preset = w.split("_", 1)  # greedy | beam5, then seed | d2l | seed_int8
        preset, variant = (preset[:-5], "_int8") if preset.endswith("_int8") else (preset, "")
        bench_decode(preset, 1 if search == "greedy" else 5, plan, a.onnx, a.threads, out, variant)


if __name__ == "__main__":
    main()
