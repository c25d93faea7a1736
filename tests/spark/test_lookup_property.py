"""Property: ``lookup_join`` equals Spark's own equi-join, and every failing key surfaces as an error.

Hypothesis draws a table keyed by a composite key ``(s STRING, n BIGINT)`` -- hostile strings
(quotes, backslashes, ``%``, ``{}``, ``*``, ``:``, ``/``, ``..``, newlines, NUL, unicode, 3000
characters), 0..3 rows per key (duplicates included: a key's rows fan out as in Spark) -- an input
of up to 60 rows drawn from those keys, their cross combinations, and NULLs, and a random subset of
keys the backend fails for. The backend is real: Redis (``RedisLookup`` kind ``json``; a failing key
holds a hash -> ``WRONGTYPE``, invalid JSON, an empty string, or a list of non-objects) or an HTTP server on
127.0.0.1 (:mod:`tests.support.table_http`: 500 for a failing key, 422 for a batch holding one).

The oracle is ``df.join(table_df, on=["s", "n"], how=how)`` in the same Spark session, on the input
rows whose keys do not fail (Spark never matches a NULL key; a left join keeps those rows with
NULLs, as ``lookup_join`` does). Then:

* ``on_error="row"``: the non-error rows equal the oracle as a multiset (duplicate fan-out counted),
  and the error rows are exactly the input rows with a failing key -- one each, with a non-null
  ``_error`` naming the cause and no looked-up values;
* ``on_error="fail"``: the job fails with an error naming the cause when the input holds a failing
  key, and otherwise equals the oracle.

Each test runs with batched and single lookups, each with both error modes; an example draws the
source's ``max_batch_size``, ``capacity`` and ``ordered``. Examples are derandomized (the same ones
on every run) and bounded (see ``SETTINGS``) so the file runs in a few minutes on one Spark session.
"""
from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import aiospark
from aiospark.connectors import HttpLookup, RedisLookup
from tests.support.servers import RedisServer
from tests.support.table_http import TableServer

# what this file tests does not depend on the PySpark release: the main CI leg runs it, the
# PySpark-version legs do not (.ci/run)
pytestmark = pytest.mark.version_agnostic

Key = tuple[str | None, int | None]
INPUT_SCHEMA = "s STRING, n BIGINT, pay INT"
TABLE_SCHEMA = "s STRING, n BIGINT, val STRING, num BIGINT"
LOOKED_UP = "val STRING, num BIGINT"
COLUMNS = ["s", "n", "pay", "val", "num"]

# No shrinking: every shrink step is a Spark job, and a failure shrunk for minutes is not worth the
# CI time; the falsifying example is printed (with a reproduce blob) as generated.
SETTINGS = settings(max_examples=5, deadline=None, derandomize=True, database=None, print_blob=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.large_base_example])

HOSTILE = ["", " ", "'", '"', "\\", "\\'", "'; DROP TABLE t; --", "%", "%s", "%25", "%2F", "%00", "{}",
           "{s}", "{0}", "{{", "}", "*", "?", "[a-z]", ":", "a:1", "t:1:x", "\n", "\r\n", "\t", "\x00",
           "a\x00b", "/", "..", ".", "a/b", "../etc/passwd", "ü", "ünïcödé ☃", "😀", "\u202e", "\ufeff",
           "x" * 3000, "☃" * 1000]
STRINGS = st.one_of(st.sampled_from(HOSTILE),
                    st.text(st.characters(blacklist_categories=("Cs",)), max_size=12))
BIGINTS = st.one_of(st.sampled_from([0, 1, -1, 7, 2**63 - 1, -2**63, 10**18]),
                    st.integers(-2**63, 2**63 - 1))
VALUE_ROWS = st.fixed_dictionaries({"val": st.none() | STRINGS, "num": st.none() | BIGINTS})
#: how a failing key fails, per backend (Redis: what the key holds; HTTP: always the status)
REDIS_FAILURES = ("wrongtype", "badjson", "empty", "notobject")
CAUSES = {"wrongtype": "WRONGTYPE", "badjson": "not valid JSON", "empty": "not valid JSON",
          "notobject": "must be a JSON object"}


