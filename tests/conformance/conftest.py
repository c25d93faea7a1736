"""Fixtures of the conformance suite: the servers, and ``run``, which runs a check through one entry point.

Every test that takes ``run`` is parametrized over the five ways into a call (see harness.ENTRIES);
the Spark session (the shared, session-scoped ``spark`` fixture of tests/conftest.py) is only
started for the Spark entry points, so the core cases stay cheap.
"""
from __future__ import annotations

import functools
import uuid

import pytest

from .harness import ENTRIES, SPARK_ENTRIES, run_check
from .servers import HttpServer, PostgresServer, RedisServer


@pytest.fixture(scope="session")
def http_server():
    server = HttpServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def config(http_server, tmp_path):
    """What every check gets: the HTTP server, a directory for marker files (the Spark workers are
    processes on this machine, so files written there are visible here) and a unique run id."""
    return {"http": http_server.url, "dir": str(tmp_path), "run": uuid.uuid4().hex[:12]}


@pytest.fixture(params=ENTRIES)
def entry(request):
    return request.param


@pytest.fixture
def run(entry, request):
    """``run(check, config, **options) -> list[str]``: the check's outputs through ``entry``."""
    spark = request.getfixturevalue("spark") if entry in SPARK_ENTRIES else None
    return functools.partial(run_check, entry, spark=spark)
