#!/usr/bin/python3
"""End-to-end tests of `seqgrad serve` over HTTP (loopback, an ephemeral port), on a tiny model
trained once (E = H = 16, 256 pairs) and its int8 quantization:
  * translations over HTTP equal `seqgrad translate`'s for the same checkpoint and options (greedy,
    beam with n-best, int8 served beside float32), on both routes (/v1/translate and OpenNMT-py's /translator/translate);
  * concurrent requests are decoded together (a batch of more than one request's sentences) and
    every answer belongs to its request;
  * bad input gets a 4xx JSON error naming the field, and the server keeps answering: malformed
    JSON, wrong types, invalid UTF-8, empty or too many sentences, a sentence over the length
    limit, unknown fields, a body over the size limit (413); a full queue answers 503 with
    Retry-After; a client that stops sending is cut off after --timeout;
  * SIGTERM lets the request in flight finish, then the server exits 0; bad flags exit 2.
Usage: test_tools_serve.py PATH/TO/seqgrad DATA_DIR
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import (TINY_TRANSFORMER, Server, hostile_bodies, overlap, quantize, test_sentences,  # noqa: E402
                          train_tiny, translate_cli)
from test_tools_cli import program_and_data  # noqa: E402

SEQGRAD = None
DATA = None
TMP = tempfile.mkdtemp(prefix="seqgrad_serve_")


def checkpoint():
    return train_tiny(SEQGRAD, DATA, TMP)


def int8_checkpoint():
    return quantize(SEQGRAD, checkpoint(), os.path.join(TMP, "int8.safetensors"))


class ServeBase(unittest.TestCase):
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
        got, headers, body = answer
        self.assertEqual(got, status, body)
        self.assertEqual(body["status"], "error", body)
        self.assertEqual(body.get("field", ""), field, body)
        self.assertRegex(body["error"], pattern)
        return headers


class Translations(ServeBase):
    def test_same_as_translate_greedy_and_beam(self):
        sentences = test_sentences(DATA, 6)
        status, _, body = self.post({"src": sentences})
        self.assertEqual(status, 200, body)
        expected = translate_cli(SEQGRAD, checkpoint(), sentences)
        self.assertEqual([t["translation"] for t in body["translations"]], expected)
        self.assertEqual([t["src"] for t in body["translations"]], sentences)
        # beam 3 with 2 best: translate --nbest prints "number<TAB>score<TAB>translation"
        status, _, body = self.post({"src": sentences, "beam": 3, "nbest": 2})
        self.assertEqual(status, 200, body)
        lines = translate_cli(SEQGRAD, checkpoint(), sentences, "--beam", "3", "--nbest", "2")
        got = [f"{i + 1}\t{h['score']:.4f}\t{h['translation']}" for i, t in enumerate(body["translations"])
               for h in t["nbest"]]
        self.assertEqual(got, lines)

    def test_int8_checkpoint_beside_the_float_one(self):
        # two checkpoints served side by side (--checkpoint A B): a request's "model" picks one
        sentences = test_sentences(DATA, 4, start=10)
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), int8_checkpoint(), "--threads", "1")
        try:
            models = server.request("/v1/models")[2]["models"]
            answers = [server.request("/v1/translate", body={"src": sentences, "model": m}) for m in [0, 1]]
        finally:
            self.assertEqual(server.stop()[0], 0)
        self.assertEqual([m["name"] for m in models], [checkpoint(), int8_checkpoint()])
        for (status, _, body), path in zip(answers, [checkpoint(), int8_checkpoint()]):
            self.assertEqual(status, 200, body)
            self.assertEqual(body["model"], path)
            self.assertEqual([t["translation"] for t in body["translations"]], translate_cli(SEQGRAD, path, sentences))

    def test_a_transformer_beside_a_gru(self):
        # both architectures served together, the Transformer also in int8: each answer is
        # `seqgrad translate`'s (greedy and beam 3)
        transformer = train_tiny(SEQGRAD, DATA, TMP, run="transformer", flags=TINY_TRANSFORMER)
        transformer_int8 = quantize(SEQGRAD, transformer, os.path.join(TMP, "transformer.int8.safetensors"))
        paths = [checkpoint(), transformer, transformer_int8]
        sentences = test_sentences(DATA, 4, start=20)
        server = Server(SEQGRAD, "--checkpoint", *paths, "--threads", "1")
        try:
            answers = {(m, beam): server.request("/v1/translate", body={"src": sentences, "model": m, "beam": beam})
                       for m in range(len(paths)) for beam in [1, 3]}
            models = server.request("/v1/models")[2]["models"]
        finally:
            self.assertEqual(server.stop()[0], 0)
        self.assertEqual([(m["architecture"], m["attention"]) for m in models],
                         [("gru", "additive"), ("transformer", "multihead"), ("transformer", "multihead")])
        for (m, beam), (status, _, body) in answers.items():
            self.assertEqual(status, 200, body)
            path = paths[m]
            self.assertEqual([t["translation"] for t in body["translations"]],
                             translate_cli(SEQGRAD, path, sentences, "--beam", str(beam)))

    def test_side_by_side_a_gru_and_a_transformer(self):
        # one sentence through both: each translation is `seqgrad translate`'s, the Transformer is
        # replayed along the GRU's output (its rows the GRU's), and each head's agreement is the overlap
        # recomputed here from the answer's weights
        transformer = train_tiny(SEQGRAD, DATA, TMP, run="transformer", flags=TINY_TRANSFORMER)
        transformer_int8 = quantize(SEQGRAD, transformer, os.path.join(TMP, "transformer.int8.safetensors"))
        sentence = test_sentences(DATA, 1, start=30)[0]
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), transformer, transformer_int8, "--threads", "1")
        try:
            answer = self.post_to(server, {"src": sentence, "models": [transformer, checkpoint()]})
            by_index = self.post_to(server, {"src": sentence, "models": [0, 1], "beam": 3})
            errors = [server.request("/v1/side_by_side", body=b) for b in [
                {"src": sentence, "models": [1, 2]}, {"src": sentence, "models": ["nope.safetensors", 1]},
                {"src": sentence, "models": [0]}, {"src": sentence, "nbest": 2}, {"models": [0, 1]}]]
        finally:
            self.assertEqual(server.stop()[0], 0)
        self.assertEqual(answer["gru"]["translation"], translate_cli(SEQGRAD, checkpoint(), [sentence])[0])
        self.assertEqual(answer["transformer"]["translation"], translate_cli(SEQGRAD, transformer, [sentence])[0])
        self.assertEqual(by_index["gru"]["translation"],
                         translate_cli(SEQGRAD, checkpoint(), [sentence], "--beam", "3")[0])
        for a in (answer, by_index):
            gru, replayed = a["gru"], a["transformer_on_gru_output"]
            self.assertEqual((gru["model"], a["transformer"]["model"], replayed["model"]), (0, 1, 1))
            self.assertEqual(replayed["tgt_tokens"], gru["tgt_tokens"])
            self.assertEqual(a["same_output"], a["transformer"]["tgt_tokens"] == gru["tgt_tokens"])
            heads = replayed["attention"]["heads"]
            self.assertEqual((heads["tgt"], heads["src"]), (gru["attention"]["tgt"], gru["attention"]["src"]))
            for layer, maps in enumerate(heads["cross"]):
                for head, c in enumerate(maps):
                    self.assertAlmostEqual(a["agreement"]["heads"][layer][head],
                                           overlap(c["weights"], gru["attention"]["weights"]), places=5)
                average = [[sum(col) / len(maps) for col in zip(*rows)] for rows in zip(*[c["weights"] for c in maps])]
                self.assertAlmostEqual(a["agreement"]["average"][layer],
                                       overlap(average, gru["attention"]["weights"]), places=5)
        self.assertError(errors[0], 422, "models", r"side by side takes one GRU and one Transformer, got "
                         r"'.*transformer/last.safetensors' \(transformer\) and '.*int8.safetensors' \(transformer\)")
        self.assertError(errors[1], 422, "models[0]", r"no served model is named \"nope.safetensors\" \(served: "
                         r"'.*' \(gru\), '.*' \(transformer\), '.*' \(transformer\)\)")
        self.assertError(errors[2], 422, "models", r"models must be a list of two served models")
        self.assertError(errors[3], 422, "nbest", r"unknown field 'nbest'")
        self.assertError(errors[4], 422, "src", r"no 'src'")

    def post_to(self, server, body):
        status, _, answer = server.request("/v1/side_by_side", body=body)
        self.assertEqual(status, 200, answer)
        return answer

    def test_side_by_side_needs_both_architectures(self):
        self.assertError(self.post({"src": "Ein Hund."}, path="/v1/side_by_side"), 422, "models",
                         r"side by side needs a GRU and a Transformer checkpoint served; this server serves "
                         r"'.*last.safetensors' \(gru\)")

    def test_opennmt_route(self):
        sentences = test_sentences(DATA, 3, start=20)
        status, _, body = self.post([{"src": s, "id": 100} for s in sentences], path="/translator/translate")
        self.assertEqual(status, 200, body)
        self.assertEqual(len(body), 1)  # one list per n-best rank, one item per input
        self.assertEqual([r["src"] for r in body[0]], sentences)
        self.assertEqual([r["tgt"] for r in body[0]], translate_cli(SEQGRAD, checkpoint(), sentences))
        self.assertEqual({r["n_best"] for r in body[0]}, {1})
        self.assertTrue(all(isinstance(r["pred_score"], float) for r in body[0]))

    def test_alignment_attention_and_explain(self):
        # the sentence's object is translate --json's (docs/outputs.md), plus energies and alternatives
        status, _, body = self.post({"src": ["Ein Hund läuft."], "alignment": "hard", "explain": True})
        self.assertEqual(status, 200, body)
        t = body["translations"][0]
        line = json.loads(subprocess.run([SEQGRAD, "translate", "--checkpoint", checkpoint(), "--threads", "1", "--json",
                                          "--alignment", "hard", "Ein Hund läuft."], capture_output=True, text=True,
                                         timeout=60).stdout)
        self.assertEqual({k: v for k, v in t.items() if k not in ("energies", "alternatives", "internals")},
                         {k: v for k, v in line.items() if k != "line"} | {"attention": t["attention"]})
        a = t["attention"]
        self.assertEqual(a["src"], t["src_tokens"] + ["<eos>"])  # the source as encoded
        self.assertEqual(a["tgt"], t["tgt_tokens"] + ["<eos>"] * t["finished"])
        self.assertEqual({k: v for k, v in a.items() if k != "weights"}, line["attention"])
        self.assertEqual(len(a["weights"]), len(a["tgt"]))
        for row in a["weights"]:
            self.assertEqual(len(row), len(a["src"]))
            self.assertAlmostEqual(sum(row), 1.0, places=5)
        self.assertEqual(len(t["energies"]), len(a["tgt"]))  # additive attention has energies
        self.assertEqual(len(t["alternatives"]), len(a["tgt"]))
        for step, token, log_p in zip(t["alternatives"], a["tgt"], t["token_log_probs"]):
            self.assertEqual(len(step), 5)
            probabilities = [x["probability"] for x in step]
            self.assertEqual(probabilities, sorted(probabilities, reverse=True))
            self.assertEqual(step[0]["token"], token)  # greedy: the step's most probable token
            self.assertAlmostEqual(math.log(step[0]["probability"]), log_p, places=4)
        self.assertAdditiveTermsSumToEnergies(t)
        self.assertNotIn("beam_tree", t)  # greedy

    def assertAdditiveTermsSumToEnergies(self, t):
        """The additive attention's terms: e_ti = v . tanh(q_t + k_i) gives every energy shown."""
        a, internals = t["attention"], t["internals"]
        self.assertEqual(internals["kind"], "additive")
        self.assertEqual(len(internals["query_terms"]), len(a["tgt"]))
        self.assertEqual(len(internals["key_terms"]), len(a["src"]))
        self.assertEqual(len(internals["contexts"]), len(a["tgt"]))
        self.assertEqual(len(t["energies"]), len(a["tgt"]))
        for q, energies in zip(internals["query_terms"], t["energies"]):
            for k, energy in zip(internals["key_terms"], energies):
                self.assertAlmostEqual(sum(v * math.tanh(x + y) for v, x, y in zip(internals["v"], q, k)), energy,
                                       places=4)

    def test_int8_explain_at_beam_4_terms_sum_to_energies(self):
        # int8 products quantize each activation row alone, so the terms the explorer shows (from
        # the pass that scored the beam's rows) add up to the energies of that pass: with one range
        # per batch they did not, the beam being a batch
        server = Server(SEQGRAD, "--checkpoint", int8_checkpoint(), "--threads", "1", "--max-explain-sentences", "3")
        try:
            status, _, body = server.request("/v1/translate", body={"src": test_sentences(DATA, 3, start=40),
                                                                    "beam": 4, "explain": True})
        finally:
            self.assertEqual(server.stop()[0], 0)
        self.assertEqual(status, 200, body)
        for t in body["translations"]:
            self.assertAdditiveTermsSumToEnergies(t)

    def test_explain_with_beam_search_has_the_beam_tree(self):
        status, _, body = self.post({"src": ["Ein Hund läuft."], "beam": 3, "nbest": 2, "explain": True})
        self.assertEqual(status, 200, body)
        t = body["translations"][0]
        nodes = t["beam_tree"]
        self.assertEqual({n["fate"] for n in nodes} - {"kept", "finished", "pruned"}, set())
        for n in nodes:
            self.assertTrue(n["parent"] == -1 or nodes[n["parent"]]["step"] == n["step"] - 1, n)
            self.assertTrue(n["parent"] == -1 or nodes[n["parent"]]["fate"] == "kept", n)
        per_step = {}
        for n in nodes:
            if n["fate"] != "pruned":
                per_step[n["step"]] = per_step.get(n["step"], 0) + 1
        self.assertTrue(all(count <= 2 * 3 for count in per_step.values()), per_step)
        # each n-best hypothesis is a path from the root, ending in a finished node with its score
        # (a hypothesis max_len cut ends in a kept one)
        for hyp in t["nbest"]:
            parent = -1
            for token in hyp["tokens"] + ["<eos>"] * hyp["finished"]:
                found = [i for i, n in enumerate(nodes) if n["parent"] == parent and n["token"] == token
                         and n["fate"] != "pruned"]
                self.assertEqual(len(found), 1, (hyp, token))
                parent = found[0]
            if hyp["finished"]:
                self.assertEqual(nodes[parent]["fate"], "finished")
                self.assertAlmostEqual(nodes[parent]["score"], hyp["score"], places=9)

    def test_search_options_per_request_match_translate(self):
        sentences = test_sentences(DATA, 4, start=30)
        cases = [({"beam": 3, "length_penalty_type": "gnmt", "length_penalty": 0.6, "coverage_penalty": 0.4},
                  ["--beam", "3", "--length-penalty-type", "gnmt", "--length-penalty", "0.6",
                   "--coverage-penalty", "0.4"]),
                 ({"min_len": 4}, ["--min-len", "4"])]
        for options, flags in cases:
            with self.subTest(options=options):
                status, _, body = self.post({"src": sentences} | options)
                self.assertEqual(status, 200, body)
                self.assertEqual([t["translation"] for t in body["translations"]],
                                 translate_cli(SEQGRAD, checkpoint(), sentences, *flags))

    def test_health_models_explorer_and_metrics(self):
        self.assertEqual(self.server.request("/health")[2], {"status": "ok"})
        models = self.server.request("/v1/models")[2]["models"]
        self.assertEqual([(m["model"], m["name"], m["attention"]) for m in models], [(0, checkpoint(), "additive")])
        status, headers, page = self.server.request("/")
        self.assertEqual(status, 200)
        self.assertIn("text/html", headers["Content-Type"])
        self.assertIn("seqgrad attention explorer", page)
        self.assertNotRegex(page, r"(src|href)=\"?(https?:)?//")  # nothing fetched from elsewhere
        self.post({"src": ["Ein Mann."]})
        status, headers, text = self.server.request("/metrics")
        self.assertEqual(status, 200)
        self.assertIn("text/plain", headers["Content-Type"])
        self.assertRegex(text, r'seqgrad_requests_total\{route="/v1/translate",status="200"\} [1-9]')
        for name in ["seqgrad_sentences_total", "seqgrad_queue_sentences", "seqgrad_decoding_sentences",
                     'seqgrad_step_sentences_bucket{le="+Inf"}', "seqgrad_queue_seconds_count",
                     "seqgrad_request_seconds_count"]:
            self.assertRegex(text, re.escape(name) + r" \d")
        self.assertIn("seqgrad_batch_capacity_sentences 32\n", text)  # --max-batch-sentences' default


