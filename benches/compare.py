#!/usr/bin/env python3
"""weir against nginx and against the direct path, as ratios from one run.

Called by benches/compare.sh (which installs the tools and builds weir);
Python 3.11 standard library only. See benches/README.md for how to read
the output.

Topology (2 cores): the system under test (SUT) alone on core 1, one worker
(`worker_processes 1`, `weir serve --workers 1`); this driver, the load
generators and the two echo backends on core 0 (compare.sh starts the driver
under `taskset -c 0`, so everything it spawns inherits core 0 unless it is
started under `taskset -c 1`).

Targets, interleaved A/B/A/B in every repetition (each slot starts the
backends and the SUT fresh, measures, stops them):
  direct    client -> echo backend (the one-hop limit; "SUT" = the backend)
  nginx     proxy_pass + upstream keepalive, 90/10 split_clients, header and
            cookie matches via map (benches/nginx.conf.tmpl)
  weir-off  one route, one backend
  weir-retry  weir-off with a retry policy (attempts, per-try timeout,
            backoff, budget) that never fires: the backend never fails
  weir-on   split 90/10 + A/B match (header exact, cookie regex) + session
            affinity + stats recording (always on)

Per slot: warm-up; throughput (wrk -t1 -c32) with the SUT's CPU time from
/proc/PID/stat; latency at a fixed rate below the knee with an open-loop
tool; HTTP/2 (h2load, h2c prior knowledge); 5,000 idle keep-alive
connections (RSS delta); peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHES = ROOT / "benches"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

PORTS = {
    "blue": 19001,
    "green": 19101,
    "nginx_h1": 18080,
    "nginx_h2": 18082,
    "nginx_tls": 18443,
    "weir": 18090,
    "weir_tls": 18444,
    "admin": 19901,
}
TARGETS = ["direct", "nginx", "weir-off", "weir-on", "weir-retry"]
SUT_CPU = "1"
# Where compare.sh pins this driver, and with it wrk, the latency tool and the backends.
LOAD_CPU = "0"

# Sent with every load request: a Cookie header so the regex and cookie
# matchers do real work, no x-canary so the 90/10 draw decides.
LOAD_HEADERS = [
    ("User-Agent", "weir-bench/1 (like Mozilla/5.0)"),
    ("Cookie", "session=3b1f0c9e77aa; theme=dark; _ga=GA1.2.1234567.890"),
]

# Thresholds of issue 8.
TARGET_CPU_VS_NGINX = 0.85
TARGET_TPUT_VS_NGINX = 1.15
TARGET_ON_VS_OFF_CPU = 1.05
TARGET_DECIDE_NS = 150.0
TARGET_IDLE_BYTES = 4096.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- processes


class Procs:
    """Every process this driver starts, so that cleanup can stop them all
    (and only them) by pid, whatever happens."""

    def __init__(self) -> None:
        self.live: list[subprocess.Popen] = []

    def spawn(self, cmd: list[str], logfile: Path, cpu: str | None = None) -> subprocess.Popen:
        if cpu is not None:
            cmd = ["taskset", "-c", cpu, *cmd]
        out = open(logfile, "ab")
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, cwd=ROOT)
        out.close()
        self.live.append(p)
        return p

    def stop(self, p: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 5.0) -> None:
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None:
                # Our own session: its id is the pid we started.
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        if p in self.live:
            self.live.remove(p)

    def stop_all(self) -> None:
        for p in list(reversed(self.live)):
            try:
                self.stop(p, grace=3.0)
            except Exception as e:  # cleanup must go on
                log(f"cleanup of pid {p.pid} failed: {e}")


PROCS = Procs()


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        # As the servers do: connections in TIME_WAIT do not block a bind.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(d))
    return out


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of the whole thread group (dead threads included)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total


def core_busy_ticks(cpu: str) -> tuple[int, int]:
    """(busy, total) jiffies of one core, from /proc/stat."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + v[4]
                return sum(v) - idle, sum(v)
    return 0, 0


def mem_kb(pids: list[int], key: str) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


# ------------------------------------------------------------------- tools


def find_tool(name: str) -> str | None:
    env = os.environ.get(name.upper())
    if env and Path(env).exists():
        return env
    p = shutil.which(name)
    if p:
        return p
    cand = Path.home() / ".cargo" / "bin" / name
    return str(cand) if cand.exists() else None


