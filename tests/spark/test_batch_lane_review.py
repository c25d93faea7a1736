"""The provider batch lane against what an adversarial review tried through the public API (each
test failed when it was written): edited prompts and rows sharing a key never get another row's
answer, a batch failed whole can be submitted again, a changed setting is refused before any call,
``aiospark batch status`` says what is wrong instead of a traceback, and a rerun counts every row.
"""
from __future__ import annotations

import contextlib
import io

import pytest

import aiospark
from aiospark.app.demo_openai import DemoOpenAI
from aiospark.connectors.openai import OpenAIChat

pytestmark = pytest.mark.version_agnostic  # the Spark surface is test_batch_lane.py's

KEY = "sk-review49-secret-key"


def chat(base_url: str, **kw) -> OpenAIChat:
    return OpenAIChat("demo", base_url=base_url, api_key=KEY, **kw)


def frame(spark, rows):
    return spark.createDataFrame(rows, "id LONG, prompt STRING")


def by_prompt(df) -> dict:
    return {r["_input"]["prompt"] if r["_error"] else r["prompt"]: (r["answer"], r["_error"]) for r in df.collect()}


def original_and_edited(spark, endpoint, tmp_path):
    """The function, a keyed journal, 3 rows and the same keys with edited prompts."""
    journal = aiospark.Journal(str(tmp_path / "j"), key="id")
    original = frame(spark, [(i, f"ticket {i}") for i in range(3)])
    edited = frame(spark, [(i, f"edited ticket {i}") for i in range(3)])
    return chat(endpoint.base_url), journal, original, edited


def test_a_prompt_edited_after_a_collect_never_gets_the_old_row(spark, tmp_path):
    """Submit, collect once (answers recorded), edit the prompts under the same keys, collect again:
    an error row (the edited rows are in no batch), or a live call with fallback="live" -- never the
    old answer, and the returned frame holds the user's own input values."""
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn, journal, before, edited = original_and_edited(spark, endpoint, tmp_path)
        aiospark.submit_batches(before, fn, journal=journal)
        aiospark.collect_batches(before, fn, journal=journal, poll_interval=0.1).collect()

        got = aiospark.collect_batches(edited, fn, journal=journal, poll_interval=0.1, on_error="row").collect()
        prompts = sorted(r["_input"]["prompt"] if r["_error"] else r["prompt"] for r in got)
        assert prompts == [f"edited ticket {i}" for i in range(3)], prompts  # the user's own rows come back
        for r in got:
            # an edited prompt is another question (the input column is part of the identity): in no batch
            assert r["_error"] is not None and "not_submitted" in r["_error"], r

        live = aiospark.collect_batches(edited, fn, journal=journal, fallback="live", poll_interval=0.1, on_error="row")
        answers = {r["prompt"]: r["answer"] for r in live.collect()}
        assert sorted(answers) == [f"edited ticket {i}" for i in range(3)], answers
        assert all(answer.endswith(f"answer to: {prompt})") for prompt, answer in answers.items())
        assert endpoint.stats()["answered"] == 3


def test_a_live_fallback_answer_is_not_given_to_the_original_rows_afterwards(spark, tmp_path):
    """Submit rows, collect an edited copy with fallback="live" (the edits get live answers, recorded
    under the same keys), then collect the original rows -- which still have their batch answers. What
    happens: the original rows come back as the edited rows (edited prompt, edited answer)."""
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn, journal, original, edited = original_and_edited(spark, endpoint, tmp_path)
        aiospark.submit_batches(original, fn, journal=journal)
        aiospark.collect_batches(edited, fn, journal=journal, fallback="live", poll_interval=0.1, on_error="row").collect()
        got = by_prompt(aiospark.collect_batches(original, fn, journal=journal, poll_interval=0.1, on_error="row"))
        assert sorted(got) == [f"ticket {i}" for i in range(3)], got
        for prompt, (answer, error) in got.items():
            assert error is not None or answer.endswith(f"answer to: {prompt})"), (prompt, answer, error)


def test_two_rows_with_one_key_and_different_prompts_never_share_an_answer(spark, tmp_path):
    """Equal keys are one request; a second row under that key with another prompt asks another
    question. Promise: never another row's answer (an error row "changed", or its own answer). What
    happens: the "beta" row is returned as the "alpha" row (prompt and answer both alpha's), so the
    frame holds alpha twice and beta is gone."""
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        df = frame(spark, [(1, "alpha"), (1, "beta"), (2, "gamma")])
        aiospark.submit_batches(df, fn, journal=journal)
        rows = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1, on_error="row").collect()
        seen = sorted(r["_input"]["prompt"] if r["_error"] else r["prompt"] for r in rows)
        assert seen == ["alpha", "beta", "gamma"], seen
        for r in rows:
            if r["_error"] is None:
                assert r["answer"].endswith(f"answer to: {r['prompt']})"), r


