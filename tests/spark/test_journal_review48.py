"""Adversarial review of issue 48 (a journal found by key wherever Spark puts a row; dedup; plan).

Calls are counted by a call log: each call appends one line (its key's repr) to a file with
O_APPEND, which every Python worker of the local session sees. Answers are a pure function of the
key's repr, so "each row gets ITS key's answer" is checked row by row.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from collections import Counter

import pytest
from pyspark.sql import functions as F

import aiospark
from aiospark import AsyncFunction
from aiospark.lookup import LookupSource
from tests.support.call_log import log_call as _log
from tests.support.call_log import logged
from tests.support.servers import RedisServer

# journal semantics over the entry points: their Spark surface is tested on every PySpark elsewhere
pytestmark = pytest.mark.version_agnostic

B = 4


@pytest.fixture(scope="module")
def redis_url():
    with RedisServer() as srv:
        yield srv.url


def ans(value) -> str:
    """The answer a key deserves (its repr, so -0.0 and 0.0, NaN and None differ)."""
    return "ans:" + repr(value)


class Call(AsyncFunction):
    """Answers ``[{"k": repr(key), "a": ans(key)}]`` (or ``n`` rows / none / an error by key)."""

    def __init__(self, log, cols, fail=(), fanout=None):
        self.log, self.cols, self.fail, self.fanout = log, list(cols), set(fail), fanout

    def key(self, row):
        v = tuple(_norm(row[c]) for c in self.cols)
        return v[0] if len(v) == 1 else v

    async def async_invoke(self, row):
        k = self.key(row)
        _log(self.log, repr(k))
        if repr(k) in self.fail:
            raise ValueError(f"bad key {k!r}")
        n = 1 if self.fanout is None else self.fanout(k)
        return [{"k": repr(k), "a": ans(k), "i": i} for i in range(n)]


SCHEMA = "k STRING, a STRING, i INT"


def _norm(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:  # Arrow hands the worker UTC-aware values
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def row_key(r, cols):
    v = tuple(_norm(r[c]) for c in cols)
    return v[0] if len(v) == 1 else v


def check_answers(inp, out, cols, fanout=None, errors=()):
    """Every input row got its own key's answer, once per output row it is due (no drop, no dup)."""
    want = Counter()
    for r in inp:
        k = row_key(r, cols)
        n = 1 if fanout is None else fanout(k)
        for i in range(n):
            want[(repr(k), ans(k), i)] += 1
    got = Counter((r.k, r.a, r.i) for r in out if r.k is not None)
    nulls = [r for r in out if r.k is None]
    assert len(nulls) == len(errors), f"{len(nulls)} output rows with a NULL answer, {len(errors)} errors due"
    assert got == want, f"answers differ: missing {dict(want - got)!s:.400} extra {dict(got - want)!s:.400}"


def run(entry, df, log, cols, journal, **kw):
    fn = Call(log, cols, fail=kw.pop("fail", ()), fanout=kw.pop("fanout", None))
    before = len(logged(log))
    p = aiospark.plan(entry, df, fn, SCHEMA, journal=journal, **kw)
    assert len(logged(log)) == before, "plan called something"
    out = entry(df, fn, SCHEMA, journal=journal, **kw).collect()
    return p, out, len(logged(log)) - before


# ---------------------------------------------------------------------------------------------------


def test_double_keys_nan_negative_zero_and_null(spark, tmp_path):
    vals = [1.0, float("nan"), -0.0, 0.0, None, 2.5, float("inf"), float("-inf")]
    rows = [(i, vals[i % len(vals)]) for i in range(400)]
    df = spark.createDataFrame(rows, "id LONG, d DOUBLE").repartition(3)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="d", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["d"], j)
    nulls = sum(1 for r in inp if r.d is None)
    assert p.null_keys == nulls and p.rows == 400
    assert n == p.calls, f"plan said {p.calls} calls, run made {n}"
    # NaN and -0.0: -0.0 and 0.0 are different values the function answers differently
    check_answers(inp, out, ["d"])
    assert n == 7 + nulls, f"calls {n}"
    log2 = len(logged(log))
    out2 = aiospark.unordered_wait(df.repartition(5), Call(log, ["d"]), SCHEMA, journal=j).collect()
    assert len(logged(log)) - log2 == nulls, "rerun called recorded keys"
    check_answers(inp, out2, ["d"])