def run_tool(cmd: list[str], timeout: float) -> str:
    """Runs a load tool (on this driver's core) with a hard time bound."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)
    PROCS.live.append(p)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        PROCS.stop(p, signal.SIGKILL, 1)
        raise RuntimeError(f"{cmd[0]} did not finish within {timeout}s")
    finally:
        if p in PROCS.live:
            PROCS.live.remove(p)
    return out.decode(errors="replace")


def parse_wrk(out: str) -> dict:
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m or not rps:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "requests": int(m.group(1)),
        "rps": float(rps.group(1)),
        "errors": (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0),
    }


def parse_h2load(out: str) -> dict:
    fin = re.search(r"finished in ([\d.]+)(\w+), ([\d.]+) req/s", out)
    req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    tfr = re.search(r"time for request:\s+([\d.]+\w+)\s+([\d.]+\w+)\s+([\d.]+\w+)", out)
    if not fin or not req:
        raise RuntimeError(f"cannot parse h2load output:\n{out}")
    return {
        "rps": float(fin.group(3)),
        "requests": int(req.group(4)),
        "errors": int(req.group(5)) + int(req.group(6)),
        "mean_us": to_us(tfr.group(3)) if tfr else None,
    }


def to_us(s: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", s)
    if not m:
        return float("nan")
    v = float(m.group(1))
    return {"us": v, "ms": v * 1e3, "s": v * 1e6}[m.group(2)]


# --------------------------------------------------- open-loop latency tool


class OpenLoop:
    """Fixed-rate latency measurement. oha with `-q R --latency-correction`
    when available (latency counted from each request's scheduled start, so
    coordinated omission is corrected); else a small asyncio client that does
    the same (scheduled start times, N keep-alive connections)."""

    def __init__(self, oha: str | None, conns: int) -> None:
        self.oha = oha
        self.conns = conns
        self.name = (f"oha {oha_version(oha)} (-q R --latency-correction, -c {conns})" if oha
                     else f"built-in asyncio open-loop client (scheduled starts, -c {conns})")

    def run(self, port: int, rate: int, secs: float) -> dict:
        if self.oha:
            cmd = [self.oha, "-z", f"{max(1, int(round(secs)))}s", "-q", str(rate), "--latency-correction",
                   "-c", str(self.conns), "--no-tui", "--output-format", "json"]
            for k, v in LOAD_HEADERS:
                cmd += ["-H", f"{k}: {v}"]
            cmd.append(f"http://127.0.0.1:{port}/")
            out = run_tool(cmd, secs + 30)
            j = json.loads(out[out.find("{"):])
            pct = j["latencyPercentiles"]
            codes = j.get("statusCodeDistribution", {})
            ok = sum(v for k, v in codes.items() if k.startswith("2"))
            # Requests cut off by the end of the run are not errors.
            errs = {k: v for k, v in j.get("errorDistribution", {}).items() if "deadline" not in k}
            total = sum(codes.values()) + sum(errs.values())
            return {
                "p50_us": pct["p50"] * 1e6,
                "p99_us": pct["p99"] * 1e6,
                "p999_us": pct["p99.9"] * 1e6,
                "requests": total,
                "errors": total - ok,
                "achieved_rps": j["summary"]["requestsPerSec"],
            }
        return asyncio.run(open_loop_client(port, rate, secs, self.conns))


def oha_version(oha: str) -> str:
    try:
        return subprocess.run([oha, "--version"], capture_output=True, text=True, timeout=10).stdout.strip().split()[-1]
    except Exception:
        return "?"


async def open_loop_client(port: int, rate: int, secs: float, conns: int) -> dict:
    req = ("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           + "".join(f"{k}: {v}\r\n" for k, v in LOAD_HEADERS) + "\r\n").encode()
    total = int(rate * secs)
    t0 = time.perf_counter() + 0.2
    lat: list[float] = []
    errors = 0
    nxt = 0

    async def worker() -> None:
        nonlocal nxt, errors
        r, w = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                k = nxt
                if k >= total:
                    return
                nxt += 1
                due = t0 + k / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                w.write(req)
                head = await r.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if m:
                    await r.readexactly(int(m.group(1)))
                lat.append(time.perf_counter() - due)
                if not head.startswith(b"HTTP/1.1 2"):
                    errors += 1
        finally:
            w.close()

    await asyncio.gather(*(worker() for _ in range(conns)))
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, max(0, int(p * len(lat) + 0.999999) - 1))] * 1e6
    return {"p50_us": q(0.50), "p99_us": q(0.99), "p999_us": q(0.999),
            "requests": len(lat), "errors": errors, "achieved_rps": len(lat) / secs}


# ------------------------------------------------------ idle connections


def idle_connections(port: int, n: int, pids: list[int]) -> dict:
    """Opens `n` keep-alive connections, sends one request on each, keeps
    them idle, and returns the SUT's RSS delta per connection."""
    before = mem_kb(pids, "VmRSS")
    req = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: weir-bench-idle\r\n\r\n"
    socks: list[socket.socket] = []
    failed = 0
    try:
        for _ in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(req)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = s.recv(4096)
                    if not chunk:
                        raise OSError("closed")
                    buf += chunk
                head, _, body = buf.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                need = int(m.group(1)) if m else 0
                while len(body) < need:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    body += chunk
                socks.append(s)
            except OSError:
                failed += 1
        time.sleep(1.0)
        after = mem_kb(pids, "VmRSS")
        alive = len(socks)
    finally:
        for s in socks:
            s.close()
    return {
        "rss_before_kb": before,
        "rss_after_kb": after,
        "open": alive,
        "failed": failed,
        "bytes_per_conn": (after - before) * 1024 / alive if alive else float("nan"),
    }


# ----------------------------------------------------------------- targets


WEIR_OFF = """\
listeners:
  - name: http
    address: 127.0.0.1:{weir}
{tls_listener}admin:
  address: 127.0.0.1:{admin}
backends:
  blue:
    endpoints: ["127.0.0.1:{blue}"]
routes:
  - name: app
    pathPrefix: /
    primary: blue
"""

# WEIR_OFF plus a retry policy: with a healthy backend no retry is ever
# sent, so this measures what the policy itself costs per request.
WEIR_RETRY = WEIR_OFF + """\
    retries:
      attempts: 2
      on: [connect-failure, reset, gateway-error]
      perTryTimeout: 2s
      backoff: {{ base: 25ms, max: 250ms }}
      budget: {{ percent: 20, minRetriesPerSecond: 3 }}
"""

