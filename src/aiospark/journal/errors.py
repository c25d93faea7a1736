"""The journal's own error: its store failed.

Example::

    raise JournalStoreError("the journal's Redis at redis://:***@host:6379/0 failed: ConnectionError: ...")
"""
from __future__ import annotations

__all__ = ["JournalStoreError"]


class JournalStoreError(RuntimeError):
    """The journal's store failed (unreachable, refused a write)."""
