"""AdaptiveConcurrency: validation, the per-window rules, and simulated services (no wall clock).

The simulations are deterministic discrete-event runs: tasks, each with its own limiter, share one
service that serves ``capacity`` calls at once and either rejects (429) or queues the rest; the
limiters read a fake clock, so what is asserted is the algorithm, not this machine's speed."""
import asyncio
import heapq
import pickle
import random
import statistics
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
    assert (ac.backoff, ac.latency_tolerance, ac.smoothing) == (0.9, 1.4, 0.2)
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
    ((10,), {"slow_start": "yes"}, TypeError, "slow_start"),
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
class Overloaded(Exception):
    status = 429


def window(ac, clock, latency, inflight, samples=8):
    """One round trip's answers: ``samples`` calls that started now finish ``latency`` later.
    Repeats until the limiter closes a window; returns the new limit."""
    closed = ac.windows
    for _ in range(100):
        clock.now += latency
        for _ in range(samples):
            ac.on_success(latency, inflight)
        if ac.windows > closed:
            return ac.limit
    raise AssertionError("no window closed")


def spread_window(ac, clock, latency, inflight):
    """One round trip at ``inflight`` calls, answers spread evenly over it (as a service serving
    them all at once answers): repeats until the limiter closes a window; returns the new limit."""
    closed = ac.windows
    for _ in range(100 * inflight):
        clock.now += latency / inflight
        ac.on_success(latency, inflight)
        if ac.windows > closed:
            return ac.limit
    raise AssertionError("no window closed")


def settled(initial=40, **kwargs):
    """A limiter past slow start with a 20 ms baseline."""
    clock = FakeClock(100.0)
    ac = AdaptiveConcurrency(400, initial=initial, slow_start=False, clock=clock, **kwargs)
    window(ac, clock, 0.020, initial)
    return ac, clock


def test_the_limit_changes_once_per_window_not_per_call():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(100, initial=16, slow_start=False, clock=clock)
    clock.now = 0.02
    for _ in range(7):
        ac.on_success(0.02, 16)
    assert ac.limit == 16 and ac.windows == 0          # a window needs 8 answers
    ac.on_success(0.02, 16)
    assert ac.windows == 1 and ac._limit == pytest.approx(16 + 0.2 * 4)
    # answers from calls sent before that update report on the old limit: ignored
    clock.now += 0.01
    for _ in range(50):
        ac.on_success(0.02, 16)
    assert ac.windows == 1


def test_slow_start_doubles_per_round_trip_until_congestion():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, clock=clock)
    assert ac.limit == 8
    for inflight in (8, 16, 32):                        # everything in flight was served: x2
        spread_window(ac, clock, 0.02, inflight)
        assert ac._limit == pytest.approx(2 * inflight, rel=0.02)
    spread_window(ac, clock, 0.06, ac.limit)            # 3x the baseline: the service queues
    assert ac._limit == pytest.approx(32, rel=0.02)     # back to what was served before
    assert window(ac, clock, 0.06, 32) < 32            # past slow start: gentle decrease
    assert window(ac, clock, 0.06, 32) >= 32 * 0.8


def test_slow_start_grows_by_what_the_service_served_not_by_the_limit():
    """A client that keeps 32 calls "in flight" (retries sleeping in back-off, calls its busy event
    loop has not sent yet) while the service answers only 8 per round trip: slow start grows from
    what was served, not from the limit."""
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, initial=32, clock=clock)
    spread_window(ac, clock, 0.02, 32)                  # first window: all 32 served -> 64
    assert ac.limit == 64
    # now 64 in flight, but only 8 answers per 20 ms round trip
    closed = ac.windows
    while ac.windows == closed:
        clock.now += 0.02 / 8
        ac.on_success(0.02, 64)
    assert ac.limit <= 2 * 10                          # ~ twice the 8 served, not 128


def test_slow_start_exit_drops_to_what_was_served_when_things_were_good():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, initial=16, clock=clock)
    spread_window(ac, clock, 0.02, 16)
    assert ac.limit == 32 and ac._good == 16
    clock.now += 0.001
    assert ac.on_failure(Overloaded(), 0.001) is True
    assert ac.limit == 16                              # not half of an overshoot
    # served less than half the limit in the last good window: drop to that
    ac = AdaptiveConcurrency(400, initial=16, clock=clock)
    spread_window(ac, clock, 0.02, 16)
    ac._good = 10.0
    clock.now += 0.001
    ac.on_failure(Overloaded(), 0.001)
    assert ac.limit == 10