WEIR_ON = """\
listeners:
  - name: http
    address: 127.0.0.1:{weir}
{tls_listener}admin:
  address: 127.0.0.1:{admin}
backends:
  blue:
    endpoints: ["127.0.0.1:{blue}"]
  green:
    endpoints: ["127.0.0.1:{green}"]
routes:
  - name: app
    pathPrefix: /
    primary: blue
    canary: green
    canaryWeight: 10
    match:
      - headers: {{ x-canary: {{ exact: insider }} }}
      - headers: {{ cookie: {{ regex: "^(.*?;)?(canary=always)(;.*)?$" }} }}
    sessionAffinity: {{ cookieName: weir-canary, maxAge: 21600, path: / }}
    affinityState: {{ canaryValue: canaryrun0001 }}
"""


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.weir = str(ROOT / "target" / "release" / "weir")
        self.wrk_bin = find_tool("wrk")
        self.h2load_bin = find_tool("h2load")
        self.nginx = find_tool("nginx") or "/usr/sbin/nginx"
        self.latency = OpenLoop(None if args.no_oha else find_tool("oha"), args.lat_conns)
        self.tls: dict = {"available": False, "reason": "not checked"}
        self.cert: tuple[Path, Path] | None = None

    # -- configs
    def tls_listener(self) -> str:
        if not self.tls["available"] or not self.cert:
            return ""
        return (f"  - name: https\n    address: 127.0.0.1:{PORTS['weir_tls']}\n"
                f"    tls: {{ certFile: {self.cert[0]}, keyFile: {self.cert[1]} }}\n")

    def write_weir(self, name: str, template: str, tls_listener: str) -> Path:
        p = self.work / f"{name}.yaml"
        p.write_text(template.format(tls_listener=tls_listener, **PORTS))
        return p

    def write_nginx(self, d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        tls = ""
        if self.tls["available"] and self.cert:
            tls = (f"listen 127.0.0.1:{PORTS['nginx_tls']} ssl;\n"
                   f"        ssl_certificate {self.cert[0]};\n        ssl_certificate_key {self.cert[1]};")
        conf = ((BENCHES / "nginx.conf.tmpl").read_text()
                .replace("@@DIR@@", str(d)).replace("@@BLUE@@", str(PORTS["blue"]))
                .replace("@@GREEN@@", str(PORTS["green"])).replace("@@H1@@", str(PORTS["nginx_h1"]))
                .replace("@@H2@@", str(PORTS["nginx_h2"])).replace("@@TLS_LISTEN@@", tls))
        p = d / "nginx.conf"
        p.write_text(conf)
        return p

    # -- processes
    def start_backends(self, tag: str) -> list[subprocess.Popen]:
        for port in PORTS.values():
            if not port_free(port):
                time.sleep(2)
                if not port_free(port):
                    raise RuntimeError(f"port {port} is busy: is another run going on?")
        out = []
        for name, ver in (("blue", "v1"), ("green", "v2")):
            p = PROCS.spawn([self.weir, "echo", "--listen", f"127.0.0.1:{PORTS[name]}", "--version", ver,
                             "--workers", "1"], self.work / f"echo-{name}-{tag}.log")
            out.append(p)
        for name, p in zip(("blue", "green"), out):
            wait_port(PORTS[name], p)
        return out

    def start_sut(self, target: str, tag: str, backends: list[subprocess.Popen]) -> tuple[subprocess.Popen | None, int, int | None]:
        """Returns (process we own, HTTP/1 port, h2c port)."""
        if target == "direct":
            return None, PORTS["blue"], PORTS["blue"]
        if target == "nginx":
            conf = self.write_nginx(self.work / f"nginx-{tag}")
            p = PROCS.spawn([self.nginx, "-c", str(conf), "-p", str(conf.parent)],
                            self.work / f"nginx-{tag}.log", cpu=SUT_CPU)
            wait_port(PORTS["nginx_h1"], p)
            return p, PORTS["nginx_h1"], PORTS["nginx_h2"]
        template = {"weir-on": WEIR_ON, "weir-retry": WEIR_RETRY}.get(target, WEIR_OFF)
        cfg = self.write_weir(target, template, self.tls_listener())
        p = PROCS.spawn([self.weir, "serve", "-c", str(cfg), "--workers", "1"],
                        self.work / f"{target}-{tag}.log", cpu=SUT_CPU)
        wait_port(PORTS["weir"], p)
        return p, PORTS["weir"], PORTS["weir"]

    def sut_pids(self, target: str, sut: subprocess.Popen | None, backends: list[subprocess.Popen]) -> list[int]:
        if target == "direct":
            return [backends[0].pid]
        assert sut is not None
        return [sut.pid, *children(sut.pid)]

    def check_tls(self) -> None:
        """weir with a TLS listener: does it start? (Measured only if so.)"""
        try:
            key, crt = self.work / "tls.key", self.work / "tls.crt"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                            "-out", str(crt), "-days", "2", "-subj", "/CN=127.0.0.1"],
                           check=True, capture_output=True, timeout=60)
            self.cert = (crt, key)
        except Exception as e:
            self.tls = {"available": False, "reason": f"cannot make a test certificate: {e}"}
            return
        self.tls = {"available": True, "reason": ""}
        cfg = self.write_weir("weir-tls-check", WEIR_OFF, self.tls_listener())
        logf = self.work / "weir-tls-check.log"
        backends = self.start_backends("tls-check")
        p = PROCS.spawn([self.weir, "serve", "-c", str(cfg), "--workers", "1"], logf)
        try:
            wait_port(PORTS["weir_tls"], p, timeout=5)
            self.tls = {"available": True, "reason": ""}
        except RuntimeError:
            msg = logf.read_text(errors="replace").strip().splitlines()
            self.tls = {"available": False,
                        "reason": "weir has no TLS listener yet: " + (msg[-1] if msg else "did not listen")}
        finally:
            PROCS.stop(p)
            for b in backends:
                PROCS.stop(b)

    # -- measurements
    def wrk(self, port: int, secs: float, scheme: str = "http") -> dict:
        cmd = [self.wrk_bin, "-t1", "-c32", f"-d{max(1, int(round(secs)))}s", "--timeout", "5s"]
        for k, v in LOAD_HEADERS:
            cmd += ["-H", f"{k}: {v}"]
        cmd.append(f"{scheme}://127.0.0.1:{port}/")
        return parse_wrk(run_tool(cmd, secs + 30))

    def h2(self, port: int, secs: float) -> dict:
        cmd = [self.h2load_bin, "-D", str(int(secs)), "-c", "32", "-m", "10", "-t", "1"]
        for k, v in LOAD_HEADERS:
            cmd += ["-H", f"{k.lower()}: {v}"]
        cmd.append(f"http://127.0.0.1:{port}/")
        return parse_h2load(run_tool(cmd, secs + 30))

    def with_cpu(self, pids: list[int], fn) -> tuple[dict, float, float]:
        c0, t0 = cpu_ticks(pids), time.monotonic()
        r = fn()
        c1, t1 = cpu_ticks(pids), time.monotonic()
        cpu_s = (c1 - c0) / CLK_TCK
        return r, cpu_s, t1 - t0

    def slot(self, target: str, rep: int, rate: int | None, calibrate: bool = False) -> dict:
        a = self.args
        tag = f"{target}-r{rep}"
        backends = self.start_backends(tag)
        sut = None
        res: dict = {"target": target, "rep": rep}
        try:
            sut, port, h2port = self.start_sut(target, tag, backends)
            time.sleep(0.3)
            pids = self.sut_pids(target, sut, backends)
            res["rss_start_kb"] = mem_kb(pids, "VmRSS")
            if not calibrate:
                # Idle keep-alive connections first, on the fresh process:
                # after a load run the allocator holds freed memory that new
                # connections would reuse, hiding their real cost.
                res["idle"] = idle_connections(port, a.idle_conns, pids)
                pids = self.sut_pids(target, sut, backends)
            self.wrk(port, a.warmup)
            if calibrate:
                w = self.wrk(port, a.calibrate_secs)
                res["rps"] = w["rps"]
                return res
            # Throughput + CPU per request (closed loop, saturating).
            b0, t0 = core_busy_ticks(SUT_CPU)
            l0, lt0 = core_busy_ticks(LOAD_CPU)
            backend_pids = [b.pid for b in backends]
            k0 = cpu_ticks(backend_pids)
            w, cpu_s, wall = self.with_cpu(pids, lambda: self.wrk(port, a.duration))
            b1, t1 = core_busy_ticks(SUT_CPU)
            l1, lt1 = core_busy_ticks(LOAD_CPU)
            k1 = cpu_ticks(backend_pids)
            res["throughput"] = {**w, "cpu_s": cpu_s, "wall_s": wall,
                                 "cpu_us_per_req": cpu_s * 1e6 / max(1, w["requests"]),
                                 "sut_util": cpu_s / wall,
                                 # Everything that ran on the SUT's core (others' builds included).
                                 "core_busy": (b1 - b0) / max(1, t1 - t0),
                                 # A SUT well under 100 % of its core while this
                                 # is near 100 % was held back by the load side.
                                 "load_core_busy": (l1 - l0) / max(1, lt1 - lt0),
                                 "backend_cpu_us_per_req": (k1 - k0) / CLK_TCK * 1e6 / max(1, w["requests"]),
                                 "loadavg": os.getloadavg()[0]}
            # Latency at a fixed rate (open loop).
            if rate:
                lt, cpu_s, wall = self.with_cpu(pids, lambda: self.latency.run(port, rate, a.lat_duration))
                res["latency"] = {**lt, "rate": rate, "cpu_us_per_req": cpu_s * 1e6 / max(1, lt["requests"])}
            # HTTP/2 (h2c prior knowledge), 32 connections x 10 streams.
            if self.h2load_bin and h2port:
                try:
                    h, cpu_s, wall = self.with_cpu(pids, lambda: self.h2(h2port, a.h2_duration))
                    res["h2"] = {**h, "cpu_us_per_req": cpu_s * 1e6 / max(1, h["requests"]),
                                 "sut_util": cpu_s / wall}
                except RuntimeError as e:
                    res["h2"] = {"error": str(e)[:300]}
            # TLS (HTTP/1.1 over TLS), only where the SUT has it.
            if self.tls["available"] and target in ("nginx", "weir-off", "weir-on"):
                tport = PORTS["nginx_tls"] if target == "nginx" else PORTS["weir_tls"]
                t, cpu_s, wall = self.with_cpu(pids, lambda: self.wrk(tport, a.duration / 2, "https"))
                res["tls"] = {**t, "cpu_us_per_req": cpu_s * 1e6 / max(1, t["requests"])}
            res["peak_rss_kb"] = mem_kb(self.sut_pids(target, sut, backends), "VmHWM")
            if sut is not None and sut.poll() is not None:
                raise RuntimeError(f"{target} exited with {sut.returncode} during the slot")
        finally:
            if sut is not None:
                PROCS.stop(sut, signal.SIGQUIT if target == "nginx" else signal.SIGTERM)
            for b in backends:
                PROCS.stop(b)
        return res


