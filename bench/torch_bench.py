#!/usr/bin/env python3
"""PyTorch's side of `seqgrad bench`: the same workloads, shapes, data and initial weights.

The seq2seq presets' batches, a test sentence and the initial weights come from
`seqgrad bench --export DIR` (so both frameworks train the same model on the same batches); the
kernel workloads use the shapes of tools/cmd_bench.cpp. The model below is the natural PyTorch
version of models/seq2seq/model.h: nn.GRU with pack_padded_sequence for the encoder, the additive
attention with its key projection computed once per batch, one nn.GRU call per decoder step,
F.cross_entropy with label smoothing, clip_grad_norm_ and Adam. step_transformer's model is
models/seq2seq/transformer.h's in torch.nn.TransformerEncoder / TransformerDecoder (pre-norm,
batch-first, one embedding tied three ways, sinusoidal positions) on the synthetic batches exported.

Needs Debian's python3-torch (tested with 1.13) and numpy.
Usage: torch_bench.py --data DIR [--threads N] [--repeats N] [--warmup N] [--quick] [--json FILE] [--label NAME]
                      [WORKLOAD ...]
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

PAD, BOS, EOS = 0, 1, 2
K_BATCHES = 2  # a timed cycle runs these batches once each (as kBatches in cmd_bench.cpp)


# ---- statistics and reporting (the same quantiles as cmd_bench.cpp)
def stats_of(values):
    v = sorted(values)

    def at(q):
        pos = q * (len(v) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    return {"median": at(0.5), "p10": at(0.1), "p90": at(0.9), "min": v[0], "max": v[-1], "n": len(v)}


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return -1.0


class Reporter:
    def __init__(self, json_path, threads, label):
        self.json_path, self.threads, self.label = json_path, threads, label

    def report(self, workload, unit, s, extra=None, note=""):
        extra = extra or {}
        line = f"{workload:<22} {s['median']:>10.4g} {unit:<8} [p10 {s['p10']:.4g}, p90 {s['p90']:.4g}, n {s['n']}]"
        for k in sorted(extra):
            line += f"  {k} {extra[k]:.4g}"
        if note:
            line += f"  ({note})"
        print(line, flush=True)
        if self.json_path:
            j = {"impl": self.label, "workload": workload, "unit": unit, **s, "threads": self.threads,
                 "load": load_average(), **extra}
            if note:
                j["note"] = note
            with open(self.json_path, "a") as f:
                f.write(json.dumps(j) + "\n")


class Plan:
    def __init__(self, warmup, repeats, quick, data):
        self.warmup, self.repeats, self.quick, self.data = warmup, repeats, quick, data


def time_blocks(body, plan, block_seconds=0.2, cpu=None):
    for _ in range(plan.warmup):
        body()
    t0 = time.perf_counter()
    body()
    once = max(time.perf_counter() - t0, 1e-7)
    block = 1 if plan.quick else min(max(int(block_seconds / once), 1), 1000000)
    per_call = []
    for _ in range(plan.repeats):
        start, c0 = time.perf_counter(), time.process_time()
        for _ in range(block):
            body()
        per_call.append((time.perf_counter() - start) / block)
        if cpu is not None:
            cpu.append((time.process_time() - c0) / block)
    return per_call


def scaled(seconds, factor):
    return stats_of([s * factor for s in seconds])


# ---- safetensors (8-byte header size, JSON header, raw little-endian data)
NP_DTYPE = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[begin:end], dtype=NP_DTYPE[e["dtype"]]).reshape(e["shape"]).copy())
    return out


# ---- the model (same parameter names as seqgrad's state_dict)
class AdditiveAttention(nn.Module):
    def __init__(self, query_size, key_size, hidden_size):
        super().__init__()
        self.w_q = nn.Linear(query_size, hidden_size, bias=False)
        self.w_k = nn.Linear(key_size, hidden_size, bias=False)
        self.w_v = nn.Linear(hidden_size, 1, bias=False)

    def attend_projected(self, queries, projected_keys, values, lengths):
        # queries (B, Q, Dq), projected_keys (B, K, A), values (B, K, Dv), lengths (B,)
        features = torch.tanh(self.w_q(queries).unsqueeze(2) + projected_keys.unsqueeze(1))  # (B, Q, K, A)
        scores = self.w_v(features).squeeze(-1)                                              # (B, Q, K)
        k = scores.size(-1)
        mask = torch.arange(k).view(1, 1, k) >= lengths.view(-1, 1, 1)                      # (B, 1, K)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return torch.bmm(weights, values), weights

    def forward(self, queries, keys, values, lengths):
        return self.attend_projected(queries, self.w_k(keys), values, lengths)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.L, self.H = c["num_layers"], c["hidden_size"]
        self.embedding = nn.Embedding(c["src_vocab"], c["embed_size"], padding_idx=c["pad_id"])
        self.dropout = nn.Dropout(c["dropout"])
        self.rnn = nn.GRU(c["embed_size"], c["hidden_size"], c["num_layers"], batch_first=True, bidirectional=True,
                          dropout=c["dropout"])
        self.bridge = nn.Linear(2 * c["hidden_size"], c["hidden_size"])

    def forward(self, src, lengths):
        x = self.dropout(self.embedding(src))                                               # (B, S, E)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)
        outputs, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))   # (B, S, 2H)
        b = src.size(0)
        pairs = h_n.view(self.L, 2, b, self.H).permute(0, 2, 1, 3).reshape(self.L, b, 2 * self.H)
        return outputs, torch.tanh(self.bridge(pairs))                                      # (L, B, H)


class AttnDecoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, H, L = c["embed_size"], c["hidden_size"], c["num_layers"]
        A = c["attention_size"] or H
        self.deep_output = c["deep_output"]
        self.embedding = nn.Embedding(c["tgt_vocab"], E, padding_idx=c["pad_id"])
        self.dropout = nn.Dropout(c["dropout"])
        self.attention = AdditiveAttention(H, 2 * H, A)
        self.rnn = nn.GRU(E + 2 * H, H, L, batch_first=True, dropout=c["dropout"])
        self.out = nn.Linear(3 * H + E if self.deep_output else H, c["tgt_vocab"])

    def prepare(self, enc_outputs, lengths):
        return enc_outputs, self.attention.w_k(enc_outputs), lengths  # keys projected once per batch

    def step(self, y_prev, state, memory):
        values, keys, lengths = memory
        query = state[-1].unsqueeze(1)                                                       # (B, 1, H)
        context, weights = self.attention.attend_projected(query, keys, values, lengths)     # (B, 1, 2H)
        embedded = self.dropout(self.embedding(y_prev)).unsqueeze(1)                         # (B, 1, E)
        output, state = self.rnn(torch.cat([embedded, context], 2), state)
        features = torch.cat([output, context, embedded], 2) if self.deep_output else output
        return self.out(features).squeeze(1), state, weights.squeeze(1)

    def forward(self, tgt_in, state, memory):
        steps = []
        for t in range(tgt_in.size(1)):
            logits, state, _ = self.step(tgt_in[:, t], state, memory)
            steps.append(logits)
        return torch.stack(steps, 1)                                                         # (B, T, V)


class Seq2Seq(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.encoder = Encoder(c)
        self.decoder = AttnDecoder(c)

    def forward(self, src, src_lengths, tgt_in):
        enc_outputs, state = self.encoder(src, src_lengths)
        return self.decoder(tgt_in, state, self.decoder.prepare(enc_outputs, src_lengths))


# ---- the Transformer translator (models/seq2seq/transformer.h), pre-norm, three-way tied embeddings
def sinusoidal_positions(positions, d):
    """nn/positional.h's table: P[p, 2i] = sin(p / 10000^(2i/d)), P[p, 2i+1] = cos(the same)."""
    p = torch.arange(positions, dtype=torch.float32).unsqueeze(1)
    angle = p * torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(positions, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table


class TransformerTranslator(nn.Module):
    """torch.nn.TransformerEncoder / TransformerDecoder (norm_first, batch_first, a final LayerNorm
    each), dropout(√E · embedding + positions) on both sides, logits = y · embeddingᵀ."""

    def __init__(self, c):
        super().__init__()
        E, L, p = c["hidden_size"], c["num_layers"], c["dropout"]
        if not (c["tie_embeddings"] and c["norm_first"] and c["positional"] == "sinusoidal"):
            sys.exit("torch_bench: the Transformer here is pre-norm with tied embeddings and sinusoidal positions")
        self.embedding = nn.Embedding(c["src_vocab"], E, padding_idx=c["pad_id"])
        layer = dict(d_model=E, nhead=c["heads"], dim_feedforward=c["ffn_size"] or 4 * E, dropout=p,
                     batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), L, norm=nn.LayerNorm(E),
                                             enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), L, norm=nn.LayerNorm(E))
        self.dropout = nn.Dropout(p)
        self.register_buffer("positions", sinusoidal_positions(1024, E), persistent=False)
        self.scale = math.sqrt(E)

    def embed(self, ids):
        return self.dropout(self.embedding(ids) * self.scale + self.positions[:ids.size(1)])

    def forward(self, src, src_lengths, tgt_in):
        S, T = src.size(1), tgt_in.size(1)
        padding = torch.arange(S).unsqueeze(0) >= src_lengths.unsqueeze(1)                   # (B, S), True = <pad>
        memory = self.encoder(self.embed(src), src_key_padding_mask=padding)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)                           # True = not attended
        y = self.decoder(self.embed(tgt_in), memory, tgt_mask=causal, memory_key_padding_mask=padding)
        return F.linear(y, self.embedding.weight)                                             # (B, T, V)


