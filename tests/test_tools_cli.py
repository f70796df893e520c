#!/usr/bin/python3
"""End-to-end tests of the `seqgrad` program: bad input, checkpoints, translate, resume, Ctrl-C,
the non-finite-loss stop, mixed precision (--amp) and --device, `eval --hyp --ref` against
sacreBLEU, `compare` and every --help.

    /usr/bin/python3 tests/test_tools_cli.py BUILD/tools/seqgrad [DATA_DIR] [-v] [-k PATTERN]

Registered in tests/meson.build (suite 'tools_cli'). Every training run is tiny (E = H = 16, a
few hundred pairs, one thread), so the whole file takes well under two minutes on two cores.

How the tests force the rare events:
  * an interruption: the hidden flag `train --stop-after-steps N` behaves exactly like Ctrl-C once
    the step counter reaches N (save last.safetensors, exit 130); one test also sends a real SIGINT.
  * a non-finite loss: the hidden flag `train --nan-at-step N` multiplies the loss of step N by NaN,
    so the real detection path runs. `--lr 1e30` also does it, without a hook: Adam moves every
    weight by about lr in the first update, so the second forward pass overflows float32 and the
    step-2 loss (or gradient norm) is not finite.
  * fp16 steps skipped on inf/NaN gradients: the hidden flag `train --init-loss-scale X` starts the
    GradScaler at a scale so large that the first steps' fp16 GEMM operands overflow.
"""
import json
import math
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

try:
    import sacrebleu
except ImportError:  # the BLEU comparison is skipped (pip install sacrebleu)
    sacrebleu = None

SEQGRAD = None
DATA = None
# The tiny model every training test uses (one thread: the machine is shared).
TINY = ["--preset", "default", "--vocab", "word", "--embed", "16", "--hidden", "16", "--batch-size", "32", "--threads", "1",
        "--quiet"]