TRICKY = ["a/b", "../../etc", "k=1/p=2", '{"a": 1}', "[1,2]", "ünïcödé ☃ 🐍", "", " ", "x" * 5000,
          "null", "None", "\n\t", "a%2Fb", "\\", "'", "*", "?prefix=z", "k:1", "\x00nul"]


@pytest.mark.parametrize("store", ["dir", "redis"])
def test_tricky_string_keys_rerun_any_partitioning(spark, tmp_path, redis_url, store):
    rows = [(i, TRICKY[i % len(TRICKY)]) for i in range(380)]
    df = spark.createDataFrame(rows, "id LONG, s STRING").repartition(2)
    inp = df.collect()
    log = str(tmp_path / "log")
    loc = str(tmp_path / "j") if store == "dir" else f"{redis_url}?prefix=t{random.getrandbits(32):x}"
    j = aiospark.Journal(loc, key="s", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["s"], j)
    assert (p.distinct_keys, p.calls, n) == (len(TRICKY), len(TRICKY), len(TRICKY))
    check_answers(inp, out, ["s"])
    for d in (df.repartition(7), df.coalesce(1), df.orderBy(F.desc("id")),
              df.filter("id < 100").unionByName(df.filter("id >= 100"))):
        p, out, n = run(aiospark.unordered_wait, d, log, ["s"], j, dedup=False)
        assert (p.recorded, p.calls, n) == (len(TRICKY), 0, 0)
        check_answers(inp, out, ["s"])


def test_typed_multi_column_keys(spark, tmp_path):
    base = dt.datetime(2024, 3, 10, 1, 59, 59, 999999)
    data = []
    for i in range(300):
        m = i % 12
        data.append((i, decimal.Decimal(m) / 7 if m != 5 else decimal.Decimal("0.000000"),
                     dt.date(2020, 1, 1) + dt.timedelta(days=m),
                     base + dt.timedelta(hours=m), bytes([m, 0, 255]) if m else b"",
                     [m, None] if m % 3 else [], f"s{m % 4}"))
    schema = ("id LONG, dec DECIMAL(20,10), day DATE, ts TIMESTAMP, bin BINARY, arr ARRAY<INT>, s STRING")
    df = spark.createDataFrame(data, schema).repartition(3)
    inp = df.collect()
    cols = ["dec", "day", "ts", "bin", "arr", "s"]
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key=cols, buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, cols, j)
    assert (p.distinct_keys, p.calls, n) == (12, 12, 12)
    check_answers(inp, out, cols)
    p, out, n = run(aiospark.unordered_wait, df.repartition(5, "id"), log, cols, j)
    assert (p.recorded, p.calls, n) == (12, 0, 0)
    check_answers(inp, out, cols)
    p, out, n = run(aiospark.ordered_wait, df.coalesce(1), log, cols, j)
    assert (p.calls, n) == (0, 0)
    check_answers(inp, out, cols)


def test_default_key_whole_row_with_nulls(spark, tmp_path):
    data = [(i % 10 if i % 7 else None, f"v{i % 5}" if i % 11 else None) for i in range(330)]
    df = spark.createDataFrame(data, "a LONG, b STRING").repartition(3)
    inp = df.collect()
    cols = ["a", "b"]
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, cols, j)
    assert n == p.calls, f"plan {p} vs {n} calls"
    check_answers(inp, out, cols)
    p, out, n = run(aiospark.unordered_wait, df.repartition(4), log, cols, j)
    assert n == p.calls, f"rerun: plan {p} vs {n} calls"
    assert n == p.null_keys, f"rerun called {n}, NULL-key rows {p.null_keys}"
    check_answers(inp, out, cols)