class PresetData:
    def __init__(self, data_dir, preset):
        with open(os.path.join(data_dir, preset + ".json")) as f:
            j = json.load(f)
        self.train = j["config"]
        self.model_config = j["config"]["model"]
        self.batches = []
        for b in j["batches"]:
            self.batches.append({
                "src": torch.tensor(b["src"], dtype=torch.int64).view(*b["src_shape"]),
                "src_lengths": torch.tensor(b["src_lengths"], dtype=torch.int64),
                "tgt_in": torch.tensor(b["tgt_in"], dtype=torch.int64).view(*b["tgt_shape"]),
                "tgt_out": torch.tensor(b["tgt_out"], dtype=torch.int64).view(*b["tgt_shape"]),
                "target_tokens": b["target_tokens"], "gemm_flops": b["gemm_flops"]})
        self.decode_src = j.get("decode_src")  # the GRU presets' one sentence
        self.decode_max_len = j["decode_max_len"]
        if "decode_batch" in j:  # the transformer's batch, and seqgrad's tokens and scores for it
            db = j["decode_batch"]
            self.decode_batch = (torch.tensor(db["src"], dtype=torch.int64).view(*db["src_shape"]),
                                 torch.tensor(db["src_lengths"], dtype=torch.int64))
            self.decode_tokens, self.decode_scores = j["decode_tokens"], j["decode_scores"]
        self.weights_path = os.path.join(data_dir, preset + ".safetensors")

    def make_model(self):
        transformer = self.model_config.get("architecture", "gru") == "transformer"
        model = TransformerTranslator(self.model_config) if transformer else Seq2Seq(self.model_config)
        state = load_safetensors(self.weights_path)
        missing, unexpected = model.load_state_dict(state, strict=True)
        return model


