"""Third-party asyncio libraries inside a call, against real servers on 127.0.0.1."""
from __future__ import annotations

import pytest

from . import checks_libs as checks


def test_httpx(run, config):
    outputs = run(checks.httpx_client, config)
    assert outputs == ["200 echoed=True read-timeout closed=True"] * len(outputs)


def test_httpx2(run, config):
    pytest.importorskip("httpx2")  # Python 3.11+ only (as the openai SDK 3.x that depends on it)
    outputs = run(checks.httpx2_client, config)
    assert outputs == ["200 echoed=True read-timeout closed=True"] * len(outputs)


def test_anyio(run, config):
    outputs = run(checks.anyio_scopes, config)
    expected = "fits fired group=[0, 1, 2] scope-cancelled thread=42 event"
    assert outputs == [expected] * len(outputs)


def test_tenacity(run, config):
    outputs = run(checks.tenacity_retrying, config)
    assert outputs == ["attempts=3 decorated=done calls=2"] * len(outputs)


def test_aiolimiter(run, config):
    outputs = run(checks.aiolimiter_limits, config)
    assert outputs == ["admitted=8"] * len(outputs)


def test_sniffio_sees_asyncio(run, config):
    outputs = run(checks.sniffio_library, config)
    assert outputs == ["asyncio"] * len(outputs)


def test_aiohttp(run, config):
    outputs = run(checks.aiohttp_session, config)
    assert outputs == ["200 echoed=True timeout closed=True"] * len(outputs)


@pytest.fixture
def db_config(config, redis_server, postgres_server):
    return {**config, "redis": redis_server.url, "postgres": postgres_server.dsn}


def test_redis_asyncio(run, db_config):
    outputs = run(checks.redis_asyncio, db_config)
    assert outputs == ["get=True pipeline=[1, 2, 1] blpop=None"] * len(outputs)


def test_asyncpg(run, db_config):
    outputs = run(checks.asyncpg_queries, db_config)
    assert outputs == ["doubled=True total=3 timeout usable=1 pool=[0, 1, 2]"] * len(outputs)


def test_openai_sdk(run, config):
    outputs = run(checks.openai_sdk, config)
    assert outputs == [f"echo: row {i} | 5 | [[2.0, 0.5, -1.0], [4.0, 0.5, -1.0]]" for i in range(len(outputs))]


def test_anthropic_sdk(run, config):
    outputs = run(checks.anthropic_sdk, config)
    assert outputs == [f"echo: row {i} | end_turn | 2" for i in range(len(outputs))]
