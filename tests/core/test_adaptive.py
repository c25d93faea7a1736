"""AdaptiveConcurrency (AIMD): validation, the increase/decrease rules, and a simulated service."""
import asyncio
import heapq
import pickle
import time

import pytest

from aiospark.core.adaptive import AdaptiveConcurrency, is_overload
from aiospark.core.errors import AsyncTimeoutError


class FakeClock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


class StatusError(Exception):
    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


class Unavailable(Exception):
    status = 503


# ---------------------------------------------------------------------------------- validation
def test_defaults():
    ac = AdaptiveConcurrency(100)
    assert ac.limit == 8 and ac.max_limit == 100 and ac.min_limit == 1
    assert (ac.backoff, ac.latency_tolerance, ac.smoothing) == (0.5, 2.0, 0.1)
    assert AdaptiveConcurrency(5).limit == 5             # min(max_limit, 8)
    assert AdaptiveConcurrency(50, min_limit=12).limit == 12
    assert AdaptiveConcurrency(50, initial=30).limit == 30
    assert ac.baseline_latency is None


@pytest.mark.parametrize("args,kwargs,exc,match", [
    ((0,), {}, ValueError, "max_limit"),
    ((1.5,), {}, TypeError, "max_limit"),
    ((True,), {}, TypeError, "max_limit"),
    ((10,), {"min_limit": 0}, ValueError, "min_limit"),
    ((10,), {"min_limit": 11}, ValueError, "min_limit"),
    ((10,), {"initial": 11}, ValueError, "initial"),
    ((10,), {"initial": 2, "min_limit": 3}, ValueError, "initial"),
    ((10,), {"initial": 2.0}, TypeError, "initial"),
    ((10,), {"backoff": 1.0}, ValueError, "backoff"),
    ((10,), {"backoff": 0}, ValueError, "backoff"),
    ((10,), {"backoff": "0.5"}, TypeError, "backoff"),
    ((10,), {"latency_tolerance": 1.0}, ValueError, "latency_tolerance"),
    ((10,), {"latency_tolerance": float("inf")}, ValueError, "latency_tolerance"),
    ((10,), {"smoothing": 0}, ValueError, "smoothing"),
    ((10,), {"smoothing": 1.5}, ValueError, "smoothing"),
    ((10,), {"clock": 3}, TypeError, "clock"),
])
def test_validation(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        AdaptiveConcurrency(*args, **kwargs)


def test_bad_latency_is_rejected():
    ac = AdaptiveConcurrency(10)
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="latency"):
            ac.on_success(bad, 8)
        with pytest.raises(ValueError, match="latency"):
            ac.on_overload(bad)


# ---------------------------------------------------------------------------------- is_overload
def test_is_overload():
    assert is_overload(asyncio.TimeoutError())
    assert is_overload(TimeoutError("slow"))
    assert is_overload(AsyncTimeoutError("operator timeout"))
    assert is_overload(StatusError(429)) and is_overload(StatusError(503))
    assert not is_overload(StatusError(500)) and not is_overload(StatusError(404))
    assert not is_overload(ValueError("bad row")) and not is_overload(ConnectionResetError())

    class HttpxLike(Exception):
        status_code = 429

    assert is_overload(HttpxLike())
    assert AdaptiveConcurrency.is_overload(Unavailable())


def test_is_overload_with_the_http_connector_error():
    from aiospark.connectors import ConnectorTimeout, HttpStatusError

    assert is_overload(ConnectorTimeout("took too long", source="x"))
    statuses = {status: is_overload(HttpStatusError(f"HTTP {status}", source="HttpLookup(x)", status=status))
                for status in (429, 503, 500, 404)}
    assert statuses == {429: True, 503: True, 500: False, 404: False}

    class Weird(Exception):
        status = ["503"]  # unhashable: not a status code, and no crash

    assert not is_overload(Weird())


# ---------------------------------------------------------------------------------- rules
def test_additive_increase_is_about_one_per_window():
    ac = AdaptiveConcurrency(1000, initial=10, clock=FakeClock())
    samples = 0
    while ac.limit < 20:
        ac.on_success(0.01, ac.limit)
        samples += 1
    # +1/limit per success: 10 + 11 + ... + 19 = 145 samples for +10
    assert 135 <= samples <= 150