class Trainer:
    def __init__(self, model, train, amp=None):
        self.model, self.amp = model, amp  # amp torch.bfloat16: forward and loss under CPU autocast
        self.optimizer = torch.optim.Adam(model.parameters(), lr=train["lr"])
        self.scheduler = None
        if train.get("lr_schedule") == "inverse_sqrt":  # optim/scheduler.h's InverseSqrtLR, stepped per update
            w = train["warmup_updates"]
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lambda u: u / w if u < w else math.sqrt(w / u))
        self.label_smoothing, self.clip = train["label_smoothing"], train["clip"]
        model.train()

    def step(self, b):
        with torch.autocast("cpu", dtype=self.amp or torch.bfloat16, enabled=self.amp is not None):
            logits = self.model(b["src"], b["src_lengths"], b["tgt_in"])                    # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), b["tgt_out"].reshape(-1), ignore_index=PAD,
                                   label_smoothing=self.label_smoothing)
        value = loss.item()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return value


# A smoke (--quick) measures a slow step once: PyTorch 1.13's bf16 step on a CPU without native
# bf16 products (no AVX-512 BF16) takes about a minute (54 s measured on an AMD EPYC).
SLOW_STEP_S = 5.0


def quick_repeats(plan, warmup_step_s):
    return 1 if plan.quick and warmup_step_s > SLOW_STEP_S else plan.repeats


def bench_step(preset, plan, out, amp=None):
    d = PresetData(plan.data, preset)
    torch.manual_seed(0)
    trainer = Trainer(d.make_model(), d.train, amp)
    tokens = sum(b["target_tokens"] for b in d.batches)
    flops = sum(b["gemm_flops"] for b in d.batches)
    warmup_start = time.perf_counter()
    for _ in range(plan.warmup):
        for b in d.batches:
            trainer.step(b)
    warmup_step_s = (time.perf_counter() - warmup_start) / max(plan.warmup * len(d.batches), 1)
    per_step, cpu_per_step, loss = [], [], 0.0
    for _ in range(quick_repeats(plan, warmup_step_s)):
        t0, c0 = time.perf_counter(), time.process_time()
        for b in d.batches:
            loss = trainer.step(b)
        per_step.append((time.perf_counter() - t0) / len(d.batches))
        cpu_per_step.append((time.process_time() - c0) / len(d.batches))
    ms = scaled(per_step, 1e3)
    step_s = ms["median"] / 1e3
    out.report("step_" + preset + ("_bf16" if amp is not None else ""), "ms/step", ms,
               {"tok_s": tokens / len(d.batches) / step_s, "gemm_gflops": flops / len(d.batches) / step_s / 1e9,
                "gemm_gflop_per_step": flops / len(d.batches) / 1e9, "cpu_ms": scaled(cpu_per_step, 1e3)["median"],
                "loss": loss})


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line[len(key):].split()[0])
    return -1


def bench_memory(preset, plan, out):
    d = PresetData(plan.data, preset)
    torch.manual_seed(0)
    trainer = Trainer(d.make_model(), d.train)
    for _ in range(max(plan.warmup, 1)):
        trainer.step(d.batches[0])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kb("VmRSS:")
    trainer.step(d.batches[0])
    peak = status_kb("VmHWM:")
    out.report("memory_" + preset, "MB peak", stats_of([peak / 1024.0]),
               {"before_mb": before / 1024.0, "step_delta_mb": (peak - before) / 1024.0})


