"""Progress: the CLI's line, and progress=True on the entry points (terminal, pseudo-terminal, log)."""
from __future__ import annotations

import io
import os
import pty
import re
import threading
import time

import pytest

import aiospark
from aiospark.app.progress import Progress
from aiospark.spark.progress import ProgressOptions, check_progress, format_line
from aiospark.spark.progress_live import BOARD, attach, choose_sink


class FakeMetrics:
    """What the CLI's Progress reads (``progress()``) and what attach() listens to (``on_report``)."""

    name = "fake"

    def __init__(self):
        self.rows = 0
        self.listeners = []

    def progress(self):
        running = 1 if self.rows else 0
        return {"rows": self.rows, "inflight": 7, "errors": 2, "running": running, "finished": 0}

    def on_report(self, listener):
        self.listeners.append(listener)

    def send(self, task, rows, final=False, inflight=3, **counters):
        report = {"task": task, "final": final, "rows": rows, "inflight": inflight,
                  "metrics": {"retries": counters.get("retries", 0), "failures": 0, "error_rows": 0,
                              "rate_limited": 0, "usage": counters.get("usage", {})}}
        for listener in self.listeners:
            listener(report)


class Tty(io.StringIO):
    def isatty(self):
        return True


def wait_board_idle(timeout=60.0):
    deadline = time.monotonic() + timeout
    while (BOARD.views or BOARD.thread is not None) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not BOARD.views and BOARD.thread is None, "the progress display did not end"


def test_live_line_updates_in_place():
    stream, metrics = io.StringIO(), FakeMetrics()
    with Progress(metrics, stream, interval=0.02, live=True, label="enrich"):
        for _ in range(5):
            metrics.rows += 100
            time.sleep(0.03)
    text = stream.getvalue()
    assert text.count("\r") >= 3 and text.endswith("\n") and text.count("\n") == 1
    last = text.rsplit("\r", 1)[1]
    assert last.startswith("enrich: 500 rows") and "7 in flight" in last and "2 errors" in last


def test_before_the_first_report_it_says_workers_are_starting():
    stream, metrics = io.StringIO(), FakeMetrics()
    with Progress(metrics, stream, interval=0.01, live=True, summary=False) as progress:
        time.sleep(0.05)
    assert "starting workers..." in stream.getvalue() and "0 rows" not in stream.getvalue()
    progress.finish(0)  # the last line says what was done, even if nothing was
    assert stream.getvalue().rsplit("\r", 1)[1].startswith("0 rows")


def test_not_a_terminal_prints_a_line_every_log_every_seconds_and_a_summary():
    stream, metrics = io.StringIO(), FakeMetrics()
    metrics.rows = 1234
    with Progress(metrics, stream, interval=0.01):
        time.sleep(0.05)
    assert stream.getvalue().count("\n") == 1 and "\r" not in stream.getvalue()  # default: every 30 s
    assert "1,234 rows" in stream.getvalue()
    stream = io.StringIO()
    with Progress(metrics, stream, log_every=0.02):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and "\r" not in stream.getvalue() and all("1,234 rows" in line for line in lines)


def test_the_line_shows_retries_tokens_budget_tasks_and_eta():
    p = {"rows": 1500, "inflight": 10, "errors": 1, "running": 3, "finished": 1, "retries": 4, "rate_limited": 2,
         "usage": {"prompt_tokens": 900, "completion_tokens": 100}, "final_tasks": 1, "final_rows": 1000}
    line = format_line(p, 10.0, "job", budget_left=250, tasks_total=4, tasks_done=1)
    assert line == ("job: 1,500 rows  150 rows/s  10 in flight  1 errors  4 retries  2 rate-limited  1,000 tokens  "
                    "budget left 250  tasks 1/4  ETA 17 s  10.0 s")  # 4 x 1,000 expected: 2,500 more at 150/s
    assert "ETA" not in format_line({**p, "final_tasks": 0}, 10.0, tasks_total=4, tasks_done=0)
    assert "starting workers..." in format_line({"rows": 0, "inflight": 0, "errors": 0}, 1.0)


