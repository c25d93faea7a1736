import asyncio
import email.utils
import pickle
import time
from urllib.parse import quote

import cloudpickle
import pytest

from aiospark.connectors import ConnectorError, ConnectorTimeout, HttpLookup, HttpStatusError
from aiospark.lookup import LookupCache, Lookuper

from ._support import HTTP_TOKEN, TRICKY, dead_port


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def one(source, *keys):
    async with source:
        return [await source.lookup(k) for k in keys]


def enc(k):
    return {".": "%2E", "..": "%2E%2E"}.get(k, quote(k, safe=""))


def test_single_lookup_maps_and_converts(http_server):
    http_server.items["1"] = {"name": "pen", "price": "1.5", "extra": True}
    http_server.items["2"] = {"name": "ink"}
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING, price DOUBLE")
    assert src.key_columns == ("id",)
    r1, r2, r3 = run(one(src, (1,), ("2",), (404404,)))
    assert r1 == [{"name": "pen", "price": 1.5}]
    assert r2 == [{"name": "ink", "price": None}]
    assert r3 == []  # 404 -> miss


def test_multi_rows_and_json_path(http_server):
    http_server.multi["A"] = [{"tag": "red"}, {"tag": "big"}, {"tag": "new"}]
    http_server.items["w"] = {"name": "wrapped"}
    multi = HttpLookup(http_server.base + "/multi/{sku}", "tag STRING")
    assert run(one(multi, ("A",), ("none",))) == [
        [{"tag": "red"}, {"tag": "big"}, {"tag": "new"}], []]
    wrapped = HttpLookup(http_server.base + "/wrapped/{id}", "name STRING", json_path="data.item")
    assert run(one(wrapped, ("w",), ("absent",))) == [[{"name": "wrapped"}], []]


def test_null_key_makes_no_request(http_server):
    before = len(http_server.raw_paths)
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING")
    assert run(one(src, (None,))) == [[]]

    async def via_lookuper():
        async with Lookuper(src) as lk:
            return await lk.lookup((None,))
    assert run(via_lookuper()) == []
    assert len(http_server.raw_paths) == before


def test_tricky_keys_are_sent_literally(http_server):
    for k in TRICKY:
        http_server.items[k] = {"name": k}
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING")
    before = len(http_server.raw_paths)
    results = run(one(src, *[(k,) for k in TRICKY]))
    assert results == [[{"name": k}] for k in TRICKY]
    sent = http_server.raw_paths[before:]
    assert sent == ["/item/" + enc(k) for k in TRICKY]
    assert "/item/..%2Fetc%2Fpasswd" in sent and "/item/100%25" in sent
    assert "/item/x%27%3B%20DROP%20TABLE%20t%3B%20--" in sent


def test_tricky_keys_in_query_string(http_server):
    for k in TRICKY:
        http_server.items[k] = {"name": k}
    src = HttpLookup(http_server.base + "/q?id={id}&v=1", "name STRING")
    before = len(http_server.raw_paths)
    assert run(one(src, *[(k,) for k in TRICKY])) == [[{"name": k}] for k in TRICKY]
    assert http_server.raw_paths[before:] == [f"/q?id={enc(k)}&v=1" for k in TRICKY]


def test_positional_and_composite_keys(http_server):
    src = HttpLookup(http_server.base + "/pair/{1}/{0}", "a STRING, b STRING")
    assert run(one(src, ("B/1", "A?"))) == [[{"a": "A?", "b": "B/1"}]]
    named = HttpLookup(http_server.base + "/pair/{region}/{id}", "a STRING, b INT",
                       key_columns=["id", "region"])
    assert run(one(named, (7, "eu"))) == [[{"a": "eu", "b": 7}]]
    with pytest.raises(ValueError, match="expected a key tuple of 2"):
        run(one(named, (7,)))


