"""One element's call (core/calls.py): what an AsyncFunction may return, eager completion."""
from __future__ import annotations

import asyncio

from aiospark import AsyncFunction, AsyncWaitOperator


class Rows(list):
    """A list subclass, as some client libraries return."""


def run_all(function, values, **kwargs):
    async def main():
        out = []
        op = AsyncWaitOperator(function, out.append, **kwargs)
        await op.open()
        for v in values:
            await op.process_element(v)
        await op.finish()
        await op.close()
        return [r.value for r in out]

    return asyncio.run(main())


def test_an_async_function_may_return_a_list_subclass_or_a_tuple():
    class F(AsyncFunction):
        async def async_invoke(self, value):
            return Rows([value, value]) if value % 2 else (value,)

    assert run_all(F(), range(4)) == [0, 1, 1, 2, 3, 3]


def test_calls_that_finish_without_io_and_calls_that_suspend_keep_their_order():
    """Some calls complete inside create_task (eager tasks on 3.12+), others suspend: the ordered
    output is input order either way, and every call ran in a real Task."""
    seen = []

    async def mixed(value):
        seen.append(isinstance(asyncio.current_task(), asyncio.Task))
        if value % 3 == 0:
            await asyncio.sleep(0.001)
        return value

    assert run_all(mixed, range(30), capacity=7) == list(range(30))
    assert seen == [True] * 30


def _hangs_with_timeout(handler):
    class Hangs(AsyncFunction):
        async def async_invoke(self, value):
            await asyncio.sleep(3600)
            return [value]

    Hangs.timeout = handler
    return Hangs()


def test_a_timeout_handler_that_returns_no_list_fails_naming_it():
    import pytest
    from aiospark import AsyncFunctionError

    def sync_handler(self, value):
        return "fallback"  # not a list

    async def async_handler(self, value):
        return 42  # not a list either

    for handler in (sync_handler, async_handler):
        with pytest.raises(AsyncFunctionError, match="timeout handler") as info:
            run_all(_hangs_with_timeout(handler), [1], timeout=0.05)
        assert isinstance(info.value.__cause__, TypeError)
        assert "timeout must return a list" in str(info.value.__cause__)


def test_a_raising_retry_predicate_fails_the_operator_even_with_on_error():
    """on_error turns failed calls into rows; a predicate that raises is a bug in the job's
    configuration, not a failed call: it fails the operator (SPEC section 1)."""
    import pytest
    from aiospark import AsyncFunctionError, RetryStrategy

    def predicate(results):
        raise RuntimeError("predicate exploded")

    async def echo(value):
        return value

    with pytest.raises(AsyncFunctionError, match="retry result_predicate") as info:
        run_all(echo, [1, 2], retry=RetryStrategy.fixed_delay(2, 0.001, result_predicate=predicate),
                on_error=lambda value, exc: ["error row"])
    assert str(info.value.__cause__) == "predicate exploded"