class Concurrency(ServeBase):
    flags = ["--max-wait-ms", "300", "--max-batch-sentences", "64"]

    def test_concurrent_requests_share_batches_and_get_their_own_answers(self):
        sentences = test_sentences(DATA, 12, start=30)
        expected = dict(zip(sentences, translate_cli(SEQGRAD, checkpoint(), sentences)))
        answers = [None] * len(sentences)

        def client(i):
            answers[i] = self.post({"src": [sentences[i]]})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(sentences))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (status, _, body) in enumerate(answers):
            self.assertEqual(status, 200, body)
            self.assertEqual(body["translations"][0]["src"], sentences[i])
            self.assertEqual(body["translations"][0]["translation"], expected[sentences[i]])
        metrics = self.server.request("/metrics")[2]
        steps = int(re.search(r"seqgrad_step_sentences_count (\d+)", metrics).group(1))
        alone = int(re.search(r'seqgrad_step_sentences_bucket\{le="1"\} (\d+)', metrics).group(1))
        self.assertLess(alone, steps, metrics)  # some decoder step held several requests' sentences

    def test_a_request_joins_a_running_decode_and_leaves_before_it(self):
        """Continuous batching: a short request sent while a long one decodes is answered first (it
        joins the running search at a step boundary instead of waiting for the long one to end),
        and both answers are `seqgrad translate`'s for the same sentences and options."""
        long_src = test_sentences(DATA, 16, start=60)
        long_options = {"beam": 16, "min_len": 100, "max_len": 100}  # 256 rows for 100 steps
        short_src = test_sentences(DATA, 1, start=80)
        finished = {}

        def send(name, body):
            finished[name] = (self.post(body), time.monotonic())

        first = threading.Thread(target=send, args=("long", {"src": long_src} | long_options))
        first.start()
        deadline = time.monotonic() + 20
        while "seqgrad_decoding_sentences 16\n" not in self.server.request("/metrics")[2]:
            self.assertLess(time.monotonic(), deadline, "the long request never started decoding")
            time.sleep(0.002)
        send("short", {"src": short_src})
        first.join()
        (long_status, _, long_body), long_done = finished["long"]
        (short_status, _, short_body), short_done = finished["short"]
        self.assertEqual((long_status, short_status), (200, 200), (long_body, short_body))
        self.assertLess(short_done, long_done)
        self.assertEqual([t["translation"] for t in short_body["translations"]],
                         translate_cli(SEQGRAD, checkpoint(), short_src))
        self.assertEqual([t["translation"] for t in long_body["translations"]],
                         translate_cli(SEQGRAD, checkpoint(), long_src, "--beam", "16", "--min-len", "100",
                                       "--max-len", "100"))


