"""What the tokens of an LLM call cost: a user-supplied price per model (``price=`` of
``OpenAIChat`` / ``OpenAIEmbeddings``), and the budget cost that charges an estimate before a call
and the billed amount after it (:meth:`OpenAIFunction.budget_cost`).

Prices are per million tokens, in whatever currency the user writes them in (aiospark never
converts): the recorded usage amount ``cost`` is in that currency. ``batch_discount`` is the
fraction taken off for answers that came from the provider's batch lane (OpenAI: 0.5).

Example::

    price = Price(input=0.15, output=0.60, cached_input=0.075)       # $ per 1M tokens
    chat = OpenAIChat("gpt-4o-mini", base_url=..., max_tokens=64, price=price)
    # or a table: price={"gpt-4o-mini": Price(0.15, 0.60), "gpt-4o": Price(2.5, 10)}
    budget = aiospark.Budget(20.0, cost=chat.budget_cost("cost"))   # at most $20 billed (+ the bound)
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from ...budget.billed import BilledCost
from ..checks import check_positive

__all__ = ["LANES", "Price", "Priced", "RowEstimate", "check_price", "whole_usage"]

#: the lanes an answer can come from: ``live`` (one request per call), ``batch`` (a provider batch)
LANES = ("live", "batch")
#: prices are per this many tokens
PER = 1_000_000


def _optional_rate(name: str, value: Any) -> float | None:
    return None if value is None else _rate(name, value)


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) < math.inf:
        raise ValueError(f"Price({name}=...) must be a finite number >= 0 (the price per 1M tokens, in your "
                         f"currency), got {value!r}")
    return float(value)


class Price:
    """A model's price per 1M tokens: ``input`` (prompt tokens), ``output`` (completion tokens,
    reasoning included; None for a model that bills none, e.g. embeddings), ``cached_input``
    (prompt tokens the provider served from its cache; default: ``input``), and ``batch_discount``,
    the fraction off for the provider batch lane (0.5: half price).

    Example: ``Price(input=2.50, output=10.00, cached_input=1.25)``; ``Price(0.02)`` for embeddings.
    """

    def __init__(self, input: float, output: float | None = None, *, cached_input: float | None = None,
                 batch_discount: float = 0.5):
        self.input: float = _rate("input", input)
        self.output: float | None = _optional_rate("output", output)
        cached = _optional_rate("cached_input", cached_input)
        self.cached_input: float = self.input if cached is None else cached
        if isinstance(batch_discount, bool) or not isinstance(batch_discount, numbers.Real) \
                or not 0 <= float(batch_discount) <= 1:
            raise ValueError(f"Price(batch_discount=...) must be a fraction in [0, 1] taken off for the provider "
                             f"batch lane (0.5: half price, 0: none), got {batch_discount!r}")
        self.batch_discount: float = float(batch_discount)

    def __repr__(self) -> str:
        return (f"Price(input={self.input:g}, output={self.output if self.output is None else format(self.output, 'g')}, "
                f"cached_input={self.cached_input:g}, batch_discount={self.batch_discount:g})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Price) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))

    def factor(self, lane: str) -> float:
        """What the lane pays of the list price (1 live, ``1 - batch_discount`` batch)."""
        if lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}, got {lane!r}")
        return 1.0 - self.batch_discount if lane == "batch" else 1.0

    def money(self, usage: Mapping[str, Any], lane: str = "live") -> float:
        """What the billed ``usage`` (``prompt_tokens``, ``cached_prompt_tokens``,
        ``completion_tokens``; ``total_tokens`` when neither of the first is there) costs in ``lane``."""
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens", 0)
        if prompt is None:
            prompt = usage.get("total_tokens", 0) if "completion_tokens" not in usage else 0
        cached = min(usage.get("cached_prompt_tokens", 0), prompt)
        total = (prompt - cached) * self.input + cached * self.cached_input + completion * (self.output or 0.0)
        return total / PER * self.factor(lane)

    def estimate(self, prompt_tokens: float, completion_tokens: float, lane: str = "live") -> float:
        """What a call of about these tokens costs in ``lane`` (no cache discount: an upper bound)."""
        return (prompt_tokens * self.input + completion_tokens * (self.output or 0.0)) / PER * self.factor(lane)


def whole_usage(amounts: Mapping[str, Any]) -> dict[str, Any]:
    """``amounts`` with a part the provider left out worked out from ``total_tokens`` (``prompt =
    total - completion``, or the other way round): a usage of ``{"completion_tokens": 5,
    "total_tokens": 105}`` bills 105 tokens, not 5."""
    out = dict(amounts)
    total = out.get("total_tokens")
    if total is not None:
        if "prompt_tokens" not in out and "completion_tokens" in out:
            out["prompt_tokens"] = max(0, total - out["completion_tokens"])
        elif "completion_tokens" not in out and "prompt_tokens" in out:
            out["completion_tokens"] = max(0, total - out["prompt_tokens"])
    return out


def check_price(price: Any, model: str, kind: str, needs_output: bool) -> Price | None:
    """``price=`` of an OpenAI function: None, a :class:`Price`, or a table ``{model: Price}`` that
    must hold ``model``. ``needs_output``: the function bills completion tokens (chat)."""
    if price is None:
        return None
    if isinstance(price, Mapping):
        bad = [k for k, v in price.items() if not isinstance(k, str) or not isinstance(v, Price)]
        if bad:
            raise TypeError(f"{kind}(price=...) as a table maps model names to aiospark Price(...) values; "
                            f"{bad[0]!r} does not")
        if model not in price:
            known = ", ".join(map(repr, sorted(price)[:10])) or "none"
            raise ValueError(f"{kind}(price=...): the table has no price for the model {model!r} (it has {known}): "
                             f"add one, e.g. {{{model!r}: Price(input=..., output=...)}}")
        price = price[model]
    if not isinstance(price, Price):
        raise TypeError(f"{kind}(price=...) must be a Price(input=..., output=...) per 1M tokens, a table "
                        f"{{model: Price}}, or None, got {type(price).__name__}")
    if needs_output and price.output is None:
        raise ValueError(f"{kind} bills completion tokens: give its Price an output= price per 1M tokens "
                         f"(0 if they are free)")
    return price


class RowEstimate:
    """A call's estimate before it starts, for a budget (picklable, shipped in the Budget):
    ``prompt(row)`` tokens plus ``completion`` tokens; in money at the live price when ``usage``
    is ``"cost"``. The row is what a budget's cost gets: the row dict (its ``column``), or the
    udf's column values as a tuple."""

    def __init__(self, prompt: Callable[[Any], float], column: str, completion: float, usage: str,
                 price: Price | None):
        self.prompt = prompt
        self.column = column
        self.completion = completion
        self.usage = usage
        self.price = price

    def __call__(self, row: Any) -> float:
        value = row.get(self.column) if isinstance(row, Mapping) else \
            (row[0] if type(row) is tuple and len(row) == 1 else row)
        if value is None:
            return 0.0  # a NULL input makes no request
        prompt = float(self.prompt(value))
        completion = self.completion
        if self.usage == "cost":
            assert self.price is not None  # checked by budget_cost
            return self.price.estimate(prompt, completion)
        if self.usage == "prompt_tokens":
            return prompt
        if self.usage == "completion_tokens":
            return completion
        return prompt + completion


