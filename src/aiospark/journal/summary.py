"""Reading a whole journal from outside a job: what it holds, and dropping its kept errors.

:func:`summarize` says what identifies a journal (its manifest), its size and its outcomes
(results, kept errors with the first few texts); :func:`drop_errors` removes the kept errors, so
a rerun calls only the rows that failed. Both work on directory and Redis journals; they print
nothing (the ``aiospark journal`` command does, :mod:`aiospark.app.journal_cli`).

How errors are dropped (no tombstones: readers of older versions and the task's read path stay
as they are):

* directory: per partition directory, the segments that hold an error row are replaced by one new
  segment holding their results (in the layout tasks write) (``compact-<random>.arrow``, written and closed first), then those
  segments are deleted. At every moment the results are in the old segments, the new one, or
  both, so a reader never sees neither; a crash in between leaves both (equal results, harmless;
  run it again). Segments without errors are not touched. A segment a live task still writes is
  never rewritten: its writer holds a lease (:mod:`~aiospark.journal.lease`), renewed while it
  runs, quiet or not; a live lease refuses the drop, an expired one means its writer died.
  ``quiet`` (default 0) also refuses segments changed that recently (for writers that take no
  lease: journals written by versions before leases).
* Redis: every ``E`` key is deleted by a server-side script that deletes it only if it still holds
  an error, so a result written meanwhile by a running job is never removed.

Example::

    s = summarize("/data/journals/enrich-v1")
    s.results, s.errors, s.error_samples[:1]    # 1900, 100, [('[7]', 'ValueError: row 7 ...')]
    drop_errors("/data/journals/enrich-v1")     # 100
"""
from __future__ import annotations

import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from .api import DIRECTORY_SCHEMES, REDIS_SCHEMES
from .directory import MANIFEST, DirectoryStore
from .lease import SUFFIX, holder, stem, sweep
from .location import redacted
from .manifest import Manifest
from .redis_store import JournalStoreError, RedisStore
from .segment import BATCH_ROWS, BATCHED, Outcomes, read_outcomes, write_batch

#: by default no quiet period: a live writer is known by its lease (journal/lease.py), not by silence
QUIET_SECONDS = 0.0

#: error texts :func:`summarize` keeps by default
SAMPLES = 5

_DROP_IF_ERROR = """
if redis.call('GETRANGE', KEYS[1], 0, 0) == 'E' then return redis.call('DEL', KEYS[1]) end
return 0
"""


class JournalNotFound(ValueError):
    """There is no journal at the location (nothing there, a file, or no manifest)."""


