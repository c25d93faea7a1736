"""What the tests of ``aiospark enrich`` share: two ways to run the command, and an HTTP service on
127.0.0.1 that records what it was asked.

* :func:`run_cli` (the ``cli`` fixture) runs it in the test process, on the session-wide local[2]
  Spark session of tests/conftest.py: no JVM of its own to start (10-20 s a run on a 2-core
  machine). Tests about what enrich computes, writes or says use it: values, safety of OUTPUT,
  journal, budget, dry run, malformed input, review findings, failed-row summaries.
* :func:`aiospark` runs the real console script of this venv as a subprocess. Tests about the
  process itself stay there: checks that must answer before Spark starts (run where Java cannot
  start: the proof that no Spark was needed), Ctrl-C and exit 130, a failed run whose Spark log
  file is read (in-process, the running JVM writes its log where it was started, not to the
  command's log file), a run that needs its own ``--master local[1]`` (a per-task rate timed), the
  end-to-end run of the installed command (tests/cli/test_cli.py), ``--version`` and the demo.
"""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import NamedTuple
from urllib.parse import unquote

from tests.support.threaded_http import LoopbackHTTPServer

#: the console script ``pip install`` made for this venv (what a user runs)
AIOSPARK = os.path.join(os.path.dirname(sys.executable), "aiospark")


def aiospark(*args, timeout=600, env=None, cwd=None):
    """Run ``aiospark ARGS`` and return the CompletedProcess (text output)."""
    env = dict(os.environ if env is None else env, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([AIOSPARK, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


class Result(NamedTuple):
    """What a run of the command gave: the fields of a CompletedProcess the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, cwd=None, env=None):
    """Run ``aiospark ARGS`` in this process, on the session-wide Spark session; returns a :class:`Result`.

    Use it through the ``cli`` fixture (tests/cli/conftest.py), which starts that session first: else
    the command would start a session of its own (``--master``'s), which the rest of the run would
    then share. The command's ``local_session``/``getOrCreate`` returns the running local[2]
    session, so its ``--master`` is ignored. What the command does to the process is undone:

    * file descriptors 1 and 2 go to temporary files for the run and ``sys.stdout``/``sys.stderr``
      write to them, so the command's ``_SparkConsole`` (which moves fds 1/2 to Spark's log file and
      keeps ``sys.stdout``/``sys.stderr`` on the saved ones) writes its messages where they are
      read back, as a subprocess's pipes would get them. The running JVM keeps the fds it started
      with: its own log goes to neither.
    * ``env`` replaces ``os.environ`` for the run (``PYSPARK_PYTHON`` set as :func:`aiospark` sets
      it), ``cwd`` the working directory, and ``tempfile``'s cached directory is forgotten so
      ``TMPDIR`` (the autouse fixture's) is read again; all three are restored after. The JVM's
      working directory does not follow ``cwd``: pass Spark absolute paths.
    * ``SystemExit`` gives the exit code, an uncaught exception a traceback on stderr and exit code
      1, as the interpreter would. ``interruptible`` restores the SIGINT handler itself.

    Example::

        done = run_cli("enrich", "in.csv", "out.json", "--url", url, "--schema", "seen STRING")
        done.returncode, done.stdout, done.stderr
    """
    from aiospark.app.cli import main

    saved_env, saved_cwd, saved_tempdir = dict(os.environ), os.getcwd(), tempfile.tempdir
    saved_streams = sys.stdout, sys.stderr
    captured = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = [os.dup(1), os.dup(2)]
    for fd, file in zip((1, 2), captured):
        os.dup2(file.fileno(), fd)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        tempfile.tempdir = None
        if cwd is not None:
            os.chdir(cwd)
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except Exception:
            traceback.print_exc()
            code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.close()
        sys.stderr.close()
        sys.stdout, sys.stderr = saved_streams
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        os.chdir(saved_cwd)
        tempfile.tempdir = saved_tempdir
        os.environ.clear()
        os.environ.update(saved_env)
    texts = []
    for file in captured:
        file.seek(0)
        texts.append(file.read().decode("utf-8", errors="replace"))
        file.close()
    return Result(0 if code is None else code, *texts)


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
