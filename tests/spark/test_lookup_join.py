"""lookup_join and lookup_udf through Spark against real Redis, PostgreSQL and HTTP servers."""
from __future__ import annotations

import pytest

import aiospark
from aiospark.connectors import HttpLookup, PostgresLookup, RedisLookup
from aiospark.lookup import LookupCache, LookupSource
from tests.support.servers import PostgresServer, RedisServer
from tests.support.service import FaultService, ServiceConfig, expected_item

TRICKY = ["plain", "it's", 'say "hi"', "a/b", "../etc/passwd", "100%", "x'; DROP TABLE customers; --", "ünïcödé ☃"]


class Counting(LookupSource):
    """In-process source recording which keys reached it (per worker)."""

    schema = "label STRING"

    async def lookup(self, key):
        return [] if key[0] % 5 == 0 else [{"label": f"k{key[0]}"}, {"label": f"k{key[0]}b"}]


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as server:
        client = server.client()
        for i, name in enumerate(TRICKY):
            client.hset(f"customer:{name}", mapping={"name": f"N-{name}", "tier": str(i % 3)})
        for i in range(200):
            client.hset(f"customer:c{i}", mapping={"name": f"N{i}", "tier": str(i % 3)})
        yield server


@pytest.fixture(scope="module")
def pg_server():
    with PostgresServer() as server:
        server.execute("CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT, tier INT)")
        values = ", ".join(f"('{k.replace(chr(39), chr(39) * 2)}', 'N-{k.replace(chr(39), chr(39) * 2)}', {i % 3})"
                           for i, k in enumerate(TRICKY))
        server.execute(f"INSERT INTO customers VALUES {values}")
        server.execute("CREATE TABLE orders_items (order_id INT, item TEXT)")
        server.execute("INSERT INTO orders_items VALUES (1, 'a'), (1, 'b'), (2, 'c')")
        yield server


def orders(spark, keys):
    return spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "order_id INT, customer_id STRING")


def test_redis_left_join_with_tricky_keys_and_nulls(spark, redis_server):
    source = RedisLookup("customer:{customer_id}", "name STRING, tier INT", url=redis_server.url)
    df = orders(spark, TRICKY + ["missing", None])
    rows = aiospark.lookup_join(df, source, on="customer_id").collect()
    got = {r.order_id: (r.customer_id, r.name, r.tier) for r in rows}
    assert len(rows) == len(TRICKY) + 2
    for i, key in enumerate(TRICKY):
        assert got[i] == (key, f"N-{key}", i % 3)
    assert got[len(TRICKY)] == ("missing", None, None) and got[len(TRICKY) + 1] == (None, None, None)


def test_redis_inner_join_with_cache_ordered(spark, redis_server):
    source = RedisLookup("customer:{customer_id}", "name STRING", url=redis_server.url)
    keys = [f"c{i % 50}" for i in range(2000)] + ["nope"] * 10
    df = orders(spark, keys).coalesce(1)
    rows = aiospark.lookup_join(df, source, on="customer_id", how="inner", ordered=True,
                                cache=LookupCache(max_rows=100, expire_after_write=60)).collect()
    assert [r.order_id for r in rows] == list(range(2000))
    assert all(r.name == f"N{int(r.customer_id[1:])}" for r in rows)


def test_postgres_join_literal_keys_no_injection(spark, pg_server):
    source = PostgresLookup("customers", "id", "name STRING, tier INT", dsn=pg_server.dsn)
    df = spark.createDataFrame([(k,) for k in TRICKY], "id STRING")
    rows = aiospark.lookup_join(df, source, on="id").collect()
    assert {r.id: r.name for r in rows} == {k: f"N-{k}" for k in TRICKY}
    # the table survived the key that looks like SQL
    assert aiospark.lookup_join(df, source, on="id").count() == len(TRICKY)


def test_postgres_one_to_many(spark, pg_server):
    source = PostgresLookup("orders_items", "order_id", "item STRING", dsn=pg_server.dsn)
    df = spark.createDataFrame([(1,), (2,), (3,)], "order_id INT")
    rows = aiospark.lookup_join(df, source, on="order_id", how="inner").collect()
    assert sorted((r.order_id, r.item) for r in rows) == [(1, "a"), (1, "b"), (2, "c")]


