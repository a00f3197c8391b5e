#!/usr/bin/env python3
"""Mixed-abuse soak of `clefserve serve`. Python 3 standard library only.

Starts `clefserve serve` on the built-in demo model (no --model; XDG_CACHE_HOME is a fresh temporary
folder) and measures ONE normal client (valid POST /v1/systemone requests on one keep-alive
connection): first unloaded (300 requests), then for SOAK_SECONDS (default 60) while a separate
process runs, all at once:

  slowloris   200 connections that dribble header bytes (the server's --header-timeout ends them
              with 408; they reconnect)
  big_cl      Content-Length over --max-body-bytes (413 before any body byte is read)
  big_chunked a chunked body that keeps going past --max-body-bytes (413 as it arrives)
  malformed   malformed request lines, headers, framing, JSON, content types, methods (4xx/5xx)
  hangup      a valid request sent, then the connection closed at once (some with a reset)
  pipelined   valid requests followed by garbage on one connection (answers, then 400 and close)

Passes when: the normal client saw 0 failures (every answer a 200 with the expected shape, no
connection error); its loaded p99 < 2 x its unloaded p99 (the soak's bound; 300 unloaded requests
so that the baseline p99 is not one lucky sample); the server's VmRSS (sampled every second from /proc/<pid>/status) stayed
under 1 GiB; the server was still healthy at the end and exited 0 on SIGTERM.

Usage: tests/server/soak.py [path/to/clefserve]   (default build/clefserve; env SOAK_SECONDS)
"""

import http.client
import json
import multiprocessing
import os
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MAX_BODY = 1 << 20  # --max-body-bytes for the soak (1 MiB: a chunked overrun costs 1 MiB, not 8)
RSS_LIMIT_KB = 1 << 20  # 1 GiB
SLOWLORIS_CONNECTIONS = 200
UNLOADED_REQUESTS = 300
THINK_S = 0.01  # the normal client's pause between requests (unloaded and loaded alike)