def test_no_increase_when_the_limit_is_not_used():
    ac = AdaptiveConcurrency(100, initial=20, clock=FakeClock())
    for _ in range(1000):
        ac.on_success(0.01, 5)
    assert ac.limit == 20
    for _ in range(100):
        ac.on_success(0.01, 18)  # 90% of the limit: in use
    assert ac.limit > 20


def test_never_above_max_limit():
    ac = AdaptiveConcurrency(12, initial=10, clock=FakeClock())
    for _ in range(10_000):
        ac.on_success(0.001, ac.limit)
        assert ac.limit <= 12
    assert ac.limit == 12


def test_slow_latency_decreases_gently():
    ac = AdaptiveConcurrency(100, initial=40, clock=FakeClock())
    for _ in range(50):
        ac.on_success(0.010, 40)   # establishes the ~10 ms baseline (and grows a bit)
    top = ac.limit
    for _ in range(40):
        ac.on_success(0.035, ac.limit)  # > 2 x baseline: the service is queueing
    assert top - 2 <= ac.limit < top   # about -1 per window: gentle, not a halving
    assert ac.decreases == 0


def test_latency_within_tolerance_is_fine():
    ac = AdaptiveConcurrency(100, initial=20, clock=FakeClock())
    for i in range(400):
        ac.on_success(0.010 if i % 2 else 0.019, ac.limit)  # < 2 x 10 ms
    assert ac.limit > 30


def test_multiplicative_decrease_once_per_round_trip():
    clock = FakeClock(100.0)
    ac = AdaptiveConcurrency(200, initial=64, clock=clock)
    for _ in range(10):
        ac.on_success(0.05, 64)
    limit = ac.limit
    assert ac.on_overload(0.05) is True
    assert ac.limit == limit // 2
    clock.now += 0.01
    # a burst of 503s from calls sent before the cut: ignored
    for _ in range(40):
        assert ac.on_failure(Unavailable(), 0.05) is False
    assert ac.limit == limit // 2 and ac.decreases == 1
    # their successes do not grow the limit either
    for _ in range(40):
        ac.on_success(0.05, ac.limit)
    assert ac.limit == limit // 2
    # a call sent after the cut that is overloaded too: cut again
    clock.now += 0.1
    assert ac.on_failure(Unavailable(), 0.05) is True
    assert ac.limit == limit // 4 and ac.decreases == 2