def keyed(spark, rows=600, keys=150, parts=3):
    return spark.range(0, rows, 1, parts).select("id", F.format_string("k%04d", F.col("id") % keys).alias("key"))


def test_keep_errors_then_reruns(spark, tmp_path):
    df = keyed(spark)
    inp = df.collect()
    bad = {repr(f"k{i:04d}") for i in range(0, 150, 10)}  # 15 keys fail
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", keep_errors=True, buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j, fail=bad, on_error="row")
    assert (p.calls, n) == (150, 150)
    errs = [r for r in out if r._error is not None]
    assert len(out) == 600 and len(errs) == 60, (len(out), len(errs))
    good = [r for r in inp if repr(r.key) not in bad]
    check_answers(good, [r for r in out if r._error is None], ["key"])
    p, out2, n = run(aiospark.unordered_wait, df.repartition(5), log, ["key"], j, fail=bad, on_error="row")
    assert (p.recorded, p.calls, n) == (150, 0, 0)
    assert len(out2) == 600 and sum(r._error is not None for r in out2) == 60
    # without keep_errors: errors are called again, only those
    j2 = aiospark.Journal(str(tmp_path / "j2"), key="key", buckets=B)
    run(aiospark.unordered_wait, df, log, ["key"], j2, fail=bad, on_error="row")
    p, out3, n = run(aiospark.unordered_wait, df.repartition(2), log, ["key"], j2, fail=bad, on_error="row")
    assert (p.recorded, p.calls, n) == (135, 15, 15)
    assert len(out3) == 600 and sum(r._error is not None for r in out3) == 60
    check_answers(good, [r for r in out3 if r._error is None], ["key"])


def test_journal_reused_with_other_buckets(spark, tmp_path):
    df = keyed(spark)
    log = str(tmp_path / "log")
    loc = str(tmp_path / "j")
    run(aiospark.unordered_wait, df, log, ["key"], aiospark.Journal(loc, key="key", buckets=3))
    with pytest.raises(ValueError, match="bucket"):
        aiospark.unordered_wait(df, Call(log, ["key"]), SCHEMA,
                                journal=aiospark.Journal(loc, key="key", buckets=8)).collect()
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    try:
        p, out, n = run(aiospark.unordered_wait, df.repartition(4), log, ["key"], aiospark.Journal(loc, key="key"))
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
    assert (p.calls, n) == (0, 0)
    check_answers(df.collect(), out, ["key"])


def test_dedup_false_after_dedup_and_back_and_ordered_rerun(spark, tmp_path):
    df = keyed(spark)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df.filter("id < 300"), log, ["key"], j, dedup=True)
    assert (p.calls, n) == (150, 150)
    p, out, n = run(aiospark.unordered_wait, df.repartition(4), log, ["key"], j, dedup=False)
    assert (p.calls, n) == (0, 0)
    check_answers(inp, out, ["key"])
    j2 = aiospark.Journal(str(tmp_path / "j2"), key="key", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df.filter("id < 150"), log, ["key"], j2, dedup=False)
    assert n == 150
    p, out, n = run(aiospark.unordered_wait, df.repartition(4), log, ["key"], j2, dedup=True)
    assert (p.calls, n) == (0, 0)
    check_answers(inp, out, ["key"])
    # ordered_wait over an unordered_wait journal: nothing called, each partition's order kept
    ordered_in = df.repartition(3, "key").sortWithinPartitions(F.desc("id"))
    fn = Call(log, ["key"])
    before = len(logged(log))
    with pytest.raises(Exception):
        aiospark.ordered_wait(df, fn, SCHEMA, journal=j, dedup=True).collect()
    out = aiospark.ordered_wait(ordered_in, fn, SCHEMA, journal=j).collect()
    assert len(logged(log)) == before
    check_answers(inp, out, ["key"])


class IdCall(AsyncFunction):
    def __init__(self, log):
        self.log = log

    async def async_invoke(self, row):
        _log(self.log, row["key"])
        return [{"id": row["id"], "k": repr(row["key"]), "a": ans(row["key"]), "i": 0}]