# ----------------------------------------------------------------- summary


def med(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None and x == x]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def get(r: dict, path: str):
    cur = r
    for k in path.split("."):
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


# (key, label, unit, path in a slot result, higher is better)
METRICS = [
    ("cpu_us_per_req", "CPU per request, saturated (wrk)", "µs", "throughput.cpu_us_per_req", False),
    ("throughput", "Throughput, wrk -t1 -c32", "req/s", "throughput.rps", True),
    ("sut_util", "SUT's share of its core during wrk", "%", "throughput.sut_util", None),
    ("core_busy", "SUT core busy (all processes) during wrk", "%", "throughput.core_busy", None),
    ("load_busy", f"Load core {LOAD_CPU} busy (wrk, backends) during wrk", "%", "throughput.load_core_busy", None),
    ("backend_cpu", "Echo backends' CPU per request during wrk", "µs", "throughput.backend_cpu_us_per_req", None),
    ("p50", "Latency p50 at fixed rate", "µs", "latency.p50_us", False),
    ("p99", "Latency p99 at fixed rate", "µs", "latency.p99_us", False),
    ("p999", "Latency p99.9 at fixed rate", "µs", "latency.p999_us", False),
    ("added_p50", "Added latency p50 (minus direct)", "µs", "added.p50", False),
    ("added_p99", "Added latency p99 (minus direct)", "µs", "added.p99", False),
    ("added_p999", "Added latency p99.9 (minus direct)", "µs", "added.p999", False),
    ("cpu_at_rate", "CPU per request at fixed rate", "µs", "latency.cpu_us_per_req", False),
    ("h2_rps", "HTTP/2 throughput, h2load -c32 -m10", "req/s", "h2.rps", True),
    ("h2_cpu", "HTTP/2 CPU per request", "µs", "h2.cpu_us_per_req", False),
    ("tls_rps", "TLS throughput, wrk -c32 https", "req/s", "tls.rps", True),
    ("tls_cpu", "TLS CPU per request", "µs", "tls.cpu_us_per_req", False),
    ("idle_bytes", "Memory per idle keep-alive connection", "B", "idle.bytes_per_conn", False),
    ("peak_rss", "Peak RSS (VmHWM)", "MB", "peak_rss_mb", False),
]


