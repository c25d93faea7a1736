"""What the calls a :func:`aiospark.plan` counts would cost, for the LLM connectors: estimated
tokens, and money in each lane (live, and the provider's batch lane at its discount) when the
function has a ``price``.

Spark reads the input column and adds up each value's prompt estimate (what a budget charges
before a call: the characters / 4, or tiktoken's count on a worker where it is loaded); the
estimate of the calls left is their number times the mean prompt estimate of the rows that make a
request (a NULL input makes none), plus the completion bound (``max_tokens``) per call. The plan
stays an estimate: it is as right as the budget's estimate, and the price is the user's.

Example::

    p = aiospark.plan(aiospark.unordered_wait, df, chat, chat.output_schema(df))
    p.tokens, p.cost_live, p.cost_batch         # (1_240_000, 0.42, 0.21)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .arrow_names import map_in_arrow
from .plan import RunPlan
from .schema import to_python

__all__ = ["with_costs"]

_SUMS = pa.schema([("rows", pa.int64()), ("requests", pa.int64()), ("prompt", pa.float64())])
_SUMS_DDL = "rows LONG, requests LONG, prompt DOUBLE"


def _priced(function: Any, columns: Any) -> bool:
    """Whether ``function`` is an LLM connector that estimates its prompts, reading one of ``columns``."""
    from ..connectors.openai.price import Priced  # (no LLM function in the run: not imported)

    column = getattr(function, "input", None)
    return isinstance(function, Priced) and type(function)._row_prompt_tokens is not Priced._row_prompt_tokens \
        and isinstance(column, str) and column in columns


def prompt_estimate(function: Any, columns: Any) -> PromptEstimate | None:
    """What :func:`~aiospark.spark.plan.count_run` sums over the calls left, for an LLM connector."""
    return PromptEstimate(function) if _priced(function, columns) else None


class PromptEstimate:
    """A row's prompt estimate, or None when it sends no request (picklable: the function travels)."""

    def __init__(self, function: Any):
        self.function = function

    def __call__(self, row: Any) -> float | None:
        value = row.get(self.function.input)
        return None if value is None else float(self.function._row_prompt_tokens(value))


def with_costs(counted: RunPlan, df: Any, function: Any) -> RunPlan:
    """``counted`` with the estimated tokens and costs of its calls when ``function`` is an LLM
    connector (it has ``_row_prompt_tokens``); else as it is."""
    if not _priced(function, df.columns):
        return counted
    column: str = function.input
    price = getattr(function, "price", None)
    if counted.calls == 0:  # nothing left to call: no Spark pass needed
        zero = 0.0 if price is not None else None
        return dataclasses.replace(counted, tokens=0, cost_live=zero, cost_batch=zero)
    try:
        completion = function._completion_estimate(None)
        bounded = True
    except ValueError:  # a chat without max_tokens: the answers' length is not bounded
        completion, bounded = 0, False
    if counted.prompt_left is not None and counted.requests_left is not None:  # summed over the calls left
        return _priced_plan(counted, price, counted.prompt_left, counted.requests_left * completion, bounded)
    # without a journal every row is called: the sums over the rows are the calls'
    sums = map_in_arrow(df.select(column), _PromptSums(function, column), _SUMS_DDL)
    row = sums.groupBy().sum(*_SUMS.names).collect()[0]
    rows, requests, prompt = int(row["sum(rows)"] or 0), int(row["sum(requests)"] or 0), float(row["sum(prompt)"] or 0)
    if rows == 0 or requests == 0:
        zero = 0.0 if price is not None else None
        return dataclasses.replace(counted, tokens=0, completion_bounded=bounded, cost_live=zero, cost_batch=zero)
    calls = counted.calls * requests / rows  # the calls left that make a request
    return _priced_plan(counted, price, calls * prompt / requests, calls * completion, bounded)


def _priced_plan(counted: RunPlan, price: Any, prompt_left: float, completion_left: float, bounded: bool) -> RunPlan:
    live = batch = None
    if price is not None:
        live = price.estimate(prompt_left, completion_left, "live")
        batch = price.estimate(prompt_left, completion_left, "batch")
    return dataclasses.replace(counted, tokens=round(prompt_left + completion_left), completion_bounded=bounded,
                               cost_live=live, cost_batch=batch)


class _PromptSums:
    """One row per task: its rows, those that make a request (not NULL) and their prompt
    estimates (picklable: the function travels, as in a run)."""

    def __init__(self, function: Any, column: str):
        self.function = function
        self.column = column

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = requests = 0
        prompt = 0.0
        for batch in batches:
            for value in to_python(batch.column(0)):
                rows += 1
                if value is None:
                    continue
                try:
                    prompt += self.function._row_prompt_tokens(value)
                except (TypeError, ValueError):  # the run makes this row's error, with no request
                    continue
                requests += 1
        yield pa.RecordBatch.from_pylist([{"rows": rows, "requests": requests, "prompt": prompt}], schema=_SUMS)
