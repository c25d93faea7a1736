"""A journal's fingerprint covers what decides the answers (issue 43, the review after it): each
test is a finding, through the public API on a real local Spark; a rerun is a second action with
the same journal. Calls are counted at a real HTTP service on 127.0.0.1 where it matters.

* module globals the function reads (a dict, a list, nested dicts, an object, a big table, a
  list holding a lambda) are walked by value, so ``D["x"] = "v2"`` is another question;
* a function reached anywhere (a closure's lambda) counts by its code;
* a helper from the user's own module counts by its code (``from helpers import fmt`` and
  ``helpers.fmt(...)``); a library's does not;
* only credential names are left out (``api_key``), not ``auth``, ``secret_sauce``, ...;
* RedisLookup's db number and PostgresLookup's database are the question, the server is not;
* a lookup join's identity covers its ``on`` columns, its manifest only the looked-up columns;
* OpenAIChat's non-credential headers are the question;
* what ``open()`` sets (on the workers) is not part of it.
"""
from __future__ import annotations

import importlib
import os
import sys
import uuid
from typing import Any

import aiohttp
import pytest

import aiospark
from aiospark.journal import JournalMismatch
from aiospark.lookup import LookupSource
from tests.support.journal import calls
from tests.support.openai_fixtures import openai_fixtures

OUT = "out STRING"


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            return await r.json()


def _df(spark, service, n: int = 4):
    return spark.createDataFrame([(i, service.url) for i in range(n)], "id LONG, url STRING").coalesce(1)


def _run(df, fn, loc: str, **journal: Any) -> list[Any]:
    return aiospark.ordered_wait(df, fn, OUT, journal=aiospark.Journal(loc, **journal)).collect()


def _refused(df, fn, loc: str, match: str, service) -> None:
    before = calls(service)
    with pytest.raises(JournalMismatch, match=match):
        _run(df, fn, loc, key="id")
    assert calls(service) == before  # refused before any call


# ---------------------------------------------------------------------------------------------- 1. globals
class Cfg:
    def __init__(self) -> None:
        self.style = "v1"


D = {"x": "v1"}
L = ["v1"]
N = {"a": {"b": "v1"}}
CFG = Cfg()
BIG = {f"k{i}": "v1" for i in range(5000)}
FNS = [lambda s: s + "v1"]
FNS_V1 = FNS[0]


