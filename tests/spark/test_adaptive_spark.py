"""AdaptiveConcurrency through the public Spark API, against a real HTTP service on 127.0.0.1 that
serves a fixed number of requests at once and rejects (429) or queues the rest: batch (two tasks,
each with its own limit), Structured Streaming, and the error paths.

Bounds are loose on purpose (the machine is shared): each one is far from what a fixed capacity of
400 does to the same service (most requests rejected; a queue hundreds of calls deep)."""
from __future__ import annotations

import json
from collections import Counter

import pytest

import aiospark
from aiospark import AdaptiveConcurrency, Metrics, RetryStrategy
from aiospark.connectors import is_retryable
from tests.support.fetch import Fetch
from tests.support.service import LimitedService

RETRY = RetryStrategy.exponential_backoff(30, 0.01, 0.5, jitter=0.3, exception_predicate=is_retryable)


async def broken(row):
    raise ValueError(f"no such item {row['id']}")


def test_two_tasks_find_the_limit_of_a_service_that_rejects(spark):
    with LimitedService(limit=20, latency=0.02, mode="reject") as svc:
        metrics = Metrics("adaptive-reject")
        out = aiospark.unordered_wait(spark.range(0, 3000, 1, 2), Fetch(svc.url), "id LONG",
                                      capacity=AdaptiveConcurrency(400), retry=RETRY, metrics=metrics)
        assert sorted(r.id for r in out.collect()) == list(range(3000))
        stats = svc.stats()
    assert metrics.total.successes == 3000 and metrics.total.failures == 0
    # a fixed 400 per task gets most of its requests rejected here; adaptive few
    assert stats["rejected"] <= 0.15 * stats["requests"], stats
    assert metrics.total.inflight_peak < 400


def test_capacity_auto_keeps_the_queue_of_a_queueing_service_short(spark):
    with LimitedService(limit=20, latency=0.02, mode="queue") as svc:
        out = aiospark.unordered_wait(spark.range(0, 3000, 1, 2), Fetch(svc.url), "id LONG", capacity="auto")
        assert out.count() == 3000
        stats = svc.stats()
    assert stats["rejected"] == 0
    # with a fixed capacity of 1000 per task, about 2000 calls would wait for 20 slots (p50 ~ 2 s)
    assert stats["peak_waiting"] < 300, stats
    assert stats["p50"] < 0.2, stats


def test_adaptive_in_structured_streaming_exactly_once(spark, tmp_path):
    source, sink, checkpoint = (tmp_path / name for name in ("in", "out", "cp"))
    source.mkdir()
    keys = [f"k{i:04d}" for i in range(1200)]
    for f in range(4):
        (source / f"part-{f}.json").write_text(
            "".join(json.dumps({"key": k}) + "\n" for k in keys[f::4]))
    with LimitedService(limit=10, latency=0.01, mode="reject") as svc:
        stream = spark.readStream.schema("key STRING").option("maxFilesPerTrigger", 2).json(str(source))
        out = aiospark.unordered_wait(stream, Fetch(svc.url, key="key"), "key STRING",
                                      capacity=AdaptiveConcurrency(200, initial=4), retry=RETRY)
        query = (out.writeStream.format("parquet").option("path", str(sink))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120), "the streaming query did not finish in 120 s"
            assert query.exception() is None, query.exception()
        finally:
            if query.isActive:
                query.stop()
        stats = svc.stats()
    counts = Counter(r.key for r in spark.read.parquet(str(sink)).collect())
    assert sorted(counts) == keys and set(counts.values()) == {1}
    assert stats["rejected"] <= 0.3 * stats["requests"], stats


def test_overloads_without_retry_fail_the_task_naming_the_row(spark):
    # the limit backs off on 429s, but never hides them: without a retry strategy a rejected call
    # fails the task like any other error
    with LimitedService(limit=1, latency=0.05, mode="reject") as svc:
        df = aiospark.unordered_wait(spark.range(0, 200, 1, 2), Fetch(svc.url), "id LONG",
                                     capacity=AdaptiveConcurrency(50, initial=20))
        with pytest.raises(Exception) as info:
            df.collect()
    text = str(info.value)
    assert "AsyncFunctionError" in text and "HTTP 429" in text and "'id':" in text


def test_other_errors_fail_the_task_and_bad_arguments_fail_on_the_driver(spark):
    with pytest.raises(Exception) as info:
        aiospark.unordered_wait(spark.range(0, 20, 1, 2), broken, "id LONG", capacity="auto").collect()
    assert "AsyncFunctionError" in str(info.value) and "no such item" in str(info.value)
    with pytest.raises(ValueError, match="min_limit"):
        AdaptiveConcurrency(10, min_limit=20)
    with pytest.raises(TypeError, match="backoff"):
        AdaptiveConcurrency(10, backoff="half")
    with pytest.raises(ValueError, match="auto"):
        aiospark.unordered_wait(spark.range(3), broken, "id LONG", capacity="adaptive")
