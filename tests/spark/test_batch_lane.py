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

# the lane's Spark surface (mapInArrow, dropDuplicates, toLocalIterator, unordered_wait) is the
# entry points', which the pyspark3.5 leg covers: this file runs in the main leg only
pytestmark = pytest.mark.version_agnostic

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
        df = prompts(spark, 10_000)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        sub = aiospark.submit_batches(df, fn, journal=journal, max_requests=4000)
        assert sub.submitted == 10_000 and len(sub.batches) == 3
        again = aiospark.submit_batches(df, fn, journal=journal)  # a rerun submits nothing
        assert again.submitted == 0 and again.already == 10_000
        out = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.2, timeout=120)
        got = answers(out)
        stats = endpoint.stats()
        assert len(got) == 10_000 and all(isinstance(v, str) and v for v in got.values())
        assert stats["answered"] == 0  # no live request: every answer came from a batch
        assert len(stats["batch_submitted"]) == 10_000 and stats["batch_submitted_twice"] == 0
        batch_usage = out.aiospark_metrics.total.usage
        live = aiospark.unordered_wait(df, chat(endpoint.base_url), fn.output_schema(df))
        assert answers(live) == got
        assert endpoint.stats()["answered"] == 10_000
        live_usage = live.aiospark_metrics.total.usage
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            assert batch_usage[name] == live_usage[name] > 0
        assert batch_usage["batch_answers"] == 10_000
        # the answers are in the journal now: a live run over it calls nothing
        served = aiospark.unordered_wait(df, fn, fn.output_schema(df), journal=journal)
        assert answers(served) == got and served.aiospark_metrics.total.calls == 0


def test_failed_and_expired_requests_are_error_rows_or_live_calls_never_missing(spark, tmp_path):
    with DemoOpenAI(batch_delay=0.2, batch_fail_every=4) as endpoint:
        fn = chat(endpoint.base_url)
        df = prompts(spark, 200)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id", keep_errors=True)
        aiospark.submit_batches(df, fn, journal=journal)
        out = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.2, timeout=120, on_error="row")
        rows = out.collect()
        assert len(rows) == 200 and endpoint.stats()["answered"] == 0
        failed = [r for r in rows if r["_error"] is not None]
        assert len(failed) == 50 and all(r["answer"] is None for r in failed)
        assert all("server_error" in r["_error"] for r in failed)
        # a 5xx of the provider says nothing of the row: not kept, even with keep_errors; the live
        # fallback asks those rows again, and only those
        live = aiospark.collect_batches(df, fn, journal=journal, fallback="live", poll_interval=0.2, on_error="row")
        got = live.collect()
        assert len(got) == 200 and all(r["_error"] is None and r["answer"] for r in got)
        assert endpoint.stats()["answered"] == 50 and live.aiospark_metrics.total.usage["batch_fallbacks"] == 50
        assert endpoint.stats()["batch_submitted_twice"] == 0

    with DemoOpenAI(batch_delay=0.2, batch_expire=True) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "e"), key="id")
        aiospark.submit_batches(df, fn, journal=journal)
        rows = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.2, on_error="row").collect()
        expired = [r for r in rows if r["_error"] is not None]
        assert len(rows) == 200 and 0 < len(expired) < 200
        assert all("batch_expired" in r["_error"] for r in expired)


def test_a_row_changed_since_submit_never_gets_the_old_answer(spark, tmp_path):
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        aiospark.submit_batches(prompts(spark, 20), fn, journal=journal)
        changed = spark.createDataFrame([(i, f"ticket number {i}" if i % 2 else f"another text {i}")
                                         for i in range(20)], "id LONG, prompt STRING")
        rows = aiospark.collect_batches(changed, fn, journal=journal, poll_interval=0.1, on_error="row").collect()
        bad = {r["_input"]["id"]: r["_error"] for r in rows if r["_error"] is not None}
        # an edited prompt is another question (the input column is in the identity): in no batch
        assert sorted(bad) == list(range(0, 20, 2)) and all("not_submitted" in e for e in bad.values())
        live = aiospark.unordered_wait(changed, chat(endpoint.base_url), fn.output_schema(changed))
        want = answers(live)
        got = {r["id"]: r["answer"] for r in rows if r["_error"] is None}
        assert got == {i: want[i] for i in got}


def test_rows_added_after_submit_are_submitted_alone_and_null_inputs_never(spark, tmp_path, capsys):
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        assert aiospark.submit_batches(prompts(spark, 10), fn, journal=journal).submitted == 10
        more = prompts(spark, 15).union(spark.createDataFrame([(99, None)], "id LONG, prompt STRING"))
        sub = aiospark.submit_batches(more, fn, journal=journal)
        assert sub.submitted == 5 and sub.already == 10
        rows = aiospark.collect_batches(more, fn, journal=journal, poll_interval=0.1, progress=True).collect()
        assert len(rows) == 16 and {r["id"]: r["answer"] for r in rows}[99] is None
        # progress: one line per poll, the last with every request completed
        last = [line for line in capsys.readouterr().err.splitlines() if line.startswith("aiospark batches:")][-1]
        assert last == "aiospark batches: 2 (2 completed); requests: 15 of 15 completed, 0 failed", last
        assert endpoint.stats()["batch_submitted_twice"] == 0 and endpoint.stats()["answered"] == 0