async def f_dict(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": D["x"]}


async def f_list(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": L[0]}


async def f_nested(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": N["a"]["b"]}


async def f_object(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": CFG.style}


async def f_big(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": BIG["k4999"]}


async def f_lambda_list(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": FNS[0]("x")}


T = {"style": "v1"}


class ReadsTable(aiospark.AsyncFunction):
    """Its method reads a module global (the class's source does not hold the table's values)."""

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        await _get(f"{row['url']}/item/{row['id']}")
        return [{"out": T["style"]}]


def _set_lambda() -> None:
    FNS[0] = lambda s: s + "v2"


@pytest.mark.parametrize("fn, name, change, undo", [
    (f_dict, "D", lambda: D.__setitem__("x", "v2"), lambda: D.__setitem__("x", "v1")),
    (f_list, "L", lambda: L.__setitem__(0, "v2"), lambda: L.__setitem__(0, "v1")),
    (f_nested, "N", lambda: N["a"].__setitem__("b", "v2"), lambda: N["a"].__setitem__("b", "v1")),
    (f_object, "CFG", lambda: setattr(CFG, "style", "v2"), lambda: setattr(CFG, "style", "v1")),
    (f_big, "BIG", lambda: BIG.__setitem__("k4999", "v2"), lambda: BIG.__setitem__("k4999", "v1")),
    (f_lambda_list, "FNS", _set_lambda, lambda: FNS.__setitem__(0, FNS_V1)),
    (ReadsTable(), "T", lambda: T.__setitem__("style", "v2"), lambda: T.__setitem__("style", "v1")),
], ids=["dict", "list", "nested", "object", "big_dict", "list_lambda", "method_global"])
def test_a_mutable_global_the_function_reads_is_part_of_the_question(spark, service, tmp_path, fn, name,
                                                                      change, undo):
    """``D["x"] = "v2"`` (or a fresh process with ``TABLE = {"x": "v2"}``) served the v1 answers."""
    loc = str(tmp_path / "j")
    df = _df(spark, service)
    _run(df, fn, loc, key="id")
    change()
    try:
        _refused(df, fn, loc, rf"global '{name}' changed", service)
    finally:
        undo()
    before = calls(service)
    assert len(_run(df, fn, loc, key="id")) == 4 and calls(service) == before  # the same question again


# ---------------------------------------------------------------------------------------------- 2. lambdas
def make_lam(lam):
    async def flam(row):
        await _get(f"{row['url']}/item/{row['id']}")
        return {"out": lam(str(row["id"]))}
    return flam


def test_a_lambda_in_a_closure_counts_by_its_code(spark, service, tmp_path):
    """``make_lam(lambda s: s + "-up")`` then ``make_lam(lambda s: s + "-down")``: both lambdas on
    one line had one "source" (the line), and "-up" answers were served."""
    loc = str(tmp_path / "j")
    df = _df(spark, service)
    up, down = make_lam(lambda s: s + "-up"), make_lam(lambda s: s + "-down")
    assert [r.out for r in _run(df, up, loc, key="id")] == ["0-up", "1-up", "2-up", "3-up"]
    _refused(df, down, loc, r"closure 'lam' changed", service)


# ---------------------------------------------------------------------------------------------- 3. helpers
HELPERS = '''
def fmt(x):
    return x + "-{v}"
'''
CALLERS = '''
import {helpers}
from {helpers} import fmt
import json


async def f_from(row):
    return {{"out": fmt(json.dumps(row["id"]))}}


async def f_module(row):
    return {{"out": {helpers}.fmt(str(row["id"]))}}
'''


def test_a_helper_from_the_users_own_module_counts_by_its_code(spark, tmp_path):
    """``helpers.fmt`` whose body changed (another deploy of the program) served the old answers."""
    from pyspark import cloudpickle

    tag = uuid.uuid4().hex[:8]
    helpers, callers = f"f43_helpers_{tag}", f"f43_callers_{tag}"
    (tmp_path / f"{helpers}.py").write_text(HELPERS.format(v="v1"))
    (tmp_path / f"{callers}.py").write_text(CALLERS.format(helpers=helpers))
    sys.path.insert(0, str(tmp_path))
    try:
        h, c = importlib.import_module(helpers), importlib.import_module(callers)
        for module in (h, c):  # the workers cannot import them: their code travels with the function
            cloudpickle.register_pickle_by_value(module)
        df = spark.range(2).coalesce(1)
        for name in ("f_from", "f_module"):
            got = aiospark.ordered_wait(df, getattr(c, name), OUT,
                                        journal=aiospark.Journal(str(tmp_path / name), key="id")).collect()
            assert [r.out for r in got] == ["0-v1", "1-v1"]
        # the next deploy: fmt's body changed (another size: no stale bytecode cache)
        (tmp_path / f"{helpers}.py").write_text(HELPERS.format(v="version2"))
        importlib.invalidate_caches()
        h = importlib.reload(h)
        c = importlib.reload(c)
        for name, part in (("f_from", "global 'fmt'"), ("f_module", f"global '{helpers}.fmt'")):
            with pytest.raises(JournalMismatch, match=part):
                aiospark.ordered_wait(df, getattr(c, name), OUT,
                                      journal=aiospark.Journal(str(tmp_path / name), key="id")).collect()
        # a library's function (json.dumps) is not part of the question: only the user's own code
        from aiospark.journal.fingerprint import fingerprint

        assert not any("json" in part for part in fingerprint(c.f_from)[1])
    finally:
        sys.path.remove(str(tmp_path))
        for name in (helpers, callers):
            module = sys.modules.pop(name, None)
            if module is not None:
                cloudpickle.unregister_pickle_by_value(module)


# ---------------------------------------------------------------------------------------------- 4. secrets
class Obj:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    async def __call__(self, row):
        await _get(f"{row['url']}/item/{row['id']}")
        return {"out": str(sorted((k, str(v)) for k, v in vars(self).items() if k != "api_key"))}


def mk_closure(v):
    secret_sauce = v

    async def f(row):
        await _get(f"{row['url']}/item/{row['id']}")
        return {"out": secret_sauce}
    return f


async def f_default(row, auth="v1"):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": auth}


AUTH_MODE = "v1"


async def f_global(row):
    await _get(f"{row['url']}/item/{row['id']}")
    return {"out": AUTH_MODE}


@pytest.mark.parametrize("attr", ["auth", "secret_sauce", "api_key_style", "password_policy",
                                  "credentials_scope", "max_tokens"])
def test_a_setting_named_like_a_secret_still_counts(spark, service, tmp_path, attr):
    """Attributes named ``auth``, ``secret_sauce``, ``api_key_style``... were left out as secrets:
    changing them served stale answers."""
    loc = str(tmp_path / "j")
    df = _df(spark, service, 2)
    _run(df, Obj(**{attr: "v1"}), loc, key="id")
    _refused(df, Obj(**{attr: "v2"}), loc, rf"attribute '{attr}' changed", service)


def test_closures_defaults_and_globals_follow_the_same_narrow_rule(spark, service, tmp_path):
    global AUTH_MODE
    df = _df(spark, service, 2)
    _run(df, mk_closure("v1"), str(tmp_path / "c"), key="id")
    _refused(df, mk_closure("v2"), str(tmp_path / "c"), r"closure 'secret_sauce' changed", service)
    _run(df, f_default, str(tmp_path / "d"), key="id")
    f_default.__defaults__ = ("v2",)
    try:
        _refused(df, f_default, str(tmp_path / "d"), r"default 'auth' changed", service)
    finally:
        f_default.__defaults__ = ("v1",)
    _run(df, f_global, str(tmp_path / "g"), key="id")
    AUTH_MODE = "v2"
    try:
        _refused(df, f_global, str(tmp_path / "g"), r"global 'AUTH_MODE' changed", service)
    finally:
        AUTH_MODE = "v1"


def test_a_rotated_credential_asks_the_same_question(spark, service, tmp_path):
    loc = str(tmp_path / "j")
    df = _df(spark, service, 2)
    _run(df, Obj(api_key="sk-first-0123", style="s"), loc, key="id")
    before = calls(service)
    again = _run(df, Obj(api_key="sk-rotated-4567", style="s"), loc, key="id")
    assert len(again) == 2 and calls(service) == before
    manifest = open(os.path.join(loc, "manifest.json")).read()
    assert "sk-first" not in manifest and "api_key" not in manifest


# ---------------------------------------------------------------------------------------------- 5. databases
def test_redis_lookup_on_another_db_number_is_refused(spark, tmp_path):
    import redis as redis_client

    from aiospark.connectors import RedisLookup
    from tests.support.servers import RedisServer

    df = spark.range(0, 3, 1, 1)
    with RedisServer() as srv:
        base = srv.url.rsplit("/", 1)[0]
        for db in (0, 1):
            client = redis_client.Redis.from_url(f"{base}/{db}")
            for i in range(3):
                client.hset(f"cust:{i}", "name", f"db{db}-{i}")
        loc = str(tmp_path / "j")
        first = aiospark.lookup_join(df, RedisLookup("cust:{id}", "name STRING", url=f"{base}/0"), on="id",
                                     journal=aiospark.Journal(loc, key="id")).collect()
        assert {r.name for r in first} == {"db0-0", "db0-1", "db0-2"}
        with pytest.raises(JournalMismatch, match=r"source setting 'db' changed"):
            aiospark.lookup_join(df, RedisLookup("cust:{id}", "name STRING", url=f"{base}/1"), on="id",
                                 journal=aiospark.Journal(loc, key="id"))
        # the same db through the query form: the same question
        same = aiospark.lookup_join(df, RedisLookup("cust:{id}", "name STRING", url=f"{base}?db=0"), on="id",
                                    journal=aiospark.Journal(loc, key="id")).collect()
        assert sorted(map(tuple, same)) == sorted(map(tuple, first))


def test_postgres_lookup_on_another_database_is_refused_and_a_moved_server_is_not(spark, tmp_path):
    from aiospark.connectors import PostgresLookup
    from tests.support.servers import PostgresServer

    df = spark.range(0, 2, 1, 1)
    with PostgresServer() as pg:
        pg.execute(f"CREATE DATABASE other OWNER {pg.user}", superuser=True)
        pg.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT); "
                   "INSERT INTO items VALUES (0, 'main0'), (1, 'main1')")
        other_dsn = pg.dsn.rsplit("/", 1)[0] + "/other"

        def source(**kw: Any) -> Any:
            settings = {"host": "127.0.0.1", "port": pg.port, "user": pg.user, "password": pg.password,
                        "database": pg.database, **kw}
            return PostgresLookup("items", "id", "name STRING", **settings)

        loc = str(tmp_path / "j")
        first = aiospark.lookup_join(df, source(), on="id", journal=aiospark.Journal(loc, key="id")).collect()
        assert {r.name for r in first} == {"main0", "main1"}
        for other in (source(database="other"), PostgresLookup("items", "id", "name STRING", dsn=other_dsn)):
            with pytest.raises(JournalMismatch, match=r"source setting 'database' changed"):
                aiospark.lookup_join(df, other, on="id", journal=aiospark.Journal(loc, key="id"))
        # the same database through a DSN naming the server as localhost: the same question
        moved = PostgresLookup("items", "id", "name STRING", dsn=pg.dsn.replace("127.0.0.1", "localhost"))
        again = aiospark.lookup_join(df, moved, on="id", journal=aiospark.Journal(loc, key="id")).collect()
        assert sorted(map(tuple, again)) == sorted(map(tuple, first))
        manifest = open(os.path.join(loc, "manifest.json")).read()
        assert pg.password not in manifest and str(pg.port) not in manifest


# ---------------------------------------------------------------------------------------------- 6, 7. lookup joins
class Customers(LookupSource):
    """A customer's name per ``cust`` value, each lookup counted at the service."""

    schema = "cust LONG, name STRING"

    def __init__(self, url: str):
        self.url = url

    async def lookup(self, key):
        (cust,) = key
        await _get(f"{self.url}/item/c{cust}")
        return [{"cust": cust, "name": f"cust{cust}"}]


def test_a_lookup_join_row_whose_on_value_changed_is_looked_up_again(spark, service, tmp_path):
    """``lookup_join(on="cust", journal=Journal(key="order_id"))``: order 100 moved from customer 1
    to customer 2 and came back with customer 1's name."""
    loc = str(tmp_path / "j")
    src = Customers(service.url)
    first = spark.createDataFrame([(100, 1), (101, 2)], "order_id LONG, cust LONG").coalesce(1)
    moved = spark.createDataFrame([(100, 2), (101, 2)], "order_id LONG, cust LONG").coalesce(1)
    got = aiospark.lookup_join(first, src, on="cust", journal=aiospark.Journal(loc, key="order_id")).collect()
    assert sorted(map(tuple, got)) == [(100, 1, "cust1"), (101, 2, "cust2")]
    before = calls(service)
    got = aiospark.lookup_join(moved, src, on="cust", journal=aiospark.Journal(loc, key="order_id")).collect()
    assert sorted(map(tuple, got)) == [(100, 2, "cust2"), (101, 2, "cust2")]
    assert calls(service) - before == 1  # order 100 again (another question); order 101 recorded


def test_a_lookup_join_accepts_added_and_reordered_input_columns(spark, service, tmp_path):
    """An added input column, or reordered ones, was refused: the journal stores only the
    looked-up columns, so only they (and ``how``) are its schema."""
    loc = str(tmp_path / "j")
    src = Customers(service.url)
    df = spark.createDataFrame([(100, 1, 10), (101, 2, 11)], "order_id LONG, cust LONG, amt INT").coalesce(1)
    aiospark.lookup_join(df, src, on="cust", journal=aiospark.Journal(loc, key="order_id")).collect()
    before = calls(service)
    wider = df.selectExpr("amt", "cust", "order_id", "'gift' AS note")
    got = aiospark.lookup_join(wider, src, on="cust", journal=aiospark.Journal(loc, key="order_id")).collect()
    assert sorted(map(tuple, got)) == [(10, 1, 100, "gift", "cust1"), (11, 2, 101, "gift", "cust2")]
    assert calls(service) == before
    with pytest.raises(JournalMismatch, match=r"setting 'how' changed"):
        aiospark.lookup_join(df, src, on="cust", how="inner", journal=aiospark.Journal(loc, key="order_id"))


# ---------------------------------------------------------------------------------------------- 8. headers
KEY = "sk-journal-headers-abcdef"
server, srv = openai_fixtures(KEY)


def test_openai_chat_headers_are_the_question_except_credentials(spark, srv, tmp_path):
    """``OpenAIChat(headers={"X-Route": "b"})`` after ``"a"`` served the route a answers."""
    from aiospark.connectors.openai import OpenAIChat

    loc = str(tmp_path / "j")
    df = spark.createDataFrame([(i, f"question {i}") for i in range(4)], "id INT, prompt STRING").coalesce(1)

    def chat(headers: dict[str, str]) -> Any:
        return OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, headers=headers)

    first = chat({"X-Route": "a", "X-Api-Key": "hdr-secret-1"})
    aiospark.unordered_wait(df, first, first.output_schema(df), journal=aiospark.Journal(loc, key="id")).collect()
    served = len(srv.seen)
    other = chat({"X-Route": "b", "X-Api-Key": "hdr-secret-1"})
    with pytest.raises(JournalMismatch, match=r"setting 'headers' changed"):
        aiospark.unordered_wait(df, other, other.output_schema(df), journal=aiospark.Journal(loc, key="id"))
    rotated = chat({"X-Route": "a", "X-Api-Key": "hdr-secret-2"})
    again = aiospark.unordered_wait(df, rotated, rotated.output_schema(df),
                                    journal=aiospark.Journal(loc, key="id")).collect()
    assert len(again) == 4 and len(srv.seen) == served
    manifest = open(os.path.join(loc, "manifest.json")).read()
    assert "hdr-secret" not in manifest


# ---------------------------------------------------------------------------------------------- 9. per-run state
class RunIdInOpen(aiospark.AsyncFunction):
    """Per-run state set in ``open()``: it runs on the workers, after the fingerprint is taken."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.run_id: str | None = None

    async def open(self) -> None:
        self.run_id = uuid.uuid4().hex

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        await _get(f"{self.url}/item/{row['id']}")
        return [{"out": f"{self.run_id is not None}"}]


class RunIdAtDefinition(RunIdInOpen):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.run_id = uuid.uuid4().hex


def test_per_run_state_set_in_open_keeps_reruns_and_set_at_definition_refuses_them(spark, service, tmp_path):
    df = _df(spark, service)
    loc = str(tmp_path / "open")
    fn = RunIdInOpen(service.url)
    assert [r.out for r in _run(df, fn, loc, key="id")] == ["True"] * 4  # open() ran before the calls
    assert fn.run_id is None  # on the workers' copies only: the driver's object (the fingerprint's) unchanged
    before = calls(service)
    assert len(_run(df, RunIdInOpen(service.url), loc, key="id")) == 4 and calls(service) == before
    # the same per-run value set at definition: every rerun is another question (the docs say so)
    loc = str(tmp_path / "init")
    _run(df, RunIdAtDefinition(service.url), loc, key="id")
    _refused(df, RunIdAtDefinition(service.url), loc, r"attribute 'run_id' changed", service)
    before = calls(service)
    _run(df, RunIdAtDefinition(service.url), loc, key="id", version="run2")  # the way on
    assert calls(service) - before == 4
