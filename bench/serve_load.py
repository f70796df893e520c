#!/usr/bin/python3
"""Load test of `seqgrad serve` (loopback only; bounded: each client sends a fixed number of
requests, then the run stops by itself). For each checkpoint (float32, and int8 when --int8 is
given or made with `seqgrad quantize`) and each concurrency (1, 8, 32 clients by default), the
clients send real test2016 sentences, one per request, and the run reports sentences/s, p50 and
p99 latency, the server's CPU time per sentence and its peak RSS; beside it `seqgrad translate` is
run one sentence at a time (one process per sentence, as a script would call it). Every answer is
checked against its request: its "src" must be the sentence sent and its translation the one
`seqgrad translate` gives for it (a lost, duplicated or crossed answer fails the run, exit 1).
float32 translations must equal `seqgrad translate`'s for all the sentences at once. int8 ones are
compared with the sentence's translation alone (asked of the server one sentence at a time, and
checked against `seqgrad translate` one sentence per call); those that differ are counted
("batch-changed"), not failed: before int8 products scaled each activation row by its own range, a
batch's range changed some (docs/results.md#serve-load).

With --soak N, it instead sends N requests from --soak-clients clients to the server of --checkpoint
(float32 or int8, GRU or Transformer): every translation, its score and its token log-probabilities
must equal `seqgrad translate`'s to the bit (batch invariance), and one in ten of them is malformed (bad JSON, invalid UTF-8, wrong types, unknown fields, values out of range,
and the serve test's hostile bodies on both routes: nesting 60,000 deep in every field, overflowing
numbers, duplicate keys, keys as long as the body): every malformed one must get its 4xx with a
bounded message, every other one its translation, the server must keep
running, and its resident memory (VmRSS) after the last request is compared with the memory after
the first tenth (the warm-up); growth above 5% fails the run. One in ten more is over a budget (a
request of more decoder rows than the server decodes at once, a sentence of 400 KB, an explain
request of too many sentences or too large a beam: each its 413 or 422), and one in ten an explain
request of the largest size the server allows (one sentence at beam --max-explain-beam, 100 steps:
its translation, beam tree and internals). With a SentencePiece checkpoint the 400 KB sentences
are what grew the server by 2 GB before a source was bounded by its bytes. Beside it all the while,
80 slow clients (more than the server's 64 HTTP threads) each announce a body of 100,000 bytes and
send one byte a second, reconnecting once cut off (408 after --timeout); a stranger sends a foreign
Host (403), a cross-origin POST (403) and a text/plain body (415); GET /health is probed every
0.2 s. Each must be answered as said, /health within 5 s, and /metrics must count the slow and
refused connections.

With --explain-flood E, it measures the p99 latency of plain one-sentence requests from the most
--clients clients, first alone and then while E clients send explain requests of the largest size
the server allows (as the soak's), and reports both and their ratio (the explain requests join the
running search instead of holding the decoder: within 2x is the aim).

    bench/serve_load.py --seqgrad build/tools/seqgrad --checkpoint runs/default/best.safetensors \\
        [--baseline OLD/seqgrad] [--int8 FILE] [--clients 1,8,32] [--requests 20] [--threads 2] \\
        [--data-dir data] [--json]

With --baseline, another seqgrad program (a build from before a change) serves the same checkpoints
to the same clients in the same run, each load right after the other's, so that both are measured
on the same cores under the same conditions; the rows name their program, and for each program and
model the summary gives sentences/s at the most clients over one client and p99 over p50 latency at
the most clients.
    bench/serve_load.py --checkpoint runs/default/best.safetensors --soak 11000 [--soak-clients 8]
    bench/serve_load.py --checkpoint runs/default/best.safetensors --explain-flood 4 --clients 8 --requests 20

--requests is per client. Figures go into docs/results.md with the command, commit and machine.
"""
import argparse
import http.client
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from serve_common import Server, hostile_bodies, quantize, test_sentences, translate_cli  # noqa: E402


def status_mb(pid, key):
    """A memory line of /proc/PID/status (VmHWM: the peak, VmRSS: now) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb(pid):
    return status_mb(pid, "VmHWM")


def cpu_seconds(pid):
    """The CPU time (user + system) process PID has used so far: a figure that other processes on
    the same cores inflate far less than wall-clock time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


