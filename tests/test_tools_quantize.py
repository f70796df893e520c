#!/usr/bin/python3
"""End-to-end tests of `seqgrad quantize` and of quantized checkpoints in translate and eval.

A tiny model (E = H = 16, 256 pairs, four epochs, one thread; its last checkpoint) is trained once; then:
  * quantize writes a safetensors file whose quantized weights are I8 with F32 "<name>_scale"
    entries and whose metadata says how it was quantized, smaller than the float file;
  * translate and eval load it as they load a float32 checkpoint; eval prints the same report;
  * the int8 model's teacher-forced test loss (the mean negative log-likelihood of the reference
    tokens, a smooth function of the logits) is within 0.5% of the float model's (measured: under
    0.02%), on a model that learned: its loss is below 0.8 log V, a uniform guess's being log V
    (BLEU, near 0 for both at this size, could not tell a broken int8 path from a working one);
  * a Transformer checkpoint quantizes its Linear layers (its embeddings stay float32) and loads;
  * bad input is a clean error naming the problem: quantizing a quantized checkpoint, an int8
    weight without its scales, scales of the wrong shape, --out equal to the input.
Usage: test_tools_quantize.py PATH/TO/seqgrad DATA_DIR
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tools_cli import read_safetensors, write_safetensors  # noqa: E402  (the CLI tests' helpers)

SEQGRAD = None
DATA = None
TINY = ["--preset", "default", "--vocab", "word", "--embed", "16", "--hidden", "16", "--batch-size", "32", "--threads", "1",
        "--quiet"]
TMP = tempfile.mkdtemp(prefix="seqgrad_quantize_")


def run(*args, timeout=300):
    return subprocess.run([SEQGRAD, *args], capture_output=True, text=True, timeout=timeout)


def float_checkpoint():
    if not hasattr(float_checkpoint, "path"):
        d = os.path.join(TMP, "run")
        p = run("train", *TINY, "--subset", "256", "--epochs", "4", "--data-dir", DATA, "--out", d)
        if p.returncode != 0:
            raise AssertionError(f"training failed:\n{p.stdout}\n{p.stderr}")
        float_checkpoint.path = os.path.join(d, "last.safetensors")  # best is kept by BLEU, ~0 every epoch
    return float_checkpoint.path


def transformer_checkpoint():
    """A tiny Transformer's checkpoint (width 16, one layer each side, 64 pairs, one epoch)."""
    if not hasattr(transformer_checkpoint, "path"):
        d = os.path.join(TMP, "transformer")
        p = run("train", *TINY, "--architecture", "transformer", "--layers", "1", "--heads", "2", "--ffn-size", "16",
                "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", d)
        if p.returncode != 0:
            raise AssertionError(f"training failed:\n{p.stdout}\n{p.stderr}")
        transformer_checkpoint.path = os.path.join(d, "last.safetensors")
    return transformer_checkpoint.path


def quantized_checkpoint(*flags):
    out = os.path.join(TMP, "int8" + "".join(flags) + ".safetensors")
    if not os.path.exists(out):
        p = run("quantize", "--checkpoint", float_checkpoint(), "--out-file", out, *flags)
        if p.returncode != 0:
            raise AssertionError(f"quantize failed:\n{p.stdout}\n{p.stderr}")
    return out


def test_loss(stdout):
    m = re.search(r"test: loss ([0-9.]+)", stdout)
    if not m:
        raise AssertionError(f"no test loss in:\n{stdout}")
    return float(m.group(1))


