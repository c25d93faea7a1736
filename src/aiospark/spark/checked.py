"""Error rows for outputs that do not fit the schema (``on_error="row"`` of the wait functions).

Under the error-row policy an input whose output cannot be converted exactly (a misspelt key,
``1.5`` for an INT column, NULL for a NOT NULL one, a string for a number) must become that input's
error row, not fail the task. Checking each output on its own where its input is known costs a
one-row Arrow conversion (~40 µs); so outputs are checked in bulk instead, a whole output chunk
at once, when the task converts them anyway. Each output carries its input (an :class:`Output`
tag) from the call to the check; only when the bulk check fails is the chunk checked row by row,
to find the inputs whose outputs do not fit: each of those becomes one error row (all its outputs
replaced), the others are emitted as they are.

Retry predicates see the function's own results (the tags are taken off for them); outputs of the
function's ``timeout()`` are checked like any other.

Example::

    checks = OutputChecks(RowConverter(declared_schema, what), ErrorRow)
    options = checks.options(options)             # CallOptions whose result predicate sees rows
    invoke = checks.invoke                        # passed to CallOptions.make_operator(invoke=...)
    rows = checks.settle(values)                  # an output chunk: rows and error rows
"""
from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from ..core import AsyncFunction
from ..core.batches import own_inputs
from .schema import OutputSchemaError, none_among_rows

#: (input value, error text) -> the error row emitted instead of the input's outputs
MakeError = Callable[[Any, str], Any]


class _Call:
    """One call's outputs: its input, how many outputs it gave, and why they do not fit (if so)."""

    __slots__ = ("input", "count", "problem")

    def __init__(self, input: Any, count: int):
        self.input = input
        self.count = count
        self.problem: str | None = None


class Output:
    """One output row on its way from the call to the check, with the call it came from."""

    __slots__ = ("call", "index", "row")

    def __init__(self, call: _Call, index: int, row: Any):
        self.call = call
        self.index = index
        self.row = row


def tag_outputs(value: Any, results: Any) -> Any:
    """``results`` (a call's list of outputs for ``value``) as :class:`Output` tags of one call;
    anything else is returned as it is (the operator reports what the function returned)."""
    if not isinstance(results, (list, tuple)):
        return results
    call = _Call(value, len(results))
    return [Output(call, i, row) for i, row in enumerate(results)]


def _untag(results: list[Any]) -> list[Any]:
    # a batch of an AsyncFunction gives one list of outputs per input
    return [r.row if type(r) is Output else _untag(r) if type(r) is list else r for r in results]


def _tag_one(value: Any, result: Any) -> Any:
    return None if result is None else Output(_Call(value, 1), 0, result)  # None: no row


def untagged_retry(options: Any, untag: Callable[[list[Any]], list[Any]]) -> Any:
    """``options`` (CallOptions) with a retry strategy whose result predicate sees ``untag(results)``:
    the function's own outputs, not the tags an entry point put on them."""
    retry = options.retry
    if retry is None or retry.result_predicate is None:
        return options
    predicate = retry.result_predicate
    untagged = copy.copy(retry)
    untagged.result_predicate = lambda results: predicate(untag(results))
    return dataclasses.replace(options, retry=untagged)


