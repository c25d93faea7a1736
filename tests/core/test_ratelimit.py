"""RateLimit (spec), TokenBucket (per-task GCRA limiter) and the limiter protocols."""
import asyncio
import bisect
import copy
import math
import pickle

import pytest

from aiospark.core.ratelimit import AsyncLimiter, Limiter, RateLimit, TokenBucket, make_limiter


class FakeClock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def run(coro, guard=10.0):
    async def guarded():
        return await asyncio.wait_for(coro, guard)

    return asyncio.run(guarded())


# ---------------------------------------------------------------------------------- RateLimit
def test_rate_limit_defaults_and_value_semantics():
    assert RateLimit(50).burst == 5
    assert RateLimit(5).burst == 1             # max(1, ceil(0.5))
    assert RateLimit(0.5).burst == 1
    assert RateLimit(101).burst == 11          # ceil(10.1)
    assert RateLimit(1000, burst=3).burst == 3
    r = RateLimit(50, burst=7)
    assert r.rate == 50.0 and isinstance(r.rate, float)
    assert r == RateLimit(50.0, burst=7) and r != RateLimit(50, burst=8) and r != RateLimit(51, burst=7)
    assert hash(r) == hash(RateLimit(50, burst=7))
    assert repr(r) == "RateLimit(50, burst=7)"
    assert repr(RateLimit(0.5)) == "RateLimit(0.5, burst=1)"
    with pytest.raises(AttributeError):
        r.rate = 10


@pytest.mark.parametrize("rate", [0, -1, -0.001, float("nan"), float("inf")])
def test_rate_limit_rejects_bad_rates(rate):
    with pytest.raises(ValueError, match="calls per second"):
        RateLimit(rate)


@pytest.mark.parametrize("rate", ["50", None, True, [50], object()])
def test_rate_limit_rejects_non_numbers(rate):
    with pytest.raises(TypeError, match="calls per second"):
        RateLimit(rate)


@pytest.mark.parametrize("burst,exc", [(0, ValueError), (-3, ValueError), (1.5, TypeError),
                                       ("2", TypeError), (True, TypeError)])
def test_rate_limit_rejects_bad_bursts(burst, exc):
    with pytest.raises(exc, match="burst"):
        RateLimit(10, burst=burst)


def test_rate_limit_is_picklable_and_copyable():
    r = RateLimit(12.5, burst=4)
    for clone in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert clone == r and type(clone) is RateLimit
        assert clone.rate == 12.5 and clone.burst == 4


def test_coerce():
    r = RateLimit(3, burst=2)
    assert RateLimit.coerce(r) is r
    assert RateLimit.coerce(None) is None
    assert RateLimit.coerce(50) == RateLimit(50)
    assert RateLimit.coerce(0.25) == RateLimit(0.25)
    from fractions import Fraction

    assert RateLimit.coerce(Fraction(1, 4)) == RateLimit(0.25)
    try:
        import numpy as np
    except ImportError:  # numpy comes with pyspark/pandas; without it there is nothing to check
        np = None
    if np is not None:
        assert RateLimit.coerce(np.int64(40)) == RateLimit(40)
        assert RateLimit(np.float64(2.5), burst=np.int32(3)) == RateLimit(2.5, burst=3)
        assert type(RateLimit(10, burst=np.int64(2)).burst) is int
    with pytest.raises(ValueError):
        RateLimit.coerce(0)
    for bad in ("50", True, [50], {"rate": 5}, object(), RateLimit):
        with pytest.raises(TypeError, match=r"rate_limit must be a number of calls per second \(e\.g\. rate_limit=50\)"):
            RateLimit.coerce(bad)