class BadInput(ServeBase):
    flags = ["--max-sentences", "3", "--max-src-tokens", "8", "--max-body-bytes", "4096", "--min-len", "2"]

    def test_each_bad_request_names_its_field(self):
        cases = [  # (raw body, status, field, message)
            (b"{\"src\": [", 400, "", r"the request body: not valid JSON"),
            (b"[1, 2", 400, "", r"not valid JSON"),
            (b"{\"src\": [\"Ein \xff Hund\"]}", 400, "", r"not valid UTF-8 \(byte 14 of 23\)"),
            (b"{\"src\": [\"\xed\xa0\x80\"]}", 400, "", r"not valid UTF-8"),  # a UTF-16 surrogate
            (b"\"Ein Hund\"", 400, "", r"must be a JSON object"),
            (b"{}", 422, "src", r"no 'src'"),
            (b"{\"src\": \"Ein Hund\"}", 422, "src", r"src must be a list of strings, got string"),
            (b"{\"src\": []}", 422, "src", r"src has 0 sentences: give 1 to 3"),
            (b"{\"src\": [\"a\", \"b\", \"c\", \"d\"]}", 422, "src", r"src has 4 sentences: give 1 to 3"),
            (b"{\"src\": [\"Hund\", 7]}", 422, "src[1]", r"src\[1\] must be a string, got integer 7"),
            (b"{\"src\": [\"   \"]}", 422, "src[0]", r"src\[0\]: empty"),
            (b"{\"src\": [\"ein zwei drei vier fuenf sechs sieben acht neun\"]}", 422, "src[0]",
             r"src\[0\] has 9 tokens, more than the server's limit of 8 \(--max-src-tokens\)"),
            (b"{\"src\": [\"Hund\"], \"beem\": 2}", 422, "beem", r"unknown field 'beem' in the request \(did you mean beam\?\)"),
            (b"{\"src\": [\"Hund\"], \"beam\": 0}", 422, "beam", r"beam = 0 is out of range \[1, 16\]"),
            (b"{\"src\": [\"Hund\"], \"beam\": \"5\"}", 422, "beam", r"beam must be an integer, got string \"5\""),
            (b"{\"src\": [\"Hund\"], \"beam\": 18446744073709551615}", 422, "beam", r"out of range"),
            (b"{\"src\": [\"Hund\"], \"beam\": 2, \"nbest\": 3}", 422, "nbest", r"nbest = 3 is out of range \[1, 2\]"),
            (b"{\"src\": [\"Hund\"], \"length_penalty\": -1}", 422, "length_penalty", r"a number in \[0, 10\]"),
            (b"{\"src\": [\"Hund\"], \"alignment\": \"fuzzy\"}", 422, "alignment", r"\"hard\", \"soft\" or null"),
            (b"{\"src\": [\"Hund\"], \"length_penalty_type\": \"wu\"}", 422, "length_penalty_type",
             r"\"power\" or \"gnmt\", got \"wu\""),
            (b"{\"src\": [\"Hund\"], \"coverage_penalty\": -0.5}", 422, "coverage_penalty",
             r"a number in \[0, 10\]"),
            (b"{\"src\": [\"Hund\"], \"max_len\": 5, \"min_len\": 6}", 422, "min_len",
             r"min_len = 6 is out of range \[0, 5\]"),
            (b"{\"src\": [\"Hund\"], \"max_len\": 1}", 422, "max_len",  # below the server's --min-len 2
             r"max_len = 1 is below min_len 2"),
            (b"{\"src\": [\"Hund\"], \"attention\": 1}", 422, "attention", r"true or false, got integer 1"),
            (b"{\"src\": [\"Hund\"], \"model\": 1}", 422, "model", r"model = 1 is out of range \[0, 0\]"),
        ]
        for raw, status, field, pattern in cases:
            with self.subTest(body=raw):
                self.assertError(self.post(None, raw=raw), status, field, pattern)
        opennmt = [
            (b"{\"src\": \"Hund\"}", 400, "", r"must be a JSON list"),
            (b"[{\"text\": \"Hund\"}]", 422, "text", r"unknown field 'text' in item \[0\]"),
            (b"[{\"src\": \"Hund\", \"id\": \"x\"}]", 422, "[0].id", r"must be an integer"),
            (b"[]", 422, "", r"the request has 0 items: give 1 to 3"),
        ]
        for raw, status, field, pattern in opennmt:
            with self.subTest(body=raw):
                self.assertError(self.post(None, raw=raw, path="/translator/translate"), status, field, pattern)
        self.assertEqual(self.post({"src": ["Ein Hund."]})[0], 200)  # still serving

    def test_hostile_bodies_get_a_bounded_4xx(self):
        self.expect_hostile_bodies_answered(self.server, 4096)

    def expect_hostile_bodies_answered(self, server, max_body_bytes):
        for route, raw, status in hostile_bodies(max_body_bytes):
            with self.subTest(route=route, body=raw[:80], size=len(raw)):
                got, _, body = server.request(route, raw=raw)
                self.assertEqual(got, status, str(body)[:300])
                self.assertEqual(body["status"], "error")
                self.assertLessEqual(len(body["error"]), 600, body["error"][:300])
                self.assertLessEqual(len(body.get("field", "")), 64)
        self.assertEqual(server.request("/v1/translate", body={"src": ["Ein Hund."]})[0], 200)  # still serving

    def test_hostile_bodies_at_the_default_limit(self):
        """Nesting 60,000 deep in a 120 KB body ended the server with SIGSEGV before parsing had a depth limit."""
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1")
        try:
            self.expect_hostile_bodies_answered(server, 1 << 20)
            deep = b'{"src": ["Hund"], "beam": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
            self.assertError(server.request("/v1/translate", raw=deep), 400, "",
                             r"^the request body: JSON nested deeper than 8 levels$")
            self.assertError(server.request("/v1/translate", raw=b'{"src": ["a"], "src": ["b"]}'), 400, "",
                             r"the key \"src\" appears twice in one object")
            self.assertError(server.request("/v1/translate", raw=b'{"src": ["a"], "' + b"x" * 5000 + b'": 1}'), 422,
                             '"' + "x" * 40 + '"... (5000 bytes)', r"unknown field '\"x{40}\"\.\.\. \(5000 bytes\)'")
        finally:
            status, _, err = server.stop()
            self.assertEqual(status, 0, err)

    def test_body_over_the_limit_and_unknown_routes(self):
        self.assertError(self.post({"src": ["Hund " * 1000]}), 413, "", r"larger than the server's limit")
        self.assertError(self.server.request("/v2/translate"), 404, "", r"no such route")
        self.assertEqual(self.post({"src": ["Ein Hund."]})[0], 200)

    def test_a_client_that_stops_sending_is_cut_off(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--timeout", "1")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"src\"")
                start = time.monotonic()
                answer = b""
                while chunk := s.recv(4096):  # until the server closes the connection
                    answer += chunk
                self.assertLess(time.monotonic() - start, 5)
                self.assertTrue(answer.startswith(b"HTTP/1.1 408"), answer)  # the whole request is late
            self.assertEqual(server.request("/health")[0], 200)
        finally:
            self.assertEqual(server.stop()[0], 0)


