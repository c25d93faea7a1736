"""PostgreSQL: :class:`PostgresLookup`, parameterised ``SELECT`` s on an asyncpg pool.

``lookup.py`` holds the lookup (pool, queries, errors); ``key_convert.py`` turns each key into
the column's Python type before any query, so a key that cannot match is a miss without a round trip.

Example::

    from aiospark.connectors.postgres import PostgresLookup

    users = PostgresLookup("users", "id", "name TEXT, age INT", dsn="postgresql://app@127.0.0.1/db")
"""

from __future__ import annotations

from .lookup import PostgresLookup, quote_ident

__all__ = ["PostgresLookup", "quote_ident"]
