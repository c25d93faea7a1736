"""``aiospark.plan``: what a run will cost, before it runs, computed by Spark without calling anything.

``plan(entry, df, *args, **kwargs)`` validates the call exactly as ``entry(df, *args, **kwargs)``
would (the same errors, the same journal refusal, the same ``dedup=`` decision), then runs a
Spark job that reads the input and the journal and counts, instead of building the operator's
``mapInArrow``:

* ``rows``: input rows; ``null_keys``: rows with a NULL in a ``Journal(key=)`` column (no identity:
  each is called); ``distinct_keys``: distinct identities among the other rows (the whole job's);
* ``recorded``: distinct identities whose outcome the journal already holds and would serve
  (results; kept errors only with ``keep_errors=True``);
* ``calls``: the calls left to make (before retries): with the dedup shuffle each distinct key not
  recorded is called once per job, exactly; without it (``ordered_wait``, ``dedup=False``) at most
  once per task that holds it, counted over the input's own partitions as the run would see them
  (an upper bound: a task that starts after another task recorded a key it holds is served).

Nothing is written: a journal is checked (another question's is refused, as the run would) but
a new one gets no manifest (a plan pins no question), and no function is opened or called.

Example::

    p = aiospark.plan(aiospark.unordered_wait, df, summarize, "id LONG, summary STRING",
                      journal=aiospark.Journal("/data/j", key="id"))
    print(p)              # rows 1,000,000 | NULL keys 0 | distinct keys 100,000 | recorded 60,000 | calls 40,000
    p.calls               # 40000
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .arrow_names import map_in_arrow, quoted
from .dedup import without_part
from .journaled import PLANNING, Durable, planning
from .schema import to_python

__all__ = ["RunPlan", "count_run", "plan", "planning"]

_ENTRIES = {("aiospark.spark.wait", "ordered_wait"), ("aiospark.spark.wait", "unordered_wait"),
            ("aiospark.spark.lookup_join", "lookup_join")}

_COUNTS = pa.schema([("rows", pa.int64()), ("null_keys", pa.int64()), ("misses", pa.int64()),
                     ("invalid", pa.int64()), ("distinct_keys", pa.int64()), ("recorded", pa.int64()),
                     ("requests", pa.int64()), ("prompt", pa.float64())])
_COUNTS_DDL = ("rows LONG, null_keys LONG, misses LONG, invalid LONG, distinct_keys LONG, recorded LONG, "
               "requests LONG, prompt DOUBLE")


@dataclass(frozen=True)
class RunPlan:
    """What :func:`plan` found (see the module docstring). ``misses``: a lookup join's rows with a
    NULL in an ``on`` column (a miss, no call; not in the other counts but ``rows``); ``invalid``:
    rows whose identity cannot be made (the run gives each its error, with no call); ``dedup``:
    whether the run pays equal keys once per job (else once per task); ``journal``: the journal's
    location as shown."""

    entry: str
    rows: int
    null_keys: int
    distinct_keys: int
    recorded: int
    calls: int
    invalid: int = 0
    misses: int = 0
    dedup: bool = False
    journal: str | None = None
    #: an LLM connector's estimated tokens for the calls left (prompt estimates + ``max_tokens``;
    #: see :mod:`aiospark.spark.plan_cost`), None for other functions
    tokens: int | None = None
    #: False when a chat has no ``max_tokens``: ``tokens`` and the costs count the prompts only
    completion_bounded: bool = True
    #: what those tokens cost at the function's ``price``, live and in the provider's batch lane
    cost_live: float | None = None
    cost_batch: float | None = None
    #: with a journal and an LLM connector: the prompt estimates of the calls left, and how many of
    #: them send a request (a NULL input sends none)
    prompt_left: float | None = None
    requests_left: int | None = None

    @property
    def exact(self) -> bool:
        """Whether :attr:`calls` is exact (no journal, or the dedup shuffle) or an upper bound."""
        return self.journal is None or self.dedup

    def __str__(self) -> str:
        parts = [f"{self.entry}: rows {self.rows:,}"]
        if self.journal is not None:
            parts += [f"NULL keys {self.null_keys:,} (each called)", f"distinct keys {self.distinct_keys:,}",
                      f"recorded {self.recorded:,}"]
            if self.misses:
                parts.append(f"NULL lookup keys {self.misses:,} (a miss, no call)")
            if self.invalid:
                parts.append(f"without identity (error rows) {self.invalid:,}")
        if self.journal is None or self.dedup:
            parts.append(f"calls left {self.calls:,}")
        else:
            parts.append(f"calls left at most {self.calls:,} (equal keys shared within a task only; a task that "
                         "starts after another recorded its keys pays less)")
        if self.tokens is not None:
            shown = f"estimated tokens {self.tokens:,}"
            parts.append(shown if self.completion_bounded else shown + " (prompts only: no max_tokens)")
        if self.cost_live is not None and self.cost_batch is not None:
            parts.append(f"estimated cost live {self.cost_live:,.4f}, batch lane {self.cost_batch:,.4f} "
                         "(the price's currency)")
        return " | ".join(parts)


def plan(entry: Callable[..., Any], df: Any, *args: Any, **kwargs: Any) -> RunPlan:
    """What ``entry(df, *args, **kwargs)`` would call, computed by Spark without calling anything.

    ``entry`` is :func:`aiospark.ordered_wait`, :func:`aiospark.unordered_wait` or
    :func:`aiospark.lookup_join`; the other arguments are that call's. Example::

        print(aiospark.plan(aiospark.lookup_join, orders, customers, on="cid", journal=journal))
    """
    # by name: this module is imported by the entry points' own module
    if (getattr(entry, "__module__", None), getattr(entry, "__name__", None)) not in _ENTRIES:
        raise TypeError("aiospark.plan(entry, df, ...) takes aiospark.ordered_wait, aiospark.unordered_wait or "
                        f"aiospark.lookup_join as entry, got {getattr(entry, '__name__', entry)!r}")
    token = PLANNING.set(True)
    try:
        result = entry(df, *args, **kwargs)
    finally:
        PLANNING.reset(token)
    assert isinstance(result, RunPlan)
    return result


def count_run(df: Any, durable: Durable, *, shuffled: Any, entry: str, lookup_on: Sequence[str] = (),
              estimate: Callable[[Any], float | None] | None = None) -> RunPlan:
    """The counts of a run over ``df`` (see the module docstring). ``shuffled``: the input as the
    dedup shuffle hands it to the tasks, or None when the run does not shuffle. ``lookup_on``: a
    lookup join's ``on`` columns (a NULL there is a miss, no call). ``estimate``: a row's prompt
    estimate (None: it sends no request), summed over the calls left (``prompt_left``)."""
    bound = durable.bound
    if bound is None:  # no journal: every row is called (a lookup join's NULL keys excepted)
        rows = df.count()
        misses = df.where(" OR ".join(f"{quoted(c)} IS NULL" for c in lookup_on)).count() if lookup_on else 0
        return RunPlan(entry, rows, 0, 0, 0, rows - misses, misses=misses)
    job = _sum(shuffled if shuffled is not None else _by_identity(df, durable), durable, True, lookup_on, estimate)
    paying = job
    if shuffled is None:  # each task pays for the distinct keys it holds: counted over the input's own partitions
        paying = _sum(df, durable, False, lookup_on, estimate)
    calls = paying["null_keys"] + paying["distinct_keys"] - paying["recorded"]
    left = {} if estimate is None else {"prompt_left": paying["prompt"], "requests_left": paying["requests"]}
    return RunPlan(entry, job["rows"], job["null_keys"], job["distinct_keys"], job["recorded"], calls,
                   invalid=job["invalid"], misses=job["misses"], dedup=shuffled is not None, journal=bound.shown,
                   **left)


def _by_identity(df: Any, durable: Durable) -> Any:
    """``df`` with equal identities in one task (the dedup shuffle), for the job's distinct keys."""
    from .dedup import shuffled

    return shuffled(df, durable, "aiospark.plan")