def test_slow_start_never_doubles_past_what_was_in_flight():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, initial=20, clock=clock)
    assert window(ac, clock, 0.02, 12) == 24          # 12 in flight (>= half of 20): 2 x 12


def test_slow_start_ends_with_the_first_overload():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, initial=64, clock=clock)
    window(ac, clock, 0.02, 64)
    assert ac.limit == 128
    assert ac.on_failure(Overloaded(), 0.001) is True
    assert ac.limit == 64                              # halved once ...
    clock.now += 0.1
    assert ac.on_failure(Overloaded(), 0.001) is True
    assert ac.limit == int(64 * 0.9)                   # ... then backoff (0.9) per event


def test_growth_is_the_queue_allowance_per_window():
    ac, clock = settled(16)
    before = ac._limit
    window(ac, clock, 0.020, 16)
    assert ac._limit == pytest.approx(before + 0.2 * before ** 0.5)


def test_no_growth_when_the_limit_is_not_used():
    ac, clock = settled(40)
    top = ac._limit
    for _ in range(20):
        window(ac, clock, 0.020, 10)                   # the application sends 10: no news
    assert ac._limit == top
    window(ac, clock, 0.020, 30)
    assert ac._limit > top


def test_never_above_max_limit():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(12, initial=10, clock=clock)
    for _ in range(200):
        window(ac, clock, 0.001, ac.limit)
        assert ac.limit <= 12
    assert ac.limit == 12


def test_a_burst_of_rejections_is_one_cut_not_a_collapse():
    ac, clock = settled(40)
    start = ac._limit
    clock.now += 0.005
    # 300 calls rejected at once (a 429 takes ~1 ms): one congestion event, one cut
    cuts = sum(ac.on_failure(Overloaded(), 0.001) for _ in range(300))
    assert cuts == 1 and ac.decreases == 1
    assert ac._limit == pytest.approx(start * 0.9)
    # retries sent within one round trip of the cut still met the calls sent before it: same event
    for _step in range(18):
        clock.now += 0.001
        assert ac.on_failure(Overloaded(), 0.001) is False
    assert ac._limit == pytest.approx(start * 0.9)
    # rejected again a round trip later: the cut was not enough, cut again (once)
    clock.now += 0.01
    assert sum(ac.on_failure(Overloaded(), 0.001) for _ in range(100)) == 1
    assert ac._limit == pytest.approx(start * 0.81)


def test_timeouts_of_calls_sent_before_the_cut_are_the_same_event():
    ac, clock = settled(40)
    clock.now += 5.0
    assert ac.on_overload(5.0) is True                  # what the operator reports on a timeout
    clock.now += 0.5
    assert [ac.on_overload(5.0) for _ in range(50)] == [False] * 50
    assert ac.decreases == 1


def test_overload_without_latency_is_ignored_for_a_round_trip():
    ac, clock = settled(40)
    assert ac.on_overload() is True
    assert ac.on_overload() is False
    clock.now += 0.01
    assert ac.on_overload() is False
    clock.now += 0.05
    assert ac.on_overload() is True and ac.decreases == 2


def test_small_limits_still_decrease_and_stop_at_min_limit():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(100, initial=5, min_limit=3, slow_start=False, clock=clock)
    for _ in range(10):
        clock.now += 1.0
        ac.on_overload(0.001)
        assert ac.limit >= 3
    assert ac.limit == 3
    for _ in range(50):
        window(ac, clock, 5.0, ac.limit)                # terribly slow: the floor holds
        assert ac.limit >= 3


def test_non_overload_errors_change_nothing():
    ac, clock = settled(30)
    limit = ac._limit
    for exc in (ValueError("x"), StatusError(500), KeyError("k")):
        assert ac.on_failure(exc, 0.01) is False
    assert ac._limit == limit and ac.decreases == 0


def test_queueing_shrinks_gently_towards_a_bounded_queue():
    ac, clock = settled(60)
    limits = [window(ac, clock, 0.060, ac.limit) for _ in range(5)]   # 3x the baseline
    assert all(b < a for a, b in zip([60] + limits, limits))
    assert limits[0] >= 60 * 0.85                        # gentle: never a halving per window
    # up to 1.4 x the baseline is no queueing: it grows; well beyond, it shrinks; in between the
    # gradient meets the queue allowance (gradient = 1 - 1/sqrt(limit)): a bounded queue
    for latency, grows in ((0.027, True), (0.045, False)):
        ac, clock = settled(40)
        before = ac._limit
        window(ac, clock, latency, 40)
        assert (ac._limit > before) is grows, latency


