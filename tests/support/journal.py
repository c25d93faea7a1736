"""Helpers of the journal tests: what a new task attempt finds, and a task's one open segment."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def found(bound: Any, attempt: str, identities: Iterable[str]) -> dict[str, Any]:
    """What a new task attempt finds of ``identities`` (a directory task is asked by row, as a
    task asks it for a chunk)."""
    view = bound.open_task(0, None, attempt)
    view.prefetch(list(identities))
    return view.known


def ids(n: int, start: int = 0) -> list[str]:
    """The identities of ``id`` = start..start+n-1 under ``Journal(key="id")``."""
    return [f"[{i}]" for i in range(start, start + n)]


def only_segment(store_task: Any) -> Any:
    """The one segment writer a directory task holds (a journal with ``buckets=1``)."""
    (writer,) = store_task.writers.values()
    return writer


def calls(service: Any) -> int:
    """The requests a :class:`~tests.support.service.FaultService` has answered so far."""
    return int(service.stats()["requests"])