def test_coerce_passes_limiter_objects_through():
    class Shared:
        async def acquire(self):
            return None

    shared, bucket = Shared(), TokenBucket(10, 1)
    assert RateLimit.coerce(shared) is shared
    assert RateLimit.coerce(bucket) is bucket
    assert make_limiter(shared) is shared
    assert make_limiter(None) is None
    made = make_limiter(20)
    assert isinstance(made, TokenBucket) and (made.rate, made.burst) == (20.0, 2)
    made2 = make_limiter(RateLimit(20))
    assert made2 is not made  # a fresh bucket per task
    with pytest.raises(TypeError):
        make_limiter("20")


def test_protocols():
    class Shared:
        async def acquire(self):
            return None

    assert isinstance(TokenBucket(1), Limiter)
    assert isinstance(TokenBucket(1), AsyncLimiter)   # it has acquire() too
    assert isinstance(Shared(), AsyncLimiter) and not isinstance(Shared(), Limiter)
    assert not isinstance(RateLimit(1), Limiter)       # a spec, not a limiter


# ---------------------------------------------------------------------------------- TokenBucket
def test_bucket_validation():
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
    with pytest.raises(ValueError):
        TokenBucket(10, 0)
    with pytest.raises(TypeError):
        TokenBucket(10, 1, clock=5)
    assert TokenBucket(100).burst == 10  # same default as RateLimit
    assert RateLimit(7, burst=3).bucket().burst == 3


def test_reservations_are_spaced_one_over_rate_apart():
    clock = FakeClock(100.0)
    b = TokenBucket(10, 1, clock=clock)
    delays = [b.reserve() for _ in range(6)]
    assert delays == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], abs=1e-12)
    b3 = TokenBucket(4, 3, clock=FakeClock(5.0))
    assert [b3.reserve() for _ in range(6)] == pytest.approx([0, 0, 0, 0.25, 0.5, 0.75], abs=1e-12)


def test_reservations_queue_up_over_time():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 1, clock=clock)
    assert b.reserve() == 0.0
    assert b.reserve() == pytest.approx(0.1)   # starts at 0.1
    clock.now = 0.05
    assert b.reserve() == pytest.approx(0.15)  # starts at 0.2, after the queued one
    clock.now = 0.2
    assert b.reserve() == pytest.approx(0.1)   # starts at 0.3
    clock.now = 10.0                           # long idle: the bucket is full again, not more
    assert b.reserve() == 0.0
    assert b.reserve() == pytest.approx(0.1)


def test_partial_refill_gives_whole_tokens_only():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 5, clock=clock)
    assert [b.reserve() for _ in range(5)] == [0.0] * 5
    clock.now = 0.25                           # 2.5 tokens refilled
    assert b.reserve() == 0.0
    assert b.reserve() == 0.0
    assert b.reserve() == pytest.approx(0.05)  # the third has to wait for t=0.3


def test_idle_refill_is_capped_at_burst():
    clock = FakeClock(0.0)
    b = TokenBucket(100, 7, clock=clock)
    clock.now = 3600.0
    delays = [b.reserve() for _ in range(10)]
    assert delays[:7] == [0.0] * 7
    assert delays[7:] == pytest.approx([0.01, 0.02, 0.03])


@pytest.mark.parametrize("rate,burst,seconds", [(10, 1, 10), (3, 1, 10), (7, 4, 10), (250, 25, 10),
                                                (1000, 100, 10), (0.5, 2, 60), (33, 5, 3)])
def test_exactly_rate_times_t_plus_burst_with_everyone_reserving_at_once(rate, burst, seconds):
    """All callers reserve at t=0: start times within [0, T] number exactly R*T + burst."""
    clock = FakeClock(0.0)
    b = TokenBucket(rate, burst, clock=clock)
    starts = [b.reserve() for _ in range(int(rate * seconds) + burst + 50)]
    admitted = sum(1 for s in starts if s <= seconds)
    assert admitted == int(rate * seconds) + burst
    assert starts == sorted(starts)  # FIFO