def test_ordered_wait_rerun_keeps_order(spark, tmp_path):
    df = keyed(spark, rows=600, keys=600)  # one row per key: each outcome carries its row's id
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    aiospark.unordered_wait(df, IdCall(log), "id LONG, " + SCHEMA, journal=j).collect()
    assert len(logged(log)) == 600
    ordered_in = df.repartition(3, "id").sortWithinPartitions(F.desc("id"))
    out = aiospark.ordered_wait(ordered_in, IdCall(log), "id LONG, " + SCHEMA, journal=j) \
        .withColumn("p", F.spark_partition_id()).collect()
    assert len(logged(log)) == 600
    assert sorted(r.id for r in out) == list(range(600))
    for pnum in range(3):
        ids = [r.id for r in out if r.p == pnum]
        assert ids and ids == sorted(ids, reverse=True), f"partition {pnum}'s order was not kept"


def test_unordered_key_order_with_and_without_dedup(spark, tmp_path):
    df = keyed(spark, rows=400, keys=40, parts=2)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    # key= the journal key: dedup allowed (one call per key)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j, key="key")
    assert (p.calls, n) == (40, 40), (p, n)
    check_answers(inp, out, ["key"])
    # key= another column than the journal's: dedup=True refused, default off, plan not exact
    j2 = aiospark.Journal(str(tmp_path / "j2"), key="key", buckets=B)
    with pytest.raises(ValueError):
        aiospark.unordered_wait(df, Call(log, ["key"]), SCHEMA, journal=j2, key="id", dedup=True)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j2, key="id")
    assert 40 <= n <= p.calls and not p.dedup
    check_answers(inp, out, ["key"])


def test_on_error_row_no_keep_errors_never_null(spark, tmp_path):
    df = keyed(spark, rows=300, keys=60)
    inp = df.collect()
    bad = {repr(f"k{i:04d}") for i in range(0, 60, 6)}
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j, fail=bad, on_error="row")
    assert (p.calls, n) == (60, 60)
    errs = [r for r in out if r._error is not None]
    assert len(out) == 300 and len(errs) == 50
    assert all(r.k is None and "bad key" in r._error for r in errs)
    assert Counter(r._input.key for r in errs) == Counter(r.key for r in inp if repr(r.key) in bad)
    check_answers([r for r in inp if repr(r.key) not in bad], [r for r in out if r._error is None], ["key"])


def fan(k):
    return int(k[1:]) % 4  # 0..3 rows per key


def test_several_or_no_output_rows_per_input(spark, tmp_path):
    df = keyed(spark, rows=500, keys=100, parts=3)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j, fanout=fan)
    assert (p.calls, n) == (100, 100)
    check_answers(inp, out, ["key"], fanout=fan)
    p, out, n = run(aiospark.unordered_wait, df.repartition(6), log, ["key"], j, fanout=fan, dedup=False)
    assert (p.calls, n) == (0, 0)
    check_answers(inp, out, ["key"], fanout=fan)
    p, out, n = run(aiospark.ordered_wait, df.coalesce(1), log, ["key"], j, fanout=fan)
    assert (p.calls, n) == (0, 0)
    check_answers(inp, out, ["key"], fanout=fan)


class BatchCall(AsyncFunction):
    def __init__(self, log):
        self.log = log

    async def async_invoke(self, rows):
        for r in rows:
            _log(self.log, r["key"])
        return [[{"k": repr(r["key"]), "a": ans(r["key"]), "i": 0}] for r in rows]


def test_batch_size_with_journal_and_dedup(spark, tmp_path):
    df = keyed(spark, rows=600, keys=150)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    p = aiospark.plan(aiospark.unordered_wait, df, BatchCall(log), SCHEMA, journal=j, batch_size=16)
    out = aiospark.unordered_wait(df, BatchCall(log), SCHEMA, journal=j, batch_size=16).collect()
    assert len(logged(log)) == p.calls == 150
    check_answers(inp, out, ["key"])
    out = aiospark.unordered_wait(df.repartition(5), BatchCall(log), SCHEMA, journal=j, batch_size=16).collect()
    assert len(logged(log)) == 150
    check_answers(inp, out, ["key"])


