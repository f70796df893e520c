#!/usr/bin/python3
"""A sentence's translation and scores are the same to the last bit alone, in any `seqgrad
translate` batch and under any `seqgrad serve` load, for every model: a GRU and a Transformer,
float32 and int8 (docs/deployment.md#batch-invariance).

Four tiny models (tests/serve_common.py's GRU and Transformer, trained in seconds, and their
`seqgrad quantize` copies) translate 16 test2016 sentences of mixed lengths alone (one call per
sentence) and in batches of 2, 5 and 16 (the sentences as the arguments of one call, decoded
together, each source padded to its batch's longest), greedy and with beam 4, --json. Every field
of every answer is the same bit for bit: translation, n-best, every score, token log-probability
and attention weight, the floats compared as the hex of their bits.
  * int8 products quantize each activation row with its own range (ops/quantized.h) and sum in
    int32, exactly.
  * Every float32 product (all of the float models', and the int8 Transformer's attention
    projections and tied output layer) runs under BatchInvariantMode (ops/batch_invariant.h): one
    kernel whose order for an element depends on the length of its sum alone, not on the rows
    beside it, and zero-weight terms of a padded source leave it as it was. With the kernels
    chosen by row count instead (SEQGRAD_DECODE_GEMM=blas, as before) the float32 models' scores
    move in the last bits for most sentences, and this test fails (docs/results.md#batch-invariance).
Then `seqgrad serve` with the four models and continuous batching answers the same sentences sent
all at once by concurrent clients (each sentence alone, and in requests of four), greedy and beam 4:
the decoder steps mix requests, lengths and steps, and every answer is the sentence's alone, bit for
bit.
Usage: test_tools_batch_invariance.py PATH/TO/seqgrad DATA_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import TINY_TRANSFORMER, Server, quantize, test_sentences, train_tiny  # noqa: E402

SEQGRAD = DATA = None
TMP = tempfile.mkdtemp(prefix="seqgrad_batch_invariance_")
BATCH_SIZES = (2, 5, 16)
BEAMS = (1, 4)
# The fields a served answer shares with translate --json's: the tokens, every score and the
# attention's summary (coverage, entropy, diagonal distance).
SCORED_FIELDS = ("translation", "tgt_tokens", "score", "log_prob", "token_log_probs", "nbest", "attention")


def exact(value):
    """value with every float replaced by the hex of its bits: == is then equality to the last bit
    (and tells -0.0 from 0.0)."""
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, list):
        return [exact(v) for v in value]
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    return value


def translate_json(checkpoint, sentences, beam):
    """translate --json's answers for the sentences, decoded as one batch."""
    p = subprocess.run([SEQGRAD, "translate", "--checkpoint", checkpoint, "--json", "--beam", str(beam),
                        "--nbest", str(beam), "--threads", "2", *sentences], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"translate failed:\n{p.stdout}\n{p.stderr}")
    answers = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(answers) == len(sentences), p.stdout
    for a in answers:
        del a["line"]  # the sentence's place in its call
    return [exact(a) for a in answers]


def scored(answer):
    return {field: answer[field] for field in SCORED_FIELDS}


class BatchInvariance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        gru = train_tiny(SEQGRAD, DATA, TMP)
        transformer = train_tiny(SEQGRAD, DATA, TMP, run="transformer", flags=TINY_TRANSFORMER)
        cls.models = {
            "gru float32": gru,
            "gru int8": quantize(SEQGRAD, gru, os.path.join(TMP, "int8.safetensors")),
            "transformer float32": transformer,
            "transformer int8": quantize(SEQGRAD, transformer, os.path.join(TMP, "transformer.int8.safetensors")),
        }
        cls.sentences = test_sentences(DATA, 16)
        cls.alone = {(name, beam): [translate_json(path, [s], beam)[0] for s in cls.sentences]
                     for name, path in cls.models.items() for beam in BEAMS}

    def test_translate_batches_bit_for_bit(self):
        for name, path in self.models.items():
            for beam in BEAMS:
                alone = self.alone[name, beam]
                self.assertGreater(len({a["translation"] for a in alone}), 4, f"{name}: a degenerate model")
                for size in BATCH_SIZES:
                    batched = [a for i in range(0, len(self.sentences), size)
                               for a in translate_json(path, self.sentences[i:i + size], beam)]
                    for i, (one, together) in enumerate(zip(alone, batched)):
                        with self.subTest(model=name, beam=beam, batch=size, sentence=i):
                            self.assertEqual(together, one)

    def test_serve_under_load_bit_for_bit(self):
        names = list(self.models)
        server = Server(SEQGRAD, "--checkpoint", *self.models.values(), "--threads", "1", "--max-wait-ms", "200",
                        "--max-batch-sentences", "64", "--queue-size", "1024")  # every request queued, none refused
        try:
            for beam in BEAMS:
                # every model at once: each sentence alone, and the sentences again four to a request
                requests = [(m, [s]) for m in range(len(names)) for s in self.sentences]
                requests += [(m, self.sentences[i:i + 4]) for m in range(len(names))
                             for i in range(0, len(self.sentences), 4)]
                answers = [None] * len(requests)
                start = threading.Barrier(len(requests))

                def client(i):
                    model, src = requests[i]
                    start.wait()
                    answers[i] = server.request("/v1/translate", body={"src": src, "model": model, "beam": beam,
                                                                      "nbest": beam}, timeout=120)

                threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                for (model, src), (status, _, body) in zip(requests, answers):
                    self.assertEqual(status, 200, body)
                    for sentence, got in zip(src, body["translations"]):
                        with self.subTest(model=names[model], beam=beam, request_size=len(src), sentence=sentence):
                            self.assertEqual(got["src"], sentence)
                            want = self.alone[names[model], beam][self.sentences.index(sentence)]
                            self.assertEqual(scored(exact(got)), scored(want))
            metrics = server.request("/metrics")[2]
        finally:
            self.assertEqual(server.stop()[0], 0)
        steps = int(re.search(r"seqgrad_step_sentences_count (\d+)", metrics).group(1))
        alone = int(re.search(r'seqgrad_step_sentences_bucket\{le="1"\} (\d+)', metrics).group(1))
        self.assertLess(alone, steps, metrics)  # decoder steps held several requests' sentences


if __name__ == "__main__":
    SEQGRAD, DATA = sys.argv[1], sys.argv[2]
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        if os.environ.get("SEQGRAD_KEEP_TMP") != "1":
            shutil.rmtree(TMP, ignore_errors=True)