@dataclass
class JournalSummary:
    """What :func:`summarize` found. ``segments`` is None for Redis; ``bytes`` counts the files
    (directory) or the keys' names and values (Redis); ``skipped``: rows with a bad checksum."""

    location: str
    store: str
    manifest: Manifest
    bytes: int = 0
    segments: int | None = None
    results: int = 0
    errors: int = 0
    skipped: int = 0
    error_samples: list[tuple[str, str]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Outcomes recorded (results and kept errors)."""
        return self.results + self.errors


def open_store(location: str) -> Any:
    """The store at ``location`` (a :class:`DirectoryStore` or :class:`RedisStore`)."""
    if not isinstance(location, str) or not location.strip():
        raise JournalNotFound(f"not a journal location: {location!r}")
    scheme = urllib.parse.urlsplit(location).scheme.lower() if "://" in location else ""
    if scheme in REDIS_SCHEMES:
        return RedisStore(location)
    if scheme == "" or scheme in DIRECTORY_SCHEMES:
        return DirectoryStore(location)
    raise JournalNotFound(f"{redacted(location)}: {scheme}:// is not a journal location (a directory path or URI, "
                          "or a redis:// URL)")


def summarize(location: str, samples: int = SAMPLES) -> JournalSummary:
    """What the journal at ``location`` holds (see :class:`JournalSummary`).

    Raises :class:`JournalNotFound` when there is none, :class:`JournalStoreError` (Redis) or
    ``OSError`` (directory) when the store cannot be read."""
    store = open_store(location)
    if isinstance(store, RedisStore):
        return _redis_summary(store, samples)
    return _directory_summary(store, samples)


def drop_errors(location: str, quiet: float = QUIET_SECONDS) -> int:
    """Remove the kept errors of the journal at ``location``; returns how many were removed.
    A rerun then calls those rows again (see the module docstring for how, and its safety).
    A directory segment holding errors whose writer's lease is live (or that changed less than
    ``quiet`` seconds ago) refuses the drop (:class:`JournalStoreError`): a task still writes it."""
    store = open_store(location)
    if isinstance(store, RedisStore):
        return _redis_drop(store)
    return _directory_drop(store, quiet)


# ---------------------------------------------------------------------- directory
def _directory_manifest(store: DirectoryStore) -> Manifest:
    fs, root = store.fs
    kind = fs.get_file_info(root).type
    if kind == pafs.FileType.NotFound:
        raise JournalNotFound(f"no journal at {store.shown}: nothing is there")
    if kind == pafs.FileType.File:
        raise JournalNotFound(f"no journal at {store.shown}: it is a file; a directory journal is a directory "
                              f"holding {MANIFEST}")
    manifest = store.read_manifest()
    if manifest is None:
        raise JournalNotFound(f"no journal at {store.shown}: the directory holds no {MANIFEST} (a journal "
                              "writes it with its first outcome)")
    return manifest


def _partitions(store: DirectoryStore, manifest: Manifest) -> tuple[int, dict[str, list[Any]]]:
    """``(bytes of every file under the location, {partition directory: its segments' infos})``."""
    fs, root = store.fs
    size = 0
    parts: dict[str, list[Any]] = {}
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        size += info.size or 0
        if info.path.endswith(".arrow") and info.path.startswith(f"{root}/{manifest.digest}/"):
            parts.setdefault(info.path.rsplit("/", 1)[0], []).append(info)
    return size, parts


def _read(fs: pafs.FileSystem, info: Any) -> tuple[Outcomes, int]:
    try:
        with fs.open_input_stream(info.path) as f:
            return read_outcomes(f.read())
    except OSError:
        return {}, 0  # vanished meanwhile (a concurrent drop): its rows are elsewhere or called again


def _merge(found: list[Outcomes]) -> Outcomes:
    known: Outcomes = {}
    for outcomes in found:  # as a task reads them: a result outranks a kept error
        for identity, outcome in outcomes.items():
            if outcome[0] is None and identity in known:
                continue
            known[identity] = outcome
    return known


def _directory_summary(store: DirectoryStore, samples: int) -> JournalSummary:
    manifest = _directory_manifest(store)
    fs, _ = store.fs
    size, parts = _partitions(store, manifest)
    out = JournalSummary(store.shown, "directory", manifest, bytes=size,
                         segments=sum(len(v) for v in parts.values()))
    for directory in sorted(parts):
        read = [_read(fs, info) for info in sorted(parts[directory], key=lambda i: i.path)]
        out.skipped += sum(skipped for _, skipped in read)
        for identity, (payload, error) in sorted(_merge([found for found, _ in read]).items()):
            if payload is not None:
                out.results += 1
                continue
            out.errors += 1
            if len(out.error_samples) < samples:
                out.error_samples.append((identity, error or ""))
    return out


def _directory_drop(store: DirectoryStore, quiet: float) -> int:
    manifest = _directory_manifest(store)
    fs, _ = store.fs
    _, parts = _partitions(store, manifest)
    now = time.time()
    plan = []
    for directory in sorted(parts):
        infos = sorted(parts[directory], key=lambda i: i.path)
        read = [(info, _read(fs, info)[0]) for info in infos]
        merged = _merge([found for _, found in read])
        errors = sum(1 for payload, _ in merged.values() if payload is None)
        if not errors:
            continue
        affected = [(info, found) for info, found in read if any(p is None for p, _ in found.values())]
        for info, _ in affected:
            expires = holder(fs, info.path, now)
            if expires is not None:
                raise JournalStoreError(
                    f"the journal at {store.shown} is being written (segment {info.path} is held by a running task, "
                    f"its lease runs until {time.strftime('%H:%M:%S', time.localtime(expires))}): drop its errors "
                    "once the job has ended (a killed task's lease expires by itself)")
        busy = [i.path for i, _ in affected if i.mtime is not None and now - i.mtime.timestamp() < quiet]
        if busy:
            raise JournalStoreError(f"the journal at {store.shown} is being written (segment {busy[0]} changed "
                                    f"less than {quiet:g} s ago): drop its errors once the job has ended")
        plan.append((directory, affected, errors))
    dropped = 0
    for directory, affected, errors in plan:
        results = _merge([found for _, found in affected])
        entries = [(i, r, None) for i, (r, _) in sorted(results.items()) if r is not None]
        for lease in sorted({stem(info.path) + SUFFIX for info, _ in affected}):
            try:  # first: a dead writer's expired lease (a live one refused the drop above) is taken
                fs.delete_file(lease)  # over; a stalled writer that resumes finds it gone (journal/lease.py)
            except FileNotFoundError:
                pass
        if entries:  # the new segment is complete and closed before any old one goes (the tasks' layout)
            with fs.open_output_stream(f"{directory}/compact-{uuid.uuid4().hex[:8]}.arrow") as sink, \
                    pa.ipc.new_stream(sink, BATCHED) as writer:
                for start in range(0, len(entries), BATCH_ROWS):
                    write_batch(writer, entries[start:start + BATCH_ROWS])
        for info, _ in affected:
            try:
                fs.delete_file(info.path)
            except FileNotFoundError:
                pass  # a stalled writer that resumed deleted its own (journal/lease.py)
        dropped += errors
    root = store.fs[1]
    listing = fs.get_file_info(pafs.FileSelector(f"{root}/{manifest.digest}", recursive=True, allow_not_found=True))
    sweep(fs, [i for i in listing if i.type == pafs.FileType.File])
    return dropped


# ---------------------------------------------------------------------- Redis
def _redis_manifest(store: RedisStore, client: Any) -> Manifest:
    try:
        manifest = store.read_manifest(client)
    except Exception as exc:
        raise store.failed(exc) from None
    if manifest is None:
        raise JournalNotFound(f"no journal at {store.shown}: Redis holds no key {store.prefix}:manifest (a journal "
                              "writes it with its first outcome; ?prefix= names the journal)")
    return manifest


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _redis_keys(client: Any, prefix: str, chunk: int = 1000) -> Any:
    """The journal's outcome keys, in lists of up to ``chunk``."""
    batch: list[bytes] = []
    for key in client.scan_iter(match=_glob_escape(prefix) + "*", count=chunk):
        batch.append(key)
        if len(batch) >= chunk:
            yield batch
            batch = []
    if batch:
        yield batch


def _redis_summary(store: RedisStore, samples: int) -> JournalSummary:
    client = store.client()
    try:
        manifest = _redis_manifest(store, client)
        prefix = f"{store.prefix}:{manifest.digest}:"
        out = JournalSummary(store.shown, "redis", manifest)
        try:
            for keys in _redis_keys(client, prefix):
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.getrange(key, 0, 0)
                    pipe.strlen(key)
                answers = pipe.execute()
                wanted: list[bytes] = []
                for key, kind, length in zip(keys, answers[::2], answers[1::2]):
                    if not length:
                        continue  # deleted meanwhile
                    out.bytes += len(key) + length
                    if kind == b"E":
                        out.errors += 1
                        if len(out.error_samples) + len(wanted) < samples:
                            wanted.append(key)
                    else:
                        out.results += 1
                for key, raw in zip(wanted, client.mget(wanted) if wanted else []):
                    if raw:
                        out.error_samples.append((key.decode("utf-8", "replace")[len(prefix):],
                                                  raw[1:].decode("utf-8", "replace")))
        except Exception as exc:
            raise store.failed(exc) from None
        return out
    finally:
        client.close()


def _redis_drop(store: RedisStore) -> int:
    client = store.client()
    try:
        manifest = _redis_manifest(store, client)
        prefix = f"{store.prefix}:{manifest.digest}:"
        dropped = 0
        try:
            script = client.register_script(_DROP_IF_ERROR)
            for keys in _redis_keys(client, prefix):
                kinds = client.pipeline(transaction=False)
                for key in keys:
                    kinds.getrange(key, 0, 0)
                errors = [k for k, kind in zip(keys, kinds.execute()) if kind == b"E"]
                if errors:
                    pipe = client.pipeline(transaction=False)
                    for key in errors:
                        script(keys=[key], client=pipe)
                    dropped += sum(int(n) for n in pipe.execute())
        except Exception as exc:
            raise store.failed(exc) from None
        return dropped
    finally:
        client.close()
