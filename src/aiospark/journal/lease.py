"""Leases of a directory journal's open segments: who may rewrite a segment, and when.

A task attempt that opens a segment (``<attempt>-<random>.arrow``, or its per-flush parts
``<attempt>-<random>~<n>.arrow`` on an object store) writes a lease next to it,
``<attempt>-<random>.lease``, holding the time (the writer's clock, seconds since the epoch)
until which the writer is alive. The writer renews it every :data:`RENEW_SECONDS` while it runs
-- quiet or not: its writer thread wakes every second -- and deletes it once its segment is
closed. ``aiospark journal --drop-errors`` rewrites no segment whose lease is live; an expired
lease means its writer died (a killed worker) or stalled for :data:`LEASE_SECONDS`. A lease that
cannot be read (being rewritten this instant) counts by its file's modification time.

Example::

    lease = Lease(fs, "/j/<digest>/p=0/3.17-ab12cd34")
    lease.renew()              # on the first write, then from the writer thread
    live(fs, "/j/<digest>/p=0/3.17-ab12cd34~000002.arrow")   # True while the writer lives
    lease.release()
"""
from __future__ import annotations

import time
from typing import Any

import pyarrow.fs as pafs

#: a writer not heard of for this long is taken for dead
LEASE_SECONDS = 60.0
#: a live writer renews its lease this often (a quarter of the lease: three renewals may fail)
RENEW_SECONDS = LEASE_SECONDS / 4
SUFFIX = ".lease"


def stem(path: str) -> str:
    """The writer's stem of a segment or part path (``.../3.17-ab12cd34~000002.arrow`` ->
    ``.../3.17-ab12cd34``)."""
    base = path[:-len(".arrow")] if path.endswith(".arrow") else path
    return base.split("~", 1)[0]


class Lease:
    """The lease of one writer (its segment's stem)."""

    def __init__(self, fs: pafs.FileSystem, stem_path: str, seconds: float = LEASE_SECONDS,
                 renew_every: float = RENEW_SECONDS):
        self.fs = fs
        self.path = stem_path + SUFFIX
        self.seconds = seconds
        self.renew_every = renew_every
        self._renewed: float | None = None

    def renew(self, force: bool = True) -> None:
        """Write the lease (``force=False``: only when :attr:`renew_every` has passed)."""
        now = time.monotonic()
        if not force and self._renewed is not None and now - self._renewed < self.renew_every:
            return
        with self.fs.open_output_stream(self.path) as f:
            f.write(repr(time.time() + self.seconds).encode())
        self._renewed = now

    def release(self) -> None:
        """Delete the lease: the segment is closed."""
        if self._renewed is None:
            return
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass
        self._renewed = None


def holder(fs: pafs.FileSystem, segment: str, now: float | None = None) -> float | None:
    """The expiry of the live lease on ``segment`` (a segment or part path), or None when no
    writer holds it (no lease, or an expired one)."""
    path = stem(segment) + SUFFIX
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        return None
    now = time.time() if now is None else now
    expires: Any = None
    try:
        with fs.open_input_stream(path) as f:
            expires = float(f.read().decode())
    except (OSError, ValueError):  # vanished, or caught mid-rewrite: its mtime says when it was renewed
        if info.mtime is not None:
            expires = info.mtime.timestamp() + LEASE_SECONDS
    if expires is None or expires <= now:
        return None
    return float(expires)
