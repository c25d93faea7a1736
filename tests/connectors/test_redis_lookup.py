import asyncio
import json
import pickle

import cloudpickle
import pytest

from aiospark.connectors import ConnectorError, RedisLookup
from aiospark.lookup import LookupCache, Lookuper

from ._support import REDIS_PASSWORD, TRICKY, dead_port


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def one(source, *keys):
    async with source:
        return [await source.lookup(k) for k in keys]


async def batch(source, keys):
    async with source:
        return await source.lookup_batch(keys)


def make(redis_server, template, schema, **kw):
    return RedisLookup(template, schema, url=redis_server.url, password=REDIS_PASSWORD, **kw)


@pytest.fixture(scope="module")
def seeded(redis_server):
    c = redis_server.client()
    c.flushdb()
    c.hset("user:1", mapping={"name": "Ada", "age": "36", "score": "9.5", "admin": "true"})
    c.hset("user:2", mapping={"name": "Bob", "age": "41"})
    c.set("price:1", "1.25")
    c.set("price:2", "3")
    c.set("doc:1", json.dumps({"name": "one", "n": 1}))
    c.set("doc:2", json.dumps([{"name": "two-a", "n": 2}, {"name": "two-b", "n": 3}]))
    c.set("doc:bad", "{not json")
    c.set("stock:eu:1", "10")
    for k in TRICKY:
        c.hset(f"user:{k}", mapping={"name": f"tricky {k}"})
    yield c
    c.close()


def test_hash_single_and_types(redis_server, seeded):
    src = make(redis_server, "user:{id}", "name STRING, age INT, score DOUBLE, admin BOOLEAN")
    r1, r2, miss = run(one(src, (1,), ("2",), (999,)))
    assert r1 == [{"name": "Ada", "age": 36, "score": 9.5, "admin": True}]
    assert r2 == [{"name": "Bob", "age": 41, "score": None, "admin": None}]
    assert miss == []


def test_hash_batch_is_one_pipeline(redis_server, seeded):
    src = make(redis_server, "user:{id}", "name STRING")
    seeded.config_resetstat()
    got = run(batch(src, [(1,), (2,), (999,), (None,)]))
    assert got == {(1,): [{"name": "Ada"}], (2,): [{"name": "Bob"}], (999,): []}
    stats = seeded.info("commandstats")
    assert stats["cmdstat_hgetall"]["calls"] == 3


def test_string_and_json_kinds(redis_server, seeded):
    price = make(redis_server, "price:{id}", "price DOUBLE", kind="string")
    assert run(one(price, (1,), (2,), (3,))) == [[{"price": 1.25}], [{"price": 3.0}], []]
    docs = make(redis_server, "doc:{id}", "name STRING, n BIGINT", kind="json")
    assert run(one(docs, (1,), (2,), (3,))) == [
        [{"name": "one", "n": 1}],
        [{"name": "two-a", "n": 2}, {"name": "two-b", "n": 3}],
        []]
    with pytest.raises(ConnectorError, match="not valid JSON"):
        run(one(docs, ("bad",)))


def test_mget_batches_through_lookuper(redis_server, seeded):
    c = seeded
    c.mset({f"bulk:{i}": json.dumps({"v": i}) for i in range(250)})
    src = make(redis_server, "bulk:{id}", "v INT", kind="json", max_batch_size=100)
    c.config_resetstat()

    async def main():
        async with Lookuper(src, cache=LookupCache()) as lk:
            rows = await asyncio.gather(*(lk.lookup((i,)) for i in range(300)))
            again = await lk.lookup((5,))
            return rows, again, lk.stats()
    rows, again, stats = run(main())
    assert [r[0]["v"] if r else None for r in rows] == list(range(250)) + [None] * 50
    assert again == [{"v": 5}] and stats["cache_hits"] == 1
    cmd = c.info("commandstats")
    # three MGETs; the 50 nil answers (missing keys) asked again with GET, to tell WRONGTYPE apart
    assert cmd["cmdstat_mget"]["calls"] == 3 and cmd["cmdstat_get"]["calls"] == 50


