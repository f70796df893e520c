#!/usr/bin/python3
"""`seqgrad serve` against clients that misbehave on purpose (issue 49; loopback only, every loop
bounded):
  * slow clients cannot starve it: more connections than --http-threads that each announce a body of
    100,000 bytes and send one byte a second, and meanwhile GET /health, GET /metrics and a
    translation from a well-behaved client are answered while every slow one still holds its
    connection; a request that does not arrive whole within --timeout gets 408 and is closed, and
    /metrics counts it; an idle keep-alive connection is closed after --idle-timeout; at
    --max-connections a new connection takes the place of an idle one, else waits in the listen
    backlog until one closes;
  * SIGTERM with a request that the decoder would hold for 10 s: the server closes it after
    --drain-timeout (the client gets no answer) and exits 0;
  * a Host the server does not answer to, a cross-origin POST and a body that is not
    application/json are refused (403, 403, 415) with JSON naming the header and what was expected;
    --allow-host and --allow-origin (with CORS's preflight) let the named ones in; /metrics counts
    the refused connections;
  * framing refused before a worker sees the request (chunked 411, an announced body over the limit
    413 before it is sent, a head over 16 KiB 431, a malformed head 400); Expect: 100-continue and
    pipelined requests;
  * a 500 says "internal error" and an id, and only the server's log has the details.
Usage: test_tools_serve_network.py PATH/TO/seqgrad DATA_DIR
"""
import http.client
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import Server, train_tiny  # noqa: E402
from test_tools_cli import program_and_data  # noqa: E402

SEQGRAD = None
DATA = None
TMP = tempfile.mkdtemp(prefix="seqgrad_serve_network_")
JSON = {"Content-Type": "application/json"}
SENTENCE = json.dumps({"src": ["Ein Hund läuft."]}).encode()


def checkpoint():
    return train_tiny(SEQGRAD, DATA, TMP)


def exchange(port, method, path, headers, body=b"", timeout=20):
    """(status, headers with lowercase names, body bytes) of one request that carries exactly these
    headers (no Host unless given)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            c.putheader(name, value)
        if body or method == "POST":
            c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def raw(port, data, timeout=20):
    """Everything the server sends after `data` on a new connection, until it closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_to_end(s)


def read_to_end(s):
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    return answer


def metrics(server):
    """/metrics as {'name{labels}': value}."""
    status, _, text = server.request("/metrics", timeout=20)
    assert status == 200, text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}