def _sum(df: Any, durable: Durable, has_part: bool, lookup_on: Sequence[str],
         estimate: Callable[[Any], float | None] | None = None) -> dict[str, Any]:
    counted = map_in_arrow(df, _Count(durable, has_part, lookup_on, estimate), _COUNTS_DDL)
    row = counted.groupBy().sum(*_COUNTS.names).collect()[0]
    return {name: (float if name == "prompt" else int)(row[f"sum({name})"] or 0) for name in _COUNTS.names}


class _Count:
    """The counting ``mapInArrow`` (picklable): one row of counts per task. The journal's store is
    asked for each chunk's new identities (a directory loads their buckets, Redis answers one
    MGET), exactly as a run's task asks it; nothing is written."""

    def __init__(self, durable: Durable, has_part: bool, lookup_on: Sequence[str],
                 estimate: Callable[[Any], float | None] | None = None):
        self.durable = durable
        self.has_part = has_part
        self.lookup_on = list(lookup_on)
        self.estimate = estimate

    def _estimate(self, row: Any) -> float | None:
        """A call's prompt estimate, or None when it sends no request (or cannot be estimated)."""
        if self.estimate is None:
            return None
        try:
            return self.estimate(row)
        except Exception:  # the run makes this row's error, with no request
            return None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        durable = self.durable
        bound = durable.bound
        assert bound is not None
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        store_task = bound.store_task(partition, None, "plan")
        rows = nulls = misses = invalid = recorded = requests = 0
        prompt = 0.0
        on = self.lookup_on
        seen: set[str] = set()
        whole = self.estimate is not None  # the rows themselves, to estimate those called
        try:
            known = store_task.load()
            for batch in batches:
                if self.has_part:
                    batch = without_part(batch)
                fresh: list[str] = []
                estimates: dict[str, float | None] = {}
                for value in to_python(batch if whole else batch.select(durable.columns)):
                    rows += 1
                    if on and any(value[c] is None for c in on):
                        misses += 1
                        continue
                    try:
                        identity = durable.of(value)
                    except Exception:  # the run makes this row's error, with no call
                        invalid += 1
                        continue
                    if identity is None:
                        nulls += 1
                        if (cost := self._estimate(value)) is not None:  # each such row is called
                            requests += 1
                            prompt += cost
                    elif identity not in seen:
                        seen.add(identity)
                        fresh.append(identity)
                        if whole:
                            estimates[identity] = self._estimate(value)
                if fresh and store_task.fetches_by_row:
                    known.update(store_task.fetch(fresh))
                served = [_served(known.get(i), bound.keep_errors) for i in fresh]
                recorded += sum(served)
                for identity, done in zip(fresh, served):
                    if not done and (cost := estimates.get(identity)) is not None:
                        requests += 1
                        prompt += cost
        finally:
            store_task.close()
        yield pa.RecordBatch.from_pylist([{"rows": rows, "null_keys": nulls, "misses": misses, "invalid": invalid,
                                           "distinct_keys": len(seen), "recorded": recorded, "requests": requests,
                                           "prompt": prompt}], schema=_COUNTS)


def _served(outcome: tuple[Any, str | None] | None, keep_errors: bool) -> bool:
    """Whether a run would serve ``outcome`` rather than call (a kept error only with keep_errors)."""
    if outcome is None:
        return False
    return outcome[0] is not None or keep_errors
