#!/usr/bin/python3
"""End-to-end tests of `seqgrad train`'s run folder and training loop (models/seq2seq/trainer.h):
run protection (--resume / --force), the folder lock, stale temporary files, progress and logs
without a terminal, the validation of a resumed train state, a loss that explodes while staying
finite, `bench --json` into a missing folder, and training on the user's own files (--train,
--valid, --test and their -tsv forms, streamed through --shuffle-buffer) with every bad-input error
raised before training starts.

    /usr/bin/python3 tests/test_tools_train.py BUILD/tools/seqgrad [DATA_DIR] [-v] [-k PATTERN]

Registered in tests/meson.build (suite 'tools_train'). Every run is tiny (E = H = 16, 256 pairs, one
thread). Crafted checkpoints get a recomputed CRC (nn/checkpoint.cpp's checksum, written again
below), so they are read as genuine files whose train state is bad.
"""
import base64
import fcntl
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tools_cli import checksum, program_and_data, read_safetensors, write_safetensors  # noqa: E402

SEQGRAD = None
DATA = None
TINY = ["--preset", "default", "--vocab", "word", "--embed", "16", "--hidden", "16", "--batch-size", "32", "--threads", "1",
        "--subset", "256"]
LOSS_KEYS = ["epoch", "step", "train_loss", "valid_loss", "valid_sacrebleu", "valid_chrf", "valid_bleu_tokenized"]


def run(*args, timeout=180):
    return subprocess.run([SEQGRAD, *args], capture_output=True, text=True, timeout=timeout)


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_with_train_state(path, state):
    """Rewrites the checkpoint at path with another train_state (and a matching checksum)."""
    header, data = read_safetensors(path)
    header["__metadata__"]["train_state"] = json.dumps(state)
    header["__metadata__"]["seqgrad.crc32"] = checksum(header, data)
    write_safetensors(path, header, data)


class Base(unittest.TestCase):
    maxDiff = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        if Base.tmp is None:
            Base.tmp = tempfile.mkdtemp(prefix="seqgrad_train_")

    def out(self, name):
        return os.path.join(Base.tmp, name)

    def train(self, out, *extra, quiet=True):
        return run("train", *TINY, *(["--quiet"] if quiet else []), "--data-dir", DATA, "--out", out, *extra)

    def assertFails(self, proc, pattern, status=1):
        msg = f"\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
        self.assertEqual(proc.returncode, status, msg)
        self.assertRegex(proc.stderr, pattern, msg)
        self.assertNotIn("internal error", proc.stderr, msg)

    def assertOk(self, proc):
        self.assertEqual(proc.returncode, 0, f"\nstdout: {proc.stdout[-3000:]}\nstderr: {proc.stderr[-3000:]}")


def reference_run():
    """A 1-epoch run shared by the tests that need a finished run folder."""
    if not hasattr(reference_run, "dir"):
        d = os.path.join(Base.tmp, "reference")
        p = run("train", *TINY, "--quiet", "--epochs", "1", "--data-dir", DATA, "--out", d)
        if p.returncode != 0:
            raise AssertionError(f"reference training failed:\n{p.stdout}\n{p.stderr}")
        reference_run.dir = d
    return reference_run.dir


# ---- the run folder ----------------------------------------------------------------------------