def run(*args, stdin=None, timeout=300, env=None):  # generous: the machine may be shared
    """Runs seqgrad with args (env: variables set over this process's); returns CompletedProcess (text)."""
    return subprocess.run([SEQGRAD, *args], input=stdin, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_safetensors(path, header, data):
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


DTYPE_NAMES = {"F32": "float32", "F64": "float64", "I64": "int64", "I8": "int8", "BOOL": "bool"}


def shape_str(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def checksum(header, data):
    """seqgrad.crc32 of a file (nn/checkpoint.cpp's checkpoint_checksum): CRC-32 over each tensor's
    name, dtype, shape and bytes (names sorted), then each metadata entry but the checksum itself;
    strings end with a NUL."""
    crc = 0
    for name in sorted(k for k in header if k != "__metadata__"):
        t = header[name]
        begin, end = t["data_offsets"]
        for s in (name, DTYPE_NAMES[t["dtype"]], shape_str(t["shape"])):
            crc = zlib.crc32(s.encode() + b"\0", crc)
        crc = zlib.crc32(data[begin:end], crc)
    for key, value in sorted(header.get("__metadata__", {}).items()):
        if key != "seqgrad.crc32":
            crc = zlib.crc32(key.encode() + b"\0" + value.encode() + b"\0", crc)
    return f"{crc:08x}"


class Base(unittest.TestCase):
    maxDiff = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        if Base.tmp is None:
            Base.tmp = tempfile.mkdtemp(prefix="seqgrad_cli_")

    def out(self, name):
        return os.path.join(Base.tmp, name)

    def assertFails(self, proc, pattern, status=1):
        """A clean failure: the exit status, an error line matching pattern, no crash or traceback."""
        msg = f"\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
        self.assertEqual(proc.returncode, status, msg)
        self.assertRegex(proc.stderr, pattern, msg)
        self.assertNotIn("internal error", proc.stderr, msg)

    def assertOk(self, proc):
        self.assertEqual(proc.returncode, 0, f"\nstdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")


def trained_checkpoint():
    """A tiny 2-epoch run (shared by the checkpoint, translate and resume tests)."""
    if not hasattr(trained_checkpoint, "dir"):
        d = os.path.join(Base.tmp, "reference")
        p = run("train", *TINY, "--subset", "256", "--epochs", "2", "--data-dir", DATA, "--out", d, timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"reference training failed:\n{p.stdout}\n{p.stderr}")
        trained_checkpoint.dir = d
        trained_checkpoint.stdout = p.stdout
    return trained_checkpoint.dir


# ---- help ---------------------------------------------------------------------------------------

class Help(Base):
    COMMANDS = ["train", "translate", "eval", "attention", "compare", "gradcheck"]

    def test_every_subcommand_has_help(self):
        top = run("--help")
        self.assertOk(top)
        for cmd in self.COMMANDS:
            self.assertRegex(top.stdout, rf"\n  {cmd} ", cmd)
            p = run(cmd, "--help")
            self.assertOk(p)
            self.assertTrue(p.stdout.strip(), cmd)
        self.assertOk(run("attention", "demo", "--help"))

    def test_train_help_lists_presets_and_hides_test_hooks(self):
        p = run("train", "--help")
        for word in ["default", "seed", "d2l", "additive", "scaled_dot", "hybrid", "--resume", "--subset"]:
            self.assertIn(word, p.stdout)
        self.assertNotIn("stop-after-steps", p.stdout)
        self.assertNotIn("nan-at-step", p.stdout)
        self.assertNotIn("init-loss-scale", p.stdout)
        for word in ["--amp", "off | bf16 | fp16", "--device", "cuda:N"]:
            self.assertIn(word, p.stdout)

    def test_every_listed_option_is_accepted(self):
        # Each option --help shows is known to the parser: giving it with a bad value must not
        # say "unknown option".
        for cmd in ["train", "translate", "eval", "attention", "compare"]:
            names = re.findall(r"^  --([a-z-]+)", run(cmd, "--help").stdout, re.M)
            self.assertTrue(names, cmd)
            for name in names:
                p = run(cmd, f"--{name}=")
                self.assertNotIn("unknown option", p.stderr, f"{cmd} --{name}")

    def test_unknown_command(self):
        self.assertFails(run("trian"), r"unknown command 'trian'", status=2)


class CliTable(Base):
    """docs/cli.md's table of shared options against the commands' own declarations: each command
    prints them with the hidden `--list-options` (tools/args.cpp), so this reads what the parser
    was told, not a copy of it."""

    COMMANDS = ["train", "translate", "eval", "serve", "attention", "attention demo", "compare", "gradcheck",
                "bench", "export", "quantize", "average", "inspect", "info"]
    CONFIG_ROW = "every other config flag"

    @staticmethod
    def doc():
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "cli.md")) as f:
            return f.read()

    @classmethod
    def declarations(cls):
        if not hasattr(cls, "_declarations"):
            cls._declarations = {}
            for cmd in cls.COMMANDS:
                p = run(*cmd.split(), "--list-options")
                assert p.returncode == 0, (cmd, p.stderr)
                cls._declarations[cmd] = json.loads(p.stdout)
        return cls._declarations

    @staticmethod
    def shown_default(option):
        """The default as --help shows it: the declared one, else the help's "(default: X)" ("X; config
        key K" for a config field) or "the preset's" where the presets differ."""
        if option["default"]:
            return option["default"]
        if "(presets: " in option["help"]:
            return "the preset's"
        m = re.search(r"\(default: ([^;)]*)[;)]", option["help"])
        return m.group(1) if m else ""

    def table(self):
        """Rows of the shared-options table: (option name or CONFIG_ROW, {command: expected default})."""
        doc = self.doc()
        section = doc[doc.index("## Shared options"):]
        section = section[section.index("|---"):]
        section = section[:section.index("\n\n")]
        rows = []
        for line in section.splitlines()[1:]:
            option, default, _, commands = [c.strip() for c in line.strip().strip("|").split(" | ")]
            name = self.CONFIG_ROW if option.startswith(self.CONFIG_ROW) else re.match(r"`--([a-z-]+)", option).group(1)
            cmds = re.findall(r"`([a-z]+(?: demo)?)`", commands)
            # the default cell: "`X`" or "none" for every command, then "`cmd`, `cmd`: `Y`" per command
            expected = {}
            for part in default.split("; "):
                m = re.match(r"((?:`[a-z]+(?: demo)?`(?:, )?)+): (.*)$", part)
                value = m.group(2) if m else part
                value = value[1:-1] if value.startswith("`") and value.endswith("`") else value
                for cmd in (re.findall(r"`([a-z]+(?: demo)?)`", m.group(1)) if m else cmds):
                    expected[cmd] = value
            rows.append((name, cmds, expected))
        return rows

    def test_the_table_is_every_shared_option_with_one_default(self):
        decl = self.declarations()
        takes = {}  # option -> {command: its declaration}
        for cmd, d in decl.items():
            for o in d["options"]:
                if not o["hidden"]:
                    takes.setdefault(o["name"], {})[cmd] = o
        rows = self.table()
        self.assertGreaterEqual(len(rows), 30)
        listed = set()
        for name, cmds, expected in rows:
            if name == self.CONFIG_ROW:
                self.assertEqual(sorted(cmds), ["compare", "train"])
                continue
            listed.add(name)
            with self.subTest(option=name):
                self.assertIn(name, takes, f"docs/cli.md lists --{name}, which no command declares")
                self.assertEqual(sorted(cmds), sorted(takes[name]),
                                 f"docs/cli.md's row of --{name} names other commands than those that take it")
                for cmd, o in takes[name].items():
                    want = expected[cmd]
                    if want == "required":
                        self.assertTrue(o["required"], f"{cmd} --{name} is not required")
                        continue
                    got = self.shown_default(o) or "none"
                    self.assertEqual(got, want, f"seqgrad {cmd} --{name}: default '{got}', docs/cli.md says '{want}'")
        # an option two commands take is a row, or a config field both declare the same way
        for name, cmds in sorted(takes.items()):
            if len(cmds) < 2 or name in listed:
                continue
            with self.subTest(option=name):
                field = name[3:] if name.startswith("no-") else name
                self.assertEqual(sorted(cmds), ["compare", "train"], f"--{name} is shared by {sorted(cmds)} but not "
                                 "in docs/cli.md's table of shared options")
                self.assertEqual(takes[field]["train"]["group"], "config", f"--{name} is not a config flag")
                self.assertEqual(cmds["train"], cmds["compare"], f"--{name} is declared differently in train and "
                                 "compare")

    def test_quiet_is_one_declaration(self):
        # --quiet has one help text, so one meaning, in every command that takes it
        helps = {cmd: o["help"] for cmd, d in self.declarations().items() for o in d["options"] if o["name"] == "quiet"}
        self.assertGreaterEqual(len(helps), 7)
        self.assertEqual(len(set(helps.values())), 1, helps)
        self.assertIn("print only the results", next(iter(helps.values())))

    def test_every_deprecated_spelling_is_in_the_deprecation_table(self):
        doc = self.doc()
        table = doc[doc.index("| old | new |"):]
        table = table[:table.index("\n\n")]
        old = "\n".join(line.split(" | ")[0] for line in table.splitlines())
        for cmd, d in self.declarations().items():
            for alias in d["aliases"]:
                with self.subTest(command=cmd, alias=alias):
                    self.assertRegex(old, rf"--{alias}\b", f"{cmd} --{alias} is deprecated but not in docs/cli.md's table")
            if "deprecated_positional" in d:
                with self.subTest(command=cmd, positional=d["deprecated_positional"]):
                    self.assertRegex(old, rf"`{cmd} [^`]*[A-Z]", f"{cmd}'s positional spelling is not in the table")
        # and nowhere else: the docs, the README, the examples' README and the quick start teach
        # the new spellings (docs/results.md's rows record the commands as they were run)
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        pages = [os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md")]
        pages += [os.path.join(root, f) for f in ("README.md", "examples/README.md", "scripts/quickstart.sh")]
        spellings = [r"--heatmaps\b", r"--max-tokens \d", r"--kinds? [a-z]", r"seqgrad inspect (?!--)[a-zA-Z]",
                     r"--valid-files\b"]
        for page in pages:
            with open(page) as f:
                text = f.read()
            if page.endswith("cli.md"):
                text = text.replace(table, "")
            if page.endswith("results.md"):
                text = "\n".join(line for line in text.splitlines() if not line.startswith("| 20"))
            for spelling in spellings:
                found = re.search(rf"^.*{spelling}.*$", text, re.M)
                self.assertIsNone(found, f"{os.path.relpath(page, root)} teaches a deprecated spelling: "
                                         f"{found and found.group(0)}")

    def test_quiet_prints_only_the_results(self):
        # the one meaning of --quiet: train keeps its epoch and test lines, drops progress and the
        # lines about the data and the model; quantize, export and average then print nothing
        plain = [a for a in TINY if a != "--quiet"]
        loud = run("train", *plain, "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", self.out("loud"))
        quiet = run("train", *plain, "--quiet", "--subset", "64", "--epochs", "1", "--data-dir", DATA,
                    "--out", self.out("quiet"))
        self.assertOk(loud)
        self.assertOk(quiet)
        self.assertRegex(loud.stdout, r"(?m)^data: ")
        self.assertRegex(loud.stdout, r"(?m)^model: ")
        self.assertIn("validating", loud.stderr)
        self.assertNotRegex(quiet.stdout, r"(?m)^(data|model): ")
        self.assertEqual(quiet.stderr, "")
        # the same results, the epoch's seconds aside
        def results(p):
            return [re.sub(r", \d+ s$", "", line) for line in p.stdout.splitlines() if re.match(r"epoch 1|test: loss", line)]
        self.assertEqual(len(results(quiet)), 2)
        self.assertEqual(results(quiet), results(loud))
        ckpt = os.path.join(self.out("quiet"), "best.safetensors")
        q = self.out("quiet_int8.safetensors")
        self.assertEqual(run("quantize", "--checkpoint", ckpt, "--out-file", q, "--quiet").stdout, "")
        self.assertRegex(run("quantize", "--checkpoint", ckpt, "--out-file", q).stdout, r"^quantized \d+ weights")
        self.assertEqual(run("average", "--checkpoint", ckpt, ckpt, "--out-file", self.out("quiet_avg.safetensors"),
                             "--quiet").stdout, "")

    def test_attention_demo_shows_what_learn_md_says(self):
        # docs/learn.md: keys k0 and k2 point the way of query q0, k1 that of q1, and the additive
        # demo's (hand-set) parameters make each query pick those; the padding key k4 gets 0
        p = run("attention", "demo", "--attention", "additive")
        self.assertOk(p)
        table = p.stdout[p.stdout.index("weights = masked_softmax"):].splitlines()[2:4]
        weights = [[float(x) for x in line.split()[1:]] for line in table]
        for row in weights:
            self.assertAlmostEqual(sum(row), 1.0, places=3)
            self.assertEqual(row[4], 0.0)
        q0, q1 = weights
        self.assertEqual(sorted(range(4), key=lambda j: -q0[j])[:2], [2, 0], q0)
        self.assertGreater(min(q0[0], q0[2]), 0.4)
        self.assertEqual(max(range(4), key=lambda j: q1[j]), 1, q1)
        self.assertGreater(q1[1], 0.7)
        # --seed leaves the additive demo's parameters (the claim) alone
        self.assertEqual(run("attention", "demo", "--attention", "additive", "--seed", "7").stdout, p.stdout)

    def test_commands_are_the_programs(self):
        doc = self.doc()
        listed = re.findall(r"`([a-z]+)`", doc[doc.index("Commands:"):doc.index("## Shared options")])
        program = re.findall(r"^  ([a-z]+) ", run("--help").stdout, re.M)
        self.assertEqual(sorted(set(listed)), sorted(program))
        self.assertEqual(sorted(set(c.split()[0] for c in self.COMMANDS)), sorted(program))

    def test_help_cmd_required_options_and_json(self):
        self.assertEqual(run("help", "eval").stdout, run("eval", "--help").stdout)
        self.assertIn("(required)", run("quantize", "--help").stdout)
        self.assertFails(run("quantize", "--checkpoint", self.out("q_in.safetensors")), r"--out-file <file> is required",
                         status=2)
        # --checkpoint's one default, as in translate, eval and export
        self.assertFails(run("quantize", "--out-file", self.out("q.safetensors")),
                         r"no checkpoint at runs/default/best.safetensors", status=1)
        self.assertFails(run("export", "--checkpoint", self.out("x")), r"--out <dir> is required", status=2)
        info = json.loads(run("info", "--json").stdout)
        self.assertEqual(sorted(info), ["bf16_gemm", "blas", "cpu_kernels", "int8_gemm", "sentencepiece", "threads",
                                        "version"])
        # the plugin is found beside libseqgrad.so (the build folder's models/), or the build has none
        sentencepiece = info["sentencepiece"]
        if sentencepiece["available"]:
            self.assertTrue(sentencepiece["plugin"].endswith("/models/libseqgrad_sentencepiece.so"), sentencepiece)
        else:
            self.assertRegex(sentencepiece["plugin"], r"not built|none loaded")
        self.assertEqual(sorted(info["bf16_gemm"]), ["kernels", "used_by_amp", "why"])
        self.assertIn(info["int8_gemm"]["kernels"], ["onednn", "reference"])
        # the bf16 rule (ops/bf16_gemm.h): bf16 products for training only where they run natively (AMX
        # tiles, AVX-512 BF16), never emulated unless forced
        native = info["bf16_gemm"]["kernels"] in ("onednn avx512_core_amx", "onednn avx512_core_bf16")
        self.assertEqual(info["bf16_gemm"]["used_by_amp"], native)
        forced = json.loads(run("info", "--json", env={"SEQGRAD_BF16_GEMM": "native"}).stdout)["bf16_gemm"]
        self.assertTrue(forced["used_by_amp"])
        self.assertFails(run("info", env={"SEQGRAD_BF16_GEMM": "fast"}),
                         r"SEQGRAD_BF16_GEMM=fast: expected auto, native or emulate", status=1)
        # `demo` is the subcommand wherever it stands before "--", and nothing is created first
        p = run("attention", "--threads", "1", "demo", "--attention", "additive,dot")
        self.assertOk(p)
        self.assertEqual(re.findall(r"^== (\w+)", p.stdout, re.M), ["additive", "dot"])
        self.assertFalse(os.path.exists("attention"))


# ---- the attention demo's Transformer kinds -----------------------------------------------------

class AttentionDemo(Base):
    """`seqgrad attention demo --attention multihead,causal` against numbers derived here, from the toy
    input and the parameters the demo states (docs/attention.md, "From additive attention to the
    Transformer"); and every demo command docs/learn.md and docs/attention.md show runs."""

    QUERIES = [[1.0, 0.0, 0.5], [0.0, 1.0, -0.5]]
    KEYS = [[1.0, 0.2, 0.4], [-0.1, 0.9, -0.6], [0.8, -0.1, 0.7], [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]
    VALUES = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [9.0, 9.0]]
    VALID = 4  # k4 is padding

    @staticmethod
    def masked_softmax(row, n):
        """softmax over row[:n], zero for the rest"""
        m = max(row[:n])
        e = [math.exp(x - m) for x in row[:n]]
        return [x / sum(e) for x in e] + [0.0] * (len(row) - n)

    @staticmethod
    def block(out, title, rows):
        """The rows of the table (or vector list) printed under the line containing `title`: each
        row's numbers, -inf included, without its label."""
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if title in line)
        table = [line for line in lines[at + 1:at + 2 + rows] if re.match(r"  [qx]\d", line)][:rows]  # not the header
        return [[float(x) for x in re.findall(r"-inf|-?\d+\.\d+", line.split(None, 1)[1])] for line in table]

    def assertRowsEqual(self, printed, expected, what):
        self.assertEqual(len(printed), len(expected), what)
        for got, want in zip(printed, expected):
            self.assertEqual(len(got), len(want), what)
            for g, w in zip(got, want):
                if math.isinf(w):
                    self.assertEqual(g, w, what)
                else:
                    self.assertAlmostEqual(g, w, delta=1e-4, msg=f"{what}: {got} != {want}")

    def test_multihead_numbers(self):
        p = run("attention", "demo", "--attention", "multihead")
        self.assertOk(p)
        out = p.stdout
        # W_q = W_k = I: head h scores q_h k_h (d = 1); W_v: (a, b) -> (a, b, a + b); W_o = I, biases 0
        head_values = [[v[0], v[1], v[0] + v[1]] for v in self.VALUES]
        contexts, averaged = [], [[0.0] * 5 for _ in self.QUERIES]
        for h in range(3):
            energies = [[q[h] * k[h] for k in self.KEYS] for q in self.QUERIES]
            masked = [[e if j < self.VALID else -math.inf for j, e in enumerate(row)] for row in energies]
            weights = [self.masked_softmax(row, self.VALID) for row in energies]
            context = [[sum(w[j] * head_values[j][h] for j in range(5))] for w in weights]
            self.assertRowsEqual(self.block(out, f"head {h} energies", 2), energies, f"head {h} energies")
            self.assertRowsEqual(self.block(out, f"head {h} masked energies", 2), masked, f"head {h} masked")
            self.assertRowsEqual(self.block(out, f"head {h} weights", 2), weights, f"head {h} weights")
            self.assertRowsEqual(self.block(out, f"head {h} context", 2), context, f"head {h} context")
            for i in range(2):
                self.assertEqual(self.block(out, f"head {h} weights", 2)[i][4], 0.0)  # the padding key
                for j in range(5):
                    averaged[i][j] += weights[i][j] / 3
            contexts.append(context)
        self.assertRowsEqual(self.block(out, "weights averaged over the heads", 2), averaged, "head average")
        output = [[contexts[h][i][0] for h in range(3)] for i in range(2)]
        self.assertRowsEqual(self.block(out, "output = concat", 2), output, "output")
        # --seed does not touch the hand-set parameters
        self.assertEqual(run("attention", "demo", "--attention", "multihead", "--seed", "7").stdout, out)

    def test_causal_numbers(self):
        p = run("attention", "demo", "--attention", "causal")
        self.assertOk(p)
        out = p.stdout
        lengths = [min(t + 1, self.VALID) for t in range(5)]  # [1, 2, 3, 4, 4]
        self.assertIn("causal_lengths([4], 5) = [1 2 3 4 4]", out)
        energies = [[sum(a * b for a, b in zip(x, y)) / math.sqrt(3) for y in self.KEYS] for x in self.KEYS]
        masked = [[e if j < lengths[t] else -math.inf for j, e in enumerate(row)] for t, row in enumerate(energies)]
        weights = [self.masked_softmax(row, lengths[t]) for t, row in enumerate(energies)]
        context = [[sum(w[j] * self.VALUES[j][d] for j in range(5)) for d in range(2)] for w in weights]
        self.assertRowsEqual(self.block(out, "energies e = x_t · x_j", 5), energies, "causal energies")
        self.assertRowsEqual(self.block(out, "masked energies: the future", 5), masked, "causal masked energies")
        printed = self.block(out, "weights = masked_softmax(energies)", 5)
        self.assertRowsEqual(printed, weights, "causal weights")
        for t, row in enumerate(printed):  # query t sees the keys j <= t, and never the padding key
            self.assertTrue(all(w == 0.0 for j, w in enumerate(row) if j > t or j >= self.VALID), row)
        self.assertRowsEqual(self.block(out, "context = weights · values", 5), context, "causal context")
        # the cache: decoding step t attends to keys 0..t unmasked and gets causal row t
        steps = re.findall(r"^  step (\d): cache x0\.\.x\d  context \[\s*(-?\d+\.\d+)\s+(-?\d+\.\d+) \]"
                           r"\s+\|step - causal row\| = (\S+)$", out, re.M)
        self.assertEqual([int(s[0]) for s in steps], [0, 1, 2, 3], out)
        for t, a, b, diff in steps:
            self.assertRowsEqual([[float(a), float(b)]], [context[int(t)]], f"step {t}")
            self.assertLess(float(diff), 1e-12)

    def test_every_documented_demo_command_runs(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        commands = set()
        for doc in ("docs/learn.md", "docs/attention.md"):
            with open(os.path.join(root, doc)) as f:
                for m in re.finditer(r"seqgrad attention demo((?: --?[a-z][\w-]*(?: [\w,]+)?)*)", f.read()):
                    commands.add(m.group(1).strip())
        self.assertIn("--attention multihead,causal", commands)
        for args in sorted(commands):
            argv = args.split()
            p = run("attention", "demo", *argv)
            self.assertOk(p)
            kinds = argv[argv.index("--attention") + 1].split(",") if "--attention" in argv else []
            if kinds and "all" not in kinds:
                self.assertEqual(set(re.findall(r"^== (\w+)", p.stdout, re.M)), set(kinds), args)


# ---- bad input to train -------------------------------------------------------------------------

class TrainBadInput(Base):
    def check(self, args, pattern):
        # tiny settings first, so that a check which wrongly passes does not start a long run; the
        # flags under test come last and win
        p = run("train", *TINY, "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", self.out("bad"), *args,
                timeout=60)
        self.assertFails(p, r"seqgrad train: error: .*" + pattern, status=2)  # a usage error

    def test_unknown_preset(self):
        self.check(["--preset", "huge"], r"unknown preset 'huge' \(choose one of: default, seed, d2l, tiny, transformer\)")

    def test_unknown_flag(self):
        self.check(["--epochz", "3"], r"unknown option --epochz")
        self.check(["-e", "3"], r"unknown option -e")
        self.check(["stray"], r"unexpected argument 'stray'")

    def test_bad_values(self):
        self.check(["--epochs", "two"], r"--epochs expects an integer, got 'two'")
        self.check(["--epochs", "0"], r"--epochs must be >= 1, got 0")
        self.check(["--epochs"], r"option --epochs needs a value <n>\n")
        self.check(["--epochs", "--quiet"], r"--epochs needs a value <n>, got the option --quiet")
        self.check(["--epochs="], r"--epochs needs a value <n>, got an empty one")
        self.check(["--lr", "nan"], r"--lr expects a finite number, got 'nan'")
        self.check(["--lr", "-0.1"], r"--lr must be > 0, got -0.1")
        self.check(["--dropout", "1.5"], r"--dropout must be in \[0, 1\), got 1.5")
        self.check(["--hidden", "0"], r"--hidden must be in \[1, 1048576\], got 0")
        self.check(["--truncate", "0"], r"--truncate must be in \[1, 1048576\], got 0")
        p = run("train", *TINY, "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", self.out("bad"),
                "--max-tokens", "0")  # the old spelling still works, with a deprecation line
        self.assertFails(p, r"--max-tokens is deprecated .* use --truncate\nseqgrad train: error: --truncate must be in",
                         status=2)
        self.check(["--attention", "cosine"], r"--attention must be one of: additive, scaled_dot, hybrid, got cosine")
        self.check(["--threads", "0"], r"--threads must be >= 1")
        self.check(["--beam", "0"], r"--beam must be >= 1")
        self.check(["--subset", "-5"], r"--subset must be >= 0")
        self.check(["--label-smoothing", "1.5"], r"--label-smoothing must be in \[0, 1\], got 1.5")
        self.check(["--clip", "0"], r"--clip must be > 0, got 0")
        self.check(["--seed", "-1"], r"--seed must be an integer >= 0, got -1")
        self.check(["--quiet=yes"], r"--quiet is a flag and takes no value")
        self.check(["--amp", "fp32"], r"--amp must be one of: off, bf16, fp16, got fp32")
        self.check(["--amp="], r"--amp needs a value <mode>, got an empty one")
        self.check(["--device", "gpu"], r"--device expects cpu, cuda or cuda:N, got 'gpu'")

    def test_missing_data(self):
        p = run("train", *TINY, "--data-dir", self.out("no_such_dir"), "--out", self.out("bad"))
        self.assertFails(p, r"data folder '.*no_such_dir' does not exist")
        p = run("train", *TINY, "--src", "xx", "--data-dir", DATA, "--out", self.out("bad"))
        self.assertFails(p, r"--src is not a language of corpus multi30k \(de, en, fr, cs\), got xx", status=2)
        empty = self.out("empty_data")
        os.makedirs(os.path.join(empty, "multi30k"), exist_ok=True)
        p = run("train", *TINY, "--data-dir", empty, "--out", self.out("bad"))
        self.assertFails(p, r"missing file .*empty_data/multi30k/train.de")

    def test_too_few_pairs_for_a_vocabulary(self):
        p = run("train", *TINY, "--subset", "2", "--data-dir", DATA, "--out", self.out("bad"))
        self.assertFails(p, r"vocabularies hold only the special tokens .*config field train_subset")

    def test_resume_without_checkpoint(self):
        p = run("train", *TINY, "--resume", "--data-dir", DATA, "--out", self.out("never_trained"))
        self.assertFails(p, r"no checkpoint at .*never_trained/last.safetensors")


# ---- checkpoints --------------------------------------------------------------------------------

class Checkpoints(Base):
    def setUp(self):
        self.ckpt = os.path.join(trained_checkpoint(), "best.safetensors")

    def translate(self, ckpt, *sentences):
        return run("translate", "--checkpoint", ckpt, "--threads", "1", *sentences)

    def test_missing_checkpoint(self):
        self.assertFails(self.translate(self.out("nope.safetensors"), "ein mann"),
                         r"no checkpoint at .*nope.safetensors")
        self.assertFails(run("eval", "--checkpoint", self.out("nope.safetensors")), r"no checkpoint at")
        self.assertFails(run("attention", "--checkpoint", self.out("nope.safetensors"), "ein mann"),
                         r"no checkpoint at")

    def test_truncated_checkpoint(self):
        with open(self.ckpt, "rb") as f:
            blob = f.read()
        for name, size in [("cut_data", len(blob) * 2 // 3), ("cut_header", 100), ("cut_length", 5), ("empty", 0)]:
            path = self.out(f"{name}.safetensors")
            with open(path, "wb") as f:
                f.write(blob[:size])
            self.assertFails(self.translate(path, "ein mann"), re.escape(path), status=1)

    def test_corrupted_checkpoint(self):
        # one flipped bit in the weights, or an edited config: the checksum catches both
        header, data = read_safetensors(self.ckpt)
        self.assertIn("seqgrad.crc32", header["__metadata__"])
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        path = self.out("flipped.safetensors")
        write_safetensors(path, header, bytes(flipped))
        self.assertFails(self.translate(path, "ein mann"), r"flipped.safetensors is corrupted: checksum", status=1)
        header["__metadata__"]["train_state"] = header["__metadata__"]["train_state"].replace('"step":', '"step": ')
        path = self.out("edited.safetensors")
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "ein mann"), r"edited.safetensors is corrupted: checksum", status=1)
        # a checkpoint without a checksum loads only with --allow-missing-checksum (and a warning)
        del header["__metadata__"]["seqgrad.crc32"]
        header["__metadata__"]["train_state"] = header["__metadata__"]["train_state"].replace('"step": ', '"step":')
        path = self.out("no_crc.safetensors")
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "ein mann"), r"has no checksum .*--allow-missing-checksum")
        p = self.translate(path, "--allow-missing-checksum", "ein mann")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_not_a_translator_checkpoint(self):
        header, data = read_safetensors(self.ckpt)
        del header["__metadata__"]
        path = self.out("plain.safetensors")
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "ein mann"), r"is this a seqgrad translator checkpoint")
        path = self.out("text.safetensors")
        with open(path, "w") as f:
            f.write("hello, I am not a checkpoint\n")
        self.assertFails(self.translate(path, "ein mann"), re.escape(path))

    def test_different_vocabulary(self):
        # The metadata of a checkpoint with another vocabulary, over these weights (without a
        # checksum, as checkpoints written before it, else the checksum would refuse the edit).
        header, data = read_safetensors(self.ckpt)
        meta = header["__metadata__"]
        del meta["seqgrad.crc32"]
        vocab = json.loads(meta["src_vocab"])
        vocab["tokens"] = vocab["tokens"][:-3]
        config = json.loads(meta["config"])
        config["model"]["src_vocab"] = len(vocab["tokens"])
        meta["src_vocab"], meta["config"] = json.dumps(vocab), json.dumps(config)
        path = self.out("other_vocab.safetensors")
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "--allow-missing-checksum", "ein mann"),
                         r"other_vocab.safetensors: its weights do not fit .*config field model\.src_vocab = \d+, "
                         r"but tensor 'model\.encoder\.embedding\.weight' has shape \(\d+, 16\)")
        # ... and a vocabulary that disagrees with the config saved beside it
        config["model"]["src_vocab"] += 3
        meta["config"] = json.dumps(config)
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "--allow-missing-checksum", "ein mann"), r"vocabulary sizes .* do not match")

    def test_different_architecture(self):
        header, data = read_safetensors(self.ckpt)
        meta = header["__metadata__"]
        del meta["seqgrad.crc32"]  # as in test_different_vocabulary
        config = json.loads(meta["config"])
        config["model"]["hidden_size"] = 32
        meta["config"] = json.dumps(config)
        path = self.out("other_arch.safetensors")
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "--allow-missing-checksum", "ein mann"),
                         r"other_arch.safetensors: its weights do not fit .*"
                         r"model\.hidden_size = 32, but tensor 'model\.encoder\.rnn\.weight_hh_l0' has shape \(48, 16\)")
        config["model"]["hidden_size"] = 16
        config["model"]["attention"] = "scaled_dot"
        meta["config"] = json.dumps(config)
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "--allow-missing-checksum", "ein mann"),
                         r"other_arch.safetensors: .*missing keys .*query_proj.*unexpected keys .*decoder\.attention")
        config["model"]["attention"] = "cosine"
        meta["config"] = json.dumps(config)
        write_safetensors(path, header, data)
        self.assertFails(self.translate(path, "--allow-missing-checksum", "ein mann"),
                         r'config field model.attention = "cosine" must be one of: additive, scaled_dot, hybrid')

    def test_resume_with_other_settings(self):
        # A resumed run keeps its checkpoint's vocabulary and architecture; asking for others is an error.
        d = trained_checkpoint()
        for flags, pattern in [(["--hidden", "32"], r"--hidden 16, not 32"),
                               (["--subset", "500"], r"--subset 256, not 500"),
                               (["--src", "fr"], r"--src de, not fr"),
                               (["--attention", "hybrid"], r"--attention additive, not hybrid"),
                               (["--preset", "d2l"], r"--preset default, not d2l"),
                               (["--amp", "bf16"], r"--amp off, not bf16")]:
            p = run("train", "--resume", "--out", d, "--data-dir", DATA, "--threads", "1", *flags)
            self.assertFails(p, r"cannot resume: .*" + pattern, status=2)  # the flags disagree: a usage error