def test_rows_of_a_batch_the_provider_rejected_whole_can_be_submitted_again(spark, tmp_path):
    """The provider refuses a file in validation (here: more requests than its per-batch limit), the
    batch ends "failed" and none of its requests ran. Resubmitting with a smaller max_requests must
    submit those rows again (they were never answered nor billed). What happens: submit_batches
    counts them as already in a batch forever (submitted=0), so the only way to answer them is the
    live lane at full price, or a new journal."""
    with DemoOpenAI(batch_delay=0.1, batch_max_requests=3) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        df = frame(spark, [(i, f"ticket {i}") for i in range(8)])
        aiospark.submit_batches(df, fn, journal=journal)
        rows = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1, on_error="row").collect()
        assert all("too_many_requests" in r["_error"] for r in rows)
        assert endpoint.stats()["batch_submitted"] == {}  # the provider ran none of them
        again = aiospark.submit_batches(df, fn, journal=journal, max_requests=3)
        assert again.submitted == 8, again
        out = aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1, timeout=60, on_error="row").collect()
        assert all(r["_error"] is None and r["answer"] for r in out)
        assert endpoint.stats()["answered"] == 0 and endpoint.stats()["batch_submitted_twice"] == 0


def test_a_changed_system_prompt_is_another_question_refused_before_any_call(spark, tmp_path):
    """A changed setting (system prompt, model, max_tokens, ...) is another question: the journal
    refuses it before anything is called or read, naming the setting (a new Journal(version=...)
    records the new question next to the old one)."""
    from aiospark.journal.manifest import JournalMismatch

    with DemoOpenAI(batch_delay=0.1) as endpoint:
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        df = frame(spark, [(i, f"ticket {i}") for i in range(3)])
        aiospark.submit_batches(df, chat(endpoint.base_url), journal=journal)
        rude = chat(endpoint.base_url, system="Be rude.")
        with pytest.raises(JournalMismatch, match="system"):
            aiospark.collect_batches(df, rude, journal=journal, fallback="live", poll_interval=0.1, on_error="row")
        with pytest.raises(JournalMismatch, match="system"):
            aiospark.submit_batches(df, rude, journal=journal)
        assert endpoint.stats()["answered"] == 0 and len(endpoint.stats()["batch_submitted"]) <= 3


def run_cli(args):
    from aiospark.app.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = main(args)
    return code, buf.getvalue()


def test_batch_status_of_a_path_that_does_not_exist_says_so(tmp_path):
    """A typo in the journal path: `aiospark batch status /no/such/dir` prints "0 batch(es) / no
    batches recorded" and exits 0, as if a real journal were empty."""
    code, out = run_cli(["batch", "status", str(tmp_path / "no-such-journal")])
    assert code != 0 and "no-such-journal" in out and "no batches recorded" not in out, (code, out)


def test_batch_status_of_a_file_is_a_message_not_a_traceback(tmp_path):
    """`aiospark batch status some_file`: a raw NotADirectoryError escapes main() (a traceback)
    instead of a message and exit code 2 as for a Redis URL."""
    path = tmp_path / "afile"
    path.write_text("x")
    code, out = run_cli(["batch", "status", str(path)])
    assert code == 2 and str(path) in out


def test_batch_status_with_an_unreachable_provider_is_a_message_not_a_traceback(tmp_path, spark, monkeypatch):
    """`--base-url` pointing nowhere (or at a wrong path): ConnectorError / HttpStatusError escape
    main() as tracebacks; expected a one-line message (the key never in it) and a nonzero exit."""
    with DemoOpenAI(batch_delay=30) as endpoint:
        path = str(tmp_path / "j")
        aiospark.submit_batches(frame(spark, [(1, "x")]), chat(endpoint.base_url),
                                journal=aiospark.Journal(path, key="id"))
        monkeypatch.setenv("REVIEW49_KEY", KEY)
        for url in ("http://127.0.0.1:9/v1", endpoint.base_url + "/wrong"):
            code, out = run_cli(["batch", "status", path, "--base-url", url, "--api-key-env", "REVIEW49_KEY"])
            assert code not in (0, None) and out and KEY not in out, (url, code, out)


def test_batch_status_with_an_unset_api_key_variable_says_so(tmp_path, spark):
    """`--api-key-env NAME` where NAME is not set: the status asks the provider without any key
    (a real provider answers 401); expected a message naming the variable."""
    with DemoOpenAI(batch_delay=30) as endpoint:
        path = str(tmp_path / "j")
        aiospark.submit_batches(frame(spark, [(1, "x")]), chat(endpoint.base_url),
                                journal=aiospark.Journal(path, key="id"))
        code, out = run_cli(["batch", "status", path, "--base-url", endpoint.base_url,
                             "--api-key-env", "REVIEW49_NOT_SET"])
        assert code != 0 and "REVIEW49_NOT_SET" in out, (code, out)


def test_a_rerun_counts_rows_with_a_null_key_as_already_in_a_batch(spark, tmp_path):
    """BatchSubmission.already is "rows skipped: answered in the journal or in an earlier batch".
    After a collect, rows with a NULL key (submitted, answered, rightly not submitted again) are in
    neither `submitted` nor `already`: 4 rows, submitted=0, already=2."""
    with DemoOpenAI(batch_delay=0.1) as endpoint:
        fn = chat(endpoint.base_url)
        journal = aiospark.Journal(str(tmp_path / "j"), key="id")
        df = frame(spark, [(None, "alpha"), (None, "beta"), (2, "gamma"), (3, "delta")])
        assert aiospark.submit_batches(df, fn, journal=journal).submitted == 4
        aiospark.collect_batches(df, fn, journal=journal, poll_interval=0.1).collect()
        again = aiospark.submit_batches(df, fn, journal=journal)
        assert again.submitted == 0 and again.already == 4, again
        assert endpoint.stats()["batch_submitted_twice"] == 0
