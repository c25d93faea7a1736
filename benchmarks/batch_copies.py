"""What the batch function's own lists cost: the per-attempt copy of its input and the copy of its
returned list (issue 44), next to a whole batched row through the core operator.

Run:  python benchmarks/batch_copies.py [--elements N] [--repeat R]

``list(values)`` is what each attempt of a batch call pays for its input, and the same again for
its returned list; an ``AsyncFunction``'s per-element lists in a batch are copied one by one
(``[o.copy() ...]``); a list of rows (dicts) has each row copied per attempt too
(``own_inputs``: what the function changes never reaches a retry or an error row). The last lines
are a whole row through ``AsyncWaitOperator(batch_size=64)`` with a no-op batch function, the
copies included: ints, and 5-column row dicts.
"""
from __future__ import annotations

import argparse
import asyncio
import time
import timeit

from aiospark import AsyncWaitOperator
from aiospark.core.batches import own_inputs


async def noop(values):
    return values


def _row(i: int) -> dict:
    return {"id": i, "s": "text", "x": 1.5, "n": None, "tags": ["a"]}


async def through_operator(n: int, rows: bool = False) -> float:
    out: list = []
    op = AsyncWaitOperator(noop, out.extend, capacity=1024, batch_size=64, timeout=None, values=True)
    await op.open()
    values, pos = [_row(i) for i in range(n)] if rows else list(range(n)), 0
    began = time.perf_counter()
    while pos < n:
        pos += op.try_process_many(values, pos)
        if pos < n:
            await op.wait_for_space()
    await op.finish()
    elapsed = time.perf_counter() - began
    await op.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for n in (64, 512):
        values, lists = list(range(n)), [[i] for i in range(n)]
        copy = min(timeit.repeat(lambda: list(values), number=20_000, repeat=args.repeat)) / 20_000
        each = min(timeit.repeat(lambda: [o.copy() if type(o) is list else o for o in lists],
                                 number=2_000, repeat=args.repeat)) / 2_000
        print(f"batch of {n}: list(values) {copy * 1e9:.0f} ns ({copy * 1e9 / n:.1f} ns/row); "
              f"per-element list copies {each * 1e9:.0f} ns ({each * 1e9 / n:.0f} ns/row)")
        rows = [_row(i) for i in range(n)]
        own = min(timeit.repeat(lambda: own_inputs(rows), number=2_000, repeat=args.repeat)) / 2_000
        print(f"batch of {n} rows: own_inputs (list + each row dict) {own * 1e9:.0f} ns ({own * 1e9 / n:.0f} ns/row)")
    for rows_in in (False, True):
        best = min(asyncio.run(through_operator(args.elements, rows_in)) for _ in range(args.repeat))
        kind = "5-column row dict" if rows_in else "int"
        print(f"a batched {kind} through the operator (batch_size=64, no-op): "
              f"{best / args.elements * 1e9:.0f} ns/row")


if __name__ == "__main__":
    main()