# Shares of a core: reported as absolute values, never divided into ratios.
SHARES = ("sut_util", "core_busy", "load_busy")


def summarise(runs: list[dict]) -> dict:
    by = {t: sorted([r for r in runs if r["target"] == t], key=lambda r: r["rep"]) for t in TARGETS}
    # Derived per-slot values: added latency against the direct slot of the same rep.
    direct = {r["rep"]: r for r in by["direct"]}
    for r in runs:
        if r.get("peak_rss_kb") is not None:
            r["peak_rss_mb"] = r["peak_rss_kb"] / 1024
        d = direct.get(r["rep"])
        if d and get(r, "latency.p50_us") is not None and get(d, "latency.p50_us") is not None:
            r["added"] = {k: r["latency"][f"{k}_us"] - d["latency"][f"{k}_us"] for k in ("p50", "p99", "p999")}
    absolute = {t: {m[0]: med([get(r, m[3]) for r in by[t]]) for m in METRICS} for t in TARGETS}
    # Shares are stored as fractions and shown as percentages.
    for key, _, _, path, _ in METRICS:
        if key in SHARES:
            for t in TARGETS:
                absolute[t][key] = med([(get(r, path) or float("nan")) * 100 for r in by[t]])

    def paired(a: str, b: str, path: str) -> dict:
        rb = {r["rep"]: r for r in by[b]}
        xs = []
        for r in by[a]:
            o = rb.get(r["rep"])
            x, y = get(r, path), get(o, path) if o else None
            if x is not None and y not in (None, 0):
                xs.append(x / y)
        return med(xs)

    pairs = [("weir-on", "nginx"), ("weir-off", "nginx"), ("weir-on", "direct"), ("weir-off", "direct"),
             ("nginx", "direct"), ("weir-on", "weir-off"), ("weir-retry", "weir-off")]
    ratios = {f"{a}/{b}": {m[0]: paired(a, b, m[3]) for m in METRICS if m[0] not in SHARES}
              for a, b in pairs}
    nginx_by_rep = {r["rep"]: r for r in by["nginx"]}
    pairs_p99 = [(get(r, "added.p99"), get(nginx_by_rep.get(r["rep"], {}), "added.p99")) for r in by["weir-on"]]
    pairs_p99 = [(x, y) for x, y in pairs_p99 if x is not None and y is not None]
    wins = f"{sum(1 for x, y in pairs_p99 if x <= y)}/{len(pairs_p99)} repetitions"
    # Within a repetition both subtract the same direct p99, so the paired
    # difference is the difference of the two absolute p99s: free of the
    # direct path's own noise, which the medians of the two columns are not.
    paired_p99 = med([x - y for x, y in pairs_p99])["median"]
    return {"absolute": absolute, "ratios": ratios, "p99_wins": wins, "p99_paired_diff": paired_p99}


def criterion_estimate(bench_id: str) -> float | None:
    p = ROOT / "target" / "criterion" / bench_id / "new" / "estimates.json"
    try:
        return json.loads(p.read_text())["median"]["point_estimate"]
    except (OSError, KeyError, ValueError):
        return None


def targets_check(summary: dict, crit: dict) -> list[tuple[str, str, str, str]]:
    r = summary["ratios"]
    a = summary["absolute"]
    rows = []

    def status(ok: bool | None) -> str:
        return "n/a" if ok is None else ("**met**" if ok else "**not met**")

    def fmt_ratio(x: dict) -> str:
        if x["median"] is None:
            return "n/a"
        return f"{x['median']:.2f} [{x['min']:.2f}–{x['max']:.2f}]"

    x = r["weir-on/nginx"]["cpu_us_per_req"]
    rows.append(("CPU µs/req weir-on ÷ nginx", f"≤ {TARGET_CPU_VS_NGINX}", fmt_ratio(x),
                 status(None if x["median"] is None else x["median"] <= TARGET_CPU_VS_NGINX)))
    x = r["weir-on/nginx"]["throughput"]
    rows.append(("Throughput weir-on ÷ nginx", f"≥ {TARGET_TPUT_VS_NGINX}", fmt_ratio(x),
                 status(None if x["median"] is None else x["median"] >= TARGET_TPUT_VS_NGINX)))
    w, n = a["weir-on"]["added_p99"], a["nginx"]["added_p99"]
    ok = None if w["median"] is None or n["median"] is None else w["median"] <= n["median"]
    d50, d99 = a["direct"]["p50"]["median"], a["direct"]["p99"]["median"]
    wins = summary.get("p99_wins", "")
    note = ""
    if d50 and d99 and d99 > 5 * d50:
        # When even the direct path's p99 is many times its p50, the tail is
        # the scheduler's (other processes on the cores), not the proxies'.
        note = f"; noise-dominated: direct p99 {d99:,.0f} µs vs p50 {d50:,.0f} µs"
    paired = summary.get("p99_paired_diff")
    paired_text = "" if paired is None else f"; paired median weir − nginx {paired:+,.0f} µs"
    rows.append(("Added p99 at fixed rate, weir-on vs nginx", "≤ nginx's",
                 "n/a" if ok is None else
                 f"{w['median']:,.0f} µs vs {n['median']:,.0f} µs (weir lower in {wins}{paired_text}){note}",
                 "**inconclusive**" if note and ok is not None else status(ok)))
    x = r["weir-on/weir-off"]["cpu_us_per_req"]
    rows.append(("CPU µs/req features-on ÷ features-off", f"≤ {TARGET_ON_VS_OFF_CPU}", fmt_ratio(x),
                 status(None if x["median"] is None else x["median"] <= TARGET_ON_VS_OFF_CPU)))
    x = r["weir-retry/weir-off"]["cpu_us_per_req"]
    rows.append(("CPU µs/req with a retry policy that never fires ÷ without", f"≤ {TARGET_ON_VS_OFF_CPU}",
                 fmt_ratio(x), status(None if x["median"] is None else x["median"] <= TARGET_ON_VS_OFF_CPU)))
    d = crit.get("route_decide/match_affinity/100")
    rows.append(("decide() + lookup, 100 routes, regex matchers + affinity", f"≤ {TARGET_DECIDE_NS:.0f} ns",
                 "n/a (criterion not run)" if d is None else f"{d:.0f} ns",
                 status(None if d is None else d <= TARGET_DECIDE_NS)))
    x = a["weir-on"]["idle_bytes"]
    rows.append(("Idle memory per keep-alive connection (weir-on)", f"≤ {TARGET_IDLE_BYTES:.0f} B",
                 "n/a" if x["median"] is None else f"{x['median']:.0f} B",
                 status(None if x["median"] is None else x["median"] <= TARGET_IDLE_BYTES)))
    return rows


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    if unit in ("req/s",):
        return f"{v:,.0f}"
    if unit == "%":
        return f"{v:.0f}"
    if unit == "MB":
        return f"{v:.1f}"
    if unit == "B":
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:,.0f}"