# ---- translate ----------------------------------------------------------------------------------

class Translate(Base):
    def setUp(self):
        self.ckpt = os.path.join(trained_checkpoint(), "best.safetensors")

    def translate(self, *args, stdin=None):
        return run("translate", "--checkpoint", self.ckpt, "--threads", "1", *args, stdin=stdin)

    def test_ordinary_sentence(self):
        p = self.translate("ein mann fährt fahrrad .")
        self.assertOk(p)
        self.assertEqual(len(p.stdout.splitlines()), 1)

    def test_empty_sentence(self):
        p = self.translate("")
        self.assertFails(p, r"sentence 1: empty")
        self.assertEqual(p.stdout, "\n")
        p = self.translate(stdin="ein mann .\n   \nein hund .\n")
        self.assertFails(p, r"line 2: empty")
        lines = p.stdout.split("\n")
        self.assertEqual(len(lines), 4, p.stdout)  # one line per input line, the empty one kept
        self.assertEqual(lines[1], "")
        self.assertFails(self.translate(stdin=""), r"no input sentences")

    def test_per_head_needs_json_and_a_transformer(self):
        # usage errors (status 2) naming what is missing: the JSON lines, or a Transformer's heads
        self.assertFails(self.translate("--per-head", "ein mann ."), r"--per-head adds to the JSON lines: give --json",
                         status=2)
        self.assertFails(self.translate("--json", "--per-head", "ein mann ."),
                         r"--per-head shows a Transformer's attention heads, but .*best\.safetensors is a gru", status=2)

    def test_unseen_words(self):
        p = self.translate("ein zyxwvutsrq mann")
        self.assertOk(p)
        self.assertIn("note: 'zyxwvutsrq' was not seen in training (<unk>)", p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1)

    def test_over_long_input(self):
        p = self.translate(" ".join(["mann"] * 500))
        self.assertOk(p)
        self.assertRegex(p.stderr, r"warning: sentence 1 truncated to 64 tokens")  # 2 x the preset's max_tokens 32
        self.assertEqual(len(p.stdout.splitlines()), 1)

    def test_bad_decoding_options(self):
        self.assertFails(self.translate("--beam", "0", "ein mann"), r"--beam must be >= 1", status=2)
        self.assertFails(self.translate("--max-len", "0", "ein mann"), r"--max-len must be >= 1", status=2)
        self.assertFails(self.translate("--length-penalty", "inf", "ein mann"), r"expects a finite number", status=2)
        self.assertFails(self.translate("--bogus", "ein mann"), r"unknown option --bogus", status=2)
        p = self.translate("--beam", "3", "--", "-ein mann")  # "--" ends the options
        self.assertOk(p)

    def test_heatmaps_and_attention_report(self):
        d = self.out("heatmaps")
        p = self.translate("--out", d, "ein mann .")
        self.assertOk(p)
        self.assertTrue(os.path.getsize(os.path.join(d, "sentence1.png")) > 0)
        p = self.translate("--heatmaps", d, "ein mann .")  # the old spelling, for one release
        self.assertOk(p)
        self.assertIn("--heatmaps is deprecated", p.stderr)
        # --json: one line per input, the translation as the plain output gives it
        plain = self.translate("--beam", "2", "--nbest", "2", "ein mann .", "zwei hunde .")
        p = self.translate("--json", "--beam", "2", "--nbest", "2", "ein mann .", "zwei hunde .")
        self.assertOk(p)
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([(j["line"], j["src"], len(j["nbest"])) for j in lines],
                         [(1, "ein mann .", 2), (2, "zwei hunde .", 2)])
        best = [l.split("\t") for l in plain.stdout.splitlines()][::2]
        self.assertEqual([(b[2], float(b[1])) for b in best],
                         [(j["translation"], round(j["score"], 4)) for j in lines])
        p = run("attention", "--checkpoint", self.ckpt, "--threads", "1", "--out", self.out("att"), "ein mann .")
        self.assertOk(p)
        self.assertTrue(os.path.exists(self.out("att/report.html")))