def test_http_join_keys_url_encoded(spark):
    with FaultService(ServiceConfig(latency=0.002)) as service:
        source = HttpLookup(service.url + "/item/{customer_id}", "name STRING, value LONG")
        df = orders(spark, TRICKY)
        rows = aiospark.lookup_join(df, source, on="customer_id").collect()
        hits = service.stats()["key_hits"]
    assert {r.customer_id: (r.name, r.value) for r in rows} == {
        k: (expected_item(k)["name"], expected_item(k)["value"]) for k in TRICKY}
    assert set(hits) == set(TRICKY)


def test_http_server_down_names_the_source(spark):
    with FaultService(ServiceConfig(latency=0.0)) as service:
        url = service.url
    source = HttpLookup(url + "/item/{customer_id}", "name STRING")
    with pytest.raises(Exception) as info:
        aiospark.lookup_join(orders(spark, ["a"]), source, on="customer_id", timeout=10).collect()
    assert "127.0.0.1" in str(info.value) and "AsyncFunctionError" in str(info.value)


def test_custom_source_zero_to_n_rows(spark):
    df = spark.range(0, 20, 1, 2).withColumnRenamed("id", "k")
    left = aiospark.lookup_join(df, Counting(), on="k").collect()
    inner = aiospark.lookup_join(df, Counting(), on="k", how="inner").collect()
    assert len(left) == 4 + 16 * 2 and len(inner) == 16 * 2
    assert sorted(r.k for r in left if r.label is None) == [0, 5, 10, 15]


def test_lookup_udf_from_sql(spark, redis_server):
    source = RedisLookup("customer:{customer_id}", "name STRING, tier INT", url=redis_server.url)
    spark.udf.register("customer", aiospark.lookup_udf(source, cache=LookupCache(max_rows=1000)))
    orders(spark, ["c1", "c2", "missing", None]).createOrReplaceTempView("orders")
    inner = spark.sql("SELECT o.order_id, c.name, c.tier FROM orders o, "
                      "LATERAL inline(customer(o.customer_id)) c ORDER BY o.order_id").collect()
    assert [(r.order_id, r.name, r.tier) for r in inner] == [(0, "N1", 1), (1, "N2", 2)]
    left = spark.sql("SELECT o.order_id, c.name FROM orders o, "
                     "LATERAL inline_outer(customer(o.customer_id)) c ORDER BY o.order_id").collect()
    assert [(r.order_id, r.name) for r in left] == [(0, "N1"), (1, "N2"), (2, None), (3, None)]


class TestValidation:
    def test_unknown_key_column(self, spark):
        with pytest.raises(ValueError, match="not columns"):
            aiospark.lookup_join(spark.range(3), Counting(), on="k")

    def test_bad_how(self, spark):
        with pytest.raises(ValueError, match="how"):
            aiospark.lookup_join(spark.range(3), Counting(), on="id", how="outer")

    def test_clashing_columns(self, spark):
        df = spark.range(3).selectExpr("id", "'x' AS label")
        with pytest.raises(ValueError, match="clash"):
            aiospark.lookup_join(df, Counting(), on="id")

    def test_not_a_source(self, spark):
        with pytest.raises(TypeError, match="LookupSource"):
            aiospark.lookup_join(spark.range(3), object(), on="id")

    def test_bad_cache(self, spark):
        with pytest.raises(TypeError, match="LookupCache"):
            aiospark.lookup_join(spark.range(3), Counting(), on="id", cache={})


# --- issue 17: hostile keys, key typing, retry on a miss in left joins -------------------------------------

class EventuallyConsistent(LookupSource):
    """A dimension whose keys are found only from their third lookup on (per worker process)."""

    schema = "label STRING"

    def __init__(self):
        self.calls = {}

    async def lookup(self, key):
        self.calls[key] = self.calls.get(key, 0) + 1
        return [{"label": f"L{key[0]}"}] if self.calls[key] >= 3 else []


@pytest.mark.parametrize("how", ["left", "inner"])
def test_retry_on_a_miss_sees_the_source_result_before_padding(spark, how):
    df = spark.range(0, 40, 1, 2).withColumnRenamed("id", "k")
    retry = aiospark.RetryStrategy.fixed_delay(4, 0.01, result_predicate=aiospark.retry_if_empty)
    rows = aiospark.lookup_join(df, EventuallyConsistent(), on="k", how=how, retry=retry).collect()
    assert sorted((r.k, r.label) for r in rows) == [(k, f"L{k}") for k in range(40)]
    # without retry the first lookup misses: padded (left) or dropped (inner)
    plain = aiospark.lookup_join(df, EventuallyConsistent(), on="k", how=how).collect()
    assert [r.label for r in plain] == ([None] * 40 if how == "left" else [])