class Quantize(unittest.TestCase):
    maxDiff = None

    def assertFails(self, proc, pattern):
        msg = f"\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
        self.assertEqual(proc.returncode, 1, msg)
        self.assertRegex(proc.stderr, pattern, msg)

    def test_file_layout_and_size(self):
        for flags, scheme in [((), "per_channel"), (("--per-tensor",), "per_tensor")]:
            header, _ = read_safetensors(quantized_checkpoint(*flags))
            meta = header.pop("__metadata__")
            self.assertEqual(json.loads(meta["quantized"])["scheme"], scheme)
            int8 = {k: v for k, v in header.items() if v["dtype"] == "I8"}
            for name in ["model.decoder.out.weight", "model.encoder.rnn.weight_hh_l0_reverse",
                         "model.encoder.embedding.weight"]:
                self.assertIn(name, int8)
                scales = header[name + "_scale"]
                self.assertEqual(scales["dtype"], "F32")
                rows = int8[name]["shape"][0]
                self.assertEqual(scales["shape"], [rows] if scheme == "per_channel" else [1])
            self.assertEqual(header["model.decoder.out.bias"]["dtype"], "F32")
        ratio = os.path.getsize(quantized_checkpoint()) / os.path.getsize(float_checkpoint())
        # the tiny model's rows are 16 wide: 16 int8 + a 4-byte scale against 64 bytes, plus the float
        # biases and the optimizer-free layout; the README measures the real models (<= 35%)
        self.assertLess(ratio, 0.5)

    def test_translate_and_eval_load_it(self):
        q = quantized_checkpoint()
        p = run("translate", "--checkpoint", q, "ein mann fährt fahrrad .")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.strip())
        self.assertEqual(run("translate", "--checkpoint", q, "ein mann fährt fahrrad .").stdout, p.stdout)
        ev_q = run("eval", "--checkpoint", q, "--data-dir", DATA, "--threads", "1")
        ev_f = run("eval", "--checkpoint", float_checkpoint(), "--data-dir", DATA, "--threads", "1")
        self.assertEqual(ev_q.returncode, 0, ev_q.stderr)
        # the same report: the same lines, numbers and the checkpoint's own path aside
        def shape(out, checkpoint):
            lines = out.replace(str(checkpoint), "CHECKPOINT").splitlines()
            return [re.sub(r"[0-9.]+", "N", line).split(":")[0] for line in lines][:6]
        self.assertEqual(shape(ev_q.stdout, q), shape(ev_f.stdout, float_checkpoint()))
        header, _ = read_safetensors(float_checkpoint())
        tgt_vocab = json.loads(header["__metadata__"]["config"])["model"]["tgt_vocab"]
        loss_q, loss_f = test_loss(ev_q.stdout), test_loss(ev_f.stdout)
        self.assertLess(loss_f, 0.8 * math.log(tgt_vocab), "the float model learned too little for the bound to mean anything")
        print(f"test loss: int8 {loss_q}, float32 {loss_f}, uniform {math.log(tgt_vocab):.3f}", file=sys.stderr)
        self.assertLessEqual(abs(loss_q - loss_f), 0.005 * loss_f, f"int8 loss {loss_q} vs float32 {loss_f}")

    # a Transformer's Linear layers become int8 (attention outputs, feed-forward blocks, the untied
    # output layer); its embeddings stay float32; translate and eval load the file
    def test_quantize_a_transformer(self):
        out = os.path.join(TMP, "transformer.int8.safetensors")
        p = run("quantize", "--checkpoint", transformer_checkpoint(), "--out-file", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        header, _ = read_safetensors(out)
        header.pop("__metadata__")
        int8 = sorted(k for k, v in header.items() if v["dtype"] == "I8")
        self.assertEqual(int8, sorted(["model.out.weight",
                                       "model.encoder.layers.0.self_attn.out_proj.weight",
                                       "model.encoder.layers.0.linear1.weight", "model.encoder.layers.0.linear2.weight",
                                       "model.decoder.layers.0.self_attn.out_proj.weight",
                                       "model.decoder.layers.0.multihead_attn.out_proj.weight",
                                       "model.decoder.layers.0.linear1.weight", "model.decoder.layers.0.linear2.weight"]))
        for name in ["model.src_embedding.weight", "model.tgt_embedding.weight",
                     "model.encoder.layers.0.self_attn.in_proj_weight"]:
            self.assertEqual(header[name]["dtype"], "F32", name)
        for command in (["translate", "--checkpoint", out, "ein mann fährt fahrrad ."],
                        ["eval", "--checkpoint", out, "--data-dir", DATA, "--threads", "1"]):
            p = run(*command)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(p.stdout.strip())

    # the int8 Transformer exports to ONNX (tests/test_onnx_export.py checks its graphs in onnxruntime)
    def test_export_an_int8_transformer(self):
        q = os.path.join(TMP, "transformer_for_export.int8.safetensors")
        p = run("quantize", "--checkpoint", transformer_checkpoint(), "--out-file", q)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("export", "--checkpoint", q, "--out", os.path.join(TMP, "transformer_onnx"))
        if "lacks ONNX support" in p.stderr:
            self.skipTest("this build has no ONNX export")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"exported a Transformer \(2 heads\), 1 layer\(s\), opset 13, 8 int8 weights")

    def test_bad_input(self):
        q = quantized_checkpoint()
        p = run("quantize", "--checkpoint", q, "--out-file", os.path.join(TMP, "twice.safetensors"))
        self.assertFails(p, r"quantize: .* is already quantized")
        p = run("quantize", "--checkpoint", float_checkpoint(), "--out-file", float_checkpoint())
        self.assertFails(p, r"--out-file .* is the input checkpoint")
        header, data = read_safetensors(q)
        # an int8 weight whose scales are missing (renamed away)
        broken = dict(header)
        broken["model.decoder.out.weight_scalx"] = broken.pop("model.decoder.out.weight_scale")
        path = os.path.join(TMP, "no_scales.safetensors")
        write_safetensors(path, broken, data)
        self.assertFails(run("translate", "--checkpoint", path, "hallo"),
                         r"int8 weight 'model.decoder.out.weight' has no scales 'model.decoder.out.weight_scale'")
        # scales of another weight (a different number of rows)
        broken = dict(header)
        a, b = "model.decoder.out.weight_scale", "model.encoder.bridge.weight_scale"
        broken[a], broken[b] = header[b], header[a]
        path = os.path.join(TMP, "misshaped.safetensors")
        write_safetensors(path, broken, data)
        self.assertFails(run("translate", "--checkpoint", path, "hallo"), r"scales for \d+ rows")


if __name__ == "__main__":
    SEQGRAD, DATA = sys.argv[1], sys.argv[2]
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        if os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(TMP, ignore_errors=True)