class SearchOptions(Base):
    """Length and coverage penalties, --min-len, sampling, ensembles and eval --score end to end."""

    def setUp(self):
        self.ckpt = os.path.join(trained_checkpoint(), "best.safetensors")

    def translate(self, *args, checkpoints=None):
        return run("translate", "--checkpoint", *(checkpoints or [self.ckpt]), "--threads", "1", *args)

    def test_bad_search_flags(self):
        for args, pattern in [
                (["--length-penalty-type", "wu"], r"--length-penalty-type must be one of: power, gnmt, got 'wu'"),
                # one range per option, the server's too (tests/test_tools_serve.py)
                (["--coverage-penalty", "-0.5"], r"--coverage-penalty must be in \[0, 10\], got -0.5"),
                (["--length-penalty", "10.5"], r"--length-penalty must be in \[0, 10\], got 10.5"),
                (["--coverage-penalty", "x"], r"--coverage-penalty expects a finite number, got 'x'"),
                (["--min-len", "-1"], r"--min-len must be >= 0, got -1"),
                (["--min-len", "20", "--max-len", "10"], r"--min-len 20 must be <= the longest output, --max-len 10"),
                (["--sample", "topk:0"], r"--sample expects topk:K \(K >= 1\) or topp:P \(0 < P <= 1\), got 'topk:0'"),
                (["--sample", "topp:1.5"], r"--sample expects topk:K .* got 'topp:1.5'"),
                (["--sample", "nucleus"], r"--sample expects topk:K .* got 'nucleus'"),
                (["--sample", "topk:2", "--temperature", "0"], r"--temperature must be > 0, got 0"),
                (["--sample", "topk:2", "--seed", "-1"], r"--seed must be >= 0, got -1"),
                (["--temperature", "2"], r"--temperature applies to sampling: give --sample topk:K or topp:P too"),
                (["--seed", "3"], r"--seed applies to sampling"),
                (["--sample", "topk:2", "--beam", "2"], r"--sample draws one output per sentence: it does not combine "
                                                        r"with --beam 2")]:
            with self.subTest(args=args):
                self.assertFails(self.translate(*args, "ein mann ."), r"seqgrad translate: error: " + pattern, status=2)
        self.assertFails(run("eval", "--checkpoint", self.ckpt, "--score", "--sample", "topk:2"),
                         r"--score scores the given targets: --sample does not apply", status=2)

    def test_penalties_and_min_len(self):
        p = self.translate("--beam", "3", "--length-penalty-type", "gnmt", "--length-penalty", "0.6",
                           "--coverage-penalty", "0.2", "ein mann fährt fahrrad .")
        self.assertOk(p)
        self.assertEqual(len(p.stdout.splitlines()), 1)
        for beam in ["1", "3"]:
            p = self.translate("--json", "--beam", beam, "--min-len", "12", "ein mann .")
            self.assertOk(p)
            self.assertGreaterEqual(len(json.loads(p.stdout)["nbest"][0]["tokens"]), 12)

    def test_sampling(self):
        greedy = self.translate("ein mann fährt fahrrad .", "zwei hunde spielen .")
        self.assertEqual(self.translate("--sample", "topk:1", "ein mann fährt fahrrad .", "zwei hunde spielen .").stdout,
                         greedy.stdout)
        args = ["--sample", "topp:0.95", "--temperature", "1.5", "--seed", "4", "ein mann fährt fahrrad ."]
        first = self.translate(*args)
        self.assertOk(first)
        self.assertEqual(self.translate(*args).stdout, first.stdout)  # the same seed, the same output

    def test_ensemble(self):
        # an ensemble of a model with itself averages equal distributions: the model's own output; the
        # sentence after the checkpoints is still a sentence
        single = self.translate("--beam", "2", "ein mann fährt fahrrad .")
        double = self.translate("--beam", "2", "ein mann fährt fahrrad .", checkpoints=[self.ckpt, self.ckpt])
        self.assertOk(double)
        self.assertEqual(double.stdout, single.stdout)
        other = self.out("other_vocab")
        if not os.path.exists(os.path.join(other, "best.safetensors")):  # trained on fewer pairs: fewer words
            self.assertOk(run("train", *TINY, "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", other,
                              timeout=600))
        p = self.translate("ein mann .", checkpoints=[self.ckpt, os.path.join(other, "best.safetensors")])
        self.assertFails(p, r"--checkpoint: an ensemble needs the same vocabularies, but the source vocabularies of "
                            r".*reference/best.safetensors and .*other_vocab/best.safetensors differ: \d+ tokens and "
                            r"\d+ tokens", status=2)

    def test_eval_score(self):
        # forced decoding of the references: per-token log-probabilities, <eos> included, whose total
        # gives the perplexity that eval's teacher-forced loss gives (no sentence is truncated)
        src, tgt = self.out("score.de"), self.out("score.en")
        for path, lines in [(src, ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee .", "eine frau liest ."]),
                            (tgt, ["a man rides a bike .", "two dogs play in the snow .", "a woman reads ."])]:
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join(l + "\n" for l in lines))
        p = run("eval", "--checkpoint", self.ckpt, "--threads", "1", "--score", "--json", "--test", src, tgt)
        self.assertOk(p)
        scored = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([(s["line"], len(s["tokens"]), len(s["token_log_probs"])) for s in scored],
                         [(1, 6, 7), (2, 7, 8), (3, 4, 5)])
        for s in scored:
            self.assertAlmostEqual(sum(s["token_log_probs"]), s["log_prob"], places=6)
            self.assertLess(s["log_prob"], 0)
        p = run("eval", "--checkpoint", self.ckpt, "--threads", "1", "--score", "--quiet", "--test", src, tgt)
        self.assertOk(p)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertRegex(lines[0], r"^1\t-[\d.]+\t-[\d.]+\ta man rides a bike \.$")
        total = re.fullmatch(r"scored 3 pairs: log-probability (-[\d.]+) over 20 tokens \(<eos> included\), "
                             r"ppl ([\d.]+)", lines[3])
        self.assertTrue(total, lines[3])
        self.assertAlmostEqual(float(total.group(1)), sum(s["log_prob"] for s in scored), places=2)
        teacher_forced = json.loads(run("eval", "--checkpoint", self.ckpt, "--threads", "1", "--json", "--test", src,
                                        tgt).stdout)
        self.assertAlmostEqual(float(total.group(2)), teacher_forced["ppl"], delta=0.01 + 1e-4 * teacher_forced["ppl"])


# ---- resume and interruption --------------------------------------------------------------------

LOSS_KEYS = ["epoch", "step", "train_loss", "valid_loss", "valid_ppl", "valid_sacrebleu", "valid_chrf",
             "valid_bleu_tokenized", "lr"]


class Resume(Base):
    def train(self, out, *extra):
        return run("train", *TINY, "--subset", "256", "--epochs", "2", "--data-dir", DATA, "--out", out, *extra)

    def losses(self, out):
        return [{k: m[k] for k in LOSS_KEYS} for m in read_metrics(os.path.join(out, "metrics.jsonl"))]

    def test_interrupted_and_resumed_runs_match(self):
        reference = self.losses(trained_checkpoint())
        self.assertEqual([m["epoch"] for m in reference], [1, 2])
        # 8 batches per epoch: stop mid-epoch (5), right after the last batch of an epoch before its
        # validation (8), and mid-epoch again after a resume (11).
        out = self.out("resumed")
        p = self.train(out, "--stop-after-steps", "5")
        self.assertFails(p, r"interrupted at epoch 1, batch 5 \(step 5\): saved .*last.safetensors", status=130)
        self.assertFalse(os.path.exists(os.path.join(out, "metrics.jsonl")))
        p = self.train(out, "--resume", "--stop-after-steps", "8")
        self.assertFails(p, r"interrupted at epoch 1, batch 8 \(step 8\)", status=130)
        p = self.train(out, "--resume", "--stop-after-steps", "11")
        self.assertFails(p, r"interrupted at epoch 2, batch 3 \(step 11\)", status=130)
        p = self.train(out, "--resume")
        self.assertOk(p)
        self.assertIn("resuming", p.stdout)
        self.assertEqual(self.losses(out), reference)

    def test_ctrl_c_saves_and_resumes(self):
        reference = self.losses(trained_checkpoint())
        out = self.out("sigint")
        args = [SEQGRAD, "train", *[a for a in TINY if a != "--quiet"], "--subset", "256", "--epochs", "2",
                "--data-dir", DATA, "--out", out]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = b""
        deadline = time.time() + 60
        while b"batch " not in seen and time.time() < deadline:  # the progress bar: a step is done
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
        stderr = (seen + stderr).decode()
        self.assertEqual(proc.returncode, 130, stderr)
        self.assertRegex(stderr, r"interrupted (at epoch \d, batch \d+|after epoch \d) \(step \d+\): saved "
                                 r".*last.safetensors")
        p = run("train", "--resume", "--out", out, "--threads", "1", "--quiet")
        self.assertOk(p)
        self.assertEqual(self.losses(out), reference)

    def test_resume_can_extend_the_run(self):
        out = self.out("extended")
        shutil.copytree(trained_checkpoint(), out)
        p = run("train", "--resume", "--out", out, "--epochs", "3", "--threads", "1", "--quiet")
        self.assertOk(p)
        self.assertEqual([m["epoch"] for m in read_metrics(os.path.join(out, "metrics.jsonl"))], [1, 2, 3])


