#!/usr/bin/env python3
"""onnxruntime's side of bench/run.sh's decoding workloads: greedy and beam-5 decoding with the
benchmark's model exported by `seqgrad export --bench-data` (encoder.onnx once, then
decoder_step.onnx once per step), on the CPU provider with --threads intra-op threads. The GRU
presets decode one sentence with models/seq2seq/decode.cpp's search in numpy; the transformer
preset decodes its batch of 16 with torch_bench.py's batched search (the same as PyTorch's side),
feeding each step's present_key_i/present_value_i back as past_key_i/past_value_i and gathering
them by the kept rows in beam search, and is checked against seqgrad's tokens and scores as
PyTorch's is. The timings include the Python loop and onnxruntime's per-call overhead, as a Python
service built on the exported graphs would see.

Usage: ort_bench.py --data DIR --onnx DIR_PRESET_PATTERN [--threads N] [--quick] [--json FILE] WORKLOAD...
(--onnx holds '{preset}', replaced by seed, d2l, seed_int8, transformer or transformer_int8: the
folders `seqgrad export` wrote; the *_int8 ones are the model quantized as `seqgrad bench`'s int8
workloads, exported int8 with `seqgrad export --bench-data DIR/PRESET --bench-int8`.)
"""
import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort

import torch
from torch_bench import (Plan, PresetData, Reporter, decode_report, load_average, scaled, time_blocks,
                         time_transformer_search)

BOS, EOS = 1, 2
WORKLOADS = ["greedy_seed", "beam5_seed", "greedy_d2l", "beam5_d2l", "greedy_seed_int8", "beam5_seed_int8",
             "greedy_transformer", "beam5_transformer", "greedy_transformer_int8", "beam5_transformer_int8"]


def session(folder, graph, threads):
    """graph.onnx of an export folder on the CPU provider, `threads` intra-op threads."""
    path = os.path.join(folder, graph + ".onnx")
    if not os.path.isfile(path):
        sys.exit(f"ort_bench: {path} does not exist (bench/run.sh writes it with seqgrad export --bench-data)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class Exported:
    def __init__(self, folder, threads):
        self.encoder = session(folder, "encoder", threads)
        self.step = session(folder, "decoder_step", threads)

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
        k = min(2 * beam_size, log_probs.shape[1])  # as seqgrad: beam_size open ones remain after an <eos>
        top_id = np.argsort(-log_probs, axis=1, kind="stable")[:, :k]
        cands = sorted(((beams[b][1] + float(log_probs[b, j]), b, int(j)) for b in range(n) for j in top_id[b]),
                       key=lambda c: -c[0])
        nxt, parents = [], []
        for rank, (log_prob, b, token) in enumerate(cands):
            if len(nxt) >= beam_size:
                break
            if token == EOS and rank >= beam_size:
                continue  # <eos> finishes only among the beam's best candidates (fairseq's rule, as seqgrad)
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


class OrtTransformerDecoder:
    """torch_bench.py's batched search over the exported Transformer, as its CachedTransformerDecoder:
    encoder.onnx once per batch gives each layer's cross-attention keys and values; decoder_step.onnx
    takes each layer's self-attention cache (past_key_i, past_value_i; empty before the first token)
    and returns it one position longer (present_*), which the next step takes back. reorder() keeps
    the caches of the rows that continue and gathers the cross-attention's inputs when the rows'
    sentences change."""

    class State:
        def __init__(self, sentence_inputs, past):
            self.sentence_inputs = sentence_inputs  # cross_key_i, cross_value_i (B, h, S, d), src_keep (B, S)
            self.inputs = sentence_inputs           # the same for each row
            self.past = past                        # past_key_i, past_value_i (N, h, t, d)
            self.row_sentence = list(range(len(sentence_inputs["src_keep"])))

    def __init__(self, folder, threads):
        self.encoder = session(folder, "encoder", threads)
        self.step_graph = session(folder, "decoder_step", threads)
        inputs = self.step_graph.get_inputs()
        self.cross = [i.name for i in inputs if i.name.startswith("cross_")] + ["src_keep"]
        self.past_shapes = {i.name: i.shape[1:] for i in inputs if i.name.startswith("past_")}  # [h, t, d]
        self.outputs = [o.name for o in self.step_graph.get_outputs()]
        if not self.past_shapes:
            sys.exit(f"ort_bench: {folder}/decoder_step.onnx has no past_* cache inputs: not a Transformer export")

    def start(self, src, lengths):
        inputs = dict(zip(self.cross, self.encoder.run(self.cross, {"src": src.numpy(), "src_lengths": lengths.numpy()})))
        n = src.size(0)
        past = {name: np.zeros((n, h, 0, d), np.float32) for name, (h, _, d) in self.past_shapes.items()}
        return self.State(inputs, past)

    def step(self, state, y_prev):
        out = dict(zip(self.outputs, self.step_graph.run(self.outputs, {"y_prev": y_prev.numpy(), **state.inputs,
                                                                          **state.past})))
        state.past = {"past_" + name[len("present_"):]: v for name, v in out.items() if name.startswith("present_")}
        return torch.from_numpy(out["log_probs"]), torch.from_numpy(out["weights"])

    def reorder(self, state, rows):
        """Row r of the next step continues row rows[r] of the last one."""
        index = np.asarray(rows, dtype=np.int64)
        state.past = {name: v.take(index, 0) for name, v in state.past.items()}
        sentences = [state.row_sentence[r] for r in rows]
        if sentences != state.row_sentence:
            s = np.asarray(sentences, dtype=np.int64)
            state.inputs = {name: v.take(s, 0) for name, v in state.sentence_inputs.items()}
            state.row_sentence = sentences


def bench_decode_transformer(beam, plan, onnx_pattern, threads, out, variant=""):
    """The transformer preset's batch, checked against seqgrad's tokens and scores for the same
    model (variant "_int8": seqgrad's int8 model, which the int8 export computes as seqgrad does)."""
    d = PresetData(plan.data, "transformer")
    decoder = OrtTransformerDecoder(onnx_pattern.format(preset="transformer" + variant), threads)
    result, ms, cpu = time_transformer_search(decoder, d, beam, plan)
    name = ("greedy" if beam == 1 else f"beam{beam}") + "_transformer" + variant
    decode_report(name, result, ms, cpu, (d.decode_tokens, d.decode_scores), out)


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
        search, preset = w.split("_", 1)  # greedy | beam5, then seed | d2l | transformer, maybe with _int8
        preset, variant = (preset[:-5], "_int8") if preset.endswith("_int8") else (preset, "")
        beam = 1 if search == "greedy" else 5
        if preset == "transformer":
            bench_decode_transformer(beam, plan, a.onnx, a.threads, out, variant)
        else:
            bench_decode(preset, beam, plan, a.onnx, a.threads, out, variant)


if __name__ == "__main__":
    main()
