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
