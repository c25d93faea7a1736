"""What the issue-46 tests of ``aiospark enrich`` share: the real ``aiospark`` console script of this
venv run as a subprocess, and an HTTP service on 127.0.0.1 that records what it was asked."""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from urllib.parse import unquote

from tests.support.threaded_http import LoopbackHTTPServer

#: the console script ``pip install`` made for this venv (what a user runs)
AIOSPARK = os.path.join(os.path.dirname(sys.executable), "aiospark")


def aiospark(*args, timeout=600, env=None, cwd=None):
    """Run ``aiospark ARGS`` and return the CompletedProcess (text output)."""
    env = dict(os.environ if env is None else env, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([AIOSPARK, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


class EchoServer:
    """GET <path> -> ``{"seen": <decoded path and query>, "n": <length of it>}`` after ``delay`` seconds
    (keys in ``failing`` get HTTP 500). ``paths``, ``headers`` and ``times`` record every request."""

    def __init__(self, delay=0.0, failing=()):
        self.paths: list[str] = []
        self.headers: list[dict] = []
        self.times: list[float] = []
        lock = threading.Lock()
        outer = self
        failing = set(failing)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen = unquote(self.path)
                with lock:
                    outer.paths.append(seen)
                    outer.headers.append(dict(self.headers))
                    outer.times.append(time.monotonic())
                if delay:
                    time.sleep(delay)
                if seen.split("?")[0].rsplit("/", 1)[-1] in failing:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"seen": seen, "n": len(seen)}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout): nothing to answer
                    pass

            def log_message(self, *args):
                pass

        self.server = LoopbackHTTPServer(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def no_spark_env():
    """An environment in which Spark cannot start: an answer seen here was given before Spark."""
    env = dict(os.environ, JAVA_HOME="/nonexistent-java", SPARK_HOME="/nonexistent-spark")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not os.path.exists(os.path.join(p, "java")))
    return env


def read_csv_dir(path):
    import csv

    rows = []
    for f in sorted(path.glob("part-*")):
        with open(f, newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def read_json_lines(path):
    return [json.loads(line) for f in sorted(path.glob("part-*")) for line in f.read_text().splitlines()]
