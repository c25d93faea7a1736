"""Credentials never show in repr/str, error messages, tracebacks or logs."""

import asyncio
import logging
import pickle
import traceback

import pytest

from aiospark.connectors import ConnectorError, HttpLookup, PostgresLookup, RedisLookup, Secret
from aiospark.lookup import Lookuper

from ._support import REDIS_PASSWORD, dead_port

PW = "Sup3r-Secret-Pw"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def open_and_lookup(source):
    async with Lookuper(source) as lk:
        return await lk.lookup((1,))


def assert_clean(text):
    assert PW not in text
    assert PW.replace("-", "%2D") not in text


def sources(http_server, redis_server, pg_server):
    down = dead_port()
    return [
        # wrong credentials against live servers
        HttpLookup(http_server.base + "/auth/{id}", "id STRING", auth_token=PW),
        HttpLookup(f"http://reader:{PW}@127.0.0.1:{http_server.port}/basic/{{id}}", "id STRING"),
        HttpLookup(http_server.base + "/status/403?k={id}", "id STRING", headers={"X-Api-Key": PW}),
        HttpLookup(http_server.base + f"/status/500?api_key={PW}&k={{id}}", "id STRING"),
        HttpLookup(http_server.base + f"/status/1?token={PW}&k={{id}}", "id STRING"),
        RedisLookup("user:{id}", "name STRING", url=redis_server.url, password=PW),
        RedisLookup("user:{id}", "name STRING", url=f"redis://default:{PW}@127.0.0.1:{redis_server.port}/0"),
        PostgresLookup("items", "id", "name STRING", host="127.0.0.1", port=pg_server.port,
                       user=pg_server.user, database=pg_server.database, password=PW),
        PostgresLookup("items", "id", "name STRING",
                       dsn=f"postgresql://{pg_server.user}:{PW}@127.0.0.1:{pg_server.port}/x"),
        # servers that are down
        HttpLookup(f"http://127.0.0.1:{down}/item/{{id}}?api_key={PW}", "id STRING"),
        RedisLookup("user:{id}", "name STRING", url=f"redis://127.0.0.1:{down}/0", password=PW),
        PostgresLookup("items", "id", "name STRING", password=PW, host="127.0.0.1", port=down,
                       user="app", database="app", timeout=3),
    ]


def test_no_credentials_in_repr_errors_tracebacks_or_logs(http_server, redis_server, pg_server,
                                                          caplog, monkeypatch):
    monkeypatch.delenv("REDIS_PASSWORD", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    caplog.set_level(logging.DEBUG)
    for src in sources(http_server, redis_server, pg_server):
        assert_clean(repr(src))
        assert_clean(str(src))
        with pytest.raises(ConnectorError) as info:
            run(open_and_lookup(src))
        err = info.value
        assert err.source and err.source in str(err)
        for text in (str(err), repr(err), "".join(traceback.format_exception(err)),
                     repr(pickle.loads(pickle.dumps(err)))):
            assert_clean(text)
        assert_clean(repr(Lookuper(src)))
    for record in caplog.records:
        assert_clean(record.getMessage())
        if record.exc_info:
            assert_clean("".join(traceback.format_exception(*record.exc_info)))


def test_correct_credentials_work(http_server, redis_server, pg_server):
    basic = HttpLookup(f"http://reader:b4sic-pw@127.0.0.1:{http_server.port}/basic/{{id}}", "id STRING")
    redis_src = RedisLookup("user:{id}", "name STRING", url=redis_server.url, password=REDIS_PASSWORD)
    pg = PostgresLookup("items", "id", "name STRING", dsn=pg_server.dsn)
    redis_server.client().hset("user:1", mapping={"name": "Ada"})
    assert run(open_and_lookup(basic)) == [{"id": "1"}]
    assert run(open_and_lookup(redis_src)) == [{"name": "Ada"}]
    assert run(open_and_lookup(pg)) == [{"name": "pen"}]
    for src in (basic, redis_src, pg):
        assert "b4sic-pw" not in repr(src) and REDIS_PASSWORD not in repr(src)
        assert pg_server.password not in repr(src)


def test_open_connectors_pickle_without_runtime_state(http_server, redis_server, pg_server):
    import cloudpickle

    async def main():
        srcs = [HttpLookup(http_server.base + "/item/{id}", "name STRING"),
                RedisLookup("user:{id}", "name STRING", url=redis_server.url, password=REDIS_PASSWORD),
                PostgresLookup("items", "id", "name STRING", dsn=pg_server.dsn)]
        copies = []
        for src in srcs:
            async with Lookuper(src) as lk:
                await lk.lookup((1,))
                copies.append(pickle.loads(cloudpickle.dumps(lk)))  # while open
        for copy in copies:
            async with copy:
                assert await copy.lookup((1,)) in ([{"name": "Ada"}], [{"name": "pen"}], [])
    run(main())


def test_secret_wrapper():
    s = Secret(PW)
    assert PW not in repr(s) and PW not in str(s) and PW not in f"{s}"
    assert s.reveal() == PW and pickle.loads(pickle.dumps(s)).reveal() == PW