class Src(LookupSource):
    schema = "label STRING"

    def __init__(self, log):
        self.log = log

    async def lookup(self, key):
        _log(self.log, list(key))
        return [] if key[0] % 5 == 0 else [{"label": f"L{key[0]}"}, {"label": f"L{key[0]}b"}]


@pytest.mark.parametrize("how", ["left", "inner"])
def test_lookup_join_with_misses(spark, tmp_path, how):
    df = spark.range(0, 600, 1, 3).select("id", (F.col("id") % 100).alias("cid"))
    df = df.unionByName(spark.range(600, 620, 1, 1).select("id", F.lit(None).cast("long").alias("cid")))
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="cid", buckets=B)
    p = aiospark.plan(aiospark.lookup_join, df, Src(log), "cid", how=how, journal=j)
    out = aiospark.lookup_join(df, Src(log), "cid", how=how, journal=j).collect()
    n = len(logged(log))
    assert n == p.calls, (p, n)
    assert n <= 100 + 20

    def want(rows):
        w = Counter()
        for r in rows:
            if r.cid is None or r.cid % 5 == 0:
                if how == "left":
                    w[(r.id, r.cid, None)] += 1
            else:
                w[(r.id, r.cid, f"L{r.cid}")] += 1
                w[(r.id, r.cid, f"L{r.cid}b")] += 1
        return w
    assert Counter((r.id, r.cid, r.label) for r in out) == want(inp)
    p = aiospark.plan(aiospark.lookup_join, df.repartition(4), Src(log), "cid", how=how, journal=j)
    out = aiospark.lookup_join(df.repartition(4), Src(log), "cid", how=how, journal=j).collect()
    assert len(logged(log)) - n == p.calls == 0 and p.misses == 20
    assert Counter((r.id, r.cid, r.label) for r in out) == want(inp)


def make_udf(log, journal):
    @aiospark.async_udf("string", journal=journal)
    async def f(key):
        _log(log, key)
        return ans(key)
    return f


def test_async_udf_journal_over_repartitioned_input(spark, tmp_path):
    df = keyed(spark, rows=400, keys=100)
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), buckets=B)
    out = df.withColumn("a", make_udf(log, j)("key")).collect()
    first = len(logged(log))
    assert 100 <= first <= 400 and all(r.a == ans(r.key) for r in out) and len(out) == 400
    out = df.repartition(7).withColumn("a", make_udf(log, j)("key")).collect()
    assert len(logged(log)) == first, f"rerun called {len(logged(log)) - first}"
    assert all(r.a == ans(r.key) for r in out) and len(out) == 400


def test_empty_dataframe(spark, tmp_path):
    df = keyed(spark).filter("id < 0")
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j)
    assert (p.rows, p.calls, n, len(out)) == (0, 0, 0, 0)
    p, out, n = run(aiospark.ordered_wait, spark.createDataFrame([], "id LONG, key STRING"), log, ["key"], j)
    assert (p.rows, p.calls, n, len(out)) == (0, 0, 0, 0)


def test_column_named_like_the_internal_part_column(spark, tmp_path):
    df = keyed(spark, rows=300, keys=60).withColumn("_aiospark_part", F.col("id") % 2)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    try:
        p, out, n = run(aiospark.unordered_wait, df, log, ["key"], j)
    except ValueError as e:  # a clear refusal is acceptable
        assert "_aiospark_part" in str(e)
        return
    assert (p.calls, n) == (60, 60)
    check_answers(inp, out, ["key"])


def test_user_part_column_is_the_journal_key(spark, tmp_path):
    df = spark.range(0, 300, 1, 3).select("id", (F.col("id") % 30).cast("string").alias("_aiospark_part"))
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="_aiospark_part", buckets=B)
    try:
        p, out, n = run(aiospark.unordered_wait, df, log, ["_aiospark_part"], j)
    except ValueError as e:
        assert "_aiospark_part" in str(e)
        return
    assert (p.calls, n) == (30, 30)
    check_answers(inp, out, ["_aiospark_part"])