@pytest.mark.parametrize("rate,burst", [(10, 1), (7, 4), (250, 25), (33, 5)])
def test_greedy_callers_never_exceed_r_t_plus_burst_in_any_window(rate, burst):
    """Callers keep reserving at every clock step; every window of length W holds at most
    floor(R*W) + burst start times, and a 10 s window holds exactly R*10 + burst at the start."""
    clock = FakeClock(0.0)
    b = TokenBucket(rate, burst, clock=clock)
    starts = []
    step = 0.0007
    while clock.now <= 10.0 + 1e-9:
        # a greedy caller reserves until it is told to wait, then waits out its reservation
        while True:
            d = b.reserve()
            starts.append(clock.now + d)
            if d > 0:
                break
        clock.now = round(clock.now + step, 10)
    starts.sort()
    assert sum(1 for s in starts if s <= 10.0) == rate * 10 + burst
    for window in (0.05, 0.5, 1.0, 2.5, 10.0):
        limit = math.floor(rate * window + 1e-9) + burst
        for i, s in enumerate(starts):
            j = bisect.bisect_right(starts, s + window - 1e-9)
            assert j - i <= limit, (window, s, j - i, limit)


def test_fairness_interleaved_clients_are_served_in_reservation_order():
    clock = FakeClock(0.0)
    b = TokenBucket(20, 1, clock=clock)
    order = []
    for i in range(10):
        for client in "AB":
            order.append((clock.now + b.reserve(), client, i))
        clock.now += 0.01
    starts = [s for s, _, _ in order]
    assert starts == sorted(starts)
    assert all(later - earlier == pytest.approx(0.05) for earlier, later in zip(starts[1:], starts[2:]))
    served = [c for _, c, _ in order]
    assert served == ["A", "B"] * 10  # neither client overtakes the other


def test_peek_does_not_take_a_token():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 1, clock=clock)
    assert b.peek() == 0.0
    assert b.reserve() == 0.0
    assert b.peek() == pytest.approx(0.1)
    assert b.peek() == pytest.approx(0.1)
    assert b.reserve() == pytest.approx(0.1)
    assert b.peek() == pytest.approx(0.2)


def test_bucket_pickles_as_a_fresh_bucket():
    b = TokenBucket(10, 2)
    b.reserve(), b.reserve(), b.reserve()
    clone = pickle.loads(pickle.dumps(b))
    assert (clone.rate, clone.burst) == (10.0, 2)
    assert clone.reserve() == 0.0 and clone.reserve() == 0.0  # full bucket, not the spent state


def test_acquire_spaces_concurrent_callers_fifo():
    async def main():
        loop = asyncio.get_running_loop()
        # The bucket's clock stands still, so every reservation sees the same instant whatever
        # the scheduling jitter: the delays handed out depend on the queue alone.
        b = TokenBucket(50, 1, clock=lambda: 0.0)
        started = []

        async def caller(i):
            waited = await b.acquire()
            started.append((loop.time(), i, waited))

        t0 = loop.time()
        await asyncio.gather(*(caller(i) for i in range(8)))
        return t0, started

    t0, started = run(main())
    assert [i for _, i, _ in started] == list(range(8))   # FIFO
    times = [t - t0 for t, _, _ in started]
    assert started[0][2] == 0.0
    for k, t in enumerate(times):
        assert t >= k * 0.02 - 0.002, (k, t)          # never early (late only if the CPU is busy)
    # the delays handed out are exactly 1/rate apart
    assert [w for _, _, w in started] == pytest.approx([k * 0.02 for k in range(8)], abs=1e-9)


def test_acquire_admits_about_r_t_plus_burst_in_real_time():
    async def main():
        loop = asyncio.get_running_loop()
        b = TokenBucket(200, 10)
        end = loop.time() + 0.5
        count = 0

        async def hammer():
            nonlocal count
            while True:
                await b.acquire()
                if loop.time() >= end:
                    return
                count += 1

        await asyncio.gather(*(hammer() for _ in range(20)))
        return count

    count = run(main())
    # never more than r*t + burst; the lower bound is loose: a busy CI machine delays wake-ups
    assert 100 * 0.5 <= count <= 200 * 0.5 + 10