def markdown(meta: dict, summary: dict, crit: dict, runs: list[dict]) -> str:
    a, r = summary["absolute"], summary["ratios"]
    L = []
    L.append("# weir vs nginx vs direct — latest run\n")
    L.append(f"- date: {meta['date']}, commit `{meta['commit']}`, {meta['cpu']} ({meta['cores']} cores)")
    L.append(f"- {meta['reps']} repetitions, interleaved {' / '.join(TARGETS)}; median [min–max] over repetitions; "
             "ratios are medians of per-repetition paired ratios")
    L.append(f"- SUT pinned alone on core {SUT_CPU} with one worker; wrk, the latency tool, the echo backends "
             "and this driver on core 0")
    L.append(f"- throughput: wrk -t1 -c32 for {meta['duration']} s; fixed-rate latency: {meta['latency_tool']} "
             f"at **{meta['rate']} req/s** for {meta['lat_duration']} s; HTTP/2: h2load h2c prior knowledge "
             f"-c32 -m10 for {meta['h2_duration']} s; idle: {meta['idle_conns']} keep-alive connections after one "
             "request each")
    L.append(f"- TLS: {'measured' if meta['tls']['available'] else 'not measured — ' + meta['tls']['reason']}")
    L.append("")
    L.append("## Ratios\n")
    cols = [("weir-on/nginx", "weir-on ÷ nginx"), ("weir-off/nginx", "weir-off ÷ nginx"),
            ("weir-on/direct", "weir-on ÷ direct"), ("weir-off/direct", "weir-off ÷ direct"),
            ("nginx/direct", "nginx ÷ direct"), ("weir-on/weir-off", "on ÷ off"),
            ("weir-retry/weir-off", "retry ÷ off")]
    L.append("| metric | " + " | ".join(c[1] for c in cols) + " |")
    L.append("|---|" + "---|" * len(cols))
    for key, label, unit, _, better in METRICS:
        if key in (*SHARES, "backend_cpu", "added_p50", "added_p999"):
            continue
        cells = []
        for c, _ in cols:
            x = r[c].get(key)
            cells.append("–" if not x or x["median"] is None else
                         f"{x['median']:.2f} [{x['min']:.2f}–{x['max']:.2f}]")
        hint = "" if better is None else (" (↑ better)" if better else " (↓ better)")
        L.append(f"| {label}{hint} | " + " | ".join(cells) + " |")
    L.append("\nAdded-latency ratios divide two small differences and are noisy; read the absolute table.\n")
    L.append("## Issue 8 targets\n")
    L.append("| target | wanted | measured | status |")
    L.append("|---|---|---|---|")
    for row in targets_check(summary, crit):
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("## Absolute values\n")
    L.append("| metric | unit | " + " | ".join(TARGETS) + " |")
    L.append("|---|---|" + "---|" * len(TARGETS))
    for key, label, unit, _, _ in METRICS:
        cells = []
        for t in TARGETS:
            x = a[t].get(key)
            cells.append("–" if not x or x["median"] is None else
                         f"{fmt(x['median'], unit)} [{fmt(x['min'], unit)}–{fmt(x['max'], unit)}]")
        L.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("For `direct`, the \"SUT\" is the echo backend itself (on core 0 with the load generator).")
    L.append("If the SUT's share of its core is well below 100 % while the core is busy, other processes "
             "(builds, tests) took the rest and throughput is understated for that slot; if both are low "
             f"while core {LOAD_CPU} is near 100 %, the load side (wrk plus both echo backends) was the "
             "bottleneck, and the slot's throughput is the load side's limit, not the SUT's. CPU per "
             "request is the robust comparison either way.\n")
    if crit:
        L.append("## Criterion (routing decision, this machine, same run)\n")
        L.append("| bench | median |")
        L.append("|---|---|")
        for k, v in crit.items():
            L.append(f"| `{k}` | {'–' if v is None else f'{v:.0f} ns'} |")
        L.append("")
    errs = [(r["target"], r["rep"], get(r, "throughput.errors"), get(r, "latency.errors"), get(r, "h2.errors"),
             get(r, "idle.failed")) for r in runs]
    bad = [e for e in errs if any(x for x in e[2:])]
    if bad:
        L.append("## Errors seen (non-2xx, socket errors, failed idle connections)\n")
        for e in bad:
            L.append(f"- {e[0]} rep {e[1]}: wrk {e[2]}, latency {e[3]}, h2 {e[4]}, idle {e[5]}")
        L.append("")
    L.append("![chart](latest.svg)\n")
    L.append("Raw data: `latest.json` (every slot, every tool's numbers).")
    return "\n".join(L) + "\n"


