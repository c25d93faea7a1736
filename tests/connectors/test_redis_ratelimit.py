"""RedisRateLimit against a real redis-server: one limit shared by many clients and processes."""
import asyncio
import bisect
import multiprocessing
import pickle
import queue as queue_module
import random
import time
import uuid

import cloudpickle
import pytest

from aiospark.connectors import ConnectorError
from aiospark.connectors.redis_ratelimit import GCRA_SCRIPT, RedisRateLimit, Reservation
from aiospark.core.ratelimit import AsyncLimiter, Limiter, RateLimit, make_limiter
from tests.support.servers import RedisServer, free_port

PASSWORD = "rl-Pa55word"


@pytest.fixture(scope="module")
def server():
    with RedisServer(password=PASSWORD) as srv:
        yield srv


def run(coro, guard=60.0):
    async def guarded():
        return await asyncio.wait_for(coro, guard)

    return asyncio.run(guarded())


def new_key():
    return f"aiospark:ratelimit:test-{uuid.uuid4().hex}"


def limiter(server, rate, burst=None, **kw):
    return RedisRateLimit(rate, burst=burst, url=server.url, password=PASSWORD, **kw)


def max_in_window(times, window):
    times = sorted(times)
    return max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)


# ---------------------------------------------------------------------------------- spec
def test_spec_defaults_and_validation():
    lim = RedisRateLimit(500)
    assert (lim.rate, lim.burst, lim.lease) == (500.0, 50, 10)
    assert lim.key == "aiospark:ratelimit:default"
    assert RedisRateLimit(20, name="geo").key == "aiospark:ratelimit:geo"
    assert RedisRateLimit(20, key="my:key").key == "my:key"
    assert RedisRateLimit(20).lease == 1 and RedisRateLimit(20, burst=3, lease=4).burst == 3
    assert isinstance(lim, AsyncLimiter)
    # an async limiter only: an operator that looks for a synchronous reserve() must not find one
    assert not isinstance(lim, Limiter) and getattr(lim, "reserve", None) is None
    assert RateLimit.coerce(lim) is lim and make_limiter(lim) is lim  # accepted as rate_limit=
    with pytest.raises(ValueError, match="calls per second"):
        RedisRateLimit(0)
    with pytest.raises(TypeError, match="calls per second"):
        RedisRateLimit("500")
    with pytest.raises(ValueError, match="burst"):
        RedisRateLimit(10, burst=0)
    with pytest.raises(ValueError, match="lease"):
        RedisRateLimit(10, lease=0)
    with pytest.raises(ValueError, match="key"):
        RedisRateLimit(10, key="")
    with pytest.raises(ValueError, match="name"):
        RedisRateLimit(10, name="")
    with pytest.raises(ValueError, match="redis://"):
        RedisRateLimit(10, url="http://127.0.0.1:6379")
    with pytest.raises(ValueError, match="timeout"):
        RedisRateLimit(10, timeout=0)


def test_password_never_shown_and_taken_from_env(monkeypatch):
    lim = RedisRateLimit(10, url="redis://:url-secret@127.0.0.1:6379/0", password="s3cret-pw")
    assert "s3cret-pw" not in repr(lim) and "url-secret" not in repr(lim) and "***" in repr(lim)
    monkeypatch.setenv("REDIS_PASSWORD", "from-env-pw")
    env_lim = RedisRateLimit(10)
    assert env_lim._password.reveal() == "from-env-pw" and "from-env-pw" not in repr(env_lim)


def test_picklable_before_and_after_open(server):
    lim = limiter(server, 100, 5, key=new_key())
    for dumps in (pickle.dumps, cloudpickle.dumps):
        clone = pickle.loads(dumps(lim))
        assert (clone.rate, clone.burst, clone.key, clone.lease) == (100.0, 5, lim.key, 2)

    async def main():
        await lim.open()
        await lim.acquire()
        blob = pickle.dumps(lim)  # runtime state (connection, waiters) is not pickled
        await lim.close()
        clone = pickle.loads(blob)
        assert clone.acquired == 0 and clone._conn is None
        waited = await clone.acquire()  # opens itself on first use
        await clone.close()
        return waited

    assert run(main()) >= 0.0


def test_close_is_idempotent_and_reopen_works(server):
    async def main():
        lim = limiter(server, 50, 2, key=new_key())
        await lim.close()            # never opened
        async with lim:
            await lim.acquire()
        await lim.close()
        await lim.close()
        await lim.acquire()          # reconnects
        await lim.close()
        return lim.acquired

    assert run(main()) == 2          # counters are the object's, across reopen