def test_picklable():
    ac = AdaptiveConcurrency(50, initial=20, backoff=0.7)
    ac.on_success(0.01, 20)
    clone = pickle.loads(pickle.dumps(ac))
    assert clone.limit == ac.limit and clone.backoff == 0.7 and clone.max_limit == 50


# ---------------------------------------------------------------------------------- simulation
def simulate(mode, *, tasks=2, capacity=40, base=0.020, duration=10.0, seed=1, noise=0.0,
             capacity_at=None, slower_at=None, slower=5.0, fixed=None, max_limit=400, late=0.0):
    """``tasks`` clients, each with its own AdaptiveConcurrency(max_limit) (or a ``fixed`` limit)
    and endless input, share a service that serves ``capacity`` calls at once in ``base`` (+-10 %)
    seconds and, beyond that, answers 429 at once (``mode="reject"``) or queues first come, first
    served (``mode="queue"``). A rejected call is retried with exponential back-off (10 ms x 2^k,
    +-30 %) and counts as in flight meanwhile, as in the operator. ``noise`` adds up to
    ``noise * base`` of client-side delay to each measured latency (a busy CPU);
    ``capacity_at(t)`` changes the service's capacity; from ``slower_at`` every call takes
    ``slower`` times as long; the last task starts ``late`` seconds after the others. Returns throughput as a fraction of capacity, the rejected fraction
    of requests, the service's median response time and each task's limit over time."""
    rng = random.Random(seed)
    clock = FakeClock(0.0)
    limiters = [AdaptiveConcurrency(max_limit, clock=clock) for _ in range(tasks)]
    inflight = [0] * tasks
    events, queue, responses = [], [], []
    trace = [[] for _ in range(tasks)]
    counts = {"seq": 0, "serving": 0, "done": 0, "requests": 0, "rejected": 0, "head": 0}

    def limit_of(i):
        return fixed or limiters[i].limit

    def push(t, kind, i, data):
        counts["seq"] += 1
        heapq.heappush(events, (t, counts["seq"], kind, i, data))

    def service_time():
        b = base * (slower if slower_at is not None and clock.now >= slower_at else 1.0)
        return b * (0.9 + 0.2 * rng.random())

    def send(i, attempt):
        counts["requests"] += 1
        cap = capacity_at(clock.now) if capacity_at else capacity
        if counts["serving"] < cap:
            counts["serving"] += 1
            push(clock.now + service_time(), "served", i, clock.now)
        elif mode == "reject":
            counts["rejected"] += 1
            push(clock.now + 0.0005, "rejected", i, (attempt, clock.now))
        else:
            queue.append((i, clock.now))

    def fill(i):
        if i == tasks - 1 and clock.now < late:
            return
        while inflight[i] < limit_of(i):
            inflight[i] += 1
            send(i, 0)

    for i in range(tasks):
        fill(i)
    push(late, "start", tasks - 1, None)
    next_trace = 0.0
    while clock.now < duration:
        t, _, kind, i, data = heapq.heappop(events)
        clock.now = t
        if kind == "served":
            counts["serving"] -= 1
            responses.append(clock.now - data)
            counts["done"] += 1
            if not fixed:
                limiters[i].on_success(clock.now - data + noise * base * rng.random(), inflight[i])
            inflight[i] -= 1
            cap = capacity_at(clock.now) if capacity_at else capacity
            while counts["head"] < len(queue) and counts["serving"] < cap:
                j, arrived = queue[counts["head"]]
                counts["head"] += 1
                counts["serving"] += 1
                push(clock.now + service_time(), "served", j, arrived)
            fill(i)
        elif kind == "start":
            fill(i)
        elif kind == "rejected":
            attempt, sent = data
            if not fixed:
                limiters[i].on_failure(Overloaded(), clock.now - sent)
            delay = min(1.0, 0.01 * 2 ** attempt) * (0.7 + 0.6 * rng.random())
            push(clock.now + delay, "retry", i, attempt + 1)
            fill(i)
        else:
            send(i, data)
        for k in range(tasks):
            assert limit_of(k) >= 1 and limit_of(k) <= max_limit
        if clock.now >= next_trace:
            for k in range(tasks):  # the working limit: a baseline probe's brief dip aside
                trace[k].append((clock.now, fixed or int(limiters[k]._probe_saved) or limiters[k].limit,
                                 limit_of(k)))
            next_trace += 0.01
    return {"fraction": counts["done"] / clock.now / (capacity / base),
            "rejected": counts["rejected"] / counts["requests"],
            "p50": statistics.median(responses), "trace": trace, "limiters": limiters}


