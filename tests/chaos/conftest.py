"""Fixtures of the reliability suite: fault services and driver subprocesses that never outlive a test.

* ``fault_service(**config)`` starts a real :class:`~tests.support.service.FaultService` on
  127.0.0.1 (thread mode, in this process); every one started is stopped at teardown.
* ``driver(module, *args)`` starts ``python -m <module> ...`` from the repository root in a new
  session, with this interpreter and the repository root on PYTHONPATH (Spark's workers import
  ``tests.chaos``); stdout is a pipe, stderr goes to a log file in ``tmp_path``. At teardown the
  process and every descendant (JVM, PySpark daemon and workers) are SIGKILLed by pid.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.service import FaultService, ServiceConfig

from . import ROOT, kill_tree


@pytest.fixture
def fault_service() -> Callable[..., FaultService]:
    started: list[FaultService] = []

    def start(**config: Any) -> FaultService:
        svc = FaultService(ServiceConfig(**config)).start()
        started.append(svc)
        return svc

    yield start
    for svc in started:
        svc.stop()


@pytest.fixture
def driver(tmp_path):
    procs: list[subprocess.Popen] = []

    def start(module: str, *args: str) -> subprocess.Popen:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        log_path = tmp_path / f"driver-{len(procs)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True)
        proc.log_path = str(log_path)  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        kill_tree(proc)
        if proc.stdout is not None:
            proc.stdout.close()