def test_close_fails_callers_waiting_for_a_reservation(server):
    async def main():
        lim = limiter(server, 1000, key=new_key())
        await lim.open()

        async def slow_script(**kw):   # hold the round trip so callers are still waiting
            await asyncio.sleep(10)

        lim._conn.script = slow_script
        tasks = [asyncio.create_task(lim.acquire()) for _ in range(3)]
        await asyncio.sleep(0.05)
        await lim.close()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = run(main())
    assert all(isinstance(r, RuntimeError) and "closed" in str(r) for r in results), results


# ---------------------------------------------------------------------------------- errors
def test_unreachable_server_fails_fast_and_clearly():
    async def main():
        lim = RedisRateLimit(10, url=f"redis://127.0.0.1:{free_port()}/0", timeout=2)
        with pytest.raises(ConnectorError) as info:
            await lim.acquire()
        return info.value

    err = run(main(), guard=15)
    assert err.retryable and "cannot connect" in str(err) and "RedisRateLimit" in str(err)


def test_wrong_password_names_the_fix(server):
    async def main():
        lim = RedisRateLimit(10, url=server.url, password="wrong-pw-123")
        with pytest.raises(ConnectorError) as info:
            await lim.open()
        return info.value

    err = run(main())
    assert "authentication failed" in str(err) and "REDIS_PASSWORD" in str(err)
    assert "wrong-pw-123" not in str(err)


# ---------------------------------------------------------------------------------- behaviour
def test_burst_then_spacing_and_no_polling(server):
    """Waiting callers sleep until the start time the script gave them: one round trip per
    token here (lease 1), never more, and starts spaced 1/rate apart.

    2 per second: starts 0.5 s apart, so a loaded machine's stalls (Redis's clock against the
    loop's, a slow wake-up) fit in 0.4 s of slack without blurring one start into the next."""
    async def main():
        loop = asyncio.get_running_loop()
        lim = limiter(server, 2, 2, key=new_key())
        await lim.open()
        t0 = loop.time()
        times = []

        async def caller():
            await lim.acquire()
            times.append(loop.time() - t0)

        await asyncio.gather(*(caller() for _ in range(6)))
        await lim.close()
        return sorted(times), lim.round_trips, lim.tokens_reserved

    times, round_trips, reserved = run(main())
    assert round_trips == reserved == 6
    assert times[1] < 0.4, times                            # burst of 2: both at once
    for k in range(2, 6):
        expected = (k - 1) * 0.5
        # never early (a start is a lower bound); late only by the machine's stalls
        assert expected - 0.05 <= times[k] <= expected + 0.4, (k, times)


def test_cancelled_waiter_gives_its_token_back(server):
    async def main():
        loop = asyncio.get_running_loop()
        lim = limiter(server, 1, 1, key=new_key())
        await lim.open()
        await lim.acquire()                          # the burst token
        t0 = loop.time()
        waiting = asyncio.create_task(lim.acquire())  # reserved for t0 + 1 s
        await asyncio.sleep(0.2)
        trips = lim.round_trips
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await lim.acquire()                          # takes the given-back token
        started = loop.time() - t0
        await lim.close()
        return trips, lim.round_trips, started

    trips_before, trips_after, started = run(main())
    assert trips_after == trips_before              # no new reservation was needed
    # it started at the original start time (~1 s), not at a new one (~2 s)
    assert 0.9 <= started <= 1.5, started


def test_reservation_api(server):
    async def main():
        loop = asyncio.get_running_loop()
        lim = limiter(server, 100, 3, key=new_key())
        r1 = await lim.reserve_batch(5)
        now = loop.time()
        r2 = await lim.reserve_batch(2)
        await lim.close()
        return r1, r2, now

    r1, r2, now = run(main())
    assert isinstance(r1, Reservation) and len(r1.starts) == 5
    assert r1.starts[0] == r1.starts[1] == r1.starts[2] <= now     # burst of 3: due now
    assert r1.starts[3] - r1.starts[0] == pytest.approx(0.01, abs=0.002)
    assert r1.starts[4] - r1.starts[3] == pytest.approx(0.01, abs=1e-6)
    assert r1.slot[1] - r1.slot[0] == pytest.approx(5 * 10_000)      # µs
    assert r2.slot[0] == r1.slot[1]                                # the next slot follows on
    with pytest.raises(ValueError):
        run(RedisRateLimit(1).reserve_batch(0))