def total_limit(trace, start, end=float("inf")):
    """The sum of the tasks' limits at each sample time in [start, end)."""
    return [sum(points[n][1] for points in trace) for n, (t, *_) in enumerate(trace[0]) if start <= t < end]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_two_tasks_against_a_service_that_rejects_beyond_its_limit(seed, noise):
    run = simulate("reject", seed=seed, noise=noise)
    assert run["fraction"] >= 0.90 and run["rejected"] <= 0.02, (run["fraction"], run["rejected"])
    late = total_limit(run["trace"], 2.0)
    assert 32 <= min(late) and max(late) <= 48        # around the service's 40, no collapse
    assert all(ac.limit >= 5 for ac in run["limiters"])  # neither task starves


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_two_tasks_against_a_service_that_queues_beyond_its_limit(seed, noise):
    run = simulate("queue", seed=seed, noise=noise)
    assert run["fraction"] >= 0.95
    assert run["p50"] <= 2 * 0.020, run["p50"]         # a bounded queue, not 400 calls deep
    late = total_limit(run["trace"], 2.0)
    assert 40 <= min(late) and max(late) <= 90


def test_fixed_400_for_comparison():
    rejecting = simulate("reject", fixed=400, duration=3.0)
    queueing = simulate("queue", fixed=400, duration=3.0)
    assert rejecting["rejected"] > 0.3                  # what adaptive avoids
    assert queueing["p50"] > 0.3                        # 800 calls queued for 40 slots


def test_follows_a_service_that_shrinks_and_recovers():
    """Capacity 40, then 15 from 5 s to 10 s, then 40 again: the limits follow it down (no
    lasting rejection storm) and come back up (no collapse that stays down)."""
    run = simulate("reject", duration=20.0, capacity_at=lambda t: 15 if 5.0 <= t < 10.0 else 40)
    shrunk = total_limit(run["trace"], 7.0, 10.0)
    assert 10 <= min(shrunk) and max(shrunk) <= 20
    recovered = total_limit(run["trace"], 15.0)
    assert min(recovered) >= 32 and max(recovered) <= 48
    assert run["rejected"] <= 0.03


def test_a_service_slower_for_everyone_is_relearnt_not_starved():
    """At 5 s every call takes 5x as long (same 40 slots): the limits dip while they find that
    fewer calls do not help, re-learn the baseline, and keep the service busy."""
    run = simulate("queue", duration=25.0, slower_at=5.0)
    after = total_limit(run["trace"], 5.0)
    assert min(after) >= 10                             # no collapse to min_limit
    late = total_limit(run["trace"], 15.0)
    assert min(late) >= 40                              # the service is kept busy again
    assert all(ac.baseline_latency >= 0.05 for ac in run["limiters"])


def test_a_small_max_limit_binds():
    run = simulate("queue", tasks=1, max_limit=25, duration=3.0)
    assert run["limiters"][0].limit == 25               # the service takes 40: the ceiling binds
    assert max(total_limit(run["trace"], 0.0)) == 25


def test_at_min_limit_a_slower_service_is_relearnt():
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(100, initial=10, min_limit=10, slow_start=False, clock=clock)
    window(ac, clock, 0.020, 10)
    for _ in range(3):
        window(ac, clock, 0.200, 10)                    # 10x slower, and we may not send less
    assert ac.baseline_latency == pytest.approx(0.200 / 1.4)
    before = ac._limit
    window(ac, clock, 0.200, 10)
    assert ac._limit > before                           # growing again, not stuck at the floor


def test_the_delay_rule_alone_never_starves_a_task():
    """Answers stuck at 3x the baseline whatever we send: the limit shrinks, finds that sending
    less does not help, re-learns the baseline -- and below 4 calls the queue allowance
    (sqrt(limit)) outweighs the largest gradient cut (half) anyway. Only overloads go lower."""
    ac, clock = settled(40)
    for _ in range(200):
        window(ac, clock, 0.020 * 3, ac.limit)
    assert ac.limit >= 3


def test_after_a_cut_it_probes_gently_near_the_rejected_level_only():
    ac, clock = settled(40)
    clock.now += 0.01
    assert ac.on_failure(Overloaded(), 0.001) is True
    level = ac._limit
    window(ac, clock, 0.020, ac.limit)
    assert ac._limit == pytest.approx(level + 0.2)     # just below where it was rejected: +0.2
    for _ in range(6):
        window(ac, clock, 0.060, ac.limit)               # then latency made it shrink far below
    low = ac._limit
    assert low < 0.8 * 40
    window(ac, clock, 0.020, ac.limit)
    assert ac._limit == pytest.approx(low + 0.2 * low ** 0.5)  # far below: the normal pace