def test_status_errors(http_server):
    base = http_server.base
    src = HttpLookup(base + "/status/{code}?retry_after={after}", "x STRING")

    async def fails(*key):
        async with src:
            with pytest.raises(HttpStatusError) as info:
                await src.lookup(key)
        return info.value

    e500 = run(fails(500, "2"))
    assert e500.status == 500 and e500.retryable and e500.retry_after == 2.0
    assert "HTTP 500" in str(e500) and f"127.0.0.1:{http_server.port}" in str(e500)
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    e503 = run(fails(503, when))
    assert e503.retryable and 25 <= e503.retry_after <= 31
    e429 = run(fails(429, "1"))
    assert e429.retryable and e429.retry_after == 1.0
    e502 = run(fails(502, "soon"))
    assert e502.retryable and e502.retry_after is None
    for code in (400, 401, 403, 422):
        err = run(fails(code, "5"))
        assert err.status == code and err.retryable is False and err.retry_after is None
    assert isinstance(e500, ConnectorError)
    assert pickle.loads(pickle.dumps(e500)).retry_after == 2.0


def test_timeout_and_bad_json(http_server):
    slow = HttpLookup(http_server.base + "/slow/{id}?delay=1", "id STRING", timeout=0.2)
    with pytest.raises(ConnectorTimeout) as info:
        run(one(slow, ("a",)))
    assert isinstance(info.value, TimeoutError) and info.value.retryable
    text = HttpLookup(http_server.base + "/text/{id}", "id STRING")
    with pytest.raises(ConnectorError, match="non-JSON"):
        run(one(text, ("a",)))


def test_max_connections_limits_parallel_requests(http_server):
    src = HttpLookup(http_server.base + "/slow/{id}?delay=0.15", "id STRING", max_connections=2)

    async def main():
        async with src:
            t0 = time.monotonic()
            rows = await asyncio.gather(*(src.lookup((str(i),)) for i in range(6)))
            return rows, time.monotonic() - t0
    rows, elapsed = run(main())
    assert [r[0]["id"] for r in rows] == [str(i) for i in range(6)]
    assert elapsed >= 0.4  # 3 waves of 2


def test_batch_endpoint(http_server):
    for k in ("b1", "b2", "a/b"):
        http_server.items[k] = {"name": k.upper()}
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING",
                     batch_url=http_server.base + "/batch", max_batch_size=4, max_batch_delay=0.01)
    assert src.supports_batch

    async def direct():
        async with src:
            return await src.lookup_batch([("b1",), ("a/b",), ("nope",)])
    assert run(direct()) == {("b1",): [{"name": "B1"}], ("a/b",): [{"name": "A/B"}], ("nope",): []}
    assert http_server.batch_bodies[-1] == {"keys": ["b1", "a/b", "nope"]}

    n_before = len(http_server.batch_bodies)

    async def through_lookuper():
        async with Lookuper(src, cache=LookupCache()) as lk:
            keys = ["b1", "b2", "a/b"] + [f"x{i}" for i in range(7)] + ["b1"] * 5
            rows = await asyncio.gather(*(lk.lookup((k,)) for k in keys))
            return keys, rows
    keys, rows = run(through_lookuper())
    assert rows[:3] == [[{"name": "B1"}], [{"name": "B2"}], [{"name": "A/B"}]]
    assert all(r == [] for r in rows[3:10]) and all(r == [{"name": "B1"}] for r in rows[10:])
    sent = http_server.batch_bodies[n_before:]
    assert [len(b["keys"]) for b in sent] == [4, 4, 2]  # 10 distinct keys, size 4


def test_batch_error_reaches_all_waiters(http_server):
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING",
                     batch_url=http_server.base + "/batch", max_batch_delay=0.02)

    async def main():
        async with Lookuper(src) as lk:
            return await asyncio.gather(*(lk.lookup((k,)) for k in ("boom", "x", "y")),
                                        return_exceptions=True)
    errs = run(main())
    assert all(isinstance(e, HttpStatusError) and e.status == 500 and e.retryable for e in errs)


def test_server_down_names_source(http_server):
    port = dead_port()
    for src in (HttpLookup(f"http://user:hunter22@127.0.0.1:{port}/item/{{id}}", "name STRING"),
                HttpLookup(f"http://127.0.0.1:{port}/item/{{id}}", "name STRING",
                           auth_token="tok-abc-123")):
        with pytest.raises(ConnectorError) as info:
            run(one(src, ("1",)))
        msg = str(info.value)
        assert f"HttpLookup(127.0.0.1:{port})" in msg and "cannot connect" in msg
        assert info.value.retryable
        assert "hunter22" not in msg and "tok-abc-123" not in msg and "user:" not in msg