# ---- non-finite loss ----------------------------------------------------------------------------

class NonFinite(Base):
    def test_nan_loss_stops_with_step_and_checkpoint(self):
        out = self.out("nan")
        p = run("train", *TINY, "--subset", "256", "--epochs", "2", "--data-dir", DATA, "--out", out,
                "--nan-at-step", "3")
        self.assertFails(p, r"loss is nan at epoch 1 batch 3 \(step 3\); stopped before the update and saved "
                            r"the state that produced it to .*nan.safetensors")
        header, _ = read_safetensors(os.path.join(out, "nan.safetensors"))
        state = json.loads(header["__metadata__"]["train_state"])
        self.assertEqual((state["step"], state["batch"], state["epoch"]), (2, 2, 0))
        self.assertFalse(os.path.exists(os.path.join(out, "last.safetensors")))
        # the saved weights are the finite ones that met the bad loss: the checkpoint still translates
        self.assertOk(run("translate", "--checkpoint", os.path.join(out, "nan.safetensors"), "--threads", "1",
                          "ein mann ."))

    def test_nan_after_an_epoch_points_to_the_last_good_checkpoint(self):
        out = self.out("nan_epoch2")
        p = run("train", *TINY, "--subset", "256", "--epochs", "2", "--data-dir", DATA, "--out", out,
                "--nan-at-step", "10")
        self.assertFails(p, r"loss is nan at epoch 2 batch 2 \(step 10\).*last good checkpoint is .*last.safetensors")
        header, _ = read_safetensors(os.path.join(out, "last.safetensors"))
        self.assertEqual(json.loads(header["__metadata__"]["train_state"])["step"], 8)

    def test_huge_learning_rate(self):
        out = self.out("huge_lr")
        p = run("train", *TINY, "--subset", "256", "--epochs", "1", "--lr", "1e30", "--data-dir", DATA, "--out", out)
        self.assertFails(p, r"(loss|gradient norm) is (nan|inf|-inf) at epoch 1 batch 2 \(step 2\)")
        self.assertTrue(os.path.exists(os.path.join(out, "nan.safetensors")))


# ---- mixed precision and devices ---------------------------------------------------------------

class MixedPrecision(Base):
    def train(self, out, *extra):  # not --quiet: the model line names the precision
        return run("train", *[a for a in TINY if a != "--quiet"], "--data-dir", DATA, "--out", out, *extra)

    def test_bf16_and_fp16_runs(self):
        for amp in ["bf16", "fp16"]:
            out = self.out(f"amp_{amp}")
            p = self.train(out, "--subset", "128", "--epochs", "1", "--amp", amp)
            self.assertOk(p)
            self.assertIn(f"amp {amp}", p.stdout)
            if amp == "bf16":  # float32 products where bf16 ones would be slower, and it says so
                used = json.loads(run("info", "--json").stdout)["bf16_gemm"]["used_by_amp"]
                self.assertEqual("float32 GEMMs run instead" in p.stdout, not used)
            self.assertRegex(p.stdout, r"test: loss [\d.]+, ppl [\d.]+, sacreBLEU [\d.]+, chrF [\d.]+, BLEU")
            (m,) = read_metrics(os.path.join(out, "metrics.jsonl"))
            for key in ["train_loss", "valid_loss"]:
                self.assertTrue(m[key] == m[key] and 0 < m[key] < 100, (amp, m))  # finite, not NaN
            header, _ = read_safetensors(os.path.join(out, "last.safetensors"))
            self.assertEqual(json.loads(header["__metadata__"]["config"])["amp"], amp)
            state = json.loads(header["__metadata__"]["train_state"])
            if amp == "fp16":  # the loss scaler's state and the skipped steps are reported and saved
                self.assertEqual(state["grad_scaler"]["scale"], m["loss_scale"])
                self.assertIn("skipped_steps", m)
                self.assertRegex(p.stdout, r"epoch 1: .*, \d+ skipped steps \(inf/NaN fp16 gradients\), loss scale")
            else:  # bf16 needs no loss scaling (PyTorch's convention)
                self.assertNotIn("grad_scaler", state)
                self.assertNotIn("loss_scale", m)
            self.assertTrue(os.path.exists(os.path.join(out, "best.safetensors")))

    def test_fp16_interrupted_and_resumed_runs_match(self):
        # A huge initial scale makes the first steps overflow, so the scale and the skipped steps at
        # the interruption differ from a fresh scaler's: a resume that lost the GradScaler state
        # would not reproduce the losses.
        keys = LOSS_KEYS + ["skipped_steps", "loss_scale"]
        flags = ["--subset", "256", "--epochs", "2", "--amp", "fp16", "--init-loss-scale", "1e9"]

        def losses(out):
            return [{k: m[k] for k in keys} for m in read_metrics(os.path.join(out, "metrics.jsonl"))]

        reference_dir = self.out("fp16_reference")
        self.assertOk(self.train(reference_dir, *flags))
        reference = losses(reference_dir)
        self.assertEqual([m["epoch"] for m in reference], [1, 2])
        self.assertGreater(reference[0]["skipped_steps"], 3)
        self.assertLess(reference[0]["loss_scale"], 1e9)
        out = self.out("fp16_resumed")
        p = self.train(out, *flags, "--stop-after-steps", "3")
        self.assertFails(p, r"interrupted at epoch 1, batch 3 \(step 3\)", status=130)
        p = self.train(out, *flags, "--resume", "--stop-after-steps", "10")
        self.assertFails(p, r"interrupted at epoch 2, batch 2 \(step 10\)", status=130)
        p = self.train(out, *flags, "--resume")
        self.assertOk(p)
        self.assertEqual(losses(out), reference)

    def test_cuda_device(self):
        p = self.train(self.out("cuda"), "--subset", "64", "--epochs", "1", "--device", "cuda")
        if "is not available" in p.stderr:  # a CPU-only build, or no GPU: the clear error, before any data is read
            self.assertFails(p, r"seqgrad train: error: train --device: cuda:0 is not available: ")
            self.assertNotIn("data:", p.stdout)
        else:  # a GPU: the tiny run trains on it
            self.assertOk(p)
            self.assertIn("device cuda:0", p.stdout)


# ---- eval --hyp --ref against sacreBLEU ---------------------------------------------------------

@unittest.skipIf(sacrebleu is None, "sacrebleu is not installed for this python3")
class EvalBleu(Base):
    def sacrebleu_line(self, hyp_path, ref_path):
        # read as sacreBLEU's command line does: newline="\n", each line rstrip()ped
        def read(path):
            with open(path, encoding="utf-8", newline="\n") as f:
                return [line.rstrip() for line in f]
        hyps, refs = read(hyp_path), [read(ref_path)]
        return f"{sacrebleu.corpus_bleu(hyps, refs)}\n{sacrebleu.corpus_chrf(hyps, refs)}"

    def check(self, name, hyps, refs, newline="\n"):
        hyp, ref = self.out(f"{name}.hyp"), self.out(f"{name}.ref")
        for path, lines in [(hyp, hyps), (ref, refs)]:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write("".join(l + newline for l in lines))
        p = run("eval", "--hyp", hyp, "--ref", ref)
        self.assertOk(p)
        self.assertEqual(p.stdout.strip(), self.sacrebleu_line(hyp, ref), name)

    def test_matches_sacrebleu(self):
        with open(os.path.join(DATA, "multi30k", "test2016.en"), encoding="utf-8") as f:
            refs = [l.rstrip("\n") for l in f]
        # a deterministic "system": drop every 4th word, swap neighbours in every 3rd sentence
        hyps = []
        for i, r in enumerate(refs):
            w = [x for j, x in enumerate(r.split(" ")) if j % 4 != 3]
            if i % 3 == 0 and len(w) > 2:
                w[0], w[1] = w[1], w[0]
            hyps.append(" ".join(w))
        self.check("multi30k", hyps, refs)
        self.check("identical", refs[:50], refs[:50])
        self.check("crlf", hyps[:100], refs[:100], newline="\r\n")
        self.check("edge", ["", "Hello , world!", "A &amp; B &quot;quoted&quot; 1,000.50 $5 -- well-known",
                            "Straße ÄÖÜ café — naïve « guillemets »", "tabs\tand  double  spaces ", "x"],
                   ["Nothing here", "Hello, world!", "A & B \"quoted\" 1,000.50 $5 - well-known",
                    "Straße äöü café — naive « guillemets »", "tabs and double spaces", "y"])

    def test_checkpoint_on_the_test_split(self):
        d = self.out("eval_copy")
        shutil.copytree(trained_checkpoint(), d)
        maps = os.path.join(d, "maps")
        p = run("eval", "--checkpoint", os.path.join(d, "best.safetensors"), "--data-dir", DATA, "--threads", "1",
                "--out", maps)
        self.assertOk(p)
        self.assertRegex(p.stdout, r"test: loss [\d.]+, ppl [\d.]+, sacreBLEU [\d.]+, chrF [\d.]+, BLEU [\d.]+ "
                                   r"\(tokenised, lower-cased\) \(greedy\)")
        self.assertTrue(os.path.exists(os.path.join(maps, "attention_test0.png")))
        sacrebleu = float(re.search(r"sacreBLEU ([\d.]+)", p.stdout).group(1))
        # --json: the same scores as one JSON object, every output, and nothing else on stdout
        p = run("eval", "--checkpoint", os.path.join(d, "best.safetensors"), "--data-dir", DATA, "--threads", "1",
                "--json")
        self.assertOk(p)
        result = json.loads(p.stdout)
        self.assertAlmostEqual(result["sacrebleu"], sacrebleu, places=2)
        self.assertEqual((len(result["outputs"]), result["test"]["pairs"], result["decoding"]["search"]),
                         (1000, 1000, "greedy"))
        self.assertIn("nrefs:1|case:mixed", result["signatures"]["sacrebleu"])
        p = run("eval", "--checkpoint", os.path.join(d, "best.safetensors"), "--data-dir", self.out("nowhere"))
        self.assertFails(p, r"data folder '.*nowhere' does not exist")

    def test_bad_files(self):
        a, b = self.out("a.txt"), self.out("b.txt")
        with open(a, "w") as f:
            f.write("one\ntwo\n")
        with open(b, "w") as f:
            f.write("one\n")
        self.assertFails(run("eval", "--hyp", a, "--ref", b), r"a.txt has 2 lines but .*b.txt has 1")
        self.assertFails(run("eval", "--hyp", a), r"--hyp and --ref go together", status=2)
        self.assertFails(run("eval", "--hyp", a, "--ref", self.out("missing.txt")), r"missing.txt")
        empty = self.out("empty.txt")
        open(empty, "w").close()
        self.assertFails(run("eval", "--hyp", empty, "--ref", empty), r"no sentences|empty")


# ---- compare ------------------------------------------------------------------------------------