def test_streaming_two_micro_batches_sharing_keys(spark, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for b in range(3):
        with open(src / f"f{b}.json", "w") as f:
            for i in range(200):
                f.write(json.dumps({"id": b * 1000 + i, "key": f"s{(i + b * 50) % 120:04d}"}) + "\n")
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    stream = spark.readStream.schema("id LONG, key STRING").option("maxFilesPerTrigger", 1).json(str(src))
    out = aiospark.unordered_wait(stream, Call(log, ["key"]), SCHEMA, journal=j)
    q = (out.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) == 3
    called = Counter(logged(log))
    keys = {f"s{(i + b * 50) % 120:04d}" for b in range(3) for i in range(200)}
    assert set(called) == {repr(k) for k in keys}
    assert max(called.values()) == 1, f"keys called twice: {sum(v > 1 for v in called.values())}"
    res = spark.read.parquet(str(tmp_path / "out")).collect()
    inp = spark.read.schema("id LONG, key STRING").json(str(src)).collect()
    check_answers(inp, res, ["key"])


def test_part_column_with_dedup_false(spark, tmp_path):
    df = keyed(spark, rows=300, keys=60).withColumn("_aiospark_part", F.col("id") % 2)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="key", buckets=B)
    out = aiospark.unordered_wait(df, Call(log, ["key"]), SCHEMA, journal=j, dedup=False).collect()
    n = len(logged(log))
    assert 60 <= n <= 300
    check_answers(inp, out, ["key"])
    with pytest.raises(ValueError, match="_aiospark_part"):  # the plan counts keys through the shuffle: refused, named
        aiospark.plan(aiospark.unordered_wait, df, Call(log, ["key"]), SCHEMA, journal=j, dedup=False)


def test_multi_column_keys_that_could_collide_when_encoded(spark, tmp_path):
    pairs = [("a/b", "c"), ("a", "b/c"), ("a\x00b", "c"), ("a", "\x00bc"), ("a,", "b"), ("a", ",b"), ("", "ab"),
             ("ab", ""), (None, "ab"), ("ab", None), ('"a"', "b"), ("a", '"b"'), ("[1", "2]"), ("1", None)]
    rows = [(i, *pairs[i % len(pairs)]) for i in range(280)]
    df = spark.createDataFrame(rows, "id LONG, x STRING, y STRING").repartition(3)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key=["x", "y"], buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["x", "y"], j)
    nulls = sum(1 for r in inp if r.x is None or r.y is None)
    assert (p.null_keys, p.distinct_keys) == (nulls, 11)
    assert (p.calls, n) == (11 + nulls, 11 + nulls)
    check_answers(inp, out, ["x", "y"])
    p, out, n = run(aiospark.unordered_wait, df.repartition(5), log, ["x", "y"], j)
    assert (p.calls, n) == (nulls, nulls)
    check_answers(inp, out, ["x", "y"])


def test_array_keys_empty_null_element_and_null(spark, tmp_path):
    arrs = [[], [None], [None, None], None, [1], [1, None], [None, 1]]
    rows = [(i, arrs[i % len(arrs)]) for i in range(210)]
    df = spark.createDataFrame(rows, "id LONG, arr ARRAY<INT>").repartition(3)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="arr", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["arr"], j)
    assert (p.calls, n) == (6 + 30, 6 + 30)
    check_answers(inp, out, ["arr"])


def test_struct_key_with_null_field_is_shared(spark, tmp_path):
    rows = [(i, (i % 3, None if i % 2 else "x")) for i in range(120)]
    df = spark.createDataFrame(rows, "id LONG, st STRUCT<a: INT, b: STRING>").repartition(2)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="st", buckets=B)

    p = aiospark.plan(aiospark.unordered_wait, df, StCall(log), SCHEMA, journal=j)
    out = aiospark.unordered_wait(df, StCall(log), SCHEMA, journal=j).collect()
    assert len(logged(log)) == p.calls == 6
    assert Counter(r.k for r in out) == Counter(repr((r.st.a, r.st.b)) for r in inp)


