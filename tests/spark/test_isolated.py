"""Run the suites that need a process of their own (tests/isolated/<kind>) in a child pytest.

A Spark Connect session and a session on a standalone cluster cannot share a process with the classic
session of this run (one JVM, one SparkContext per process), so each kind runs in a child pytest with
``AIOSPARK_ISOLATED=<kind>``. Every process of the child run carries a unique marker in its environment
(Spark passes the environment down to the cluster daemons, executors and Python workers), so after the
child ends this test also checks that none of them was left behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import aiospark

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 600  # seconds; each suite takes about 2 minutes on 2 cores
MARKER_VAR = "AIOSPARK_ISOLATED_RUN"


def _processes_with(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes whose environment holds ``MARKER_VAR=marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2:].split()[0] != "Z":
            found.append(int(entry))
    return found


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "?"
        lines.append(f"{pid}: {cmd[:200]}")
    return "\n".join(lines)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run_isolated(kind: str, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    env = dict(os.environ)
    env.update({"AIOSPARK_ISOLATED": kind, MARKER_VAR: marker, "PYTHONUNBUFFERED": "1"})
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    cmd = [sys.executable, "-m", "pytest", f"tests/isolated/{kind}", "-q", "-p", "no:cacheprovider",
           "--basetemp", str(tmp_path / "basetemp"), "-W", "ignore::UserWarning"]
    child = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=CHILD_TIMEOUT)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(child.pid, signal.SIGTERM)  # the child's teardown gets a chance, then no mercy
        try:
            output, _ = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, _ = child.communicate()
    text = output.decode(errors="replace")
    tail = "\n".join(text.splitlines()[-150:])

    # the child's processes (cluster daemons, executors, JVMs, Python workers) must all be gone
    deadline = time.monotonic() + 30
    leftovers = _processes_with(marker)
    while leftovers and time.monotonic() < deadline:
        time.sleep(0.5)
        leftovers = _processes_with(marker)
    if leftovers:
        description = _describe(leftovers)
        _kill(leftovers)
    else:
        description = ""

    problems = []
    if timed_out:
        problems.append(f"did not finish within {CHILD_TIMEOUT}s")
    elif child.returncode != 0:
        problems.append(f"failed (exit {child.returncode})")
    elif " passed" not in text:
        problems.append("ran no test")
    if leftovers:
        problems.append(f"left processes behind (now killed):\n{description}")
    assert not problems, f"tests/isolated/{kind} " + "; ".join(problems) + f"\n--- child output tail ---\n{tail}"


@pytest.mark.slow
@pytest.mark.timeout(CHILD_TIMEOUT + 120)
def test_connect_suite(tmp_path):
    """tests/isolated/connect: every entry point on a Spark Connect session (a local Connect server
    needs PySpark >= 4.0: on 3.5, local_session says so instead of a Java stack trace)."""
    from aiospark.spark.compat import SPARK_VERSION

    if SPARK_VERSION < (4, 0):
        with pytest.raises(RuntimeError, match=r"needs PySpark >= 4\.0"):
            aiospark.local_session("local[1]", connect=True)
        return
    _run_isolated("connect", tmp_path)


@pytest.mark.slow
@pytest.mark.version_agnostic  # a standalone cluster runs the same tasks as local mode
@pytest.mark.timeout(CHILD_TIMEOUT + 120)
def test_cluster_suite(tmp_path):
    """tests/isolated/cluster: a standalone master + worker, real HTTP from the executors."""
    _run_isolated("cluster", tmp_path)

