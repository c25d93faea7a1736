"""WorkerEventLoop keeps asyncio's behaviour: ordering, cancellation, errors, threads, I/O, debug."""
import asyncio
import contextvars
import logging
import threading
import time

import pytest

from aiospark.runtime import event_loop
from aiospark.runtime.event_loop import WorkerEventLoop
from aiospark.runtime.worker_loop import loop_choice, new_event_loop


@pytest.fixture
def loop():
    lp = WorkerEventLoop()
    yield lp
    lp.close()


def test_supported_here():
    assert event_loop.supported()


def test_timers_fire_in_deadline_order_and_ties_in_scheduling_order(loop):
    fired = []
    now = loop.time()
    for name, delay in [("c", 0.03), ("a", 0.01), ("b1", 0.02), ("b2", 0.02), ("b3", 0.02)]:
        loop.call_at(now + delay, fired.append, name)
    loop.call_later(0.015, fired.append, "later")
    loop.run_until_complete(asyncio.sleep(0.05))
    assert fired == ["a", "later", "b1", "b2", "b3", "c"]


def test_timers_do_not_fire_early(loop):
    late = []
    for delay in (0.005, 0.01, 0.02):
        start = loop.time()
        loop.call_later(delay, lambda s=start, d=delay: late.append(loop.time() - s - d))
    loop.run_until_complete(asyncio.sleep(0.04))
    assert len(late) == 3
    assert all(x >= -loop._clock_resolution for x in late)


def test_call_soon_is_fifo_and_new_callbacks_wait_for_the_next_iteration(loop):
    order = []

    def first():
        order.append("first")
        loop.call_soon(order.append, "added by first")

    loop.call_soon(first)
    loop.call_soon(order.append, "second")
    loop.run_until_complete(asyncio.sleep(0))
    loop.run_until_complete(asyncio.sleep(0))
    assert order == ["first", "second", "added by first"]


@pytest.mark.parametrize("debug", [False, True])
def test_after_callbacks_run_once_the_iterations_callbacks_have_run(loop, debug):
    loop.set_debug(debug)
    order = []

    def callback(name):
        order.append(name)
        loop.call_after_callbacks(lambda: order.append(f"after {name}"))

    def after_all():
        order.append("after-all")
        loop.call_soon(order.append, "scheduled by after-all")  # runs in the next iteration

    loop.call_soon(callback, "a")
    loop.call_soon(callback, "b")
    loop.call_soon(loop.call_after_callbacks, after_all)
    loop.call_later(0.001, callback, "timer")
    time.sleep(0.002)  # the timer is due by the first iteration
    loop.run_until_complete(asyncio.sleep(0))
    loop.run_until_complete(asyncio.sleep(0))
    assert order == ["a", "b", "timer", "after a", "after b", "after-all", "after timer",
                     "scheduled by after-all"]


def test_a_failing_after_callback_goes_to_the_exception_handler_and_the_others_run(loop):
    seen, ran = [], []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx))
    loop.call_soon(loop.call_after_callbacks, lambda: 1 / 0)
    loop.call_soon(loop.call_after_callbacks, lambda: ran.append("second"))
    loop.run_until_complete(asyncio.sleep(0.001))
    assert ran == ["second"]
    assert [type(c["exception"]) for c in seen] == [ZeroDivisionError]
    assert "Exception in callback" in seen[0]["message"]


def test_cancelled_handles_and_timers_never_run(loop):
    ran = []
    loop.call_soon(ran.append, "soon").cancel()
    timer = loop.call_later(0.001, ran.append, "timer")
    assert timer.cancel() is None and timer.cancelled()
    loop.run_until_complete(asyncio.sleep(0.01))
    assert ran == []


def test_many_cancelled_timers_are_compacted(loop):
    timers = [loop.call_later(60, lambda: None) for _ in range(1000)]
    for t in timers[:900]:
        t.cancel()
    assert loop._timer_cancelled_count == 900
    loop.run_until_complete(asyncio.sleep(0))
    assert len(loop._timers) == 100 and loop._timer_cancelled_count == 0
    assert not any(t._scheduled for t in timers[:900]) and all(t._scheduled for t in timers[900:])


def test_a_cancelled_timer_at_the_head_is_dropped(loop):
    t = loop.call_later(0.001, lambda: None)
    t.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    assert loop._timers == [] and loop._timer_cancelled_count == 0
    t.cancel()  # twice is harmless
    assert loop._timer_cancelled_count == 0