def test_progress_argument_is_checked():
    assert check_progress(False, "x") is None and check_progress(True, "x").log_every == 30
    with pytest.raises(TypeError, match=r"ordered_wait\(progress=...\) takes True, False or"):
        check_progress("yes", "ordered_wait")
    with pytest.raises(ValueError, match="log_every"):
        ProgressOptions(log_every=0)
    with pytest.raises(ValueError, match="interval"):
        ProgressOptions(interval=float("nan"))


def test_no_kernel_means_a_plain_log_not_jupyter():
    assert choose_sink(ProgressOptions()).kind in ("log", "live")  # stderr: whatever it is here
    assert choose_sink(ProgressOptions(stream=io.StringIO())).kind == "log"
    assert choose_sink(ProgressOptions(stream=Tty())).kind == "live"


def test_attached_display_starts_on_the_first_report_and_ends_after_the_last():
    wait_board_idle()
    log, metrics = io.StringIO(), FakeMetrics()
    attach(metrics, ProgressOptions(stream=log, log_every=0.05, interval=0.02, quiet=0.1), label="job")
    time.sleep(0.1)
    assert BOARD.thread is None and log.getvalue() == ""  # nothing runs before an action
    metrics.send("3.0.0", 10)
    metrics.send("3.1.0", 20, retries=1)
    time.sleep(0.2)
    metrics.send("3.0.0", 100, final=True)
    metrics.send("3.1.0", 200, final=True, inflight=0, retries=1)
    wait_board_idle()
    lines = log.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("job: ") for line in lines)
    assert lines[-1].startswith("job: 300 rows") and "0 in flight" in lines[-1] and "1 retries" in lines[-1]
    # a second action starts from zero
    metrics.send("4.0.0", 5, final=True)
    wait_board_idle()
    assert log.getvalue().splitlines()[-1].startswith("job: 5 rows")


def test_two_jobs_on_one_terminal_get_a_line_each():
    wait_board_idle()
    tty, a, b = Tty(), FakeMetrics(), FakeMetrics()
    options = ProgressOptions(stream=tty, interval=0.02, quiet=0.1)
    attach(a, options, label="a")
    attach(b, options, label="b")
    a.send("1.0.0", 10)
    b.send("2.0.0", 20)
    time.sleep(0.2)
    a.send("1.0.0", 11, final=True)
    time.sleep(0.3)
    b.send("2.0.0", 22, final=True)
    wait_board_idle()
    text = tty.getvalue()
    assert "\x1b[1F" in text  # back to the first of two lines, rewritten in place
    final = re.sub(r"\x1b\[\d*[FK]", "", text.rsplit("\x1b[1F", 1)[-1])
    assert text.endswith("\n") and "a: 11 rows" in text and final.splitlines()[-1].startswith("b: 22 rows")