def wait_for_queue(server, sentences):
    """Waits until `sentences` sentences wait in the server's queue (its /metrics says so)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if f"seqgrad_queue_sentences {sentences}\n" in server.request("/metrics")[2]:
            return
        time.sleep(0.05)
    raise AssertionError(f"the queue never held {sentences} sentences")


class Lifecycle(unittest.TestCase):
    def test_full_queue_answers_503_with_retry_after(self):
        # the first request waits up to 3 s in the queue for company, holding both places
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--queue-size", "2",
                        "--max-sentences", "2", "--max-wait-ms", "3000")
        try:
            first = []
            t = threading.Thread(target=lambda: first.append(server.request("/v1/translate",
                                                                             body={"src": ["Ein Hund.", "Ein Mann."]})))
            t.start()
            wait_for_queue(server, 2)
            status, headers, body = server.request("/v1/translate", body={"src": ["Eine Frau."]})
            self.assertEqual(status, 503, body)
            self.assertEqual(headers["Retry-After"], "1")
            self.assertRegex(body["error"], r"busy \(2 sentences queued at most\)")
            t.join()
            self.assertEqual(first[0][0], 200)
            self.assertEqual(server.request("/v1/translate", body={"src": ["Eine Frau."]})[0], 200)
        finally:
            self.assertEqual(server.stop()[0], 0)

    def test_sigterm_finishes_the_request_in_flight_then_exits_0(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--max-wait-ms", "3000")
        answer = []
        t = threading.Thread(target=lambda: answer.append(server.request("/v1/translate", body={"src": ["Ein Hund."]})))
        t.start()
        wait_for_queue(server, 1)  # the request waits in the batcher
        status, out, err = server.stop(signal.SIGTERM)
        t.join()
        self.assertEqual(status, 0, err)
        self.assertEqual(answer[0][0], 200, answer)
        self.assertEqual(answer[0][2]["translations"][0]["translation"],
                         translate_cli(SEQGRAD, checkpoint(), ["Ein Hund."])[0])
        self.assertIn("SIGTERM: finishing the requests in flight", err)
        self.assertIn("stopped", out)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        s = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1")
        self.assertEqual(s.stop(signal.SIGINT)[0], 0)

    def test_bad_flags(self):
        def run(*args):
            return subprocess.run([SEQGRAD, "serve", *args], capture_output=True, text=True, timeout=60)
        for args, pattern in [
            (["--port", "70000"], r"--port .*70000"),
            (["--queue-size", "4", "--max-sentences", "8"], r"--queue-size 4 is smaller than --max-sentences 8"),
            (["--max-wait-ms", "-1"], r"--max-wait-ms"),
            (["--max-src-tokens", "0"], r"--max-src-tokens"),
            (["--beam", "0"], r"--beam"),
            (["--portt", "1"], r"unknown option --portt \(did you mean --port\?\)"),
        ]:
            with self.subTest(args=args):
                p = run("--checkpoint", checkpoint(), *args)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertRegex(p.stderr, r"seqgrad serve: error: .*" + pattern)
        p = run("--checkpoint", os.path.join(TMP, "missing.safetensors"))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no checkpoint at", p.stderr)
        busy = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1")
        try:
            p = run("--checkpoint", checkpoint(), "--port", str(busy.port))
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertRegex(p.stderr, r"cannot listen on 127\.0\.0\.1:\d+")
        finally:
            busy.stop()


def main():
    global SEQGRAD, DATA
    SEQGRAD, DATA, argv = program_and_data("test_tools_serve.py")
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
