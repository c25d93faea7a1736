"""Fixtures of the isolated suites.

Each kind of session needs a process of its own: a Connect session starts a local Connect server in
this process's JVM, a cluster session a classic SparkContext on a standalone master, and the two
cannot share one process. ``AIOSPARK_ISOLATED=<kind>`` (set by tests/spark/test_isolated.py) picks the
suite; the other one is not collected.
"""
from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time

import pytest

KINDS = ("connect", "cluster")
_KIND = os.environ.get("AIOSPARK_ISOLATED", "")

if _KIND not in KINDS:
    raise pytest.UsageError(f"tests/isolated needs AIOSPARK_ISOLATED set to one of {KINDS} (one kind of "
                            f"session per process), got {_KIND!r}")

collect_ignore_glob = [f"{kind}/*" for kind in KINDS if kind != _KIND]


#: The port a local Connect server listens on: PySpark's client always dials sc://localhost:15002 for
#: remote("local[...]") (an ephemeral port is only looked up under SPARK_TESTING).
CONNECT_PORT = 15002
_CONNECT_LOCK = os.path.join(tempfile.gettempdir(), f"aiospark-tests-connect-{CONNECT_PORT}.lock")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def connect_spark():
    """A Spark Connect session on a local Connect server (no SparkContext on the client side).

    Runs of this suite that overlap (several checkouts, several engineers) take turns on port 15002
    through a file lock, so a client never talks to another run's server.
    """
    import aiospark

    with open(_CONNECT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if this process dies
        deadline = time.monotonic() + 60
        while not _port_is_free(CONNECT_PORT):
            if time.monotonic() > deadline:
                pytest.fail(f"port {CONNECT_PORT} stays taken by another process: the local Spark Connect "
                            "server cannot start")
            time.sleep(1)
        session = aiospark.local_session("local[2]", connect=True, conf={
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
        })
        try:
            yield session
        finally:
            session.stop()