class SlowClient:
    """A POST /v1/translate announcing `Content-Length: 100000` whose body then comes one byte every
    `every` seconds (each far within --timeout) from a thread, until the server answers or closes,
    close() is called, or `bound` seconds have passed."""

    def __init__(self, port, every, bound=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100000\r\n\r\n{" % port)
        self.answer, self.sent = b"", 1
        self.ended = threading.Event()   # the server answered or closed
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(every, time.monotonic() + bound), daemon=True)
        self.thread.start()

    def _run(self, every, end):
        try:
            while not self.stopped.is_set() and time.monotonic() < end:
                if select.select([self.sock], [], [], every)[0]:
                    chunk = self.sock.recv(65536)
                    self.answer += chunk
                    if not chunk:
                        break
                    continue
                self.sock.sendall(b" ")
                self.sent += 1
        except OSError:
            pass
        self.ended.set()

    def close(self):
        self.stopped.set()
        self.thread.join(timeout=30)
        self.sock.close()


class SlowClients(unittest.TestCase):
    def test_more_slow_clients_than_workers_do_not_starve_the_server(self):
        # 2 workers, 6 slow clients each under a 30 s deadline: a server whose workers read the
        # requests (cpp-httplib's own loop) answers nothing else for 30 s
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--http-threads", "2",
                        "--timeout", "30")
        slow = []
        try:
            slow = [SlowClient(server.port, every=1.0) for _ in range(6)]
            status, _, body = server.request("/health", timeout=20)
            self.assertEqual((status, body), (200, {"status": "ok"}))
            m = metrics(server)
            self.assertGreaterEqual(m["seqgrad_connections_open"], 7, m)  # the slow ones and this one
            self.assertEqual(m["seqgrad_http_workers"], 2)
            self.assertEqual(m["seqgrad_http_answering"], 1, m)  # /metrics itself; no slow client holds a worker
            status, _, body = server.request("/v1/translate", body={"src": ["Ein Hund läuft."]}, timeout=20)
            self.assertEqual(status, 200, body)
            self.assertTrue(body["translations"][0]["translation"])
            # answered while every slow client still held its connection, none cut off yet
            self.assertEqual([c.ended.is_set() for c in slow], [False] * 6)
            self.assertEqual(metrics(server)["seqgrad_connections_slow_total"], 0)
        finally:
            for c in slow:
                c.close()
            self.assertEqual(server.stop()[0], 0)

    def test_a_request_late_past_its_deadline_gets_408(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--http-threads", "1",
                        "--timeout", "2")
        slow = []
        try:
            # a byte every 0.5 s: each read is quick, the request as a whole is late
            slow = [SlowClient(server.port, every=0.5, bound=30) for _ in range(3)]
            for c in slow:
                self.assertTrue(c.ended.wait(30), "the server never cut the slow client off")
                head, _, body = c.answer.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 408 "), c.answer)
                self.assertIn(b"Connection: close", head)
                self.assertRegex(json.loads(body)["error"], r"did not arrive whole within --timeout 2 s")
                self.assertLess(c.sent, 100000)
            m = metrics(server)
            self.assertEqual(m["seqgrad_connections_slow_total"], 3, m)
            self.assertEqual(server.request("/health")[0], 200)
        finally:
            for c in slow:
                c.close()
            self.assertEqual(server.stop()[0], 0)

    def test_idle_connections_are_closed_after_the_idle_timeout(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--idle-timeout", "1")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as silent, \
                    socket.create_connection(("127.0.0.1", server.port), timeout=20) as kept:
                kept.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port)
                answer = read_to_end(kept)  # one answer, then the server closes the idle connection
                self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
                self.assertIn(b"Keep-Alive: timeout=1", answer)
                self.assertEqual(answer.count(b"HTTP/1.1"), 1)
                self.assertEqual(read_to_end(silent), b"")  # never sent a byte: closed, no answer
            self.assertEqual(metrics(server)["seqgrad_connections_idle_closed_total"], 2)
        finally:
            self.assertEqual(server.stop()[0], 0)

    def test_connections_beyond_the_limit_wait_in_the_backlog(self):
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--http-threads", "1",
                        "--max-connections", "2", "--timeout", "2")
        slow = []
        try:
            slow = [SlowClient(server.port, every=0.5, bound=30) for _ in range(2)]
            # the kernel completes a third connection; the server reads it once a slow one has been
            # cut off (408), which /metrics then has counted
            answer = raw(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n"
                         % server.port)
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
            self.assertGreaterEqual(metrics(server)["seqgrad_connections_slow_total"], 1)
        finally:
            for c in slow:
                c.close()
            self.assertEqual(server.stop()[0], 0)

    def test_at_the_limit_a_new_connection_takes_an_idle_ones_place(self):
        # idle connections would be closed only after 30 s; the client waits 20 s at most
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--http-threads", "1",
                        "--max-connections", "2", "--idle-timeout", "30")
        try:
            silent = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(2)]
            answer = raw(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n"
                         % server.port)
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
            self.assertEqual(read_to_end(silent[0]), b"")  # the older one gave way
            self.assertGreaterEqual(metrics(server)["seqgrad_connections_idle_closed_total"], 1)
            for s in silent:
                s.close()
        finally:
            self.assertEqual(server.stop()[0], 0)

def wait_for_queue(server, sentences):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if metrics(server).get("seqgrad_queue_sentences") == sentences:
            return
        time.sleep(0.05)
    raise AssertionError(f"the queue never held {sentences} sentences")


class Drain(unittest.TestCase):
    def test_sigterm_closes_what_is_left_after_the_drain_timeout_and_exits_0(self):
        # the decoder waits 10 s for company before it starts a lone request; the drain gives it 1 s
        server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--max-wait-ms", "10000",
                        "--drain-timeout", "1")
        answer = []

        def post():
            try:
                answer.append(server.request("/v1/translate", body={"src": ["Ein Hund läuft."]}, timeout=30))
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
                answer.append(e)

        slow = SlowClient(server.port, every=1.0)
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        t = threading.Thread(target=post)
        try:
            t.start()
            wait_for_queue(server, 1)
            status, out, err = server.stop(signal.SIGTERM)
            t.join(timeout=30)
            self.assertEqual(status, 0, err)
            self.assertIn("SIGTERM: finishing the requests in flight (for --drain-timeout 1 s at most)", err)
            self.assertIn("1 request still being answered after --drain-timeout 1 s: closed", err)
            self.assertIn("stopped", out)
            # closed, not answered: the server did not wait the decoder's 10 s
            self.assertEqual(len(answer), 1)
            self.assertIsInstance(answer[0], Exception, answer)
            self.assertTrue(slow.ended.wait(20))
            self.assertEqual(read_to_end(idle), b"")
        finally:
            slow.close()
            idle.close()


