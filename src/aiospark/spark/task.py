"""One Spark task's pipeline: every entry point's rows go through here, and only here.

The three lanes (the rows lane of ``ordered_wait``/``unordered_wait``/``lookup_join``, the runners
of ``async_udf``, the columnar ``batch_format="pyarrow"`` lane) differ only at their edges: how
Arrow comes in as chunks of values, and how emitted values go back out as Arrow. Each builds a
:class:`TaskPlan` and hands it, with its chunks, to :func:`run_task`, which owns the sequence:

1. the worker's event loop (:func:`aiospark.runtime.worker_loop`);
2. the task's lease of the job's budget (:func:`aiospark.spark.budget.task_gate`);
3. the task's journal, its outcomes loaded (:meth:`Durable.open_task`); with a store asked row by
   row (Redis), each chunk's outcomes are fetched on the task thread before the chunk reaches the
   loop, and each row's identity is computed there, once (:class:`FedIdentities`);
4. the operator, built on the loop around the worker's opened function
   (:meth:`aiospark.spark.options.CallOptions.make_operator`): the journal and the budget reach it
   there and nowhere else; a recorded row completes inside the operator and leaves through its one
   emit path, in order, like any other;
5. :func:`aiospark.runtime.run_partition` feeds the chunks and yields the emitted values;
6. when the task ends, however it ends, the journal writes what is left
   (:func:`aiospark.spark.journaled.run_journaled`) and the unused budget goes back
   (:func:`aiospark.spark.budget.close_gate`).

Example (what the rows lane does in every task)::

    plan = TaskPlan(options, durable=durable, on_error=error_row, out_rows=10_000)
    for values in run_task(plan, (to_python(b) for b in batches)):
        yield converter.to_batch(values)
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..runtime import run_partition, worker_loop
from ..runtime.bridge import POST_ROWS
from .budget import close_gate, task_gate
from .journaled import run_journaled
from .metrics import task_reporter

if TYPE_CHECKING:
    from ..budget.ticket import BudgetTicket
    from ..core.operator import OnError
    from ..journal import TaskView
    from .journaled import Durable
    from .options import CallOptions

__all__ = ["FedIdentities", "OperatorJournal", "TaskPlan", "run_task"]


@dataclass(frozen=True)
class TaskPlan:
    """Everything :func:`run_task` needs, built by a lane (picklable when its callables are).

    ``options``: how calls are made (validated on the driver). ``durable``: row identities and the
    journal, if any (None: the element has no identity, e.g. the pyarrow lane's slices).
    ``journal_forms``: ``(encode, rebuild)`` of the task's journal (what is stored of a row's
    outputs, and how they are rebuilt from it and the row). ``on_error(value, exc) -> list``: a
    failed element's outputs instead of failing the task. ``invoke(function)``: the function as
    the operator calls it. ``units(value)``: the budget units of one element (None: one each).
    ``out_rows``/``post_rows``: values per yielded list / per post from the loop; ``count(values)``:
    the rows a list of emitted values stands for (a pyarrow slice stands for several); ``direct``:
    the type of a chunk that is output already (:func:`aiospark.runtime.run_partition`);
    ``out_seconds``: a list is yielded at least this often while output waits (None: by size only);
    ``recordable(results)``: whether a call's own results are an answer the journal may keep
    (None: every one)."""

    options: CallOptions
    durable: Durable | None = None
    journal_forms: tuple[Callable[[Any], Any] | None, Callable[[Any, Any], Any] | None] = (None, None)
    recordable: Callable[[list[Any]], bool] | None = None
    on_error: OnError | None = None
    invoke: Callable[[Any], Any] | None = None
    units: Callable[[Any], int] | None = None
    out_rows: int = 10_000
    post_rows: int = POST_ROWS
    count: Callable[[list[Any]], int] = len
    direct: type | None = None
    out_seconds: float | None = None


class FedIdentities:
    """The operator's ``identify`` when a task's journal is asked row by row (Redis): each row's
    identity is computed once, on the task thread, as its chunk is fed (to fetch the chunk's
    outcomes in one request), and handed to the operator when it admits the row.

    A row's identity is kept with the row object itself until the operator asks for it (the row
    is alive meanwhile: ``id()`` cannot be reused); a row it is not kept for (its identity raised)
    gets it computed again, where the operator makes the error that row's."""

    def __init__(self, of: Callable[[Any], str | None], view: TaskView):
        self.of = of
        self.view = view
        self._known: dict[int, tuple[Any, str | None]] = {}

    def fed(self, chunks: Iterable[Any]) -> Iterator[Any]:
        """``chunks`` as they are, each one's outcomes fetched first."""
        of, known, view = self.of, self._known, self.view
        for chunk in chunks:
            if type(chunk) is not list:  # output already (run_partition's ``direct``): nothing to fetch
                yield chunk
                continue
            wanted = []
            for value in chunk:
                try:
                    identity = of(value)
                except Exception:  # the operator calls of() again: that row's error
                    continue
                known[id(value)] = (value, identity)
                if identity is not None:
                    wanted.append(identity)
            view.prefetch(wanted)
            yield chunk

    def __call__(self, value: Any) -> str | None:
        hit = self._known.pop(id(value), None)
        if hit is not None and hit[0] is value:
            return hit[1]
        return self.of(value)