class Compare(Base):
    def test_tiny_comparison(self):
        out = self.out("compare")
        p = run("compare", "--embed", "8", "--hidden", "8", "--subsets", "128,256", "--epochs", "1", "--valid-pairs", "40",
                "--attention", "additive,scaled_dot", "--timing-steps", "2", "--threads", "1", "--quiet",
                "--data-dir", DATA, "--out", out)
        self.assertOk(p)
        self.assertRegex(p.stdout, r"additive +128 ")
        self.assertRegex(p.stdout, r"scaled_dot +256 ")
        with open(os.path.join(out, "compare.json")) as f:
            report = json.load(f)
        runs = report["runs"]
        self.assertEqual([(r["kind"], r["train_pairs"]) for r in runs],
                         [("additive", 128), ("scaled_dot", 128), ("additive", 256), ("scaled_dot", 256)])
        for r in runs:
            self.assertEqual(len(r["epochs"]), 1)
            e = r["epochs"][0]
            self.assertGreater(r["train_ms_per_step"], 0)
            self.assertTrue(0 < e["attention_entropy_normalized"] <= 1.0 + 1e-9, e)
            self.assertLessEqual(e["attention_entropy"], e["attention_entropy_uniform"] + 1e-9)
        self.assertEqual([t["kind"] for t in report["timing"]], ["additive", "scaled_dot"])
        self.assertTrue(all(t["median_ms_per_step"] > 0 for t in report["timing"]))
        self.assertRegex(p.stdout, r"ms/step \(median\)")
        with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
            html = f.read()
        self.assertIn("<table>", html)
        self.assertIn("Time per step", html)
        # the same validation sentences under each kind, side by side
        section = html[html.index("Attention on validation sentence 1, 256 pairs"):]
        section = section[:section.index("</section>")]
        self.assertIn("additive (256 pairs)", section)
        self.assertIn("scaled_dot (256 pairs)", section)
        self.assertEqual(section.count("<svg"), 2)

    def test_architectures(self):
        # the GRU with additive attention beside the Transformer, on the same pairs, vocabularies and seed;
        # the model flags shape both (the Transformer's width is --hidden)
        out = self.out("compare_architectures")
        p = run("compare", "--architecture", "gru,transformer", "--embed", "16", "--hidden", "16", "--layers", "1",
                "--heads", "2", "--ffn-size", "24", "--subsets", "300", "--epochs", "1", "--valid-pairs", "30",
                "--test-pairs", "20", "--timing-steps", "2", "--threads", "1", "--quiet", "--data-dir", DATA,
                "--out", out)
        self.assertOk(p)
        self.assertRegex(p.stdout, r"transformer +300 ")
        self.assertRegex(p.stdout, r"test greedy +test beam 5 +greedy sent/s +beam 5 sent/s")
        with open(os.path.join(out, "compare.json")) as f:
            report = json.load(f)
        self.assertEqual(report["settings"]["kinds"], ["additive", "transformer"])  # additive alone by default
        self.assertEqual(report["settings"]["test_pairs"], 20)
        transformer_config = report["settings"]["transformer_config"]["model"]
        self.assertEqual((transformer_config["architecture"], transformer_config["tie_embeddings"]), ("transformer", False))
        runs = {r["kind"]: r for r in report["runs"]}
        self.assertEqual([(r["kind"], r["architecture"]) for r in report["runs"]],
                         [("additive", "gru"), ("transformer", "transformer")])
        gru, transformer = runs["additive"], runs["transformer"]
        self.assertEqual((gru["src_vocab"], gru["tgt_vocab"]), (transformer["src_vocab"], transformer["tgt_vocab"]))
        # the Transformer's parameters, counted from its shape: E = 16, FFN 24, one layer each side, untied
        # embeddings and output projection (no bias); per attention 4 E x E weights and 4 E biases, per
        # feed-forward E x F + F + F x E + E, per layer norm 2 E; pre-norm adds a final norm to each stack
        E, F, Vs, Vt = 16, 24, transformer["src_vocab"], transformer["tgt_vocab"]
        attention, ffn, norm = 4 * E * E + 4 * E, E * F + F + F * E + E, 2 * E
        encoder = attention + ffn + 2 * norm + norm
        decoder = 2 * attention + ffn + 3 * norm + norm
        self.assertEqual(transformer["parameters"], Vs * E + 2 * Vt * E + encoder + decoder)
        for r in report["runs"]:
            with self.subTest(model=r["kind"]):
                self.assertIsNone(r["stopped"])
                self.assertGreater(r["steps"], 0)
                self.assertGreater(r["train_seconds"], 0)
                self.assertGreater(r["train_tokens_per_s"], 0)
                e = r["epochs"][0]
                self.assertTrue(0 < e["attention_entropy_normalized"] <= 1.0 + 1e-9, e)
                self.assertLessEqual(e["attention_entropy"], e["attention_entropy_uniform"] + 1e-9)
                test = r["test"]
                self.assertEqual((test["pairs"], test["beam_size"]), (20, 5))
                for search in ("greedy", "beam"):
                    self.assertTrue(0 <= test[search]["sacrebleu"] <= 100, test)
                    self.assertTrue(0 <= test[search]["bleu_tokenized"] <= 100, test)
                    self.assertGreater(test[search]["sentences_per_s"], 0)
        self.assertEqual([t["kind"] for t in report["timing"]], ["additive", "transformer"])
        # per head (1 layer of 2): its entropy and its agreement with the GRU on the same teacher-forced rows,
        # in the table, the JSON and the report; no head is sharper than zero or broader than uniform
        heads = report["heads"]
        self.assertEqual([(h["layer"], h["head"], h["gru"], h["train_pairs"]) for h in heads],
                         [(0, 0, "additive", 300), (0, 1, "additive", 300)])
        uniform = transformer["epochs"][0]["attention_entropy_uniform"]
        for h in heads:
            self.assertTrue(0 < h["entropy"] <= uniform + 1e-6, h)
            self.assertTrue(0 < h["agreement_with_gru"] <= 1 + 1e-6, h)
            self.assertRegex(p.stdout, rf"layer 1 head {h['head'] + 1} +300 +additive +{h['entropy']:.3f} +"
                                       rf"{h['agreement_with_gru']:.3f}")
        with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
            html = f.read()
        self.assertIn("heads beside the GRU</h2>", html)
        self.assertIn("Training time and the test split", html)
        self.assertIn("transformer (300 pairs)", html)  # its attention heatmaps beside the GRU's

    def test_print_config(self):
        p = run("compare", "--preset", "d2l", "--epochs", "3", "--print-config", "--data-dir", DATA)
        self.assertOk(p)
        config = json.loads(p.stdout)
        # compare's own settings over the preset: its epochs, word vocabularies, no early stopping
        self.assertEqual((config["preset"], config["epochs"], config["vocab"], config["patience"]), ("d2l", 3, "word", 0))

    def test_bad_input(self):
        for args, pattern in [(["--attention", "cosine"], r"attention kind 'cosine'"),
                              (["--subsets", "0"], r"--subsets expects positive pair counts or 'all', got '0'"),
                              (["--subsets", "lots"], r"got 'lots'"),
                              (["--epochs", "0"], r"--epochs must be >= 1"),
                              (["--timing-steps", "-1"], r"--timing-steps must be >= 0"),
                              (["--test-pairs", "-1"], r"--test-pairs must be >= 0"),
                              (["--architecture", "lstm"], r"architecture 'lstm' is not one of: gru, transformer"),
                              (["--architecture", ","], r"--architecture is empty"),
                              # the Transformer's config is checked before the GRU trains
                              (["--architecture", "gru,transformer", "--hidden", "32"],
                               r"the Transformer \(--architecture transformer\): .*model.embed_size = 128 must equal "
                               r"model.hidden_size = 32"),
                              (["--architecture", "transformer", "--tie-embeddings"],
                               r"--tie-embeddings: compare's word vocabularies are one per language"),
                              (["--preset", "huge"], r"unknown preset 'huge'"),
                              (["--data-dir", self.out("no_such_dir")], r"data folder .* does not exist")]:
            status = 1 if args[0] == "--data-dir" else 2  # a missing folder is not a usage error
            self.assertFails(run("compare", "--threads", "1", "--data-dir", DATA, *args), r"seqgrad compare: error: .*"
                             + pattern, status=status)

# ---- command-line conventions (exit statuses, --version, typos, integer flags) ---------------

class Conventions(Base):
    def test_version_and_usage(self):
        p = run("--version")
        self.assertOk(p)
        self.assertRegex(p.stdout, r"^seqgrad \d+\.\d+\.\d+\n$")
        p = run()
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stdout, "")
        self.assertIn("usage: seqgrad <command>", p.stderr)
        self.assertOk(run("info", "--help"))
        self.assertFails(run("info", "--bogus"), r"unknown option --bogus", status=2)

    def test_did_you_mean(self):
        p = run("trian")
        self.assertFails(p, r"unknown command 'trian' \(did you mean train\?\)", status=2)
        self.assertEqual(p.stdout, "")  # usage goes to stderr with the error
        self.assertIn("commands:", p.stderr)
        self.assertFails(run("translate", "--chekpoint", "x"), r"unknown option --chekpoint \(did you mean "
                                                               r"--checkpoint\?\)\n\(see seqgrad translate --help\)",
                         status=2)
        self.assertNotIn("did you mean", run("translate", "--zzzzzzzz", "x").stderr)

    def test_usage_errors_exit_2_runtime_errors_1(self):
        self.assertFails(run("translate", "--beam", "0", "x"), r"--beam must be >= 1, got 0", status=2)
        self.assertFails(run("translate", "--checkpoint", self.out("nope.safetensors"), "x"), r"no checkpoint at",
                         status=1)

    def test_integer_flags_are_range_checked_before_narrowing(self):
        for value in ["2147483648", "4294967297", "99999999999999999999"]:
            self.assertFails(run("bench", "--repeats", value), rf"--repeats must be in \[1, 2147483647\], got {value}",
                             status=2)
        self.assertFails(run("bench", "--warmup", "-1"), r"--warmup must be in \[0, 2147483647\], got -1", status=2)
        self.assertFails(run("bench", "batching_default", "--batch-tokens", "-1"),
                         r"--batch-tokens must be >= 0, got -1", status=2)
        self.assertFails(run("translate", "--threads", "100000", "x"), r"--threads 100000 is more than 4 x the \d+ "
                                                                       r"cores of this machine \(at most \d+\)",
                         status=2)

    def test_same_language_and_dot_attention(self):
        common = [*TINY, "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", self.out("bad")]
        self.assertFails(run("train", *common, "--src", "de", "--tgt", "de"),
                         r"--tgt must differ from src_lang \(a translator needs two languages\), got de", status=2)
        self.assertFails(run("train", *common, "--attention", "dot"),
                         r"--attention dot: .* is scaled_dot .*seqgrad attention demo --attention dot", status=2)


# ---- translate: line by line, bad lines, n-best, the wrong language ----------------------------