@st.composite
def cases(draw: Any, failures: tuple[str, ...]) -> dict[str, Any]:
    pool = draw(st.lists(st.tuples(STRINGS, BIGINTS), min_size=1, max_size=8, unique=True))
    table: dict[Key, list[dict]] = {}
    empty: set[Key] = set()  # keys stored as an empty list (a miss, like an absent key)
    for key in pool:
        rows = draw(st.lists(VALUE_ROWS, max_size=3))
        if rows:
            if draw(st.booleans()):  # an exact duplicate row: two identical output rows
                rows.append(dict(rows[0]))
            table[key] = rows
        elif draw(st.booleans()):
            empty.add(key)
    # about a third of the keys fail (st.sets of the pool would mostly draw none)
    failing = {key: draw(st.sampled_from(failures)) for key in pool if draw(st.integers(0, 2)) == 0}
    strings = [s for s, _ in pool] + [None]
    ints = [n for _, n in pool] + [None]
    # pool keys (hits, duplicates), their cross combinations (misses sharing one column) and NULLs
    key = st.one_of(st.sampled_from(pool), st.tuples(st.sampled_from(strings), st.sampled_from(ints)))
    rows = draw(st.lists(st.tuples(key, st.integers(0, 3)), min_size=1, max_size=59))
    if failing and not draw(st.booleans()):  # most examples hold a failing key (a few examples only)
        rows.insert(draw(st.integers(0, len(rows))), (draw(st.sampled_from(sorted(failing, key=repr))), 0))
    return {
        "table": table, "empty": empty, "failing": failing,
        "input": [(s, n, pay) for (s, n), pay in rows],
        "how": draw(st.sampled_from(["inner", "left"])),
        "max_batch_size": draw(st.sampled_from([1, 3, 100])),
        "capacity": draw(st.sampled_from([1, 5, 100])),
        "ordered": draw(st.booleans()),
    }


def _tuple(row: Any) -> tuple:
    return tuple(tuple(v) if hasattr(v, "asDict") else v for v in row)


def _describe(case: dict[str, Any]) -> str:
    keys = {k: case["failing"][k] for k in case["failing"]}
    return (f"how={case['how']} on_error={case['on_error']} batch={case['batch']} "
            f"max_batch_size={case['max_batch_size']} capacity={case['capacity']} ordered={case['ordered']} "
            f"failing={ {(s[:20] if s else s, n): v for (s, n), v in keys.items()} }")


def check_property(spark: Any, source: Any, case: dict[str, Any], causes: dict[Key, str]) -> None:
    """Run ``lookup_join`` and check it against Spark's equi-join (see the module docstring)."""
    failing = case["failing"]
    rows = case["input"]
    df = spark.createDataFrame(rows, INPUT_SCHEMA)
    failed_inputs = [r for r in rows if (r[0], r[1]) in failing]
    good_rows = [r for r in rows if (r[0], r[1]) not in failing]
    table_rows = [(s, n, r["val"], r["num"]) for (s, n), found in case["table"].items()
                  if (s, n) not in failing for r in found]
    table_df = spark.createDataFrame(table_rows, TABLE_SCHEMA)
    oracle = spark.createDataFrame(good_rows, INPUT_SCHEMA).join(table_df, on=["s", "n"], how=case["how"])
    joined = aiospark.lookup_join(df, source, on=["s", "n"], how=case["how"], on_error=case["on_error"],
                                  batch=case["batch"], capacity=case["capacity"], ordered=case["ordered"],
                                  timeout=60)
    where = _describe(case)
    event(f"on_error={case['on_error']} batch={case['batch']} failing inputs={'yes' if failed_inputs else 'no'}")
    for kind in sorted({failing[(r[0], r[1])] for r in failed_inputs}):
        event(f"failing input key: {kind} (batch={case['batch']})")
    event(f"fan-out: {'yes' if any(len(v) > 1 for v in case['table'].values()) else 'no'}")
    if case["on_error"] == "fail" and failed_inputs:
        with pytest.raises(Exception) as info:
            joined.collect()
        wanted = {causes[(r[0], r[1])] for r in failed_inputs}
        assert any(c in str(info.value) for c in wanted), (
            f"{where}: the job failed, but the error names none of {sorted(wanted)}:\n{str(info.value)[:3000]}")
        return
    expected = Counter(_tuple(r) for r in oracle.select(*COLUMNS).collect())
    if case["on_error"] == "fail":
        got = Counter(_tuple(r) for r in joined.select(*COLUMNS).collect())
        assert got == expected, f"{where}: missing {expected - got}, unexpected {got - expected}"
        return
    out = joined.select(*COLUMNS, "_error", "_input").collect()
    errors = [r for r in out if r["_error"] is not None]
    got = Counter(_tuple(r[c] for c in COLUMNS) for r in out if r["_error"] is None)
    assert got == expected, f"{where}: missing {expected - got}, unexpected {got - expected}"
    assert Counter(_tuple(r["_input"]) for r in errors) == Counter(failed_inputs), (
        f"{where}: error rows for inputs {Counter(_tuple(r['_input']) for r in errors)}, "
        f"failing inputs {Counter(failed_inputs)}; errors: {[r['_error'][:200] for r in errors][:5]}")
    for r in errors:
        assert all(r[c] is None for c in COLUMNS), f"{where}: an error row carries values: {r}"
        cause = causes[(r["_input"]["s"], r["_input"]["n"])]
        assert cause in r["_error"], f"{where}: error {r['_error'][:500]!r} does not name {cause!r}"


