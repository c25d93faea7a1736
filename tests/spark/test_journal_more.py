"""journal= through real Spark, continued: the bulk route of a rerun keeps the output exactly,
lookup_join with a journal, and the failures: a corrupt segment, an unwritable location, a Redis
that goes away mid-run. Calls are counted at a real HTTP server on 127.0.0.1."""
from __future__ import annotations

import glob
import os
import shutil
import threading
import time

import pytest
from pyspark.sql import functions as F

import aiospark
from tests.chaos import ITEM_SCHEMA, ServiceCall
from tests.support.journal import calls
from tests.support.servers import RedisServer
from tests.support.service import FaultService, ServiceConfig, item_value

# what this file tests does not depend on the PySpark release: the main CI leg runs it, the
# PySpark-version legs do not (.ci/run)
pytestmark = pytest.mark.version_agnostic

ROWS = 1000


def items(spark, rows=ROWS, partitions=2):
    return spark.range(0, rows, 1, partitions).select("id", F.format_string("k%05d", "id").alias("key"))


def test_a_rerun_replays_the_recorded_prefix_in_bulk_with_the_exact_ordered_output(spark, service, tmp_path):
    """Each partition's leading rows are recorded, then rows that are not, with recorded ones
    among them: the rerun (the bulk route for the prefix, the operator after it) gives exactly
    the output of a run without a journal, in order, and calls only the rows not recorded."""
    journal = aiospark.Journal(str(tmp_path / "j"), key="id")
    # partition 0 holds ids 0..499, partition 1 500..999: a first run records 0..299 of each and
    # every 7th row after that (the rows a task retry or a rerun after a kill would find)
    missing = {i for i in range(ROWS) if i % 500 >= 300 and i % 7 != 0}
    done = items(spark).filter(~F.col("id").isin(sorted(missing)))
    aiospark.ordered_wait(done, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()

    plain = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA).collect()
    before = calls(service)
    again = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert calls(service) - before == len(missing)
    assert again == plain
    assert [r.id for r in again] == list(range(ROWS)) and all(r.value == item_value(r.key) for r in again)


def test_a_finished_rerun_through_the_bulk_route_is_exact_ordered_and_unordered(spark, service, tmp_path):
    journal = aiospark.Journal(str(tmp_path / "j"), key="key")
    df = items(spark, 600, 3)
    first = aiospark.ordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    before = calls(service)
    again = aiospark.ordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert again == first and calls(service) == before
    unordered = aiospark.unordered_wait(df, ServiceCall(service.url), ITEM_SCHEMA, journal=journal).collect()
    assert sorted(unordered) == sorted(first) and calls(service) == before


def test_lookup_join_rerun_with_its_journal_makes_no_lookup(spark, tmp_path):
    from aiospark.connectors import HttpLookup

    journal = aiospark.Journal(str(tmp_path / "j"), key="id")
    df = spark.range(0, 400, 1, 2).withColumn("tag", F.col("id") % 3)
    with FaultService(ServiceConfig(latency=0.001), process=True) as svc:
        source = HttpLookup(svc.url + "/item/{id}", "name STRING")
        first = aiospark.lookup_join(df, source, on="id", journal=journal, ordered=True).collect()
        called = svc.stats()["requests"]
        again = aiospark.lookup_join(df, source, on="id", journal=journal, ordered=True).collect()
        assert svc.stats()["requests"] == called
        unbatched = aiospark.lookup_join(df, source, on="id", journal=aiospark.Journal(str(tmp_path / "k")),
                                         batch=False).collect()
    assert called >= 1 and len(first) == 400 and again == first
    assert sorted(unbatched) == sorted(first)


def test_a_corrupt_or_half_written_segment_is_skipped_and_its_rows_called_again(spark, service, tmp_path):
    loc = str(tmp_path / "j")
    first = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA,
                                  journal=aiospark.Journal(loc, key="id", buckets=2)).collect()
    segments = sorted(glob.glob(f"{loc}/*/k=0/*.arrow")) + sorted(glob.glob(f"{loc}/*/k=1/*.arrow"))
    assert len(segments) == 4  # 2 tasks, each writing its rows of 2 buckets
    torn = segments[0]  # a killed writer's segment, cut in its first batch
    data = open(torn, "rb").read()
    with open(torn, "wb") as f:
        f.write(data[:len(data) // 3])
    with open(os.path.join(os.path.dirname(segments[-1]), "junk.arrow"), "wb") as f:
        f.write(b"not an arrow stream at all")
    before = calls(service)
    again = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA,
                                  journal=aiospark.Journal(loc, key="id", buckets=2)).collect()
    recalled = calls(service) - before
    assert again == first
    assert 0 < recalled <= ROWS // 3  # the torn segment's lost rows only; k=1 read around the junk
    # a byte flipped inside a batch, so that 999's outcome reads as 599's (recorded after it):
    # its checksum fails, that batch's rows are called again, no row gets another's result
    victims = [p for p in glob.glob(f"{loc}/*/k=*/*.arrow") if b"[999]" in open(p, "rb").read()]
    assert victims
    for victim in victims:  # (two, when the rerun recorded it again)
        data = bytearray(open(victim, "rb").read())
        at = bytes(data).index(b"[999]")
        data[at + 1] = ord("5")
        with open(victim, "wb") as f:
            f.write(bytes(data))
    before = calls(service)
    third = aiospark.ordered_wait(items(spark), ServiceCall(service.url), ITEM_SCHEMA,
                                  journal=aiospark.Journal(loc, key="id", buckets=2)).collect()
    assert third == first and 0 < calls(service) - before <= ROWS // 3


def test_an_unwritable_location_gives_a_clear_error(spark, service, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match=r"aiospark.Journal cannot write to .*a-file/journal.*Pass a directory"):
        aiospark.ordered_wait(items(spark, 10), ServiceCall(service.url), ITEM_SCHEMA,
                              journal=aiospark.Journal(str(blocker / "journal")))
    # writable at definition, then taken away before the action: the job fails naming the place
    loc = tmp_path / "gone"
    out = aiospark.ordered_wait(items(spark, 200), ServiceCall(service.url), ITEM_SCHEMA,
                                journal=aiospark.Journal(str(loc), key="id"))
    shutil.rmtree(loc)
    loc.write_text("now a file")
    with pytest.raises(Exception) as caught:
        out.collect()
    text = str(caught.value)
    assert "journal" in text and str(loc) in text, text[-3000:]


def test_a_redis_journal_whose_server_stops_mid_run_fails_the_job_naming_the_url(spark, tmp_path):
    srv = RedisServer(password="hunter2-secret").start()
    url = f"redis://:hunter2-secret@127.0.0.1:{srv.port}/0?prefix=gone"
    slow = FaultService(ServiceConfig(latency=0.05)).start()
    try:
        out = aiospark.unordered_wait(items(spark, 4000), ServiceCall(slow.url), ITEM_SCHEMA, capacity=20,
                                      journal=aiospark.Journal(url, key="id"))

        def stop_when_called() -> None:
            deadline = time.monotonic() + 120
            while slow.stats()["requests"] < 100 and time.monotonic() < deadline:
                time.sleep(0.05)
            srv.stop()

        stopper = threading.Thread(target=stop_when_called, daemon=True)
        stopper.start()
        with pytest.raises(Exception) as caught:
            out.collect()
        stopper.join()
        assert slow.stats()["requests"] < 4000  # failed mid-run, not after
    finally:
        slow.stop()
        srv.stop()
    text = str(caught.value)
    assert f"journal's Redis at redis://:***@127.0.0.1:{srv.port}/0" in text, text[-3000:]
    assert "hunter2" not in text
