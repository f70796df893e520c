#!/usr/bin/python3
"""`seqgrad export` checked in onnxruntime: every graph against seqgrad's own outputs, greedy
translation of test2016 through examples/onnx/translate.py against `seqgrad translate`, and bad
input; the GRU translator and the Transformer (class Transformer: its key/value-cache step).

    /usr/bin/python3 tests/test_onnx_export.py BUILD/tools/seqgrad DATA_DIR onnx|no-onnx [unittest options]

Registered in tests/meson.build (suite 'onnx'). The third argument says whether the build has
ONNX support (meson option onnx): without it the test checks that `seqgrad export` says so and
exits 77 (SKIP), as it does when onnxruntime or onnx are not installed for this Python.

The checkpoints are trained here, tiny and for one epoch (E = 12, H = 16, 64 pairs); the 200
sentence comparison trains a small Multi30k model (E = H = 64, 6,000 pairs, two epochs: test2016
BLEU about 9, and about 190 distinct translations of the 200 sentences).
"Equal within 1e-5 relative" means: max |onnxruntime - seqgrad| <= 1e-5 * max |seqgrad| for each
output tensor (float32 on both sides; the log-probabilities, whose scale is set by the largest
negative values, are compared the same way).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

try:
    import onnx
    import onnxruntime as ort
    from safetensors.numpy import load_file, save_file
except ImportError as e:  # SKIP: the setup script installs them (scripts/setup.sh)
    print(f"test_onnx_export: skipped: {e}")
    sys.exit(77)

SEQGRAD = DATA = None
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "onnx"))
import translate as onnx_translate  # noqa: E402  (examples/onnx/translate.py)


def onnxruntime_int8_exact(activation_bits):
    """Whether onnxruntime's u8 x s8 MatMulInteger is exact on codes of activation_bits: without
    VNNI, its x86 kernels use VPMADDUBSW, whose int16 pair sums saturate above 7 bits (2 * 255 * 127
    > 32767; onnxruntime's quantization docs say so), so on 8-bit codes its int8 results drift from
    seqgrad's exact ones by far more than quantization error (measured 0.085 against 0.002 on an
    AVX2 CPU) and the numeric int8 comparisons below cannot hold. 7-bit codes (what seqgrad uses
    and exports on such CPUs) never saturate (2 * 127 * 128 = 32512)."""
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return activation_bits == 7 or "avx512_vnni" in flags or "avx_vnni" in flags


SKIP_INT8 = ("onnxruntime's int8 kernels saturate on this CPU on 8-bit activations (no VNNI: VPMADDUBSW int16 "
             "pair sums), and this seqgrad computes with 8 bits (its int8 products never saturate), so "
             "onnxruntime's numbers cannot match seqgrad's exact int8")

# oneDNN without its VNNI kernels, as on a CPU that lacks VNNI: seqgrad's int8 products then use
# 7-bit activations (ops/quantized.h's reduce_range), and so does what it exports.
WITHOUT_VNNI = {**os.environ, "DNNL_MAX_CPU_ISA": "AVX2"}

TINY = ["--subset", "64", "--epochs", "1", "--embed", "12", "--hidden", "16", "--threads", "1",
        "--quiet", "--vocab", "word"]
RTOL = 1e-5


def run(*args, stdin=None, timeout=300, env=None):
    return subprocess.run([SEQGRAD, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def activation_bits(folder):
    """The bits of the int8 layers' activation codes in an export (translator.json)."""
    with open(os.path.join(folder, "translator.json")) as f:
        return json.load(f)["int8_activation_bits"]


def session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class Base(unittest.TestCase):
    tmp = None
    checkpoints = {}

    @classmethod
    def setUpClass(cls):
        if Base.tmp is None:
            Base.tmp = tempfile.mkdtemp(prefix="seqgrad_onnx_")

    def path(self, *parts):
        return os.path.join(Base.tmp, *parts)

    def assertOk(self, proc):
        self.assertEqual(proc.returncode, 0, f"\nstdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")

    def assertFails(self, proc, pattern, status=1):
        msg = f"\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
        self.assertEqual(proc.returncode, status, msg)
        self.assertRegex(proc.stderr, pattern, msg)
        self.assertNotIn("internal error", proc.stderr, msg)

    def checkpoint(self, attention, layers, preset="d2l"):
        """A tiny model of the preset (d2l: no deep output) trained for one epoch (shared between tests)."""
        key = (attention, layers, preset)
        if key not in Base.checkpoints:
            out = self.path(f"train_{attention}_{layers}_{preset}")
            self.assertOk(run("train", "--preset", preset, *TINY, "--attention", attention, "--layers", str(layers),
                              "--data-dir", DATA, "--out", out))
            Base.checkpoints[key] = os.path.join(out, "best.safetensors")
        return Base.checkpoints[key]

    def export(self, checkpoint, out, *extra, env=None):
        self.assertOk(run("export", "--checkpoint", checkpoint, "--out", out, *extra, env=env))
        return out

    def assertClose(self, got, want, name):
        """Equal within RTOL relative to the largest |want|."""
        self.assertEqual(got.shape, want.shape, name)
        scale = float(np.max(np.abs(want)))
        err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        self.assertLessEqual(err, RTOL * max(scale, 1e-30), f"{name}: max error {err:.3g} vs scale {scale:.3g}")


def read_all(folder):
    """{file name: contents} of every file in folder."""
    contents = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            contents[name] = f.read()
    return contents