def test_a_late_task_in_reject_mode_shares_without_rejection_storms():
    run = simulate("reject", late=1.0)
    assert run["fraction"] >= 0.90 and run["rejected"] <= 0.02
    assert 32 <= min(total_limit(run["trace"], 3.0)) and max(total_limit(run["trace"], 3.0)) <= 48


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_a_late_task_in_queue_mode_keeps_the_queue_short(seed, noise):
    """The second task starts 1 s late, while the service already queues for the first: it learns
    a too-high baseline (and the first re-learns to match) until the first baseline probe (5 s),
    where both drain together, see the unloaded service and go back to a short queue."""
    run = simulate("queue", late=1.0, seed=seed, noise=noise, duration=20.0)
    assert run["p50"] <= 2 * 0.020, run["p50"]
    assert run["fraction"] >= 0.95
    # both know the unloaded round trip (client-side noise adds up to 0.5 x 20 ms to every latency)
    assert all(0.018 <= ac.baseline_latency <= 0.020 * (1.0 + noise / 2 + 0.1) for ac in run["limiters"])
    assert all(ac.probes >= 2 for ac in run["limiters"])
    late = total_limit(run["trace"], 7.0)
    assert 40 <= min(late) and max(late) <= 90


def probe_ready(limit=40, baseline=0.020):
    """A settled limiter at ``limit`` with a ``baseline`` round trip, just before the probe at 5 s."""
    clock = FakeClock(0.0)
    ac = AdaptiveConcurrency(400, initial=limit, slow_start=False, clock=clock)
    clock.now = 4.0
    window(ac, clock, baseline, limit)                  # schedules the first probe at 5.0
    return ac, clock


def test_a_baseline_probe_drains_samples_and_restores():
    ac, clock = probe_ready(40, baseline=0.050)          # learnt while the service was queueing
    limit = ac._limit
    clock.now = 5.0
    ac.on_success(0.050, 40)                            # the first answer at or after the instant
    assert ac.probes == 1 and ac.limit == 8             # a quarter of the limit, at most 8
    clock.now += 0.030
    for _ in range(20):
        ac.on_success(0.080, 40)                        # calls sent before the probe: no sample
    assert ac.limit == 8
    clock.now += 0.025
    for _ in range(8):
        ac.on_success(0.021, 8)                         # the drained service answers in 21 ms
    assert ac.baseline_latency == pytest.approx(0.021)
    assert ac._limit == limit                           # back where it was, and probes again at 10 s
    assert ac.probes == 1 and ac._next_probe == pytest.approx(10.0)


def test_limiters_sharing_a_clock_probe_at_the_same_instants():
    clock = FakeClock(0.0)
    first = AdaptiveConcurrency(400, initial=40, slow_start=False, clock=clock)
    clock.now = 3.3
    window(first, clock, 0.02, 40)
    second = AdaptiveConcurrency(400, initial=40, slow_start=False, clock=clock)
    clock.now = 4.1
    window(second, clock, 0.02, 40)
    assert first._next_probe == second._next_probe == 5.0


def test_a_probe_is_skipped_after_a_cut_on_overload():
    ac, clock = probe_ready(40)
    clock.now = 4.5
    assert ac.on_failure(Overloaded(), 0.001) is True   # the service rejects: it bounds the limit
    clock.now = 5.0
    limit = ac.limit
    window(ac, clock, 0.020, limit)
    assert ac.probes == 0 and ac.limit >= limit


def test_an_overload_during_a_probe_ends_it_and_cuts_from_the_limit_before_it():
    ac, clock = probe_ready(40)
    limit = ac._limit
    clock.now = 5.0
    ac.on_success(0.02, 40)
    assert ac.limit == 8
    clock.now += 0.001
    assert ac.on_failure(Overloaded(), 0.001) is True
    assert ac._limit == pytest.approx(limit * 0.9)


def test_default_clock_probes_on_wall_clock_multiples_of_the_period():
    ac = AdaptiveConcurrency(400)
    ac.on_success(0.01, 1)
    wall = ac._next_probe + (time.time() - time.monotonic())
    assert abs(wall / 5.0 - round(wall / 5.0)) < 1e-3 and 0 < wall - time.time() <= 5.0