class StCall(AsyncFunction):
    def __init__(self, log):
        self.log = log

    async def async_invoke(self, row):
        st = row["st"]
        k = (st["a"], st["b"]) if isinstance(st, dict) else (st.a, st.b)
        _log(self.log, repr(k))
        return [{"k": repr(k), "a": ans(k), "i": 0}]


def test_same_value_other_type_never_gets_the_other_types_answer(spark, tmp_path):
    df = spark.range(0, 200, 1, 2).select((F.col("id") % 20).alias("key"))
    log = str(tmp_path / "log")
    loc = str(tmp_path / "j")
    p, out, n = run(aiospark.unordered_wait, df, log, ["key"], aiospark.Journal(loc, key="key", buckets=B))
    assert n == 20
    sdf = df.select(F.col("key").cast("string").alias("key")).repartition(3)
    try:
        p, out, n = run(aiospark.unordered_wait, sdf, log, ["key"], aiospark.Journal(loc, key="key", buckets=B))
    except Exception as e:  # a refusal (another question) is fine
        assert "journal" in str(e).lower()
        return
    check_answers(sdf.collect(), out, ["key"])


def test_map_key_column(spark, tmp_path):
    rows = [(i, {"a": i % 4}) for i in range(100)]
    df = spark.createDataFrame(rows, "id LONG, m MAP<STRING, INT>").repartition(2)
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key="m", buckets=B)
    try:
        p = aiospark.plan(aiospark.unordered_wait, df, MCall(log), SCHEMA, journal=j)
        out = aiospark.unordered_wait(df, MCall(log), SCHEMA, journal=j).collect()
    except ValueError as e:  # a clear refusal naming the column is fine
        assert "m" in str(e)
        return
    assert len(out) == 100 and len(logged(log)) == p.calls == 4


class MCall(AsyncFunction):
    def __init__(self, log):
        self.log = log

    async def async_invoke(self, row):
        m = dict(row["m"])
        _log(self.log, repr(sorted(m.items())))
        return [{"k": repr(sorted(m.items())), "a": "x", "i": 0}]


@pytest.mark.parametrize("store", ["redis"])
def test_redis_nan_zero_and_dedup_rerun(spark, tmp_path, redis_url, store):
    vals = [float("nan"), -0.0, 0.0, 1.0, None]
    df = spark.createDataFrame([(i, vals[i % 5]) for i in range(200)], "id LONG, d DOUBLE").repartition(2)
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(f"{redis_url}?prefix=z{random.getrandbits(32):x}", key="d", buckets=B)
    p, out, n = run(aiospark.unordered_wait, df, log, ["d"], j)
    assert (p.calls, n) == (4 + 40, 4 + 40)
    check_answers(inp, out, ["d"])
    p, out, n = run(aiospark.unordered_wait, df.repartition(3), log, ["d"], j, dedup=False)
    assert (p.calls, n) == (40, 40)
    check_answers(inp, out, ["d"])