# ---------------------------------------------------------------------------------- per and cost
def tokens_of(row):
    return len(row["text"]) / 4


def test_per_window_defaults_and_value_semantics():
    r = RateLimit(90_000, per=60, cost=tokens_of)
    assert (r.rate, r.per, r.burst, r.cost) == (90_000.0, 60.0, 9_000, tokens_of)  # a tenth of a window
    assert r.per_second == 1_500.0
    b = r.bucket()
    assert (b.rate, b.burst, b.cost) == (1_500.0, 9_000, tokens_of)
    assert RateLimit(6, per=60).burst == 1 and RateLimit(6, per=60).bucket().rate == pytest.approx(0.1)
    assert repr(r) == "RateLimit(90000, per=60, burst=9000, cost=tests.core.test_ratelimit.tokens_of)"
    assert r == RateLimit(90_000, per=60, cost=tokens_of) and hash(r) == hash(RateLimit(90_000, per=60, cost=tokens_of))
    assert r != RateLimit(90_000, per=60) and r != RateLimit(90_000, per=30, cost=tokens_of)
    assert RateLimit(5) == RateLimit(5, per=1.0, burst=1, cost=None)
    assert make_limiter(r).cost is tokens_of and make_limiter(5).cost is None


def test_burst_is_keyword_only():
    with pytest.raises(TypeError):
        RateLimit(100, 10)


@pytest.mark.parametrize("per,exc", [(0, ValueError), (-60, ValueError), (float("nan"), ValueError),
                                     (float("inf"), ValueError), ("60", TypeError), (None, TypeError),
                                     (True, TypeError)])
def test_bad_per_says_what_to_pass(per, exc):
    with pytest.raises(exc, match=r"per must be a .*number of seconds .*per=60"):
        RateLimit(100, per=per)


@pytest.mark.parametrize("cost", [5, "len", [1], RateLimit, object()])
def test_cost_must_be_a_function(cost):
    with pytest.raises(TypeError, match=r"cost must be a function of one call's input .*cost=lambda row"):
        RateLimit(100, cost=cost)
    with pytest.raises(TypeError, match="cost must be a function"):
        TokenBucket(100, cost=cost)


def test_cost_lambda_travels_with_cloudpickle():
    import cloudpickle

    r = RateLimit(1000, per=60, burst=50, cost=lambda row: len(row["text"]) * 2)
    clone = pickle.loads(cloudpickle.dumps(r))
    assert (clone.rate, clone.per, clone.burst) == (1000.0, 60.0, 50)
    assert clone.cost({"text": "abc"}) == 6
    assert pickle.loads(cloudpickle.dumps(r.bucket())).cost({"text": "a"}) == 2
    named = RateLimit(10, cost=tokens_of)
    assert pickle.loads(pickle.dumps(named)) == named  # a module-level function pickles by reference


def test_costs_are_charged_against_the_bucket():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 10, clock=clock)       # 10 units/s, bucket of 10
    assert b.reserve(4) == 0.0
    assert b.reserve(4) == 0.0                 # 8 taken, 2 left
    assert b.reserve(4) == pytest.approx(0.2)  # needs 4: 2 more refill in 0.2 s
    assert b.reserve(0) == pytest.approx(0.2)  # free, but FIFO: not before the one queued
    clock.now = 10.0                           # idle: full again
    assert [b.reserve(2.5) for _ in range(5)] == pytest.approx([0, 0, 0, 0, 0.25])


def test_rate_per_window():
    clock = FakeClock(0.0)
    b = RateLimit(600, per=60, burst=1).bucket(clock=clock)   # 10 per second
    assert [b.reserve() for _ in range(4)] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    clock = FakeClock(0.0)
    tpm = RateLimit(60_000, per=60, burst=500, cost=tokens_of).bucket(clock=clock)  # 1000 tokens/s
    delays = [tpm.reserve(tpm.cost({"text": "x" * 1600})) for _ in range(4)]  # 400 each
    assert delays == pytest.approx([0.0, 0.3, 0.7, 1.1])