# ---- decoding: greedy and beam search as models/seq2seq/decode.cpp does them
@torch.no_grad()
def greedy_decode(model, src, lengths, max_len):
    model.eval()
    enc_outputs, state = model.encoder(src, lengths)
    memory = model.decoder.prepare(enc_outputs, lengths)
    y = torch.full((1,), BOS, dtype=torch.int64)
    tokens, attention, log_prob = [], [], 0.0
    src_len = int(lengths[0])
    for _ in range(max_len):
        logits, state, weights = model.decoder.step(y, state, memory)
        log_probs = torch.log_softmax(logits, -1)
        y = log_probs.argmax(-1)
        token = int(y[0])
        attention.append(weights[0, :src_len].tolist())
        log_prob += float(log_probs[0, token])
        if token == EOS:
            break
        tokens.append(token)
    return tokens


@torch.no_grad()
def beam_search(model, src, lengths, max_len, beam_size, length_penalty=1.0):
    model.eval()
    src_len = int(lengths[0])
    enc_outputs, state = model.encoder(src, lengths)
    values, keys, _ = model.decoder.prepare(enc_outputs, lengths)
    beams = [([], [], 0.0, BOS)]  # tokens, attention, log_prob, last
    finished = []

    def normalized(tokens, log_prob):
        return log_prob / math.pow(len(tokens) + 1, length_penalty)

    for _ in range(max_len):
        if not beams:
            break
        n = len(beams)
        memory = (values.expand(n, -1, -1), keys.expand(n, -1, -1), lengths.expand(n))
        last = torch.tensor([b[3] for b in beams], dtype=torch.int64)
        logits, new_state, weights = model.decoder.step(last, state, memory)
        log_probs = torch.log_softmax(logits, -1).double()
        # 2 * beam_size continuations per row, as seqgrad: at most one is <eos>, so beam_size open ones remain
        top_lp, top_id = log_probs.topk(min(2 * beam_size, log_probs.size(1)), -1)
        lp, ids = top_lp.tolist(), top_id.tolist()
        cands = sorted(((beams[b][2] + lp[b][j], b, ids[b][j]) for b in range(n) for j in range(len(lp[b]))),
                       key=lambda c: -c[0])
        nxt, parents = [], []
        for rank, (log_prob, b, token) in enumerate(cands):
            if len(nxt) >= beam_size:
                break
            attention = beams[b][1] + [weights[b, :src_len].tolist()]
            if token == EOS and rank >= beam_size:
                continue  # <eos> finishes only among the beam's best candidates (fairseq's rule, as seqgrad)
            if token == EOS:
                finished.append((normalized(beams[b][0], log_prob), beams[b][0]))
                if len(finished) >= beam_size:
                    break
                continue
            nxt.append((beams[b][0] + [token], attention, log_prob, token))
            parents.append(b)
        if len(finished) >= beam_size or not nxt:
            beams = []  # done: the open hypotheses lose, as in seqgrad (models/seq2seq/decode.cpp)
            break
        state = new_state.index_select(1, torch.tensor(parents, dtype=torch.int64))
        beams = nxt
    # Only when max_len cut the search do the open hypotheses compete with the finished ones.
    for tokens, _, log_prob, _ in beams:
        finished.append((normalized(tokens, log_prob), tokens))
    return max(finished, key=lambda f: f[0])[1]


def quantize_int8(model, modules):
    """Dynamic int8 quantization (per-tensor weights, activations quantized per call) of the given
    module types, on the onednn engine (Debian's torch has no fbgemm)."""
    torch.backends.quantized.engine = "onednn"
    return torch.ao.quantization.quantize_dynamic(model.eval(), modules, dtype=torch.qint8)


def bench_decode(preset, beam, plan, out, int8=False):
    d = PresetData(plan.data, preset)
    model = d.make_model()
    if int8:
        model = quantize_int8(model, {nn.Linear, nn.GRU})
    src = torch.tensor([d.decode_src], dtype=torch.int64)
    lengths = torch.tensor([len(d.decode_src)], dtype=torch.int64)
    produced = [0]

    def run():
        tokens = greedy_decode(model, src, lengths, d.decode_max_len) if beam == 1 else \
            beam_search(model, src, lengths, d.decode_max_len, beam)
        produced[0] = len(tokens)

    cpu = []
    ms = scaled(time_blocks(run, plan, 0.5, cpu), 1e3)
    name = "greedy" if beam == 1 else f"beam{beam}"
    out.report(f"{name}_{preset}" + ("_int8" if int8 else ""), "ms/sent", ms, {"tokens": float(produced[0]), "cpu_ms": scaled(cpu, 1e3)["median"]})


