#!/usr/bin/python3
"""`seqgrad serve`: every request has a budget (issue 49 part 2), on the tiny models of serve_common:
  * a request whose decoder rows (sentences x beam) or search state exceed the whole batch budget
    is refused 413 naming the limit (--max-batch-rows, --max-batch-cache-mb) and its value;
  * an explain request (the explorer's: every attention map and energy term) is held to
    --max-explain-sentences and --max-explain-beam (422 naming them), joins the running search
    instead of stopping it: a plain request sent while a long explain request decodes is answered
    first, and the explain answer is the same as when it decodes alone;
  * a source sentence longer than --max-src-bytes is refused (413) before it is tokenized, on
    every route, and a 400 KB sentence under the body limit is refused by the default bound;
  * a request whose sentence cannot be encoded (a source beyond a learned position table) fails
    alone: the requests decoding beside it get their translations.
No timing is asserted: "answered first" is the order the answers arrive in.
Usage: test_tools_serve_budget.py PATH/TO/seqgrad DATA_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import (TINY_TRANSFORMER, Server, quantize, test_sentences, train_tiny,  # noqa: E402
                          translate_cli)
from test_tools_cli import program_and_data  # noqa: E402

SEQGRAD = None
DATA = None
TMP = tempfile.mkdtemp(prefix="seqgrad_serve_budget_")


def checkpoint():
    return train_tiny(SEQGRAD, DATA, TMP)


def int8_checkpoint():
    return quantize(SEQGRAD, checkpoint(), os.path.join(TMP, "int8.safetensors"))


def learned_transformer():
    """The tiny Transformer with a learned position table (1024 positions)."""
    return train_tiny(SEQGRAD, DATA, TMP, run="transformer_learned",
                      flags=[*TINY_TRANSFORMER, "--positional", "learned"])


def wait_for_metric(server, line):
    """Waits until the server's /metrics holds `line` (as "name value")."""
    deadline = time.monotonic() + 20
    while line + "\n" not in server.request("/metrics")[2]:
        if time.monotonic() > deadline:
            raise AssertionError(f"/metrics never said {line!r}")
        time.sleep(0.002)


class Base(unittest.TestCase):
    maxDiff = None
    server = None
    flags = []

    @classmethod
    def setUpClass(cls):
        cls.server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", *cls.flags)

    @classmethod
    def tearDownClass(cls):
        status, _, err = cls.server.stop()
        assert status == 0, f"the server exited with {status}:\n{err}"

    def post(self, body, path="/v1/translate", **kw):
        return self.server.request(path, body=body, **kw)

    def assertError(self, answer, status, field, pattern):
        got, _, body = answer
        self.assertEqual(got, status, body)
        self.assertEqual(body["status"], "error", body)
        self.assertEqual(body.get("field", ""), field, body)
        self.assertRegex(body["error"], pattern)


class BatchBudget(Base):
    flags = ["--max-batch-rows", "8", "--max-batch-cache-mb", "1", "--max-explain-beam", "16"]

    def test_rows_over_the_whole_budget_are_refused_naming_the_limit(self):
        sentences = test_sentences(DATA, 3)
        self.assertError(self.post({"src": sentences, "beam": 3}), 413, "beam",
                         r"the request needs 9 decoder rows \(3 sentences x beam 3\), more than the server decodes "
                         r"at once \(--max-batch-rows 8\)")
        self.assertError(self.post({"src": test_sentences(DATA, 9)}), 413, "src",
                         r"needs 9 decoder rows \(9 sentences x beam 1\).*--max-batch-rows 8")
        # an explain request counts its rows too
        self.assertError(self.post({"src": sentences[:1], "beam": 9, "explain": True}), 413, "beam",
                         r"needs 9 decoder rows \(1 sentence x beam 9\)")
        status, _, body = self.post({"src": sentences[:2], "beam": 4})  # 8 rows: the whole budget
        self.assertEqual(status, 200, body)
        self.assertEqual([t["translation"] for t in body["translations"]],
                         translate_cli(SEQGRAD, checkpoint(), sentences[:2], "--beam", "4"))

    def test_search_state_over_the_budget_is_refused_naming_the_limit(self):
        # the tiny GRU (H = 32): at least 4H = 128 floats per source token and row, so 30 sentences
        # of 200 tokens (and <eos>) hold at least 30 * 201 * 128 * 4 bytes = 3.1 MB; two of them at
        # most (4H + A + L * H) per token, with A <= 2H and L <= 4: 2 * 201 * 320 * 4 = 0.5 MB
        long = " ".join(["Hund"] * 199) + "."
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--max-batch-cache-mb", "1",
                        "--max-src-tokens", "400")
        try:
            got = server.request("/v1/translate", body={"src": [long] * 30})
            self.assertError(got, 413, "src", r"the request's search state takes up to \d+\.\d MiB \(30 sentences x "
                                              r"beam 1, \d+ output tokens at most\), more than the server holds at "
                                              r"once \(--max-batch-cache-mb 1\)")
            self.assertEqual(server.request("/v1/translate", body={"src": [long] * 2})[0], 200)
        finally:
            self.assertEqual(server.stop()[0], 0)


