"""OperatorMetrics: counters, the log-bucket latency histogram, merge and JSON round trips."""
import json
import math
import pickle
import random
import re

import pytest

from aiospark.core.metrics import HISTOGRAM_FACTOR, HISTOGRAM_MIN, OperatorMetrics


def exact_quantile(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


MU = math.log(0.02)  # lognormal latencies around 20 ms


def filled(seed, n=5000, mu=MU, sigma=1.0):
    rng = random.Random(seed)
    values = [rng.lognormvariate(mu, sigma) for _ in range(n)]
    m = OperatorMetrics()
    for v in values:
        m.record_latency(v)
    return m, values


def test_starts_empty():
    m = OperatorMetrics()
    assert (m.calls, m.successes, m.retries, m.timeouts, m.failures, m.error_rows,
            m.rate_limited, m.inflight_peak) == (0,) * 8
    assert m.latency_count == 0 and m.quantile(0.5) is None and m.latency_mean is None
    s = m.summary()
    assert s["p50_ms"] is None and s["p99_ms"] is None and s["calls"] == 0
    assert str(m) == ("calls=0 ok=0 retries=0 timeouts=0 failed=0 error_rows=0 inflight_peak=0 "
                      "p50=n/a p95=n/a p99=n/a")


def test_counters_by_method_and_by_attribute():
    m = OperatorMetrics()
    for _ in range(3):
        m.record_call()
    m.calls += 2
    m.record_success()
    m.record_success(0.004)
    m.record_retry()
    m.record_timeout()
    m.record_failure()
    m.record_error_row()
    m.record_rate_limited()
    m.rate_limited += 1
    for n in (3, 9, 4):
        m.record_inflight(n)
    assert (m.calls, m.successes, m.retries, m.timeouts, m.failures, m.error_rows,
            m.rate_limited, m.inflight_peak) == (5, 2, 1, 1, 1, 1, 2, 9)
    assert m.latency_count == 1
    with pytest.raises(AttributeError):
        m.typo_counter = 1  # slots: a misspelt counter is an error, not a silent new attribute


@pytest.mark.parametrize("seed,mu,sigma", [(1, math.log(0.02), 1.0), (2, math.log(0.0005), 2.0),
                                           (3, math.log(2.0), 0.5), (4, math.log(30.0), 1.5)])
def test_quantiles_within_five_percent(seed, mu, sigma):
    m, values = filled(seed, 20000, mu, sigma)
    values = [v for v in values if HISTOGRAM_MIN <= v <= 600]
    m = OperatorMetrics()
    for v in values:
        m.record_latency(v)
    for q in (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999):
        est, exact = m.quantile(q), exact_quantile(values, q)
        assert abs(est - exact) / exact <= 0.05, (q, est, exact)
    assert m.quantile(0) == min(values) and m.quantile(1) == max(values)
    assert m.latency_mean == pytest.approx(sum(values) / len(values))


def test_every_bucket_boundary_region_within_five_percent():
    # values spread over the whole range, a few per bucket, including exact boundaries
    values = []
    k = 0
    while HISTOGRAM_MIN * HISTOGRAM_FACTOR ** k < 600:
        base = HISTOGRAM_MIN * HISTOGRAM_FACTOR ** k
        values += [base, base * 1.0001, base * 1.05, base * 1.0999]
        k += 1
    for v in values:
        m = OperatorMetrics()
        m.record_latency(v * 0.5 if v > 1e-4 else v)  # keep min/max clamping out of the way:
        m.record_latency(v)
        m.record_latency(v * 2)
        est = m.quantile(0.5)
        assert abs(est - v) / v <= 0.05, (v, est)


def test_out_of_range_latencies():
    m = OperatorMetrics()
    m.record_latency(0.0)
    m.record_latency(2e-6)
    m.record_latency(5000.0)  # beyond the last bucket
    assert m.latency_count == 3
    assert m.quantile(0.5) == pytest.approx(HISTOGRAM_MIN)   # underflow bucket
    assert m.quantile(0.99) == 5000.0                       # overflow: the exact max
    assert m.quantile(0.0) == 0.0
    for bad in (-0.001, float("nan")):
        with pytest.raises(ValueError, match="latency"):
            m.record_latency(bad)
    assert m.latency_count == 3
    for q in (-0.1, 1.5, "0.5", None, True):
        with pytest.raises(ValueError, match="between 0 and 1"):
            m.quantile(q)


def test_summary_and_str():
    m = OperatorMetrics()
    m.calls, m.successes, m.retries, m.timeouts = 12, 9, 2, 1
    m.failures, m.error_rows, m.rate_limited, m.inflight_peak = 1, 1, 4, 7
    for v in [0.010] * 50 + [0.050] * 45 + [0.400] * 5:
        m.record_latency(v)
    s = m.summary()
    assert s["calls"] == 12 and s["successes"] == 9 and s["rate_limited"] == 4 and s["inflight_peak"] == 7
    assert s["latency_count"] == 100
    assert s["p50_ms"] == pytest.approx(10, rel=0.05)
    assert s["p95_ms"] == pytest.approx(50, rel=0.05)
    assert s["p99_ms"] == pytest.approx(400, rel=0.05)
    assert s["max_ms"] == pytest.approx(400) and s["mean_ms"] == pytest.approx(47.5)
    json.dumps(s)
    text = str(m)
    assert re.fullmatch(r"calls=12 ok=9 retries=2 timeouts=1 failed=1 error_rows=1 inflight_peak=7 "
                        r"p50=\d+(\.\d+)?ms p95=\d+(\.\d+)?ms p99=\d+(\.\d+)?ms", text), text
    p50 = float(re.search(r"p50=([\d.]+)ms", text).group(1))
    assert p50 == pytest.approx(10, rel=0.05)


def test_merge_sums_counters_maxes_peaks_and_merges_histograms():
    parts = []
    everything = []
    rng = random.Random(7)
    for i in range(4):
        m = OperatorMetrics()
        m.calls, m.successes, m.retries, m.timeouts = 10 + i, 8 + i, i, 1
        m.failures, m.error_rows, m.rate_limited = i % 2, 1, 2 * i
        m.record_inflight(5 * (i + 1) if i != 2 else 99)
        values = [rng.lognormvariate(math.log(0.01 * (i + 1)), 0.7) for _ in range(2000)]
        for v in values:
            m.record_latency(v)
        everything += values
        parts.append(m)
    job = OperatorMetrics()
    for p in parts:
        assert job.merge(p) is job
    assert job.calls == sum(p.calls for p in parts) == 46
    assert job.successes == 38 and job.retries == 6 and job.timeouts == 4
    assert job.failures == 2 and job.error_rows == 4 and job.rate_limited == 12
    assert job.inflight_peak == 99
    assert job.latency_count == 8000
    direct = OperatorMetrics()
    for v in everything:
        direct.record_latency(v)
    for q in (0.5, 0.95, 0.99):
        assert job.quantile(q) == direct.quantile(q)
        exact = exact_quantile(everything, q)
        assert abs(job.quantile(q) - exact) / exact <= 0.05
    assert job.latency_min == min(everything) and job.latency_max == max(everything)
    assert OperatorMetrics.merged(parts) == job
    with pytest.raises(TypeError):
        job.merge({"calls": 1})


def test_merge_with_empty_keeps_latency_state():
    m, _ = filled(3, 100)
    before = m.to_dict()
    m.merge(OperatorMetrics())
    assert m.to_dict() == before
    empty = OperatorMetrics().merge(m)
    assert empty == m and empty.latency_min == m.latency_min


def test_to_dict_from_dict_round_trip_through_json():
    m, _ = filled(11, 3000)
    m.calls, m.successes, m.retries, m.rate_limited, m.inflight_peak = 3010, 2990, 10, 17, 64
    wire = json.dumps(m.to_dict())
    back = OperatorMetrics.from_dict(json.loads(wire))
    assert back == m
    assert str(back) == str(m)
    for q in (0.5, 0.9, 0.99):
        assert back.quantile(q) == m.quantile(q)
    assert len(wire) < 8000  # sparse: only occupied buckets travel
    empty = OperatorMetrics.from_dict(json.loads(json.dumps(OperatorMetrics().to_dict())))
    assert empty == OperatorMetrics() and empty.quantile(0.5) is None


def test_from_dict_rejects_garbage():
    good = filled(5, 50)[0].to_dict()
    with pytest.raises(TypeError):
        OperatorMetrics.from_dict([1, 2])
    with pytest.raises(ValueError, match="version"):
        OperatorMetrics.from_dict({**good, "version": 99})
    with pytest.raises(ValueError, match="calls"):
        OperatorMetrics.from_dict({**good, "calls": -1})
    with pytest.raises(ValueError):
        OperatorMetrics.from_dict({k: v for k, v in good.items() if k != "successes"})
    bad_layout = json.loads(json.dumps(good))
    bad_layout["latency"]["factor"] = 1.2
    with pytest.raises(ValueError, match="layout"):
        OperatorMetrics.from_dict(bad_layout)
    bad_count = json.loads(json.dumps(good))
    bad_count["latency"]["count"] += 1
    with pytest.raises(ValueError, match="add up"):
        OperatorMetrics.from_dict(bad_count)
    bad_bucket = json.loads(json.dumps(good))
    bad_bucket["latency"]["counts"].append([10_000, 1])
    with pytest.raises(ValueError, match="bucket"):
        OperatorMetrics.from_dict(bad_bucket)


def test_pickle_and_copy():
    m, _ = filled(9, 500)
    m.calls = 500
    assert pickle.loads(pickle.dumps(m)) == m
    c = m.copy()
    assert c == m and c is not m
    c.calls += 1
    assert c != m


def test_record_latencies_in_bulk_equals_one_by_one():
    rng = random.Random(7)
    values = [rng.lognormvariate(math.log(0.02), 1.5) for _ in range(3000)]
    values += [0.0, 2e-6, HISTOGRAM_MIN, HISTOGRAM_MIN * HISTOGRAM_FACTOR ** 5, 5000.0]
    one, bulk = OperatorMetrics(), OperatorMetrics()
    for v in values:
        one.record_latency(v)
    bulk.record_latencies(values[:1000])
    bulk.record_latencies([])
    bulk.record_latencies(values[1000:])
    assert bulk.to_dict()["latency"]["counts"] == one.to_dict()["latency"]["counts"]
    assert bulk.latency_count == one.latency_count == len(values)
    assert bulk.latency_min == 0.0 and bulk.latency_max == 5000.0
    assert bulk.latency_mean == pytest.approx(one.latency_mean)


def test_record_latencies_refuses_negative_and_nan_and_records_nothing():
    m = OperatorMetrics()
    for bad in ([0.1, -0.001], [float("nan"), 0.2], [0.2, float("nan")]):
        with pytest.raises(ValueError, match="latencies"):
            m.record_latencies(bad)
    assert m.latency_count == 0


def test_record_latencies_in_one_bucket_and_on_bucket_bounds():
    bound = HISTOGRAM_MIN * HISTOGRAM_FACTOR ** 7
    cases = ([1e-6] * 300, [bound] * 50, [bound, bound, 0.5 * bound, 2 * bound], [3e-6, 0.02, 0.02, 700.0, 1e9])
    for values in cases:
        one, bulk = OperatorMetrics(), OperatorMetrics()
        for v in values:
            one.record_latency(v)
        bulk.record_latencies(list(values))
        assert bulk.to_dict()["latency"]["counts"] == one.to_dict()["latency"]["counts"], values


def test_pending_latencies_count_for_every_reader_before_they_are_folded():
    # what the operator's calls do: append, and fold 1,024 at a time (the rest stays pending)
    rng = random.Random(7)
    values = [rng.lognormvariate(-4, 1) for _ in range(1500)]
    pending, direct = OperatorMetrics(), OperatorMetrics()
    pending.pending_latencies.extend(values)
    for v in values:
        direct.record_latency(v)
    assert pending.latency_count == 1500
    for q in (0.0, 0.5, 0.99, 1.0):
        assert pending.quantile(q) == direct.quantile(q)
    assert _same(pending.to_dict(), direct.to_dict()) and str(pending) == str(direct)
    assert pending.latency_mean == pytest.approx(direct.latency_mean)
    assert (pending.latency_min, pending.latency_max) == (direct.latency_min, direct.latency_max)
    assert _same(OperatorMetrics().merge(pending).to_dict(), direct.to_dict())
    assert _same(pickle.loads(pickle.dumps(pending)).to_dict(), direct.to_dict())
    assert len(pending.pending_latencies) == 1500  # a reader never folds (it may be on another thread)
    pending.fold_latencies()
    assert pending.pending_latencies == [] and _same(pending.to_dict(), direct.to_dict())


def _same(a: dict, b: dict) -> bool:
    """Equal metrics dicts; the latency sum only up to float rounding (summed in another order)."""
    sum_a, sum_b = a["latency"].pop("sum"), b["latency"].pop("sum")
    return a == b and sum_a == pytest.approx(sum_b)


def test_to_dict_counts_the_buckets_it_sends():
    m = OperatorMetrics()
    m.record_latency(0.01)
    m._count += 1  # what a reader on another thread could see between a bucket's and the count's update
    data = m.to_dict()
    assert data["latency"]["count"] == 1
    assert OperatorMetrics.from_dict(data).latency_count == 1


def test_the_operators_calls_note_latencies_and_fold_them_in_bulk():
    import asyncio

    from aiospark.core import AsyncWaitOperator
    from aiospark.core.calls import FOLD_LATENCIES

    async def main():
        async def f(x):
            await asyncio.sleep(0)
            return x

        out = []
        op = AsyncWaitOperator(f, out.append, capacity=50, timeout=10)
        await op.open()
        for i in range(FOLD_LATENCIES + 100):
            await op.process_element(i)
        await op.finish()
        await op.close()
        m = op.metrics
        assert len(out) == FOLD_LATENCIES + 100
        assert m.latency_count == FOLD_LATENCIES + 100 == m.calls == m.successes
        assert 0 < len(m.pending_latencies) < FOLD_LATENCIES  # folded once, the rest still pending
        assert m.to_dict()["latency"]["count"] == FOLD_LATENCIES + 100

    asyncio.run(main())
