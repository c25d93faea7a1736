"""A worker's metrics report that cannot reach the driver: logged with the task's metrics, never
an error of the job (the rows are what the user pays for; metrics only describe them), and never
silent. A report the driver cannot read is refused (400), not taken for an empty one."""
from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from aiospark.budget.signing import sign
from aiospark.core.metrics import OperatorMetrics
from aiospark.spark.endpoint import collector
from aiospark.spark.metrics import PATH, MetricsReporter
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
    address = collector().base + PATH
    for body in (b"not json", json.dumps({"no": "id"}).encode()):
        request = urllib.request.Request(address, data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5)
        assert info.value.code == 400


def _post(address, body, headers):
    request = urllib.request.Request(address, data=body, method="POST", headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:  # the collector answered before reading the body, then closed
        return "closed"


def test_the_collector_accepts_only_signed_readable_reports_of_a_live_metrics():
    from aiospark.spark.endpoint import MAX_REQUEST_BYTES
    from aiospark.spark.metrics import Metrics

    m = Metrics("signed")
    reporter_class, (metrics_id, name, address, secret) = m.__reduce__()
    assert reporter_class is MetricsReporter and secret and secret not in repr(m) and secret not in str(m)
    good = {"id": metrics_id, "task": "1.0.0", "final": True, "rows": 3, "inflight": 0,
            "metrics": OperatorMetrics().to_dict()}
    body = json.dumps(good).encode()
    assert _post(address, body, {}) == 403                                   # not signed
    assert _post(address, body, {"X-Aiospark-Secret": secret}) == 403        # the secret itself, as a bearer
    assert _post(address, body, sign("0" * 32, "POST", "/report", body)) == 403   # another job's
    assert m.tasks == 0
    poisoned = json.dumps({**good, "metrics": {"calls": "many"}}).encode()
    assert _post(address, poisoned, sign(secret, "POST", "/report", poisoned)) == 400   # unreadable: not stored
    assert m.tasks == 0 and m.total.calls == 0
    huge = json.dumps({**good, "pad": "x" * MAX_REQUEST_BYTES}).encode()
    assert _post(address, huge, sign(secret, "POST", "/report", huge)) in (413, "closed")  # never read
    assert m.tasks == 0
    signed = sign(secret, "POST", "/report", body)
    assert _post(address, body, signed) == 204
    assert m.tasks == 1
    assert _post(address, body, signed) == 403                               # captured and sent again


def test_a_reporter_ships_its_secret_and_the_driver_counts_its_report():
    from aiospark.spark.metrics import Metrics

    m = Metrics("shipped")
    reporter = pickle.loads(pickle.dumps(m))
    assert isinstance(reporter, MetricsReporter)
    metrics = OperatorMetrics()
    metrics.calls = 5
    reporter.report("2.0.0", metrics, rows=5, inflight=0, final=True)
    assert m.tasks == 1 and m.total.calls == 5


JOB = r"""
import sys
import aiospark

spark = aiospark.local_session("local[2]", conf={"spark.driver.host": "127.0.0.2",
                                                 "spark.driver.bindAddress": "127.0.0.2"})
from aiospark.spark.endpoint import collector, driver_host

async def f(row):
    return {"id": row["id"]}

m = aiospark.Metrics("driver-host")
rows = aiospark.unordered_wait(spark.range(200, numPartitions=2), f, "id LONG", metrics=m).count()
server = collector(driver_host()).server
print("RESULT", driver_host(), server.server_address[0], m.tasks, m.total.calls, rows, flush=True)
spark.stop()
"""


def test_the_collector_binds_and_advertises_where_spark_says_the_driver_is(tmp_path):
    """spark.driver.host/bindAddress = 127.0.0.2: the collector listens and is reached there, with
    no AIOSPARK_METRICS_HOST (what a multi-host cluster needs)."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k != "AIOSPARK_METRICS_HOST"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    assert line, done.stderr[-3000:]
    assert line[0] == "RESULT ('127.0.0.2', '127.0.0.2') 127.0.0.2 2 200 200", line[0]


def test_the_collector_queues_a_stage_worth_of_reports_arriving_at_once():
    """Every task of a stage may report at the same moment: the kernel must queue their connections
    while the collector is busy, not drop them past a backlog of 5 (socketserver's default), which
    leaves a report waiting for SYN retransmits. Here nothing accepts: 64 connects must still land."""
    import select
    import socket

    from aiospark.spark.endpoint import _CollectorServer, _Handler

    server = _CollectorServer(("127.0.0.1", 0), _Handler)   # listening, never accepting
    clients = []
    try:
        for _ in range(64):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(server.server_address)
            clients.append(client)
        pending, deadline = set(clients), 5.0
        while pending and deadline > 0:  # a dropped SYN never completes while nobody accepts
            _, writable, _ = select.select([], list(pending), [], 0.25)
            pending -= {c for c in writable if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0}
            deadline -= 0.25
        assert not pending, f"{len(pending)} of 64 connections were not queued"
    finally:
        for client in clients:
            client.close()
        server.server_close()