# ---- decoding the Transformer with a key/value cache, as fairseq decodes incrementally
class CachedTransformerDecoder:
    """The search's decoder steps, one target position at a time, on the weights of
    TransformerTranslator's torch.nn.TransformerDecoder (which has no cache in 1.13): per layer the
    self-attention's keys and values of the positions so far are cached and the new position's
    appended (fairseq's incremental state); the cross-attention's keys and values are projected from
    the encoder's output once, and gathered again only when the rows' sentences change. Pre-norm
    layers, eval mode (no dropout). A state's rows are hypotheses; reorder() keeps some of them.
    int8: the model came from quantize_transformer_int8 (its out_proj layers have no weight tensor),
    so the encoder is run written out (encode)."""

    class State:
        def __init__(self, memory, mask):
            self.sentence_memory, self.sentence_mask = memory, mask  # per layer (k, v) (B, h, S, d); (B, 1, 1, S)
            self.memory, self.mask = memory, mask                    # the same for each row
            self.row_sentence = list(range(mask.size(0)))
            self.keys, self.values = [None] * len(memory), [None] * len(memory)  # per layer (N, h, t, d)
            self.steps = 0

    def __init__(self, model, int8=False):
        self.model, self.int8 = model, int8
        self.layers = model.decoder.layers
        self.heads = self.layers[0].self_attn.num_heads
        self.width = self.layers[0].self_attn.embed_dim

    def split_heads(self, x):  # (N, T, E) -> (N, h, T, d)
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def attend(self, q, keys, values, mask=None):  # q (N, E) over keys, values (N, h, T, d)
        q = q.view(q.size(0), self.heads, 1, -1)                                              # (N, h, 1, d)
        scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(q.size(-1))              # (N, h, 1, T)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, -1)
        return torch.matmul(weights, values).reshape(q.size(0), self.width), weights.squeeze(2)  # (N, E), (N, h, T)

    def encode(self, src, padding, mask):
        """The encoder's output (B, S, E). The int8 model's layers run written out, pre-norm as
        nn.TransformerEncoderLayer computes them, on their own modules: nn.MultiheadAttention.forward
        reads out_proj.weight as a tensor, which a dynamically quantized Linear does not have."""
        m = self.model
        if not self.int8:
            return m.encoder(m.embed(src), src_key_padding_mask=padding)
        x = m.embed(src)
        for layer in m.encoder.layers:
            a = layer.self_attn
            q, k, v = (self.split_heads(t) for t in F.linear(layer.norm1(x), a.in_proj_weight, a.in_proj_bias).chunk(3, -1))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1)) + mask        # (B, h, S, S)
            context = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(x.shape)  # (B, S, E)
            x = x + a.out_proj(context)
            x = x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))
        return m.encoder.norm(x)

    @torch.no_grad()
    def start(self, src, lengths):
        m, E = self.model.eval(), self.width
        padding = torch.arange(src.size(1)).unsqueeze(0) >= lengths.unsqueeze(1)             # (B, S), True = <pad>
        mask = torch.zeros(padding.shape).masked_fill(padding, float("-inf")).view(src.size(0), 1, 1, -1)
        encoded = self.encode(src, padding, mask)                                            # (B, S, E)
        memory = []
        for layer in self.layers:
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            memory.append((self.split_heads(F.linear(encoded, w[E:2 * E], b[E:2 * E])),
                           self.split_heads(F.linear(encoded, w[2 * E:], b[2 * E:]))))
        return self.State(memory, mask)

    @torch.no_grad()
    def step(self, state, y_prev):
        """y_prev (N,) -> log-probabilities (N, V), the last layer's cross-attention averaged over heads (N, S)."""
        m, E = self.model, self.width
        x = m.embedding(y_prev) * m.scale + m.positions[state.steps]                          # (N, E)
        for i, layer in enumerate(self.layers):
            q, k, v = F.linear(layer.norm1(x), layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias).chunk(3, -1)
            k, v = self.split_heads(k.unsqueeze(1)), self.split_heads(v.unsqueeze(1))            # (N, h, 1, d)
            state.keys[i] = k if state.keys[i] is None else torch.cat([state.keys[i], k], 2)
            state.values[i] = v if state.values[i] is None else torch.cat([state.values[i], v], 2)
            x = x + layer.self_attn.out_proj(self.attend(q, state.keys[i], state.values[i])[0])
            w, b = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            context, weights = self.attend(F.linear(layer.norm2(x), w[:E], b[:E]), *state.memory[i], state.mask)
            x = x + layer.multihead_attn.out_proj(context)
            x = x + layer.linear2(layer.activation(layer.linear1(layer.norm3(x))))
        state.steps += 1
        return torch.log_softmax(F.linear(m.decoder.norm(x), m.embedding.weight), -1), weights.mean(1)

    def reorder(self, state, rows):
        """Row r of the next step continues row rows[r] of the last one."""
        index = torch.tensor(rows, dtype=torch.int64)
        state.keys = [k.index_select(0, index) for k in state.keys]
        state.values = [v.index_select(0, index) for v in state.values]
        sentences = [state.row_sentence[r] for r in rows]
        if sentences != state.row_sentence:
            s = torch.tensor(sentences, dtype=torch.int64)
            state.memory = [(k.index_select(0, s), v.index_select(0, s)) for k, v in state.sentence_memory]
            state.mask = state.sentence_mask.index_select(0, s)
            state.row_sentence = sentences