def test_retry_predicate_of_a_left_join_gets_the_source_rows(spark):
    df = spark.range(0, 10, 1, 1).withColumnRenamed("id", "k")
    retry = aiospark.RetryStrategy.fixed_delay(1, 0.01, result_predicate=lambda found: found == [])
    rows = aiospark.lookup_join(df, Counting(), on="k", how="left", retry=retry).collect()
    # keys 0 and 5 miss: retried once, still missing, then padded; the others: two rows each
    assert sorted(r.k for r in rows if r.label is None) == [0, 5] and len(rows) == 2 + 8 * 2


def test_string_keys_against_an_int_column_follow_sparks_cast(spark, pg_server):
    pg_server.execute("CREATE TABLE IF NOT EXISTS by_int (id INT PRIMARY KEY, name TEXT)")
    pg_server.execute("DELETE FROM by_int")
    pg_server.execute("INSERT INTO by_int VALUES (1, 'one'), (7, 'seven'), (10, 'ten'), (123, 'many')")
    keys = ["1", "١", "１", "1_0", "1_2_3", " 7 ", "007", "+1", "1.0", "10", "x", None]
    source = PostgresLookup("by_int", "id", "name STRING", dsn=pg_server.dsn)
    df = spark.createDataFrame([(k,) for k in keys], "id STRING")
    rows = aiospark.lookup_join(df, source, on="id").collect()
    spark_cast = {r.s: r.i for r in df.selectExpr("id AS s", "try_cast(id AS INT) AS i").collect()}
    names = {1: "one", 7: "seven", 10: "ten", 123: "many"}
    assert {r.id: r.name for r in rows} == {k: names.get(spark_cast[k]) for k in keys}
    assert {r.id: r.name for r in rows}["١"] is None and {r.id: r.name for r in rows}["007"] == "seven"


def test_hostile_keys_in_a_batch_leave_their_neighbours_alone(spark, pg_server):
    pg_server.execute("CREATE TABLE IF NOT EXISTS by_text (code TEXT PRIMARY KEY, name TEXT)")
    pg_server.execute("DELETE FROM by_text")
    pg_server.execute("INSERT INTO by_text SELECT 'c' || g, 'N' || g FROM generate_series(0, 49) g")
    keys = [f"c{i}" for i in range(50)] + ["nul\x00byte", "k" * 1_048_576, "missing"]
    source = PostgresLookup("by_text", "code", "name STRING", dsn=pg_server.dsn)
    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "n INT, code STRING").coalesce(1)
    rows = aiospark.lookup_join(df, source, on="code", on_error="row").collect()
    assert all(r._error is None for r in rows) and len(rows) == len(keys)
    assert {r.n: r.name for r in rows} == {i: (f"N{i}" if i < 50 else None) for i in range(len(keys))}
    binary = spark.createDataFrame([(b"c1",), (b"\xff\xfe",), (b"c2",)], "code BINARY")
    got = aiospark.lookup_join(binary, source, on="code").collect()
    assert sorted((bytes(r.code), r.name) for r in got) == [(b"c1", "N1"), (b"c2", "N2"), (b"\xff\xfe", None)]


def test_redis_wrongtype_key_is_its_own_error_row(spark, redis_server):
    redis_server.client().set("customer:plain-string", "not a hash")
    source = RedisLookup("customer:{customer_id}", "name STRING", url=redis_server.url)
    df = orders(spark, ["c1", "plain-string", "c2", "missing"]).coalesce(1)
    rows = aiospark.lookup_join(df, source, on="customer_id", on_error="row").collect()
    by_key = {(r.customer_id or r._input.customer_id): r for r in rows}
    assert by_key["c1"].name == "N1" and by_key["c2"].name == "N2" and by_key["missing"].name is None
    assert "WRONGTYPE" in by_key["plain-string"]._error and by_key["plain-string"].name is None


@pytest.mark.parametrize("ddl", ["k TIMESTAMP", "k FLOAT", "k ARRAY<INT>"])
def test_key_types_without_an_exact_conversion_are_refused_up_front(spark, ddl):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(TypeError, match=r"cast\("):
        aiospark.lookup_join(df, Counting(), on="k")
