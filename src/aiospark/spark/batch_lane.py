"""The provider batch lane (half the price when the answer can wait): :func:`submit_batches` and
:func:`collect_batches`, with the journal between them.

``submit_batches(df, chat, journal=j)`` turns every row the journal has no answer for, and no
earlier submit put in a batch, into a request line (``custom_id``: the row's
``aiospark.idempotency_key()``; the body the live lane would send), in files within the
provider's limits; for each file: upload, record it in the journal, create the batch, record the
batch. It returns as soon as the batches exist: nothing waits in a Spark task.

``collect_batches(df, chat, journal=j)`` waits on the driver until every recorded batch has
ended (polling, ``timeout=``), keeps each batch's answers in the journal, then runs
``unordered_wait(df, chat, ...)`` with the answers in place of requests: each row is read by the
live function's own code (structured outputs, ``on_error``, error rows, usage), recorded in the
journal like a live answer, and a row the batch did not answer is its error row -- or, with
``fallback="live"``, a live request.

Example::

    j = aiospark.Journal("/data/j/tickets", key="id")
    aiospark.submit_batches(df, chat, journal=j)            # minutes: build, upload, create
    # ... later, or in another job (a crash in between costs nothing) ...
    out = aiospark.collect_batches(df, chat, journal=j, on_error="row")
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from ..connectors.openai.batch_answers import FALLBACKS, BatchAnswers, body_hash
from ..journal import Journal
from ..journal.directory import DirectoryStore
from ..runtime.worker_loop import worker_loop
from .arrow_names import map_in_arrow
from .batch_budget import BatchBudget
from .batch_records import BatchRecords
from .journaled import Durable
from .schema import to_python

__all__ = ["BatchSubmission", "BatchesPending", "collect_batches", "submit_batches"]

T = TypeVar("T")
_LINES = pa.schema([("custom_id", pa.string()), ("hash", pa.string()), ("body", pa.string()), ("units", pa.float64())])
_ENTRY = "unordered_wait"


class BatchesPending(TimeoutError):
    """``collect_batches`` gave up waiting: some batches have not ended (``pending``: their records)."""

    def __init__(self, message: str, pending: list[dict[str, Any]]):
        super().__init__(message)
        self.pending = pending


@dataclass
class BatchSubmission:
    """What :func:`submit_batches` did: ``batches`` (the batch ids made now, resumed ones included),
    ``submitted`` (requests in them), ``resumed`` (requests of a killed run's file, batched now),
    ``already`` (rows skipped: answered in the journal or in an earlier batch), ``over_budget``
    (requests the budget could not cover) and ``too_large`` (a request over ``max_bytes`` alone):
    those rows are in no batch."""

    batches: list[str] = field(default_factory=list)
    submitted: int = 0
    resumed: int = 0
    already: int = 0
    over_budget: int = 0
    too_large: int = 0


class _Control:
    """The driver's batch control client on the process's one event loop (:func:`worker_loop`):
    the Spark work (``toLocalIterator``) and the journal's records stay on the caller's thread, each
    request is one coroutine run there. ``with _Control(fn) as call: call(client.retrieve(id))``."""

    def __init__(self, function: Any):
        self.client = _client(function)
        self.loop = worker_loop()

    def __call__(self, coro: Awaitable[T]) -> T:
        return self.loop.submit(coro).result()  # type: ignore[arg-type]

    def __enter__(self) -> _Control:
        self(self.client.open())
        return self

    def __exit__(self, *exc: Any) -> None:
        self(self.client.close())


def _check(df: Any, function: Any, journal: Any, what: str) -> tuple[Durable, BatchRecords]:
    from ..connectors.openai.function import OpenAIFunction

    if not hasattr(df, "mapInArrow") or not hasattr(df, "sparkSession"):
        raise TypeError(f"{what}() takes a pyspark DataFrame first, got {type(df).__name__}")
    if not isinstance(function, OpenAIFunction):
        raise TypeError(f"{what}() takes an aiospark OpenAIChat or OpenAIEmbeddings (the provider Batch API speaks "
                        f"their requests), got {type(function).__name__}")
    if not isinstance(journal, Journal):
        raise TypeError(f"{what}() needs journal=aiospark.Journal(...): the journal records each batch so that no "
                        f"row is ever submitted twice, got {type(journal).__name__}")
    if not isinstance(journal.store, DirectoryStore):
        raise ValueError(f"{what}(): the batch lane keeps its batches in a directory journal (a local path or an "
                         f"object store), not in {journal.location!r}")
    schema = function.output_schema(df).simpleString()
    durable = Durable.prepare(journal, df, _ENTRY, function, schema)
    assert durable.bound is not None
    return durable, BatchRecords(journal.store, durable.bound.manifest.digest)


def _client(function: Any) -> Any:
    from ..connectors.openai.batch_api import BatchClient

    query = "".join(f"{'&' if i else '?'}{k}={v}" for i, (k, v) in enumerate(function._query.items()))
    # a handful of control requests on the driver: aiohttp unless pyreqwest was asked for by name
    # (pyreqwest's native client crashed a driver that made one on a fresh loop in a second thread)
    return BatchClient(function.base_url + query, function._key, headers=function._headers,
                       client="pyreqwest" if function.client == "pyreqwest" else "aiohttp", api_key_env=None)


# ---------------------------------------------------------------------------------------- submit

class _Lines:
    """The request lines of a partition's rows not answered in the journal, each with its estimate
    for the budget (picklable)."""

    def __init__(self, durable: Durable, function: Any, budget: BatchBudget | None):
        self.durable = durable
        self.function = function
        self.budget = budget

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        durable, fn = self.durable, self.function
        bound = durable.bound
        assert bound is not None and durable.idempotency is not None
        ctx = TaskContext.get()
        store_task = bound.store_task(ctx.partitionId() if ctx is not None else 0, None, "batch")
        try:
            known = store_task.load()
            for batch in batches:
                rows = to_python(batch)
                identities = []
                for row in rows:
                    try:
                        identities.append(durable.of(row))
                    except Exception:  # the collect gives this row its error
                        identities.append(None)
                fresh = [i for i in set(identities) if i is not None and i not in known]
                if fresh and store_task.fetches_by_row:
                    known.update(store_task.fetch(fresh))
                out: dict[str, list[Any]] = {"custom_id": [], "hash": [], "body": [], "units": []}
                for row, identity in zip(rows, identities):
                    outcome = known.get(identity) if identity is not None else None
                    if outcome is not None and (outcome[0] is not None or bound.keep_errors):
                        # answered (or a kept error): the journal serves it, nothing to pay; counted
                        out["custom_id"].append(durable.idempotency(row))
                        out["hash"].append(None)
                        out["body"].append(None)
                        out["units"].append(0.0)
                        continue
                    value = row.get(fn.input)
                    if value is None:
                        continue  # a NULL input is a NULL answer, never a request
                    try:
                        body, _ = fn.request_of(value)
                        units = self.budget.units(row) if self.budget is not None else 0.0
                        custom_id = durable.idempotency(row)  # (a row without identity raises here too)
                    except Exception:  # the collect reads it again and makes its error row
                        continue
                    body = {**fn.extra_body, **body}
                    out["custom_id"].append(custom_id)
                    out["hash"].append(body_hash(body))
                    out["body"].append(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
                    out["units"].append(units)
                yield pa.RecordBatch.from_pydict(out, schema=_LINES)
        finally:
            store_task.close()


def submit_batches(df: Any, function: Any, *, journal: Journal, max_requests: int | None = None,
                   max_bytes: int | None = None, budget: Any = None) -> BatchSubmission:
    """Submit the rows of ``df`` not yet answered (in ``journal``) nor in a batch, as provider
    batches of ``function``'s requests; return once the batches exist (see the module doc).

    ``max_requests`` / ``max_bytes``: a file's limits (default OpenAI's: 50,000 requests, 200 MB);
    a request longer than ``max_bytes`` alone is not sent (``too_large``). Equal rows (equal
    ``custom_id``) are one request. Rows with a NULL input are not sent (their answer is NULL).
    ``budget``: an :class:`aiospark.Budget` each request's estimate is reserved from, at the batch
    price; a request it cannot cover is not sent (``over_budget``; see
    :mod:`~aiospark.spark.batch_budget`). Run it again at any time: it first finishes what a
    killed run left (a file uploaded and recorded whose batch was not recorded: adopted if the
    provider made it, else created), then submits only rows in no batch.

    Example::

        sub = aiospark.submit_batches(df, chat, journal=aiospark.Journal(path, key="id"))
        sub.batches, sub.submitted          # (['batch_6a...'], 10000)
    """
    from ..connectors.openai.batch_api import MAX_BYTES, MAX_REQUESTS, TERMINAL, BatchRequest, plan_files

    max_requests = _limit("max_requests", max_requests, MAX_REQUESTS)
    max_bytes = _limit("max_bytes", max_bytes, MAX_BYTES)
    priced = None if budget is None else BatchBudget(budget, function, "submit_batches")
    durable, records = _check(df, function, journal, "submit_batches")
    endpoint = f"/v1{function._path}"
    lines = map_in_arrow(df, _Lines(durable, function, priced),
                         "custom_id STRING, hash STRING, body STRING, units DOUBLE")
    lines = lines.dropDuplicates(["custom_id"])
    result = BatchSubmission()

    def send(call: _Control, chunk: _Chunk) -> None:
        requests = [BatchRequest(cid, json.loads(body)) for cid, body in zip(chunk.ids, chunk.bodies)]
        (data,) = plan_files(requests, endpoint, max_requests, max_bytes)  # one file: cut by its size
        file_id = call(call.client.upload(data))
        records.record_upload(file_id, endpoint, chunk.ids, chunk.hashes, chunk.task, chunk.units)  # before the batch
        info = call(call.client.create(file_id, endpoint, {"aiospark_file": file_id}))
        records.record_batch(file_id, info)
        result.batches.append(info.id)
        result.submitted += len(chunk.ids)

    with _Control(function) as call:
        client = call.client
        batches = records.batches()
        for upload in records.uploads():  # a killed run's file without its batch
            if upload["file_id"] not in batches:
                info = call(client.find(upload["file_id"], since=upload["at"] - 3600))
                if info is None:
                    info = call(client.create(upload["file_id"], upload["endpoint"], {"aiospark_file": upload["file_id"]}))
                records.record_batch(upload["file_id"], info)
                result.batches.append(info.id)
                result.resumed += len(upload["custom_ids"])
        for record in records.batches().values():  # a batch failed whole frees its rows
            if record["status"] not in TERMINAL:
                records.record_batch(record["file_id"], call(client.retrieve(record["batch_id"])))
        done = records.submitted()
        chunk = _Chunk(f"batch-file-{uuid.uuid4().hex}")
        for row in lines.toLocalIterator():
            if row["body"] is None or row["custom_id"] in done:
                result.already += 1
                continue
            line = _line(row["custom_id"], endpoint, row["body"])
            if len(line) > max_bytes:
                result.too_large += 1
                continue
            if chunk.ids and (len(chunk.ids) >= max_requests or chunk.size + len(line) > max_bytes):
                send(call, chunk)
                chunk = _Chunk(f"batch-file-{uuid.uuid4().hex}")
            if priced is not None and not priced.reserve(chunk.task, row["units"]):
                result.over_budget += 1
                continue
            chunk.add(row, len(line))
        if chunk.ids:
            send(call, chunk)
    return result


class _Chunk:
    """The lines of one file, as the driver gathers them (``task``: its reservation's name)."""

    def __init__(self, task: str):
        self.task = task
        self.ids: list[str] = []
        self.hashes: list[str] = []
        self.bodies: list[str] = []
        self.units: list[float] = []
        self.size = 0

    def add(self, row: Any, size: int) -> None:
        self.ids.append(row["custom_id"])
        self.hashes.append(row["hash"])
        self.bodies.append(row["body"])
        self.units.append(row["units"])
        self.size += size


def _line(custom_id: str, endpoint: str, body: str) -> bytes:
    """A request line's bytes as :func:`~aiospark.connectors.openai.batch_files.plan_files` writes it."""
    head = json.dumps({"custom_id": custom_id, "method": "POST", "url": endpoint}, separators=(",", ":"),
                      ensure_ascii=False)
    return f"{head[:-1]},\"body\":{body}}}\n".encode()


def _limit(name: str, value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 (a file's limit), got {value!r}")
    return value


# ---------------------------------------------------------------------------------------- collect

def collect_batches(df: Any, function: Any, *, journal: Journal, fallback: str = "error", wait: bool = True,
                    poll_interval: float = 10.0, timeout: float | None = None, progress: bool = False,
                    budget: Any = None, **options: Any) -> Any:
    """``df`` with ``function``'s output column, answered by the batches :func:`submit_batches`
    made (see the module doc): a DataFrame, as ``unordered_wait(df, function, ...)`` gives.

    ``fallback``: what a row without a batch answer becomes -- ``"error"`` (its error, an error
    row with ``on_error="row"``) or ``"live"`` (a live request). ``wait``: poll every
    ``poll_interval`` seconds until every batch has ended (``timeout`` seconds at most, then
    :class:`BatchesPending`); ``wait=False`` raises it at once while any batch runs. ``progress``:
    print a line per poll (requests completed and failed of all batches). ``options`` go to
    ``unordered_wait`` (``on_error``, ``capacity``, ``timeout`` is this function's own: pass the
    rows' one as ``row_timeout=``, ...). ``budget``: the Budget of :func:`submit_batches`; each ended
    batch's billed usage replaces what submit reserved (:mod:`~aiospark.spark.batch_budget`).

    Example::

        out = aiospark.collect_batches(df, chat, journal=j, fallback="live", on_error="row")
    """
    from .wait import unordered_wait

    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be 'error' (a row without a batch answer is an error row) or 'live' "
                         f"(it is sent as a live request), got {fallback!r}")
    if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or not 0 < poll_interval < 86400:
        raise ValueError(f"poll_interval must be a number of seconds in (0, 86400), got {poll_interval!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    if "row_timeout" in options:
        options["timeout"] = options.pop("row_timeout")
    priced = None if budget is None else BatchBudget(budget, function, "collect_batches")
    if priced is not None and fallback == "live":
        raise ValueError("collect_batches(budget=..., fallback='live'): the live calls would be charged beside the "
                         "batches' bill; collect with on_error='row' and send the error rows through "
                         "unordered_wait(..., budget=...)")
    durable, records = _check(df, function, journal, "collect_batches")
    uploads = {u["file_id"]: u for u in records.uploads()}

    with _Control(function) as call:
        client = call.client
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for record in [b for b in records.batches().values() if not b.get("answers")]:
                info = call(client.retrieve(record["batch_id"]))
                if info.terminal:
                    upload = uploads.get(record["file_id"]) or {}
                    ids = upload.get("custom_ids")
                    found = call(client.results(info, ids))
                    hashes = dict(zip(ids or [], upload.get("hashes") or []))
                    records.record_batch(record["file_id"], info, records.write_answers(info.id, found, hashes))
                else:
                    records.record_batch(record["file_id"], info)
            left = [b for b in records.batches().values() if not b.get("answers")]
            if progress:
                print(status_line(records), file=sys.stderr, flush=True)
            if not left:
                break
            if not wait or (deadline is not None and time.monotonic() >= deadline):
                raise BatchesPending(f"collect_batches: {len(left)} batch(es) have not ended "
                                     f"({', '.join(b['batch_id'] + ' ' + b['status'] for b in left[:5])}): "
                                     "call it again later", left)
            time.sleep(poll_interval if deadline is None else max(0.0, min(poll_interval, deadline - time.monotonic())))
    files = records.answer_files()
    if priced is not None:
        settle(priced, records, uploads, files)
    answers = BatchAnswers(files, fallback)
    return unordered_wait(df, function.with_batch_answers(answers), function.output_schema(df),
                          journal=journal, **options)


def settle(priced: BatchBudget, records: BatchRecords, uploads: dict[str, dict[str, Any]], files: Any) -> None:
    """Each ended batch's bill replaces its file's reservation (once per batch and Budget)."""
    kept = files()
    for record in records.batches().values():
        upload = uploads.get(record["file_id"])
        if not record.get("answers") or upload is None:
            continue
        ids = upload["custom_ids"]
        reserved = dict(zip(ids, upload.get("units") or [0.0] * len(ids)))
        results = {cid: (json.loads(kept[cid][1]) if cid in kept and kept[cid][1] is not None else None)
                   for cid in ids}
        priced.settle(upload.get("task") or f"batch-file-{record['file_id']}", record["batch_id"], reserved, results)


def status_line(records: BatchRecords) -> str:
    """``batches: 3 (2 completed, 1 in_progress); requests: 9,800 of 10,000 completed, 12 failed``."""
    batches = list(records.batches().values())
    states: dict[str, int] = {}
    for b in batches:
        states[b["status"]] = states.get(b["status"], 0) + 1
    total = sum(b.get("total") or 0 for b in batches)
    completed = sum(b.get("completed") or 0 for b in batches)
    failed = sum(b.get("failed") or 0 for b in batches)
    shown = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return (f"aiospark batches: {len(batches)} ({shown}); requests: {completed:,} of {total:,} completed, "
            f"{failed:,} failed")
