"""Shared by the `seqgrad serve` suites (test_tools_serve.py, test_tools_serve_browser.py) and
bench/serve_load.py: a tiny checkpoint trained once, a server on an ephemeral port, and JSON over
urllib (loopback only)."""
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request

# Small enough to train in seconds, large enough that its translations end with <eos> (the explorer
# steps to it) instead of repeating <unk> up to the length limit.
TINY = ["--preset", "default", "--vocab", "word", "--embed", "32", "--hidden", "32", "--batch-size", "32",
        "--threads", "1", "--quiet", "--subset", "512", "--truncate", "12", "--lr", "0.005", "--lr-gamma", "1.0",
        "--min-freq", "2"]


# The same data as a Transformer of width 32 (2 + 2 layers, 4 heads).
TINY_TRANSFORMER = ["--architecture", "transformer", "--layers", "2", "--heads", "4", "--ffn-size", "64",
                    "--lr", "0.002"]


def train_tiny(seqgrad, data, folder, epochs=8, run="run", flags=()):
    """A tiny model's last checkpoint (E = H = 32, 512 pairs, 8 epochs), trained once per folder and run
    name; flags are added after the tiny ones (TINY_TRANSFORMER: the same size as a Transformer)."""
    path = os.path.join(folder, run, "last.safetensors")
    if not os.path.exists(path):
        p = subprocess.run([seqgrad, "train", *TINY, *flags, "--epochs", str(epochs), "--data-dir", data, "--out",
                            os.path.join(folder, run)], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise AssertionError(f"training failed:\n{p.stdout}\n{p.stderr}")
    return path


def quantize(seqgrad, checkpoint, out):
    if not os.path.exists(out):
        p = subprocess.run([seqgrad, "quantize", "--checkpoint", checkpoint, "--out-file", out], capture_output=True,
                           text=True, timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"quantize failed:\n{p.stdout}\n{p.stderr}")
    return out


def test_sentences(data, count, start=0, max_words=15):
    """`count` German sentences of test2016 from line `start` on, of at most `max_words` words (so that
    no tiny model truncates them: the server refuses what `translate` would cut)."""
    with open(os.path.join(data, "multi30k", "test2016.de"), encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return [s for s in lines[start:] if len(s.split()) <= max_words][:count]


def overlap(a, b):
    """Two attentions' agreement recomputed from their rows (docs/attention.md): the mean over rows of
    sum_j min(a_ij, b_ij)."""
    assert len(a) == len(b) and all(len(x) == len(y) for x, y in zip(a, b)), "the maps have other shapes"
    return sum(sum(min(x, y) for x, y in zip(ra, rb)) for ra, rb in zip(a, b)) / len(a)


def mean_entropy(rows):
    """The mean over rows of -sum_j w_j ln w_j (0 ln 0 = 0), in nats."""
    return sum(-sum(w * math.log(w) for w in row if w > 0) for row in rows) / len(rows)


# Loopback only: no proxy from the environment (http_proxy) may see the requests.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Server:
    """`seqgrad serve --port 0 ...` until stop(); url is http://127.0.0.1:PORT."""

    def __init__(self, seqgrad, *args):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([seqgrad, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://[0-9.]+:(\d+))/", line)
        if not m:
            self.proc.kill()
            self.log.seek(0)
            raise AssertionError(f"the server did not start: {line!r}\n{self.log.read()}")
        self.url, self.port = m.group(1), int(m.group(2))

    def request(self, path, body=None, raw=None, timeout=60):
        """(status, headers, parsed JSON or text) of GET path, or of POST body (JSON) / raw (bytes)."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with OPENER.open(req, timeout=timeout) as r:
                status, headers, text = r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            status, headers, text = e.code, e.headers, e.read().decode()
        kind = headers.get("Content-Type", "")
        return status, headers, json.loads(text) if kind.startswith("application/json") else text

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig; returns (exit status, rest of stdout, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out = self.proc.stdout.read()
        status = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        self.log.seek(0)
        err = self.log.read()
        self.log.close()
        return status, out, err


def translate_cli(seqgrad, checkpoint, sentences, *flags):
    """`seqgrad translate`'s output lines for the sentences (given as arguments: one batch)."""
    p = subprocess.run([seqgrad, "translate", "--checkpoint", checkpoint, "--threads", "1", *flags, *sentences],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"translate failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout.splitlines()


# Request fields, each of which can carry a hostile value (both routes).
TRANSLATE_FIELDS = ["src", "model", "beam", "nbest", "max_len", "min_len", "length_penalty", "length_penalty_type",
                    "coverage_penalty", "alignment", "attention", "explain"]


def nested(depth):
    """A JSON array nested `depth` levels deep, as bytes."""
    return b"[" * depth + b"]" * depth


def hostile_bodies(max_body_bytes):
    """(route, raw body, status) of bodies an attacker might send, each no larger than max_body_bytes:
    nesting far beyond a request's depth in every field of both routes (60,000 levels crashed the
    server once), huge and overflowing numbers, invalid UTF-8, duplicate keys, a key as long as the
    body, wrong types. The server must answer each with its 4xx and a bounded message."""
    deep = max(16, min(60_000, (max_body_bytes - 200) // 2))  # as deep as the limit allows
    v1, onmt = "/v1/translate", "/translator/translate"
    cases = []
    for field in TRANSLATE_FIELDS:
        def body(value):  # the request with `field` set to value (and a good src beside any other field)
            return b'{%s"%s": %s}' % (b'' if field == "src" else b'"src": ["Hund"], ', field.encode(), value)
        cases.append((v1, body(nested(deep)), 400))
        cases.append((v1, body(nested(5)), 422))  # within the depth limit: the field's type is wrong
        cases.append((v1, body(b'{"a": {"b": [1e308]}}'), 422))
    cases += [
        (v1, nested(deep), 400),
        (v1, b'{"src": [%s]}' % nested(deep - 1), 400),
        (v1, b'{"src": ["Hund"], "beam": 1e999}', 400),           # overflows a double
        (v1, b'{"src": ["Hund"], "beam": 1e308}', 422),
        (v1, b'{"src": ["Hund"], "beam": -99999999999999999999999}', 422),
        (v1, b'{"src": ["Hund"], "length_penalty": 1' + b"0" * 400 + b'}', 400),  # 1e400 overflows too
        (v1, b'{"src": ["Hund"], "src": ["Katze"]}', 400),       # duplicate key
        (v1, b'{"src": ["Hund"], "%s": 1}' % (b"k" * (max_body_bytes // 2)), 422),
        (v1, b'{"src": ["Hund"], "' + b"\\u0001" * 80 + b'": 1}', 422),  # escapes: 6 characters each when shown
        (v1, b'{"src": ["Hund"], "alignment": "%s"}' % (b"x" * (max_body_bytes // 2)), 422),
        (v1, b'{"src": ["Ein \xc3"]}', 400),                         # a character cut short
        (v1, b'{"src": ["\xf4\x90\x80\x80"]}', 400),                 # above U+10FFFF
        (v1, b'{"src": ["' + b"\xe2\x82\xac" * (max_body_bytes // 8) + b'\xff"]}', 400),
        (v1, b'{"src": ["Hund"' + b"," * 1000 + b']}', 400),
        (v1, b'{"src": ["Hund"], "explain": null}', 422),
        (v1, b'{"src": [null]}', 422),
        (v1, b'{"src": [{"src": "Hund"}]}', 422),
        (onmt, nested(deep), 400),
        (onmt, b'[{"src": %s}]' % nested(deep - 2), 400),
        (onmt, b'[{"src": "Hund", "id": %s}]' % nested(deep - 2), 400),
        (onmt, b'[{"src": "Hund", "id": [[[1]]]}]', 422),
        (onmt, b'[{"src": "Hund", "src": "Katze"}]', 400),
        (onmt, b'[{"src": "Hund", "id": 1e999}]', 400),
    ]
    return [case for case in cases if len(case[1]) <= max_body_bytes]