def test_embeddings_and_structured_outputs_in_the_batch_lane_equal_the_live_lane(spark, tmp_path):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    with DemoOpenAI(batch_delay=0.1) as endpoint:
        texts = spark.createDataFrame([(i, f"text {i}") for i in range(50)], "id LONG, text STRING")
        emb = OpenAIEmbeddings("demo", base_url=endpoint.base_url, api_key=KEY)
        journal = aiospark.Journal(str(tmp_path / "emb"), key="id")
        aiospark.submit_batches(texts, emb, journal=journal)
        got = answers(aiospark.collect_batches(texts, emb, journal=journal, poll_interval=0.1), "embedding")
        want = answers(aiospark.unordered_wait(texts, emb, emb.output_schema(texts)), "embedding")
        assert got == want and len(got) == 50

        shape = StructType([StructField("label", StringType()), StructField("score", LongType())])
        structured = chat(endpoint.base_url, response_format=shape)
        df = prompts(spark, 30)
        journal = aiospark.Journal(str(tmp_path / "chat"), key="id")
        aiospark.submit_batches(df, structured, journal=journal)
        got = answers(aiospark.collect_batches(df, structured, journal=journal, poll_interval=0.1))
        want = answers(aiospark.unordered_wait(df, structured, structured.output_schema(df)))
        assert got == want and len(got) == 30 and all(v is not None for v in got.values())


def test_collect_without_waiting_says_what_is_pending(spark, tmp_path):
    with DemoOpenAI(batch_delay=30) as endpoint:
        fn = chat(endpoint.base_url)
        df = prompts(spark, 5)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        aiospark.submit_batches(df, fn, journal=journal)
        with pytest.raises(aiospark.BatchesPending, match="1 batch.*have not ended") as info:
            aiospark.collect_batches(df, fn, journal=journal, wait=False)
        assert len(info.value.pending) == 1
        with pytest.raises(aiospark.BatchesPending):
            aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1, timeout=0.3)


def test_bad_arguments_are_refused_before_anything_is_sent(spark, tmp_path):
    fn = chat("http://127.0.0.1:9/v1")
    df = prompts(spark, 3)
    journal = aiospark.Journal(str(tmp_path / "j"), key="id")

    async def plain(row):
        return [row]

    with pytest.raises(TypeError, match="OpenAIChat or OpenAIEmbeddings"):
        aiospark.submit_batches(df, plain, journal=journal)
    with pytest.raises(TypeError, match="needs journal="):
        aiospark.submit_batches(df, fn, journal=None)
    with pytest.raises(ValueError, match="directory journal"):
        aiospark.submit_batches(df, fn, journal=aiospark.Journal("redis://127.0.0.1:9/0", key="id"))
    with pytest.raises(ValueError, match="max_requests"):
        aiospark.submit_batches(df, fn, journal=journal, max_requests=0)
    with pytest.raises(ValueError, match="fallback"):
        aiospark.collect_batches(df, fn, journal=journal, fallback="retry")
    with pytest.raises(ValueError, match="poll_interval"):
        aiospark.collect_batches(df, fn, journal=journal, poll_interval=0)
    with pytest.raises(TypeError):
        aiospark.submit_batches("not a frame", fn, journal=journal)


DRIVER = textwrap.dedent("""
    import sys
    import aiospark
    from aiospark.connectors.openai import OpenAIChat
    base_url, path = sys.argv[1], sys.argv[2]
    spark = aiospark.local_session("local[2]")
    df = spark.createDataFrame([(i, f"ticket number {i}") for i in range(400)], "id LONG, prompt STRING")
    fn = OpenAIChat("demo", base_url=base_url, api_key="sk-test-batch-lane-key")
    aiospark.submit_batches(df, fn, journal=aiospark.Journal(path, key="id"), max_requests=20)
    print("SUBMITTED", flush=True)
""")