# The batched searches below take a `decoder` with start(src, lengths) -> state, step(state, y_prev)
# -> (log-probabilities (N, V), attention (N, S)) and reorder(state, rows): CachedTransformerDecoder
# here, ort_bench.py's OrtTransformerDecoder over the exported graphs.
def final_score(tokens, log_prob, finished, length_penalty=1.0):
    """decode.cpp's final_score with the power length penalty: log_prob / |Y|^alpha, <eos> counted."""
    return log_prob / math.pow(max(len(tokens) + (1 if finished else 0), 1), length_penalty)


@torch.no_grad()
def greedy_transformer(decoder, src, lengths, max_len):
    """Every sentence of the batch steps until all have produced <eos> (decode.cpp's greedy); each
    hypothesis keeps its attention rows (T, S), as seqgrad's."""
    state = decoder.start(src, lengths)
    src_len = lengths.tolist()
    hyps = [{"tokens": [], "log_prob": 0.0, "finished": False} for _ in src_len]
    y, steps = torch.full((len(src_len),), BOS, dtype=torch.int64), []
    for _ in range(max_len):
        log_probs, weights = decoder.step(state, y)
        y = log_probs.argmax(-1)
        ids, lp = y.tolist(), log_probs.gather(1, y.unsqueeze(1)).squeeze(1).tolist()
        steps.append(weights)
        for b, h in enumerate(hyps):
            if h["finished"]:
                continue
            h["log_prob"] += lp[b]
            if ids[b] == EOS:
                h["finished"], h["steps"] = True, len(steps)
            else:
                h["tokens"].append(ids[b])
        if all(h["finished"] for h in hyps):
            break
    attention = torch.stack(steps, 1)                                                       # (B, T, S)
    for b, h in enumerate(hyps):
        h["attention"] = attention[b, :h.get("steps", len(steps)), :src_len[b]]
    return [(h["tokens"], h["log_prob"]) for h in hyps]


@torch.no_grad()
def beam_transformer(decoder, src, lengths, max_len, beam_size):
    """decode.cpp's beam_search over a batch: the open hypotheses of every sentence are the rows of
    one decoder step; per sentence the candidates (2 * beam_size per row, ranked by log-probability)
    fill beam_size open or finished hypotheses; a sentence with beam_size finished is done. Each
    row's attention rows so far are a tensor reordered with the cache (fairseq's)."""
    state = decoder.start(src, lengths)
    src_len = lengths.tolist()
    open_ = [[([], 0.0, BOS)] for _ in src_len]  # per sentence: (tokens, log_prob, last token)
    finished = [[] for _ in src_len]             # per sentence: (score, tokens, attention)
    attention = torch.zeros(len(src_len), 0, src.size(1))  # (N, t, S): each row's attention so far
    for _ in range(max_len):
        rows = [h for beams in open_ for h in beams]
        if not rows:
            break
        log_probs, weights = decoder.step(state, torch.tensor([h[2] for h in rows], dtype=torch.int64))
        attention = torch.cat([attention, weights.unsqueeze(1)], 1)
        log_probs = log_probs.double()
        top_lp, top_id = log_probs.topk(min(2 * beam_size, log_probs.size(1)), -1)
        lp, ids = top_lp.tolist(), top_id.tolist()
        parents, first = [], 0
        for b, beams in enumerate(open_):
            cands = sorted(((rows[i][1] + lp[i][j], i, ids[i][j])
                            for i in range(first, first + len(beams)) for j in range(len(lp[i]))), key=lambda c: -c[0])
            first += len(beams)
            nxt = []
            for rank, (log_prob, i, token) in enumerate(cands):
                if len(nxt) >= beam_size or len(finished[b]) >= beam_size:
                    break
                if token == EOS and rank >= beam_size:
                    continue  # <eos> finishes only among the beam's best candidates (fairseq's rule, as seqgrad)
                if token == EOS:
                    finished[b].append((final_score(rows[i][0], log_prob, True), rows[i][0],
                                        attention[i, :, :src_len[b]]))
                    continue
                nxt.append((rows[i][0] + [token], log_prob, token))
                parents.append(i)
            if len(finished[b]) >= beam_size:  # done: its open hypotheses never win
                del parents[len(parents) - len(nxt):]
                nxt = []
            open_[b] = nxt
        if not parents:
            break
        decoder.reorder(state, parents)
        attention = attention.index_select(0, torch.tensor(parents, dtype=torch.int64))
    best = []
    for b in range(len(src_len)):  # max_len cut the still open ones: they compete with the finished
        ranked = finished[b] + [(final_score(t, lp, False), t, None) for t, lp, _ in open_[b]]
        score, tokens, _ = sorted(ranked, key=lambda f: -f[0])[0]
        best.append((tokens, score))
    return best


