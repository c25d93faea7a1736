"""Redis lookups on ``redis.asyncio``: hashes, plain strings or JSON strings.

Example::

    users = RedisLookup("user:{id}", "name STRING, age INT",
                        url="redis://127.0.0.1:6379/0", kind="hash")
    await users.open()
    await users.lookup((42,))           # HGETALL user:42 -> [{'name': 'Ada', 'age': 36}]
    await users.close()

Kinds:

* ``"hash"`` -- ``HGETALL key``; fields map to the schema's columns; an empty hash
  (or no key) is a miss. Batches: one pipeline of ``HGETALL`` (no transaction).
* ``"string"`` -- ``GET key`` is the value of the schema's single column.
* ``"json"`` -- ``GET key`` holds JSON: an object is one row, a list many rows.
  Batches of ``"string"``/``"json"`` use one ``MGET``.

Values are converted to the schema types (INT, BIGINT, DOUBLE, FLOAT, BOOLEAN,
STRING, DECIMAL, DATE, TIMESTAMP; ARRAY/MAP/STRUCT from JSON text). Key values are
inserted into the template as Spark's ``CAST(value AS STRING)`` prints them (``True`` ->
``true``, ``1e20`` -> ``1.0E20``; :mod:`aiospark.lookup.keys`), unencoded: Redis keys are binary
safe, so BINARY values are inserted as their raw bytes, valid UTF-8 or not. A key with no one
text form (a timestamp, whose text depends on the session's time zone) is that key's error
(cast the key column to STRING), never a miss.

What is a miss: no such key, and only that (``nil``; an empty hash does not exist in Redis). A key
of another type (``WRONGTYPE``; ``MGET`` answers nil for it, so nil answers of a batch are asked
again with ``GET``), a value that does not parse as JSON (an empty one included) or does not
convert to the schema's type is that key's error.

Batches are per key: a key whose command fails (``WRONGTYPE``) or whose stored value does not fit
the schema gets its own error; the other keys of the batch are unaffected. The client (a bounded
connection pool) is shared by every ``RedisLookup`` of one configuration in the process:
see :mod:`aiospark.connectors.clients`.
The password comes from ``password=``, the URL, or ``$REDIS_PASSWORD``
(``password_env``), and is never shown in ``repr`` or errors.
Note: ``MGET`` needs all keys in one slot on Redis Cluster (not supported here).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from ...lookup import keys as keyconv
from ...lookup.schema import RowMapper, parse_schema
from ...lookup.source import LookupSource
from ..checks import check_positive
from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..keys import KeyTemplate, check_key, has_null
from ..redaction import Redactor, scrubbed, short
from ..secrets import resolve_secret
from .url import parse_url, redis_db

__all__ = ["RedisLookup"]

_KINDS = ("hash", "string", "json")


def _key_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):  # raw bytes survive as surrogates until _render encodes
        return bytes(v).decode("utf-8", "surrogateescape")
    return keyconv.to_text(v)


def redis_error(exc: BaseException, what: str, *, password: Any, password_env: Any, where: str,
                timeout: float, source: str) -> ConnectorError:
    """A redis-py exception as a ConnectorError naming the server, never the password."""
    import redis.exceptions as rex

    why = Redactor(password).scrub(short(exc))
    if isinstance(exc, rex.AuthenticationError) or "NOAUTH" in why or "WRONGPASS" in why:
        hint = f"password= or ${password_env}" if password_env else "password="
        return ConnectorError(f"authentication failed at {where} ({why}); check {hint}", source=source)
    if isinstance(exc, (rex.TimeoutError, TimeoutError)):
        return ConnectorTimeout(f"{what} timed out after {timeout}s at {where}", source=source)
    if isinstance(exc, (rex.ConnectionError, OSError)):
        return ConnectorError(f"cannot connect to {where}: {why}", source=source, retryable=True)
    return ConnectorError(f"{what} failed: {why}", source=source)


class RedisLookup(LookupSource):
    """Look up rows in Redis by a key template such as ``"user:{id}"``.

    Args:
        key_template: Redis key with one placeholder per key column (``{id}`` or ``{0}``).
        schema: Spark DDL of the returned columns.
        url: ``redis://[user:pass@]host:port/db``, ``rediss://...`` or ``unix:///path?db=0``.
        kind: ``"hash"`` (default), ``"string"`` (one-column schema) or ``"json"``.
        key_columns: key tuple order (default: order of the placeholders).
        password / password_env / username: credentials (password_env read at
            construction, else at ``open()``).
        max_connections: pool size (callers wait for a free connection up to ``timeout``).
        timeout: connect/read timeout in seconds.
        max_batch_size, max_batch_delay: batching settings used by ``Lookuper``.
    """

    __module__ = "aiospark.connectors.redis"  # its public home (reprs, pickles)

    supports_batch = True

    def __init__(
        self,
        key_template: str,
        schema: str,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        kind: str = "hash",
        key_columns: Sequence[str] | None = None,
        password: str | None = None,
        password_env: str | None = "REDIS_PASSWORD",
        username: str | None = None,
        max_connections: int = 100,
        timeout: float = 5.0,
        max_batch_size: int = 100,
        max_batch_delay: float = 0.005,
    ) -> None:
        self.schema = schema
        self._fields = parse_schema(schema)
        self._mapper = RowMapper(self._fields)
        self._tpl = KeyTemplate(key_template, key_columns, "key_template")
        self.key_columns = self._tpl.key_columns
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, _KINDS))}, got {kind!r}")
        if kind == "string" and len(self._fields) != 1:
            raise ValueError(f"kind='string' needs a one-column schema, got {schema!r}; "
                             "use kind='json' for JSON objects or kind='hash' for hashes")
        self.kind = kind
        self._url, self._where, url_user, url_pw = parse_url(url)
        self._db = redis_db(self._url)  # a journal's question: another db number holds other data
        self._password_env = password_env
        self._password = resolve_secret(password, None) or url_pw or resolve_secret(None, password_env)
        self._username = username if username is not None else (url_user.reveal() if url_user else None)
        check_positive("max_connections", max_connections, integer=True)
        check_positive("timeout", timeout)
        check_positive("max_batch_size", max_batch_size, integer=True)
        if not isinstance(max_batch_delay, (int, float)) or max_batch_delay < 0:
            raise ValueError(f"max_batch_delay must be seconds >= 0, got {max_batch_delay!r}")
        self.max_connections, self.timeout = max_connections, float(timeout)
        self.max_batch_size, self.max_batch_delay = max_batch_size, float(max_batch_delay)
        self._name = f"RedisLookup({self._where})"
        self._client: Any = None
        self._redactor = Redactor(self._password)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None, "_sem": None, "_client_key": None}

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """What decides the rows found, for a journal's manifest: the key pattern, the kind of
        value, the schema and the database number (db 1 holds other data than db 0); not the
        server's host, port or credentials: moving the data to another server keeps the answers."""
        return {"key_template": self._tpl.template, "kind": self.kind, "schema": self.schema,
                "key_columns": list(self.key_columns), "db": self._db}

    def __repr__(self) -> str:
        return (f"RedisLookup({self._tpl.template!r}, {self.schema!r}, url={self._url!r}, "
                f"kind={self.kind!r}, password={'***' if self._password else None})")

    __str__ = __repr__

    def _error(self, exc: BaseException, what: str) -> ConnectorError:
        return redis_error(exc, what, password=self._password, password_env=self._password_env,
                           where=self._where, timeout=self.timeout, source=self._name)

    def _config_key(self) -> str:
        return config_key("redis", self._url, self._password.reveal() if self._password else None,
                          self._username, self.max_connections, self.timeout)

    async def _create_client(self) -> Any:
        import redis.asyncio as aredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        pool = aredis.BlockingConnectionPool.from_url(
            self._url, max_connections=self.max_connections, timeout=self.timeout,
            password=self._password.reveal() if self._password else None, username=self._username,
            decode_responses=True, socket_timeout=self.timeout, socket_connect_timeout=self.timeout,
            retry=Retry(NoBackoff(), 1),
        )
        client = aredis.Redis(connection_pool=pool)
        try:
            await client.ping()
        except Exception as exc:
            await self._close_client(client)
            raise self._error(exc, "PING") from None
        return client

    @staticmethod
    async def _close_client(client: Any) -> None:
        await client.aclose()
        await client.connection_pool.disconnect()

    @scrubbed
    async def open(self) -> None:
        """Take this configuration's shared client (made, and PINGed, on first use)."""
        if self._client is not None:
            return
        if self._password is None and self._password_env:
            self._password = resolve_secret(None, self._password_env)
            self._redactor = Redactor(self._password)
        key = self._config_key()
        client = await SHARED.acquire(key, self._create_client, self._close_client)
        # Queue excess callers on a cheap FIFO semaphore rather than the pool's condition.
        self._sem = asyncio.Semaphore(self.max_connections)
        self._client, self._client_key = client, key

    async def close(self) -> None:
        """Give the shared client back (the last user closes it). Safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            await SHARED.release(self._client_key)

    def _rows(self, rkey: bytes, value: Any) -> list[dict]:
        # None: no such key. An empty hash does not exist in Redis (HGETALL's {} is a missing key);
        # an empty string is a value: "" for kind="string", JSON that does not parse for "json".
        if value is None or (self.kind == "hash" and not value):
            return []
        try:
            if self.kind == "hash":
                return [self._mapper.row(value)]
            if self.kind == "string":
                return [self._mapper.single(value)]
            try:
                data = json.loads(value)
            except ValueError:
                raise ValueError(f"value of key {_shown(rkey)} is not valid JSON") from None
            items = data if isinstance(data, list) else [data]
            rows = []
            for item in items:
                if isinstance(item, dict):
                    rows.append(self._mapper.row(item))
                elif item is not None and len(self._fields) == 1:
                    rows.append(self._mapper.single(item))
                elif item is not None:
                    raise ValueError(f"value of key {_shown(rkey)} must be a JSON object or a list of them")
            return rows
        except ValueError as exc:
            raise ConnectorError(str(exc), source=self._name) from None

    def _client_or_fail(self) -> Any:
        if self._client is None:
            raise RuntimeError(f"{self._name} is not open: call 'await source.open()' first")
        return self._client

    def _render(self, key: tuple) -> bytes | None:
        """The Redis key as bytes (raw bytes of BINARY values kept), or None: no such key."""
        try:
            return self._tpl.render(key, _key_str).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate no bytes decode to: equals no Redis key
            return None

    @scrubbed
    async def lookup(self, key: tuple) -> list[dict]:
        """``HGETALL`` / ``GET`` the rendered key; a missing key or empty hash -> ``[]``."""
        key = check_key(key, len(self.key_columns), self._name)
        if has_null(key):
            return []
        client = self._client_or_fail()
        rkey = self._render(key)
        if rkey is None:
            return []
        try:
            async with self._sem:
                value = await (client.hgetall(rkey) if self.kind == "hash" else client.get(rkey))
        except Exception as exc:
            raise self._error(exc, "HGETALL" if self.kind == "hash" else "GET") from None
        return self._rows(rkey, value)

    @scrubbed
    async def lookup_batch(self, keys: Sequence[tuple]) -> dict[tuple, Any]:
        """One ``MGET`` (string/json) or one pipeline of ``HGETALL`` (hash) for all keys; each key
        gets its own outcome (rows, a miss, or its own error)."""
        arity = len(self.key_columns)
        wanted = []
        out: dict[tuple, Any] = {}
        for k in (check_key(k, arity, self._name) for k in keys):
            try:
                rk = None if has_null(k) else self._render(k)
            except keyconv.KeyNotRenderable as exc:  # this key's own error; the others go on
                out[k] = ConnectorError(str(exc), source=self._name)
                continue
            if rk is not None:
                wanted.append((k, rk))
        if not wanted:
            return out
        client = self._client_or_fail()
        rkeys = [rk for _, rk in wanted]
        what = "pipeline HGETALL" if self.kind == "hash" else "MGET"
        try:
            async with self._sem:
                if self.kind == "hash":
                    async with client.pipeline(transaction=False) as pipe:
                        for rk in rkeys:
                            pipe.hgetall(rk)
                        values = await pipe.execute(raise_on_error=False)
                else:
                    values = await client.mget(rkeys)
                    # MGET answers nil both for a missing key and for a key of another type: ask
                    # those again with GET, whose WRONGTYPE tells them apart (nil again: missing)
                    again = [i for i, v in enumerate(values) if v is None]
                    if again:
                        async with client.pipeline(transaction=False) as pipe:
                            for i in again:
                                pipe.get(rkeys[i])
                            for i, v in zip(again, await pipe.execute(raise_on_error=False)):
                                values[i] = v
        except Exception as exc:
            raise self._error(exc, what) from None
        for (k, rk), v in zip(wanted, values):
            try:
                if isinstance(v, Exception):  # this key's command failed (e.g. WRONGTYPE)
                    raise self._error(v, f"{'HGETALL' if self.kind == 'hash' else 'GET'} {_shown(rk)}")
                out[k] = self._rows(rk, v)
            except ConnectorError as exc:
                out[k] = exc
        return out


def _shown(rkey: bytes) -> str:
    """A Redis key for a message: as text where it is UTF-8, cut to 80 characters."""
    text = repr(rkey.decode("utf-8", "backslashreplace"))
    return text if len(text) <= 80 else text[:77] + "..."
