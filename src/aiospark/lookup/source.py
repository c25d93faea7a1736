"""The :class:`LookupSource` protocol: what a lookup join needs from an external system.

Modelled on Flink's ``AsyncLookupFunction``. A source is created on the driver,
pickled to every worker, opened once per worker process and then shared by every
concurrent lookup of that worker's event loop.

Example::

    class Prices(LookupSource):
        schema = "sku STRING, price DOUBLE"

        async def lookup(self, key):
            (sku,) = key
            return [{"sku": sku, "price": 9.5}] if sku.startswith("A") else []

    rows = await Prices().lookup(("A-1",))   # [{'sku': 'A-1', 'price': 9.5}]
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LookupSource", "Row", "Key"]

Row = dict[str, Any]
Key = tuple


class LookupSource(abc.ABC):
    """Abstract base class (and documented protocol) of every lookup source.

    Contract:

    * ``schema: str`` -- Spark DDL of the columns every returned row holds, e.g.
      ``"name STRING, price DOUBLE"``.
    * ``__init__`` only stores configuration: the object must stay picklable
      (cloudpickle) until ``open()``. Create sessions, pools and locks in ``open()``.
    * ``async open()`` / ``async close()`` -- once per worker process (no-ops here).
    * ``async lookup(key) -> list[dict]`` -- the rows matching ``key`` (a tuple of
      the join-key values, in key-column order); ``[]`` for a miss. Must be safe to
      call concurrently from many tasks on the loop that ran ``open()``.
    * Optional batching: set ``supports_batch`` true and implement
      ``async lookup_batch(keys) -> Mapping[tuple, list[dict] | Exception]``; keys absent
      from the mapping are misses, and an exception as a key's value is that key's own
      error (its neighbours in the batch are unaffected). ``max_batch_size`` / ``max_batch_delay`` (seconds)
      tell the :class:`~aiospark.lookup.Lookuper` how to group keys.
    * Errors: raise an exception; connectors raise
      :class:`aiospark.connectors.ConnectorError` with a ``retryable`` attribute.
    """

    #: Spark DDL of the looked-up columns.
    schema: str = ""
    #: Whether :meth:`lookup_batch` is implemented (subclasses may use a property).
    supports_batch: bool = False
    #: Largest number of keys passed to one :meth:`lookup_batch` call.
    max_batch_size: int = 100
    #: Longest time (seconds) a key waits for others before its batch is sent.
    max_batch_delay: float = 0.005

    async def open(self) -> None:  # noqa: B027 -- an optional hook: most sources need nothing here
        """Acquire resources (sessions, pools). Called once per worker process."""

    async def close(self) -> None:  # noqa: B027 -- an optional hook, like open()
        """Release what :meth:`open` acquired. Must be safe to call twice."""

    @abc.abstractmethod
    async def lookup(self, key: Key) -> list[Row]:
        """Return the rows for ``key`` (``[]`` when there is none)."""

    async def lookup_batch(self, keys: Sequence[Key]) -> Mapping[Key, list[Row]]:
        """Return ``{key: rows | exception}`` for many keys at once; absent keys are misses."""
        raise NotImplementedError(f"{type(self).__name__} does not support batch lookups")

    async def __aenter__(self) -> LookupSource:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