def test_batch_server_down_is_a_retryable_error_naming_the_source():
    port = dead_port()
    src = HttpLookup(f"http://127.0.0.1:{port}/item/{{id}}", "name STRING",
                     batch_url=f"http://127.0.0.1:{port}/batch", auth_token="tok-batch-77")

    async def main():
        await src.open()
        try:
            return await src.lookup_batch([(1,), (2,)])
        finally:
            await src.close()
    with pytest.raises(ConnectorError) as info:
        run(main())
    msg = str(info.value)
    assert f"HttpLookup(127.0.0.1:{port})" in msg and "cannot connect" in msg
    assert info.value.retryable and "tok-batch-77" not in msg


def test_auth_token_from_env(http_server, monkeypatch):
    monkeypatch.setenv("STUB_TOKEN", HTTP_TOKEN)
    src = HttpLookup(http_server.base + "/auth/{id}", "id STRING", auth_token_env="STUB_TOKEN")
    assert HTTP_TOKEN not in repr(src)
    copy = pickle.loads(cloudpickle.dumps(src))
    assert run(one(copy, ("z",))) == [[{"id": "z"}]]
    wrong = HttpLookup(http_server.base + "/auth/{id}", "id STRING", auth_token="wrong-token-99")
    with pytest.raises(HttpStatusError) as info:
        run(one(wrong, ("z",)))
    assert info.value.status == 401 and "wrong-token-99" not in str(info.value)
    missing = HttpLookup(http_server.base + "/auth/{id}", "id STRING", auth_token_env="NOPE_UNSET")
    with pytest.raises(ConnectorError, match="NOPE_UNSET"):
        run(one(missing, ("z",)))


def test_post_method_sends_key_as_json(http_server):
    http_server.items["p"] = {"name": "P"}
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING", method="post")
    assert run(one(src, ("p",))) == [[{"name": "P"}]]


def test_not_open_is_a_clear_error(http_server):
    src = HttpLookup(http_server.base + "/item/{id}", "name STRING")
    with pytest.raises(RuntimeError, match="not open"):
        run(src.lookup(("1",)))


@pytest.mark.parametrize("args, kwargs, match", [
    (("http://h/item", "a STRING"), {}, "no placeholder"),
    (("http://h/item/{}", "a STRING"), {}, "empty placeholder"),
    (("http://h/item/{id!r}", "a STRING"), {}, "conversion or format spec"),
    (("http://h/item/{id:>4}", "a STRING"), {}, "conversion or format spec"),
    (("http://h/item/{a.b}", "a STRING"), {}, "key column name"),
    (("http://h/{0}/{id}", "a STRING"), {}, "mixes named and positional"),
    (("http://h/{1}", "a STRING"), {}, "must cover"),
    (("http://h/item/{id", "a STRING"), {}, "malformed"),
    (("ftp://h/{id}", "a STRING"), {}, "http:// or https://"),
    (("/item/{id}", "a STRING"), {}, "absolute"),
    (("http://{host}/x/{id}", "a STRING"), {}, "path and query only"),
    (("http://h/{id}", ""), {}, "non-empty Spark DDL"),
    (("http://h/{id}", "a WHATEVER"), {}, "unknown type"),
    (("http://h/{id}", "a STRING"), {"method": "DELETE"}, "method"),
    (("http://h/{id}", "a STRING"), {"key_columns": ["id", "x"]}, "exactly the placeholders"),
    (("http://h/{id}", "a STRING"), {"timeout": 0}, "timeout"),
    (("http://h/{id}", "a STRING"), {"max_connections": 0}, "max_connections"),
    (("http://h/{id}", "a STRING"), {"batch_request": lambda k: k}, "needs batch_url"),
    (("http://h/{id}", "a STRING"), {"batch_url": "http://h/b/{id}"}, "without placeholders"),
    (("http://u:p@h/{id}", "a STRING"), {"auth_token": "t"}, "not both"),
    (("http://h/{id}", "a STRING"), {"auth_token": "t", "headers": {"authorization": "x"}},
     "conflicts"),
])
def test_constructor_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        HttpLookup(*args, **kwargs)