#: the usage amounts a budget in tokens or money can reconcile with
BUDGET_USAGES = ("cost", "total_tokens", "prompt_tokens", "completion_tokens")


def budget_cost(prompt: Callable[[Any], float], column: str, completion: float, usage: str,
                price: Price | None, kind: str) -> BilledCost:
    """The :class:`BilledCost` of :meth:`OpenAIFunction.budget_cost`."""
    if usage not in BUDGET_USAGES:
        raise ValueError(f"budget_cost(usage=...) must be one of {BUDGET_USAGES} (the billed amount the budget "
                         f"counts), got {usage!r}")
    if usage == "cost" and price is None:
        raise ValueError(f"a budget in money needs the model's price: give {kind}(price=Price(input=..., "
                         f"output=...)), or count tokens with budget_cost('total_tokens')")
    return BilledCost(RowEstimate(prompt, column, completion, usage, price), usage)


class Priced:
    """What an OpenAI function adds for budgets in tokens or money (a part of ``OpenAIFunction``)."""

    price: Price | None
    input: str

    def budget_cost(self, usage: str = "cost", *, completion_tokens: int | None = None) -> Any:
        """A ``cost=`` for :class:`aiospark.Budget` that charges each call's estimate before it
        starts and reconciles with what the provider billed after it (an
        :class:`aiospark.BilledCost`), so the budget holds against billed usage. ``usage``: what
        the budget counts, ``"cost"`` (money, at this function's ``price``; the estimate at the
        live price, an answer from the batch lane gives the discount back), or ``"total_tokens"``,
        ``"prompt_tokens"``, ``"completion_tokens"``. The estimate: the prompt's tokens (tiktoken
        where installed) plus ``completion_tokens`` (default: ``max_tokens``).

        Example: ``aiospark.Budget(20.0, cost=chat.budget_cost())``  # $20 billed, at most (+ the bound)
        """
        completion = self._completion_estimate(completion_tokens)
        return budget_cost(self._row_prompt_tokens, self.input, completion, usage, self.price, type(self).__name__)

    def _completion_estimate(self, completion_tokens: int | None) -> int:
        """The completion tokens a call is estimated at (none for a function that bills none)."""
        if completion_tokens is not None:
            check_positive("completion_tokens", completion_tokens, integer=True)
            return int(completion_tokens)
        return 0

    def _row_prompt_tokens(self, value: Any) -> float:
        """The estimated prompt tokens of one input value (what :meth:`budget_cost` charges)."""
        raise NotImplementedError

