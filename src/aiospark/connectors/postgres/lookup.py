"""PostgreSQL lookups on asyncpg: ``SELECT cols FROM table WHERE key = $1``.

Example::

    items = PostgresLookup("public.items", "id", "name STRING, price DOUBLE",
                           dsn="postgresql://app@127.0.0.1:5432/shop", password_env="PGPASSWORD")
    await items.open()
    await items.lookup((42,))        # [{'name': 'pen', 'price': 1.5}]
    await items.close()

Queries are parameterised and prepared (asyncpg caches them per connection):

* single key: ``SELECT "c1", ... FROM "t" WHERE "k1" = $1 [AND "k2" = $2]``
* batch: ``... FROM unnest($1::<t1>[] [, $2::<t2>[]]) WITH ORDINALITY JOIN "t" ON ...``: each
  row comes back with its key's position, so it reaches exactly the keys that asked for it

Identifiers (table, ``schema.table``, columns) must be plain SQL identifiers
(letters, digits, ``_``, ``$``; at most 63 chars) and are double-quoted, so they
are case-sensitive. The output columns are the schema's column names; values
are what asyncpg returns for the columns' types.

Keys are converted to the key columns' types by :mod:`aiospark.lookup.keys` (Spark SQL's cast
rules: ``42`` for a TEXT key is ``'42'``; ``'007'`` for an INT key is 7, ``'١'`` or ``'1_0'``
are none). A value with no conversion, or one the column's type cannot hold (a NUL character or a
lone surrogate in text, invalid UTF-8, a BIGINT beyond an INT column's range, a number beyond
numeric's or real's range), can equal no row: a miss, decided before any query.

A miss means "no such row" and nothing else: every error of a query is an error, never a miss or a
NULL -- a view whose SELECT divides by zero for a key fails that key. When a batch query fails with
an error that may belong to some keys only (SQLSTATE classes 21, 22, 2F, 38, 39, 54, P0, XX001/2,
or an argument asyncpg cannot encode), each key is looked up alone: keys that succeed get their
rows, each failing key its own error. Other errors (connection, timeout, authentication, a missing
table, a permission) fail the whole batch at once: looking each key up again would fail alike.

The pool is shared by every ``PostgresLookup`` of one configuration in the process (and event
loop), bounded by ``pool_size``, and closed with its last user: see :mod:`aiospark.connectors.clients`.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ...lookup import keys as keyconv
from ...lookup.schema import parse_schema
from ...lookup.source import LookupSource
from ..checks import check_positive
from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..keys import check_key, has_null
from ..redaction import Redactor, scrubbed, short
from ..secrets import Secret, resolve_secret
from .key_convert import key_converter

__all__ = ["PostgresLookup", "quote_ident"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
_RETRYABLE_STATES = ("08", "40001", "40P01", "53", "57P0")
#: SQLSTATEs of batch errors that may come from some keys' rows only (so the batch is split):
#: cardinality violation (a scalar subquery with 2 rows), data exception (division by zero, a bad
#: cast), SQL/external routine exceptions, program limit exceeded, PL/pgSQL RAISE, corrupted data
_PER_KEY_STATES = ("21", "22", "2F", "38", "39", "54", "P0", "XX001", "XX002")


def quote_ident(name: str, what: str = "identifier") -> str:
    """Validate a plain SQL identifier and return it double-quoted."""
    if not isinstance(name, str) or not _IDENT.match(name) or len(name) > 63:
        raise ValueError(f"{what} {name!r} is not a plain SQL identifier: use letters, digits, '_' "
                         "or '$' (not starting with a digit), at most 63 characters")
    return f'"{name}"'


class PostgresLookup(LookupSource):
    """Look up rows of a PostgreSQL table by key columns, through an asyncpg pool.

    Args:
        table: ``"items"`` or ``"schema.items"``.
        key_columns: the column (or list of columns) the key tuple matches, in order.
        schema: Spark DDL of the selected columns (their names are the table's columns).
        dsn: ``postgresql://user@host:port/db`` (a password in it is taken out and hidden).
        host, port, user, password, database: connection parts (override the dsn's).
        password_env: environment variable with the password (read at construction,
            else at ``open()``). pool_size: most connections. timeout: seconds per
            connect and per query.
        max_batch_size, max_batch_delay: batching settings used by ``Lookuper``.
    """

    __module__ = "aiospark.connectors.postgres"  # its public home (reprs, pickles)

    supports_batch = True

    def __init__(
        self,
        table: str,
        key_columns: str | Sequence[str],
        schema: str,
        *,
        dsn: str | None = None,
        host: str | None = None,
        port: int | None = None,
        user: str | None = None,
        password: str | None = None,
        database: str | None = None,
        password_env: str | None = "PGPASSWORD",
        pool_size: int = 10,
        timeout: float = 10.0,
        max_batch_size: int = 100,
        max_batch_delay: float = 0.005,
    ) -> None:
        if not isinstance(table, str) or not 1 <= len(table.split(".")) <= 2:
            raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
        self.table = table
        self._qtable = ".".join(quote_ident(p, "table name part") for p in table.split("."))
        if isinstance(key_columns, str):
            key_columns = [key_columns]
        self.key_columns = tuple(key_columns or ())
        if not self.key_columns:
            raise ValueError("key_columns must name at least one column, e.g. key_columns='id'")
        if len(set(self.key_columns)) != len(self.key_columns):
            raise ValueError(f"key_columns {list(self.key_columns)} has duplicates")
        qkeys = [quote_ident(k, "key column") for k in self.key_columns]
        self.schema = schema
        self._fields = parse_schema(schema)
        self.columns = tuple(f.name for f in self._fields)
        cols = ", ".join(f"__t.{quote_ident(c, 'schema column')}" for c in self.columns)
        self._sql_one = (f"SELECT {cols} FROM {self._qtable} AS __t WHERE "
                         + " AND ".join(f"__t.{q} = ${i + 1}" for i, q in enumerate(qkeys)))
        self._cols_sql, self._qkeys = cols, qkeys
        self._dsn, dsn_parts, dsn_pw = self._parse_dsn(dsn)
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
            raise ValueError(f"port must be an integer 1..65535, got {port!r}")
        self.host = host or dsn_parts.get("host") or os.environ.get("PGHOST") or "localhost"
        self.port = port or dsn_parts.get("port") or int(os.environ.get("PGPORT") or 5432)
        self.user, self.database = user, database
        self._password_env = password_env
        self._password = resolve_secret(password, None) or dsn_pw or resolve_secret(None, password_env)
        check_positive("pool_size", pool_size, integer=True)
        check_positive("timeout", timeout)
        check_positive("max_batch_size", max_batch_size, integer=True)
        if not isinstance(max_batch_delay, (int, float)) or max_batch_delay < 0:
            raise ValueError(f"max_batch_delay must be seconds >= 0, got {max_batch_delay!r}")
        self.pool_size, self.timeout = pool_size, float(timeout)
        self.max_batch_size, self.max_batch_delay = max_batch_size, float(max_batch_delay)
        db = database or dsn_parts.get("database") or ""
        #: the database read (a journal's question); None: the server's default (PGDATABASE or the user's)
        self._database_name = db or os.environ.get("PGDATABASE") or None
        self._name = f"PostgresLookup({table} @ {self.host}:{self.port}{'/' + db if db else ''})"
        self._pool: Any = None
        self._redactor = Redactor(self._password)

    @staticmethod
    def _parse_dsn(dsn: str | None) -> tuple[str | None, dict, Secret | None]:
        if dsn is None:
            return None, {}, None
        parts = urlsplit(dsn) if isinstance(dsn, str) else None
        if parts is None or parts.scheme not in ("postgres", "postgresql"):
            raise ValueError("dsn must be a URL like 'postgresql://user@127.0.0.1:5432/db' "
                             "(or pass host=, port=, user=, database=)")
        pw = Secret(unquote(parts.password)) if parts.password else None
        query = parse_qsl(parts.query, keep_blank_values=True)
        pw = next((Secret(v) for k, v in query if k == "password"), pw)
        query = [(k, v) for k, v in query if k != "password"]
        netloc = parts.netloc.rsplit("@", 1)[-1]
        if parts.username:
            netloc = f"{parts.username}@{netloc}"
        try:
            info = {"host": parts.hostname or dict(query).get("host"), "port": parts.port,
                    "database": parts.path.lstrip("/") or None}
        except ValueError:
            raise ValueError("dsn has an invalid port") from None
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query))), info, pw

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None, "_pool_key": None, "_convert": None}

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """What decides the rows found, for a journal's manifest: the database name, the table, key
        columns and columns read; not the server's host, port, user or password: moving the
        database to another server keeps the answers."""
        return {"database": self._database_name, "table": self.table, "key_columns": list(self.key_columns),
                "schema": self.schema}

    def __repr__(self) -> str:
        return (f"PostgresLookup({self.table!r}, {list(self.key_columns)!r}, {self.schema!r}, "
                f"host={self.host!r}, port={self.port!r}, user={self.user!r}, "
                f"database={self.database!r}, password={'***' if self._password else None})")

    __str__ = __repr__

    def _error(self, exc: BaseException, what: str) -> ConnectorError:
        import asyncpg

        why = self._redactor.scrub(short(exc))
        if _encoding_error(exc):
            types = ", ".join(name for _, name in getattr(self, "_types", ()))
            return ConnectorError(f"{what} failed: {why}; the key has no conversion to the key "
                                  f"column type ({types}): cast the key column in Spark to it",
                                  source=self._name)
        if isinstance(exc, (asyncpg.InvalidPasswordError,
                            asyncpg.InvalidAuthorizationSpecificationError)):
            hint = f"password= or ${self._password_env}" if self._password_env else "password="
            return ConnectorError(f"authentication failed ({why}); check user= and {hint}",
                                  source=self._name)
        if isinstance(exc, asyncpg.UndefinedTableError):
            return ConnectorError(f"table {self.table!r} does not exist ({why}); check table=",
                                  source=self._name)
        if isinstance(exc, asyncpg.UndefinedColumnError):
            return ConnectorError(f"{why}; check key_columns= and the schema's column names",
                                  source=self._name)
        if isinstance(exc, asyncpg.PostgresError):
            state = getattr(exc, "sqlstate", "") or ""
            return ConnectorError(f"{what} failed: {why}", source=self._name,
                                  retryable=state.startswith(_RETRYABLE_STATES))
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return ConnectorTimeout(f"{what} timed out after {self.timeout}s", source=self._name)
        if isinstance(exc, (OSError, asyncpg.InterfaceError)):
            return ConnectorError(f"cannot reach {self.host}:{self.port}: {why}", source=self._name,
                                  retryable=True)
        return ConnectorError(f"{what} failed: {why}", source=self._name)

    def _config_key(self) -> str:
        return config_key("postgres", self._dsn, self.host, self.port, self.user, self.database,
                          self._password.reveal() if self._password else None, self.pool_size, self.timeout)

    async def _create_pool(self) -> Any:
        import asyncpg

        kwargs = {k: v for k, v in (("host", self.host), ("port", self.port), ("user", self.user),
                                    ("database", self.database)) if v is not None}
        try:
            return await asyncpg.create_pool(
                self._dsn, password=self._password.reveal() if self._password else None,
                min_size=1, max_size=self.pool_size, timeout=self.timeout,
                command_timeout=self.timeout, **kwargs)
        except Exception as exc:
            raise self._error(exc, "connect") from None

    @staticmethod
    async def _close_pool(pool: Any) -> None:
        await pool.close()

    @scrubbed
    async def open(self) -> None:
        """Take this configuration's shared pool (made on first use) and prepare the queries."""
        if self._pool is not None:
            return
        if self._password is None and self._password_env:
            self._password = resolve_secret(None, self._password_env)
            self._redactor = Redactor(self._password)
        key = self._config_key()
        pool = await SHARED.acquire(key, self._create_pool, self._close_pool)
        try:
            async with pool.acquire() as con:
                stmt = await con.prepare(self._sql_one)
                self._types = [(t.schema, t.name) for t in stmt.get_parameters()]
        except Exception as exc:
            await SHARED.release(key)
            raise self._error(exc, "prepare") from None
        self._convert = [key_converter(name) for _, name in self._types]
        types = [f"{quote_ident(s, 'type schema')}.{quote_ident(n, 'type')}[]" for s, n in self._types]
        # rows are matched back to keys by the key's position, never by comparing values in
        # Python: a citext or case-insensitive column finds 'abc' for the key 'ABC'
        names = ", ".join(f'"__k{i}"' for i in range(len(types)))
        arrays = ", ".join(f"${i + 1}::{t}" for i, t in enumerate(types))
        on = " AND ".join(f'__t.{q} = __k."__k{i}"' for i, q in enumerate(self._qkeys))
        self._sql_batch = (f'SELECT __k."__i", {self._cols_sql} FROM unnest({arrays}) WITH ORDINALITY '
                           f'AS __k({names}, "__i") JOIN {self._qtable} AS __t ON {on}')
        self._pool, self._pool_key = pool, key

    async def close(self) -> None:
        """Give the shared pool back (the last user closes it). Safe to call twice."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await SHARED.release(self._pool_key)

    def _coerced(self, key: tuple) -> tuple | None:
        """The key in the columns' types, or None when it can equal no row. Only KeyMismatch
        says so: any other exception of a conversion (e.g. ``KeyNotRenderable``) is raised."""
        try:
            return tuple(conv(v) for v, conv in zip(key, self._convert))
        except keyconv.KeyMismatch:
            return None

    def _pool_or_fail(self) -> Any:
        if self._pool is None:
            raise RuntimeError(f"{self._name} is not open: call 'await source.open()' first")
        return self._pool

    @scrubbed
    async def lookup(self, key: tuple) -> list[dict]:
        """Rows whose key columns equal ``key`` (``[]`` if none)."""
        key = check_key(key, len(self.key_columns), self._name)
        pool = self._pool_or_fail()
        args = None if has_null(key) else self._coerced(key)
        if args is None:
            return []
        return await self._fetch_one(pool, args)

    async def _fetch_one(self, pool: Any, args: tuple) -> list[dict]:
        try:
            records = await pool.fetch(self._sql_one, *args)
        except Exception as exc:  # never a miss: the values that can equal no row are not sent
            raise self._error(exc, "SELECT") from None
        cols = self.columns
        return [dict(zip(cols, r)) for r in records]

    async def _one_by_one(self, pool: Any, wanted: dict[tuple, list[tuple]],
                          out: dict[tuple, Any]) -> dict[tuple, Any]:
        """Each key of a failed batch on its own: its rows, a miss, or its own error."""
        async def one(c: tuple) -> None:
            try:
                rows: Any = await self._fetch_one(pool, c)
            except ConnectorError as exc:
                rows = exc
            for i, k in enumerate(wanted[c]):
                out[k] = rows if (i == 0 or isinstance(rows, BaseException)) else [dict(r) for r in rows]

        await asyncio.gather(*(one(c) for c in wanted))
        return out

    @scrubbed
    async def lookup_batch(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        """One query for all keys (``unnest ... WITH ORDINALITY``); absent keys are misses. If the query
        fails with an error that may be some keys' own, each key is looked up alone: its rows, a
        miss (no row) or its own error. Any other error fails the batch."""
        arity = len(self.key_columns)
        pool = self._pool_or_fail()
        out: dict[tuple, Any] = {}
        wanted: dict[tuple, list[tuple]] = {}
        for k in keys:
            k = check_key(k, arity, self._name)
            out[k] = []
            try:
                c = None if has_null(k) else self._coerced(k)
            except Exception as exc:  # this key's own error (not a miss): its neighbours go on
                out[k] = exc
                continue
            if c is not None:
                if self._types[0][1] == "bpchar" and arity == 1:
                    c = (c[0].rstrip(" "),)
                wanted.setdefault(c, []).append(k)
        if not wanted:
            return out
        order = list(wanted)
        args = [[c[i] for c in order] for i in range(arity)]
        try:
            records = await pool.fetch(self._sql_batch, *args)
        except Exception as exc:  # never a miss (see the module doc)
            if not _per_key(exc):
                raise self._error(exc, "batch SELECT") from None
            if len(order) > 1:  # isolate the failing keys: the others keep their rows
                return await self._one_by_one(pool, wanted, out)
            err = self._error(exc, "SELECT")
            for k in wanted[order[0]]:
                out[k] = err
            return out
        cols = self.columns
        for r in records:
            originals = wanted[order[r[0] - 1]]
            row = dict(zip(cols, tuple(r)[1:]))
            for i, k in enumerate(originals):
                out[k].append(row if i == 0 else dict(row))
        return out


def _encoding_error(exc: BaseException) -> bool:
    """True for asyncpg's client-side "invalid input for query argument" (nothing was sent).

    asyncpg raises it as a ``DataError`` (a PostgresError, SQLSTATE 22000) caused by the codec's
    exception; a server's error carries the fields the server sent (severity, sqlstate)."""
    import asyncpg

    return (isinstance(exc, asyncpg.DataError) and exc.__cause__ is not None
            and "sqlstate" not in vars(exc) and getattr(exc, "severity", None) is None)


def _per_key(exc: BaseException) -> bool:
    """True when a batch error may belong to some keys only (worth looking each key up alone)."""
    import asyncpg

    if _encoding_error(exc):
        return True
    if not isinstance(exc, asyncpg.PostgresError):
        return False
    return (getattr(exc, "sqlstate", None) or "").startswith(_PER_KEY_STATES)
