"""The Redis store: one key per outcome, read and written in pipelines.

Keys are ``<prefix>:<digest>:<identity>`` (``prefix`` from the URL's ``?prefix=`` query, default
``aiospark:journal``; ``<digest>`` the manifest's hash) and ``<prefix>:manifest``. A value is
``b"R" + pickled results`` or ``b"E" + error text``. Any task finds any row's outcome, whatever the
partitioning: a task asks for the identities of each input chunk in one MGET before feeding it,
and writes what completed in one pipeline of SETs about every second. A Redis that goes away
fails the task naming it (the URL without its password).

Example::

    store = RedisStore("redis://127.0.0.1:6379/0?prefix=myjob")
    store.check(manifest)
    task = store.task(manifest, 0, None, "17")
    task.fetch(['[1]', '[2]'])      # {'[1]': (b'...', None)} for those recorded
"""
from __future__ import annotations

import urllib.parse
from typing import Any

from .errors import JournalStoreError
from .location import Location, redacted
from .manifest import Manifest, refuse
from .segment import pickled

__all__ = ["JournalStoreError", "RedisStore", "RedisTask", "redacted", "split_url"]

DEFAULT_PREFIX = "aiospark:journal"
MGET_CHUNK = 1000


def split_url(url: str) -> tuple[str, str]:
    """``(url without ?prefix=, prefix)``."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for k, v in query if k == "prefix"), DEFAULT_PREFIX)
    if not prefix:
        raise ValueError(f"Journal({redacted(url)!r}): ?prefix= must not be empty")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "prefix"])
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, rest, "")), prefix


class RedisStore:
    """Outcomes as Redis keys (see the module docstring). Picklable: clients are made per task."""

    def __init__(self, url: str):
        self.loc = Location(url)
        self._url, self.prefix = split_url(url)  # credentials included: never printed
        self.shown = self.loc.shown

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


def decode(raw: bytes) -> tuple[bytes | None, str | None]:
    if raw[:1] == b"R":
        return raw[1:], None
    return None, raw[1:].decode("utf-8", "replace")


class RedisTask:
    """One task's part of a :class:`RedisStore`."""

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

    def load(self) -> dict[str, tuple[bytes | None, str | None]]:
        try:
            refuse(self.store.shown, self.store.read_manifest(self.client), self.manifest)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            raise self.store.failed(exc) from None
        return {}  # rows are asked for chunk by chunk (fetch)

    def fetch(self, identities: list[str]) -> dict[str, tuple[bytes | None, str | None]]:
        found: dict[str, tuple[bytes | None, str | None]] = {}
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

    def write(self, entries: list[tuple[str, Any, str | None]]) -> None:
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