VALID = json.dumps({
    "model": "clef-demo",
    "state": "A card was charged twice.",
    "questions": {
        "topic": {"type": "choice", "criteria": {"billing": "Billing", "outage": "Outages"}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    },
}).encode()


def percentile(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


# ---------------------------------------------------------------- the server

def start_server(binary, cache):
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    env.pop("CLEF_API_KEY", None)
    log_path = os.path.join(cache, "server.log")
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--threads", "1", "--max-body-bytes", str(MAX_BODY)],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 120
    pat = re.compile(rb"listening.*port(?:=|\":)(\d+)")
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        with open(log_path, "rb") as f:
            m = pat.search(f.read())
        if m:
            return proc, int(m.group(1)), log_path
        time.sleep(0.05)
    proc.kill()
    with open(log_path, "rb") as f:
        sys.stderr.write(f.read().decode(errors="replace")[-4000:])
    raise SystemExit("soak: the server did not start")


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


# ---------------------------------------------------------------- the normal client

class NormalClient:
    def __init__(self, port):
        self.port = port
        self.conn = None
        self.failures = []
        self.reconnects = 0

    def one(self):
        """One valid request on the keep-alive connection; returns ms, or None on failure."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reconnects += 1
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", "/v1/systemone", body=VALID,
                              headers={"Content-Type": "application/json"})
            r = self.conn.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t0) * 1e3
            ok = r.status == 200
            if ok:
                j = json.loads(body)
                ok = list(j.get("answers", {})) == ["topic", "urgent"] and "usage" in j
            if not ok:
                self.failures.append("status %d: %r" % (r.status, body[:200]))
                return None
            if r.getheader("Connection", "").lower() == "close" or r.will_close:
                self.failures.append("server closed the keep-alive connection")
                self.conn.close()
                self.conn = None
            return ms
        except Exception as e:  # noqa: BLE001 -- any error is a failure of the normal client
            self.failures.append("%s: %s" % (type(e).__name__, e))
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass
            self.conn = None
            return None


# ---------------------------------------------------------------- the abusers (own process)

def _send_all(sock, data):
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _read_status(sock, timeout=5.0):
    """The status code of the first response on sock, or 0 (closed / reset / timeout)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(m.group(1)) if m else 0


def _read_all_statuses(sock, timeout=5.0):
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return [int(s) for s in re.findall(rb"HTTP/1\.[01] (\d{3}) ", data)]


def _connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHo st: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad\x01Header: y\r\n\r\n",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: -5\r\n\r\n",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 5\r\nContent-Length: 7\r\n\r\n{}",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: gzip\r\n\r\n",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 2\r\n\r\n{}",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 9\r\n\r\n{\"model\":",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 7\r\n\r\n[1,2,3]",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}",
    b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nZZZ\r\nnot hex\r\n",
    b"BREW /v1/systemone HTTP/1.1\r\nHost: x\r\n\r\n",
    b"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /nope/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS ClientHello
]


class Abuse:
    """Runs every abuse kind in threads of this (child) process until stop is set."""

    def __init__(self, port, stop):
        self.port = port
        self.stop = stop
        self.lock = threading.Lock()
        self.counts = {}  # kind -> {"sent": n, "statuses": {code: n}}

    def count(self, kind, status=None):
        with self.lock:
            c = self.counts.setdefault(kind, {"sent": 0, "statuses": {}})
            c["sent"] += 1
            if status is not None:
                key = str(status) if status else "no answer"
                c["statuses"][key] = c["statuses"].get(key, 0) + 1

    def pause(self, s):
        self.stop.wait(s)

    def slowloris(self):
        sel = selectors.DefaultSelector()
        conns = {}
        rng = random.Random(1)

        def open_one():
            try:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", self.port))
                sel.register(s, selectors.EVENT_READ)
                conns[s] = {"sent": 0, "next": time.time() + rng.random(),
                            "head": b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nX-Slow: "}
                self.count("slowloris")
            except OSError:
                pass

        for _ in range(SLOWLORIS_CONNECTIONS):
            open_one()
        while not self.stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                m = re.match(rb"HTTP/1\.[01] (\d{3})", data or b"")
                with self.lock:
                    st = self.counts["slowloris"]["statuses"]
                    k = m.group(1).decode() if m else "closed"
                    st[k] = st.get(k, 0) + 1
                sel.unregister(s)
                s.close()
                del conns[s]
                open_one()
            now = time.time()
            for s, c in list(conns.items()):
                if now < c["next"]:
                    continue
                # The request line and the start of a header, then one byte every ~0.5-1.5 s.
                chunk = c["head"] if c["sent"] == 0 else b"a"
                try:
                    s.send(chunk)
                    c["sent"] += len(chunk)
                except OSError:
                    pass
                c["next"] = now + 0.5 + rng.random()
        for s in conns:
            s.close()

    def big_cl(self):
        while not self.stop.is_set():
            try:
                s = _connect(self.port)
                _send_all(s, b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: %d\r\n\r\n{\"state\":\""
                          % (MAX_BODY * 50))
                _send_all(s, b"x" * 65536)
                self.count("big_cl", _read_status(s))
                s.close()
            except OSError:
                self.count("big_cl", 0)
            self.pause(0.1)

    def big_chunked(self):
        chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
        while not self.stop.is_set():
            try:
                s = _connect(self.port)
                _send_all(s, b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(MAX_BODY // 65536 + 4):  # past the limit
                    if not _send_all(s, chunk):
                        break
                self.count("big_chunked", _read_status(s))
                s.close()
            except OSError:
                self.count("big_chunked", 0)
            self.pause(0.3)

    def malformed(self):
        i = 0
        while not self.stop.is_set():
            req = MALFORMED[i % len(MALFORMED)]
            i += 1
            try:
                s = _connect(self.port)
                _send_all(s, req)
                self.count("malformed", _read_status(s))
                s.close()
            except OSError:
                self.count("malformed", 0)
            self.pause(0.04)

    def hangup(self):
        i = 0
        req = (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(VALID)) + VALID
        while not self.stop.is_set():
            i += 1
            try:
                s = _connect(self.port)
                # A whole valid request (the engine still answers it: 1 in 8, so that this
                # kind adds little engine work), half of one, or only its header, then gone.
                if i % 8 == 0:
                    _send_all(s, req)
                elif i % 2 == 1:
                    _send_all(s, req[: len(req) // 2])
                else:
                    _send_all(s, req[: req.index(b"\r\n\r\n") + 4])
                if i % 2 == 0:  # a reset instead of a FIN
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
                self.count("hangup")
            except OSError:
                self.count("hangup")
            self.pause(0.05)

    def pipelined(self):
        good = (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(VALID)) + VALID
        invalid = (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 2\r\n\r\n{}")  # 422, no engine work
        health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        rng = random.Random(2)
        i = 0
        while not self.stop.is_set():
            i += 1
            garbage = rng.randbytes(rng.randrange(1, 600))
            middle = good if i % 10 == 0 else invalid  # a valid one (engine work) 1 in 10
            try:
                s = _connect(self.port)
                _send_all(s, health + middle + health + b"\r\n" + garbage + b"\r\n\r\n")
                statuses = _read_all_statuses(s)
                with self.lock:
                    c = self.counts.setdefault("pipelined", {"sent": 0, "statuses": {}})
                    c["sent"] += 1
                    for st in statuses or [0]:
                        k = str(st) if st else "no answer"
                        c["statuses"][k] = c["statuses"].get(k, 0) + 1
                s.close()
            except OSError:
                self.count("pipelined", 0)
            self.pause(0.2)

    def run(self):
        kinds = [self.slowloris, self.big_cl, self.big_chunked, self.malformed, self.hangup,
                 self.pipelined]
        threads = [threading.Thread(target=k, daemon=True) for k in kinds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.counts


def abuse_main(port, stop, out):
    out.send(Abuse(port, stop).run())
    out.close()


# ---------------------------------------------------------------- main

def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "clefserve")
    soak_s = float(os.environ.get("SOAK_SECONDS", "60"))
    cache = tempfile.mkdtemp(prefix="clef_soak_")
    proc = None
    try:
        proc, port, log_path = start_server(binary, cache)
        client = NormalClient(port)
        for _ in range(10):  # warm the connection and the engine
            client.one()
        unloaded = []
        for _ in range(UNLOADED_REQUESTS):
            ms = client.one()
            if ms is not None:
                unloaded.append(ms)
            time.sleep(THINK_S)
        unloaded_failures = list(client.failures)
        client.failures.clear()

        rss = []
        sampling = threading.Event()

        def sample():
            while not sampling.wait(1.0):
                rss.append(rss_kb(proc.pid))
        rss.append(rss_kb(proc.pid))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        ctx = multiprocessing.get_context("fork")
        stop = ctx.Event()
        parent_end, child_end = ctx.Pipe(duplex=False)
        abuser = ctx.Process(target=abuse_main, args=(port, stop, child_end), daemon=True)
        abuser.start()
        t_start = time.time()
        time.sleep(min(2.0, soak_s / 10))  # let the abusers connect before measuring
        loaded = []
        while time.time() - t_start < soak_s:
            ms = client.one()
            if ms is not None:
                loaded.append(ms)
            time.sleep(THINK_S)
        stop.set()
        counts = parent_end.recv() if parent_end.poll(30) else {}
        abuser.join(10)
        sampling.set()
        sampler.join()
        rss.append(rss_kb(proc.pid))
        health_after = 0
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            health_after = c.getresponse().status
            c.close()
        except Exception:  # noqa: BLE001
            pass
        proc.send_signal(signal.SIGTERM)
        try:
            exit_status = proc.wait(20)
        except subprocess.TimeoutExpired:
            exit_status = None

        # ------------------------------------------------------------ verdict
        u50, u99 = percentile(unloaded, 50), percentile(unloaded, 99)
        l50, l99 = percentile(loaded, 50), percentile(loaded, 99)
        bound = 2 * u99
        max_rss = max(rss)
        problems = []
        if unloaded_failures or len(unloaded) < UNLOADED_REQUESTS:
            problems.append("unloaded failures: %s" % unloaded_failures[:5])
        if client.failures:
            problems.append("%d normal-client failures under load: %s"
                            % (len(client.failures), client.failures[:5]))
        if len(loaded) < 20:
            problems.append("only %d normal requests under load" % len(loaded))
        if not l99 < bound:
            problems.append("loaded p99 %.1f ms >= bound %.1f ms" % (l99, bound))
        if max_rss >= RSS_LIMIT_KB or max_rss < 0:
            problems.append("server RSS %d kB (limit %d kB)" % (max_rss, RSS_LIMIT_KB))
        if not counts:
            problems.append("the abuse process reported nothing")
        if health_after != 200:
            problems.append("/health after the soak: %s" % health_after)
        if exit_status != 0:
            problems.append("exit status after SIGTERM: %s" % exit_status)

        print("soak: %.0f s of mixed abuse against clefserve serve (demo model, --threads 1, "
              "--max-body-bytes %d)" % (soak_s, MAX_BODY))
        print("  normal client: %d unloaded + %d loaded requests, %d failures, %d connection(s)"
              % (len(unloaded), len(loaded), len(client.failures), client.reconnects))
        print("  latency ms: unloaded p50 %.2f p99 %.2f | loaded p50 %.2f p99 %.2f | bound "
              "2 x %.2f = %.2f (loaded/unloaded p99 %.2fx)" % (u50, u99, l50, l99, u99, bound,
                                                              l99 / u99))
        print("  server RSS: start %.1f MB, max %.1f MB, end %.1f MB (%d samples, limit 1024 MB)"
              % (rss[0] / 1024, max_rss / 1024, rss[-1] / 1024, len(rss)))
        for kind in ["slowloris", "big_cl", "big_chunked", "malformed", "hangup", "pipelined"]:
            c = counts.get(kind, {"sent": 0, "statuses": {}})
            st = ", ".join("%s: %d" % kv for kv in sorted(c["statuses"].items()))
            print("  %-11s %6d connections%s" % (kind, c["sent"], "  (" + st + ")" if st else ""))
        print("  after: /health %s, SIGTERM exit status %s" % (health_after, exit_status))
        if problems:
            print("soak FAILED:\n  " + "\n  ".join(problems))
            with open(log_path, "rb") as f:
                tail = f.read()[-3000:].decode(errors="replace")
            print("server log tail:\n" + tail)
            return 1
        print("soak passed")
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