class ExplainLimits(Base):
    def test_explain_is_held_to_its_sentences_and_beam(self):
        sentences = test_sentences(DATA, 2)
        self.assertError(self.post({"src": sentences, "explain": True}), 422, "src",
                         r"src has 2 sentences: give 1 to 1 with explain \(--max-explain-sentences\)")
        self.assertError(self.post({"src": sentences[:1], "beam": 6, "explain": True}), 422, "beam",
                         r"beam = 6 is more than the server gives an explain request \(--max-explain-beam 5\)")
        status, _, body = self.post({"src": sentences, "beam": 6})  # the limits are explain's only
        self.assertEqual(status, 200, body)
        status, _, body = self.post({"src": sentences[:1], "beam": 5, "explain": True})
        self.assertEqual(status, 200, body)
        self.assertIn("beam_tree", body["translations"][0])
        self.assertIn("internals", body["translations"][0])

    def test_the_servers_own_beam_is_held_to_the_limit_too(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--beam", "5",
                        "--max-explain-beam", "4")
        try:
            got = server.request("/v1/translate", body={"src": ["Ein Hund."], "explain": True})
            self.assertError(got, 422, "beam", r"beam = 5 \(the server's --beam\) is more than the server gives an "
                                               r"explain request \(--max-explain-beam 4\)")
        finally:
            self.assertEqual(server.stop()[0], 0)


class ExplainBeside(Base):
    """On the int8 model, whose rows are the same bit for bit in any batch: the explained search
    beside a plain request is the one it has alone."""
    flags = ["--max-explain-beam", "16"]

    @classmethod
    def setUpClass(cls):
        cls.server = Server(SEQGRAD, "--checkpoint", int8_checkpoint(), "--threads", "1", *cls.flags)

    def test_a_plain_request_is_answered_while_an_explain_request_decodes(self):
        """An explain request of 100 steps at beam 16 joins the search; a plain one-sentence request
        sent once it decodes is answered before it (it would wait for the whole explained search if
        that held the decoder), and the explain answer equals the same request decoded alone."""
        sentence = test_sentences(DATA, 1, start=5)
        explain = {"src": sentence, "beam": 16, "min_len": 100, "max_len": 100, "explain": True}
        alone = self.post(explain)
        self.assertEqual(alone[0], 200, alone[2])
        plain_src = test_sentences(DATA, 1, start=9)
        finished = []

        def send(name, body):
            answer = self.post(body)
            finished.append((name, answer))

        first = threading.Thread(target=send, args=("explain", explain))
        first.start()
        wait_for_metric(self.server, "seqgrad_decoding_sentences 1")
        send("plain", {"src": plain_src})
        first.join()
        self.assertEqual([name for name, _ in finished], ["plain", "explain"])
        answers = dict(finished)
        self.assertEqual(answers["plain"][0], 200, answers["plain"][2])
        self.assertEqual([t["translation"] for t in answers["plain"][2]["translations"]],
                         translate_cli(SEQGRAD, int8_checkpoint(), plain_src))
        self.assertEqual(answers["explain"][0], 200, answers["explain"][2])
        got, want = answers["explain"][2]["translations"][0], alone[2]["translations"][0]
        self.assertEqual(got["translation"], want["translation"])
        self.assertEqual(got, want)  # tokens, scores, maps, energies, alternatives, beam tree, internals


