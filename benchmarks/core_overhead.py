"""Elements per second through AsyncWaitOperator with a no-op async function (one core, one loop).

Run:  python benchmarks/core_overhead.py [--elements N] [--repeat R] [--loop asyncio|uvloop]

Also measures, in the same run and on the same loop, the same coroutines driven by bare asyncio
(a Task per element and a done callback refilling a window of ``capacity``) as the reference
point, in two ways: ``create_task`` (a lazy Task: its first step waits for a loop iteration, what
``asyncio.run`` code gets by default, and the bare reference of ``benchmarks/engine_cost.py``) and,
on Python 3.12+, the way the operator starts its calls (``asyncio.Task(..., eager_start=True)``: a
call that needs no I/O is over before ``create`` returns, and takes no done callback). The
operator's rate over the eager one's is what the operator's own parts cost around a real Task.
``--loop uvloop`` runs everything on uvloop, the Spark workers' default loop.
"""
from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time

from aiospark import AsyncWaitOperator


async def noop(x):
    return x


async def suspending_noop(x):
    await asyncio.sleep(0)
    return x


async def through_operator(fn, n: int, ordered: bool, capacity: int) -> float:
    count = 0

    def output(_element):
        nonlocal count
        count += 1

    op = AsyncWaitOperator(fn, output, ordered=ordered, capacity=capacity, timeout=60.0)
    await op.open()
    start = time.perf_counter()
    # fed the way the Spark runner feeds it: as many as there is room for, then wait for room
    values, pos = range(n), 0
    while pos < n:
        pos += op.try_process_many(values, pos)
        if pos < n:
            await op.wait_for_space()
    await op.finish()
    elapsed = time.perf_counter() - start
    await op.close()
    assert count == n, (count, n)
    return n / elapsed


async def bare_tasks(fn, n: int, capacity: int, eager: bool = False) -> float:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    source = iter(range(n))
    finished = 0

    def on_done(_task):
        nonlocal finished
        finished += 1
        refill()

    def refill():
        nonlocal finished
        for x in source:
            task = asyncio.Task(fn(x), loop=loop, eager_start=True) if eager else loop.create_task(fn(x))
            if not task.done():
                task.add_done_callback(on_done)
                return
            finished += 1  # an eager Task over in its first step: the next one starts (a loop, not recursion)
        if finished == n and not done.done():
            done.set_result(None)

    start = time.perf_counter()
    for _ in range(capacity):
        refill()
    await done
    return n / (time.perf_counter() - start)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="the event loop of every row (uvloop: the Spark workers' default)")
    args = parser.parse_args(argv)
    n, repeat = args.elements, args.repeat
    if args.loop == "uvloop":
        import uvloop
        run = uvloop.run
    else:
        run = asyncio.run
    eager = sys.version_info >= (3, 12)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"python {platform.python_version()} on {platform.machine()}, {args.loop} loop, {n} elements, "
          f"best of {repeat}\n")
    print(f"| {'function':<16} | {'mode':<9} | {'capacity':>8} | {'elements/s':>11} |")
    print(f"|{'-' * 18}|{'-' * 11}|{'-' * 10}|{'-' * 13}|")
    # Rounds interleave the configurations, so a noisy spell on this shared machine hits all of
    # them alike; each row shows its best round.
    configs = []
    for fn, label in ((noop, "no-op"), (suspending_noop, "sleep(0)")):
        for ordered in (True, False):
            for capacity in (10, 100, 1000):
                mode = "ordered" if ordered else "unordered"
                configs.append((label, mode, capacity, lambda fn=fn, o=ordered, c=capacity: through_operator(fn, n, o, c)))
        for capacity in (100, 1000):
            configs.append((label + " (bare)", "tasks", capacity, lambda fn=fn, c=capacity: bare_tasks(fn, n, c)))
            if eager:
                configs.append((label + " (bare)", "eager", capacity,
                                lambda fn=fn, c=capacity: bare_tasks(fn, n, c, eager=True)))
    best = [0.0] * len(configs)
    for _ in range(repeat):
        for i, (*_label, factory) in enumerate(configs):
            best[i] = max(best[i], run(factory()))
    for (label, mode, capacity, _factory), rate in zip(configs, best):
        print(f"| {label:<16} | {mode:<9} | {capacity:>8} | {rate:>11,.0f} |")

if __name__ == "__main__":
    main()