def test_script_keeps_the_key_bounded(server):
    """The schedule key expires once it is in the past, so idle limits leave nothing behind."""
    key = new_key()

    async def main():
        lim = limiter(server, 1000, key=key)
        await lim.reserve_batch(3)
        await lim.close()

    run(main())
    client = server.client()
    try:
        ttl = client.pttl(key)
        assert 0 < ttl <= 1100
        assert float(client.get(key)) > 0
    finally:
        client.close()
    assert "TIME" in GCRA_SCRIPT and "PX" in GCRA_SCRIPT


def test_several_clients_in_one_process_share_the_rate(server):
    rate, burst, seconds = 300, 60, 3.0
    key = new_key()

    async def main():
        limits = [limiter(server, rate, burst, key=key) for _ in range(4)]
        for lim in limits:
            await lim.open()
        start = time.time() + 0.1
        end = start + seconds
        admitted = []

        async def hammer(lim):
            await asyncio.sleep(max(0.0, start - time.time()))
            while time.time() < end:
                await lim.acquire()
                now = time.time()
                if now < end:
                    admitted.append(now)

        await asyncio.gather(*(hammer(lim) for lim in limits for _ in range(10)))
        stats = [(lim.acquired, lim.round_trips) for lim in limits]
        for lim in limits:
            await lim.close()
        return admitted, stats

    admitted, stats = run(main())
    expected = rate * seconds + burst
    assert abs(len(admitted) - expected) <= 0.05 * rate * seconds, (len(admitted), expected)
    # start times may bunch a little after the event loop stalls (a busy CPU), hence 10%
    assert max_in_window(admitted, 1.0) <= (rate + burst) * 1.1
    for acquired, round_trips in stats:
        assert acquired > 0.15 * len(admitted)       # every client gets its share
        assert round_trips < acquired                # leases batch tokens per round trip


# ---------------------------------------------------------------------------------- processes
def _process_hammer(url, password, key, rate, burst, tasks, ready, go, start_at, results):
    """Child process: its own RedisRateLimit and event loop, hammering acquire() in a window."""
    lim = RedisRateLimit(rate, burst=burst, url=url, password=password, key=key)

    async def main():
        await lim.open()
        ready.put(1)
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 30)
        start = start_at.value
        end = start + _WINDOW_SECONDS
        admitted = []

        async def hammer():
            await asyncio.sleep(max(0.0, start - time.time()))
            while time.time() < end:
                await lim.acquire()
                now = time.time()
                if now < end:
                    admitted.append(now)

        await asyncio.gather(*(hammer() for _ in range(tasks)))
        await lim.close()
        return {"admitted": admitted, "round_trips": lim.round_trips, "acquired": lim.acquired,
                "late": time.time() > end + 1.0 and not admitted}

    try:
        results.put(asyncio.run(main()))
    except BaseException as exc:  # report instead of hanging the parent
        results.put({"error": repr(exc)})


def _process_reserve(url, password, key, rate, seconds, seed, results):
    """Child process: 8 coroutines reserving random batches as fast as they can."""
    lim = RedisRateLimit(rate, burst=1, url=url, password=password, key=key)
    rng = random.Random(seed)

    async def main():
        await lim.open()
        slots = []
        end = time.monotonic() + seconds

        async def loop_():
            while time.monotonic() < end:
                n = rng.randint(1, 5)
                r = await lim.reserve_batch(n)
                slots.append((r.slot[0], r.slot[1], n))

        await asyncio.gather(*(loop_() for _ in range(8)))
        await lim.close()
        return slots

    try:
        results.put({"slots": asyncio.run(main())})
    except BaseException as exc:
        results.put({"error": repr(exc)})


_WINDOW_SECONDS = 4.0


def _collect(results, procs, count, timeout):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        try:
            out.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue_module.Empty:
            break
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    assert len(out) == count, f"only {len(out)} of {count} processes reported"
    errors = [r["error"] for r in out if "error" in r]
    assert not errors, errors
    return out


def test_three_processes_share_one_rate(server):
    """3 spawned processes x 25 callers each: the calls admitted in a 4 s window add up to
    rate x 4 + burst within 5%, every 1 s window stays under rate + burst, and processes are
    served fairly."""
    rate, burst = 500, 50
    key = new_key()
    ctx = multiprocessing.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    start_at = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_process_hammer, daemon=True,
                         args=(server.url, PASSWORD, key, rate, burst, 25, ready, go, start_at, results))
             for _ in range(3)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=60)
    finally:
        start_at.value = time.time() + 1.0  # every process awake by then, even on a busy CPU
        go.set()
    out = _collect(results, procs, 3, timeout=60)
    admitted = [t for r in out for t in r["admitted"]]
    expected = rate * _WINDOW_SECONDS + burst
    assert abs(len(admitted) - expected) <= 0.05 * rate * _WINDOW_SECONDS, (len(admitted), expected)
    # start times may bunch a little after an event loop stalls (a busy CPU), hence 10% / 5%
    assert max_in_window(admitted, 1.0) <= (rate + burst) * 1.1
    assert max_in_window(admitted, 2.0) <= (2 * rate + burst) * 1.05
    for r in out:
        share = len(r["admitted"]) / len(admitted)
        assert 0.2 <= share <= 0.47, share                  # FIFO across processes: fair shares
        assert r["round_trips"] <= r["acquired"] / 2         # leases: fewer round trips than calls


