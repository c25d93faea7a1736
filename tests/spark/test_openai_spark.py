"""aiospark.connectors.openai through the Spark entry points, against a real OpenAI-compatible server.

Classic session: ordered_wait (embeddings, batched), unordered_wait (chat, 429 + Retry-After,
usage in the job's metrics), error rows that carry no key, async_udf, Structured Streaming. One
Spark Connect test runs in a child process (a Connect session needs a process of its own).
The server runs in this process, on 127.0.0.1; Spark's Python workers reach it over TCP.
"""
from __future__ import annotations

import json

import pytest

import aiospark
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings, default_retry
from tests.support.openai_fixtures import openai_fixtures
from tests.support.openai_server import answer, tokens, vector

KEY = "sk-spark-S3cret-abcdef"


server, srv = openai_fixtures(KEY)


def texts_df(spark, n: int, partitions: int = 2):
    rows = [(i, f"row {i} says hello") for i in range(n)]
    return spark.createDataFrame(rows, "id LONG, text STRING").repartition(partitions).sortWithinPartitions("id")


def test_embeddings_ordered_wait_batches_rows_and_counts_usage(spark, srv):
    df = texts_df(spark, 400)
    embed = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, batch_size=32, batch_delay=0.02)
    out = aiospark.ordered_wait(df, embed, embed.output_schema(df), capacity=128, retry=default_retry())
    assert out.schema.simpleString() == "struct<id:bigint,text:string,embedding:array<float>>"
    rows = out.collect()
    assert sorted(r.id for r in rows) == list(range(400))
    assert all(r.embedding == vector(r.text) for r in rows)  # k/256 values are exact in FLOAT
    assert max(srv.batch_sizes) <= 32 and sum(srv.batch_sizes) == 400
    assert len(srv.batch_sizes) <= 400 / 4  # batched: far fewer requests than rows
    usage = out.aiospark_metrics.total.usage
    # (plus the estimate's keys, estimated_prompt_tokens and prompt_estimate_error_tokens)
    assert {k: usage[k] for k in ("prompt_tokens", "total_tokens")} == {
        "prompt_tokens": 400 * tokens("row 0 says hello"), "total_tokens": 400 * tokens("row 0 says hello")}


def test_chat_unordered_wait_retries_429_after_retry_after_and_counts_usage(spark, srv):
    prompts = [f"question {i}" if i % 10 else f"throttle {i}" for i in range(60)]
    df = spark.createDataFrame([(i, p) for i, p in enumerate(prompts)], "id INT, prompt STRING").repartition(2)
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY, client="openai", max_tokens=16)
    out = aiospark.unordered_wait(df, chat, chat.output_schema(df), capacity=32, retry=default_retry())
    rows = out.collect()
    assert {r.id: r.answer for r in rows} == {i: answer(p) for i, p in enumerate(prompts)}
    throttled = [s for s in srv.seen if s["inputs"][0].startswith("throttle")]
    by_text: dict = {}
    for s in throttled:
        by_text.setdefault(s["inputs"][0], []).append(s["time"])
    assert len(by_text) == 6 and all(len(t) == 2 and t[1] - t[0] >= 0.99 for t in by_text.values())
    total = out.aiospark_metrics.total
    assert total.retries == 6
    prompt = sum(tokens(p) for p in prompts)
    completion = sum(tokens(answer(p)) for p in prompts)
    assert {k: total.usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    assert total.usage["estimated_prompt_tokens"] > 0 and "prompt_estimate_error_tokens" in total.usage


def test_error_rows_name_the_failure_but_never_the_key(spark, srv):
    df = spark.createDataFrame([(1, "fine"), (2, "echo-auth"), (3, "bad-request")], "id INT, prompt STRING")
    chat = OpenAIChat("chat", base_url=srv.base_url, api_key=KEY)
    out = aiospark.ordered_wait(df.coalesce(1), chat, chat.output_schema(df), on_error="row")
    rows = {r._input.id if r._input else r.id: r for r in out.collect()}
    assert rows[1].answer == answer("fine") and rows[1]._error is None
    assert "HTTP 500" in rows[2]._error and "Bearer ***" in rows[2]._error and KEY not in rows[2]._error
    assert "HTTP 400" in rows[3]._error and "not allowed" in rows[3]._error


def _async_udf(return_type: str, function):
    return aiospark.async_udf(return_type, capacity=128)(function)


class TwoValues(aiospark.AsyncFunction):
    async def async_invoke(self, value):
        return [value, value] if value == "row 3 says hello" else [value]


def test_async_udf_takes_an_async_function_with_one_value_per_input(spark):
    both = aiospark.async_udf("string", on_error="null")(TwoValues())
    rows = texts_df(spark, 5).select("text", both("text").alias("v")).collect()
    assert {r.text: r.v for r in rows} == {f"row {i} says hello": (None if i == 3 else f"row {i} says hello")
                                          for i in range(5)}
    with pytest.raises(ValueError, match="batch inside it"):
        aiospark.async_udf("string", batch_size=4)(TwoValues())


def test_async_udf_embeddings_and_chat(spark, srv):
    embed = _async_udf("array<float>", OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY))
    ask = _async_udf("string", OpenAIChat("chat", base_url=srv.base_url, api_key=KEY))
    df = texts_df(spark, 150)
    rows = df.select("id", "text", embed("text").alias("v"), ask("text").alias("a")).collect()
    assert len(rows) == 150
    assert all(r.v == vector(r.text) and r.a == answer(r.text) for r in rows)
    assert len(srv.batch_sizes) < 150


def test_structured_streaming_embeddings(spark, srv, tmp_path):
    src, sink, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    src.mkdir()
    for f in range(3):
        (src / f"part-{f}.json").write_text(
            "".join(json.dumps({"id": f * 50 + i, "text": f"streamed {f * 50 + i}"}) + "\n" for i in range(50)))
    stream = spark.readStream.schema("id LONG, text STRING").option("maxFilesPerTrigger", 1).json(str(src))
    embed = OpenAIEmbeddings("emb", base_url=srv.base_url, api_key=KEY, batch_size=16)
    out = aiospark.unordered_wait(stream, embed, embed.output_schema(stream), capacity=64, retry=default_retry())
    query = (out.writeStream.format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "streaming query did not finish"
        assert query.exception() is None
    finally:
        if query.isActive:
            query.stop()
    rows = spark.read.parquet(str(sink)).collect()
    assert sorted(r.id for r in rows) == list(range(150))
    assert all(r.embedding == vector(r.text) for r in rows)
    assert max(srv.batch_sizes) <= 16 and len(srv.batch_sizes) < 150


def test_entry_point_batch_size_is_refused_for_a_function_that_batches_itself(spark):
    embed = OpenAIEmbeddings("emb", base_url="http://127.0.0.1:9/v1", api_key=KEY, batch_size=16)
    with pytest.raises(ValueError, match="sends rows in batches by itself"):
        aiospark.unordered_wait(spark.range(3), embed, "id LONG", batch_size=16, capacity=32)
