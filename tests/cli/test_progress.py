"""The CLI progress line: in place on a terminal, one summary line otherwise."""
from __future__ import annotations

import io
import time

from aiospark.progress import Progress


class FakeMetrics:
    def __init__(self):
        self.rows = 0

    def progress(self):
        return {"rows": self.rows, "inflight": 7, "errors": 2, "running": 1, "finished": 0}


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


def test_not_a_terminal_prints_one_summary():
    stream, metrics = io.StringIO(), FakeMetrics()
    metrics.rows = 1234
    with Progress(metrics, stream, interval=0.01):
        time.sleep(0.05)
    assert stream.getvalue().count("\n") == 1 and "\r" not in stream.getvalue()
    assert "1,234 rows" in stream.getvalue()