def test_a_cost_above_burst_passes_and_leaves_debt():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 5, clock=clock)
    assert b.reserve(50) == 0.0                 # bucket full: it starts, 45 units in debt
    assert b.reserve(1) == pytest.approx(4.6)   # the debt is paid back at 10/s first
    clock.now = 100.0
    assert b.reserve(1) == 0.0
    assert b.reserve(50) == pytest.approx(0.1)  # waits for a full bucket, not for 50 units
    # only ever huge costs: each waits for the previous one's debt, none waits forever
    clock = FakeClock(0.0)
    b = TokenBucket(10, 1, clock=clock)
    assert [b.reserve(100) for _ in range(3)] == pytest.approx([0.0, 10.0, 20.0])


@pytest.mark.parametrize("cost", [-1, float("nan"), float("inf")])
def test_reserve_refuses_bad_costs(cost):
    b = TokenBucket(10, 1)
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        b.reserve(cost)
    assert b.reserve() == 0.0  # nothing was charged


def test_weighted_greedy_callers_stay_within_rate_and_one_big_cost_in_any_window():
    import random

    rng = random.Random(7)
    rate, burst = 100, 20
    clock = FakeClock(0.0)
    b = TokenBucket(rate, burst, clock=clock)
    starts = []
    while clock.now <= 20.0:
        while True:
            cost = rng.choice([0.5, 1, 3, 7.25, 19, 40])
            d = b.reserve(cost)
            starts.append((clock.now + d, cost))
            if d > 0:
                break
        clock.now = round(clock.now + 0.003, 10)
    assert [s for s, _ in starts] == sorted(s for s, _ in starts)  # FIFO
    times = [s for s, _ in starts]
    for window in (0.1, 1.0, 5.0):
        for i, s in enumerate(times):
            j = bisect.bisect_right(times, s + window - 1e-9)
            units = sum(c for _, c in starts[i:j])
            assert units <= rate * window + 40 + 1e-6, (window, s, units)


def test_pause_holds_every_start_until_it_ends():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 2, clock=clock)
    assert b.paused_for() == 0.0
    b.pause(3.0)
    assert b.paused_for() == 3.0 and b.peek() == 3.0
    assert [b.reserve() for _ in range(4)] == pytest.approx([3.0, 3.0, 3.1, 3.2])  # a full bucket at 3 s
    b.pause(1.0)                               # shorter than the pause in place: no change
    assert b.paused_for() == 3.0
    for bad in (0, -5, float("nan"), float("inf"), "soon", None):
        b.pause(bad)                           # never raises, changes nothing
    assert b.paused_for() == 3.0
    clock.now = 3.05
    assert b.paused_for() == 0.0 and b.reserve() == pytest.approx(0.25)  # the queue goes on


def test_pause_does_not_bunch_a_queue_that_runs_past_it():
    clock = FakeClock(0.0)
    b = TokenBucket(10, 1, clock=clock)
    assert [b.reserve() for _ in range(30)][-1] == pytest.approx(2.9)  # queued up to 3.0
    b.pause(1.0)
    assert b.reserve() == pytest.approx(3.0)   # after the queue, spaced as before


def test_acquire_reserves_again_after_a_pause_that_began_while_it_waited():
    async def main():
        loop = asyncio.get_running_loop()
        b = TokenBucket(20, 1, clock=loop.time)
        b.reserve()                             # the next start is 0.05 s away
        t0 = loop.time()
        waiting = asyncio.create_task(b.acquire(2))
        await asyncio.sleep(0)
        b.pause(0.3)
        await waiting
        return loop.time() - t0

    assert run(main()) >= 0.3                   # never before the end of the pause
