"""Rows are the caller's own (review of issue 44, item 1): a function that changes the row dicts
it is given, then fails, must not see its own changes on retry, and an error names the input as
it came -- batched and unbatched, plain functions and AsyncFunctions."""
import pytest

from aiospark.core import AsyncFunction, AsyncWaitOperator, RetryStrategy

from ._util import Collector, run

RETRY = RetryStrategy.fixed_delay(2, 0.001)


def _rows():
    return [{"id": i, "s": f"s{i}", "tags": ["t"]} for i in range(4)]


def _run(function, rows, **kwargs):
    async def main():
        out = Collector()
        op = AsyncWaitOperator(function, out, capacity=8, timeout=10.0,
                               on_error=lambda v, e: [("error", v, type(e).__name__)], **kwargs)
        await op.open()
        try:
            for row in rows:
                await op.process_element(row)
            await op.finish()
        finally:
            await op.close()
        return out.values()

    return run(main())


def _normalize_then_hiccup(batched):
    attempts = {}

    async def one(row):
        row["s"] += "!"  # normalizes in place, then the service hiccups once
        attempts[row["id"]] = attempts.get(row["id"], 0) + 1
        if attempts[row["id"]] == 1:
            raise ConnectionError("hiccup")
        return {"id": row["id"], "s": row["s"]}

    async def many(rows):
        for row in rows:
            row["s"] += "!"
        key = min(r["id"] for r in rows)
        attempts[key] = attempts.get(key, 0) + 1
        if attempts[key] == 1:
            raise ConnectionError("hiccup")
        return [{"id": r["id"], "s": r["s"]} for r in rows]

    return many if batched else one


@pytest.mark.parametrize("batched", [False, True], ids=["one-per-call", "batch"])
def test_a_retry_sees_the_row_as_it_came_not_the_failed_attempt_s_changes(batched):
    """Review: ``s0!!`` -- the retry got the row the first attempt had changed."""
    kwargs = {"batch_size": 4, "batch_delay": 0.01} if batched else {}
    values = _run(_normalize_then_hiccup(batched), _rows(), retry=RETRY, **kwargs)
    assert sorted((v["id"], v["s"]) for v in values) == [(i, f"s{i}!") for i in range(4)]


async def _change_then_fail(row):
    row["id"] = -1
    row.pop("s")
    raise ValueError("refused")


async def _change_all_then_fail(rows):
    for row in rows:
        row["id"] = -1
        row.pop("s")
    raise ValueError("refused")


class ChangesThenFails(AsyncFunction):
    async def async_invoke(self, value):
        for row in value if isinstance(value, list) else [value]:
            row.clear()
        raise ValueError("refused")


@pytest.mark.parametrize("function, kwargs", [
    (_change_then_fail, {}),
    (_change_all_then_fail, {"batch_size": 4, "batch_delay": 0.01}),
    (ChangesThenFails(), {}),
    (ChangesThenFails(), {"batch_size": 4, "batch_delay": 0.01}),
], ids=["one-per-call", "batch", "AsyncFunction", "AsyncFunction-batch"])
def test_an_error_names_the_input_as_it_came_and_the_caller_s_dicts_are_untouched(function, kwargs):
    """Review: error rows reported the changed input (``id = -1``, a popped key: a JVM
    NullPointerException in Spark)."""
    rows = _rows()
    values = _run(function, rows, retry=RetryStrategy.fixed_delay(1, 0.001), **kwargs)
    assert [v[1] for v in values] == _rows() and all(v[2] == "ValueError" for v in values)
    assert rows == _rows()


def test_nested_lists_in_a_row_are_shared_as_documented():
    """A row is copied shallowly: a list inside it is the caller's one object (docs/design.md)."""
    rows = _rows()

    async def appends(row):
        row["tags"].append("x")
        return row["id"]

    assert _run(appends, rows) == [0, 1, 2, 3]
    assert all(row["tags"] == ["t", "x"] for row in rows)
