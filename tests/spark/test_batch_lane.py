"""The provider batch lane (``aiospark.submit_batches`` / ``aiospark.collect_batches``) on a real local Spark
against the demo endpoint's Files and Batches API (a child process on 127.0.0.1): the same values and usage
as the live lane, never a request submitted twice (reruns, a killed driver), failed and expired requests as
error rows or live calls, changed rows never given another question's answer, and the errors of bad
arguments.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import aiospark
from aiospark.app.demo_openai import DemoOpenAI
from aiospark.connectors.openai import OpenAIChat, OpenAIEmbeddings

KEY = "sk-test-batch-lane-key"


def chat(base_url: str, **kw) -> OpenAIChat:
    return OpenAIChat("demo", base_url=base_url, api_key=KEY, **kw)


def prompts(spark, n: int, start: int = 0):
    return spark.createDataFrame([(i, f"ticket number {i}") for i in range(start, start + n)], "id LONG, prompt STRING")


def answers(df, column: str = "answer") -> dict:
    return {r["id"]: r[column] for r in df.collect()}


def test_batch_lane_gives_the_live_values_and_usage_and_never_submits_twice(spark, tmp_path):
    with DemoOpenAI(batch_delay=0.3) as endpoint:
        fn = chat(endpoint.base_url)
        df = prompts(spark, 3000)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        sub = aiospark.submit_batches(df, fn, journal=journal, max_requests=1000)
        assert sub.submitted == 3000 and len(sub.batches) == 3
        again = aiospark.submit_batches(df, fn, journal=journal)  # a rerun submits nothing
        assert again.submitted == 0 and again.already == 3000
        out = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.2, timeout=120)
        got = answers(out)
        stats = endpoint.stats()
        assert len(got) == 3000 and all(isinstance(v, str) and v for v in got.values())
        assert stats["answered"] == 0  # no live request: every answer came from a batch
        assert len(stats["batch_submitted"]) == 3000 and stats["batch_submitted_twice"] == 0
        batch_usage = out.aiospark_metrics.total.usage
        live = aiospark.unordered_wait(df, chat(endpoint.base_url), fn.output_schema(df))
        assert answers(live) == got
        assert endpoint.stats()["answered"] == 3000
        live_usage = live.aiospark_metrics.total.usage
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            assert batch_usage[name] == live_usage[name] > 0
        assert batch_usage["batch_answers"] == 3000
        # the answers are in the journal now: a live run over it calls nothing
        served = aiospark.unordered_wait(df, fn, fn.output_schema(df), journal=journal)
        assert answers(served) == got and served.aiospark_metrics.total.calls == 0