def test_streaming_redis_journal_across_micro_batches(spark, tmp_path, redis_url):
    src = tmp_path / "src"
    src.mkdir()
    for b in range(2):
        with open(src / f"f{b}.json", "w") as f:
            for i in range(150):
                f.write(json.dumps({"id": b * 1000 + i, "key": f"r{(i + b * 50) % 100:04d}"}) + "\n")
    log = str(tmp_path / "log")
    j = aiospark.Journal(f"{redis_url}?prefix=s{random.getrandbits(32):x}", key="key", buckets=B)
    stream = spark.readStream.schema("id LONG, key STRING").option("maxFilesPerTrigger", 1).json(str(src))
    q = (aiospark.unordered_wait(stream, Call(log, ["key"]), SCHEMA, journal=j).writeStream.format("parquet")
         .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    called = Counter(logged(log))
    assert len(called) == 100 and max(called.values()) == 1, called.most_common(3)
    inp = spark.read.schema("id LONG, key STRING").json(str(src)).collect()
    check_answers(inp, spark.read.parquet(str(tmp_path / "out")).collect(), ["key"])


class Src2(LookupSource):
    schema = "label STRING"

    def __init__(self, log):
        self.log = log

    async def lookup(self, key):
        _log(self.log, list(key))
        return [] if key[0] % 3 == 0 else [{"label": f"L{key[0]}-{key[1]}"}]


def test_lookup_join_multi_column_ordered_rerun(spark, tmp_path):
    df = spark.range(0, 400, 1, 3).select("id", (F.col("id") % 20).alias("a"),
                                          F.format_string("b%d", F.col("id") % 3).alias("b"))
    inp = df.collect()
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), key=["a", "b"], buckets=B)
    p = aiospark.plan(aiospark.lookup_join, df, Src2(log), ["a", "b"], journal=j)
    out = aiospark.lookup_join(df, Src2(log), ["a", "b"], journal=j).collect()
    assert len(logged(log)) == p.calls == 60
    want = Counter((r.id, None if r.a % 3 == 0 else f"L{r.a}-{r.b}") for r in inp)
    assert Counter((r.id, r.label) for r in out) == want
    ordered_in = df.repartition(4, "id").sortWithinPartitions("id")
    p = aiospark.plan(aiospark.lookup_join, ordered_in, Src2(log), ["a", "b"], journal=j, ordered=True)
    out = aiospark.lookup_join(ordered_in, Src2(log), ["a", "b"], journal=j, ordered=True) \
        .withColumn("p", F.spark_partition_id()).collect()
    assert len(logged(log)) == 60 and p.calls == 0
    assert Counter((r.id, r.label) for r in out) == want
    for q in range(4):
        ids = [r.id for r in out if r.p == q]
        assert ids == sorted(ids)


def make_udf2(log, journal):
    @aiospark.async_udf("string", journal=journal)
    async def g(key, half):
        _log(log, [key, half])
        return f"{key}|{half}"
    return g


def test_async_udf_two_args_journal_rerun(spark, tmp_path):
    df = keyed(spark, rows=300, keys=50).withColumn("half", (F.col("id") % 2).cast("int"))
    log = str(tmp_path / "log")
    j = aiospark.Journal(str(tmp_path / "j"), buckets=B)
    out = df.withColumn("r", make_udf2(log, j)("key", "half")).collect()
    first = len(logged(log))
    assert 50 <= first <= 300 and all(r.r == f"{r.key}|{r.half}" for r in out)
    out = df.orderBy(F.desc("id")).repartition(5).withColumn("r", make_udf2(log, j)("key", "half")).collect()
    assert len(logged(log)) == first and len(out) == 300
    assert all(r.r == f"{r.key}|{r.half}" for r in out)


def test_plan_writes_nothing_at_a_new_journal_location(spark, tmp_path):
    df = keyed(spark, rows=100, keys=10)
    loc = tmp_path / "fresh"
    p = aiospark.plan(aiospark.unordered_wait, df, Call(str(tmp_path / "log"), ["key"]), SCHEMA,
                      journal=aiospark.Journal(str(loc), key="key", buckets=B))
    assert (p.calls, p.distinct_keys) == (10, 10)
    assert not loc.exists(), f"plan wrote {sorted(str(x) for x in loc.rglob('*'))}"


def test_a_plan_does_not_pin_the_question_of_an_empty_journal(spark, tmp_path):
    """A plan looked at, then the function changed before any run: nothing was recorded, the run goes."""
    df = keyed(spark, rows=100, keys=10)
    log = str(tmp_path / "log")
    loc = str(tmp_path / "fresh")
    aiospark.plan(aiospark.unordered_wait, df, Call(log, ["key"]), SCHEMA, journal=aiospark.Journal(loc, key="key"))
    out = aiospark.unordered_wait(df, Call(log, ["key"], fail={"'k0001'"}), SCHEMA, on_error="row",
                                  journal=aiospark.Journal(loc, key="key", buckets=B)).collect()
    assert len(out) == 100 and len(logged(log)) == 10