def svg_chart(summary: dict, meta: dict) -> str:
    """Grouped bars, every metric normalised to nginx = 1 (per repetition,
    whiskers min–max). Written by hand: no plotting library needed."""
    a = summary["absolute"]
    r = summary["ratios"]
    metrics = [("cpu_us_per_req", "CPU µs/req", False), ("throughput", "throughput", True),
               ("p99", "p99 @ rate", False), ("h2_cpu", "h2 CPU µs/req", False),
               ("idle_bytes", "idle B/conn", False), ("peak_rss", "peak RSS", False)]
    series = [("direct", "#9e9e9e"), ("nginx", "#2e7d32"), ("weir-off", "#64b5f6"), ("weir-on", "#1565c0"),
              ("weir-retry", "#8e24aa")]
    W, H = 960, 440
    left, right, top, bottom = 60, 20, 75, 70
    pw, ph = W - left - right, H - top - bottom

    def val(t: str, key: str) -> dict | None:
        if t == "nginx":
            n = a["nginx"][key]
            return None if n["median"] is None else {"median": 1.0, "min": n["min"] / n["median"] if n["median"] else 1,
                                                    "max": n["max"] / n["median"] if n["median"] else 1}
        x = r.get(f"{t}/nginx", {}).get(key)
        if t == "direct":
            x = r.get("nginx/direct", {}).get(key)
            if x and x["median"]:
                return {"median": 1 / x["median"], "min": 1 / x["max"], "max": 1 / x["min"]}
            return None
        return x if x and x["median"] is not None else None

    vals = [v for key, _, _ in metrics for t, _ in series for v in [val(t, key)] if v]
    ymax = max([2.0] + [min(v["max"], 6.0) for v in vals]) * 1.1
    y = lambda v: top + ph - min(v, ymax) / ymax * ph
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">'
           f'weir vs nginx (= 1.0), median of {meta["reps"]} interleaved repetitions, whiskers min–max</text>',
           f'<text x="{W / 2}" y="38" text-anchor="middle" fill="#555">lower is better except throughput; '
           f'fixed rate {meta["rate"]} req/s; {meta["date"]}</text>']
    step = 0.5 if ymax <= 4 else 1.0
    t = 0.0
    while t <= ymax + 1e-9:
        yy = y(t)
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end">{t:.1f}</text>')
        t += step
    out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" stroke="#2e7d32" '
               'stroke-dasharray="4 3"/>')
    gw = pw / len(metrics)
    bw = gw * 0.8 / len(series)
    for i, (key, label, better) in enumerate(metrics):
        gx = left + i * gw + gw * 0.1
        out.append(f'<text x="{left + i * gw + gw / 2:.1f}" y="{top + ph + 18}" text-anchor="middle">{label}</text>')
        out.append(f'<text x="{left + i * gw + gw / 2:.1f}" y="{top + ph + 33}" text-anchor="middle" fill="#777">'
                   f'{"↑ better" if better else "↓ better"}</text>')
        for j, (tname, color) in enumerate(series):
            v = val(tname, key)
            x0 = gx + j * bw
            if not v:
                out.append(f'<text x="{x0 + bw / 2:.1f}" y="{top + ph - 4}" text-anchor="middle" fill="#999">–</text>')
                continue
            out.append(f'<rect x="{x0:.1f}" y="{y(v["median"]):.1f}" width="{bw - 2:.1f}" '
                       f'height="{top + ph - y(v["median"]):.1f}" fill="{color}"><title>{tname} {label}: '
                       f'{v["median"]:.2f} [{v["min"]:.2f}–{v["max"]:.2f}]</title></rect>')
            cx = x0 + (bw - 2) / 2
            out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(v["min"]):.1f}" y2="{y(v["max"]):.1f}" '
                       'stroke="black"/>')
            label_y = min(y(v["median"]), y(v["max"])) - 4
            out.append(f'<text x="{cx:.1f}" y="{label_y:.1f}" text-anchor="middle" font-size="10">'
                       f'{v["median"]:.2f}</text>')
    lx = left
    for tname, color in series:
        out.append(f'<rect x="{lx}" y="{H - 22}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{lx + 16}" y="{H - 12}">{tname}</text>')
        lx += 110
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -------------------------------------------------------------------- main