class OutputChecks:
    """The error-row checks of one task: tags outputs at the call, settles them chunk by chunk.

    ``converter`` is a :class:`~aiospark.spark.schema.RowConverter` of the schema as declared
    (NOT NULL kept); ``make_error(input, text)`` makes the error row of an input.
    """

    def __init__(self, converter: Any, make_error: MakeError):
        self.converter = converter
        self.make_error = make_error
        #: outputs of a call whose last outputs are still to come (a chunk ended in the middle)
        self._carry: list[Output] = []

    # ------------------------------------------------------------------ at the call
    def invoke(self, function: Any, batch: bool = False) -> Any:
        """An ``invoke`` wrapper: the function, whose outputs are tagged with their input.
        ``batch``: the function takes a list of inputs and returns one result per input."""
        if isinstance(function, AsyncFunction):  # a batch's timeout is called per input
            return TaggedFunction(function, _tag_each if batch else tag_outputs, tag_outputs)

        # the core gives each attempt its own rows; the tags keep them as they came, so the
        # function gets a copy of its own (what it changes never reaches an error row's input)
        async def call_batch(values: list[Any]) -> Any:
            results = await function(own_inputs(values))
            if not isinstance(results, (list, tuple)) or len(results) != len(values):
                return results  # the operator reports the broken contract
            return [_tag_one(v, r) for v, r in zip(values, results)]

        async def call_one(value: Any) -> Any:
            return _tag_one(value, await function(value.copy() if type(value) is dict else value))

        call: Callable[[Any], Awaitable[Any]] = call_batch if batch else call_one

        call.__qualname__ = getattr(function, "__qualname__", "function")  # errors name the user's function
        return call

    @staticmethod
    def options(options: Any) -> Any:
        """``options`` with a retry strategy whose result predicate sees the untagged rows."""
        return untagged_retry(options, _untag)

    # ------------------------------------------------------------------ at the task's output
    def settle(self, values: list[Any]) -> list[Any]:
        """One output chunk with every tagged output untagged, or replaced by its input's error
        row when an output of that input does not fit the schema (one error row per input)."""
        if self._carry:
            values = self._carry + values
            self._carry = []
        values = self._hold_back_unfinished(values)
        outputs = [v for v in values if type(v) is Output]
        if not outputs:
            return values
        failed = self._as_dicts(outputs)
        try:  # the common case: the whole chunk fits, checked at once
            self.converter.to_batch([o.row for o in outputs if o.call.problem is None])
        except OutputSchemaError:
            failed = True
            self._find_problems(outputs)
        if not failed:
            return [v.row if type(v) is Output else v for v in values]
        settled = []
        for v in values:
            if type(v) is not Output:
                settled.append(v)
            elif v.call.problem is None:
                settled.append(v.row)
            elif v.index == 0:  # one error row per input, where its first output would be
                settled.append(self.make_error(v.call.input, v.call.problem))
        return settled

    def _hold_back_unfinished(self, values: list[Any]) -> list[Any]:
        """Keep the last call's outputs for the next chunk if some of them are still to come: a
        call's outputs are emitted together, but a chunk may end among them."""
        if not values:
            return values
        last = values[-1]
        if type(last) is not Output or last.index == last.call.count - 1:
            return values
        start = len(values) - 1
        while start > 0 and type(values[start - 1]) is Output and values[start - 1].call is last.call:
            start -= 1
        self._carry = values[start:]
        return values[:start]

    def _as_dicts(self, outputs: list[Output]) -> bool:
        """Tuples and Rows as dicts of the declared columns (the task's own output has more
        columns: the error columns); whether any output is no row at all."""
        failed = False
        as_dict = self.converter.as_dict
        for o in outputs:
            if type(o.row) is not dict:
                try:
                    if o.row is None:  # only an AsyncFunction's list is tagged row by row: its None is no row
                        raise OutputSchemaError(none_among_rows(self.converter.what))
                    o.row = as_dict(o.row)
                except OutputSchemaError as exc:
                    o.call.problem = f"OutputSchemaError: {exc}"
                    failed = True
        return failed

    def _find_problems(self, outputs: list[Output]) -> None:
        """Check row by row (only after the bulk check failed): mark the calls that do not fit."""
        problem = self.converter.problem
        for o in outputs:
            if o.call.problem is None:
                o.call.problem = problem(o.row)


class TaggedFunction(AsyncFunction):
    """An opened AsyncFunction whose outputs are tagged: ``tag(value, outputs)`` of each call, and
    ``timeout_tag(value, outputs)`` (default ``tag``) of its own ``timeout``'s."""

    def __init__(self, function: AsyncFunction, tag: Callable[[Any, Any], Any],
                 timeout_tag: Callable[[Any, Any], Any] | None = None):
        self.function = function
        self.tag = tag
        self.timeout_tag = timeout_tag or tag

    async def async_invoke(self, value: Any) -> Any:
        own = own_inputs(value) if type(value) is list else value.copy() if type(value) is dict else value
        return self.tag(value, await self.function.async_invoke(own))  # tagged with the input as it came

    def timeout(self, value: Any) -> Any:
        results = self.function.timeout(value)
        if asyncio.iscoroutine(results):
            return self._tag_later(value, results)
        return self.timeout_tag(value, results)

    async def _tag_later(self, value: Any, results: Any) -> Any:
        return self.timeout_tag(value, await results)

    def __repr__(self) -> str:
        return repr(self.function)


def _tag_each(values: Any, results: Any) -> Any:
    """A batch call's outputs: one list per input, each tagged with its input."""
    if not isinstance(results, (list, tuple)) or len(results) != len(values):
        return results  # the operator reports the broken contract
    return [tag_outputs(v, r) for v, r in zip(values, results)]