def random_inputs(rng, batch, src_len, tgt_len, vocab_src, vocab_tgt):
    """Ids past the special tokens; unequal source lengths, the longest = src_len, padding with 0."""
    lengths = rng.integers(1, src_len + 1, size=batch)
    lengths[rng.integers(batch)] = src_len
    if batch > 1:
        lengths[(np.argmax(lengths) + 1) % batch] = max(1, src_len // 2)  # at least one padded row
    src = rng.integers(4, vocab_src, size=(batch, src_len))
    for b in range(batch):
        src[b, lengths[b] - 1] = 2  # <eos> ends every sentence, as encode_sentence does
        src[b, lengths[b]:] = 0
    tgt = rng.integers(4, vocab_tgt, size=(batch, tgt_len))
    tgt[:, 0] = 1  # <bos>
    return {"src": src.astype(np.int64), "src_lengths": lengths.astype(np.int64), "tgt": tgt.astype(np.int64)}


class Parity(Base):
    """Each graph's outputs equal seqgrad's: two batch sizes, two source/target lengths, padded
    sources, every attention kind, 1 and 2 layers, every preset (d2l without deep output, default
    and seed with it; E and H made tiny)."""
    SHAPES = [(2, 5, 3), (5, 9, 7)]  # (batch, source length, target length)

    def check_kind(self, attention, layers, opset="13", preset="d2l"):
        ckpt = self.checkpoint(attention, layers, preset)
        folder = self.export(ckpt, self.path(f"export_{attention}_{layers}_{opset}_{preset}"), "--opset", opset)
        with open(os.path.join(folder, "translator.json")) as f:
            model = json.load(f)["model"]
        rng = np.random.default_rng(layers * 10 + len(attention))
        for i, (batch, src_len, tgt_len) in enumerate(self.SHAPES):
            with self.subTest(attention=attention, layers=layers, batch=batch, src_len=src_len, tgt_len=tgt_len):
                inputs = random_inputs(rng, batch, src_len, tgt_len, model["src_vocab"], model["tgt_vocab"])
                inputs_path, ref_path = self.path(f"in_{i}.safetensors"), self.path(f"ref_{i}.safetensors")
                save_file(inputs, inputs_path)
                self.export(ckpt, folder, "--opset", opset, "--reference-inputs", inputs_path,
                            "--reference-outputs", ref_path)
                self.compare_graphs(folder, inputs, load_file(ref_path))

    def compare_graphs(self, folder, inputs, ref):
        for name in ("model.onnx", "encoder.onnx", "decoder_step.onnx"):
            onnx.checker.check_model(os.path.join(folder, name), full_check=True)
        out = session(os.path.join(folder, "model.onnx")).run(["output"], inputs)[0]
        self.assertClose(out, ref["output"], "model.onnx output")
        memory, keys, state, src_keep = session(os.path.join(folder, "encoder.onnx")).run(
            ["memory", "keys", "state", "src_keep"], {"src": inputs["src"], "src_lengths": inputs["src_lengths"]})
        self.assertClose(memory, ref["memory"], "encoder.onnx memory")
        self.assertClose(keys, ref["keys"], "encoder.onnx keys")
        self.assertClose(state, ref["state"], "encoder.onnx state")
        positions = np.arange(inputs["src"].shape[1])[None, :]
        np.testing.assert_array_equal(src_keep, positions < inputs["src_lengths"][:, None])
        log_probs, new_state, weights = session(os.path.join(folder, "decoder_step.onnx")).run(
            None, {"y_prev": inputs["tgt"][:, 0], "state": state, "memory": memory, "keys": keys, "src_keep": src_keep})
        self.assertClose(log_probs, ref["log_probs"], "decoder_step.onnx log_probs")
        self.assertClose(new_state, ref["new_state"], "decoder_step.onnx new_state")
        self.assertClose(weights, ref["weights"], "decoder_step.onnx weights")
        self.assertTrue(np.all(weights[~src_keep] == 0), "attention on padded positions")

    def test_additive_1_layer(self):
        self.check_kind("additive", 1)

    def test_additive_2_layers(self):
        self.check_kind("additive", 2)

    def test_scaled_dot_1_layer(self):
        self.check_kind("scaled_dot", 1)

    def test_scaled_dot_2_layers(self):
        self.check_kind("scaled_dot", 2)

    def test_hybrid_2_layers(self):
        self.check_kind("hybrid", 2)

    def test_default_preset_deep_output(self):  # logits from [state; context; embedding]
        self.check_kind("additive", 1, preset="default")

    def test_seed_preset_deep_output_2_layers(self):
        self.check_kind("hybrid", 2, preset="seed")

    def test_opset_17(self):
        self.check_kind("additive", 2, opset="17")
        with open(self.path("export_additive_2_17_d2l", "model.onnx"), "rb") as f:
            self.assertEqual(onnx.load_model_from_string(f.read()).opset_import[0].version, 17)


def multi30k_model(base):
    """A small Multi30k model (shared between tests): E = H = 64, 6,000 pairs, two epochs."""
    if "multi30k" not in Base.checkpoints:
        out = base.path("train_multi30k")
        base.assertOk(run("train", "--preset", "default", "--vocab", "word", "--subset", "6000", "--epochs", "2",
                          "--embed", "64", "--hidden", "64", "--lr", "0.01", "--threads", "2", "--quiet",
                          "--data-dir", DATA, "--out", out))
        Base.checkpoints["multi30k"] = os.path.join(out, "best.safetensors")
    return Base.checkpoints["multi30k"]


def test2016_sentences(count):
    with open(os.path.join(DATA, "multi30k", "test2016.de"), encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


def seqgrad_translations(base, checkpoint, sentences):
    p = run("translate", "--checkpoint", checkpoint, "--threads", "2", stdin="\n".join(sentences) + "\n")
    base.assertOk(p)
    return p.stdout.split("\n")[:len(sentences)]


class Greedy(Base):
    """Greedy decoding of the first 200 test2016 sentences through onnxruntime (translate.py)
    gives exactly the translations `seqgrad translate` gives."""

    def test_first_200_test2016_sentences(self):
        ckpt = multi30k_model(self)
        folder = self.export(ckpt, self.path("export_multi30k"))
        sentences = test2016_sentences(200)
        want = seqgrad_translations(self, ckpt, sentences)
        translator = onnx_translate.Translator(folder, threads=2)
        got = [translator.translate(s) for s in sentences]
        mismatches = [(i, s, w, g) for i, (s, w, g) in enumerate(zip(sentences, want, got)) if w != g]
        self.assertEqual(mismatches, [], "sentences translated differently (index, source, seqgrad, onnxruntime)")
        self.assertGreater(len(set(got)), 100, "a degenerate model: too few distinct translations")

    def test_subword_checkpoint(self):
        """A SentencePiece checkpoint: the export carries src.spm.model and tgt.spm.model, and
        translate.py (with the sentencepiece package) gives seqgrad's cased, detokenised output."""
        try:
            import sentencepiece  # noqa: F401
        except ImportError:
            self.skipTest("the sentencepiece package is not installed (pip install sentencepiece)")
        out = self.path("train_subword")
        p = run("train", "--preset", "default", "--vocab", "unigram:500", "--subset", "2000", "--epochs", "1",
                "--embed", "32", "--hidden", "32", "--lr", "0.01", "--threads", "2", "--quiet", "--data-dir", DATA,
                "--out", out)
        if "no SentencePiece support" in p.stderr:
            self.skipTest("this build has no SentencePiece support")
        self.assertOk(p)
        ckpt = os.path.join(out, "best.safetensors")
        folder = self.export(ckpt, self.path("export_subword"))
        self.assertTrue(os.path.exists(os.path.join(folder, "src.spm.model")))
        with open(os.path.join(DATA, "multi30k", "test2016.de"), encoding="utf-8") as f:
            sentences = [next(f).rstrip("\n") for _ in range(40)]
        want = run("translate", "--checkpoint", ckpt, "--threads", "2", stdin="\n".join(sentences) + "\n")
        self.assertOk(want)
        translator = onnx_translate.Translator(folder, threads=2)
        self.assertEqual([translator.translate(s) for s in sentences], want.stdout.split("\n")[:40])


class Quantized(Base):
    """An int8 checkpoint (`seqgrad quantize`) exports int8: its Linear layers as a per-row
    quantization subgraph (each activation row to uint8 with its own range, as seqgrad does; no
    DynamicQuantizeLinear, whose one range per tensor would make a row depend on its batch) +
    MatMulInteger, its int8 embeddings and GRU weights stored int8 (the GRUs compute in float32 on
    the dequantized values, as ONNX has no int8 GRU). The float32 GRUs make the graphs' outputs
    differ from seqgrad's int8 ones, so they are checked against the error quantization itself
    makes: the ONNX int8 outputs must be within twice the distance between seqgrad's int8 and
    float32 outputs of seqgrad's int8 outputs (where a wrong scale or layout is off by the outputs'
    own size). Each sentence's outputs are the same alone as in the batch of 5 (one range per tensor
    moves them by about the quantization error), and the key projection alone, fed seqgrad's int8
    memory, gives seqgrad's int8 keys to the bit."""

    def quantize(self, checkpoint, name, *flags):
        out = self.path(name + ".safetensors")
        self.assertOk(run("quantize", "--checkpoint", checkpoint, "--out-file", out, *flags))
        return out

    def outputs(self, checkpoint, folder, inputs_path, name, env=None):
        ref = self.path(f"ref_{name}.safetensors")
        self.export(checkpoint, folder, "--reference-inputs", inputs_path, "--reference-outputs", ref, env=env)
        return load_file(ref)

    def check_int8(self, flags, int8_initializers, env=None, bits=None):
        """The int8 export of the seed preset's model against seqgrad's int8 numbers, both computed
        in `env`; bits: the activation bits the export must have (None: either)."""
        ckpt = self.checkpoint("hybrid", 2, "seed")  # deep output, both attention halves, 2 layers
        q = self.quantize(ckpt, "q" + "".join(flags), *flags)
        with open(os.path.join(self.export(ckpt, self.path("export_f32")), "translator.json")) as f:
            model = json.load(f)["model"]
        inputs = random_inputs(np.random.default_rng(7), 5, 9, 7, model["src_vocab"], model["tgt_vocab"])
        inputs_path = self.path("in_q.safetensors")
        save_file(inputs, inputs_path)
        f32 = self.outputs(ckpt, self.path("export_f32"), inputs_path, "f32")
        folder = self.path("export_q" + "".join(flags) + ("" if bits is None else f"_{bits}bits"))
        int8 = self.outputs(q, folder, inputs_path, "int8", env=env)
        if bits is not None:
            self.assertEqual(activation_bits(folder), bits)
        graph = onnx.load(os.path.join(folder, "model.onnx"))
        stored = sorted(t.name for t in graph.graph.initializer if t.data_type == onnx.TensorProto.INT8)
        self.assertEqual(stored, sorted(int8_initializers))
        ops = {n.op_type for n in graph.graph.node}
        ops |= {n.op_type for scan in graph.graph.node if scan.op_type == "Scan" for n in scan.attribute[-1].g.node}
        self.assertTrue({"ReduceMin", "ReduceMax", "MatMulInteger"} <= ops, ops)
        self.assertNotIn("DynamicQuantizeLinear", ops)
        if not onnxruntime_int8_exact(activation_bits(folder)):
            self.skipTest(SKIP_INT8)
        self.check_rows_alone(folder, inputs)
        self.check_linear_exact(folder, int8)
        got = {"output": session(os.path.join(folder, "model.onnx")).run(["output"], inputs)[0]}
        got["memory"], got["state"] = session(os.path.join(folder, "encoder.onnx")).run(
            ["memory", "state"], {"src": inputs["src"], "src_lengths": inputs["src_lengths"]})
        src_keep = np.arange(inputs["src"].shape[1])[None, :] < inputs["src_lengths"][:, None]
        got["log_probs"] = session(os.path.join(folder, "decoder_step.onnx")).run(
            ["log_probs"], {"y_prev": inputs["tgt"][:, 0], "state": int8["state"], "memory": int8["memory"],
                            "keys": int8["keys"], "src_keep": src_keep})[0]
        for name, value in got.items():
            quantization_error = float(np.max(np.abs(int8[name] - f32[name])))
            onnx_error = float(np.max(np.abs(value - int8[name])))
            print(f"\n{name}: |onnx int8 - seqgrad int8| {onnx_error:.3g}, |seqgrad int8 - float32| "
                  f"{quantization_error:.3g}", file=sys.stderr)
            self.assertGreater(quantization_error, 0, f"{name}: the int8 checkpoint computes exactly as the float one")
            self.assertLessEqual(onnx_error, 2 * quantization_error, name)
        return stored

    def check_linear_exact(self, folder, int8):
        """The exported int8 key projection alone (encoder.onnx from its memory to its keys), given
        seqgrad's int8 memory, gives seqgrad's int8 keys to the bit: the per-row quantization,
        the zero-point correction and the float epilogue are seqgrad's arithmetic, op for op."""
        path, part = os.path.join(folder, "encoder.onnx"), self.path("encoder_keys.onnx")
        graph = onnx.load(path).graph
        memory = next(n.input[0] for n in graph.node if n.op_type == "Identity" and n.output[0] == "memory")
        onnx.utils.extract_model(path, part, [memory], ["keys"])
        keys = session(part).run(["keys"], {memory: int8["memory"]})[0]
        differing = int(np.sum(keys != int8["keys"]))
        self.assertEqual(differing, 0, f"{differing} of {keys.size} keys differ from seqgrad's, by up to "
                                       f"{float(np.max(np.abs(keys - int8['keys']))):.3g}")

    def check_rows_alone(self, folder, inputs):
        """Each sentence of the batch through encoder.onnx (its int8 bridge and keys) and
        decoder_step.onnx (its int8 attention and output layers) alone, at its own length, gives
        its rows of the batch's outputs."""
        encoder = session(os.path.join(folder, "encoder.onnx"))
        step = session(os.path.join(folder, "decoder_step.onnx"))
        names = ["memory", "keys", "state", "src_keep"]
        batch = dict(zip(names, encoder.run(names, {"src": inputs["src"], "src_lengths": inputs["src_lengths"]})))
        log_probs = step.run(["log_probs"], {"y_prev": inputs["tgt"][:, 0], **{k: batch[k] for k in names}})[0]
        worst = 0.0
        for b, length in enumerate(inputs["src_lengths"]):
            alone = dict(zip(names, encoder.run(names, {"src": inputs["src"][b:b + 1, :length],
                                                        "src_lengths": inputs["src_lengths"][b:b + 1]})))
            for name, got, want in (("keys", alone["keys"][0], batch["keys"][b, :length]),
                                    ("state", alone["state"][:, 0], batch["state"][:, b])):
                worst = max(worst, float(np.max(np.abs(got - want))))
                self.assertClose(got, want, f"sentence {b} alone: {name}")
            alone_log_probs = step.run(["log_probs"], {"y_prev": inputs["tgt"][b:b + 1, 0], **alone})[0]
            worst = max(worst, float(np.max(np.abs(alone_log_probs[0] - log_probs[b]))))
            self.assertClose(alone_log_probs[0], log_probs[b], f"sentence {b} alone: log_probs")
        print(f"\nint8 graphs, each sentence alone against its rows of the batch: max |difference| {worst:.3g}",
              file=sys.stderr)

    def test_per_channel_int8_embeddings(self):
        linears = ["encoder.bridge", "decoder.attention.w_k", "decoder.attention.w_q", "decoder.attention.w_v",
                   "decoder.query_proj", "decoder.out"]
        grus = [f"{m}.rnn.l{l}.{w}_q" for m in ("encoder", "decoder") for l in (0, 1) for w in ("W", "R")]
        self.check_int8([], [n + ".weight_t_q" for n in linears] + grus +
                        ["encoder.embedding.weight_q", "decoder.embedding.weight_q"])

    def test_per_tensor_float_embeddings(self):
        linears = ["encoder.bridge", "decoder.attention.w_k", "decoder.attention.w_q", "decoder.attention.w_v",
                   "decoder.query_proj", "decoder.out"]
        grus = [f"{m}.rnn.l{l}.{w}_q" for m in ("encoder", "decoder") for l in (0, 1) for w in ("W", "R")]
        self.check_int8(["--per-tensor", "--float-embeddings"], [n + ".weight_t_q" for n in linears] + grus)

    def test_seven_bit_activations_without_vnni(self):
        """Where seqgrad's int8 products use 7-bit activations (oneDNN without VNNI, forced here with
        DNNL_MAX_CPU_ISA), the export quantizes to 7 bits too: its key projection gives seqgrad's
        keys to the bit (8-bit codes would not), and onnxruntime's kernels are exact on them on any
        CPU."""
        probe = self.export(self.quantize(self.checkpoint("additive", 1), "q_probe"), self.path("export_probe"),
                            env=WITHOUT_VNNI)
        if activation_bits(probe) != 7:
            self.skipTest("this build's int8 products do not saturate without VNNI (the reference kernels, no "
                          "oneDNN): seqgrad uses 8-bit activations on every CPU, so there is no 7-bit path to export")
        linears = ["encoder.bridge", "decoder.attention.w_k", "decoder.attention.w_q", "decoder.attention.w_v",
                   "decoder.query_proj", "decoder.out"]
        grus = [f"{m}.rnn.l{l}.{w}_q" for m in ("encoder", "decoder") for l in (0, 1) for w in ("W", "R")]
        self.check_int8(["--per-tensor", "--float-embeddings"], [n + ".weight_t_q" for n in linears] + grus,
                        env=WITHOUT_VNNI, bits=7)

    def test_greedy_translations(self):
        """200 test2016 sentences: onnxruntime on the int8 export agrees with `seqgrad translate` on
        the int8 checkpoint about as often as seqgrad's int8 and float32 translations agree."""
        ckpt = multi30k_model(self)
        q = self.quantize(ckpt, "q_multi30k")
        folder = self.export(q, self.path("export_q_multi30k"))
        if not onnxruntime_int8_exact(activation_bits(folder)):
            self.skipTest(SKIP_INT8)
        sentences = test2016_sentences(200)
        want_int8, want_f32 = seqgrad_translations(self, q, sentences), seqgrad_translations(self, ckpt, sentences)
        translator = onnx_translate.Translator(folder, threads=2)
        got = [translator.translate(s) for s in sentences]
        same_as_int8 = sum(g == w for g, w in zip(got, want_int8))
        int8_as_f32 = sum(a == b for a, b in zip(want_int8, want_f32))
        print(f"\nint8 export: {same_as_int8}/200 translations as seqgrad int8; seqgrad int8 vs float32: "
              f"{int8_as_f32}/200", file=sys.stderr)
        self.assertGreaterEqual(same_as_int8, min(int8_as_f32, 190))


TINY_TRANSFORMER = ["--architecture", "transformer", "--heads", "2", "--ffn-size", "16", "--epochs", "1",
                    "--embed", "16", "--hidden", "16", "--threads", "1", "--quiet"]


class Transformer(Base):
    """A Transformer checkpoint's export (pre-norm and post-norm, sinusoidal and learned positions,
    tied and untied embeddings, float32 and int8, opsets 13 and 17): model.onnx's teacher-forced
    logits equal seqgrad's; decoder_step.onnx, started from empty key/value caches and fed the
    target one token at a time (each step's present_* the next step's past_*), gives the
    log-probabilities and attention weights of seqgrad's own cached search steps
    (TranslationModel::start/step, through the hidden --reference-* hook); and greedy decoding of
    every test2016 sentence through encoder.onnx + decoder_step.onnx (translate.py) gives the tokens
    of `seqgrad translate --beam 1` and its log-probabilities within 1e-4."""

    VARIANTS = {
        # pre-norm with a final norm, sinusoidal positions, an untied output layer, 2 layers
        "pre_norm": ["--vocab", "word", "--subset", "64", "--layers", "2"],
        # the paper's post-norm, learned positions, 1 layer
        "post_norm": ["--vocab", "word", "--subset", "64", "--layers", "1", "--no-norm-first", "--positional",
                      "learned"],
        # one matrix for both embeddings and the output projection (needs a joint subword vocabulary)
        "tied": ["--vocab", "unigram:300", "--joint-vocab", "--tie-embeddings", "--subset", "200", "--layers", "2"],
    }

    def transformer(self, variant):
        """A tiny Transformer of the variant trained for one epoch (shared between tests)."""
        key = ("transformer", variant)
        if key not in Base.checkpoints:
            out = self.path(f"train_transformer_{variant}")
            p = run("train", *TINY_TRANSFORMER, *self.VARIANTS[variant], "--data-dir", DATA, "--out", out)
            if "no SentencePiece support" in p.stderr:
                self.skipTest("this build has no SentencePiece support")
            self.assertOk(p)
            Base.checkpoints[key] = os.path.join(out, "best.safetensors")
        return Base.checkpoints[key]

    def check_export(self, checkpoint, name, opset="13", numbers=True):
        """Exports the checkpoint, runs the checker, and compares every graph with seqgrad on two
        padded batches (unless numbers is false). Returns the folder and translator.json."""
        folder = self.export(checkpoint, self.path(f"export_transformer_{name}"), "--opset", opset)
        with open(os.path.join(folder, "translator.json")) as f:
            info = json.load(f)
        self.assertEqual(info["model"]["architecture"], "transformer")
        for graph in ("model.onnx", "encoder.onnx", "decoder_step.onnx"):
            onnx.checker.check_model(os.path.join(folder, graph), full_check=True)
            self.assertEqual(onnx.load(os.path.join(folder, graph)).opset_import[0].version, int(opset))
        if not numbers:
            return folder, info
        rng = np.random.default_rng(len(name))
        for i, (batch, src_len, tgt_len) in enumerate(Parity.SHAPES):
            with self.subTest(name=name, batch=batch, src_len=src_len, tgt_len=tgt_len):
                inputs = random_inputs(rng, batch, src_len, tgt_len, info["model"]["src_vocab"],
                                       info["model"]["tgt_vocab"])
                inputs_path, ref_path = self.path(f"in_t{i}.safetensors"), self.path(f"ref_t{i}.safetensors")
                save_file(inputs, inputs_path)
                self.export(checkpoint, folder, "--opset", opset, "--reference-inputs", inputs_path,
                            "--reference-outputs", ref_path)
                self.compare_graphs(folder, info["model"], inputs, load_file(ref_path))
        return folder, info

    def compare_graphs(self, folder, model, inputs, ref):
        out = session(os.path.join(folder, "model.onnx")).run(["output"], inputs)[0]
        self.assertClose(out, ref["output"], "model.onnx output")
        layers, heads = model["num_layers"], model["heads"]
        head_size = model["hidden_size"] // heads
        batch, src_len = inputs["src"].shape
        caches = [f"{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
        encoder = session(os.path.join(folder, "encoder.onnx"))
        names = [o.name for o in encoder.get_outputs()]
        self.assertEqual(names, ["memory"] + ["cross_" + c for c in caches] + ["src_keep"])
        encoded = dict(zip(names, encoder.run(names, {"src": inputs["src"], "src_lengths": inputs["src_lengths"]})))
        np.testing.assert_array_equal(encoded["src_keep"], np.arange(src_len)[None, :] < inputs["src_lengths"][:, None])
        self.assertEqual(encoded["cross_value_0"].shape, (batch, heads, src_len, head_size))
        step = session(os.path.join(folder, "decoder_step.onnx"))
        step_names = [o.name for o in step.get_outputs()]
        self.assertEqual(step_names, ["log_probs"] + ["present_" + c for c in caches] + ["weights"])
        memory = {k: v for k, v in encoded.items() if k != "memory"}
        past = {"past_" + c: np.zeros((batch, heads, 0, head_size), np.float32) for c in caches}
        for t in range(inputs["tgt"].shape[1]):
            got = dict(zip(step_names, step.run(step_names, {"y_prev": inputs["tgt"][:, t], **past, **memory})))
            self.assertClose(got["log_probs"], ref["step_log_probs"][:, t], f"decoder_step.onnx log_probs, step {t}")
            self.assertClose(got["weights"], ref["step_weights"][:, t], f"decoder_step.onnx weights, step {t}")
            self.assertTrue(np.all(got["weights"][~encoded["src_keep"]] == 0), "attention on padded positions")
            past = {"past_" + c: got["present_" + c] for c in caches}
            self.assertEqual(past["past_key_0"].shape, (batch, heads, t + 1, head_size))

    @staticmethod
    def op_types(folder, graph="model.onnx"):
        return {n.op_type for n in onnx.load(os.path.join(folder, graph)).graph.node}

    def test_pre_norm_opset_13(self):  # LayerNorm composed: LayerNormalization is opset 17's
        folder, _ = self.check_export(self.transformer("pre_norm"), "pre_norm")
        self.assertNotIn("LayerNormalization", self.op_types(folder))
        self.assertIn("ReduceMean", self.op_types(folder))

    def test_post_norm_learned_positions_opset_17(self):
        folder, _ = self.check_export(self.transformer("post_norm"), "post_norm", opset="17")
        self.assertIn("LayerNormalization", self.op_types(folder))

    def test_tied_embeddings(self):
        """One (V, E) matrix in each file: the embedding of both sides and the output projection."""
        folder, info = self.check_export(self.transformer("tied"), "tied")
        shape = [info["model"]["tgt_vocab"], info["model"]["hidden_size"]]
        for graph in ("model.onnx", "decoder_step.onnx"):
            tables = [t.name for t in onnx.load(os.path.join(folder, graph)).graph.initializer
                      if sorted(t.dims) == sorted(shape)]
            self.assertEqual(tables, ["embedding.weight"], graph)

    def test_int8(self):
        """`seqgrad quantize`'s int8 layers (each attention's out_proj, linear1, linear2, the untied
        output layer) stored int8 and multiplied by MatMulInteger after the per-row activation
        quantization, as the GRU's; the in_proj and embeddings stay float32. seqgrad's int8 Linear
        is exact integer arithmetic with the same float epilogue, so the graphs give seqgrad's
        int8 numbers row for row, but for a row whose activation lies on a rounding boundary
        (check_int8_numbers)."""
        q = self.path("transformer_int8.safetensors")
        self.assertOk(run("quantize", "--checkpoint", self.transformer("pre_norm"), "--out-file", q))
        folder, info = self.check_export(q, "int8", numbers=False)
        linears = [f"{side}.layers.{i}.{layer}" for side in ("encoder", "decoder") for i in (0, 1)
                   for layer in ("self_attn.out_proj", "linear1", "linear2")]
        linears += [f"decoder.layers.{i}.multihead_attn.out_proj" for i in (0, 1)] + ["out"]
        stored = sorted(t.name for t in onnx.load(os.path.join(folder, "model.onnx")).graph.initializer
                        if t.data_type == onnx.TensorProto.INT8)
        self.assertEqual(stored, sorted(n + ".weight_t_q" for n in linears))
        self.assertEqual(len(info["int8_weights"]), len(linears))
        self.assertTrue({"ReduceMin", "ReduceMax", "MatMulInteger"} <= self.op_types(folder))
        self.assertNotIn("DynamicQuantizeLinear", self.op_types(folder))
        if not onnxruntime_int8_exact(info["int8_activation_bits"]):
            self.skipTest(SKIP_INT8)
        self.check_int8_numbers(q, self.transformer("pre_norm"), folder, info["model"])

    def check_int8_numbers(self, q, f32, folder, model):
        """model.onnx on two padded batches against seqgrad's int8 outputs. The integer products are
        exact on both sides, but a row's activations are rounded to codes after float32 layers (layer
        norm, attention) that the two engines sum in their own orders, so a value lying on a rounding
        boundary can take the neighbouring code on one side, and that row's outputs then move by the
        code's share of the product. So: nearly every output row equal within RTOL, and every
        element within twice the error quantization itself makes (seqgrad's int8 against its float32
        outputs), where a wrong scale or layout is off by the outputs' own size."""
        rng = np.random.default_rng(4)
        for i, (batch, src_len, tgt_len) in enumerate(Parity.SHAPES):
            with self.subTest(batch=batch, src_len=src_len, tgt_len=tgt_len):
                inputs = random_inputs(rng, batch, src_len, tgt_len, model["src_vocab"], model["tgt_vocab"])
                inputs_path = self.path(f"in_q{i}.safetensors")
                save_file(inputs, inputs_path)
                refs = {}
                for name, checkpoint, out in (("int8", q, folder), ("f32", f32, self.path("export_transformer_q_f32"))):
                    ref_path = self.path(f"ref_q{i}_{name}.safetensors")
                    self.export(checkpoint, out, "--reference-inputs", inputs_path, "--reference-outputs", ref_path)
                    refs[name] = load_file(ref_path)["output"].astype(np.float64)
                got = session(os.path.join(folder, "model.onnx")).run(["output"], inputs)[0].astype(np.float64)
                error = np.abs(got - refs["int8"])
                quantization = float(np.max(np.abs(refs["int8"] - refs["f32"])))
                self.assertGreater(quantization, 0)
                self.assertLessEqual(float(np.max(error)), 2 * quantization, "model.onnx output against seqgrad's int8")
                exact_rows = np.mean(np.max(error, -1) <= RTOL * float(np.max(np.abs(refs["int8"]))))
                self.assertGreaterEqual(exact_rows, 0.9, "model.onnx output: rows equal to seqgrad's int8 within RTOL")

    def test_translate_py_stays_within_the_position_table(self):
        folder, info = self.check_export(self.transformer("pre_norm"), "positions", numbers=False)
        self.assertEqual(info["max_positions"], 1024)
        translator = onnx_translate.Translator(folder)
        ids, attention, log_probs = translator.greedy([5, 2], max_len=3)
        self.assertLessEqual(len(log_probs), 3)
        with self.assertRaisesRegex(ValueError, r"1025 output tokens: .* holds 1024 positions"):
            translator.greedy([5, 2], max_len=1025)

    def test_greedy_every_test2016_sentence(self):
        """A small Multi30k Transformer (E = 64, 4 heads, 2 + 2 layers, 6,000 pairs, two epochs):
        translate.py's greedy loop over the cache gives `seqgrad translate --beam 1`'s tokens for
        all 1,000 test2016 sentences, and each token's log-probability within 1e-4."""
        out = self.path("train_transformer_multi30k")
        self.assertOk(run("train", "--architecture", "transformer", "--vocab", "word", "--subset", "6000", "--epochs",
                          "2", "--embed", "64", "--hidden", "64", "--heads", "4", "--layers", "2", "--ffn-size", "128",
                          "--threads", "2", "--quiet", "--data-dir", DATA, "--out", out, timeout=600))
        ckpt = os.path.join(out, "best.safetensors")
        folder = self.export(ckpt, self.path("export_transformer_multi30k"))
        with open(os.path.join(DATA, "multi30k", "test2016.de"), encoding="utf-8") as f:
            sentences = [line.rstrip("\n") for line in f]
        self.assertEqual(len(sentences), 1000)
        p = run("translate", "--checkpoint", ckpt, "--beam", "1", "--json", "--threads", "2",
                stdin="\n".join(sentences) + "\n", timeout=600)
        self.assertOk(p)
        want = [json.loads(line) for line in p.stdout.splitlines()]
        translator = onnx_translate.Translator(folder, threads=2)
        mismatches, worst = [], 0.0
        for i, (sentence, w) in enumerate(zip(sentences, want)):
            ids, attention, log_probs = translator.greedy(translator.encode(sentence))
            tokens = [translator.tgt_tokens[t] for t in ids]
            if tokens != w["tgt_tokens"]:
                mismatches.append((i, sentence, w["tgt_tokens"], tokens))
                continue
            worst = max(worst, float(np.max(np.abs(np.array(log_probs) - np.array(w["token_log_probs"])))))
            self.assertAlmostEqual(sum(log_probs), w["log_prob"], delta=1e-4)
            self.assertEqual(len(attention), len(log_probs))
        print(f"\nTransformer greedy, onnxruntime vs seqgrad: {1000 - len(mismatches)}/1000 the same tokens, "
              f"log-probabilities within {worst:.3g}", file=sys.stderr)
        self.assertEqual(mismatches[:5], [], f"{len(mismatches)} sentences translated differently (index, source, "
                                             "seqgrad, onnxruntime)")
        self.assertLessEqual(worst, 1e-4)
        self.assertGreater(len({" ".join(w["tgt_tokens"]) for w in want}), 500,
                           "a degenerate model: too few distinct translations")


class Tokenizer(unittest.TestCase):
    """examples/onnx/translate.py tokenizes as models/text/tokenizer.cpp: the expected tokens are
    tests/test_models_text.cpp's."""

    def test_tokenize(self):
        t = onnx_translate.tokenize
        self.assertEqual(t("« Bonjour », dit-il… “Oui” — ¿Qué? ¡Sí!"),
                         ["«", "bonjour", "»", ",", "dit-il", "…", "“", "oui", "”", "—", "¿", "qué", "?", "¡", "sí", "!"])
        self.assertEqual(t("It costs $3.50 (i.e. 1,000 units) at 10:30... U.S. 5-4"),
                         ["it", "costs", "$", "3.50", "(", "i.e", ".", "1,000", "units", ")", "at", "10:30", "...",
                          "u.s", ".", "5-4"])
        self.assertEqual(t("A T-Shirt", lowercase=False), ["A", "T-Shirt"])
        self.assertEqual(t("l'homme d’aujourd'hui"), ["l'", "homme", "d'", "aujourd'", "hui"])
        self.assertEqual(t("the man's dog", apostrophe="attach_right"), ["the", "man", "'s", "dog"])
        self.assertEqual(t("l’homme", apostrophe="keep"), ["l'homme"])
        self.assertEqual(t("'quoted'"), ["'", "quoted", "'"])
        self.assertEqual(t(" \t "), [])
        self.assertEqual(t("Cours\u202F!"), ["cours", "!"])
        self.assertEqual(t("Qui\u00A0?"), ["qui", "?"])
        self.assertEqual(t("@@"), ["@", "@"])
        self.assertEqual(t("Žena,\u200b\u200bkterá"), ["žena", ",", "která"])

    def test_detokenize(self):
        d, t = onnx_translate.detokenize, onnx_translate.tokenize
        self.assertEqual(d(t("A dog, a cat (and a bird) run!")), "a dog, a cat (and a bird) run!")
        self.assertEqual(d(["\"", "zwei", "hunde", ".", "\"", "sagt", "er"]), "\"zwei hunde.\" sagt er")
        self.assertEqual(d(["l'", "homme", "«", "parle", "»", "?"]), "l'homme «parle»?")
        self.assertEqual(d(["the", "man", "'s", "dog", "..."]), "the man's dog...")
        self.assertEqual(d([]), "")


class BadInput(Base):
    """Clear errors, and nothing half-written under the output folder's final names."""
    FINAL_NAMES = {"model.onnx", "encoder.onnx", "decoder_step.onnx", "translator.json"}

    def test_missing_checkpoint(self):
        out = self.path("bad_missing")
        self.assertFails(run("export", "--checkpoint", self.path("nope.safetensors"), "--out", out),
                         r"export: error: .*no checkpoint at .*nope\.safetensors")
        self.assertFalse(os.path.exists(out))

    def test_corrupt_checkpoint(self):
        bad = self.path("corrupt.safetensors")
        with open(self.checkpoint("additive", 1), "rb") as f:
            blob = f.read()
        with open(bad, "wb") as f:
            f.write(blob[: len(blob) // 2])  # truncated
        out = self.path("bad_corrupt")
        self.assertFails(run("export", "--checkpoint", bad, "--out", out), r"export: error: .*corrupt\.safetensors")
        self.assertFalse(os.path.exists(out))
        with open(bad, "wb") as f:
            f.write(b"this is not a checkpoint")
        self.assertFails(run("export", "--checkpoint", bad, "--out", out), r"export: error: .*corrupt\.safetensors")
        self.assertFalse(os.path.exists(out))

    def test_unsupported_opset(self):
        out = self.path("bad_opset")
        for opset in ("12", "18", "x"):
            self.assertFails(run("export", "--checkpoint", self.checkpoint("additive", 1), "--out", out,
                                 "--opset", opset), r"export: error: .*opset",
                             status=2 if opset == "x" else 1)  # not an integer: a usage error
        p = run("export", "--checkpoint", self.checkpoint("additive", 1), "--out", out, "--opset", "18")
        self.assertIn("supported: 13 to 17", p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_unwritable_folder(self):
        blocker = self.path("a_file")
        with open(blocker, "w") as f:
            f.write("not a folder")
        for out in (blocker, os.path.join(blocker, "sub")):
            self.assertFails(run("export", "--checkpoint", self.checkpoint("additive", 1), "--out", out),
                             r"export: error: cannot create the output folder")

    def test_failed_export_keeps_the_previous_one(self):
        out = self.export(self.checkpoint("additive", 1), self.path("bad_keep"))
        before = read_all(out)
        self.assertEqual(set(before), self.FINAL_NAMES)
        bad = self.path("corrupt2.safetensors")
        with open(bad, "wb") as f:
            f.write(b"\x00" * 100)
        self.assertFails(run("export", "--checkpoint", bad, "--out", out), r"export: error:")
        after = read_all(out)
        self.assertEqual(after, before)  # no temporary files left, nothing replaced

    def test_translate_py_refuses_a_folder_without_an_export(self):
        with self.assertRaises(OSError):
            onnx_translate.Translator(self.path("nothing_here"))


def main():
    global SEQGRAD, DATA
    argv = sys.argv[1:]
    if len(argv) < 3:
        sys.exit("usage: test_onnx_export.py PATH/TO/seqgrad DATA_DIR onnx|no-onnx [unittest options]")
    SEQGRAD, DATA, support = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    if support != "onnx":
        p = subprocess.run([SEQGRAD, "export", "--out", tempfile.gettempdir() + "/seqgrad_no_onnx"],
                           capture_output=True, text=True)
        if p.returncode != 1 or "lacks ONNX support" not in p.stderr:
            sys.exit(f"export in a build without ONNX: expected 'lacks ONNX support', got {p.returncode}: {p.stderr}")
        print("test_onnx_export: skipped: this build lacks ONNX support (meson option onnx)")
        sys.exit(77)
    try:
        result = unittest.main(argv=[sys.argv[0], *argv[3:]], exit=False).result
        # a comparison that could not run says so in the log, whatever the verbosity
        for test, reason in result.skipped:
            print(f"SKIP {test.id()}: {reason}", file=sys.stderr)
        status = 0 if result.wasSuccessful() else 1
    finally:
        if Base.tmp and os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(Base.tmp, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