def test_a_failing_callback_goes_to_the_exception_handler_and_the_loop_goes_on(loop):
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx))
    loop.call_soon(lambda: 1 / 0)
    loop.call_later(0.001, lambda: [][1])
    after = []
    loop.call_soon(after.append, "ran")
    loop.run_until_complete(asyncio.sleep(0.01))
    assert after == ["ran"]
    assert [type(c["exception"]) for c in seen] == [ZeroDivisionError, IndexError]
    assert all("Exception in callback" in c["message"] and "handle" in c for c in seen)


def test_keyboard_interrupt_in_a_callback_propagates(loop):
    def interrupt():
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()


def test_context_is_kept(loop):
    var = contextvars.ContextVar("var", default="unset")
    seen = []
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in ctx")
    loop.call_soon(lambda: seen.append(var.get()), context=ctx)
    loop.call_later(0.001, lambda: seen.append(var.get()), context=ctx)
    loop.call_soon(lambda: seen.append(var.get()))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert seen == ["in ctx", "unset", "in ctx"]


def test_call_soon_threadsafe_wakes_a_sleeping_loop(loop):
    fut = loop.create_future()
    threading.Timer(0.05, lambda: loop.call_soon_threadsafe(fut.set_result, "woken")).start()
    started = time.monotonic()
    assert loop.run_until_complete(fut) == "woken"
    assert time.monotonic() - started < 5


def test_tasks_timeouts_and_sockets_work(loop):
    async def handle(reader, writer):
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        echoed = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        server.close()
        await server.wait_closed()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 0.01)
        results = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(100)))
        return echoed, results

    echoed, results = loop.run_until_complete(main())
    assert echoed == b"ping\n" and results == list(range(100))


def test_closed_loop_refuses_callbacks_and_unschedules_timers():
    lp = WorkerEventLoop()
    timer = lp.call_later(60, lambda: None)
    lp.close()
    assert not timer._scheduled and lp._timers == []
    with pytest.raises(RuntimeError, match="closed"):
        lp.call_soon(lambda: None)
    with pytest.raises(RuntimeError, match="closed"):
        lp.call_later(1, lambda: None)


def test_bad_arguments_are_refused(loop):
    with pytest.raises(TypeError):
        loop.call_later(None, lambda: None)
    with pytest.raises(TypeError):
        loop.call_at(None, lambda: None)


def test_debug_mode_uses_asyncio_handles_and_reports_slow_callbacks(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.01
    handle = loop.call_soon(time.sleep, 0.02)
    timer = loop.call_later(0.001, lambda: None)
    assert type(handle) is asyncio.Handle and type(timer) is asyncio.TimerHandle
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_until_complete(asyncio.sleep(0.01))
    assert any("took" in r.getMessage() for r in caplog.records)
    timer2 = loop.call_later(60, lambda: None)
    timer2.cancel()  # asyncio's own TimerHandle reports its cancellation to the loop too
    assert loop._timer_cancelled_count == 1


def test_create_future_makes_futures_of_this_loop(loop):
    fut = loop.create_future()
    assert type(fut) is asyncio.Future and fut.get_loop() is loop
    loop.call_soon(fut.set_result, 7)
    assert loop.run_until_complete(fut) == 7


def test_time_is_the_monotonic_clock(loop):
    assert abs(loop.time() - time.monotonic()) < 0.01


@pytest.mark.parametrize("value, kind", [("", WorkerEventLoop), ("aiospark", WorkerEventLoop),
                                         ("asyncio", asyncio.SelectorEventLoop)])
def test_aiospark_loop_chooses(monkeypatch, value, kind):
    monkeypatch.setenv("AIOSPARK_LOOP", value)
    lp = new_event_loop()
    try:
        assert type(lp) is kind
    finally:
        lp.close()


def test_a_bad_loop_choice_says_what_to_set(monkeypatch):
    monkeypatch.setenv("AIOSPARK_LOOP", "tokio")
    with pytest.raises(ValueError, match="AIOSPARK_LOOP must be one of aiospark, asyncio, uvloop, auto"):
        loop_choice()


def test_create_task_keeps_names_contexts_factories_and_closed_checks(loop):
    var = contextvars.ContextVar("var", default="unset")

    async def read():
        return var.get()

    ctx = contextvars.copy_context()
    ctx.run(var.set, "ctx")
    named = loop.create_task(read(), name="mine")
    in_ctx = loop.create_task(read(), context=ctx)
    assert named.get_name() == "mine"
    assert loop.run_until_complete(asyncio.gather(named, in_ctx)) == ["unset", "ctx"]
    made = []
    loop.set_task_factory(lambda lp, coro, **kw: made.append(1) or asyncio.Task(coro, loop=lp, **kw))
    assert loop.run_until_complete(loop.create_task(read())) == "unset" and made == [1]
    lp = WorkerEventLoop()
    lp.close()
    coro = read()
    with pytest.raises(RuntimeError, match="closed"):
        lp.create_task(coro)
    coro.close()
