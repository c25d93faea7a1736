"""Error rows for outputs that do not fit the schema (``on_error="row"`` of the wait functions).

Under the error-row policy an input whose output cannot be converted exactly (a misspelt key,
``1.5`` for an INT column, NULL for a NOT NULL one, a string for a number) must become that input's
error row, not fail the task. The output is checked where the input is still known: right after
the call, one row at a time. Retry predicates see the function's own results; a result that does
not fit is replaced by the error row after them.

Example::

    invoke = checked_outputs(converter, make_error)   # passed to CallOptions.make_operator(invoke=...)
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..core import AsyncFunction

#: (input value, error text) -> the error row emitted instead of the input's outputs
MakeError = Callable[[Any, str], Any]


def checked_outputs(converter: Any, make_error: MakeError) -> Callable[[Any], Any]:
    """An ``invoke`` wrapper: the function, whose outputs are checked by ``converter.problem(row)``."""

    def wrap(function: Any) -> Any:
        if isinstance(function, AsyncFunction):
            return _CheckedFunction(function, converter, make_error)

        async def call(value: Any) -> Any:
            result = await function(value)
            if result is None:
                return None  # no row
            why = converter.problem(result)
            return result if why is None else make_error(value, why)

        call.__qualname__ = getattr(function, "__qualname__", "function")  # errors name the user's function
        return call

    return wrap


class _CheckedFunction(AsyncFunction):
    """An opened AsyncFunction whose results are checked; ``timeout`` is the function's own."""

    def __init__(self, function: AsyncFunction, converter: Any, make_error: MakeError):
        self.function = function
        self.converter = converter
        self.make_error = make_error

    async def async_invoke(self, value: Any) -> Any:
        results = await self.function.async_invoke(value)
        if not isinstance(results, (list, tuple)):
            return results  # the operator reports what the function returned
        problem: Optional[str] = None
        for row in results:
            problem = self.converter.problem(row)
            if problem is not None:
                return [self.make_error(value, problem)]
        return results

    def timeout(self, value: Any) -> Any:
        return self.function.timeout(value)

    def __repr__(self) -> str:
        return repr(self.function)
