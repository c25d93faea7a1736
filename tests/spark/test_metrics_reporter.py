"""A worker's metrics report that cannot reach the driver: logged with the task's metrics, never
an error of the job (the rows are what the user pays for; metrics only describe them), and never
silent. A report the driver cannot read is refused (400), not taken for an empty one."""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

import pytest

from aiospark.core.metrics import OperatorMetrics
from aiospark.spark.metrics import MetricsReporter, collector
from tests.connectors._support import dead_port


def test_a_report_that_cannot_reach_the_driver_is_logged_with_its_metrics(caplog):
    reporter = MetricsReporter("job-1", "fetch", f"http://127.0.0.1:{dead_port()}/report")
    metrics = OperatorMetrics()
    metrics.record_latency(0.01)
    with caplog.at_level(logging.WARNING, logger="aiospark.spark.metrics"):
        reporter.report("3.1.0", metrics, rows=7, inflight=2, final=False)
        reporter.report("3.1.0", metrics, rows=8, inflight=1, final=False)  # not tried again
        reporter.report("3.1.0", metrics, rows=9, inflight=0, final=True)   # the final one is
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert all("could not report metrics of task 3.1.0" in w and str(metrics) in w for w in warnings)


def test_the_collector_refuses_a_report_it_cannot_read():
    address = collector().address
    for body in (b"not json", json.dumps({"no": "id"}).encode()):
        request = urllib.request.Request(address, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5)
        assert info.value.code == 400