def test_tricky_keys_literal_and_null(redis_server, seeded):
    src = make(redis_server, "user:{id}", "name STRING")
    results = run(one(src, *[(k,) for k in TRICKY]))
    assert results == [[{"name": f"tricky {k}"}] for k in TRICKY]
    assert run(batch(src, [(k,) for k in TRICKY])) == {(k,): [{"name": f"tricky {k}"}] for k in TRICKY}
    seeded.config_resetstat()
    assert run(one(src, (None,))) == [[]]
    assert "cmdstat_hgetall" not in seeded.info("commandstats")


def test_composite_key(redis_server, seeded):
    src = make(redis_server, "stock:{region}:{id}", "qty INT", kind="string")
    assert src.key_columns == ("region", "id")
    assert run(one(src, ("eu", 1), ("us", 1))) == [[{"qty": 10}], []]


def test_wrongtype_is_not_retryable(redis_server, seeded):
    src = make(redis_server, "price:{id}", "x STRING", kind="hash")
    with pytest.raises(ConnectorError, match="WRONGTYPE") as info:
        run(one(src, (1,)))
    assert info.value.retryable is False


def test_password_from_env_and_url(redis_server, seeded, monkeypatch):
    monkeypatch.setenv("REDIS_PASSWORD", REDIS_PASSWORD)
    env_src = RedisLookup("user:{id}", "name STRING", url=redis_server.url)
    assert REDIS_PASSWORD not in repr(env_src)
    copy = pickle.loads(cloudpickle.dumps(env_src))
    assert run(one(copy, (1,))) == [[{"name": "Ada"}]]
    monkeypatch.delenv("REDIS_PASSWORD")
    url_src = RedisLookup("user:{id}", "name STRING",
                          url=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_server.port}/0")
    assert REDIS_PASSWORD not in repr(url_src) and REDIS_PASSWORD not in str(url_src)
    assert run(one(url_src, (2,))) == [[{"name": "Bob"}]]


def test_wrong_password_and_no_password(redis_server, monkeypatch):
    monkeypatch.delenv("REDIS_PASSWORD", raising=False)
    wrong = RedisLookup("user:{id}", "name STRING", url=redis_server.url, password="not-the-pw-77")
    with pytest.raises(ConnectorError, match="authentication failed") as info:
        run(one(wrong, (1,)))
    assert "not-the-pw-77" not in str(info.value) and info.value.retryable is False
    none = RedisLookup("user:{id}", "name STRING", url=redis_server.url)
    with pytest.raises(ConnectorError, match="authentication failed"):
        run(one(none, (1,)))


def test_server_down(monkeypatch):
    monkeypatch.delenv("REDIS_PASSWORD", raising=False)
    port = dead_port()
    src = RedisLookup("user:{id}", "name STRING", url=f"redis://127.0.0.1:{port}/3",
                      password="down-pw-5150", timeout=2)
    with pytest.raises(ConnectorError) as info:
        run(one(src, (1,)))
    msg = str(info.value)
    assert f"RedisLookup(127.0.0.1:{port}/3)" in msg and "cannot connect" in msg
    assert info.value.retryable and "down-pw-5150" not in msg


@pytest.mark.parametrize("args, kwargs, match", [
    (("user:{id}", "a STRING"), {"kind": "list"}, "kind must be one of"),
    (("user:{id}", "a STRING, b INT"), {"kind": "string"}, "one-column schema"),
    (("user", "a STRING"), {}, "no placeholder"),
    (("user:{}", "a STRING"), {}, "empty placeholder"),
    (("user:{id}", ""), {}, "non-empty"),
    (("user:{id}", "a STRING"), {"url": "http://127.0.0.1:6379"}, "redis://"),
    (("user:{id}", "a STRING"), {"max_connections": 0}, "max_connections"),
    (("user:{id}", "a STRING"), {"timeout": -1}, "timeout"),
    (("user:{id}", "a STRING"), {"key_columns": ["uid"]}, "exactly the placeholders"),
])
def test_constructor_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        RedisLookup(*args, **kwargs)
