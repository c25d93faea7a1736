"""An error is never a miss: every answer a lookup maps to "no such row" can mean nothing else.

Each case below is an answer that used to pass, or could pass, for a miss (an empty result) while
it says something went wrong: a key of another Redis type, a value that does not parse, an HTTP
200 without JSON, a 404 page from a proxy, an answer without the expected JSON path, a key with no
one text form, a batch source that forgot to return its mapping. Real Redis and real HTTP servers
on 127.0.0.1; both HTTP transports where the transport reads the answer.
"""
from __future__ import annotations

import asyncio
import datetime
import json
import threading

import pytest
from aiohttp import web

from aiospark.connectors import ConnectorError, HttpLookup, HttpStatusError, RedisLookup
from aiospark.lookup import Lookuper, LookupSource
from tests.support.servers import free_port

from ._support import REDIS_PASSWORD


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def single(source, key):
    async with source:
        try:
            return await source.lookup(key)
        except Exception as exc:  # the outcome under test
            return exc


async def batch(source, keys):
    async with source:
        return await source.lookup_batch(keys)


# --- Redis ------------------------------------------------------------------------------------

def redis(redis_server, template, schema, **kw):
    return RedisLookup(template, schema, url=redis_server.url, password=REDIS_PASSWORD, **kw)


@pytest.fixture(scope="module")
def rdb(redis_server):
    c = redis_server.client()
    c.delete(*[k for k in c.keys("err:*")] or ["err:none"])
    c.hset("err:hash", mapping={"v": "1"})
    c.set("err:str", "7")
    c.set("err:json", json.dumps({"v": 3}))
    c.set("err:badjson", "{'v': 3")        # not JSON
    c.set("err:empty", "")                # an empty value is a value, not a missing key
    c.hset("err:badfield", mapping={"v": "seven"})  # a field that is no INT
    c.rpush("err:list", "1")
    return c


@pytest.mark.parametrize("kind, key", [("json", "hash"), ("string", "hash"), ("json", "list"),
                                       ("hash", "str"), ("hash", "list")])
def test_redis_key_of_another_type_is_an_error_single_and_batch(redis_server, rdb, kind, key):
    src = redis(redis_server, "err:{k}", "v INT", kind=kind)
    got = run(single(src, (key,)))
    assert isinstance(got, ConnectorError) and "WRONGTYPE" in str(got), got
    # in a batch (MGET answers nil for a key of another type): that key's error, neighbours fine
    good, miss = ("json", "json") if kind == "json" else (("str", "absent") if kind == "string" else ("hash", "absent"))
    out = run(batch(src, [(key,), (good,), ("absent",)]))
    assert isinstance(out[(key,)], ConnectorError) and "WRONGTYPE" in str(out[(key,)]), out
    assert out.get(("absent",), []) == []
    assert out[(good,)] and not isinstance(out[(good,)], Exception)


@pytest.mark.parametrize("key", ["badjson", "empty"])
def test_redis_json_that_does_not_parse_is_an_error(redis_server, rdb, key):
    src = redis(redis_server, "err:{k}", "v INT", kind="json")
    got = run(single(src, (key,)))
    assert isinstance(got, ConnectorError) and "not valid JSON" in str(got), got
    out = run(batch(src, [(key,), ("json",)]))
    assert isinstance(out[(key,)], ConnectorError) and out[("json",)] == [{"v": 3}]


def test_redis_empty_string_is_a_value_for_kind_string(redis_server, rdb):
    src = redis(redis_server, "err:{k}", "v STRING", kind="string")
    assert run(single(src, ("empty",))) == [{"v": ""}]
    assert run(batch(src, [("empty",)])) == {("empty",): [{"v": ""}]}


def test_redis_hash_field_of_the_wrong_type_is_an_error(redis_server, rdb):
    src = redis(redis_server, "err:{k}", "v INT", kind="hash")
    got = run(single(src, ("badfield",)))
    assert isinstance(got, ConnectorError) and "cannot convert 'seven' to INT" in str(got), got
    out = run(batch(src, [("badfield",), ("hash",)]))
    assert isinstance(out[("badfield",)], ConnectorError) and out[("hash",)] == [{"v": 1}]


def test_redis_timestamp_key_is_an_error_that_says_what_to_change(redis_server, rdb):
    src = redis(redis_server, "err:{k}", "v INT", kind="hash")
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    got = run(single(src, (when,)))
    assert isinstance(got, TypeError) and "cast the key column to STRING" in str(got), got
    out = run(batch(src, [(when,), ("hash",)]))
    assert isinstance(out[(when,)], ConnectorError) and "cast the key column" in str(out[(when,)])
    assert out[("hash",)] == [{"v": 1}]


def test_redis_true_misses_stay_misses(redis_server, rdb):
    """A missing key, a NULL key part, a lone surrogate (no bytes decode to it): no row."""
    src = redis(redis_server, "err:{k}", "v INT", kind="json")
    assert run(single(src, ("absent",))) == []
    assert run(single(src, (None,))) == []
    assert run(single(src, ("\ud800",))) == []
    assert run(batch(src, [("absent",), ("\ud800",)])).get(("absent",), []) == []


