"""The journal's Redis store: one key per outcome, read and written in pipelines.

A :class:`~aiospark.journal.store.JournalStore` (``aiospark.Journal("redis://...")`` opens it,
through :mod:`aiospark.journal.schemes`). Keys are ``<prefix>:<digest>:<identity>`` (``prefix``
from the URL's ``?prefix=`` query, default ``aiospark:journal``; ``<digest>`` the manifest's hash)
and ``<prefix>:manifest``. A value is ``b"R" + pickled results`` or ``b"E" + error text``. Any task
finds any row's outcome, whatever the partitioning: a task is asked row by row
(:attr:`RedisTask.fetches_by_row`), the identities of each input chunk in one MGET before feeding
it, and writes what completed in one pipeline of SETs about every second. A Redis that goes away
fails the task naming it (the URL without its password).

``aiospark journal --drop-errors`` deletes every ``E`` key with a server-side script that deletes
it only if it still holds an error, so a result written meanwhile by a running job is never
removed. With one key per outcome the summary's counts are exact, and there is nothing to compact:
``--compact`` changes nothing and says so (exit 0, so a script may compact every journal alike;
with ``--drop-errors`` the errors are still dropped).

Example::

    store = RedisStore("redis://127.0.0.1:6379/0?prefix=myjob")
    store.check(manifest)
    task = store.task(manifest, 0, None, "17")
    task.fetch(['[1]', '[2]'])      # {'[1]': (b'...', None)} for those recorded
"""
from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

from ...journal.errors import JournalStoreError
from ...journal.location import redacted
from ...journal.manifest import Manifest, refuse
from ...journal.segment import pickled
from ...journal.store import Compaction, Entry, JournalNotFound, JournalStore, JournalSummary, Outcomes, StoreTask

__all__ = ["DEFAULT_PREFIX", "LAYOUT", "RedisStore", "RedisTask", "split_url"]

DEFAULT_PREFIX = "aiospark:journal"
#: how a Redis journal keeps its outcomes, as ``aiospark journal`` says it
LAYOUT = "one key per outcome: counts exact, nothing to compact"
MGET_CHUNK = 1000

_DROP_IF_ERROR = """
if redis.call('GETRANGE', KEYS[1], 0, 0) == 'E' then return redis.call('DEL', KEYS[1]) end
return 0
"""


def split_url(url: str) -> tuple[str, str]:
    """``(url without ?prefix=, prefix)``."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for k, v in query if k == "prefix"), DEFAULT_PREFIX)
    if not prefix:
        raise ValueError(f"Journal({redacted(url)!r}): ?prefix= must not be empty")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "prefix"])
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, rest, "")), prefix


class RedisStore(JournalStore):
    """Outcomes as Redis keys (see the module docstring). Picklable: clients are made per task."""

    kind = "redis"

    def __init__(self, url: str):
        super().__init__(url)
        self._url, self.prefix = split_url(url)  # credentials included: never printed

    @staticmethod
    def versioned(location: str, version: str) -> str:
        """The prefix ``<prefix>:v=<version>``."""
        parts = urllib.parse.urlsplit(location)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        prefix = next((v for k, v in query if k == "prefix"), DEFAULT_PREFIX) or DEFAULT_PREFIX
        query = [(k, v) for k, v in query if k != "prefix"] + [("prefix", f"{prefix}:v={version}")]
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, urllib.parse.urlencode(query),
                                        parts.fragment))

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self._url, socket_timeout=10, socket_connect_timeout=5)

    def failed(self, exc: BaseException) -> JournalStoreError:
        return JournalStoreError(self.loc.scrub(f"the journal's Redis at {self.shown} failed: {type(exc).__name__}: "
                                                f"{exc}"))

    def read_manifest(self, client: Any) -> Manifest | None:
        raw = client.get(f"{self.prefix}:manifest")
        return None if raw is None else Manifest.from_json(raw.decode())

    def check(self, manifest: Manifest) -> None:
        client = self.client()
        try:
            recorded = self.read_manifest(client)
        except Exception as exc:
            raise self.failed(exc) from None
        finally:
            client.close()
        refuse(self.shown, recorded, manifest)

    def task(self, manifest: Manifest, partition: int, batch: str | None, attempt: str) -> RedisTask:
        return RedisTask(self, manifest)

    def summarize(self, samples: int) -> JournalSummary:
        return _redis_summary(self, samples)

    def drop_errors(self, quiet: float) -> int:
        return _redis_drop(self)  # a script deletes a key only while it holds an error: no quiet needed

    def compact(self, quiet: float, drop_errors: bool = False) -> Compaction:
        """Nothing to rewrite (one key per outcome); the errors dropped when asked, and the counts."""
        dropped = _redis_drop(self) if drop_errors else 0
        summary = _redis_summary(self, 0)
        return Compaction(self.shown, "redis", results=summary.results, errors=summary.errors, dropped=dropped,
                          note="a Redis journal keeps one key per outcome (its counts are exact)")


def decode(raw: bytes) -> tuple[bytes | None, str | None]:
    """``(pickled results, None)`` or ``(None, error text)`` of a stored value."""
    if raw[:1] == b"R":
        return raw[1:], None
    return None, raw[1:].decode("utf-8", "replace")


class RedisTask(StoreTask):
    """One task's part of a :class:`RedisStore`: asked for each input chunk's identities."""

    fetches_by_row = True

    def __init__(self, store: RedisStore, manifest: Manifest):
        self.store = store
        self.manifest = manifest
        self.keys = f"{store.prefix}:{manifest.digest}:"
        self._client: Any = None
        self._manifest_written = False

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.store.client()
        return self._client

    def load(self) -> Outcomes:
        try:
            refuse(self.store.shown, self.store.read_manifest(self.client), self.manifest)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            raise self.store.failed(exc) from None
        return {}  # rows are asked for chunk by chunk (fetch)

    def fetch(self, identities: Sequence[str]) -> Outcomes:
        found: Outcomes = {}
        prefix = self.keys
        try:
            for start in range(0, len(identities), MGET_CHUNK):
                part = identities[start:start + MGET_CHUNK]
                for identity, raw in zip(part, self.client.mget([prefix + i for i in part])):
                    if raw:
                        found[identity] = decode(raw)
        except Exception as exc:
            raise self.store.failed(exc) from None
        return found

    def write(self, entries: list[Entry]) -> None:
        """Store ``entries`` (identity, results or None, error text or None): one pipeline."""
        entries = [(i, None if e is not None else pickled(r), e) for i, r, e in entries]  # a TypeError first
        try:
            pipe = self.client.pipeline(transaction=False)
            if not self._manifest_written:
                pipe.set(f"{self.store.prefix}:manifest", self.manifest.to_json(), nx=True)
                self._manifest_written = True
            prefix = self.keys
            for identity, payload, error in entries:
                if error is None:
                    pipe.set(prefix + identity, b"R" + payload)
                else:  # a kept error never replaces a result another task recorded
                    pipe.set(prefix + identity, b"E" + (error or "").encode("utf-8", "replace"), nx=True)
            pipe.execute()
        except Exception as exc:
            raise self.store.failed(exc) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# ---------------------------------------------------------------------- aiospark journal
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


def _redis_keys(client: Any, prefix: str, chunk: int = 1000) -> Iterator[list[bytes]]:
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
        out = JournalSummary(store.shown, "redis", manifest, layout=LAYOUT)
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
