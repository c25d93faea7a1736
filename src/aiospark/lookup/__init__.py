"""Lookup layer: the :class:`LookupSource` protocol, :class:`LookupCache` and :class:`Lookuper`.

Pure asyncio (no pyspark). Example::

    from aiospark.lookup import Lookuper, LookupCache
    from aiospark.connectors import HttpLookup

    lookuper = Lookuper(HttpLookup("http://127.0.0.1:8080/item/{id}", "name STRING"),
                        cache=LookupCache(max_rows=10_000, expire_after_write=300))
    await lookuper.open()
    rows = await lookuper.lookup((7,))
    await lookuper.close()
"""

from .cache import LookupCache
from .lookuper import Lookuper
from .schema import Field, RowMapper, SchemaError, parse_schema
from .source import Key, LookupSource, Row

__all__ = [
    "Field", "Key", "LookupCache", "LookupSource", "Lookuper", "Row", "RowMapper",
    "SchemaError", "parse_schema",
]