# --- HTTP -------------------------------------------------------------------------------------

class Answers:
    """An aiohttp server answering ``/<case>/<key>`` with the answer named by ``case``."""

    CASES = {
        "row": lambda k: web.json_response({"v": int(k)}),
        "empty200": lambda k: web.Response(status=200, body=b""),
        "text200": lambda k: web.Response(status=200, text="<html>maintenance</html>", content_type="text/html"),
        "gone": lambda k: web.Response(status=404),                      # the service: no such row
        "gonejson": lambda k: web.json_response({"error": "no such item"}, status=404),
        "proxy404": lambda k: web.Response(status=404, text="<html><body><h1>404 Not Found</h1>"
                                           "<hr>nginx</body></html>", content_type="text/html"),
        "plain404": lambda k: web.Response(status=404, text="404 page not found"),
        "wrapped": lambda k: web.json_response({"data": {"item": {"v": int(k)}}}),
        "wrappednull": lambda k: web.json_response({"data": {"item": None}}),
        "errorbody": lambda k: web.json_response({"error": {"message": "quota exceeded"}}),
    }

    def __init__(self):
        self.port = free_port()
        self._ready = threading.Event()

    async def _handle(self, request):
        case, _, key = request.path.strip("/").partition("/")
        return self.CASES[case](key)

    def start(self):
        def serve():
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
            self._ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def stop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def url(self, case):
        return f"http://127.0.0.1:{self.port}/{case}/{{k}}"


@pytest.fixture(scope="module")
def answers():
    server = Answers().start()
    yield server
    server.stop()


TRANSPORTS = ["aiohttp", pytest.param("pyreqwest", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("pyreqwest") is None, reason="pyreqwest not installed"))]


def http(answers, case, transport, **kw):
    return HttpLookup(answers.url(case), "v INT", transport=transport, **kw)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_http_200_without_json_is_an_error(answers, transport):
    for case, said in (("empty200", "an empty body"), ("text200", "a non-JSON body")):
        got = run(single(http(answers, case, transport), ("1",)))
        assert isinstance(got, ConnectorError) and said in str(got), (case, got)
        assert not isinstance(got, HttpStatusError)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_http_404_from_a_proxy_is_an_error_the_services_own_is_a_miss(answers, transport):
    assert run(single(http(answers, "gone", transport), ("1",))) == []
    assert run(single(http(answers, "gonejson", transport), ("1",))) == []
    for case in ("proxy404", "plain404"):
        got = run(single(http(answers, case, transport), ("1",)))
        assert isinstance(got, HttpStatusError) and got.status == 404 and not got.retryable, got
        assert "check url_template" in str(got) and "not_found='any'" in str(got)
    # the user says how this service answers a missing row
    assert run(single(http(answers, "plain404", transport, not_found="any"), ("1",))) == []
    got = run(single(http(answers, "gone", transport, not_found="error"), ("1",)))
    assert isinstance(got, HttpStatusError) and got.status == 404
    assert "check url_template" not in str(got)  # not_found="error": every 404 is plainly an error


def test_http_not_found_is_validated_at_definition_time(answers):
    with pytest.raises(ValueError, match="not_found must be one of 'json', 'any', 'error'"):
        HttpLookup(answers.url("row"), "v INT", not_found="ignore")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_http_answer_without_the_json_path_is_an_error_explicit_null_a_miss(answers, transport):
    assert run(single(http(answers, "wrapped", transport, json_path="data.item"), ("4",))) == [{"v": 4}]
    assert run(single(http(answers, "wrappednull", transport, json_path="data.item"), ("4",))) == []
    got = run(single(http(answers, "errorbody", transport, json_path="data.item"), ("4",)))
    assert isinstance(got, ConnectorError) and "the answer has no 'data'" in str(got), got
    assert "found: error" in str(got)


def test_http_timestamp_key_is_an_error_not_a_miss(answers):
    got = run(single(http(answers, "row", "aiohttp"), (datetime.datetime(2026, 1, 1),)))
    assert isinstance(got, TypeError) and "cast the key column to STRING" in str(got), got


# --- the lookup front end ------------------------------------------------------------------------

class ForgetfulBatch(LookupSource):
    """A user's batch source whose lookup_batch forgot its ``return``."""

    schema = "v INT"
    supports_batch = True

    async def lookup(self, key):
        return [{"v": 1}]

    async def lookup_batch(self, keys):
        [{"v": 1} for _ in keys]  # the missing return is the point


def test_a_batch_source_that_returns_none_is_an_error_not_all_misses():
    async def main():
        async with Lookuper(ForgetfulBatch(), batch=True) as lk:
            return await asyncio.gather(lk.lookup((1,)), lk.lookup((2,)), return_exceptions=True)

    got = run(main())
    assert all(isinstance(g, TypeError) and "must return a mapping" in str(g) for g in got), got
