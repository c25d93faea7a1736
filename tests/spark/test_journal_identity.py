"""A journal never serves a wrong row (issue 43): each test is a row of the issue's table, through
the public API on a real local Spark, with calls counted at a real HTTP service on 127.0.0.1 (or
a real Redis). Rerun = a second action with the same journal, as a second run of the program.

* NULL in a ``key=`` column is no identity; a lookup join's rows are rebuilt from the current row;
* a function whose code or state changed (an attribute, a closure, a default, a decorator's
  argument, a connector's settings) is refused before any call, naming what changed; the
  ``_error``/``_input`` columns of ``on_error="row"`` are not part of the question;
* ``keep_errors`` keeps only the errors a call answered; key order holds for recorded rows;
* ``aiospark.idempotency_key()`` is namespaced by the function.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import aiohttp
import pytest

import aiospark
from aiospark.journal import JournalMismatch
from aiospark.lookup import LookupSource
from tests.chaos import ROOT
from tests.support.journal import calls
from tests.support.openai_fixtures import openai_fixtures

SCHEMA = "id LONG, text STRING"


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            return await r.json()


class Styled(aiospark.AsyncFunction):
    """Answers in a style held in an attribute (the prompt of an LLM call, say)."""

    def __init__(self, url: str, style: str):
        self.url = url
        self.style = style
        self.api_key = "sk-never-in-a-manifest"  # a credential: never part of the fingerprint

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        await _get(f"{self.url}/item/{row['id']}")
        return [{"id": row["id"], "text": f"{self.style}: {row['text']}"}]


def prompted(prompt: str):
    """A function whose prompt is a closure variable."""
    async def answer(row):
        await _get(f"{row['url']}/item/{row['id']}")
        return {"id": row["id"], "text": f"{prompt}: {row['text']}"}
    return answer


def defaulted(style: str):
    """A function whose style is a default argument (no closure)."""
    async def answer(row, style=style):
        await _get(f"{row['url']}/item/{row['id']}")
        return {"id": row["id"], "text": f"{style}: {row['text']}"}
    return answer


def repeat(times: int):
    """A decorator with an argument (held in the wrapper's closure)."""
    def decorate(fn):
        @functools.wraps(fn)
        async def wrapper(row):
            out = await fn(row)
            return {"id": out["id"], "text": out["text"] * times}
        return wrapper
    return decorate


async def base(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"id": row["id"], "text": row["text"]}


twice = repeat(2)(base)
thrice = repeat(3)(base)


def rows(spark, service, n: int = 50):
    return spark.createDataFrame([(i, f"t{i}", service.url) for i in range(n)], "id LONG, text STRING, url STRING")


# ---------------------------------------------------------------------------------------------- identity
async def shout(row):
    await _get(f"{row['url']}/item/{row['text'].replace(' ', '-')}")
    return {"id": row["id"], "text": row["text"].upper()}


def test_a_null_key_is_no_identity_each_row_is_called_and_nothing_is_recorded(spark, service, tmp_path):
    """Rows (NULL, "refund request") and (NULL, "legal threat") with Journal(key="id") were both
    answered "REFUND REQUEST": NULL was one identity. Now each is called, every run."""
    df = spark.createDataFrame([(None, "refund request", service.url), (None, "legal threat", service.url),
                                (7, "hello", service.url)], "id LONG, text STRING, url STRING").coalesce(1)
    journal = aiospark.Journal(str(tmp_path / "j"), key="id")
    before = calls(service)
    out = aiospark.unordered_wait(df, shout, SCHEMA, journal=journal).collect()
    assert sorted(r.text for r in out) == ["HELLO", "LEGAL THREAT", "REFUND REQUEST"]
    assert calls(service) - before == 3
    before = calls(service)
    again = aiospark.unordered_wait(df, shout, SCHEMA, journal=journal).collect()
    assert sorted(r.text for r in again) == ["HELLO", "LEGAL THREAT", "REFUND REQUEST"]
    assert calls(service) - before == 2  # the NULL rows again (never recorded); id 7 from the journal


class Customers(LookupSource):
    """Customer names, each lookup counted at the service."""

    schema = "cid LONG, name STRING"

    def __init__(self, url: str):
        self.url = url

    async def lookup(self, key):
        (cid,) = key
        await _get(f"{self.url}/item/c{cid}")
        return [{"cid": cid, "name": f"cust{cid}"}]


def test_a_lookup_join_rebuilds_every_row_from_its_own_input(spark, service, tmp_path):
    """Orders (1, cid 7, 10) and (2, cid 7, 99) with Journal(key="cid") gave (1, 10, cust7) twice,
    and a later run's order (3, 7, 555) came back as order 1."""
    journal = aiospark.Journal(str(tmp_path / "j"), key="cid")
    orders = spark.createDataFrame([(1, 7, 10), (2, 7, 99), (4, 8, 5)], "oid LONG, cid LONG, amount LONG").coalesce(1)
    out = aiospark.lookup_join(orders, Customers(service.url), on="cid", journal=journal, ordered=True).collect()
    assert [tuple(r) for r in out] == [(1, 7, 10, "cust7"), (2, 7, 99, "cust7"), (4, 8, 5, "cust8")]
    before = calls(service)
    later = spark.createDataFrame([(3, 7, 555), (5, 8, 1)], "oid LONG, cid LONG, amount LONG").coalesce(1)
    again = aiospark.lookup_join(later, Customers(service.url), on="cid", journal=journal, ordered=True).collect()
    assert [tuple(r) for r in again] == [(3, 7, 555, "cust7"), (5, 8, 1, "cust8")]
    assert calls(service) == before  # served from the journal, rebuilt on the current rows
    # the default key (every input column) too, unordered, with a rerun
    whole = aiospark.Journal(str(tmp_path / "w"))
    first = aiospark.lookup_join(orders, Customers(service.url), on="cid", journal=whole).collect()
    second = aiospark.lookup_join(orders, Customers(service.url), on="cid", journal=whole).collect()
    assert sorted(map(tuple, first)) == sorted(map(tuple, second)) == [(1, 7, 10, "cust7"), (2, 7, 99, "cust7"),
                                                                      (4, 8, 5, "cust8")]


# ---------------------------------------------------------------------------------------------- fingerprint
def _refused(run, match: str, service) -> None:
    before = calls(service)
    with pytest.raises(JournalMismatch, match=match) as info:
        run()
    assert calls(service) == before  # refused before any call
    assert "version=" in str(info.value) and "another location" in str(info.value)


def test_a_changed_attribute_is_refused_naming_it_and_a_version_bump_is_the_way_on(spark, service, tmp_path):
    """Styled("short") then Styled("long") served 50 of 50 "short" answers."""
    loc = str(tmp_path / "j")
    df = rows(spark, service)
    first = aiospark.unordered_wait(df, Styled(service.url, "short"), SCHEMA, journal=aiospark.Journal(loc)).collect()
    assert {r.text.split(":")[0] for r in first} == {"short"}
    _refused(lambda: aiospark.unordered_wait(df, Styled(service.url, "long"), SCHEMA, journal=aiospark.Journal(loc)),
             r"attribute 'style' changed", service)
    # the credential is neither in the manifest nor hashed into it
    manifest = open(os.path.join(loc, "manifest.json")).read()
    assert "sk-never" not in manifest and "api_key" not in manifest
    # a new version: its own outcomes, next to the old ones
    before = calls(service)
    longer = aiospark.unordered_wait(df, Styled(service.url, "long"), SCHEMA,
                                     journal=aiospark.Journal(loc, version=2)).collect()
    assert {r.text.split(":")[0] for r in longer} == {"long"} and calls(service) - before == 50
    before = calls(service)
    back = aiospark.unordered_wait(df, Styled(service.url, "short"), SCHEMA, journal=aiospark.Journal(loc)).collect()
    assert sorted(back) == sorted(first) and calls(service) == before
    with pytest.raises(ValueError, match="version"):
        aiospark.Journal(loc, version="../x")
    with pytest.raises(TypeError, match="version"):
        aiospark.Journal(loc, version=1.5)


@pytest.mark.parametrize("old, new, changed", [
    (prompted("short"), prompted("long"), r"closure 'prompt' changed"),
    (defaulted("short"), defaulted("long"), r"default 'style' changed"),
    (twice, thrice, r"closure 'times' changed"),
], ids=["closure", "default", "decorator"])
def test_a_changed_closure_default_or_decorator_argument_is_refused(spark, service, tmp_path, old, new, changed):
    loc = str(tmp_path / "j")
    df = rows(spark, service, 20)
    aiospark.unordered_wait(df, old, SCHEMA, journal=aiospark.Journal(loc, key="id")).collect()
    _refused(lambda: aiospark.unordered_wait(df, new, SCHEMA, journal=aiospark.Journal(loc, key="id")),
             changed, service)
    before = calls(service)
    same = aiospark.unordered_wait(df, old, SCHEMA, journal=aiospark.Journal(loc, key="id")).collect()
    assert len(same) == 20 and calls(service) == before


def test_error_rows_first_then_a_rerun_without_them_serves_the_paid_answers(spark, service, tmp_path):
    """A first run with on_error="row", rerun without it, was refused ("Start a new journal")."""
    loc = str(tmp_path / "j")
    df = rows(spark, service)
    first = aiospark.ordered_wait(df, Styled(service.url, "s"), SCHEMA, on_error="row",
                                  journal=aiospark.Journal(loc)).collect()
    before = calls(service)
    again = aiospark.ordered_wait(df, Styled(service.url, "s"), SCHEMA, journal=aiospark.Journal(loc)).collect()
    assert calls(service) == before
    assert [(r.id, r.text) for r in again] == [(r.id, r.text) for r in first]


class Names(LookupSource):
    """A user's own lookup source: its attributes are its state."""

    schema = "id LONG, name STRING"

    def __init__(self, prefix: str):
        self.prefix = prefix

    async def lookup(self, key):
        return [{"id": key[0], "name": f"{self.prefix}{key[0]}"}]


def test_a_lookup_join_source_that_reads_something_else_is_refused(spark, tmp_path):
    """RedisLookup("customer:{id}") then RedisLookup("supplier:{id}") on one journal joined the
    customers' names for 20 of 20 rows."""
    import redis as redis_client

    from aiospark.connectors import RedisLookup
    from tests.support.servers import RedisServer

    df = spark.range(0, 20, 1, 2)
    with RedisServer() as srv:
        client = redis_client.Redis.from_url(srv.url)
        for i in range(20):
            client.hset(f"customer:{i}", "name", f"cust{i}")
            client.hset(f"supplier:{i}", "name", f"supp{i}")
        loc = str(tmp_path / "j")
        customers = aiospark.lookup_join(df, RedisLookup("customer:{id}", "name STRING", url=srv.url), on="id",
                                         journal=aiospark.Journal(loc)).collect()
        assert {r.name for r in customers} == {f"cust{i}" for i in range(20)}
        with pytest.raises(JournalMismatch, match=r"source setting 'key_template' changed"):
            aiospark.lookup_join(df, RedisLookup("supplier:{id}", "name STRING", url=srv.url), on="id",
                                 journal=aiospark.Journal(loc))
        suppliers = aiospark.lookup_join(df, RedisLookup("supplier:{id}", "name STRING", url=srv.url), on="id",
                                         journal=aiospark.Journal(loc, version="suppliers")).collect()
        assert {r.name for r in suppliers} == {f"supp{i}" for i in range(20)}
    # a user's own source: its attributes
    aiospark.lookup_join(df, Names("a"), on="id", journal=aiospark.Journal(str(tmp_path / "n"))).collect()
    with pytest.raises(JournalMismatch, match=r"source attribute 'prefix' changed"):
        aiospark.lookup_join(df, Names("b"), on="id", journal=aiospark.Journal(str(tmp_path / "n")))


# ---------------------------------------------------------------------------------------------- kept errors
class Answering(aiospark.AsyncFunction):
    """Calls the service; id % 3 == 1 is refused by the "service" (its answer), id % 3 == 2 meets a
    503 (the service's state)."""

    def __init__(self, url: str):
        self.url = url

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        await _get(f"{self.url}/item/{row['id']}")
        if row["id"] % 3 == 1:
            raise ValueError(f"row {row['id']} is refused")
        if row["id"] % 3 == 2:
            raise Unavailable(503)
        return [{"id": row["id"], "text": "ok"}]


class Unavailable(Exception):
    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


class BrokenLimiter:
    """A shared rate limiter whose backend is down: its acquire raises."""

    async def acquire(self, cost: float = 1.0) -> bool:
        raise RuntimeError("the rate limiter's store is down")


def test_keep_errors_keeps_only_what_a_call_answered(spark, service, tmp_path):
    """keep_errors=True with a Budget(redis=...) whose Redis was down replayed BudgetUnavailable on
    the rerun, though no call was ever made (the same for the rate limiter's errors)."""
    from tests.support.servers import RedisServer

    loc = str(tmp_path / "j")
    df = rows(spark, service, 10)
    with RedisServer() as srv:
        budget = aiospark.Budget(100, redis=srv.url, name=f"b-{uuid.uuid4().hex[:8]}")
    # the budget's Redis is gone now
    before = calls(service)
    down = aiospark.unordered_wait(df, Answering(service.url), SCHEMA, on_error="row", budget=budget,
                                   journal=aiospark.Journal(loc, keep_errors=True)).collect()
    assert calls(service) == before and len(down) == 10 and all(r._error for r in down)
    limited = aiospark.unordered_wait(df, Answering(service.url), SCHEMA, on_error="row", rate_limit=BrokenLimiter(),
                                      journal=aiospark.Journal(loc, keep_errors=True)).collect()
    assert calls(service) == before and all("rate limiter" in r._error for r in limited)
    before = calls(service)
    first = aiospark.unordered_wait(df, Answering(service.url), SCHEMA, on_error="row", budget=aiospark.Budget(100),
                                    journal=aiospark.Journal(loc, keep_errors=True)).collect()
    assert calls(service) - before == 10  # every row called: no refusal was recorded
    outcomes = {r.id if r._input is None else r._input.id: r._error or r.text for r in first}
    assert outcomes[0] == "ok" and outcomes[1] == "ValueError: row 1 is refused" and outcomes[2] == "Unavailable: HTTP 503"
    before = calls(service)
    again = aiospark.unordered_wait(df, Answering(service.url), SCHEMA, on_error="row",
                                    journal=aiospark.Journal(loc, keep_errors=True)).collect()
    # the ValueErrors were answers (kept), the 503s the service's state (called again)
    assert calls(service) - before == len([i for i in range(10) if i % 3 == 2])
    assert sorted(map(str, again)) == sorted(map(str, first))


# ---------------------------------------------------------------------------------------------- key order
async def step(row):
    if row["fail"]:
        raise ValueError("not this time")
    if row["seq"] == 1:
        await asyncio.sleep(0.5)
    return {"account": row["account"], "seq": row["seq"]}


def test_a_recorded_row_leaves_after_the_earlier_rows_of_its_key(spark, tmp_path):
    """unordered_wait(key="account"): seq 1 failed in the first run (not kept), seq 2 was recorded;
    the rerun's output was [2, 1]."""
    journal = aiospark.Journal(str(tmp_path / "j"), key="seq")
    schema = "account LONG, seq LONG"

    def run(fail_first: bool):
        df = spark.createDataFrame([(1, 1, fail_first), (1, 2, False)], "account LONG, seq LONG, fail BOOLEAN")
        return aiospark.unordered_wait(df.coalesce(1), step, schema, key="account", on_error="row",
                                       journal=journal).collect()

    first = run(True)
    assert [(r.seq, r._error is None) for r in first] == [(None, False), (2, True)]
    again = run(False)
    assert [r.seq for r in again] == [1, 2]


# ---------------------------------------------------------------------------------------------- idempotency
async def charge(row):
    return {"id": row["id"], "text": aiospark.idempotency_key()}


async def refund(row):
    return {"id": row["id"], "text": aiospark.idempotency_key()}


async def two_effects(row):
    return {"id": row["id"], "text": aiospark.idempotency_key("email") + " " + aiospark.idempotency_key("sms")}


def _keys(spark, function, journal=None) -> dict[int, str]:
    df = spark.createDataFrame([(i, f"t{i}") for i in range(20)], "id LONG, text STRING")
    return {r.id: r.text for r in aiospark.unordered_wait(df, function, SCHEMA, journal=journal).collect()}


def test_idempotency_keys_are_namespaced_by_the_function_and_stable(spark, tmp_path):
    """charge and refund over the same rows both sent '[0]', '[1]', ...: a payment API would have
    taken the refund for a replay of the charge."""
    charged, refunded = _keys(spark, charge), _keys(spark, refund)
    assert len(set(charged.values())) == 20 and not set(charged.values()) & set(refunded.values())
    assert all(str(uuid.UUID(k)) == k for k in charged.values())
    assert _keys(spark, charge) == charged  # the same rows, the same keys, run after run
    both = _keys(spark, two_effects)
    assert all(len(set(v.split())) == 2 for v in both.values())
    # with a journal: the same for a row in every run, still different from refund's
    journaled = _keys(spark, charge, aiospark.Journal(str(tmp_path / "j"), key="id"))
    assert journaled == _keys(spark, charge, aiospark.Journal(str(tmp_path / "k"), key="id"))
    assert not set(journaled.values()) & set(_keys(spark, refund, aiospark.Journal(str(tmp_path / "r"), key="id")).values())
    # another process (a rerun of the program) computes the same namespace
    code = ("from aiospark.journal import IdempotencyKey, RowIdentity\n"
            "from tests.spark.test_journal_identity import charge\n"
            "k = IdempotencyKey.of_function('ordered_wait/unordered_wait', charge, None, RowIdentity(['id', 'text']))\n"
            "print(k({'id': 3, 'text': 't3'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "random"})
    assert out.stdout.strip() == charged[3]


def test_idempotency_key_namespace_is_validated():
    async def main():
        from aiospark.core import AsyncWaitOperator

        async def call(x):
            return aiospark.idempotency_key("")

        out: list = []
        op = AsyncWaitOperator(call, out.append, identify=lambda v: json.dumps([v]),
                               on_error=lambda v, e: [repr(e)])
        await op.open()
        await op.process_element(1)
        await op.finish()
        await op.close()
        return out

    out = asyncio.run(main())
    assert "non-empty string" in out[0].value


# ---------------------------------------------------------------------------------------------- OpenAIChat
KEY = "sk-journal-S3cret-abcdef"
server, srv = openai_fixtures(KEY)


def test_openai_chat_settings_are_the_question_and_the_key_is_not(spark, srv, tmp_path):
    """OpenAIChat(model=, system=, temperature=) changed between runs: the old answers were served."""
    from aiospark.connectors.openai import OpenAIChat

    loc = str(tmp_path / "j")
    df = spark.createDataFrame([(i, f"question {i}") for i in range(10)], "id INT, prompt STRING")

    def chat(**changes: Any) -> Any:
        settings = {"model": "chat", "system": "be brief", "temperature": 0.0, "api_key": KEY, **changes}
        return OpenAIChat(settings.pop("model"), base_url=srv.base_url, **settings)

    first = chat()
    aiospark.unordered_wait(df, first, first.output_schema(df), journal=aiospark.Journal(loc, key="id")).collect()
    served = len(srv.seen)
    assert served >= 10
    for change, name in [({"model": "chat-2"}, "model"), ({"system": "be verbose"}, "system"),
                         ({"temperature": 1.0}, "temperature")]:
        other = chat(**change)
        with pytest.raises(JournalMismatch, match=rf"setting '{name}' changed"):
            aiospark.unordered_wait(df, other, other.output_schema(df), journal=aiospark.Journal(loc, key="id"))
    # another API key asks the same question: accepted, and served with no request
    rotated = chat(api_key="sk-journal-rotated")
    again = aiospark.unordered_wait(df, rotated, rotated.output_schema(df),
                                    journal=aiospark.Journal(loc, key="id")).collect()
    assert len(again) == 10 and len(srv.seen) == served
    manifest = open(os.path.join(loc, "manifest.json")).read()
    assert KEY not in manifest and "rotated" not in manifest and "api_key" not in manifest