class BrokenStream(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_stream_that_cannot_be_written_stops_that_display_only(caplog):
    # neither the display's thread nor a neighbour's view dies with it: a job shown at the same
    # time goes on, and a later job shows its progress again
    wait_board_idle()
    broken, good, later = BrokenStream(), io.StringIO(), io.StringIO()
    a, b, c = FakeMetrics(), FakeMetrics(), FakeMetrics()
    attach(a, ProgressOptions(stream=broken, log_every=0.01, interval=0.02, quiet=0.1), label="a")
    attach(b, ProgressOptions(stream=good, log_every=0.01, interval=0.02, quiet=0.1), label="b")
    with caplog.at_level("WARNING", logger="aiospark.progress"):
        b.send("2.0.0", 20)  # b first: the board's thread starts with b's view, a's joins it
        a.send("1.0.0", 10)
        deadline = time.monotonic() + 30
        while "stopped showing" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        a.send("1.0.0", 11, final=True)
        b.send("2.0.0", 22, final=True)
        wait_board_idle()
    assert "progress of 'a' stopped showing (BrokenPipeError: [Errno 32] Broken pipe)" in caplog.text
    assert "'b'" not in caplog.text and good.getvalue().splitlines()[-1].startswith("b: 22 rows")
    attach(c, ProgressOptions(stream=later, log_every=0.05, interval=0.02, quiet=0.1), label="c")
    c.send("3.0.0", 5, final=True)
    wait_board_idle()
    assert later.getvalue().splitlines()[-1].startswith("c: 5 rows")


# ---------------------------------------------------------------------------- through Spark
async def slow_double(row):
    import asyncio

    await asyncio.sleep(0.002)
    return {"id": row["id"], "double": row["id"] * 2}


async def double_but_hundreds(row):
    if row["id"] % 100 == 0:
        raise ValueError("a hundred")
    return await slow_double(row)


def test_progress_true_on_a_spark_job_logs_lines_with_tasks_and_budget(spark):
    wait_board_idle()
    log = io.StringIO()
    budget = aiospark.Budget(10_000)
    out = aiospark.unordered_wait(spark.range(0, 3000, 1, 3), double_but_hundreds, "id LONG, double LONG",
                                  capacity=4, budget=budget, on_error="row",
                                  progress=ProgressOptions(stream=log, log_every=0.5, quiet=0.5),
                                  metrics=aiospark.Metrics("doubles"))
    assert BOARD.thread is None  # lazy: nothing shown before the action
    assert out.count() == 3000
    wait_board_idle()
    lines = log.getvalue().splitlines()
    assert lines and all(line.startswith("doubles: ") for line in lines), lines
    assert lines[-1].startswith("doubles: 3,000 rows") and "tasks 3/3" in lines[-1], lines[-1]
    assert "budget left 7,000" in lines[-1] and "  30 errors" in lines[-1]  # an error row is one error
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue()


def test_progress_in_a_pseudo_terminal_rewrites_its_line(spark):
    wait_board_idle()
    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w", buffering=1)
    chunks = []
    reader = threading.Thread(target=lambda: _drain(master, chunks), daemon=True)
    reader.start()
    try:
        assert tty.isatty()
        out = aiospark.ordered_wait(spark.range(0, 2000, 1, 2), slow_double, "id LONG, double LONG", capacity=2,
                                    progress=ProgressOptions(stream=tty, interval=0.2, quiet=0.5))
        assert out.count() == 2000
        wait_board_idle()
    finally:
        tty.close()
        reader.join(10)
    text = b"".join(chunks).decode()
    assert "\x1b[K" in text and text.count("rows/s") >= 2, text
    last = re.sub(r"\x1b\[\d*[FK]", "", text).replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("ordered_wait: 2,000 rows") and "tasks 2/2" in last, last


def _drain(fd, chunks):
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            return
        if not data:
            return
        chunks.append(data)


def test_the_cli_progress_block_shows_tasks_of_the_stage(spark):
    log, metrics = io.StringIO(), aiospark.Metrics("enrich")
    out = aiospark.unordered_wait(spark.range(0, 1000, 1, 2), slow_double, "id LONG, double LONG", metrics=metrics)
    with Progress(metrics, log, label="enrich", log_every=0.5):
        assert out.count() == 1000
    last = log.getvalue().splitlines()[-1]
    assert last.startswith("enrich: 1,000 rows") and "tasks 2/2" in last, last


def test_async_udf_progress(spark):
    wait_board_idle()
    log = io.StringIO()

    @aiospark.async_udf("long", progress=ProgressOptions(stream=log, log_every=0.5, quiet=0.5))
    async def triple(x):
        return x * 3

    assert spark.range(0, 500, 1, 2).select(triple("id").alias("t")).where("t % 3 = 0").count() == 500
    wait_board_idle()
    last = log.getvalue().splitlines()[-1]
    assert last.startswith("triple: 500 rows") and "tasks 2/2" in last, last


SHORT_SCRIPT = """
import aiospark
from tests.cli.test_progress import slow_double
spark = aiospark.local_session("local[2]")
out = aiospark.unordered_wait(spark.range(0, 400, 1, 2), slow_double, "id LONG, double LONG", progress=True)
print(out.count())
"""


def test_a_script_that_ends_with_its_job_still_logs_the_last_line(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-c", SHORT_SCRIPT], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "400", done.stderr[-2000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("unordered_wait: ")]
    assert ours and ours[-1].startswith("unordered_wait: 400 rows") and "tasks 2/2" in ours[-1], done.stderr[-2000:]
