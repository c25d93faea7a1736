"""The driver's HTTP endpoint (``aiospark.spark.endpoint``), shared by metrics and budgets: a
feature registers a path; a path nobody registered is refused, never taken for a metrics report."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from aiospark.budget.signing import sign
from aiospark.core.metrics import OperatorMetrics
from aiospark.spark import metrics
from aiospark.spark.endpoint import collector, register_endpoint


def _post(url, body, headers):
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_registered_path_is_served_signed_and_an_unknown_path_is_refused():
    seen = []
    register_endpoint("/test-echo", lambda request: (seen.append(request) or 200, {"echo": request["x"]}),
                      lambda request: "k" * 32 if request["id"] == "live" else None)
    base = collector().base
    body = json.dumps({"id": "live", "x": 7}).encode()
    assert _post(base + "/test-echo", body, sign("k" * 32, "POST", "/test-echo", body)) == (200, b'{"echo": 7}')
    assert _post(base + "/test-echo", body, sign("0" * 32, "POST", "/test-echo", body))[0] == 403
    other = json.dumps({"id": "gone", "x": 1}).encode()
    assert _post(base + "/test-echo", other, sign("k" * 32, "POST", "/test-echo", other))[0] == 403
    assert len(seen) == 1
    # a live Metrics' signed report sent to a path nobody serves: refused, not stored as a report
    m = metrics.Metrics("endpoint")
    _, (metrics_id, _, address, secret) = m.__reduce__()
    report = json.dumps({"id": metrics_id, "task": "1.0.0", "final": True, "rows": 1, "inflight": 0,
                         "metrics": OperatorMetrics().to_dict()}).encode()
    assert _post(base + "/elsewhere", report, sign(secret, "POST", "/elsewhere", report))[0] == 404
    assert m.tasks == 0
    assert address == base + metrics.PATH
    assert _post(address, report, sign(secret, "POST", metrics.PATH, report))[0] == 204 and m.tasks == 1
