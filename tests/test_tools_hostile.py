#!/usr/bin/python3
"""Hostile input at the `seqgrad` command line (issues 16 and 28): crafted checkpoints (huge config
sizes, non-finite weights or optimizer moments, a renamed or missing checksum, JSON metadata nested
200,000 deep), files that are not files (FIFO, symlink loop, directory), broken corpora (misaligned
under --subset, lines too long for SentencePiece), a beam wider than the vocabulary, writes that
fail, and thread creation failing. Each must be a clear error naming the file (exit 1, no "internal
error", no crash), or the documented fallback.

    /usr/bin/python3 tests/test_tools_hostile.py BUILD/tools/seqgrad [DATA_DIR] [-v] [-k PATTERN]

Registered in tests/meson.build (suite 'tools_hostile'). The crafted checkpoints carry a correct
checksum (recomputed here as seqgrad computes it, nn/checkpoint.cpp): a CRC is no signature, so
every check behind it must hold on its own.
"""
import json
import os
import re
import resource
import signal
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the same file helpers and assertions (assertFails: exit 1, the pattern, no "internal error")
from test_tools_cli import (Base, checksum, program_and_data, read_safetensors, shape_str,  # noqa: E402
                            write_safetensors)

SEQGRAD = None
DATA = None
TMP = None
def run(*args, timeout=120, limit_as=None, limit_stack=None, limit_file=None):
    """Runs seqgrad; limit_as caps its address space (bytes), as `ulimit -v` does, limit_stack the
    stack size (which glibc also gives each new thread), as `ulimit -s`; limit_file the size of a
    file it writes, as `ulimit -f` (a write past it fails with EFBIG, "File too large": a full disk
    without root; SIGXFSZ ignored, as a shell that sets the limit leaves it)."""
    def preexec():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
        if limit_stack:
            resource.setrlimit(resource.RLIMIT_STACK, (limit_stack, limit_stack))
        if limit_file:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file, limit_file))
    return subprocess.run([SEQGRAD, *args], capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


def small_data_dir(name, **files):
    """A Multi30k-shaped data folder holding the first lines of the real splits; files maps
    'split.lang' (dots as underscores) to replacement contents (bytes) or None (a directory)."""
    d = os.path.join(TMP, name)
    os.makedirs(os.path.join(d, "multi30k"), exist_ok=True)
    for split, lines in [("train", 300), ("val", 40), ("test2016", 40)]:
        for lang in ("de", "en"):
            path = os.path.join(d, "multi30k", f"{split}.{lang}")
            key = f"{split}_{lang}"
            if key in files and files[key] is None:
                os.makedirs(path, exist_ok=True)
                continue
            if key in files:
                blob = files[key]
            else:
                with open(os.path.join(DATA, "multi30k", f"{split}.{lang}"), "rb") as f:
                    blob = b"".join(f.readline() for _ in range(lines))
            with open(path, "wb") as f:
                f.write(blob)
    return d


def tiny_checkpoint():
    """best.safetensors of a tiny run (E = H = 8, 300 pairs, one epoch), trained once."""
    if not hasattr(tiny_checkpoint, "path"):
        out = os.path.join(TMP, "tiny_run")
        p = run("train", "--preset", "default", "--vocab", "word", "--embed", "8", "--hidden", "8", "--batch-size", "32", "--threads",
                "1", "--quiet", "--epochs", "1", "--data-dir", small_data_dir("data_ok"), "--out", out)
        if p.returncode != 0:
            raise AssertionError(f"tiny training failed:\n{p.stdout}\n{p.stderr}")
        tiny_checkpoint.path = os.path.join(out, "best.safetensors")
    return tiny_checkpoint.path


def crafted(name, edit, resign=True, source=None):
    """A copy of the tiny checkpoint (or of source) changed by edit(header, data) -> data, re-signed
    unless resign=False."""
    header, data = read_safetensors(source or tiny_checkpoint())
    data = edit(header, bytearray(data)) or data
    if resign:
        header["__metadata__"]["seqgrad.crc32"] = checksum(header, bytes(data))
    path = os.path.join(TMP, name + ".safetensors")
    write_safetensors(path, header, bytes(data))
    return path


def set_model_field(field, value):
    def edit(header, data):
        config = json.loads(header["__metadata__"]["config"])
        config["model"][field] = value
        header["__metadata__"]["config"] = json.dumps(config)
    return edit


def resumable_copy(name, edit):
    """A copy of the tiny run's folder whose last.safetensors is changed by edit (re-signed): the
    run `train --resume --out FOLDER` continues."""
    folder = os.path.join(TMP, name)
    shutil.copytree(os.path.dirname(tiny_checkpoint()), folder)
    last = os.path.join(folder, "last.safetensors")
    os.replace(crafted(name, edit, source=last), last)
    return folder, last


def resume(folder, **kw):
    return run("train", "--resume", "--out", folder, "--epochs", "2", "--threads", "1", "--quiet", **kw)


DEEP = "[" * 200_000 + "]" * 200_000  # issue 28: dump() of it overflowed the stack (SIGSEGV, exit 139)


def deep_metadata(key, field):
    """An edit replacing the integer value of "field" in the JSON text of metadata[key] by DEEP (text,
    not json.dumps: Python's own encoder would recurse 200,000 deep)."""
    def edit(header, data):
        text, count = re.subn(rf'("{field}":\s*)\d+', lambda m: m.group(1) + DEEP, header["__metadata__"][key],
                              count=1)
        assert count == 1, (key, field)
        header["__metadata__"][key] = text
    return edit


def translate(ckpt, *extra, **kw):
    return run("translate", "--checkpoint", ckpt, "--threads", "1", *extra, "ein mann", **kw)


class Checkpoints(Base):
    def test_the_checksum_helper_matches_seqgrad(self):
        header, data = read_safetensors(tiny_checkpoint())
        self.assertEqual(checksum(header, data), header["__metadata__"]["seqgrad.crc32"])
        self.assertOk(translate(tiny_checkpoint()))

    def test_huge_config_sizes_fail_fast_naming_checkpoint_and_field(self):
        # each once crashed translate/eval (heap overflow, wrapped numel, memalign(-2^63)) or
        # allocated gigabytes before failing; now: refused before the model is built, under 1 GiB
        for field, value in [("embed_size", 4611686018427387904), ("embed_size", 4287621595510868754),
                             ("embed_size", 10**6), ("hidden_size", 2**61), ("attention_size", 2**62),
                             ("num_layers", 2**40)]:
            with self.subTest(field=field, value=value):
                path = crafted(f"{field}_{value}", set_model_field(field, value))
                start = time.monotonic()
                for cmd in (["translate", "ein mann"], ["eval"]):
                    p = run(*cmd, "--checkpoint", path, "--threads", "1", limit_as=1 << 30)
                    self.assertFails(p, rf"checkpoint {path}: .*config field model\.{field} = {value}\b")
                self.assertLess(time.monotonic() - start, 20)

    def test_config_errors_name_the_checkpoint(self):
        path = crafted("embed_zero", set_model_field("embed_size", 0))
        self.assertFails(translate(path), rf"checkpoint {path}: bad metadata: config field model\.embed_size = 0 must be in \[1, 1048576\]")

        def duplicate_token(header, data):
            vocab = json.loads(header["__metadata__"]["src_vocab"])
            vocab["tokens"][5] = vocab["tokens"][4]
            header["__metadata__"]["src_vocab"] = json.dumps(vocab)
        path = crafted("duplicate_token", duplicate_token)
        self.assertFails(translate(path), rf"checkpoint {path}: bad metadata: vocab: token .* appears twice")
        path = crafted("float_size", set_model_field("hidden_size", 1e300))
        self.assertFails(translate(path), r"config field model\.hidden_size = 1e\+300 must be an integer")

    def test_non_finite_weights_are_refused(self):
        def nan_weight(header, data):
            begin, end = header["model.decoder.out.weight"]["data_offsets"]
            data[begin:end] = struct.pack("<f", float("nan")) * ((end - begin) // 4)
            return data
        path = crafted("nan_weight", nan_weight)
        for cmd in (["translate", "ein mann"], ["eval"]):
            p = run(*cmd, "--checkpoint", path, "--threads", "1")
            self.assertFails(p, rf"checkpoint {path}: tensor 'decoder\.out\.weight' \(\d+, \d+\) holds \d+ non-finite")

    def test_a_renamed_checksum_key_never_loads(self):
        # one flipped bit: seqgrad.crc32 -> seqgrad.crc33, with altered weights behind it
        def flip(header, data):
            meta = header["__metadata__"]
            meta["seqgrad.crc33"] = meta.pop("seqgrad.crc32")
            data[len(data) // 2] ^= 0x01
            return data
        path = crafted("flipped_key", flip, resign=False)
        for extra in ([], ["--allow-missing-checksum"]):
            self.assertFails(translate(path, *extra), r"unknown metadata key 'seqgrad\.crc33'")

    def test_a_missing_checksum_needs_the_flag(self):
        def drop(*keys):
            def edit(header, data):
                for key in keys:
                    del header["__metadata__"][key]
            return edit
        # written by this version (format_version 2 always stores a checksum): altered, loud warning
        path = crafted("no_checksum", drop("seqgrad.crc32"), resign=False)
        self.assertFails(translate(path), r"has no checksum .*always stores one.*--allow-missing-checksum")
        p = translate(path, "--allow-missing-checksum")
        self.assertOk(p)
        self.assertIn("WARNING: checkpoint", p.stderr)
        # as written before checksums (no format_version either)
        path = crafted("old_format", drop("seqgrad.crc32", "format_version"), resign=False)
        self.assertFails(translate(path), r"written before seqgrad stored one")
        p = translate(path, "--allow-missing-checksum")
        self.assertOk(p)
        self.assertIn("loaded unverified", p.stderr)

    def test_files_that_are_not_files(self):
        fifo = os.path.join(TMP, "fifo.safetensors")
        os.mkfifo(fifo)
        self.assertFails(translate(fifo, timeout=30), r"is a FIFO \(named pipe\), expected a regular file")
        loop = os.path.join(TMP, "loop.safetensors")
        os.symlink(loop, loop)
        self.assertFails(translate(loop), rf"{loop}.*Too many levels of symbolic links")
        self.assertFails(translate(TMP), r"is a directory, expected a regular file")

    def test_a_device_read_as_a_text_file(self):
        # /dev/zero never ends: reading it runs out of memory, reported with the file's name
        p = run("eval", "--hyp", "/dev/zero", "--ref", "/dev/null", limit_as=1 << 30, timeout=60)
        self.assertFails(p, r"read_file: '/dev/zero' does not fit in memory")

    def test_heatmaps_path_that_is_a_file(self):
        target = os.path.join(TMP, "heatmaps_file")
        with open(target, "w") as f:
            f.write("not a folder\n")
        p = translate(tiny_checkpoint(), "--heatmaps", target)
        self.assertFails(p, rf"error: .*{target}")


class Corpora(Base):
    def train(self, data, out, **kw):
        return run("train", "--preset", "default", "--vocab", "word", "--embed", "8", "--hidden", "8", "--threads", "1", "--quiet",
                   "--epochs", "1", "--data-dir", data, "--out", os.path.join(TMP, out), **kw)

    def test_a_directory_read_as_a_corpus(self):
        data = small_data_dir("data_dir_file", train_de=None)
        self.assertFails(self.train(data, "run_dir"), rf"{data}/multi30k/train\.de.*[Ii]s a directory")

    def test_empty_or_blank_splits_are_caught_before_training(self):
        for name, files, split in [("empty_train", {"train_de": b"", "train_en": b""}, "train"),
                                   ("tab_test", {"test2016_de": b"\t\t\n" * 40, "test2016_en": b"\t\n" * 40},
                                    "test2016")]:
            with self.subTest(name=name):
                data = small_data_dir(name, **files)
                p = self.train(data, "run_" + name)
                self.assertFails(p, rf"split {split} has no usable sentence pair in {data}/multi30k/{split}\.de")
                self.assertFalse(os.path.exists(os.path.join(TMP, "run_" + name, "last.safetensors")))

    def test_cr_only_line_endings(self):
        with open(os.path.join(DATA, "multi30k", "train.de"), "rb") as f:
            lines = b"".join(f.readline() for _ in range(300))
        data = small_data_dir("cr_only", train_de=lines.replace(b"\n", b"\r"))
        self.assertFails(self.train(data, "run_cr"), rf"{data}/multi30k/train\.de' ends its lines with CR alone")


class Threads(Base):
    def test_thread_creation_failure_falls_back(self):
        # The most threads --threads allows (4 x the cores), each with a 1 GiB stack, under a 3 GiB
        # address space: most stacks do not fit. The pool keeps some of the threads it could start
        # (warning on stderr) instead of aborting (exit 134).
        threads = 4 * (os.cpu_count() or 1)
        p = run("eval", "--checkpoint", tiny_checkpoint(), "--data-dir", small_data_dir("data_ok"), "--threads",
                str(threads), limit_as=3 << 30, limit_stack=1 << 30, timeout=300)
        self.assertOk(p)
        self.assertRegex(p.stderr, rf"warning: threads: could only start \d+ of {threads} threads")


class NestedJson(Base):
    """A 200,000-deep value in a checkpoint's JSON metadata: a clean error naming the file and the field
    (the metadata entry, or the config field), never a signal, in every command that reads it."""

    def commands(self, path, folder):
        return [("translate", translate(path)),
                ("eval", run("eval", "--checkpoint", path, "--threads", "1")),
                ("inspect", run("inspect", "--checkpoint", path)),
                ("train --resume", resume(folder))]

    def refused_everywhere(self, key, field, message):
        """DEEP as the value of field in metadata[key]: every command fails naming the file, and the
        metadata entry (its JSON is nested too deep) or the field (message)."""
        folder, last = resumable_copy(f"deep_{key}", deep_metadata(key, field))
        for command, p in self.commands(last, folder):
            with self.subTest(command=command):
                self.assertGreaterEqual(p.returncode, 0, f"killed by signal {-p.returncode}")
                self.assertFails(p, rf"{re.escape(last)}.*({key}\b.*nested deeper than \d+ levels|{message})")

    def test_deep_config_value(self):
        self.refused_everywhere("config", "hidden_size", r"model\.hidden_size\b.*not an integer")

    def test_deep_vocabulary_value(self):
        self.refused_everywhere("src_vocab", "version", r'vocab: unsupported "version" an array of 1 item')

    def test_deep_train_state_value(self):
        folder, last = resumable_copy("deep_state", deep_metadata("train_state", "epoch"))
        for command, p in self.commands(last, folder):
            with self.subTest(command=command):
                self.assertGreaterEqual(p.returncode, 0, f"killed by signal {-p.returncode}")
                self.assertNotIn("internal error", p.stderr)
                if command == "train --resume":  # the one command that reads the train state
                    self.assertFails(p, rf"{re.escape(last)}.*train_state\b.*(nested deeper than \d+ levels"
                                        rf"|epoch must be an integer)")

    def test_deep_metrics_line_is_not_an_epoch(self):
        # inspect prints the run's metrics.jsonl beside the checkpoint: a deep line is skipped like a torn one
        folder = os.path.join(TMP, "deep_metrics")
        shutil.copytree(os.path.dirname(tiny_checkpoint()), folder)
        with open(os.path.join(folder, "metrics.jsonl"), "a") as f:
            f.write('{"epoch": ' + DEEP + "}\n")
        p = run("inspect", "--checkpoint", os.path.join(folder, "best.safetensors"))
        self.assertOk(p)
        self.assertNotIn("[", p.stdout.split("epochs (")[1])


class ResumeState(Base):
    def test_a_nan_adam_moment_is_refused_naming_checkpoint_and_tensor(self):
        def nan_moment(header, data):
            name = sorted(k for k in header if k.startswith("optimizer.state.") and k.endswith(".exp_avg"))[0]
            begin, end = header[name]["data_offsets"]
            data[begin:begin + 4] = struct.pack("<f", float("nan"))
            return data
        folder, last = resumable_copy("nan_moment", nan_moment)
        self.assertFails(resume(folder), rf"checkpoint {re.escape(last)}: train_state\.optimizer: "
                                         r"Adam\.load_state_dict: tensor 'state\.\d+\.exp_avg' \([\d, ]+\) holds 1 "
                                         r"non-finite value")

    def test_a_non_finite_learning_rate_is_refused(self):
        def inf_lr(header, data):
            state = json.loads(header["__metadata__"]["train_state"])
            state["scheduler"]["last_lr"] = ["inf"] * len(state["scheduler"]["last_lr"])
            header["__metadata__"]["train_state"] = json.dumps(state)
        folder, last = resumable_copy("inf_lr", inf_lr)
        self.assertFails(resume(folder), rf"checkpoint {re.escape(last)}: train_state\.scheduler: .*last_lr\[0\] = "
                                         r"inf is not a finite learning rate")

    def test_a_stored_corpus_name_is_blamed_on_the_checkpoint(self):
        # probe finding 5: the value came from the checkpoint, so the error names the file and field
        def bogus_corpus(header, data):
            config = json.loads(header["__metadata__"]["config"])
            config["corpus"] = "bogus"
            header["__metadata__"]["config"] = json.dumps(config)
        path = crafted("bogus_corpus", bogus_corpus)
        p = run("eval", "--checkpoint", path, "--threads", "1")
        self.assertFails(p, rf'{re.escape(path)}.*config field corpus = "bogus" must be one of')

    def test_a_run_past_its_last_epoch_says_so(self):
        # probe finding 6: a train state at epoch 10^12, beyond --epochs, once ended silently with exit 0
        def far_epoch(header, data):
            state = json.loads(header["__metadata__"]["train_state"])
            state["epoch"] = 10**12
            header["__metadata__"]["train_state"] = json.dumps(state)
        folder, _ = resumable_copy("far_epoch", far_epoch)
        p = resume(folder)
        self.assertNotIn("internal error", p.stderr)
        self.assertRegex(p.stdout + p.stderr, r"(?s)1000000000000.*--epochs|--epochs.*1000000000000")


class Probes(Base):
    """Probe findings 1-4 of issue 28."""

    def test_a_beam_wider_than_the_vocabulary_is_refused_up_front(self):
        header, _ = read_safetensors(tiny_checkpoint())
        vocab = len(json.loads(header["__metadata__"]["tgt_vocab"])["tokens"])
        p = translate(tiny_checkpoint(), "--beam", "1000000", limit_as=1 << 30)
        self.assertFails(p, rf"--beam 1000000 is wider than the target vocabulary of {re.escape(tiny_checkpoint())} "
                            rf"\({vocab} tokens\): give --beam {vocab} or less", status=2)
        self.assertOk(translate(tiny_checkpoint(), "--beam", str(vocab)))

    def test_subset_still_checks_the_alignment(self):
        def first(name, n):
            with open(os.path.join(DATA, "multi30k", name), "rb") as f:
                return b"".join(f.readline() for _ in range(n))
        data = small_data_dir("misaligned", train_de=first("train.de", 2000), train_en=first("train.en", 1999))
        p = run("train", "--preset", "default", "--vocab", "word", "--embed", "8", "--hidden", "8", "--threads", "1",
                "--quiet", "--epochs", "1", "--subset", "300", "--data-dir", data, "--out", os.path.join(TMP, "run_mis"))
        self.assertFails(p, rf"'{re.escape(data)}/multi30k/train\.de' has 2000 lines but "
                            rf"'{re.escape(data)}/multi30k/train\.en' has 1999")

    def test_lines_too_long_for_sentencepiece(self):
        long_lines = lambda word: (" ".join([word] * 1000) + "\n").encode() * 300  # 300 lines of 5-8 KB
        data = small_data_dir("long_lines", train_de=long_lines("Hund"), train_en=long_lines("dog"))
        p = run("train", "--preset", "default", "--vocab", "unigram:200", "--embed", "8", "--hidden", "8", "--threads",
                "1", "--quiet", "--epochs", "1", "--data-dir", data, "--out", os.path.join(TMP, "run_long"))
        if "no SentencePiece support" in p.stderr:
            self.skipTest("this build has no SentencePiece")
        self.assertFails(p, r"no training sentence is short enough for the SentencePiece trainer, which skips "
                            r"sentences longer than 4192 bytes; split the corpus into shorter lines")

    def test_write_errors_carry_the_system_reason(self):
        # a file size limit makes the PNG write fail as a full disk does, with the system's reason
        out = os.path.join(TMP, "heatmaps_small_disk")
        os.makedirs(out)
        p = translate(tiny_checkpoint(), "--heatmaps", out, limit_file=4096)
        self.assertFails(p, rf"write_heatmap_(png|svg): write_file_atomic: cannot write .*{re.escape(out)}.*File too large")
        self.assertEqual([n for n in os.listdir(out) if ".tmp" in n], [])  # the temporary file is removed
        if os.geteuid() != 0:  # root writes into a read-only folder anyway
            ro = os.path.join(TMP, "heatmaps_read_only")
            os.makedirs(ro, mode=0o555)
            p = translate(tiny_checkpoint(), "--heatmaps", ro)
            self.assertFails(p, rf"{re.escape(ro)}.*Permission denied")


def main():
    global SEQGRAD, DATA, TMP
    SEQGRAD, DATA, argv = program_and_data("test_tools_hostile.py")
    TMP = tempfile.mkdtemp(prefix="seqgrad_hostile_")
    try:
        unittest.main(argv=[sys.argv[0], *argv])
    finally:
        if os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            for d in (TMP, Base.tmp):  # Base.tmp: made by test_tools_cli's Base, unused here
                if d:
                    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