class OperatorJournal:
    """A task's journal as its operator sees it (:class:`aiospark.core.durable.TaskJournal`): the
    view's own bound methods, no call layer added; its bulk read of recorded rows
    (``TaskView.recorded_prefix``) where a row's outputs are stored whole, its ``adopt`` where
    they are rebuilt from the row (a lookup join's, error-row mode's)."""

    def __init__(self, view: TaskView):
        self.recorded = view.recorded
        self.record = view.record
        self.recorded_run: Callable[[list[str | None]], tuple[list[Any], int]] | None = None
        record_value = getattr(view, "record_value", None)
        if record_value is not None:  # the table route's view (aiospark.journal.table_task)
            self.record_value = record_value
        self.adopt: Callable[[Any, list[Any], bool], list[Any]] | None = None
        #: a task of key runs (TableView.key_runs): the operator only hands calls over
        self.records_only: bool = getattr(view, "records_only", False)
        if self.records_only:
            self.settled = view.settled  # type: ignore[attr-defined]
        #: look for runs of recorded rows ahead of admission (not on the table route: see TableView)
        self.looks_ahead: bool = getattr(view, "looks_ahead", True)
        if view.rebuild is None and self.looks_ahead:
            self.recorded_run = view.recorded_prefix
        elif view.rebuild is not None:
            self.adopt = view.adopt


def run_task(plan: TaskPlan, chunks: Iterable[list[Any]]) -> Iterator[list[Any]]:
    """The task's emitted values, a list at a time, in the order the operator emits them (see
    the module docstring). Nothing starts before the first ``next()``."""
    wl = worker_loop()
    options = plan.options
    # a Budget reaches a task pickled: as its BudgetTicket (Budget.__reduce__)
    gate = task_gate(cast("BudgetTicket | None", options.budget), options.batch_size is not None, count=plan.units)
    try:
        durable = plan.durable
        view: TaskView | None = None
        journal: OperatorJournal | None = None
        identify: Callable[[Any], str | None] | None = None
        keys: Callable[[Any], str] | None = None
        if durable is not None:
            identify, keys = durable.of, durable.idempotency
            view = durable.open_task(*plan.journal_forms)
            if view is not None:
                view.recordable = plan.recordable
            journal = OperatorJournal(view) if view is not None else None
            if view is not None and durable.asked_row_by_row(view):
                fed = FedIdentities(durable.of, view)
                identify, chunks = fed, fed.fed(chunks)

        async def make_operator(output: Callable[[Any], None]) -> Any:
            return await options.make_operator(wl, output, on_error=plan.on_error, invoke=plan.invoke, budget=gate,
                                               identify=identify, journal=journal, idempotency=keys)

        yield from run_journaled(view, run_partition(
            chunks, make_operator, capacity=options.max_capacity, out_rows=plan.out_rows, loop=wl,
            report=task_reporter(options.metrics), post_rows=plan.post_rows, count=plan.count, direct=plan.direct,
            out_seconds=plan.out_seconds))
    finally:
        close_gate(wl, gate)  # unused units go back to the budget