def test_overload_without_latency_ignored_for_one_round_trip():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(100, initial=40, clock=clock)
    for _ in range(20):
        ac.on_success(0.02, 40)
    start = ac.limit
    assert ac.on_overload() is True
    for _ in range(10):
        assert ac.on_overload() is False     # same instant, same window
    clock.now += 0.005
    assert ac.on_overload() is False         # < one smoothed round trip (~20 ms) later
    clock.now += 0.05
    assert ac.on_overload() is True
    assert ac.limit == (start // 2) // 2


def test_never_below_min_limit():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(100, initial=50, min_limit=3, clock=clock)
    for _ in range(30):
        clock.now += 1.0
        ac.on_overload()
        assert ac.limit >= 3
    assert ac.limit == 3
    for _ in range(500):
        ac.on_success(5.0, ac.limit)   # terribly slow, but the floor holds
        assert ac.limit >= 3


def test_non_overload_errors_change_nothing():
    ac = AdaptiveConcurrency(100, initial=30, clock=FakeClock())
    for exc in (ValueError("x"), StatusError(500), KeyError("k")):
        assert ac.on_failure(exc, 0.01) is False
    assert ac.limit == 30 and ac.decreases == 0


def test_picklable():
    ac = AdaptiveConcurrency(50, initial=20, backoff=0.7)
    ac.on_success(0.01, 20)
    clone = pickle.loads(pickle.dumps(ac))
    assert clone.limit == ac.limit and clone.backoff == 0.7 and clone.max_limit == 50


def test_on_success_is_cheap():
    ac = AdaptiveConcurrency(10_000, initial=100)
    n = 50_000
    best = float("inf")
    for _ in range(3):  # CPU time, best of 3: other processes on the machine do not count
        t0 = time.process_time()
        for _ in range(n):
            ac.on_success(0.010, 100)
        best = min(best, (time.process_time() - t0) / n)
    assert best < 3e-6, f"on_success took {best * 1e6:.2f} µs"


# ---------------------------------------------------------------------------------- simulation
def simulate(ac, clock, *, true_limit=40, base=0.010, duration=30.0, hard=48, grow=1.0,
             slower_at=None, slower=5.0):
    """A service that answers in ~``base`` seconds up to ``true_limit`` concurrent calls; beyond
    that each extra call adds ``grow * base`` of queueing, and beyond ``hard`` it answers 503.
    From ``slower_at`` on, every answer takes ``slower`` times as long (for everyone).
    The client always has more work: it keeps ``ac.limit`` calls in flight. Deterministic."""
    inflight = seq = 0
    heap = []
    trace = []
    peak_service_concurrency = 0
    while clock.now < duration:
        if slower_at is not None and clock.now >= slower_at:
            base, slower_at = base * slower, None
        while inflight < ac.limit:
            n = inflight + 1            # concurrency the service sees, this call included
            seq += 1
            jitter = 1 + 0.1 * ((seq * 7919) % 11) / 10
            if n <= true_limit:
                latency, ok = base * jitter, True
            else:
                latency = base * jitter * (1 + grow * (n - true_limit))
                ok = n <= hard
            inflight += 1
            peak_service_concurrency = max(peak_service_concurrency, inflight)
            heapq.heappush(heap, (clock.now + latency, seq, latency, ok))
        done_at, _, latency, ok = heapq.heappop(heap)
        clock.now = done_at
        before = inflight
        inflight -= 1
        if ok:
            ac.on_success(latency, before)
        else:
            ac.on_failure(Unavailable(), latency)
        assert ac.min_limit <= ac.limit <= ac.max_limit
        trace.append((clock.now, ac.limit))
    return trace, peak_service_concurrency


@pytest.mark.parametrize("hard,grow", [(48, 1.0), (44, 1.0), (48, 0.2), (40, 1.0)])
def test_simulation_converges_near_the_true_limit(hard, grow):
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(200, clock=clock)
    trace, peak = simulate(ac, clock, hard=hard, grow=grow)
    assert peak <= 200
    # it gets there quickly (+1 per ~10 ms round trip from 8) ...
    reached = next(t for t, limit in trace if limit >= 28)
    assert reached < 1.0
    # ... and stays around it: time-averaged limit within +-30% of 40 over the second half
    second = [(t, limit) for t, limit in trace if t >= 15.0]
    weighted = sum((t2 - t1) * l1 for (t1, l1), (t2, _) in zip(second, second[1:]))
    mean = weighted / (second[-1][0] - second[0][0])
    assert 28 <= mean <= 52, mean
    inside = sum(t2 - t1 for (t1, l1), (t2, _) in zip(second, second[1:]) if 28 <= l1 <= 52)
    assert inside / (second[-1][0] - second[0][0]) >= 0.6
    assert max(limit for _, limit in second) <= hard + 2


def test_simulation_with_latency_only_finds_the_knee():
    """Latency grows sharply past 40 and there is no 503 within reach: the latency rule alone
    keeps the limit near 40 (over 10 s)."""
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(200, clock=clock)
    trace, _ = simulate(ac, clock, hard=10_000, grow=1.0, duration=10.0)
    late = [limit for t, limit in trace if t >= 5.0]
    assert min(late) >= 38 and max(late) <= 44
    assert ac.decreases == 0


def test_simulation_respects_a_small_max_limit():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(25, clock=clock)
    trace, peak = simulate(ac, clock, duration=5.0)
    assert peak <= 25 and max(limit for _, limit in trace) == 25
    assert ac.limit == 25  # the service takes 40: the ceiling is what binds


def test_simulation_service_slower_for_everyone_is_relearnt():
    """At t=10 s the service becomes 5x slower for everyone (same knee at 40): the limit dips while
    it finds out that fewer calls do not help, then returns to the knee instead of starving."""
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(200, clock=clock)
    trace, _ = simulate(ac, clock, hard=10_000, grow=1.0, duration=40.0, slower_at=10.0)
    after = [limit for t, limit in trace if t >= 10.0]
    assert min(after) >= 15                                    # no collapse to min_limit
    late = [limit for t, limit in trace if t >= 25.0]
    assert 28 <= min(late) and max(late) <= 52
    assert ac.baseline_latency == pytest.approx(0.05, rel=0.2)  # the new normal


def test_simulation_mixed_service_sawtooth_stays_in_band():
    """Gradual queueing (+3 ms per call past 40) and 503 past 60: latency rule + cuts keep the
    average within +-30% of the knee."""
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(200, clock=clock)
    trace, _ = simulate(ac, clock, hard=60, grow=0.3, duration=30.0)
    second = [limit for t, limit in trace if t >= 15.0]
    assert 28 <= sum(second) / len(second) <= 52
