"""Only calls are recorded (issue 43, item 3, the review of its closing note): a budget's cost
function that raises or gives no finite number >= 0 refuses the row before any call
(``BudgetCostError``); ``Journal(keep_errors=True)`` must not keep that refusal as the row's
answer. Through the public API on a real local Spark, calls counted at a real HTTP service on
127.0.0.1 (the ``BudgetUnavailable`` and rate-limiter variants: ``test_journal_identity.py``).
"""
from __future__ import annotations

from typing import Any

import aiohttp

import aiospark
from tests.support.journal import calls

SCHEMA = "id LONG, text STRING"
#: rows whose cost the first run's cost function cannot give (each a way to fail)
BAD = (0, 3, 6, 9)


class Answering(aiospark.AsyncFunction):
    """Calls the service; the service "refuses" id % 3 == 1 (its answer: an error kept)."""

    def __init__(self, url: str):
        self.url = url

    async def async_invoke(self, row: dict[str, Any]) -> list[Any]:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{self.url}/item/{row['id']}") as r:
                await r.read()
        if row["id"] % 3 == 1:
            raise ValueError(f"row {row['id']} is refused")
        return [{"id": row["id"], "text": "ok"}]


def broken_cost(row: dict[str, Any]) -> Any:
    """A negative cost, a string, NaN, and a raise: each a BudgetCostError for its row."""
    return {0: -1, 3: "many", 6: float("nan")}.get(row["id"], 1) if row["id"] != 9 else row["tokens"]


def test_a_budgets_cost_error_is_not_recorded_and_a_rerun_calls_those_rows(spark, service, tmp_path):
    """keep_errors=True with a cost function failing for some rows, then a rerun with a valid
    budget: the failed rows must be called (no call was made for them in the first run)."""
    loc = str(tmp_path / "j")
    df = spark.createDataFrame([(i, f"t{i}") for i in range(10)], "id LONG, text STRING").coalesce(1)
    fn = Answering(service.url)

    def run(budget: aiospark.Budget | None) -> dict[int, str]:
        out = aiospark.unordered_wait(df, fn, SCHEMA, on_error="row", budget=budget,
                                      journal=aiospark.Journal(loc, key="id", keep_errors=True)).collect()
        assert len(out) == 10
        return {r.id if r._input is None else r._input.id: r._error or r.text for r in out}

    before = calls(service)
    first = run(aiospark.Budget(100, cost=broken_cost))
    assert calls(service) - before == 10 - len(BAD)  # the refused rows were not called
    assert all("BudgetCostError" in first[i] and "broken_cost" in first[i] for i in BAD), first
    assert "-1" in first[0] and "'many'" in first[3] and "nan" in first[6] and "KeyError" in first[9]
    assert first[1] == "ValueError: row 1 is refused" and first[2] == "ok"

    before = calls(service)
    second = run(aiospark.Budget(100))
    assert calls(service) - before == len(BAD)  # only the rows the cost refused: the rest was recorded
    assert second == {i: f"ValueError: row {i} is refused" if i % 3 == 1 else "ok" for i in range(10)}

    before = calls(service)
    assert run(None) == second and calls(service) == before  # now every row's outcome is recorded
