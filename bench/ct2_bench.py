#!/usr/bin/env python3
"""seqgrad's Transformer decoding beside CTranslate2's on the same weights, side by side in one run:
`seqgrad translate` of a source file against CTranslate2's `Translator.translate_batch` of the
model bench/ct2_convert.py writes from the same checkpoint. For each search (greedy, beam 5),
precision (float32; int8: `seqgrad quantize` against CTranslate2's compute_type int8) and thread
count, the rounds alternate the two sides and the table gives the median of each:

- whole command: process start, model load, decoding and output, as a user runs it (seqgrad
  translate --json on the file; a Python process loading the CTranslate2 model and translating);
- decoding only: CTranslate2's translate_batch call, as it measures itself;
- the outputs compared token by token with seqgrad's float32 ones (greedy must be identical) and
  sacreBLEU of each side against the references.

Both sides decode the source tokens seqgrad reads (its --json src_tokens), so the comparison is of
the decoding alone; CTranslate2 gets seqgrad's max_len and the power length penalty (alpha 1).

Usage: ct2_bench.py --checkpoint C --src FILE [--ref FILE] [--rounds 3] [--threads 1,2]
                    [--beams 1,5] [--precisions float32,int8] [--out DIR] [--json RESULTS.jsonl]
Environment: SEQGRAD (default build/tools/seqgrad). Needs ctranslate2 and sacrebleu (.venv).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ct2_convert  # noqa: E402

# The CTranslate2 side as a user runs it: a process that loads the model and translates the file.
CT2_CHILD = r"""
import json, sys, time
import ctranslate2
model, src_file, out_file, beam, threads, compute_type, max_len = sys.argv[1:8]
translator = ctranslate2.Translator(model, device="cpu", compute_type=compute_type, inter_threads=1,
                                    intra_threads=int(threads))
sources = [json.loads(line) for line in open(src_file)]
start = time.perf_counter()
results = translator.translate_batch(sources, beam_size=int(beam), max_decoding_length=int(max_len),
                                     length_penalty=1.0, return_scores=True, max_batch_size=64)
decode_s = time.perf_counter() - start
with open(out_file, "w") as f:
    for r in results:
        f.write(json.dumps({"tokens": r.hypotheses[0], "score": r.scores[0]}) + "\n")
