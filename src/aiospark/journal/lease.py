"""Leases of a directory journal's open segments: who may rewrite a segment, and when.

A task attempt that opens a segment (``<attempt>-<random>.arrow``, or its per-flush parts
``<attempt>-<random>~<n>.arrow`` on an object store) writes a lease next to it,
``<attempt>-<random>.lease``, holding the time (the writer's clock, seconds since the epoch)
until which the writer is alive. The writer renews it every :data:`RENEW_SECONDS` while it runs
-- quiet or not: its writer thread wakes every second -- and deletes it once its segment is
closed. ``aiospark journal --drop-errors`` rewrites no segment whose lease is live; an expired
lease means its writer died (a killed worker) or stalled for :data:`LEASE_SECONDS`. A lease that
cannot be read (being rewritten this instant) counts by its file's modification time.

A writer can stall longer than its lease and then resume (a SIGSTOPped or swapped-out worker, a
long GC pause): by then ``--drop-errors`` may have taken its segment over (compacted it without its
errors, deleted its parts and its lease). Such a writer must never write again, or it would bring
the dropped errors back. So a writer *fences itself* by its own clock: once :attr:`Lease.lost_after`
has passed since its last renewal began (checked before and after every write and renewal), it
takes its lease as lost (:class:`LeaseLost`): it deletes what that write just put in storage and
the task fails; Spark retries it, and the retry reads the journal as the drop left it. The margin
(:data:`LEASE_SECONDS` minus :attr:`Lease.lost_after`) covers clock skew between the writer's host
and the one running the drop. ``AIOSPARK_JOURNAL_LEASE_SECONDS`` (read where the ``Journal`` is
made) shortens the lease, for tests.

Example::

    lease = Lease(fs, "/j/<digest>/p=0/3.17-ab12cd34")
    lease.renew()              # on the first write, then from the writer thread
    live(fs, "/j/<digest>/p=0/3.17-ab12cd34~000002.arrow")   # True while the writer lives
    lease.release()
"""
from __future__ import annotations

import os
import time
from typing import Any

import pyarrow.fs as pafs

from .errors import JournalStoreError

#: a writer not heard of for this long is taken for dead
LEASE_SECONDS = 60.0
#: a live writer renews its lease this often (a quarter of the lease: two renewals may fail)
RENEW_SECONDS = LEASE_SECONDS / 4
SUFFIX = ".lease"
#: the environment variable that shortens the lease (tests); read on the driver
LEASE_ENV = "AIOSPARK_JOURNAL_LEASE_SECONDS"


class LeaseLost(JournalStoreError):
    """A writer stalled past its lease: its segment may have been taken over, so it writes no more."""


def lease_seconds() -> float:
    """The lease length: :data:`LEASE_SECONDS`, or ``AIOSPARK_JOURNAL_LEASE_SECONDS`` when set."""
    text = os.environ.get(LEASE_ENV, "").strip()
    if not text:
        return LEASE_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1.0 <= value <= 3600.0:
        raise ValueError(f"{LEASE_ENV}={text!r}: set it to a number of seconds between 1 and 3600, or unset it")
    return value


def stem(path: str) -> str:
    """The writer's stem of a segment or part path (``.../3.17-ab12cd34~000002.arrow`` ->
    ``.../3.17-ab12cd34``)."""
    base = path[:-len(".arrow")] if path.endswith(".arrow") else path
    return base.split("~", 1)[0]


class Lease:
    """The lease of one writer (its segment's stem)."""

    def __init__(self, fs: pafs.FileSystem, stem_path: str, seconds: float = LEASE_SECONDS):
        self.fs = fs
        self.path = stem_path + SUFFIX
        self.seconds = seconds
        self.renew_every = seconds / 4
        #: past this age (since its last renewal began) the writer takes its lease for lost
        self.lost_after = seconds * 5 / 6
        self._renewed: float | None = None  # time.monotonic() when the last renewal began

    def check(self, what: str) -> None:
        """Raise :class:`LeaseLost` when the lease may have expired (see the module docstring)."""
        if self._renewed is None:
            return
        age = time.monotonic() - self._renewed
        if age >= self.lost_after:
            raise LeaseLost(
                f"{what}: this task stalled {age:.0f} s since it last renewed its lease ({self.seconds:g} s), so "
                "`aiospark journal --drop-errors` may have taken its segment over; it writes no more and fails, "
                "so Spark retries it (its unrecorded rows are called again)")

    def renew(self, force: bool = True) -> None:
        """Write the lease (``force=False``: only when :attr:`renew_every` has passed). Raises
        :class:`LeaseLost` (and deletes the lease it just wrote) when the previous one may have
        expired before this one was written."""
        now = time.monotonic()
        if not force and self._renewed is not None and now - self._renewed < self.renew_every:
            return
        self.check("renewing its lease")
        with self.fs.open_output_stream(self.path) as f:
            f.write(repr(time.time() + self.seconds).encode())
        try:
            self.check("renewing its lease")
        except LeaseLost:
            self.release()
            raise
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


def sweep(fs: pafs.FileSystem, infos: list[Any], now: float | None = None) -> int:
    """Delete the expired leases among ``infos`` (a directory listing) whose writer left no
    segment or part: a writer killed before its first write landed. Returns how many went."""
    segments = {stem(i.path) for i in infos if i.path.endswith(".arrow")}
    gone = 0
    for info in infos:
        if not info.path.endswith(SUFFIX) or info.path[:-len(SUFFIX)] in segments:
            continue
        if holder(fs, info.path[:-len(SUFFIX)], now) is not None:
            continue  # a live writer about to write its first part
        try:
            fs.delete_file(info.path)
            gone += 1
        except FileNotFoundError:
            pass
    return gone
