"""Per-key outcomes: a key the backend rejects is a miss or its own error, never its neighbours'.

Each test sends ordinary keys in the same batch as hostile ones (a NUL character, bytes that are
not UTF-8, a 1 MB key, a key of the wrong type) through a :class:`Lookuper` with batching, against
the real servers of conftest.py.
"""

import asyncio

import asyncpg
import pytest

from aiospark.connectors import ConnectorError, HttpLookup, PostgresLookup, RedisLookup
from aiospark.lookup import Lookuper

from ._support import REDIS_PASSWORD

BIG = "k" * 1_048_576  # 1 MB
BAD_UTF8 = b"\xff\xfe-not-utf8"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def outcomes(source, keys, size=100):
    """Each key's outcome looked up in one batch: its rows, or the exception it raised."""
    async with Lookuper(source, max_batch_size=size, max_batch_delay=0.05) as lk:
        got = await asyncio.gather(*(lk.lookup((k,)) for k in keys), return_exceptions=True)
        return got, lk.stats()


@pytest.fixture(scope="module")
def pg_codes(pg_server):
    async def seed():
        con = await asyncpg.connect(pg_server.dsn)
        try:
            await con.execute("CREATE TABLE IF NOT EXISTS hostile (code text PRIMARY KEY, label text)")
            await con.execute("CREATE TABLE IF NOT EXISTS hostile_int (id int PRIMARY KEY, label text)")
            await con.execute("TRUNCATE hostile, hostile_int")
            await con.executemany("INSERT INTO hostile VALUES ($1, $2)", [("a", "A"), ("b", "B"), ("42", "N")])
            await con.executemany("INSERT INTO hostile_int VALUES ($1, $2)", [(1, "one"), (2, "two")])
        finally:
            await con.close()
    run(seed())
    return pg_server


def test_postgres_batch_hostile_text_keys_are_misses_neighbours_found(pg_codes):
    source = PostgresLookup("hostile", "code", "label STRING", dsn=pg_codes.dsn)
    keys = ["a", "nul\x00byte", "b", BAD_UTF8, BIG, 42, "missing"]
    got, stats = run(outcomes(source, keys))
    assert got == [[{"label": "A"}], [], [{"label": "B"}], [], [], [{"label": "N"}], []]
    assert stats["batches"] == 1 and stats["errors"] == 0


def test_postgres_batch_wrong_type_and_out_of_range_int_keys(pg_codes):
    source = PostgresLookup("hostile_int", "id", "label STRING", dsn=pg_codes.dsn)
    keys = [1, "x", 2**40, "2", "１", 1.5, 2.0, float("nan"), BAD_UTF8, "nul\x00"]
    got, stats = run(outcomes(source, keys))
    assert got == [[{"label": "one"}], [], [], [{"label": "two"}], [], [], [{"label": "two"}], [], [], []]
    assert stats["errors"] == 0


def test_postgres_batch_that_fails_on_a_value_is_split_per_key(pg_codes):
    # a key PostgreSQL only rejects when it reads it (a numeric beyond numeric's range as
    # text -> numeric): the batch fails, then each key is looked up alone
    async def seed():
        con = await asyncpg.connect(pg_codes.dsn)
        try:
            await con.execute("CREATE TABLE IF NOT EXISTS hostile_num (n numeric PRIMARY KEY, label text)")
            await con.execute("TRUNCATE hostile_num")
            await con.execute("INSERT INTO hostile_num VALUES (1.5, 'x'), (2, 'y')")
        finally:
            await con.close()
    run(seed())
    source = PostgresLookup("hostile_num", "n", "label STRING", dsn=pg_codes.dsn)
    keys = ["1.5", "9e999999", "2", "abc"]
    got, stats = run(outcomes(source, keys))
    assert got == [[{"label": "x"}], [], [{"label": "y"}], []]
    assert stats["errors"] == 0


def test_redis_batch_hostile_keys_each_get_their_own_outcome(redis_server):
    client = redis_server.client()
    client.hset(b"h:" + BAD_UTF8, mapping={"name": "binary"})
    client.hset("h:nul\x00byte", mapping={"name": "nul"})
    client.hset("h:" + BIG, mapping={"name": "big"})
    client.hset("h:ok", mapping={"name": "ok"})
    client.set("h:string", "not a hash")
    client.hset("h:badint", mapping={"name": "x", "n": "1.5"})
    source = RedisLookup("h:{id}", "name STRING, n INT", url=redis_server.url, password=REDIS_PASSWORD)
    keys = ["ok", BAD_UTF8, "nul\x00byte", BIG, "string", "badint", "missing", 7]
    got, stats = run(outcomes(source, keys))
    assert got[0] == [{"name": "ok", "n": None}]
    assert got[1] == [{"name": "binary", "n": None}]  # binary keys are looked up literally
    assert got[2] == [{"name": "nul", "n": None}] and got[3] == [{"name": "big", "n": None}]
    assert isinstance(got[4], ConnectorError) and "WRONGTYPE" in str(got[4])
    assert isinstance(got[5], ConnectorError) and "'n'" in str(got[5]) and "1.5" in str(got[5])
    assert got[6] == [] and got[7] == []
    assert stats["batches"] == 1 and stats["errors"] == 2


def test_redis_json_batch_one_bad_value_hurts_no_neighbour(redis_server):
    client = redis_server.client()
    client.set("j:good", '{"name": "fine"}')
    client.set("j:bad", "{not json")
    source = RedisLookup("j:{id}", "name STRING", url=redis_server.url, kind="json",
                         password=REDIS_PASSWORD)
    got, _ = run(outcomes(source, ["good", "bad", "none"]))
    assert got[0] == [{"name": "fine"}] and got[2] == []
    assert isinstance(got[1], ConnectorError) and "not valid JSON" in str(got[1])


def test_http_batch_hostile_keys(http_server):
    http_server.items.update({"a": {"name": "A"}, "b": {"name": "B"}, "nul\x00byte": {"name": "nul"},
                              "7": {"name": "seven"}})
    source = HttpLookup(http_server.base + "/item/{id}", "name STRING", batch_url=http_server.base + "/batch")
    keys = ["a", "nul\x00byte", BAD_UTF8, "reject", BIG, "b", 7, float("nan"), "missing"]
    got, stats = run(outcomes(source, keys))
    assert got[0] == [{"name": "A"}] and got[1] == [{"name": "nul"}] and got[5] == [{"name": "B"}]
    assert got[2] == [] and got[7] == [] and got[8] == []  # JSON cannot carry them: misses
    assert got[6] == [{"name": "seven"}]
    # refused alone: their own errors (400 for 'reject', 413 for the 1 MB key), not the batch's
    assert isinstance(got[3], ConnectorError) and getattr(got[3], "status", None) == 400
    assert isinstance(got[4], ConnectorError) and getattr(got[4], "status", None) == 413
    assert stats["errors"] == 2


def test_http_single_key_binary_is_percent_encoded_literally(http_server):
    source = HttpLookup(http_server.base + "/item/{id}", "name STRING")
    run(outcomes(source, [BAD_UTF8], size=1))
    assert any(p.endswith("/item/%FF%FE-not-utf8") for p in http_server.raw_paths)