def test_script_is_atomic_under_concurrent_processes(server):
    """3 processes x 8 coroutines reserve random batches concurrently: the slots they get tile
    the global schedule exactly -- no overlap (no lost update), no gap -- and the key ends at
    the end of the last slot."""
    rate = 200  # demand is far above it: the schedule soon runs seconds ahead and slots must touch
    key = new_key()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_process_reserve, daemon=True,
                         args=(server.url, PASSWORD, key, rate, 1.5, seed, results))
             for seed in range(3)]
    for p in procs:
        p.start()
    out = _collect(results, procs, 3, timeout=90)
    slots = sorted(s for r in out for s in r["slots"])
    assert len(slots) > 300
    per_process = [len(r["slots"]) for r in out]
    assert min(per_process) > 50                       # they really ran concurrently
    interval_us = 1e6 / rate
    for (s1, e1, n1), (s2, e2, n2) in zip(slots, slots[1:]):
        assert e1 - s1 == pytest.approx(n1 * interval_us)
        assert s2 >= e1, "overlapping reservations: the script is not atomic"
    # once the schedule runs ahead of the clock (after its first 0.5 s, while the processes and
    # their connections are still starting), the slots tile it with no gap
    settled = slots[0][0] + 500_000
    gaps = [(i, s2 - e1) for i, ((_, e1, _), (s2, _, _)) in enumerate(zip(slots, slots[1:]))
            if s2 != e1 and s2 > settled]
    assert not gaps, (len(slots), gaps[:10])
    tail = [s for s in slots if s[0] > settled]
    assert len(tail) > 300
    total = sum(n for _, _, n in tail)
    assert tail[-1][1] - tail[0][0] == pytest.approx(total * interval_us, abs=1.0)
    client = server.client()
    try:
        assert float(client.get(key)) == slots[-1][1]
    finally:
        client.close()


def test_concurrent_first_acquires_open_once(server):
    async def main():
        lim = limiter(server, 1000, 100, key=new_key())
        await asyncio.gather(*(lim.acquire() for _ in range(20)))
        client = lim._conn
        n = lim.acquired
        await lim.close()
        return client, n

    client, n = run(main())
    assert client is not None and n == 20


def test_many_cancellations_lose_no_capacity(server):
    """Half the callers are cancelled while waiting: the tokens they held go to the others, so
    the survivors still get the full rate.

    5 per second: the third caller's token is 0.4 s away when the cancels come (0.05 s in), and
    keeping the cancelled callers' tokens or not differs by ~2 s, so stalls cannot blur either."""
    async def main():
        loop = asyncio.get_running_loop()
        lim = limiter(server, 5, 1, key=new_key())
        await lim.open()
        t0 = loop.time()
        tasks = [asyncio.create_task(lim.acquire()) for _ in range(20)]
        await asyncio.sleep(0.05)
        for t in tasks[::2]:
            t.cancel()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = loop.time() - t0
        await lim.close()
        return done, elapsed, lim.tokens_reserved

    done, elapsed, reserved = run(main())
    cancelled = sum(isinstance(d, asyncio.CancelledError) for d in done)
    survivors = [d for d in done if not isinstance(d, BaseException)]
    assert cancelled >= 9 and len(survivors) + cancelled == 20   # (the first may be done already)
    assert reserved <= 20                  # no token reserved twice for the same caller
    # the survivors used the cancelled callers' earlier tokens: ~2 s at 5/s, not ~4 s
    assert elapsed < len(survivors) * 0.2 + 1.0, elapsed


def test_acquire_returns_the_wait_caused_by_the_limit(server):
    async def main():
        lim = limiter(server, 2, 2, key=new_key())
        waits = [await lim.acquire() for _ in range(4)]
        await lim.close()
        return waits

    waits = run(main())
    assert waits[0] == 0.0 and waits[1] == 0.0          # the burst: not limited (round trip aside)
    # then up to 1/rate = 0.5 s each: computed from the token's start, so never more; a stall
    # before asking (up to 0.4 s here) only shortens it
    assert all(0.1 <= w <= 0.51 for w in waits[2:]), waits