def run_criterion(args: argparse.Namespace) -> dict:
    """The routing-decision criterion benches, pinned to the SUT core, before
    any load runs (compare.sh built them; this finds the executable)."""
    ids = ["route_decide/plain/100", "route_decide/weight/100", "route_decide/match/100",
           "route_decide/match_affinity/1", "route_decide/match_affinity/10", "route_decide/match_affinity/100"]
    if args.no_criterion:
        return {}
    log("criterion: routing decision benches (route_decide/*)")
    p = subprocess.run(["cargo", "bench", "--no-run", "--bench", "routing", "--message-format=json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=1800)
    exe = None
    for line in p.stdout.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "routing" \
                and m.get("executable"):
            exe = m["executable"]
    if not exe:
        log(f"criterion: cannot build the routing bench:\n{p.stderr[-2000:]}")
        return {i: None for i in ids}
    r = subprocess.run(["taskset", "-c", SUT_CPU, exe, "--bench", "route_decide/"], cwd=ROOT,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        log(f"criterion failed:\n{r.stderr[-2000:]}")
    return {i: criterion_estimate(i) for i in ids}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10, help="wrk seconds per slot")
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--lat-duration", type=float, default=10)
    ap.add_argument("--h2-duration", type=float, default=5)
    ap.add_argument("--calibrate-secs", type=float, default=3)
    ap.add_argument("--rate", type=int, default=0, help="fixed rate; 0 = 25%% of the slowest target's throughput")
    ap.add_argument("--lat-conns", type=int, default=16)
    ap.add_argument("--idle-conns", type=int, default=5000)
    ap.add_argument("--no-oha", action="store_true", help="use the built-in open-loop client")
    ap.add_argument("--no-criterion", action="store_true")
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help="comma-separated subset of %s (for trials; ratios need all)" % ",".join(TARGETS))
    ap.add_argument("--write-configs", type=Path, metavar="DIR",
                    help="only write weir-on.yaml, weir-off.yaml and nginx/nginx.conf to DIR (for profile.sh)")
    ap.add_argument("--rerender", type=Path, metavar="JSON",
                    help="only rebuild latest.md/latest.svg from a raw latest.json")
    ap.add_argument("--out", type=Path, default=BENCHES / "results")
    args = ap.parse_args()
    if args.rerender:
        raw = json.loads(args.rerender.read_text())
        summary = summarise(raw["runs"])
        raw["summary"] = summary
        write_results(args.out, raw["meta"], summary, raw.get("criterion_ns", {}), raw["runs"])
        return 0
    if args.write_configs:
        d = args.write_configs
        d.mkdir(parents=True, exist_ok=True)
        b = Bench(args, d)
        b.write_weir("weir-on", WEIR_ON, "")
        b.write_weir("weir-off", WEIR_OFF, "")
        b.write_weir("weir-retry", WEIR_RETRY, "")
        b.write_nginx(d / "nginx")
        return 0
    chosen = [t for t in args.targets.split(",") if t]
    if any(t not in TARGETS for t in chosen):
        ap.error(f"--targets: choose from {', '.join(TARGETS)}")

    # Raise the fd limit (5,000 idle connections here, and the same in the
    # SUTs, which inherit it).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard if hard != resource.RLIM_INFINITY else 65536, 65536))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < args.idle_conns + 200:
        log(f"fd limit {want} is too low for {args.idle_conns} idle connections; lowering the count")
        args.idle_conns = max(100, want - 200)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    work = Path(tempfile.mkdtemp(prefix="weir-compare-"))
    bench = Bench(args, work)
    for tool, path in (("wrk", bench.wrk_bin), ("h2load", bench.h2load_bin)):
        if not path:
            log(f"{tool} not found (run benches/compare.sh, which installs it)")
            return 1
    if not Path(bench.weir).exists():
        log("target/release/weir missing: run `cargo build --release` (compare.sh does)")
        return 1
    log(f"work dir {work}; latency tool: {bench.latency.name}")
    started = time.time()
    try:
        crit = run_criterion(args)
        bench.check_tls()
        log(f"TLS: {'available' if bench.tls['available'] else bench.tls['reason']}")
        rate = args.rate
        calib = {}
        if not rate:
            for t in chosen:
                calib[t] = bench.slot(t, 0, None, calibrate=True)["rps"]
                log(f"calibration {t}: {calib[t]:,.0f} req/s")
            rate = max(100, int(min(calib.values()) * 0.25 / 100) * 100)
        log(f"fixed rate for latency: {rate} req/s")
        runs = []
        for rep in range(1, args.reps + 1):
            # Rotate the order every repetition so no target always runs first.
            order = chosen[(rep - 1) % len(chosen):] + chosen[:(rep - 1) % len(chosen)]
            for t in order:
                log(f"rep {rep}/{args.reps}: {t}")
                r = bench.slot(t, rep, rate)
                runs.append(r)
                log(f"  {t}: {get(r, 'throughput.rps') or 0:,.0f} req/s, "
                    f"{get(r, 'throughput.cpu_us_per_req') or 0:.1f} µs CPU/req "
                    f"(SUT {100 * (get(r, 'throughput.sut_util') or 0):.0f} % of its core, "
                    f"core {SUT_CPU} busy {100 * (get(r, 'throughput.core_busy') or 0):.0f} %, "
                    f"core {LOAD_CPU} busy {100 * (get(r, 'throughput.load_core_busy') or 0):.0f} %), "
                    f"p99 {get(r, 'latency.p99_us') or 0:.0f} µs, "
                    f"idle {get(r, 'idle.bytes_per_conn') or 0:,.0f} B/conn")
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up")
        PROCS.stop_all()
        return 130
    finally:
        PROCS.stop_all()

    summary = summarise(runs)
    meta = {
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip() or "?",
        "cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
        "reps": args.reps, "duration": args.duration, "lat_duration": args.lat_duration,
        "h2_duration": args.h2_duration, "idle_conns": args.idle_conns, "rate": rate, "calibration": calib,
        "latency_tool": bench.latency.name, "tls": bench.tls,
        "tools": {"wrk": tool_version([bench.wrk_bin, "-v"]), "h2load": tool_version([bench.h2load_bin, "--version"]),
                  "nginx": tool_version([bench.nginx, "-v"])},
        "elapsed_s": round(time.time() - started),
    }
    write_results(args.out, meta, summary, crit, runs)
    shutil.rmtree(work, ignore_errors=True)
    log(f"done in {meta['elapsed_s']} s")
    return 0


def write_results(out: Path, meta: dict, summary: dict, crit: dict, runs: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(
        {"meta": meta, "criterion_ns": crit, "summary": summary, "runs": runs}, indent=1, ensure_ascii=False))
    md = markdown(meta, summary, crit, runs)
    (out / "latest.md").write_text(md)
    (out / "latest.svg").write_text(svg_chart(summary, meta))
    print(md)
    log(f"wrote {out}/latest.md, latest.svg, latest.json")


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def tool_version(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (p.stdout + p.stderr).strip().splitlines()[0]
    except Exception:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