def quantize_transformer_int8(model):
    """The Linear modules seqgrad's nn::quantize_dynamic makes int8 in a Transformer: linear1,
    linear2 and the attentions' out_proj, which is nn.MultiheadAttention's NonDynamicallyQuantizableLinear
    ({nn.Linear} alone leaves it float32). The q/k/v projections (in_proj_weight, a parameter) and
    the tied embedding/output matrix stay float32, as in seqgrad."""
    return quantize_int8(model, {nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear})


def decode_report(name, result, ms, cpu, reference, out):
    """Reports a batch's decoding with the checks against seqgrad's tokens and scores for it
    (`reference`: the data's decode_tokens, decode_scores): the same float32 weights give the same
    tokens and the scores to float32 rounding; int8 sides quantize differently and differ a little."""
    theirs_tokens, theirs_scores = reference[0][name], reference[1][name]
    same = sum(tokens == t for (tokens, _), t in zip(result, theirs_tokens))
    score_diff = max(abs(score - s) for (_, score), s in zip(result, theirs_scores))
    out.report(name, "ms/batch", ms, {"tokens": float(sum(len(t) for t, _ in result)), "sentences": float(len(result)),
                                      "sent_s": 1e3 * len(result) / ms["median"], "cpu_ms": scaled(cpu, 1e3)["median"],
                                      "same_tokens": float(same), "score_diff": score_diff})


def time_transformer_search(decoder, d, beam, plan):
    """Times the batch's greedy or beam search; returns its per-sentence (tokens, score), ms, cpu."""
    src, lengths = d.decode_batch
    result = []

    def run():
        result[:] = greedy_transformer(decoder, src, lengths, d.decode_max_len) if beam == 1 else \
            beam_transformer(decoder, src, lengths, d.decode_max_len, beam)

    cpu = []
    ms = scaled(time_blocks(run, plan, 0.5, cpu), 1e3)
    return result, ms, cpu


def bench_decode_transformer(beam, plan, out, int8=False):
    d = PresetData(plan.data, "transformer")
    model = quantize_transformer_int8(d.make_model()) if int8 else d.make_model()
    result, ms, cpu = time_transformer_search(CachedTransformerDecoder(model, int8), d, beam, plan)
    name = ("greedy" if beam == 1 else f"beam{beam}") + "_transformer" + ("_int8" if int8 else "")
    decode_report(name, result, ms, cpu, (d.decode_tokens, d.decode_scores), out)


# ---- kernels at the seed model's shapes
def lengths_pattern(batch, max_len, min_len):
    return torch.tensor([max_len - (b * 7) % (max_len - min_len + 1) for b in range(batch)], dtype=torch.int64)


def zero_grads(*tensors):
    for t in tensors:
        t.grad = None


def bench_attention(projected, plan, out):
    B, Dq, K, Dk, A = 64, 512, 20, 1024, 512
    torch.manual_seed(1)
    attention = AdditiveAttention(Dq, Dk, A)
    queries = torch.randn(B, 1, Dq, requires_grad=True)
    values = torch.randn(B, K, Dk, requires_grad=True)
    keys = torch.randn(B, K, A, requires_grad=True) if projected else values
    lengths = lengths_pattern(B, K, 10)
    dy = torch.randn(B, 1, Dk)

    def run():
        if projected:
            context, _ = attention.attend_projected(queries, keys, values, lengths)
        else:
            context, _ = attention(queries, keys, values, lengths)
        context.backward(dy)
        zero_grads(queries, keys, values, *attention.parameters())

    cpu = []
    wall = time_blocks(run, plan, 0.2, cpu)
    out.report("attention_projected" if projected else "attention", "us", scaled(wall, 1e6),
               {"cpu_us": scaled(cpu, 1e6)["median"]})


def bench_gru(plan, out):
    B, T, E, H = 64, 20, 256, 512
    torch.manual_seed(1)
    gru = nn.GRU(E, H, 2, batch_first=True, bidirectional=True)
    x = torch.randn(B, T, E, requires_grad=True)
    dy = torch.randn(B, T, 2 * H)

    def run():
        y, _ = gru(x)
        y.backward(dy)
        zero_grads(x, *gru.parameters())

    cpu = []
    ms = scaled(time_blocks(run, plan, 0.5, cpu), 1e3)
    flops = sum(2 * 3 * (2.0 * B * T * (E if l == 0 else 2 * H) * 3 * H + 2.0 * B * T * H * 3 * H) for l in range(2))
    out.report("gru", "ms", ms, {"gemm_gflops": flops / (ms["median"] / 1e3) / 1e9, "cpu_ms": scaled(cpu, 1e3)["median"]})