# Malformed requests of the soak, their route and the status each must get: everyday mistakes, and
# the hostile bodies of the serve test (deep nesting in every field, huge numbers, duplicate keys, ...)
# at the default body limit (1 MiB).
MALFORMED = [("/v1/translate", raw, status) for raw, status in [
    (b'{"src": [', 400), (b'[1, 2', 400), (b'{"src": ["Ein \xff Hund"]}', 400), (b'"Ein Hund"', 400),
    (b'{"src": "Ein Hund"}', 422), (b'{"src": []}', 422), (b'{"src": ["Hund", 7]}', 422),
    (b'{"src": ["Hund"], "beem": 2}', 422), (b'{"src": ["Hund"], "beam": 0}', 422),
    (b'{"src": ["Hund"], "length_penalty_type": "wu"}', 422), (b'{"src": ["   "]}', 422)]] + hostile_bodies(1 << 20)
MAX_ERROR_CHARS = 600  # an error message is bounded, whatever the body

# Requests over a budget of the server's defaults (--max-batch-rows 512, --max-src-bytes 4096,
# --max-explain-sentences 1, --max-explain-beam 5), and the status each must get.
EXPLAIN_BEAM, EXPLAIN_STEPS = 5, 100
OVER_BUDGET = [("/v1/translate", json.dumps(body).encode(), status) for body, status in [
    ({"src": ["Ein Hund läuft."] * 64, "beam": 16}, 413),             # 1,024 decoder rows
    ({"src": [" ".join(["Hund"] * 80_000)]}, 413),                    # 400 KB: refused before tokenizing
    ({"src": ["Ein Hund.", "Ein Mann."], "explain": True}, 422),      # explain: one sentence
    ({"src": ["Ein Hund."], "beam": EXPLAIN_BEAM + 1, "explain": True}, 422)]]


def largest_explain(sentence):
    """An explain request of the largest size the server's defaults allow: one sentence at the
    largest beam, decoded for EXPLAIN_STEPS steps (min_len holds <eos> back)."""
    return {"src": [sentence], "beam": EXPLAIN_BEAM, "min_len": EXPLAIN_STEPS, "max_len": EXPLAIN_STEPS,
            "explain": True}


def translate_scores(seqgrad, checkpoint, sentences, threads):
    """Each sentence's score and token log-probabilities from `seqgrad translate --json` (one batch),
    which the server's answers must equal bit for bit whatever the load (batch invariance)."""
    lines = translate_cli(seqgrad, checkpoint, sentences, "--threads", str(threads), "--json")
    return {r["src"]: (r["score"], r["token_log_probs"]) for r in map(json.loads, lines)}