class SourceBytes(Base):
    flags = ["--max-src-bytes", "64", "--max-sentences", "4"]

    def test_a_sentence_over_the_byte_bound_is_refused_before_tokenizing(self):
        at_limit = ("Ein Hund " * 8)[:64]
        over = at_limit + "x"
        self.assertEqual(len(at_limit.encode()), 64)
        self.assertEqual(self.post({"src": [at_limit]})[0], 200)
        self.assertError(self.post({"src": ["Ein Hund.", over]}), 413, "src[1]",
                         r"src\[1\] has 65 bytes, more than the server's limit of 64 for one sentence "
                         r"\(--max-src-bytes\)")
        self.assertError(self.post([{"src": over}], path="/translator/translate"), 413, "[0].src",
                         r"\[0\]\.src has 65 bytes.*--max-src-bytes")
        # bytes, not characters: 22 euro signs are 66 bytes
        self.assertError(self.post({"src": ["€" * 22]}), 413, "src[0]", r"has 66 bytes")

    def test_the_default_bound_refuses_a_400_kb_sentence(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1")
        try:
            huge = " ".join(["Hund"] * 80_000)  # 400 KB, under the 1 MiB body limit
            got = server.request("/v1/translate", body={"src": [huge]})
            self.assertError(got, 413, "src[0]", r"src\[0\] has 399999 bytes, more than the server's limit of 4096 "
                                                 r"for one sentence \(--max-src-bytes\)")
            self.assertEqual(server.request("/v1/translate", body={"src": ["Ein Hund."]})[0], 200)
        finally:
            self.assertEqual(server.stop()[0], 0)


class FailingRequestAlone(unittest.TestCase):
    def test_a_source_beyond_the_position_table_fails_only_its_request(self):
        """A Transformer with a learned table of 1024 positions: a 1,100-token source cannot be
        encoded; it fails (5xx) while the requests decoding beside it get `translate`'s answers."""
        model = learned_transformer()
        server = Server(SEQGRAD, "--checkpoint", model, "--threads", "1", "--max-src-tokens", "2000",
                        "--max-src-bytes", "100000", "--max-wait-ms", "300", "--max-batch-tokens", "4096")
        try:
            good = test_sentences(DATA, 3, start=40)
            answers = {}

            def send(name, body):
                answers[name] = server.request("/v1/translate", body=body)

            threads = [threading.Thread(target=send, args=(i, {"src": [s]})) for i, s in enumerate(good)]
            threads.append(threading.Thread(target=send, args=("bad", {"src": [" ".join(["Hund"] * 1100)]})))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertGreaterEqual(answers["bad"][0], 500, answers["bad"])
            want = translate_cli(SEQGRAD, model, good)
            for i in range(len(good)):
                self.assertEqual(answers[i][0], 200, answers[i])
                self.assertEqual(answers[i][2]["translations"][0]["translation"], want[i])
            self.assertEqual(server.request("/v1/translate", body={"src": good[:1]})[0], 200)
        finally:
            self.assertEqual(server.stop()[0], 0)


def main():
    global SEQGRAD, DATA
    SEQGRAD, DATA, argv = program_and_data("test_tools_serve_budget.py")
    p = subprocess.run([SEQGRAD, "serve", "--checkpoint", "x", "--port", "0"], capture_output=True, text=True)
    if "built without an HTTP server" in p.stderr:
        print("SKIP: this build has no HTTP server (cpp-httplib, libcpp-httplib-dev, missing)")
        sys.exit(77)
    try:
        unittest.main(argv=[sys.argv[0], *argv])
    finally:
        if os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