class TranslateStream(Base):
    def setUp(self):
        self.ckpt = os.path.join(trained_checkpoint(), "best.safetensors")

    def translate(self, *args, stdin=None):
        return run("translate", "--checkpoint", self.ckpt, "--threads", "1", *args, stdin=stdin)

    def test_a_bad_line_does_not_end_the_run(self):
        lines = [b"ein mann .", b"ein hund .", b"zwei frauen .", "caf\u00e9 f\u00fcr".encode("latin-1"),
                 b"ein kind .", b"", b"eine katze ."]
        p = subprocess.run([SEQGRAD, "translate", "--checkpoint", self.ckpt, "--threads", "1"],
                           input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
        out, err = p.stdout.decode(), p.stderr.decode(errors="replace")  # the error quotes the bad bytes
        self.assertEqual(p.returncode, 1, err)
        outputs = out.split("\n")
        self.assertEqual(len(outputs), 8, out)  # 7 lines and the final newline
        self.assertEqual(outputs[3], "")
        self.assertEqual(outputs[5], "")
        self.assertTrue(all(outputs[i] for i in [0, 1, 2, 4, 6]), out)
        self.assertRegex(err, r"error: line 4: .*UTF-8")
        self.assertRegex(err, r"error: line 6: empty")

    def test_a_bad_line_does_not_end_a_json_run(self):
        # --json reports the line in its record (its bytes as U+FFFD) and translates the lines after it
        lines = [b"ein mann .", "caf\u00e9 f\u00fcr".encode("latin-1"), b"", b"eine katze ."]
        p = subprocess.run([SEQGRAD, "translate", "--checkpoint", self.ckpt, "--threads", "1", "--json"],
                           input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr.decode(errors="replace"))
        records = [json.loads(line) for line in p.stdout.decode().splitlines()]
        self.assertEqual([r["line"] for r in records], [1, 2, 3, 4])
        self.assertEqual(records[1]["src"], "caf\ufffd f\ufffdr")
        self.assertRegex(records[1]["error"], r"UTF-8")
        self.assertNotIn("translation", records[1])
        self.assertRegex(records[2]["error"], r"empty")
        self.assertTrue(records[0]["translation"] and records[3]["translation"])

    def test_lines_are_answered_before_stdin_ends(self):
        # an interactive user (or a coprocess) gets each translation before sending the next line
        with subprocess.Popen([SEQGRAD, "translate", "--checkpoint", self.ckpt, "--threads", "1"], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            try:
                for sentence in ["ein mann .", "ein hund ."]:
                    proc.stdin.write(sentence + "\n")
                    proc.stdin.flush()
                    ready, _, _ = select.select([proc.stdout], [], [], 60)
                    self.assertTrue(ready, f"no translation of '{sentence}' while stdin is still open")
                    self.assertTrue(proc.stdout.readline().strip())
                proc.stdin.close()
                self.assertEqual(proc.wait(timeout=60), 0)
            finally:
                proc.kill()

    def test_nbest(self):
        p = self.translate("--beam", "4", "--nbest", "3", "ein mann .", "zwei hunde .")
        self.assertOk(p)
        rows = [line.split("\t") for line in p.stdout.splitlines()]
        self.assertEqual([r[0] for r in rows], ["1", "1", "1", "2", "2", "2"], p.stdout)
        for sentence in (rows[:3], rows[3:]):
            scores = [float(r[1]) for r in sentence]
            self.assertEqual(scores, sorted(scores, reverse=True))
            self.assertTrue(all(s < 0 for s in scores))
            self.assertEqual(len({r[2] for r in sentence}), 3)  # three different hypotheses
        # the first of the n best is the --beam translation
        best = self.translate("--beam", "4", "ein mann .")
        self.assertEqual(best.stdout.strip(), rows[0][2])
        self.assertFails(self.translate("--nbest", "2", "ein mann ."), r"--nbest 2 needs a beam at least as wide",
                         status=2)

    def test_wrong_language_warning(self):
        p = self.translate("the quick brown fox jumps over the lazy dog")
        self.assertOk(p)
        self.assertRegex(p.stderr, r"warning: sentence 1: \d+ of its 9 words are unknown to this model, which "
                                   r"translates German \(de\) to English \(en\): is the input German\?")
        self.assertNotIn("warning: sentence 1", self.translate("ein mann .").stderr)

    def test_output_folder_errors(self):
        a_file = self.out("a_file")
        open(a_file, "w").close()
        self.assertFails(self.translate("--out", os.path.join(a_file, "maps"), "ein mann ."),
                         r"--out: cannot create the folder '.*a_file/maps'")
        self.assertFails(run("attention", "--checkpoint", self.ckpt, "--out", a_file, "ein mann ."),
                         r"--out: cannot create the folder '.*a_file'")

    def test_not_a_safetensors_file(self):
        path = self.out("notes.txt")
        with open(path, "w") as f:
            f.write("These are my notes, not a checkpoint.\n")
        for cmd in [["translate", "--checkpoint", path, "x"], ["eval", "--checkpoint", path], ["inspect", "--checkpoint", path]]:
            self.assertFails(run(*cmd), re.escape(path) + r" is not a safetensors checkpoint")


class AttentionReport(Base):
    def test_each_kind_shows_its_own_scores(self):
        for kind, formula in [("scaled_dot", "of scaled dot-product attention (d = 2H = 32)"),
                              ("hybrid", "The additive half&#39;s pre-softmax scores")]:  # HTML-escaped
            d = self.out(f"kind_{kind}")
            p = run("train", *TINY, "--attention", kind, "--subset", "64", "--epochs", "1", "--data-dir", DATA,
                    "--out", d + "/")
            self.assertOk(p)
            # the test heatmaps are titled with the sentence; the printed path has no "//"
            self.assertRegex(p.stdout, r"heatmaps: .*kind_%s/attention_test0\.\.4\.png" % kind)
            with open(os.path.join(d, "attention_test0.svg"), encoding="utf-8") as f:
                self.assertIn("<title>Ein Mann mit einem orangefarbenen Hut", f.read())
            out = self.out(f"attention_{kind}")
            p = run("attention", "--checkpoint", os.path.join(d, "best.safetensors"), "--threads", "1", "--out", out,
                    "ein zyxwvutsrq mann .")
            self.assertOk(p)
            self.assertTrue(os.path.getsize(os.path.join(out, "sentence1_energies.png")) > 0, kind)
            with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
                html = f.read()
            self.assertIn(formula, html)
            self.assertNotIn("of additive attention", html)
            self.assertIn("zyxwvutsrq (&lt;unk&gt;)", html)  # a source word the model saw as <unk>


# ---- translate: alignments and the JSON attention object (docs/outputs.md) ---------------------

REVERSAL_WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


def reversal_sentences(seed, count):
    """count sentences of 3 to 6 words drawn from REVERSAL_WORDS."""
    import random
    r = random.Random(seed)
    return [" ".join(r.choice(REVERSAL_WORDS) for _ in range(r.randint(3, 6))) for _ in range(count)]


def reversal_checkpoint():
    """A model trained to reverse sentences of 3 to 6 words (a few seconds): output t copies source
    word n - 1 - t, so its attention is anti-diagonal and its hard alignment is {i-(n-1-i)}. At lr
    0.003 it converges by epoch 3 whatever the float rounding; at 0.01 its loss spikes after
    epoch 2 and where it ends depends on the order a weight's gradient terms are summed in."""
    if not hasattr(reversal_checkpoint, "path"):
        d = os.path.join(Base.tmp, "reversal")
        os.makedirs(d, exist_ok=True)
        for split, seed, count in [("train", 0, 3000), ("valid", 1, 100)]:
            with open(os.path.join(d, split + ".tsv"), "w") as f:
                f.writelines(f"{s}\t{' '.join(reversed(s.split()))}\n" for s in reversal_sentences(seed, count))
        p = run("train", "--preset", "default", "--vocab", "word", "--min-freq", "1", "--embed", "32", "--hidden", "32",
                "--batch-size", "32", "--threads", "1", "--quiet", "--epochs", "6", "--dropout", "0",
                "--label-smoothing", "0", "--lr", "0.003", "--lr-step-size", "100", "--src", "src", "--tgt", "tgt",
                "--train-tsv", os.path.join(d, "train.tsv"), "--valid-tsv", os.path.join(d, "valid.tsv"),
                "--out", os.path.join(d, "run"), timeout=600)
        if p.returncode != 0:
            raise AssertionError(f"reversal training failed:\n{p.stdout}\n{p.stderr}")
        reversal_checkpoint.path = os.path.join(d, "run", "best.safetensors")
    return reversal_checkpoint.path


def entropy(row):
    return -sum(w * math.log(w) for w in row if w > 0)


def diagonal_distance(weights, finished=True):
    """docs/outputs.md's definition: the mean over output units t (no <eos> row) of |sum_s w_ts p_s - q_t|,
    w_t renormalised over the source units (no <eos> column), p_s = (s + 1/2)/S, q_t = (t + 1/2)/T."""
    rows = [row[:-1] for row in (weights[:-1] if finished else weights)]
    S, T = len(rows[0]), len(rows)
    distances = [abs(sum(w * (s + 0.5) / S for s, w in enumerate(row)) / sum(row) - (t + 0.5) / T)
                 for t, row in enumerate(rows) if sum(row) > 0]
    return sum(distances) / len(distances)


class TranslateAlignment(Base):
    def translate(self, ckpt, *args, stdin=None):
        return run("translate", "--checkpoint", ckpt, "--threads", "1", *args, stdin=stdin)

    def test_the_hard_alignment_of_a_reversal_is_the_anti_diagonal(self):
        sentences = reversal_sentences(2, 12)  # not the training sentences
        p = self.translate(reversal_checkpoint(), "--alignment", "hard", stdin="\n".join(sentences) + "\n")
        self.assertOk(p)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), len(sentences))
        right = 0
        for source, line in zip(sentences, lines):
            translation, alignment = line.split(" ||| ")
            n = len(source.split())
            right += translation == " ".join(reversed(source.split())) and \
                alignment == " ".join(f"{i}-{n - 1 - i}" for i in range(n))
        self.assertGreaterEqual(right, 11, p.stdout)

    def test_json_attention_of_a_reversal(self):
        sentences = reversal_sentences(3, 4)
        p = self.translate(reversal_checkpoint(), "--json", "--alignment", "soft", *sentences)
        self.assertOk(p)
        for source, line in zip(sentences, p.stdout.splitlines()):
            j = json.loads(line)
            words = source.split()
            n = len(words)
            self.assertEqual(j["src_tokens"], words)
            self.assertEqual(j["tgt_tokens"], words[::-1])
            self.assertTrue(j["finished"])
            self.assertEqual(len(j["token_log_probs"]), n + 1)  # the words and <eos>
            self.assertAlmostEqual(sum(j["token_log_probs"]), j["log_prob"], places=4)
            self.assertEqual(j["nbest"][0]["token_log_probs"], j["token_log_probs"])
            att = j["attention"]
            self.assertEqual(att["level"], "tokens")
            self.assertEqual(att["src"], words + ["<eos>"])
            self.assertEqual(att["tgt"], words[::-1] + ["<eos>"])
            weights = att["weights"]
            self.assertEqual([len(row) for row in weights], [n + 1] * (n + 1))
            for row in weights:
                self.assertAlmostEqual(sum(row), 1, places=4)
            # the diagnostics, recomputed here from the weights
            for got, row in zip(att["entropy"], weights):
                self.assertAlmostEqual(got, entropy(row), places=5)
            self.assertAlmostEqual(att["mean_entropy"], sum(att["entropy"]) / (n + 1), places=6)
            for s in range(n + 1):
                self.assertAlmostEqual(att["coverage"][s], sum(row[s] for row in weights), places=5)
            self.assertAlmostEqual(att["diagonal_distance"], diagonal_distance(weights), places=5)
            # near a reversal's exact distance, the mean of |n - 1 - 2t|/n
            self.assertAlmostEqual(att["diagonal_distance"], sum(abs(n - 1 - 2 * t) for t in range(n)) / n / n,
                                   delta=0.05)
            self.assertNotIn("alignment", att)

    def test_text_and_json_alignments_agree(self):
        ckpt = os.path.join(trained_checkpoint(), "best.safetensors")
        sentences = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee .", "eine frau ."]
        hard = self.translate(ckpt, "--alignment", "hard", "--max-len", "8", *sentences)
        soft = self.translate(ckpt, "--alignment", "soft", "--max-len", "8", *sentences)
        both = self.translate(ckpt, "--json", "--alignment", "soft", "--max-len", "8", *sentences)
        pairs = self.translate(ckpt, "--json", "--alignment", "hard", "--max-len", "8", *sentences)
        for p in (hard, soft, both, pairs):
            self.assertOk(p)
        for h, s, line, pline in zip(hard.stdout.splitlines(), soft.stdout.splitlines(), both.stdout.splitlines(),
                                     pairs.stdout.splitlines()):
            j, att = json.loads(line), json.loads(line)["attention"]
            translation, alignment = h.split(" ||| ")
            self.assertEqual(translation, j["translation"])
            # hard: each output token (no <eos> row) with the source token it weighs most (no <eos> column),
            # source-target pairs sorted by source
            rows = att["weights"][:-1] if j["finished"] else att["weights"]
            expected = sorted((max(range(len(row) - 1), key=lambda c: (row[c], -c)), t) for t, row in enumerate(rows))
            self.assertEqual(alignment, " ".join(f"{a}-{b}" for a, b in expected))
            self.assertEqual(json.loads(pline)["attention"]["alignment"], [list(pair) for pair in expected])
            # soft: every row of weights, "," within a row, " " between rows
            soft_rows = [[float(w) for w in group.split(",")] for group in s.split(" ||| ")[1].split(" ")]
            self.assertEqual(len(soft_rows), len(att["weights"]))
            for got, row in zip(soft_rows, att["weights"]):
                self.assertEqual(got, [round(w, 4) for w in row])
        # n-best lines each carry their own alignment
        p = self.translate(ckpt, "--beam", "3", "--nbest", "2", "--alignment", "hard", "--max-len", "5", "eine frau .")
        self.assertOk(p)
        self.assertEqual([re.fullmatch(r"1\t-[\d.]+\t.* \|\|\| (\d+-\d+ ?)*", l) is not None
                          for l in p.stdout.splitlines()], [True, True], p.stdout)
        # --merge-pieces: words (a word vocabulary's tokens are words already)
        p = self.translate(ckpt, "--json", "--merge-pieces", "--alignment", "hard", "eine frau .")
        self.assertOk(p)
        j = json.loads(p.stdout)
        self.assertEqual(j["attention"]["level"], "words")
        self.assertEqual(j["attention"]["src"], ["eine", "frau", ".", "<eos>"])

    def test_bad_alignment_values(self):
        ckpt = os.path.join(trained_checkpoint(), "best.safetensors")
        for value in ["bogus", "HARD", "0.5"]:
            with self.subTest(value=value):
                self.assertFails(self.translate(ckpt, "--alignment", value, "ein mann ."),
                                 rf"--alignment expects hard or soft, got '{re.escape(value)}'", status=2)
        self.assertFails(self.translate(ckpt, "--alignment", "", "ein mann ."), r"--alignment needs a value", status=2)
        self.assertFails(self.translate(ckpt, "ein mann .", "--alignment"), r"--alignment needs a value", status=2)
        # refused before the checkpoint loads
        self.assertFails(run("translate", "--checkpoint", self.out("nope.safetensors"), "--alignment", "x", "a"),
                         r"--alignment expects hard or soft", status=2)