def soak(server, total, clients, sentences, expected, scores):
    """`total` requests from `clients` threads, every tenth malformed; returns the row of figures."""
    counts = {"ok": 0, "malformed": 0, "over_budget": 0, "explain": 0}
    failures = []
    rss = {}
    lock = threading.Lock()
    next_request = [0]

    def client():
        while True:
            with lock:
                k = next_request[0]
                next_request[0] += 1
                if k == total // 10:  # the warm-up is over
                    rss["warm"] = status_mb(server.proc.pid, "VmRSS")
            if k >= total:
                return
            if k % 10 in (8, 9):
                bad = MALFORMED if k % 10 == 9 else OVER_BUDGET
                route, raw, want = bad[(k // 10) % len(bad)]
                status, _, body = server.request(route, raw=raw)
                good = (status == want and isinstance(body, dict) and body.get("status") == "error"
                        and len(body.get("error", "")) <= MAX_ERROR_CHARS)
                kind = "malformed" if k % 10 == 9 else "over_budget"
            elif k % 10 == 4:
                status, _, body = server.request("/v1/translate", body=largest_explain(sentences[k % len(sentences)]))
                got = body["translations"][0] if status == 200 else {}
                good = "beam_tree" in got and "internals" in got and len(got.get("tgt_tokens", [])) == EXPLAIN_STEPS
                kind = "explain"
            else:
                sentence = sentences[k % len(sentences)]
                status, _, body = server.request("/v1/translate", body={"src": [sentence]})
                got = body["translations"][0] if status == 200 else {}
                good = (got.get("src") == sentence and got.get("translation") == expected[sentence] and
                        (got.get("score"), got.get("token_log_probs")) == scores[sentence])  # to the bit
                kind = "ok"
            with lock:
                counts[kind] += 1
                if not good:
                    failures.append((k, status, body))

    wall = run_threads([client] * clients)
    alive = server.request("/health")[0] == 200
    time.sleep(1)  # what the server holds after the load, not the last answers in flight (it releases when idle)
    end = status_mb(server.proc.pid, "VmRSS")
    growth = 100 * (end - rss["warm"]) / rss["warm"]
    return {"requests": total, "translated": counts["ok"], "malformed": counts["malformed"],
            "over_budget": counts["over_budget"], "explain": counts["explain"], "wrong": len(failures),
            "first_wrong": failures[:1], "alive": alive, "rss_warm_mb": rss["warm"], "rss_end_mb": end,
            "rss_growth_pct": growth, "seconds": wall}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_threads(targets):
    """Runs each function in a thread of its own; returns the wall-clock seconds until all end."""
    threads = [threading.Thread(target=t) for t in targets]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start


def load(server, clients, requests, sentences, expected, batch_dependent):
    """Runs `clients` threads of `requests` requests each; returns the row of figures."""
    latencies, failures, changed = [], [], []
    lock = threading.Lock()

    def client(c):
        for r in range(requests):
            sentence = sentences[(c * requests + r) % len(sentences)]
            start = time.monotonic()
            status, _, body = server.request("/v1/translate", body={"src": [sentence]})
            took = time.monotonic() - start
            got = body["translations"][0] if status == 200 else {}
            with lock:
                latencies.append(took)
                if status != 200 or got.get("src") != sentence:
                    failures.append((sentence, status, body))
                elif got.get("translation") != expected[sentence]:
                    (changed if batch_dependent else failures).append((sentence, got.get("translation")))

    wall = run_threads([lambda c=c: client(c) for c in range(clients)])
    return {"clients": clients, "sentences": len(latencies), "sentences_per_s": len(latencies) / wall,
            "p50_ms": 1000 * percentile(latencies, 0.5), "p99_ms": 1000 * percentile(latencies, 0.99),
            "failures": failures, "batch_changed": len(changed)}


def one_at_a_time(seqgrad, checkpoint, sentences, threads):
    """`seqgrad translate` called once per sentence: sentences/s and p50/p99 per call."""
    times = []
    for s in sentences:
        start = time.monotonic()
        translate_cli(seqgrad, checkpoint, [s], "--threads", str(threads))
        times.append(time.monotonic() - start)
    return {"clients": "translate, 1 per call", "sentences": len(times), "sentences_per_s": len(times) / sum(times),
            "p50_ms": 1000 * statistics.median(times), "p99_ms": 1000 * percentile(times, 0.99), "failures": [],
            "batch_changed": 0}


def alone(server, sentences):
    """Each sentence's translation requested by itself (a batch of one)."""
    return {s: server.request("/v1/translate", body={"src": [s]})[2]["translations"][0]["translation"]
            for s in sentences}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqgrad", default="build/tools/seqgrad")
    ap.add_argument("--baseline", help="another seqgrad program measured beside --seqgrad in the same run")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--int8", help="the int8 checkpoint (default: made with seqgrad quantize in a temporary folder)")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=20, help="requests per client (one sentence each)")
    ap.add_argument("--translate-sentences", type=int, default=10, help="sentences for the translate column")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
    ap.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    ap.add_argument("--soak", type=int, default=0, help="the soak test: this many requests, one in ten malformed")
    ap.add_argument("--soak-clients", type=int, default=8)
    ap.add_argument("--explain-flood", type=int, default=0, metavar="E",
                    help="p99 of plain requests alone and beside E clients of the largest explain requests")
    ap.add_argument("--rounds", type=int, default=1, help="--explain-flood: alternated rounds (medians reported)")
    a = ap.parse_args()
    if a.soak:
        sys.exit(run_soak(a))
    if a.explain_flood:
        sys.exit(run_explain_flood(a))
    clients = [int(c) for c in a.clients.split(",")]
    if min(clients) < 1 or max(clients) > 64 or not 1 <= a.requests <= 1000:
        sys.exit("serve_load.py: --clients must lie in [1, 64] and --requests in [1, 1000] (the test is bounded)")
    tmp = tempfile.mkdtemp(prefix="seqgrad_serve_load_")
    checkpoints = {"float32": a.checkpoint,
                   "int8": a.int8 or quantize(a.seqgrad, a.checkpoint, os.path.join(tmp, "int8.safetensors"))}
    sentences = test_sentences(a.data_dir, max(clients) * a.requests)[:200]
    failed = False
    rows = []
    programs = {"baseline": a.baseline, "seqgrad": a.seqgrad} if a.baseline else {"seqgrad": a.seqgrad}
    for kind, ckpt in checkpoints.items():
        int8 = kind == "int8"
        if int8:
            expected = None  # the sentences alone, from the server (below)
        else:
            expected = dict(zip(sentences, translate_cli(a.seqgrad, ckpt, sentences, "--threads", str(a.threads))))
        for c in clients:
            for program_name, program in programs.items():
                row, expected, ok = serve_rows(a, program, ckpt, kind, c, sentences, expected)
                row.update(program=program_name)
                rows.append(row)
                failed = failed or not ok
        row = one_at_a_time(a.seqgrad, ckpt, sentences[:a.translate_sentences], a.threads)
        row.update(kind=kind, peak_rss_mb=float("nan"), program="seqgrad")
        rows.append(row)
    for row in rows:
        if row["failures"]:
            failed = True
            print(f"serve_load.py: {len(row['failures'])} wrong answers ({row['kind']}, {row['clients']} clients), "
                  f"first: {row['failures'][0]}", file=sys.stderr)
        row["failures"] = len(row["failures"])
        if a.json:
            print(json.dumps(row))
    if not a.json:
        print("| program | model | clients | sentences | sentences/s | p50 ms | p99 ms | server CPU ms/sentence | "
              "peak RSS MB | batch-changed |\n|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['program']} | {r['kind']} | {r['clients']} | {r['sentences']} | {r['sentences_per_s']:.1f} | "
                  f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r.get('server_cpu_ms', float('nan')):.2f} | "
                  f"{r['peak_rss_mb']:.0f} | {r['batch_changed']} |")
    for summary in scaling(rows, min(clients), max(clients)):
        print(json.dumps(summary) if a.json else summary["line"])
    sys.exit(1 if failed else 0)


def serve_rows(a, program, ckpt, kind, clients, sentences, expected):
    """One load of `clients` clients on a fresh server of `program`: (its row, the expected answers,
    whether the server behaved). int8's expected answers are the sentences alone, asked of the first
    server (and checked against `seqgrad translate` one sentence per call)."""
    ok = True
    server = Server(program, "--checkpoint", ckpt, "--threads", str(a.threads), "--max-wait-ms", "5",
                    "--http-threads", str(max(64, clients)))
    try:
        if expected is None:
            expected = alone(server, sentences)
            checked = sentences[:a.translate_sentences]
            one_by_one = [translate_cli(a.seqgrad, ckpt, [s], "--threads", str(a.threads))[0] for s in checked]
            if one_by_one != [expected[s] for s in checked]:
                print("serve_load.py: int8 answers for sentences alone differ from seqgrad translate's", file=sys.stderr)
                ok = False
        cpu_before = cpu_seconds(server.proc.pid)
        row = load(server, clients, a.requests, sentences, expected, batch_dependent=kind == "int8")
        row.update(kind=kind, peak_rss_mb=peak_rss_mb(server.proc.pid),
                   server_cpu_ms=1000 * (cpu_seconds(server.proc.pid) - cpu_before) / row["sentences"])
    finally:
        status, _, err = server.stop()
        if status != 0:
            print(f"serve_load.py: the {kind} server of {program} exited with {status}:\n{err}", file=sys.stderr)
            ok = False
    return row, expected, ok


def scaling(rows, fewest, most):
    """Per program and model: sentences/s with the most clients over the fewest, and p99 over p50
    latency with the most."""
    out = []
    for program in dict.fromkeys(r["program"] for r in rows):
        for kind in dict.fromkeys(r["kind"] for r in rows):
            by_clients = {r["clients"]: r for r in rows if r["program"] == program and r["kind"] == kind}
            if fewest not in by_clients or most not in by_clients:
                continue
            speedup = by_clients[most]["sentences_per_s"] / by_clients[fewest]["sentences_per_s"]
            tail = by_clients[most]["p99_ms"] / by_clients[most]["p50_ms"]
            out.append({"program": program, "kind": kind, "speedup": speedup, "p99_over_p50": tail,
                        "line": f"{program} {kind}: {most} clients {speedup:.2f}x the sentences/s of {fewest}; "
                                f"p99/p50 latency at {most} clients {tail:.2f}"})
    return out


SLOW_CLIENTS = 80  # above the soak server's 64 HTTP threads: the attack of issue 49


class NetworkAttack:
    """Beside the soak, until finish(): SLOW_CLIENTS connections that each announce a body of 100,000
    bytes and send one byte a second (each read far within --timeout, the request not; reconnected
    once the server answers 408 and closes), a stranger sending what a page elsewhere or a name
    rebound to this machine would (a foreign Host, a cross-origin POST, a text/plain body: each must
    get its 403 or 415), and a probe of GET /health every 0.2 s (each must be answered within 5 s)."""

    def __init__(self, server):
        self.server, self.stop = server, threading.Event()
        self.counts = {"slow_408": 0, "slow_other": 0, "refused_host": 0, "refused_origin": 0,
                       "refused_content_type": 0, "strangers_wrong": 0, "health_answered": 0, "health_failed": 0}
        self.health_ms = []
        self.threads = [threading.Thread(target=f) for f in (self._slow, self._strangers, self._health)]
        for t in self.threads:
            t.start()

    def _slow(self):
        port = self.server.port
        head = (b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n{" % port)
        answers, last = {}, 0.0
        while not self.stop.is_set():
            while len(answers) < SLOW_CLIENTS:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(head)
                answers[s] = b""
            for s in select.select(list(answers), [], [], 0.2)[0]:
                chunk = s.recv(65536)
                answers[s] += chunk
                if not chunk:  # answered and closed
                    self.counts["slow_408" if answers[s].startswith(b"HTTP/1.1 408 ") else "slow_other"] += 1
                    del answers[s]
                    s.close()
            if time.monotonic() - last >= 1:
                last = time.monotonic()
                for s in answers:
                    try:
                        s.send(b" ")
                    except OSError:
                        pass  # closed by the server: the select above reads its answer
        for s in answers:
            s.close()

    def _strangers(self):
        host = f"127.0.0.1:{self.server.port}"
        body = b'{"src": ["Ein Hund."]}'
        strangers = [({"Host": f"evil.example:{self.server.port}", "Content-Type": "application/json"}, 403, "Host"),
                     ({"Host": host, "Origin": "http://evil.example", "Content-Type": "application/json"}, 403,
                      "Origin"),
                     ({"Host": host, "Content-Type": "text/plain"}, 415, "Content-Type")]
        while not self.stop.wait(0.2):
            for headers, want, header in strangers:
                c = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
                c.putrequest("POST", "/v1/translate", skip_host=True, skip_accept_encoding=True)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    c.putheader(name, value)
                c.endheaders(body)
                r = c.getresponse()
                answer = json.loads(r.read())
                c.close()
                good = r.status == want and answer.get("header") == header
                self.counts["refused_" + header.lower().replace("-", "_") if good else "strangers_wrong"] += 1

    def _health(self):
        while not self.stop.wait(0.2):
            start = time.monotonic()
            try:
                ok = self.server.request("/health", timeout=5)[0] == 200
            except OSError:
                ok = False
            self.health_ms.append(1000 * (time.monotonic() - start))
            self.counts["health_answered" if ok else "health_failed"] += 1

    def finish(self):
        """Stops the attack once the first SLOW_CLIENTS slow clients have been cut off (30 s at most:
        --timeout is 10 s); returns its figures (with /metrics' count of slow and refused connections)."""
        deadline = time.monotonic() + 30
        while self.counts["slow_408"] + self.counts["slow_other"] < SLOW_CLIENTS and time.monotonic() < deadline:
            time.sleep(0.1)
        self.stop.set()
        for t in self.threads:
            t.join()
        metrics = self.server.request("/metrics")[2]
        counted = {key: float(m.group(1)) if (m := re.search(rf"^{re.escape(name)} (\S+)$", metrics, re.M)) else 0.0
                   for key, name in [("slow", "seqgrad_connections_slow_total"),
                                     ("host", 'seqgrad_connections_refused_total{reason="host"}'),
                                     ("origin", 'seqgrad_connections_refused_total{reason="origin"}')]}
        c = self.counts
        return {**c, "health_p99_ms": percentile(self.health_ms, 0.99), "health_max_ms": max(self.health_ms),
                "metrics_slow": counted["slow"],
                # every cut-off slow client and refused stranger counted (a slow one cut off as the attack
                # ended may be in /metrics only)
                "network_ok": c["slow_other"] == 0 and c["strangers_wrong"] == 0 and c["health_failed"] == 0 and
                c["slow_408"] > 0 and c["slow_408"] <= counted["slow"] <= c["slow_408"] + SLOW_CLIENTS and
                (counted["host"], counted["origin"]) == (c["refused_host"], c["refused_origin"])}


def run_soak(a):
    if not 100 <= a.soak <= 100000 or not 1 <= a.soak_clients <= 64:
        sys.exit("serve_load.py: --soak must lie in [100, 100000] and --soak-clients in [1, 64] (the test is bounded)")
    sentences = test_sentences(a.data_dir, 200)
    expected = dict(zip(sentences, translate_cli(a.seqgrad, a.checkpoint, sentences, "--threads", str(a.threads))))
    server = Server(a.seqgrad, "--checkpoint", a.checkpoint, "--threads", str(a.threads), "--max-wait-ms", "5",
                    "--http-threads", str(max(64, a.soak_clients)))
    try:
        attack = NetworkAttack(server)
        row = soak(server, a.soak, a.soak_clients, sentences, expected,
                   translate_scores(a.seqgrad, a.checkpoint, sentences, a.threads))
        row.update(attack.finish())
    finally:
        status, _, err = server.stop()
    row["exit_status"] = status
    print(json.dumps(row))
    ok = row["wrong"] == 0 and row["alive"] and status == 0 and row["rss_growth_pct"] <= 5 and row["network_ok"]
    if not ok:
        print(f"serve_load.py: the soak failed: {row['wrong']} wrong answers, server alive {row['alive']}, exit "
              f"status {status}, RSS growth {row['rss_growth_pct']:.1f}%, slow clients and strangers "
              f"{'as expected' if row['network_ok'] else 'NOT as expected'}\n{err[-2000:]}", file=sys.stderr)
    return 0 if ok else 1


def run_explain_flood(a):
    """Plain one-sentence requests from the most --clients clients, alone and then while
    --explain-flood clients keep sending the largest explain requests (until the plain ones end),
    each load on a fresh server, --rounds times alternated; prints every row and the medians' p99
    ratio."""
    clients = max(int(c) for c in a.clients.split(","))
    if (not 1 <= clients <= 64 or not 1 <= a.requests <= 1000 or not 1 <= a.explain_flood <= 16
            or not 1 <= a.rounds <= 20):
        sys.exit("serve_load.py: --clients must lie in [1, 64], --requests in [1, 1000], --explain-flood in [1, 16] "
                 "and --rounds in [1, 20]")
    sentences = test_sentences(a.data_dir, clients * a.requests)[:200]
    expected = dict(zip(sentences, translate_cli(a.seqgrad, a.checkpoint, sentences, "--threads", str(a.threads))))
    rows, ok = [], True
    for flood in [0, a.explain_flood] * a.rounds:
        server = Server(a.seqgrad, "--checkpoint", a.checkpoint, "--threads", str(a.threads), "--max-wait-ms", "5",
                        "--http-threads", str(max(64, clients + flood)))
        explained, stop = [], threading.Event()

        def explainer(e):
            while not stop.is_set():
                status, _, body = server.request("/v1/translate", body=largest_explain(sentences[e]))
                explained.append(status == 200 and "beam_tree" in body["translations"][0])

        floods = [threading.Thread(target=explainer, args=(e,)) for e in range(flood)]
        try:
            for t in floods:
                t.start()
            if flood:  # the plain load starts once the explain requests decode
                while not explained and "seqgrad_decoding_sentences 0\n" in server.request("/metrics")[2]:
                    time.sleep(0.01)
            row = load(server, clients, a.requests, sentences, expected, batch_dependent=False)
        finally:
            stop.set()
            for t in floods:
                t.join()
            status, _, err = server.stop()
        row.update(explain_clients=flood, explain_answers=len(explained), explain_wrong=explained.count(False))
        ok = ok and status == 0 and not row["failures"] and not row["explain_wrong"]
        row["failures"] = len(row["failures"])
        rows.append(row)
        print(json.dumps(row))
    alone = statistics.median(r["p99_ms"] for r in rows if not r["explain_clients"])
    beside = statistics.median(r["p99_ms"] for r in rows if r["explain_clients"])
    rounds = ", ".join(f"{x['p99_ms']:.0f}/{y['p99_ms']:.0f}" for x, y in zip(rows[::2], rows[1::2]))
    print(f"p99 of plain requests ({clients} clients), median of {a.rounds} rounds: {alone:.1f} ms alone, "
          f"{beside:.1f} ms beside {a.explain_flood} clients of explain requests (beam {EXPLAIN_BEAM}, "
          f"{EXPLAIN_STEPS} steps; {sum(r['explain_answers'] for r in rows)} answered): {beside / alone:.2f}x "
          f"(rounds alone/beside: {rounds} ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    main()