class RunFolder(Base):
    def test_a_second_run_is_refused_without_resume_or_force(self):
        out = self.out("again")
        shutil.copytree(reference_run(), out)
        before = os.path.getmtime(os.path.join(out, "best.safetensors"))
        p = self.train(out, "--epochs", "1")
        self.assertFails(p, r"the run folder .*again already holds a run \(last.safetensors, best.safetensors, "
                            r"metrics.jsonl\); pass --resume to continue it, --force to delete it and start over")
        self.assertEqual(os.path.getmtime(os.path.join(out, "best.safetensors")), before)  # untouched
        self.assertFails(self.train(out, "--resume", "--force"), r"--resume and --force exclude each other", status=2)

    def test_force_starts_over(self):
        out = self.out("forced")
        shutil.copytree(reference_run(), out)
        with open(os.path.join(out, "metrics.jsonl"), "a") as f:
            f.write(json.dumps({"epoch": 2, "train_loss": 1.0}) + "\n")  # a line the new run must not keep
        p = self.train(out, "--epochs", "1", "--force")
        self.assertOk(p)
        self.assertIn("--force: deleted the previous run's checkpoints and metrics", p.stdout)
        def losses(d):
            return [{k: m[k] for k in LOSS_KEYS} for m in read_metrics(os.path.join(d, "metrics.jsonl"))]
        self.assertEqual(losses(out), losses(reference_run()))  # the same fresh run, the old lines gone

    def test_a_folder_in_use_is_refused_with_the_holders_pid(self):
        out = self.out("locked")
        os.makedirs(out)
        with open(os.path.join(out, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running training holds it
            lock.write(str(os.getpid()))
            lock.flush()
            p = self.train(out, "--epochs", "1")
            self.assertFails(p, rf"the run folder .*locked is in use by another training \(pid {os.getpid()}\)")
            self.assertFails(self.train(out, "--resume"), r"no checkpoint at")  # nothing there to resume
        # released (as when its process ends, even by kill -9): the stale .lock file blocks nothing
        self.assertOk(self.train(out, "--epochs", "1"))

    def test_two_concurrent_trainings_are_refused(self):
        out = self.out("concurrent")
        first = subprocess.Popen([SEQGRAD, "train", *TINY, "--epochs", "3", "--data-dir", DATA,
                                  "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for line in first.stdout:  # the model line comes after the lock is taken
                if line.startswith("model:"):
                    break
            p = self.train(out, "--epochs", "1", "--force")
            self.assertFails(p, rf"is in use by another training \(pid {first.pid}\)")
        finally:
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=120)

    def test_stale_temporaries_are_removed(self):
        out = self.out("stale")
        shutil.copytree(reference_run(), out)
        stale = [".last.safetensors.tmp.4242.0", ".best.safetensors.tmp.4242.3", ".metrics.jsonl.tmp.77.1"]
        for name in stale:
            with open(os.path.join(out, name), "wb") as f:
                f.write(b"torn")
        with open(os.path.join(out, "notes.tmp.txt"), "w") as f:  # not ours: kept
            f.write("mine")
        p = self.train(out, "--resume", "--epochs", "2")
        self.assertOk(p)
        self.assertIn("removed 3 temporary file(s) left in", p.stdout)
        self.assertEqual(sorted(n for n in os.listdir(out) if ".tmp." in n), ["notes.tmp.txt"])


# ---- one validation of the training flags -------------------------------------------------------

class Flags(Base):
    def test_train_and_compare_validate_alike(self):
        # tools/train_flags.cpp checks the flags both commands take, with the same messages
        for flag, value, pattern in [("--lr", "-1", r"--lr must be > 0, got -1"),
                                     ("--lr", "inf", r"--lr expects a finite number, got 'inf'"),
                                     ("--dropout", "1.5", r"--dropout must be in \[0, 1\), got 1.5"),
                                     ("--hidden", "0", r"--hidden must be in \[1, 1048576\], got 0"),
                                     ("--batch-size", "0", r"--batch-size must be in \[1, 1048576\], got 0"),
                                     ("--truncate", "0", r"--truncate must be in \[1, 1048576\], got 0"),
                                     ("--epochs", "0", r"--epochs must be >= 1, got 0"),
                                     ("--seed", "-1", r"--seed must be an integer >= 0, got -1")]:
            for command in ["train", "compare"]:
                with self.subTest(command=command, flag=flag, value=value):
                    p = run(command, "--embed", "16", "--layers", "1", flag, value, "--threads", "1",
                            "--data-dir", DATA, "--out", self.out("flags"))
                    self.assertFails(p, rf"seqgrad {command}: error: " + pattern, status=2)  # a usage error


    def test_run_flags_name_the_flag_and_range(self):
        # early stopping, validation cadence, checkpoints, accumulation, initial weights, vocabularies
        for flag, value, pattern in [("--patience", "-1", r"--patience must be >= 0, got -1"),
                                     ("--valid-every", "-5", r"--valid-every must be >= 0, got -5"),
                                     ("--early-stopping-metric", "bleu",
                                      r"--early-stopping-metric must be one of: sacrebleu, chrf, loss, got bleu"),
                                     ("--keep-checkpoints", "-1", r"--keep-checkpoints must be in \[0, 1000\], got -1"),
                                     ("--accum-steps", "0", r"--accum-steps must be in \[1, 4096\], got 0"),
                                     ("--accum-steps", "x", r"--accum-steps expects an integer, got 'x'"),
                                     ("--batch-tokens", "-1", r"--batch-tokens must be >= 0, got -1"),
                                     ("--lr-schedule", "noam", r"--lr-schedule must be one of: step, inverse_sqrt, "
                                                               r"got noam"),
                                     ("--warmup-updates", "-1", r"--warmup-updates must be >= 0, got -1"),
                                     ("--warmup-updates", "100", r"--warmup-updates needs lr_schedule inverse_sqrt "
                                                                 r"\(the step schedule has no warmup: 0 there\), got 100"),
                                     ("--vocab", "spm:", r"--vocab must name a SentencePiece model file after spm:, "
                                                         r"got spm:")]:
            with self.subTest(flag=flag, value=value):
                p = run("train", *TINY, flag, value, "--data-dir", DATA, "--out", self.out("flags"))
                self.assertFails(p, r"seqgrad train: error: " + pattern, status=2)
        # the files they name are read when the run starts: a missing one is a file error naming the field
        p = self.train(self.out("no_init"), "--init-from", self.out("nope.safetensors"))
        self.assertFails(p, r"config field init_from: no checkpoint at .*nope.safetensors")
        p = self.train(self.out("no_spm"), "--vocab", "spm:" + self.out("nope.model"))
        self.assertFails(p, r"config field vocab = spm:.*nope.model: no SentencePiece model file at")
        p = self.train(self.out("bad_spm"), "--vocab", "spm:" + write(self.out("bad.model"), "not a model"))
        self.assertFails(p, r"config field vocab = spm:.*bad.model: .*does not load")


# ---- the config table: --print-config, --config, and every field in help, JSON and inspect -------

def flatten(config, prefix=""):
    """{"model": {"hidden_size": 16}} -> {"model.hidden_size": 16}; files.* stay objects."""
    out = {}
    for key, value in config.items():
        name = prefix + key
        if isinstance(value, dict) and key in ("model", "files"):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


# Fields that no flag sets: chosen by the data flags (corpus, files.*) or --preset, or derived from
# the vocabularies.
NO_FLAG = {"preset", "corpus", "model.src_vocab", "model.tgt_vocab", "model.pad_id"}


class ConfigTable(Base):
    def print_config(self, *args):
        p = run("train", *args, "--print-config", "--data-dir", DATA)
        self.assertOk(p)
        return json.loads(p.stdout)

    def test_print_config_round_trips_through_config(self):
        for preset in ["default", "seed", "d2l", "tiny"]:
            with self.subTest(preset=preset):
                config = self.print_config("--preset", preset, "--lr", "0.0125", "--no-deep-output")
                self.assertEqual((config["preset"], config["lr"], config["model"]["deep_output"]),
                                 (preset, 0.0125, False))
                path = self.out(f"{preset}.json")
                write(path, json.dumps(config))
                self.assertEqual(self.print_config("--config", path), config)
                # flags override the file; --preset replaces the file's preset
                self.assertEqual(self.print_config("--config", path, "--epochs", "3")["epochs"], 3)

    def test_a_partial_config_file_starts_from_its_preset(self):
        path = self.out("partial.json")
        write(path, json.dumps({"preset": "d2l", "model": {"hidden_size": 24}, "lr_step_size": 3}))
        self.assertFails(run("train", "--config", path, "--print-config"),
                         r"config file .*partial.json: config field lr_step_size is not a field of the translator's "
                         r"config \(did you mean step_size\? --lr-step-size sets it\)", status=2)
        write(path, json.dumps({"preset": "d2l", "model": {"hidden_size": 24}, "step_size": 3}))
        config = self.print_config("--config", path)
        d2l = self.print_config("--preset", "d2l")
        self.assertEqual({k: v for k, v in flatten(config).items() if flatten(d2l)[k] != v},
                         {"model.hidden_size": 24, "step_size": 3})
        write(path, json.dumps({"preset": "d2l", "model": {"dropout": "high"}}))
        self.assertFails(run("train", "--config", path, "--print-config"),
                         r'config field model.dropout = "high" must be a number', status=2)

    def test_every_field_is_in_help_json_and_inspect(self):
        # one table drives them all: a field added to it shows up in each of these without more code
        fields = flatten(self.print_config("--preset", "tiny"))
        help_text = run("train", "--help").stdout
        for key in fields:
            with self.subTest(key=key):
                flag_documented = f"config key {key})" in help_text
                self.assertEqual(flag_documented, key not in NO_FLAG and not key.startswith("files."), key)
        p = run("inspect", "--checkpoint", os.path.join(reference_run(), "last.safetensors"))
        self.assertOk(p)
        listed = dict(re.findall(r"^  ([\w.]+) = (.*)$", p.stdout, re.M))
        # a GRU's checkpoint lists the GRU's fields: the model table leaves out the Transformer's
        transformer_only = {"model.heads", "model.ffn_size", "model.norm_first", "model.tie_embeddings",
                            "model.positional"}
        self.assertEqual(set(listed), set(flatten(self.print_config(*TINY, "--epochs", "1"))) - transformer_only)
        self.assertEqual(listed["lr"], "0.003")

    def test_resume_refuses_a_changed_field_and_a_config_file(self):
        d = reference_run()
        self.assertFails(run("train", "--resume", "--out", d, "--lr", "0.5", "--data-dir", DATA),
                         r"cannot resume: .* was trained with --lr 0.003, not 0.5", status=2)
        self.assertFails(run("train", "--resume", "--out", d, "--config", self.out("x.json")),
                         r"cannot resume with --config", status=2)
        # a finished run says so instead of training nothing silently
        p = run("train", "--resume", "--out", d, "--data-dir", DATA, "--quiet", "--threads", "1")
        self.assertOk(p)
        self.assertIn("has finished its 1 epoch(s)", p.stdout)


# ---- the user's own corpus: --train / --valid / --test ------------------------------------------

# not --quiet: the tests read the data and model lines
MY = ["--preset", "default", "--vocab", "word", "--embed", "16", "--hidden", "16", "--batch-size", "32", "--threads", "1"]


def open_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.readlines()


def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


class OwnCorpus(Base):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        d = os.path.join(Base.tmp, "own")
        os.makedirs(d, exist_ok=True)
        m30k = os.path.join(DATA, "multi30k")
        cls.files = {}
        for split, name, n in [("train", "train", 600), ("valid", "val", 100), ("test", "test2016", 50)]:
            for lang in ["de", "en"]:
                with open(os.path.join(m30k, f"{name}.{lang}"), encoding="utf-8") as f:
                    lines = [next(f) for _ in range(n)]
                cls.files[split, lang] = write(os.path.join(d, f"{split}.{lang}"), "".join(lines))
        src, tgt = ([line.rstrip("\n") for line in open_lines(cls.files["train", lang])] for lang in ["de", "en"])
        cls.files["train", "tsv"] = write(os.path.join(d, "train.tsv"), "".join(f"{a}\t{b}\n" for a, b in zip(src, tgt)))

    def split(self, split):
        return [f"--{split}", self.files[split, "de"], self.files[split, "en"]]

    def test_train_eval_inspect_and_resume_on_files(self):
        out = self.out("own_run")
        p = run("train", *MY, *self.split("train"), *self.split("valid"), *self.split("test"), "--src", "de",
                "--tgt", "en", "--epochs", "2", "--shuffle-buffer", "256", "--out", out)
        self.assertOk(p)
        self.assertIn("600 train, 100 valid, 50 test pairs", p.stdout)
        self.assertRegex(p.stdout, r"epoch 2: .*sacreBLEU [\d.]+, chrF [\d.]+, BLEU [\d.]+ \(tokenised, lower-cased\)")
        self.assertRegex(p.stdout, r"test: loss [\d.]+, ppl [\d.]+, sacreBLEU [\d.]+, chrF [\d.]+, BLEU [\d.]+")
        metrics = read_metrics(os.path.join(out, "metrics.jsonl"))
        self.assertEqual([m["epoch"] for m in metrics], [1, 2])
        best = os.path.join(out, "best.safetensors")
        # the checkpoint says what it was trained on, with absolute paths
        p = run("inspect", "--checkpoint", best)
        self.assertOk(p)
        self.assertIn(f"train {self.files['train', 'de']} and {self.files['train', 'en']}", p.stdout)
        self.assertIn("shuffle buffer 256 pairs", p.stdout)
        # eval finds its test split from any folder, or takes another with --test
        p = subprocess.run([SEQGRAD, "eval", "--checkpoint", best, "--threads", "1"], capture_output=True, text=True,
                           timeout=120, cwd="/")
        self.assertOk(p)
        self.assertIn(f"test: 50 pairs from {self.files['test', 'de']}", p.stdout)
        p = run("eval", "--checkpoint", best, "--threads", "1", "--test", *self.split("valid")[1:])
        self.assertOk(p)
        self.assertIn("test: 100 pairs from", p.stdout)
        # the TSV form of the same pairs scores the same; both forms at once are a usage error
        p_tsv = run("eval", "--checkpoint", best, "--threads", "1", "--test-tsv", self.files["train", "tsv"])
        p_aligned = run("eval", "--checkpoint", best, "--threads", "1", "--test", *self.split("train")[1:])
        self.assertOk(p_tsv)
        self.assertOk(p_aligned)
        scores = lambda out: re.search(r"test: loss .*", out).group(0)
        self.assertEqual(scores(p_tsv.stdout), scores(p_aligned.stdout))
        self.assertFails(run("eval", "--checkpoint", best, "--test", *self.split("valid")[1:], "--test-tsv",
                             self.files["train", "tsv"]), r"--test and --test-tsv exclude each other", status=2)
        # 600 pairs in buffers of 256 (chunks of 8, 8 and 3 batches, 19 an epoch): stopped past the first chunk of
        # epoch 2 and resumed, the run ends with the same metrics
        cut = self.out("own_cut")
        base = [*MY, *self.split("train"), *self.split("valid"), *self.split("test"), "--src", "de", "--tgt", "en",
                "--epochs", "2", "--shuffle-buffer", "256", "--out", cut]
        self.assertFails(run("train", *base, "--stop-after-steps", "31"), r"interrupted at epoch 2, batch 12", status=130)
        self.assertOk(run("train", "--resume", "--out", cut, "--threads", "1", "--quiet"))
        resumed = read_metrics(os.path.join(cut, "metrics.jsonl"))
        self.assertEqual([{k: m[k] for k in LOSS_KEYS} for m in resumed], [{k: m[k] for k in LOSS_KEYS} for m in metrics])

    def test_tsv_form_trains_as_the_aligned_files(self):
        a, b = self.out("own_aligned"), self.out("own_tsv")
        p = run("train", *MY, *self.split("train"), *self.split("valid"), "--epochs", "1", "--out", a)
        self.assertOk(p)
        self.assertIn("test: no test split", p.stdout)
        self.assertIn("src->tgt", p.stdout)  # no --src/--tgt: neutral names
        p = run("train", *MY, "--train-tsv", self.files["train", "tsv"], *self.split("valid"), "--epochs", "1",
                "--out", b)
        self.assertOk(p)
        self.assertEqual([{k: m[k] for k in LOSS_KEYS} for m in read_metrics(os.path.join(a, "metrics.jsonl"))],
                         [{k: m[k] for k in LOSS_KEYS} for m in read_metrics(os.path.join(b, "metrics.jsonl"))])

    def test_bad_input_is_an_error_before_training(self):
        d = self.out("own_bad")
        os.makedirs(d, exist_ok=True)
        good = self.split("train")[1:]
        latin1 = write(os.path.join(d, "latin1.de"), "ok\nein Mädchen\n".encode("latin-1"), mode="wb")
        two = write(os.path.join(d, "two.en"), "ok\na girl\n")
        two_de = write(os.path.join(d, "two.de"), "ok\nein Mädchen\n")
        three = write(os.path.join(d, "three.en"), "ok\na girl\nmore\n")
        notab = write(os.path.join(d, "notab.tsv"), "a\tb\nno tab here\n")
        blank_de = write(os.path.join(d, "blank.de"), "\n \n")
        blank_en = write(os.path.join(d, "blank.en"), "x\n\n")
        for name, data, pattern in [
                ("not UTF-8", ["--train", latin1, two],
                 r"latin1\.de:2: invalid UTF-8 at byte 5 of the line \(byte offset 8 in the file\)"),
                ("line counts", ["--train", two_de, three], r"two\.de' has 2 lines but '.*three\.en' has 3"),
                ("no tab", ["--train-tsv", notab], r"notab\.tsv:2: no tab in the line"),
                ("missing file", ["--train", os.path.join(d, "nope.de"), good[1]],
                 r"data: missing file .*nope\.de \(config field files\.train, source\)"),
                ("empty corpus", ["--train", blank_de, blank_en],
                 r"data: split train has no usable sentence pair in .*blank\.de and .*blank\.en \(read 2 pairs, "
                 r"kept 0; skipped 0 placeholder, 2 empty"),
                ("bad valid split", ["--train", *good, "--valid", two_de, three], r"two\.de' has 2 lines but")]:
            with self.subTest(name):
                args = data if "--valid" in data else [*data, *self.split("valid")]
                p = run("train", *MY, *args, "--out", os.path.join(d, "run"), "--force")
                self.assertFails(p, pattern)
                self.assertNotIn("epoch 1", p.stdout)
                self.assertFalse(os.path.exists(os.path.join(d, "run", "metrics.jsonl")))
        for data, pattern in [(["--train", *good], r"--train needs --valid"),
                              (["--valid", *good], r"--valid and --test go with --train"),
                              (["--train", good[0]], r"option --train needs two values"),
                              (["--corpus", "multi30k", "--train", *good], r"--corpus multi30k names a bundled corpus"),
                              (["--train", *good, "--train-tsv", notab], r"--train and --train-tsv exclude each other"),
                              (["--corpus", "wmt14"], r"--corpus expects multi30k or fra-eng, got 'wmt14'"),
                              (["--shuffle-buffer", "0"], r"--shuffle-buffer must be >= 1")]:
            with self.subTest(data=data):
                p = run("train", *MY, *data, "--data-dir", DATA, "--out", os.path.join(d, "run"), "--force")
                self.assertFails(p, pattern, status=2)


# ---- logs and progress without a terminal ------------------------------------------------------

class Logs(Base):
    def test_plain_progress_lines_and_messages(self):
        out = self.out("logs")
        p = self.train(out, "--epochs", "2", quiet=False)
        self.assertOk(p)
        self.assertNotIn("\r", p.stderr)  # no bar redrawn in place in a log file
        lines = p.stderr.splitlines()
        progress = [l for l in lines if l.startswith("epoch 1/2 batch")]
        # 8 batches: a line whenever another 10% of the epoch is done, each with both ETAs
        self.assertEqual([l.split()[3] for l in progress], [f"{i}/8" for i in range(1, 9)])
        for line in progress:
            self.assertRegex(line, r"^epoch 1/2 batch \d/8 loss [\d.]+ \d+ tok/s ETA \d+m\d\ds \(run \d+m\d\ds\)$")
        self.assertIn("epoch 1/2: validating on 1014 pairs...", lines)
        self.assertTrue(any(l.startswith("saved new best (sacreBLEU ") for l in lines), p.stderr)

    def test_epoch_lines_are_flushed(self):
        # Read stdout while the run goes on: the first epoch's line must arrive before the run ends
        # (a buffered line would only come at exit, and the SIGINT below would find no run to stop).
        out = self.out("flushed")
        proc = subprocess.Popen([SEQGRAD, "train", *TINY, "--quiet", "--epochs", "4", "--data-dir", DATA, "--out", out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if line.startswith("epoch 1:"):
                break
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 130, stderr)
        self.assertRegex(stderr, r"interrupted (at epoch \d, batch \d+|after epoch \d) \(step \d+\)")


# ---- a resumed train state is validated ---------------------------------------------------------

class ResumeState(Base):
    def crafted(self, name, **changes):
        out = self.out(name)
        shutil.copytree(reference_run(), out)
        last = os.path.join(out, "last.safetensors")
        header, _ = read_safetensors(last)
        state = json.loads(header["__metadata__"]["train_state"])
        state.update(changes)
        write_with_train_state(last, {k: v for k, v in state.items() if v is not None})
        return out

    def test_the_crc_of_a_crafted_checkpoint_is_right(self):
        header, data = read_safetensors(os.path.join(reference_run(), "last.safetensors"))
        self.assertEqual(checksum(header, data), header["__metadata__"]["seqgrad.crc32"])

    def test_bad_fields_are_named(self):
        for i, (changes, pattern) in enumerate([
                ({"batch": -1}, r"train_state.batch = -1 must be >= 0"),
                ({"epoch": -2}, r"train_state.epoch = -2 must be >= 0"),
                ({"step": 1.5}, r"train_state.step must be an integer, got 1.5"),
                ({"epoch": "one"}, r"train_state.epoch must be an integer, got \"one\""),
                ({"batch": None}, r"train_state has no 'batch'"),
                ({"epoch_tokens": -7}, r"train_state.epoch_tokens = -7 must be >= 0"),
                ({"early_stopping": {"metric": "sacrebleu", "mode": "max", "patience": 0, "min_delta": 0,
                                     "best": 1e300, "validations_since_best": 0}},
                 r"train_state.early_stopping.best = 1e\+300 must be in \[0, 100\] \(sacrebleu\)"),
                ({"rng_offset": -3}, r"train_state.rng_offset must be an integer >= 0, got -3"),
                ({"batch": 100, "step": 200, "epoch": 0}, r"train_state.batch = 100 is past the 8 batches of epoch 1"),
                ({"scheduler": None}, r"train_state has no scheduler state to resume from"),
                ({"scheduler": "garbage"}, r"train_state.scheduler: StepLR.load_state_dict: the state's values must be "
                                           r"a JSON object, got \"garbage\""),
                ({"optimizer": 5}, r"train_state.optimizer: Adam.load_state_dict: the state's values must be a JSON "
                                   r"object, got 5")]):
            with self.subTest(changes=changes):
                out = self.crafted(f"state{i}", **changes)
                p = run("train", "--resume", "--out", out, "--threads", "1", "--quiet", "--epochs", "2")
                self.assertFails(p, r"checkpoint .*last.safetensors: " + pattern)

    def test_a_negative_step_triggers_no_hook(self):
        # The seed's hidden test hook fired a false "loss is nan ... (step -1)" for step = -5: the
        # state is now checked first, and the hooks live outside the trainer.
        out = self.crafted("negative_step", step=-5)
        p = run("train", "--resume", "--out", out, "--threads", "1", "--quiet", "--nan-at-step", "1")
        self.assertFails(p, r"train_state.step = -5 must be >= 0")
        self.assertNotIn("loss is nan", p.stderr)


# ---- divergence that stays finite --------------------------------------------------------------

class Divergence(Base):
    def test_exploding_loss_stops_the_run(self):
        for lr in ["100", "1e4", "1e10"]:
            with self.subTest(lr=lr):
                out = self.out(f"lr{lr}")
                p = self.train(out, "--epochs", "1", "--lr", lr)
                self.assertFails(p, r"loss is [\d.e+]+ at epoch 1 batch 2 \(step 2\), above 4 x log\(target vocabulary "
                                    r"size\) = 20.8: training diverged .*saved the state that produced it to "
                                    r".*nan.safetensors")
                header, _ = read_safetensors(os.path.join(out, "nan.safetensors"))
                self.assertEqual(json.loads(header["__metadata__"]["train_state"])["step"], 1)
                self.assertFalse(os.path.exists(os.path.join(out, "metrics.jsonl")))

    def test_a_diverged_run_can_be_retried_in_its_folder(self):
        out = self.out("retry")
        self.assertFails(self.train(out, "--epochs", "1", "--lr", "100"), r"training diverged")
        # nan.safetensors alone is no run to protect: a normal learning rate trains there, unstopped
        self.assertOk(self.train(out, "--epochs", "1", "--lr", "0.01"))
        self.assertFalse(os.path.exists(os.path.join(out, "nan.safetensors")))


# ---- bench --json and --out-file -----------------------------------------------------------------

# ---- early stopping, validation cadence, checkpoints to average, accumulation, initial weights ----

def without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def same_file(a, b):
    return subprocess.run(["cmp", "-s", a, b]).returncode == 0


class EarlyStopping(Base):
    def test_a_resumed_run_stops_at_the_same_point_with_the_same_best(self):
        # tiny runs score sacreBLEU 0 after every epoch: the first is the best, patience 2 stops at the third
        whole = self.out("es_whole")
        p = self.train(whole, "--epochs", "6", "--patience", "2")
        self.assertOk(p)
        self.assertIn("early stopping: 2 validation(s) without a better sacreBLEU (patience 2)", p.stdout)
        rows = read_metrics(os.path.join(whole, "metrics.jsonl"))
        self.assertLess(len(rows), 6)
        # interrupted in the middle of the second epoch (8 steps an epoch), then resumed
        cut = self.out("es_cut")
        self.assertEqual(self.train(cut, "--epochs", "6", "--patience", "2", "--stop-after-steps", "12").returncode, 130)
        self.assertOk(self.train(cut, "--resume", "--epochs", "6"))
        self.assertEqual(without_seconds(read_metrics(os.path.join(cut, "metrics.jsonl"))), without_seconds(rows))
        for name in ["best.safetensors", "last.safetensors"]:
            self.assertTrue(same_file(os.path.join(whole, name), os.path.join(cut, name)), name)
        # a run that stopped early says so when resumed, and does not train
        p = self.train(cut, "--resume", "--epochs", "6")
        self.assertOk(p)
        self.assertIn("stopped early after step", p.stdout)
        self.assertEqual(len(read_metrics(os.path.join(cut, "metrics.jsonl"))), len(rows))
        self.assertTrue(same_file(os.path.join(whole, "last.safetensors"), os.path.join(cut, "last.safetensors")))
        # a larger --patience on resume lets it go on, exactly as a run given that patience from the start
        longer = self.out("es_longer")
        self.assertOk(self.train(longer, "--epochs", "6", "--patience", "3"))
        longer_rows = read_metrics(os.path.join(longer, "metrics.jsonl"))
        self.assertEqual(len(longer_rows), len(rows) + 1)
        p = self.train(cut, "--resume", "--epochs", "6", "--patience", "3")
        self.assertOk(p)
        self.assertIn("early stopping: 3 validation(s) without a better sacreBLEU (patience 3)", p.stdout)
        cut_rows = read_metrics(os.path.join(cut, "metrics.jsonl"))
        self.assertEqual(without_seconds(cut_rows), without_seconds(longer_rows))
        self.assertTrue(same_file(os.path.join(longer, "last.safetensors"), os.path.join(cut, "last.safetensors")))

    def test_valid_every_validates_mid_epoch_and_at_the_end(self):
        out = self.out("valid_every")
        self.assertOk(self.train(out, "--epochs", "2", "--valid-every", "5", "--patience", "0"))
        rows = read_metrics(os.path.join(out, "metrics.jsonl"))
        # 8 steps an epoch: steps 5, 10 and 15 in the middle of an epoch, and the run's end (16)
        self.assertEqual([(r["epoch"], r["step"], r.get("batch")) for r in rows],
                         [(1, 5, 5), (2, 10, 2), (2, 15, 7), (2, 16, None)])
        self.assertEqual(set(rows[-1]), set(LOSS_KEYS) | {"valid_ppl", "seconds", "lr"})
        # a resumed run truncates the metrics by step and validates again from there
        cut = self.out("valid_every_cut")
        self.assertEqual(self.train(cut, "--epochs", "2", "--valid-every", "5", "--patience", "0",
                                    "--stop-after-steps", "12").returncode, 130)
        self.assertOk(self.train(cut, "--resume"))
        self.assertEqual(without_seconds(read_metrics(os.path.join(cut, "metrics.jsonl"))), without_seconds(rows))


class Averaging(Base):
    KEEP = ["--epochs", "3", "--valid-every", "3", "--patience", "0", "--keep-checkpoints", "3",
            "--early-stopping-metric", "chrf", "--lr", "0.03"]

    @staticmethod
    def kept(out):
        return sorted((f for f in os.listdir(out) if f.startswith("ckpt-")), key=lambda f: int(f[5:-12]))

    def test_keep_checkpoints_keeps_the_best_and_average_best_picks_them(self):
        # 8 validations (every 3 steps, and the run's end); this tiny run's chrF goes up and down, so
        # its best three are not its last three
        out = self.out("keep_best")
        self.assertOk(self.train(out, *self.KEEP))
        rows = read_metrics(os.path.join(out, "metrics.jsonl"))
        self.assertEqual([r["step"] for r in rows], [3, 6, 9, 12, 15, 18, 21, 24])
        # the best three by chrF (a tie keeps the earlier), from the run's own numbers
        best = sorted(rows, key=lambda r: (-r["valid_chrf"], r["step"]))[:3]
        expected = sorted(f"ckpt-{r['step']}.safetensors" for r in best)
        self.assertEqual(sorted(self.kept(out)), expected)
        self.assertNotEqual(expected, sorted(f"ckpt-{r['step']}.safetensors" for r in rows[-3:]),
                            "this run's best validations are its last ones: the test no longer tells them apart")
        self.assertTrue(os.path.exists(os.path.join(out, "last.safetensors")))  # for --resume, apart from them
        # the kept steps and scores are in the train state ...
        header, _ = read_safetensors(os.path.join(out, "last.safetensors"))
        state = json.loads(header["__metadata__"]["train_state"])
        self.assertEqual({k["step"]: k["score"] for k in state["kept_checkpoints"]},
                         {r["step"]: r["valid_chrf"] for r in best})
        # ... so a run interrupted between validations and resumed keeps the same files, byte for byte
        cut = self.out("keep_best_cut")
        self.assertEqual(self.train(cut, *self.KEEP, "--stop-after-steps", "13").returncode, 130)
        self.assertOk(self.train(cut, "--resume"))
        self.assertEqual(self.kept(cut), self.kept(out))
        for name in self.kept(out):
            self.assertTrue(same_file(os.path.join(out, name), os.path.join(cut, name)), name)

        # average --best N RUN_DIR: the N best by the run's metric, best first
        avg = self.out("avg_best.safetensors")
        p = run("average", "--best", "2", out, "--out-file", avg)
        self.assertOk(p)
        top2 = [os.path.join(out, f"ckpt-{r['step']}.safetensors") for r in best[:2]]
        self.assertEqual(re.findall(r"^  (\S+)$", p.stdout, re.M), top2)
        # the same as naming the two files, and the element-wise mean, by hand, of one tensor
        named = self.out("avg_named.safetensors")
        self.assertOk(run("average", "--checkpoint", *top2, "--out-file", named, "--quiet"))
        self.assertTrue(same_file(avg, named))
        name = "model.decoder.embedding.weight"
        values = []
        for path in (*top2, avg):
            header, data = read_safetensors(path)
            begin, end = header[name]["data_offsets"]
            values.append(struct.unpack(f"<{(end - begin) // 4}f", data[begin:end]))
        self.assertNotEqual(values[0], values[1])
        for x, y, m in zip(*values):
            self.assertAlmostEqual(m, (x + y) / 2, places=6)
        # errors name the flag, the folder and what was expected
        self.assertFails(run("average", "--best", "4", out, "--out-file", avg),
                         r"--best 4: .*keep_best: the run folder holds 3 validation checkpoint\(s\).*fewer than 4; "
                         r"train with --keep-checkpoints 4")
        self.assertFails(run("average", "--best", "2", self.out("nowhere"), "--out-file", avg),
                         r"--best 2: .*nowhere: no run folder there")
        self.assertFails(run("average", "--best", "0", out, "--out-file", avg), r"--best must be in \[1, 1000\], got 0",
                         status=2)
        self.assertFails(run("average", "--best", "2", out, "--checkpoint", top2[0], "--out-file", avg),
                         r"--best and --checkpoint exclude each other", status=2)
        self.assertFails(run("average", "--out-file", avg), r"give the checkpoints to average: --checkpoint", status=2)
        bare = self.out("keep_best_no_metrics")
        shutil.copytree(out, bare)
        os.remove(os.path.join(bare, "metrics.jsonl"))
        self.assertFails(run("average", "--best", "2", bare, "--out-file", avg), r"no metrics.jsonl there to rank the "
                         r"checkpoints by valid_chrf")

    def test_average(self):
        out = self.out("keep")
        self.assertOk(self.train(out, "--epochs", "2", "--keep-checkpoints", "2", "--patience", "0",
                                 "--early-stopping-metric", "loss"))
        kept = self.kept(out)
        self.assertEqual(kept, ["ckpt-8.safetensors", "ckpt-16.safetensors"])
        a, b, avg = os.path.join(out, kept[0]), os.path.join(out, kept[1]), self.out("avg.safetensors")
        p = run("average", "--checkpoint", a, b, "--out-file", avg)
        self.assertOk(p)
        self.assertEqual(p.stderr, "")
        # the old positional spelling: the same file, with a deprecation warning
        old = self.out("avg_old.safetensors")
        p = run("average", "--out-file", old, a, b)
        self.assertOk(p)
        self.assertIn("warning: giving the checkpoint without --checkpoint is deprecated", p.stderr)
        self.assertTrue(same_file(avg, old))
        header, _ = read_safetensors(avg)
        self.assertFalse(any(k.startswith(("optim.", "optimizer.")) for k in header))
        p = run("eval", "--checkpoint", avg, "--data-dir", DATA, "--threads", "1")
        self.assertOk(p)
        self.assertIn("sacreBLEU", p.stdout)
        self.assertOk(run("inspect", "--checkpoint", avg))
        self.assertFails(run("train", "--resume", "--out", self.out("keep_avg_resume")), r"no checkpoint")
        # another vocabulary (fewer training pairs) or architecture is refused, naming both files
        other = self.out("keep_other")
        self.assertOk(self.train(other, "--epochs", "1", "--subset", "128"))
        p = run("average", "--checkpoint", a, os.path.join(other, "last.safetensors"), "--out-file",
                self.out("bad_avg.safetensors"))
        self.assertFails(p, r"average: checkpoints .*ckpt-8.safetensors and .*keep_other/last.safetensors have "
                            r"different source vocabularies")
        wide = self.out("keep_wide")
        self.assertOk(self.train(wide, "--epochs", "1", "--hidden", "24"))
        p = run("average", "--checkpoint", a, os.path.join(wide, "last.safetensors"), "--out-file",
                self.out("bad_avg.safetensors"))
        self.assertFails(p, r"different architectures: config field model.hidden_size is 16 in the first and 24")
        q = self.out("q.safetensors")
        self.assertOk(run("quantize", "--checkpoint", a, "--out-file", q))
        self.assertFails(run("average", "--checkpoint", a, q, "--out-file", self.out("bad_avg.safetensors")),
                         r"average: checkpoint .*q.safetensors is quantized")
        self.assertFails(run("average", "--checkpoint", a, b), r"seqgrad average: error: --out-file <file> is required",
                         status=2)
        self.assertFails(run("average", "--checkpoint", a, b, "--out-file", a), r"is one of the checkpoints to average",
                         status=2)


class Accumulation(Base):
    def test_accum_steps_resumes_exactly(self):
        whole, cut = self.out("accum_whole"), self.out("accum_cut")
        self.assertOk(self.train(whole, "--epochs", "2", "--accum-steps", "3", "--patience", "0"))
        rows = read_metrics(os.path.join(whole, "metrics.jsonl"))
        self.assertEqual([r["step"] for r in rows], [3, 6])  # 8 batches an epoch: steps of 3, 3 and 2
        self.assertEqual(self.train(cut, "--epochs", "2", "--accum-steps", "3", "--patience", "0",
                                    "--stop-after-steps", "4").returncode, 130)
        self.assertOk(self.train(cut, "--resume"))
        self.assertEqual(without_seconds(read_metrics(os.path.join(cut, "metrics.jsonl"))), without_seconds(rows))
        self.assertTrue(same_file(os.path.join(whole, "last.safetensors"), os.path.join(cut, "last.safetensors")))


class LRSchedules(Base):
    def test_inverse_sqrt_sets_the_rate_per_update_and_resumes_exactly(self):
        whole, cut = self.out("isqrt_whole"), self.out("isqrt_cut")
        schedule = ["--epochs", "2", "--accum-steps", "3", "--patience", "0", "--lr-schedule", "inverse_sqrt",
                    "--warmup-updates", "5"]
        self.assertOk(self.train(whole, *schedule))
        rows = read_metrics(os.path.join(whole, "metrics.jsonl"))
        # 8 batches an epoch in updates of 3, 3 and 2; lr 0.003 (the default preset's): after k updates
        # 0.003 x k / 5 while k < 5, then 0.003 x sqrt(5 / k)
        self.assertEqual([r["step"] for r in rows], [3, 6])
        self.assertAlmostEqual(rows[0]["lr"], 0.003 * 3 / 5, places=15)
        self.assertAlmostEqual(rows[1]["lr"], 0.003 * (5 / 6) ** 0.5, places=15)
        self.assertEqual(self.train(cut, *schedule, "--stop-after-steps", "4").returncode, 130)
        self.assertOk(self.train(cut, "--resume"))
        self.assertEqual(without_seconds(read_metrics(os.path.join(cut, "metrics.jsonl"))), without_seconds(rows))
        self.assertTrue(same_file(os.path.join(whole, "last.safetensors"), os.path.join(cut, "last.safetensors")))
        # the schedule is the run's: resuming with another is refused like any changed field
        self.assertFails(run("train", "--resume", "--out", cut, "--lr-schedule", "step", "--data-dir", DATA),
                         r"cannot resume: .* was trained with --lr-schedule inverse_sqrt, not step", status=2)

    def test_inverse_sqrt_needs_its_warmup(self):
        self.assertFails(self.train(self.out("isqrt_none"), "--lr-schedule", "inverse_sqrt"),
                         r"config field warmup_updates = 0 must be >= 1 with lr_schedule inverse_sqrt", status=2)


class TokenBatches(Base):
    def test_batch_tokens_trains_and_resumes_exactly(self):
        whole, cut = self.out("tokens_whole"), self.out("tokens_cut")
        self.assertOk(self.train(whole, "--epochs", "2", "--batch-tokens", "400", "--patience", "0"))
        rows = read_metrics(os.path.join(whole, "metrics.jsonl"))
        per_epoch = rows[0]["step"]
        self.assertEqual([r["step"] for r in rows], [per_epoch, 2 * per_epoch])
        self.assertGreater(per_epoch, 8)  # 256 short pairs in batches of at most 400 tokens: more than 256 / 32
        # interrupted two steps into the second epoch, then resumed: the same batches, the same weights
        self.assertEqual(self.train(cut, "--epochs", "2", "--batch-tokens", "400", "--patience", "0",
                                    "--stop-after-steps", str(per_epoch + 2)).returncode, 130)
        self.assertOk(self.train(cut, "--resume"))
        self.assertEqual(without_seconds(read_metrics(os.path.join(cut, "metrics.jsonl"))), without_seconds(rows))
        self.assertTrue(same_file(os.path.join(whole, "last.safetensors"), os.path.join(cut, "last.safetensors")))


class InitFrom(Base):
    def test_a_run_starts_from_a_checkpoints_weights_and_vocabularies(self):
        start = os.path.join(reference_run(), "best.safetensors")
        out = self.out("init_from")
        # another --subset would build other vocabularies: the checkpoint's are used instead
        p = self.train(out, "--epochs", "1", "--init-from", start, "--subset", "128", quiet=False)  # the model line
        self.assertOk(p)
        ref = run("inspect", "--checkpoint", start).stdout
        vocab = re.search(r"vocab (\d+) -> (\d+)", p.stdout).groups()
        self.assertIn(f"model.src_vocab = {vocab[0]}", ref)
        self.assertIn(f"model.tgt_vocab = {vocab[1]}", ref)
        # the weights are the checkpoint's: with a vanishing learning rate they stay where they started
        still = self.out("init_still")
        self.assertOk(self.train(still, "--epochs", "1", "--init-from", start, "--lr", "1e-12"))
        name = "model.decoder.embedding.weight"
        values = []
        for path in (start, os.path.join(still, "last.safetensors")):
            header, data = read_safetensors(path)
            begin, end = header[name]["data_offsets"]
            values.append(struct.unpack(f"<{(end - begin) // 4}f", data[begin:end]))
        for x, y in zip(*values):
            self.assertAlmostEqual(x, y, places=6)
        # another architecture cannot take the weights
        p = self.train(self.out("init_wide"), "--epochs", "1", "--init-from", start, "--hidden", "24")
        self.assertFails(p, r"checkpoint .*best.safetensors: its weights do not fit the model")

    def test_vocab_spm_reuses_a_sentencepiece_model(self):
        first = self.out("spm_first")
        p = self.train(first, "--epochs", "1", "--vocab", "unigram:200", "--joint-vocab")
        if "no SentencePiece support" in p.stderr:
            self.skipTest("no SentencePiece in this build")
        self.assertOk(p)
        header, _ = read_safetensors(os.path.join(first, "last.safetensors"))
        vocab = json.loads(header["__metadata__"]["src_vocab"])
        model = write(self.out("joint.model"), base64.b64decode(vocab["model"]), "wb")
        second = self.out("spm_second")
        self.assertOk(self.train(second, "--epochs", "1", "--vocab", "spm:" + model))
        header2, _ = read_safetensors(os.path.join(second, "last.safetensors"))
        for side in ("src_vocab", "tgt_vocab"):
            self.assertEqual(json.loads(header2["__metadata__"][side]), vocab)


class Bench(Base):
    def test_out_file_into_a_missing_folder_is_an_error(self):
        p = run("bench", "--out-file", "/nonexistent_dir/b.json", "op_overhead", "--quick")
        self.assertFails(p, r"seqgrad bench: error: bench --out-file /nonexistent_dir/b.json: the folder "
                            r"/nonexistent_dir does not exist")
        p = run("bench", "--out-file", Base.tmp, "op_overhead", "--quick")
        self.assertFails(p, r"is a folder, not a file")

    def test_json_lines_are_written(self):
        path = self.out("bench.json")
        p = run("bench", "--json", "--out-file", path, "op_overhead", "--quick", "--threads", "1")
        self.assertOk(p)
        rows = read_metrics(path)
        self.assertEqual([r["workload"] for r in rows], ["op_record", "op_record_backward"])
        self.assertEqual([json.loads(line) for line in p.stdout.splitlines()], rows)  # stdout: the same lines


def main():
    global SEQGRAD, DATA
    SEQGRAD, DATA, argv = program_and_data("test_tools_train.py")
    try:
        unittest.main(argv=[sys.argv[0], *argv])
    finally:
        if Base.tmp and os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(Base.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
