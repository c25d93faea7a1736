"""The demo's own pieces: its HTTP service (a real child process on 127.0.0.1), the CPU accounting
from /proc, and the lines that say where the time went. The whole demo runs in
tests/packaging/test_fresh_install.py (from the wheel) and tests/cli/test_cli.py.

Timing asserts only bound from below by the configured latency (a loaded machine is only slower)
and from above by many times it.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from aiospark.app.demo import explain
from aiospark.app.demo_cpu import GROUPS, cpu_delta, cpu_snapshot
from aiospark.app.demo_service import DemoService, item

pytestmark = pytest.mark.timeout(120)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str):
    with NO_PROXY.open(url, timeout=30) as response:
        return response.status, json.loads(response.read())


def raw_exchange(port: int, payload: bytes, responses: int) -> bytes:
    """Send ``payload`` on one connection; read until ``responses`` HTTP responses (or EOF) arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        data = b""
        while data.count(b"HTTP/1.1 ") < responses or not data.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_items_latency_and_stats():
    with DemoService(latency=0.05, jitter=0.01) as service:
        assert service.url.startswith("http://127.0.0.1:")
        assert psutil.Process(service.pid).ppid() == os.getpid()  # a process of its own
        took = []
        for key in ("7", "a b", "x/y"):
            t0 = time.monotonic()
            status, body = get(f"{service.url}/item/{urllib.request.quote(key, safe='')}")
            took.append(time.monotonic() - t0)
            assert status == 200 and body == item(key) and body["name"] == f"item-{key}"
        assert all(0.039 <= t < 5.0 for t in took), took  # 50 ms +/- 10 ms, never less
        stats = service.stats()
        assert stats["requests"] == 3  # /stats itself is not counted
        assert 40 <= stats["latency_p50_ms"] < 5000 and stats["cpu_seconds"] >= 0
        assert stats["pid"] == service.pid
        service.reset()
        assert service.stats()["requests"] == 0
        with pytest.raises(urllib.error.HTTPError) as info:
            get(service.url + "/nothing")
        assert info.value.code == 404


def test_keep_alive_pipelining_and_connection_close():
    with DemoService(latency=0.02, jitter=0.0) as service:
        port = int(service.url.rsplit(":", 1)[1])
        # three pipelined requests, one connection: three answers, in request order
        data = raw_exchange(port, b"".join(f"GET /item/{k} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                                           for k in ("1", "2", "3")), 3)
        bodies = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in data.split(b"HTTP/1.1 ")[1:]]
        assert [b["id"] for b in bodies] == ["1", "2", "3"]
        assert data.count(b"Connection: keep-alive") == 3
        # Connection: close is honoured (the server hangs up after the answer)
        data = raw_exchange(port, b"GET /item/9 HTTP/1.1\r\nConnection: close\r\n\r\n", 1)
        assert b"Connection: close" in data and data.endswith(json.dumps(item("9")).encode())
        # a request with a body is refused, not misread
        data = raw_exchange(port, b"POST /item/1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 1)
        assert data.startswith(b"HTTP/1.1 405 ")
        assert service.stats()["requests"] == 4


def test_the_service_ends_with_its_parent_and_on_exit():
    code = ("import sys, time; from aiospark.app.demo_service import DemoService\n"
            "s = DemoService(latency=0.01, jitter=0.0).__enter__(); print(s.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
    finally:
        parent.kill()  # SIGKILL: no clean-up runs in the parent; the child sees its stdin close
        parent.wait()
        parent.stdout.close()
    child.wait(timeout=30)
    with DemoService(latency=0.01, jitter=0.0) as service:
        proc = psutil.Process(service.pid)
    proc.wait(timeout=30)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="jitter"):
        DemoService(latency=0.01, jitter=0.02)
    with pytest.raises(ValueError, match="latency"):
        DemoService(latency=-1, jitter=0)


def burn_measured(service_is_the_child: bool):
    """CPU used per group while a child process burns ~1 CPU-second (measured before it is reaped)."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\n"
    child = subprocess.Popen([sys.executable, "-c", burn])
    service_pid = child.pid if service_is_the_child else -1
    before = cpu_snapshot(os.getpid(), service_pid)
    process = psutil.Process(child.pid)
    deadline = time.monotonic() + 60
    # an exited process keeps its CPU seconds in /proc until it is reaped: measure it as a zombie
    while process.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    after = cpu_snapshot(os.getpid(), service_pid)
    child.wait(timeout=60)
    return cpu_delta(before, after)


def test_cpu_snapshot_attributes_a_busy_child():
    """A child that burns CPU is counted as the service when named so, as a Spark worker otherwise."""
    used = burn_measured(service_is_the_child=True)
    assert set(used) == set(GROUPS)
    assert 0.5 <= used["service"] <= 1.5, used
    used = burn_measured(service_is_the_child=False)
    assert 0.5 <= used["python workers"] <= 1.5 and used["service"] == 0, used
    assert sum(used.values()) > 0.9  # the groups cover the machine: at least the burnt second


def figures(**changes):
    f = {"rows": 100_000, "seconds": 25.0, "rows_per_s": 4_000.0, "littles_law_bound": 13_333.0,
         "service_p50_ms": 31.0, "client_p50_ms": 90.0, "service_cpu_seconds": 8.0,
         "cpu_seconds": {"service": 8.0, "python workers": 30.0, "spark jvm": 5.0, "driver": 1.0,
                         "rest of the machine": 4.0, "idle": 2.0}}
    f.update(changes)
    return f


def test_explain_a_cpu_bound_run():
    lines = []
    result = explain(figures(), tasks=2, capacity=200, latency=0.03, out=lines.append)
    text = "\n".join(lines)
    assert result["verdict"] == "cpu"
    assert result["cpu_bound_rows_per_s"] == pytest.approx(2 / (44.0 / 100_000))  # 2 CPUs, 0.44 ms a row
    assert "2 tasks x 200 in flight / 30 ms = 13,333 rows/s; this run: 4,000 (30%)" in text
    assert "31.0 ms inside the service, 90.0 ms as the Spark tasks saw it" in text
    assert "CPU per row: 0.44 ms (service 0.08, Spark's Python workers 0.30)" in text
    assert "CPU-bound" in text and "96% busy" in text and "~59 ms" in text
    assert "other processes" not in text  # 4 of 50 CPU-s is not worth a line


def test_explain_a_latency_bound_run_and_others_load():
    lines = []
    cpu = {"service": 1.0, "python workers": 3.0, "spark jvm": 1.0, "driver": 0.0,
           "rest of the machine": 20.0, "idle": 25.0}
    result = explain(figures(client_p50_ms=33.0, cpu_seconds=cpu), tasks=2, capacity=200, latency=0.03,
                     out=lines.append)
    text = "\n".join(lines)
    assert result["verdict"] == "latency" and "latency-bound" in text
    assert "other processes on this machine took 40% of the CPUs" in text


def test_explain_without_proc():
    lines = []
    result = explain(figures(cpu_seconds=None), tasks=2, capacity=200, latency=0.03, out=lines.append)
    assert result == {"cpu_bound_rows_per_s": None, "verdict": "other"}
    text = "\n".join(lines)
    assert "the service used 8.0 s (0.08 ms per call)" in text and "unmeasured" in text
