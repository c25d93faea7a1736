import asyncio
import pickle
import time

import cloudpickle
import pytest

from aiospark.core import unwinding
from aiospark.lookup import LookupCache, Lookuper, LookupSource


class Slow(LookupSource):
    """In-memory source: rows = [{'k': key[0], 'n': i} ...]; counts calls."""

    schema = "k STRING, n INT"

    def __init__(self, delay=0.02, rows_per_key=1, fail=None):
        self.delay, self.rows_per_key, self.fail = delay, rows_per_key, fail
        self.calls = []
        self.opened = self.closed = 0

    async def open(self):
        self.opened += 1

    async def close(self):
        self.closed += 1

    async def lookup(self, key):
        self.calls.append(key)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise self.fail
        if key[0] == "missing":
            return []
        return [{"k": key[0], "n": i} for i in range(self.rows_per_key)]


class Batchy(Slow):
    supports_batch = True
    max_batch_size = 10
    max_batch_delay = 0.02

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches = []

    async def lookup_batch(self, keys):
        self.batches.append(list(keys))
        await asyncio.sleep(self.delay)
        if self.fail:
            raise self.fail
        return {k: [{"k": k[0], "n": 0}] for k in keys if k[0] != "missing"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_null_key_is_a_miss_without_source_call():
    async def main():
        src = Slow()
        async with Lookuper(src) as lk:
            assert await lk.lookup(("a", None)) == []
            assert await lk.lookup((None,)) == []
            assert await lk.lookup(None) == []
        assert src.calls == [] and lk.stats()["null_keys"] == 3
    run(main())


def test_cache_hit_skips_source_and_missing_keys_cached():
    async def main():
        src = Slow(delay=0)
        async with Lookuper(src, cache=LookupCache()) as lk:
            assert await lk.lookup(("a",)) == [{"k": "a", "n": 0}]
            assert await lk.lookup(("a",)) == [{"k": "a", "n": 0}]
            assert await lk.lookup(("missing",)) == []
            assert await lk.lookup(("missing",)) == []
            assert await lk.lookup(["a"]) == [{"k": "a", "n": 0}]  # list key -> tuple
            assert await lk.lookup("a") == [{"k": "a", "n": 0}]    # scalar -> 1-tuple
        assert src.calls == [("a",), ("missing",)]
        s = lk.stats()
        assert s["cache_hits"] == 4 and s["cache_loads"] == 2 and s["source_calls"] == 2
    run(main())


def test_cache_expiry_reloads():
    async def main():
        src = Slow(delay=0)
        now = [0.0]  # the cache's clock, moved by hand: no race with a short real expiry
        async with Lookuper(src, cache=LookupCache(expire_after_write=5, clock=lambda: now[0])) as lk:
            await lk.lookup(("a",))
            now[0] = 4.0
            await lk.lookup(("a",))
            now[0] = 5.5
            await lk.lookup(("a",))
        assert len(src.calls) == 2
    run(main())


@pytest.mark.parametrize("cache", [None, LookupCache()])
def test_coalescing_100_concurrent_same_key(cache):
    async def main():
        src = Slow(delay=0.03, rows_per_key=3)
        async with Lookuper(src, cache=cache) as lk:
            results = await asyncio.gather(*(lk.lookup(("k",)) for _ in range(100)))
        assert len(src.calls) == 1
        assert all(r == [{"k": "k", "n": i} for i in range(3)] for r in results)
        assert lk.stats()["coalesced"] == 99
    run(main())


def test_coalescing_in_batch_mode():
    async def main():
        src = Batchy(delay=0.02)
        async with Lookuper(src) as lk:
            results = await asyncio.gather(*(lk.lookup(("k",)) for _ in range(100)))
        assert src.batches == [[("k",)]] and src.calls == []
        assert all(r == [{"k": "k", "n": 0}] for r in results)
    run(main())


def test_batch_flushes_by_size_then_by_time():
    async def main():
        src = Batchy(delay=0.001)
        async with Lookuper(src) as lk:
            t0 = time.monotonic()
            results = await asyncio.gather(*(lk.lookup((str(i),)) for i in range(25)))
            elapsed = time.monotonic() - t0
        assert [len(b) for b in src.batches] == [10, 10, 5]
        assert sorted(k for b in src.batches for (k,) in b) == sorted(str(i) for i in range(25))
        assert [r[0]["k"] for r in results] == [str(i) for i in range(25)]
        # the last 5 went out on the 0.02 s timer, not when the Lookuper closed or the guard hit
        assert elapsed < 5.0, elapsed
        s = lk.stats()
        assert s["batches"] == 3 and s["batched_keys"] == 25 and s["inflight"] == 0
    run(main())


def test_single_key_not_held_longer_than_max_delay():
    async def main():
        # delays long enough that a loaded machine's stalls (tenths of a second) cannot blur them
        src = Batchy(delay=0)
        async with Lookuper(src, max_batch_delay=1.0) as lk:
            t0 = time.monotonic()
            await lk.lookup(("a",))
            waited = time.monotonic() - t0
        assert 0.95 <= waited < 2.5, waited  # held for max_batch_delay, then sent alone
        async with Lookuper(Batchy(delay=0), max_batch_delay=0.01) as lk:
            t0 = time.monotonic()
            await lk.lookup(("a",))
            waited = time.monotonic() - t0
            assert waited < 0.5, waited  # a short delay is honoured too (far below the 1 s above)
            assert lk._timer is None  # the timer of the flushed batch is gone
    run(main())


def test_batch_missing_keys_are_empty_and_cached():
    async def main():
        src = Batchy(delay=0)
        async with Lookuper(src, cache=LookupCache()) as lk:
            a, m = await asyncio.gather(lk.lookup(("a",)), lk.lookup(("missing",)))
            assert a == [{"k": "a", "n": 0}] and m == []
            assert await lk.lookup(("missing",)) == []
        assert len(src.batches) == 1
    run(main())


def test_batch_error_reaches_every_waiter_and_is_not_cached():
    async def main():
        src = Batchy(delay=0.01, fail=RuntimeError("backend down"))
        async with Lookuper(src, cache=LookupCache()) as lk:
            results = await asyncio.gather(*(lk.lookup((str(i),)) for i in range(10)),
                                           *(lk.lookup(("0",)) for _ in range(5)),
                                           return_exceptions=True)
            assert len(results) == 15
            assert all(isinstance(r, RuntimeError) and str(r) == "backend down" for r in results)
            assert len({id(r) for r in results}) == 1  # the same exception
            assert len(src.batches) == 1
            src.fail = None
            assert await lk.lookup(("0",)) == [{"k": "0", "n": 0}]  # retried, not cached
            assert len(src.batches) == 2
        assert lk.stats()["errors"] == 1
    run(main())


def test_single_error_reaches_coalesced_waiters_and_is_not_cached():
    async def main():
        src = Slow(delay=0.01, fail=KeyError("nope"))
        async with Lookuper(src, cache=LookupCache()) as lk:
            results = await asyncio.gather(*(lk.lookup(("k",)) for _ in range(20)),
                                           return_exceptions=True)
            assert all(isinstance(r, KeyError) for r in results) and len(src.calls) == 1
            src.fail = None
            assert await lk.lookup(("k",)) == [{"k": "k", "n": 0}]
            assert len(src.calls) == 2
    run(main())


@pytest.mark.parametrize("source_cls", [Slow, Batchy])
def test_cancelling_one_waiter_does_not_break_others(source_cls):
    async def main():
        # loads take 0.6 s and cancels come 0.05 s in: the load is surely still running
        src = source_cls(delay=0.6)
        async with Lookuper(src, cache=LookupCache()) as lk:
            tasks = [asyncio.create_task(lk.lookup(("k",))) for _ in range(3)]
            await asyncio.sleep(0.05)
            tasks[0].cancel()  # the first lookup: the one that loads (alone or in a batch)
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(done[0], asyncio.CancelledError)
            assert done[1] == done[2] == [{"k": "k", "n": 0}]
            # a joining waiter cancelled: the load goes on for the others
            tasks = [asyncio.create_task(lk.lookup(("j",))) for _ in range(2)]
            await asyncio.sleep(0.05)
            tasks[1].cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert done[0] == [{"k": "j", "n": 0}] and isinstance(done[1], asyncio.CancelledError)
        if source_cls is Slow:
            # the cancelled first lookup cancelled its own request; the others got a load of their own
            assert src.calls == [("k",), ("k",), ("j",)]
        else:
            # a batch is shared by every key in it: it always completes
            assert [b for b in src.batches] == [[("k",)], [("j",)]]
    run(main())


def test_a_cancelled_lookup_cancels_its_request_unless_others_wait():
    async def main():
        started, cancelled = asyncio.Event(), []

        class Watched(Slow):
            async def lookup(self, key):
                started.set()
                try:
                    return await super().lookup(key)
                except asyncio.CancelledError:
                    cancelled.append(key)
                    raise

        src = Watched(delay=5)
        async with Lookuper(src) as lk:
            task = asyncio.create_task(lk.lookup(("z",)))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert cancelled == [("z",)]
            assert lk.stats()["inflight"] == 0  # nothing left behind for the key
            src.delay = 0
            assert await lk.lookup(("z",)) == [{"k": "z", "n": 0}]
        assert src.calls == [("z",), ("z",)]
    run(main())


def test_batch_false_uses_single_lookups():
    async def main():
        src = Batchy(delay=0)
        async with Lookuper(src, batch=False) as lk:
            await asyncio.gather(lk.lookup(("a",)), lk.lookup(("b",)))
        assert src.batches == [] and sorted(src.calls) == [("a",), ("b",)]
    run(main())


def test_lifecycle_pickling_and_errors():
    src = Slow(delay=0)
    lk = Lookuper(src, cache=LookupCache(max_rows=3))
    lk2 = pickle.loads(cloudpickle.dumps(lk))
    assert lk2.cache.max_rows == 3

    async def main():
        with pytest.raises(RuntimeError, match="open"):
            await lk.lookup(("a",))
        await lk.open()
        await lk.open()  # idempotent
        assert await lk.lookup(("a",)) == [{"k": "a", "n": 0}]
        again = pickle.loads(cloudpickle.dumps(lk))  # runtime state is dropped
        assert again._opened is False and len(again.cache) == 0
        await lk.close()
        await lk.close()
        assert src.opened == 1 and src.closed == 1
    run(main())


def test_close_cancels_pending_batch():
    async def main():
        src = Batchy(delay=1.0)
        lk = Lookuper(src, max_batch_delay=0.01)
        await lk.open()
        task = asyncio.create_task(lk.lookup(("a",)))
        await asyncio.sleep(0.05)  # batch is in flight
        await lk.close()
        with pytest.raises(asyncio.CancelledError):
            await task
    run(main())


def test_close_leaves_behind_a_load_that_ignores_its_cancel_after_the_grace(monkeypatch):
    monkeypatch.setattr(unwinding, "GRACE_SECONDS", 0.2)

    class Stubborn(Batchy):
        async def lookup_batch(self, keys):
            while not self.release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:  # swallowed: the load goes on
                    self.cancels += 1
            return {key: [] for key in keys}

    async def main():
        src = Stubborn()
        src.release, src.cancels = asyncio.Event(), 0
        lk = Lookuper(src, max_batch_delay=0.01)
        await lk.open()
        task = asyncio.create_task(lk.lookup(("a",)))
        await asyncio.sleep(0.05)  # the batch is in flight
        t0 = time.monotonic()
        await asyncio.wait_for(lk.close(), 5)
        closing = time.monotonic() - t0
        with pytest.raises(asyncio.CancelledError):
            await task
        src.release.set()
        return closing, src.cancels, src.closed

    closing, cancels, closed = run(main())
    assert 0.2 - 0.01 <= closing < 5
    assert (cancels, closed) == (1, 1)


def test_validation():
    with pytest.raises(ValueError, match="max_batch_size"):
        Lookuper(Batchy(), max_batch_size=0)
    with pytest.raises(ValueError, match="max_batch_delay"):
        Lookuper(Batchy(), max_batch_delay=-1)
    with pytest.raises(TypeError, match="LookupCache"):
        Lookuper(Slow(), cache={})
    with pytest.raises(TypeError, match="LookupSource"):
        Lookuper(object())


def test_cache_hits_call_nothing_and_never_wait_for_the_loop():
    """A hit is answered from the cache: no source call, and no loop iteration (the speed of that
    path is measured in benchmarks/lookup_batching.py, not asserted here)."""
    source = Slow(delay=0)

    async def main():
        async with Lookuper(source, cache=LookupCache(max_rows=100_000)) as lk:
            await asyncio.gather(*(lk.lookup((i,)) for i in range(2000)))
            calls = len(source.calls)
            loop = asyncio.get_running_loop()
            ticks = []
            loop.call_soon(ticks.append, 1)  # runs at the next loop iteration
            for _ in range(3):
                for i in range(2000):
                    await lk.lookup((i,))
            return calls, len(source.calls), len(ticks)  # counted before __aexit__ yields

    before, after, ticks = run(main())
    assert before == after == 2000
    assert ticks == 0  # 6,000 hits answered without yielding to the loop once

def test_lookup_on_another_loop_is_a_clear_error():
    # a lookup that would wait on a future of the loop that opened the lookuper (a batch, or a
    # load to join) says so instead of hanging; one that loads in its own task needs no future
    lk = Lookuper(Batchy(delay=0))
    asyncio.run(lk.open())
    with pytest.raises(RuntimeError, match="another event loop"):
        asyncio.run(lk.lookup(("a",)))