print(json.dumps({"decode_s": decode_s}))
"""


def run_seqgrad(seqgrad, checkpoint, src, beam, threads, max_len):
    start = time.perf_counter()
    p = subprocess.run([seqgrad, "translate", "--checkpoint", checkpoint, "--json", "--beam", str(beam),
                        "--threads", str(threads), "--max-len", str(max_len)],
                       stdin=open(src), capture_output=True, text=True)
    whole = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"ct2_bench: seqgrad translate failed ({p.returncode}): {p.stderr[-2000:]}")
    return whole, [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def run_ct2(python, model, tokens_file, beam, threads, compute_type, max_len, out_file):
    start = time.perf_counter()
    p = subprocess.run([python, "-c", CT2_CHILD, model, tokens_file, out_file, str(beam), str(threads),
                        compute_type, str(max_len)], capture_output=True, text=True)
    whole = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"ct2_bench: CTranslate2 failed ({p.returncode}): {p.stderr[-2000:]}")
    decode = json.loads(p.stdout.strip().splitlines()[-1])["decode_s"]
    return whole, decode, [json.loads(line) for line in open(out_file)]


def detokenize(tokens, spm):
    if spm is not None:
        return spm.decode_pieces(tokens)
    return " ".join(tokens)


def bleu(hyps, refs):
    if refs is None:
        return None
    import sacrebleu
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--precisions", default="float32,int8")
    parser.add_argument("--max-len", type=int, default=0, help="default: seqgrad's (2 x truncation + 10)")
    parser.add_argument("--out", help="folder for the converted models and outputs (default: a temporary one)")
    parser.add_argument("--json", help="append one JSON line per measurement here")
    args = parser.parse_args()
    seqgrad = os.environ.get("SEQGRAD", os.path.join(HERE, "..", "build", "tools", "seqgrad"))
    out = args.out or tempfile.mkdtemp(prefix="ct2_bench.")
    os.makedirs(out, exist_ok=True)
    python = sys.executable

    meta = read_metadata(args.checkpoint)
    max_len = args.max_len or 2 * json.loads(meta["config"])["max_tokens"] + 10
    spm = None  # a SentencePiece target vocabulary detokenizes CTranslate2's pieces
    tgt_vocab = json.loads(meta["tgt_vocab"])
    if tgt_vocab.get("kind") == "sentencepiece":
        import base64
        import sentencepiece
        spm = sentencepiece.SentencePieceProcessor(model_proto=base64.b64decode(tgt_vocab["model"]))
    refs = [line.rstrip("\n") for line in open(args.ref)] if args.ref else None

    models = {}
    for precision in args.precisions.split(","):
        quant = None if precision == "float32" else "int8"
        models[precision] = os.path.join(out, f"ct2_{precision}")
        if not os.path.exists(models[precision]):
            ct2_convert.convert(args.checkpoint, models[precision], quant)
    checkpoints = {"float32": args.checkpoint}
    if "int8" in models:
        checkpoints["int8"] = os.path.join(out, "int8.safetensors")
        if not os.path.exists(checkpoints["int8"]):
            subprocess.run([seqgrad, "quantize", "--checkpoint", args.checkpoint, "--out-file", checkpoints["int8"],
                            "--quiet"], check=True)

    # the source tokens seqgrad reads, once (greedy float32 also gives the reference outputs)
    _, reference = run_seqgrad(seqgrad, args.checkpoint, args.src, 1, 2, max_len)
    tokens_file = os.path.join(out, "src_tokens.jsonl")
    with open(tokens_file, "w") as f:
        for r in reference:
            f.write(json.dumps(r["src_tokens"]) + "\n")

    rows = []
    for beam in map(int, args.beams.split(",")):
        for precision in models:
            for threads in map(int, args.threads.split(",")):
                sg_times, ct_times, ct_decode = [], [], []
                for rnd in range(args.rounds):
                    sides = ["seqgrad", "ct2"] if rnd % 2 == 0 else ["ct2", "seqgrad"]
                    for side in sides:
                        if side == "seqgrad":
                            t, sg_out = run_seqgrad(seqgrad, checkpoints[precision], args.src, beam, threads, max_len)
                            sg_times.append(t)
                        else:
                            t, d, ct_out = run_ct2(python, models[precision], tokens_file, beam, threads,
                                                   "int8" if precision == "int8" else "float32", max_len,
                                                   os.path.join(out, "ct2_out.jsonl"))
                            ct_times.append(t), ct_decode.append(d)
                same = sum(s["tgt_tokens"] == c["tokens"] for s, c in zip(sg_out, ct_out))
                row = {"search": "greedy" if beam == 1 else f"beam {beam}", "precision": precision,
                       "threads": threads, "sentences": len(sg_out),
                       "seqgrad_s": statistics.median(sg_times), "ct2_s": statistics.median(ct_times),
                       "ct2_decode_s": statistics.median(ct_decode), "same_tokens": same,
                       "seqgrad_bleu": bleu([s["translation"] for s in sg_out], refs),
                       "ct2_bleu": bleu([detokenize(c["tokens"], spm) for c in ct_out], refs)}
                row["speedup"] = row["ct2_s"] / row["seqgrad_s"]
                rows.append(row)
                print_row(row, header=len(rows) == 1)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")


def read_metadata(path):
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def print_row(r, header):
    if header:
        print("| search | precision | threads | seqgrad whole (s) | CTranslate2 whole (s) | CTranslate2 decoding (s) "
              "| seqgrad vs CTranslate2 | same tokens | sacreBLEU seqgrad / CTranslate2 |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    b = "–" if r["seqgrad_bleu"] is None else f"{r['seqgrad_bleu']:.2f} / {r['ct2_bleu']:.2f}"
    print(f"| {r['search']} | {r['precision']} | {r['threads']} | {r['seqgrad_s']:.2f} | {r['ct2_s']:.2f} | "
          f"{r['ct2_decode_s']:.2f} | {r['speedup']:.2f}x | {r['same_tokens']} of {r['sentences']} | {b} |", flush=True)


if __name__ == "__main__":
    main()