# ---- inspect and eval away from the training folder -----------------------------------------

class Inspect(Base):
    def test_inspect(self):
        ckpt = os.path.join(trained_checkpoint(), "best.safetensors")
        p = run("inspect", "--checkpoint", ckpt)
        self.assertOk(p)
        for pattern in [r"preset: default", r"languages: de -> en \(multi30k corpus\)",
                        r"vocabularies: \d+ source tokens, \d+ target tokens",
                        r"model: gru \(embed 16, hidden 16, layers 1, attention size 0, dropout [\d.]+, attention additive",
                        r"; \d+ parameters", r"weights: float32 \(\d+ tensors", r"256 training pairs",
                        r"training: epoch \d of 2", r"epochs \(.*metrics.jsonl\)", r"\n +2 +[\d.]+ +[\d.]+"]:
            self.assertRegex(p.stdout, pattern)
        self.assertRegex(p.stdout, r"data folder /")  # stored absolute
        # --checkpoint's default, as in translate and eval; the old positional spelling still works
        self.assertFails(run("inspect"), r"no checkpoint at runs/default/best.safetensors", status=1)
        old = run("inspect", ckpt)
        self.assertOk(old)
        self.assertEqual(old.stdout, p.stdout)
        self.assertIn("warning: giving the checkpoint without --checkpoint is deprecated", old.stderr)
        self.assertFails(run("inspect", "--checkpoint", ckpt, ckpt), r"--checkpoint given twice", status=2)

    def test_inspect_shows_the_fields_of_the_checkpoints_architecture(self):
        # the model table says which architecture reads a field: a Transformer's checkpoint has no GRU attention
        out = self.out("inspect_transformer")
        p = run("train", *TINY, "--architecture", "transformer", "--heads", "2", "--layers", "1", "--ffn-size", "24",
                "--subset", "64", "--epochs", "1", "--data-dir", DATA, "--out", out)
        self.assertOk(p)
        p = run("inspect", "--checkpoint", os.path.join(out, "best.safetensors"))
        self.assertOk(p)
        self.assertRegex(p.stdout, r"model: transformer \(embed 16, hidden 16, layers 1, dropout [\d.]+, heads 2, "
                                   r"ffn size 24, norm first yes, tie embeddings no, positional sinusoidal\); \d+ parameters")
        listed = set(re.findall(r"^  (model\.\w+) = ", p.stdout, re.M))
        self.assertTrue({"model.heads", "model.ffn_size", "model.hidden_size"} <= listed, listed)
        self.assertFalse({"model.attention", "model.attention_size", "model.deep_output"} & listed, listed)

    def test_eval_from_another_folder_reads_only_the_test_split(self):
        # a checkpoint whose data folder is relative and absent here: the error names --data-dir; a
        # folder holding only the test split is enough for eval
        header, data = read_safetensors(os.path.join(trained_checkpoint(), "best.safetensors"))
        meta = header["__metadata__"]
        del meta["seqgrad.crc32"]  # an edited (older) checkpoint
        config = json.loads(meta["config"])
        config["data_dir"] = "mydata"
        meta["config"] = json.dumps(config)
        ckpt = self.out("relative/best.safetensors")
        os.makedirs(os.path.dirname(ckpt), exist_ok=True)
        write_safetensors(ckpt, header, data)
        p = subprocess.run([SEQGRAD, "eval", "--checkpoint", ckpt, "--threads", "1", "--allow-missing-checksum"],
                           cwd=Base.tmp,
                           capture_output=True, text=True, timeout=300)
        self.assertFails(p, r"the data folder 'mydata' that .* was trained on does not exist here.*--data-dir")
        test_only = self.out("test_only")
        os.makedirs(os.path.join(test_only, "multi30k"), exist_ok=True)
        for lang in ["de", "en"]:
            shutil.copy(os.path.join(DATA, "multi30k", f"test2016.{lang}"), os.path.join(test_only, "multi30k"))
        p = subprocess.run([SEQGRAD, "eval", "--checkpoint", ckpt, "--threads", "1", "--data-dir", test_only,
                            "--allow-missing-checksum"],
                           cwd=Base.tmp, capture_output=True, text=True, timeout=300)
        self.assertOk(p)
        self.assertRegex(p.stdout, r"test: loss [\d.]+")


def program_and_data(script):
    """(the seqgrad program, the data folder, unittest's arguments) from a CLI suite's command line:
    SCRIPT PATH/TO/seqgrad [DATA_DIR] [unittest options]."""
    argv = sys.argv[1:]
    if not argv or argv[0].startswith("-"):
        sys.exit(f"usage: {script} PATH/TO/seqgrad [DATA_DIR] [unittest options]")
    program = os.path.abspath(argv.pop(0))
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.abspath(argv.pop(0)) if argv and not argv[0].startswith("-") else os.path.join(here, "..", "data")
    return program, data, argv


def main():
    global SEQGRAD, DATA
    SEQGRAD, DATA, argv = program_and_data("test_tools_cli.py")
    try:
        unittest.main(argv=[sys.argv[0], *argv])
    finally:
        if Base.tmp and os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(Base.tmp, ignore_errors=True)


# ---- subword vocabularies ----------------------------------------------------------------------

class Subword(Base):
    """--vocab unigram:N end to end: the SentencePiece model travels inside the checkpoint; output is
    cased, detokenised text; heatmaps label pieces or, with --merge-pieces, words."""

    def trained(self):
        if not hasattr(Subword, "dir"):
            d = self.out("subword")
            p = run("train", "--preset", "default", "--vocab", "unigram:300", "--embed", "16", "--hidden", "16",
                    "--batch-size", "32", "--threads", "1", "--quiet", "--subset", "256", "--epochs", "1",
                    "--data-dir", DATA, "--out", d, timeout=600)
            if "no SentencePiece support" in p.stderr:
                self.skipTest("this build has no SentencePiece support")
            self.assertOk(p)
            Subword.dir = d
        return Subword.dir

    def test_translate_eval_attention_inspect(self):
        ckpt = os.path.join(self.trained(), "best.safetensors")
        p = run("translate", "--checkpoint", ckpt, "--threads", "1", "Ein Hund läuft im Schnee.")
        self.assertOk(p)
        self.assertNotIn("\u2581", p.stdout)  # detokenised: no "▁" word marks
        p = run("inspect", "--checkpoint", ckpt)
        self.assertOk(p)
        self.assertRegex(p.stdout, r"vocabularies: SentencePiece unigram:300 \(one model per language\): 300 source "
                                   r"pieces, 300 target pieces")
        for merge in ([], ["--merge-pieces"]):
            out = self.out("subword_attention" + "".join(merge))
            p = run("attention", "--checkpoint", ckpt, "--threads", "1", "--out", out, *merge, "Ein Hund läuft.")
            self.assertOk(p)
            with open(os.path.join(out, "sentence1.svg"), encoding="utf-8") as f:
                svg = f.read()
            # pieces: "▁Ein" labels; merged: "Ein" and the title says so
            self.assertEqual("pieces merged into words" in svg, bool(merge))
            self.assertEqual("\u2581Ein" in svg, not merge)

    def test_word_level_attention(self):
        # translate --merge-pieces: the word matrix is the piece matrix with each word's source columns summed
        # and its output rows averaged; a word starts at a piece beginning with "▁", <eos> is a word of its own
        ckpt = os.path.join(self.trained(), "best.safetensors")
        args = ["translate", "--checkpoint", ckpt, "--threads", "1", "--json", "--alignment", "soft", "--max-len", "8",
                "Ein Hund läuft im Schnee."]
        pieces, words = (json.loads(run(*args, *merge).stdout)["attention"] for merge in ([], ["--merge-pieces"]))

        def word_of(labels):
            subword, index, previous_special = any(l.startswith("\u2581") for l in labels), [], False
            for label in labels:
                special = len(label) > 2 and label[0] == "<" and label[-1] == ">"
                starts = not index or label.startswith("\u2581") or special or previous_special or not subword
                index.append(index[-1] + starts if index else 0)
                previous_special = special
            return index

        cols, rows = word_of(pieces["src"]), word_of(pieces["tgt"])
        self.assertEqual(words["level"], "words")
        self.assertEqual(len(words["src"]), cols[-1] + 1)
        self.assertNotIn("\u2581", "".join(words["src"]))
        expected = [[0.0] * len(words["src"]) for _ in words["tgt"]]
        for r, row in enumerate(pieces["weights"]):
            for c, w in enumerate(row):
                expected[rows[r]][cols[c]] += w / rows.count(rows[r])
        for got, want in zip(words["weights"], expected):
            for a, b in zip(got, want):
                self.assertAlmostEqual(a, b, places=5)

    def test_a_vocabulary_larger_than_the_text_is_refused_before_training(self):
        p = run("train", "--preset", "default", "--vocab", "unigram:8000", "--subset", "64", "--threads", "1",
                "--quiet", "--data-dir", DATA, "--out", self.out("subword_too_big"))
        if "no SentencePiece support" in p.stderr:
            self.skipTest("this build has no SentencePiece support")
        self.assertFails(p, r"subword vocabulary unigram:8000: the training text supports at most \d+ pieces")
        self.assertFalse(os.path.exists(os.path.join(self.out("subword_too_big"), "last.safetensors")))

    def test_bad_vocab_flags(self):
        common = ["train", "--preset", "default", "--subset", "64", "--data-dir", DATA, "--out", self.out("bad")]
        self.assertFails(run(*common, "--vocab", "wordpiece:100"), r"--vocab expected unigram:SIZE, bpe:SIZE or word \(e.g. unigram:8000\), got wordpiece:100",
                         status=2)
        self.assertFails(run(*common, "--vocab", "word", "--joint-vocab"), r"--joint-vocab shares one subword model .* it needs vocab unigram:N or bpe:N", status=2)


if __name__ == "__main__":
    main()