def test_a_driver_killed_while_submitting_resubmits_nothing(spark, tmp_path):
    with DemoOpenAI(batch_delay=60) as endpoint:
        path = str(tmp_path / "j")
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        child = subprocess.Popen([sys.executable, str(script), endpoint.base_url, path], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(endpoint.stats()["batch_submitted"]) < 100:
            time.sleep(0.02)
        child.kill()  # some of the 20 batches made, maybe one made and not yet recorded
        out, _ = child.communicate()
        made = len(endpoint.stats()["batch_submitted"])
        assert 100 <= made < 400 and b"SUBMITTED" not in out
        fn = chat(endpoint.base_url)
        df = prompts(spark, 400)
        sub = aiospark.submit_batches(df, fn, journal=aiospark.Journal(path, key="id"), max_requests=20)
        stats = endpoint.stats()
        assert len(stats["batch_submitted"]) == 400 and stats["batch_submitted_twice"] == 0
        assert sub.submitted + sub.resumed + sub.already >= 400 - 20


def test_batch_status_shows_each_batch_state_counts_and_age(spark, tmp_path, capsys, monkeypatch):
    from aiospark.app.cli import main

    with DemoOpenAI(batch_delay=0.5) as endpoint:
        fn = chat(endpoint.base_url)
        path = str(tmp_path / "j")
        assert main(["batch", "status", path]) == 2 and "no journal at" in capsys.readouterr().err
        os.makedirs(path)
        assert main(["batch", "status", path]) == 0
        assert "no batches recorded" in capsys.readouterr().out
        sub = aiospark.submit_batches(prompts(spark, 30), fn, journal=aiospark.Journal(path, key="id"), max_requests=20)
        assert main(["batch", "status", path]) == 0
        out = capsys.readouterr().out
        assert "2 batch(es)" in out and all(b in out for b in sub.batches)
        assert "answers not read yet" in out and KEY not in out
        time.sleep(1.5)
        monkeypatch.setenv("BATCH_TEST_KEY", KEY)
        assert main(["batch", "status", path, "--base-url", endpoint.base_url, "--api-key-env", "BATCH_TEST_KEY"]) == 0
        out = capsys.readouterr().out
        assert out.count("completed ") == 2 and "20 requests: 20 completed, 0 failed" in out and KEY not in out
    assert main(["batch", "status", "redis://127.0.0.1:9/0"]) == 2


WORKER_KILL = textwrap.dedent("""
    import json, os, signal, sys
    import aiospark
    from pyspark.sql import functions as F
    from aiospark.connectors.openai import OpenAIChat
    base_url, path, markers = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = aiospark.local_session("local[2,4]")   # a failed task is tried again, as on a cluster

    def kill_once(step):
        def prompt(i):
            if i == 150:
                try:
                    fd = os.open(os.path.join(markers, step), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass  # the task's retry
                else:
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
            return f"ticket number {i}"
        return F.udf(prompt, "string")

    base = spark.range(0, 300, 1, 3)
    fn = OpenAIChat("demo", base_url=base_url, api_key="sk-test-batch-lane-key")
    journal = aiospark.Journal(path, key="id")
    sub = aiospark.submit_batches(base.withColumn("prompt", kill_once("submit")(F.col("id"))), fn, journal=journal,
                                  max_requests=100)
    out = aiospark.collect_batches(base.withColumn("prompt", kill_once("collect")(F.col("id"))), fn,
                                   journal=journal, poll_interval=0.2)
    rows = {r["id"]: r["answer"] for r in out.collect()}
    print(json.dumps({"submitted": sub.submitted, "rows": len(rows), "answered": sum(1 for v in rows.values() if v),
                      "killed": sorted(os.listdir(markers))}))
""")


def test_workers_killed_while_submitting_and_collecting_resubmit_nothing(tmp_path):
    import json

    with DemoOpenAI(batch_delay=0.2) as endpoint:
        script = tmp_path / "job.py"
        script.write_text(WORKER_KILL)
        markers = tmp_path / "markers"
        markers.mkdir()
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run([sys.executable, str(script), endpoint.base_url, str(tmp_path / "j"), str(markers)],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result == {"submitted": 300, "rows": 300, "answered": 300, "killed": ["collect", "submit"]}
        stats = endpoint.stats()
        assert len(stats["batch_submitted"]) == 300 and stats["batch_submitted_twice"] == 0
        assert stats["answered"] == 0


def test_a_money_budget_holds_against_what_the_batches_billed(spark, tmp_path):
    from aiospark.connectors.openai import Price

    with DemoOpenAI(batch_delay=0.1) as endpoint:
        price = Price(input=1_000.0, output=3_000.0)  # per 1M tokens: cents per row, easy to read
        fn = chat(endpoint.base_url, max_tokens=32, price=price)
        df = prompts(spark, 60)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        one = fn.budget_cost()({"prompt": "ticket number 10"}) * price.factor("batch")  # a request's estimate
        budget = aiospark.Budget(one * 25.5, cost=fn.budget_cost())
        sub = aiospark.submit_batches(df, fn, journal=journal, budget=budget)
        assert sub.over_budget > 0 and sub.submitted + sub.over_budget == 60
        assert budget.spent <= budget.limit + 1e-9  # reserved at submit: never more than given
        out = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1, on_error="row", budget=budget)
        rows = out.collect()
        billed = out.aiospark_metrics.total.usage["cost"]
        answered = [r for r in rows if r["_error"] is None]
        assert len(answered) == sub.submitted and endpoint.stats()["answered"] == 0
        assert all("not_submitted" in r["_error"] for r in rows if r["_error"] is not None)
        # the pot holds what the batches billed (at the batch price), not the estimates
        assert budget.spent == pytest.approx(billed) and 0 < billed <= budget.limit
        assert billed < sub.submitted * one  # estimates (prompt + max_tokens) were above the bill
        with pytest.raises(ValueError, match="fallback='live'"):
            aiospark.collect_batches(df, fn, journal=journal, budget=budget, fallback="live")
    with pytest.raises(ValueError, match="redis"):
        aiospark.submit_batches(df, fn, journal=journal,
                                budget=aiospark.Budget(5, redis="redis://127.0.0.1:9/0", name="b"))