class Refusals(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server(SEQGRAD, "--checkpoint", checkpoint(), "--threads", "1", "--max-body-bytes", "4096",
                            "--allow-host", "App.Example", "--allow-origin", "https://app.example",
                            "--fail-on", "Ein Mann schläft.")
        cls.host = f"127.0.0.1:{cls.server.port}"

    @classmethod
    def tearDownClass(cls):
        status, _, cls.log = cls.server.stop()
        assert status == 0, f"the server exited with {status}:\n{cls.log}"

    def get(self, path, **headers):
        return exchange(self.server.port, "GET", path, headers)

    def post(self, headers, body=SENTENCE, path="/v1/translate"):
        return exchange(self.server.port, "POST", path, headers, body)

    def assertRefused(self, answer, status, header, pattern):
        got, headers, body = answer
        self.assertEqual(got, status, body)
        self.assertTrue(headers["content-type"].startswith("application/json"))
        j = json.loads(body)
        self.assertEqual((j["status"], j.get("header")), ("error", header), j)
        self.assertRegex(j["error"], pattern)
        return headers

    def test_host(self):
        port = self.server.port
        before = metrics(self.server).get('seqgrad_connections_refused_total{reason="host"}', 0)
        for host in [f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "app.example",
                     "app.example:443"]:
            with self.subTest(host=host):
                self.assertEqual(self.get("/health", Host=host)[0], 200)
                self.assertEqual(self.post({"Host": host, **JSON})[0], 200)
        refused = [f"evil.example:{port}", "127.0.0.1:1", "localhost", f"127.0.0.1.evil.example:{port}",
                   f"app.example.evil:{port}", "[::1"]
        for host in refused:
            with self.subTest(host=host):
                headers = self.assertRefused(self.get("/health", Host=host), 403, "Host",
                                             rf"Host '{re.escape(host)}' is not a name this server answers to "
                                             rf"\(expected 127\.0\.0\.1:{port}, localhost:{port}, \[::1\]:{port}, "
                                             r"or a name given with --allow-host\)")
                self.assertEqual(headers["connection"], "close")
        # HTTP/1.1 without a Host (an empty one is none) is malformed; HTTP/1.0 (an old health check) may omit it
        self.assertRefused(self.get("/health", Host=""), 400, "Host", r"the request has no Host header \(expected "
                           rf"127\.0\.0\.1:{port}, ")
        answer = raw(port, b"GET /health HTTP/1.0\r\n\r\n")
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
        self.assertTrue(answer.endswith(b'{"status":"ok"}'), answer)
        after = metrics(self.server)['seqgrad_connections_refused_total{reason="host"}']
        self.assertEqual(after - before, len(refused) + 1)

    def test_origin(self):
        port, host = self.server.port, self.host
        before = metrics(self.server).get('seqgrad_connections_refused_total{reason="origin"}', 0)
        status, headers, _ = self.post({"Host": host, "Origin": f"http://{host}", **JSON})  # the explorer page's
        self.assertEqual(status, 200)
        self.assertNotIn("access-control-allow-origin", headers)
        # the page's own origin through a TLS proxy that passes the Host on
        status, headers, _ = self.post({"Host": f"localhost:{port}", "Origin": f"https://localhost:{port}", **JSON})
        self.assertEqual(status, 200)
        self.assertNotIn("access-control-allow-origin", headers)
        for origin in ["http://evil.example", f"http://localhost:{port}", "null", "https://app.example.evil"]:
            with self.subTest(origin=origin):
                self.assertRefused(self.post({"Host": host, "Origin": origin, **JSON}), 403, "Origin",
                                   rf"Origin '{re.escape(origin)}' may not send POST requests here \(expected this "
                                   rf"server's own origin http://{host} or an origin given with --allow-origin\)")
        self.assertRefused(exchange(port, "OPTIONS", "/v1/translate", {"Host": host, "Origin": "http://evil.example"}),
                           403, "Origin", r"may not send OPTIONS requests")
        status, headers, body = self.get("/v1/models", Host=host, Origin="http://evil.example")
        self.assertEqual(status, 200)  # a GET changes nothing, and without CORS's header the page cannot read it
        self.assertNotIn("access-control-allow-origin", headers)
        after = metrics(self.server)['seqgrad_connections_refused_total{reason="origin"}']
        self.assertEqual(after - before, 5)
        # --allow-origin: the preflight, then the POST, whose answer the page may read
        status, headers, _ = exchange(port, "OPTIONS", "/v1/translate",
                                      {"Host": host, "Origin": "https://app.example",
                                       "Access-Control-Request-Method": "POST",
                                       "Access-Control-Request-Headers": "content-type"})
        self.assertEqual(status, 204)
        self.assertEqual(headers["access-control-allow-origin"], "https://app.example")
        self.assertIn("POST", headers["access-control-allow-methods"])
        self.assertIn("Content-Type", headers["access-control-allow-headers"])
        status, headers, body = self.post({"Host": host, "Origin": "https://app.example", **JSON})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["access-control-allow-origin"], "https://app.example")

    def test_content_type(self):
        host = self.host
        for kind in ["application/json", "application/json; charset=utf-8", "Application/JSON"]:
            with self.subTest(kind=kind):
                self.assertEqual(self.post({"Host": host, "Content-Type": kind})[0], 200)
        for kind in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                     "application/jsonx"]:
            with self.subTest(kind=kind):
                self.assertRefused(self.post({"Host": host, "Content-Type": kind}), 415, "Content-Type",
                                   rf"Content-Type '{re.escape(kind)}' is not accepted \(expected application/json\)")
        self.assertRefused(self.post({"Host": host}), 415, "Content-Type",
                           r"the request has no Content-Type header \(expected application/json\)")
        self.assertRefused(self.post({"Host": host, "Content-Type": "text/plain"}, path="/translator/translate",
                                     body=b'[{"src": "Hund"}]'), 415, "Content-Type", "expected application/json")
        self.assertEqual(self.get("/v1/models", Host=host)[0], 200)  # a GET has no body to check

    def test_framing_refused_before_a_worker_sees_it(self):
        port, host = self.server.port, self.host.encode()
        before = metrics(self.server)
        cases = [
            (b"POST /v1/translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n" % host, 411, "chunked",
             r"Transfer-Encoding is not accepted: send the body with a Content-Length header"),
            # announced, never sent: refused from the head alone
            (b"POST /v1/translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
             b"Content-Length: 10000000\r\n\r\n" % host, 413, "too_large",
             r"larger than the server's limit \(--max-body-bytes 4096\)"),
            (b"GET /health HTTP/1.1\r\nHost: %s\r\nX-Padding: %s\r\n\r\n" % (host, b"x" * 20000), 431,
             "head_too_large", r"request line and headers are larger than 16384 bytes"),
            (b"HELLO\r\n\r\n", 400, "malformed", r"malformed request head"),
            (b"GET /health HTTP/1.1\r\nHost: %s\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx" % host, 400,
             "malformed", r"malformed request head"),
            (b"GET /health HTTP/2.0\r\nHost: %s\r\n\r\n" % host, 400, "malformed", r"malformed request head"),
        ]
        for request, status, reason, pattern in cases:
            with self.subTest(reason=reason, status=status):
                answer = raw(port, request)
                head, _, body = answer.partition(b"\r\n\r\n")
                self.assertTrue(head.startswith(b"HTTP/1.1 %d " % status), answer[:200])
                self.assertIn(b"Connection: close", head)
                self.assertRegex(json.loads(body)["error"], pattern)
        after = metrics(self.server)
        for reason, count in [("chunked", 1), ("too_large", 1), ("head_too_large", 1), ("malformed", 3)]:
            key = f'seqgrad_connections_refused_total{{reason="{reason}"}}'
            self.assertEqual(after[key] - before.get(key, 0), count, reason)

    def test_expect_100_continue_and_pipelining(self):
        port, host = self.server.port, self.host.encode()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      b"Expect: 100-continue\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                      % (host, len(SENTENCE)))
            self.assertEqual(s.recv(25), b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(SENTENCE)
            answer = read_to_end(s)
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer)
        self.assertEqual(answer.count(b"HTTP/1.1 100"), 0)  # said once, by the reader
        one = b"GET /health HTTP/1.1\r\nHost: %s\r\n\r\n" % host
        answer = raw(port, b"\r\n" + one + one + one.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        self.assertEqual(answer.count(b"HTTP/1.1 200 OK"), 3, answer)
        self.assertEqual(answer.count(b'{"status":"ok"}'), 3, answer)

    def test_a_request_split_anywhere_is_answered_alike(self):
        # the reader frames the request from whatever pieces arrive: split at every byte, and two
        # requests in one connection split at every byte of the second's head
        port, host = self.server.port, self.host.encode()
        request = (b"POST /v1/translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (host, len(SENTENCE), SENTENCE))
        whole = raw(port, request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        self.assertTrue(whole.startswith(b"HTTP/1.1 200 "), whole)
        body = whole.partition(b"\r\n\r\n")[2]
        last = b"GET /health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host
        for data, cuts in [(request + last, range(1, len(request))),
                           (request + last, range(len(request), len(request) + len(last)))]:
            for cut in cuts:
                with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    s.sendall(data[:cut])
                    time.sleep(0.001)
                    s.sendall(data[cut:])
                    answer = read_to_end(s)
                with self.subTest(cut=cut):
                    first, _, rest = answer.partition(b"\r\n\r\n")
                    self.assertTrue(first.startswith(b"HTTP/1.1 200 "), answer[:300])
                    self.assertEqual(rest[:len(body)], body)
                    self.assertTrue(rest[len(body):].startswith(b"HTTP/1.1 200 OK"), answer[-300:])
                    self.assertTrue(answer.endswith(b'{"status":"ok"}'), answer[-300:])

    def test_a_500_tells_an_id_and_the_log_the_details(self):
        failing = json.dumps({"src": ["Ein Mann schläft."]}).encode()
        status, _, body = self.post({"Host": self.host, **JSON}, body=failing)
        self.assertEqual(status, 500, body)
        j = json.loads(body)
        self.assertEqual(set(j), {"status", "error", "id"})
        self.assertEqual((j["status"], j["error"]), ("error", "internal error"))
        self.assertRegex(j["id"], r"^[0-9a-f]{16}$")
        self.assertNotIn(b"fail-on", body)
        self.assertEqual(self.post({"Host": self.host, **JSON})[0], 200)  # the server goes on
        self.__class__.error_id = j["id"]

    def test_z_the_log_has_the_500s_details(self):  # after the 500 (unittest runs tests by name)
        self.server.log.seek(0)
        log = self.server.log.read()
        self.assertIn(f"seqgrad serve: internal error {self.error_id} answering POST /v1/translate: --fail-on: the "
                      "test's failure, translating Ein Mann schläft.", log)


class Flags(unittest.TestCase):
    def test_bad_flags(self):
        for args, pattern in [
            (["--http-threads", "8", "--max-connections", "4"],
             r"--max-connections 4 is smaller than --http-threads 8"),
            (["--allow-host", "app.example:80"], r"--allow-host 'app.example:80': expected a host name or address "
                                                 r"without a port"),
            (["--allow-origin", "https://app.example/"], r"--allow-origin 'https://app.example/': expected an origin"),
            (["--allow-origin", "app.example"], r"--allow-origin 'app.example': expected an origin"),
            (["--drain-timeout", "-1"], r"--drain-timeout"),
            (["--idle-timeout", "0"], r"--idle-timeout"),
        ]:
            with self.subTest(args=args):
                p = subprocess.run([SEQGRAD, "serve", "--checkpoint", checkpoint(), *args], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertRegex(p.stderr, r"seqgrad serve: error: .*" + pattern)

    def test_more_connections_than_descriptors(self):
        p = subprocess.run([SEQGRAD, "serve", "--checkpoint", checkpoint(), "--port", "0", "--max-connections", "1000"],
                           capture_output=True, text=True, timeout=60,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (500, 500)))
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("--max-connections 1000 needs 1064 file descriptors, more than this process may open (500: see "
                      "ulimit -n)", p.stderr)


def main():
    global SEQGRAD, DATA
    SEQGRAD, DATA, argv = program_and_data("test_tools_serve_network.py")
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