def bench_linear_ce(vocab, plan, out):
    N, D = 1280, 512
    torch.manual_seed(1)
    linear = nn.Linear(D, vocab)
    x = torch.randn(N, D, requires_grad=True)
    y = torch.tensor([0 if i % 10 == 9 else (i * 7919) % vocab for i in range(N)], dtype=torch.int64)

    def run():
        loss = F.cross_entropy(linear(x), y, ignore_index=0, label_smoothing=0.1)
        loss.backward()
        zero_grads(x, *linear.parameters())

    cpu = []
    ms = scaled(time_blocks(run, plan, 0.5, cpu), 1e3)
    out.report("linear_ce", "ms", ms, {"vocab": float(vocab), "gemm_gflops": 3 * 2.0 * N * D * vocab / (ms["median"] / 1e3) / 1e9,
                                       "cpu_ms": scaled(cpu, 1e3)["median"]})


def bench_overhead(plan, out):
    chain = 100
    x = torch.ones(1, requires_grad=True)

    def record_only():
        y = x
        for _ in range(chain):
            y = y * 1.0

    def record_backprop():
        y = x
        for _ in range(chain):
            y = y * 1.0
        y.backward()
        x.grad = None

    out.report("op_record", "us/op", scaled(time_blocks(record_only, plan), 1e6 / chain))
    out.report("op_record_backward", "us/op", scaled(time_blocks(record_backprop, plan), 1e6 / chain))


def bench_sgemm(plan, out):
    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    cpu = []
    s = time_blocks(lambda: torch.mm(a, b), plan, 0.3, cpu)
    out.report("sgemm", "GFLOP/s", stats_of([2.0 * n ** 3 / t / 1e9 for t in s]),
               {"gflop_per_cpu_s": 2.0 * n ** 3 / stats_of(cpu)["median"] / 1e9}, note=f"{n}x{n}x{n}, torch.mm")


WORKLOADS = ["sgemm", "step_seed", "step_d2l", "step_transformer", "attention", "attention_projected", "gru",
             "linear_ce", "op_overhead", "greedy_seed", "beam5_seed", "greedy_d2l", "beam5_d2l", "memory_seed", "memory_d2l",
             "greedy_seed_int8", "beam5_seed_int8", "step_seed_bf16", "step_transformer_bf16", "greedy_transformer",
             "beam5_transformer", "greedy_transformer_int8", "beam5_transformer_int8"]


def run_workload(w, plan, out):
    if w == "sgemm":
        return bench_sgemm(plan, out)
    if w in ("step_seed", "step_d2l", "step_transformer"):
        return bench_step(w[5:], plan, out)
    if w in ("memory_seed", "memory_d2l"):
        return bench_memory(w[7:], plan, out)
    if w in ("attention", "attention_projected"):
        return bench_attention(w == "attention_projected", plan, out)
    if w == "gru":
        return bench_gru(plan, out)
    if w == "linear_ce":
        return bench_linear_ce(PresetData(plan.data, "seed").model_config["tgt_vocab"], plan, out)
    if w == "op_overhead":
        return bench_overhead(plan, out)
    if w in ("greedy_seed", "greedy_d2l"):
        return bench_decode(w[7:], 1, plan, out)
    if w in ("beam5_seed", "beam5_d2l"):
        return bench_decode(w[6:], 5, plan, out)
    if w in ("greedy_seed_int8", "beam5_seed_int8"):
        return bench_decode("seed", 1 if w.startswith("greedy") else 5, plan, out, int8=True)
    if w in ("greedy_transformer", "beam5_transformer", "greedy_transformer_int8", "beam5_transformer_int8"):
        return bench_decode_transformer(1 if w.startswith("greedy") else 5, plan, out, int8=w.endswith("_int8"))
    if w in ("step_seed_bf16", "step_transformer_bf16"):
        return bench_step(w[5:-5], plan, out, amp=torch.bfloat16)
    sys.exit(f"torch_bench: unknown workload '{w}'; choose from: {' '.join(WORKLOADS)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workloads", nargs="*")
    p.add_argument("--data", required=True, help="folder written by `seqgrad bench --export`")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default="")
    p.add_argument("--label", default="pytorch", help="the impl name written to --json (e.g. pytorch-passive)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    plan = Plan(1 if a.quick else a.warmup, 2 if a.quick else a.repeats, a.quick, a.data)
    out = Reporter(a.json, a.threads, a.label)
    print(f"torch_bench: PyTorch {torch.__version__}, {torch.get_num_threads()} threads, load average {load_average():.2f}",
          flush=True)
    for w in a.workloads or WORKLOADS:
        run_workload(w, plan, out)


if __name__ == "__main__":
    main()