# --- Redis ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as server:
        yield server


_prefixes = itertools.count()


def load_redis(client: Any, prefix: str, case: dict[str, Any]) -> None:
    """Store the table as JSON lists under ``<prefix>:<n>:<s>`` and the failing keys' bad values."""
    client.flushdb()
    pipe = client.pipeline(transaction=False)
    for (s, n), found in case["table"].items():
        pipe.set(f"{prefix}:{n}:{s}".encode(), json.dumps(found))
    for s, n in case["empty"]:
        pipe.set(f"{prefix}:{n}:{s}".encode(), "[]")
    for (s, n), how in case["failing"].items():
        rkey = f"{prefix}:{n}:{s}".encode()
        pipe.delete(rkey)
        if how == "wrongtype":
            pipe.hset(rkey, mapping={"val": "a hash, not a JSON string", "num": "1"})
        elif how == "badjson":
            pipe.set(rkey, '{"val": "unterminated')
        elif how == "empty":  # an empty string is a value, and no JSON: an error, not a miss
            pipe.set(rkey, "")
        else:
            pipe.set(rkey, "[1, 2]")
    pipe.execute()


def redis_source(server: Any, prefix: str, case: dict[str, Any]) -> RedisLookup:
    # n first: it holds no ':', so '<prefix>:<n>:<s>' names exactly one key (s may hold ':')
    return RedisLookup(prefix + ":{n}:{s}", LOOKED_UP, url=server.url, kind="json", key_columns=["s", "n"],
                       max_batch_size=case["max_batch_size"], max_batch_delay=0.002)


# batched and single lookups, and each error mode, get examples of their own (in a handful of
# examples, a draw could leave one combination without a failing key)
@pytest.mark.parametrize("on_error", ["fail", "row"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batched"])
@SETTINGS
@given(case=cases(REDIS_FAILURES))
def test_redis_lookup_join_equals_spark_join(spark, redis_server, batch, on_error, case):
    case = {**case, "batch": batch, "on_error": on_error}
    prefix = f"p{next(_prefixes)}"
    load_redis(redis_server.client(), prefix, case)
    causes = {k: CAUSES[v] for k, v in case["failing"].items()}
    check_property(spark, redis_source(redis_server, prefix, case), case, causes)


# --- HTTP -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table_server():
    with TableServer() as server:
        yield server


@pytest.mark.parametrize("on_error", ["fail", "row"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batched"])
@SETTINGS
@given(case=cases(("http",)))
def test_http_lookup_join_equals_spark_join(spark, table_server, batch, on_error, case):
    case = {**case, "batch": batch, "on_error": on_error}
    table_server.load(case["table"], set(case["failing"]))
    batched = case["batch"]
    source = HttpLookup(table_server.url + "/t/{n}/{s}", LOOKED_UP, key_columns=["s", "n"],
                        batch_url=table_server.url + "/batch" if batched else None,
                        max_batch_size=case["max_batch_size"], max_batch_delay=0.002)
    # a batch holding a failing key is refused (422) and split until the key stands alone
    cause = "HTTP 422" if batched else "HTTP 500"
    before = table_server.requests
    check_property(spark, source, case, {k: cause for k in case["failing"]})
    if any(s is not None and n is not None for s, n, _ in case["input"]):
        assert table_server.requests > before, "no lookup reached the HTTP server"
