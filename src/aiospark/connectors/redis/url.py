"""The URL of a Redis server, parsed once for every Redis connector: credentials taken out.

Example::

    clean, where, user, password = parse_url("redis://:s3cret@127.0.0.1:6379/0")
    # clean == "redis://127.0.0.1:6379/0", where == "127.0.0.1:6379/0", password.reveal() == "s3cret"
"""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..secrets import Secret

__all__ = ["parse_url"]


def parse_url(url: Any) -> tuple[str, str, Secret | None, Secret | None]:
    """``(url without credentials, "host:port/db" for messages, username, password)``."""
    if not isinstance(url, str):
        raise ValueError(f"url must be a string like 'redis://127.0.0.1:6379/0', got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"url must start with redis://, rediss:// or unix://, got scheme {parts.scheme!r}")
    user = Secret(unquote(parts.username)) if parts.username else None
    pw = Secret(unquote(parts.password)) if parts.password else None
    query = parse_qsl(parts.query, keep_blank_values=True)
    for k, v in query:
        if k == "password":
            pw = Secret(v)
    query = [(k, v) for k, v in query if k != "password"]
    clean = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query=urlencode(query)))
    if parts.scheme == "unix":
        where = parts.path or "?"
    else:
        try:
            port = parts.port or 6379
        except ValueError:
            raise ValueError("url has an invalid port") from None
        where = f"{parts.hostname or '127.0.0.1'}:{port}/{parts.path.strip('/') or '0'}"
    return clean, where, user, pw


def redis_db(url: str) -> int:
    """The database number a Redis URL selects (``/1`` or ``?db=1``; 0 when it names none).

    >>> redis_db("redis://127.0.0.1:6379/1"), redis_db("unix:///tmp/r.sock?db=2")
    (1, 2)
    """
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    path = parts.path.strip("/") if parts.scheme != "unix" else ""
    text = query.get("db") or path or "0"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"url selects database {text!r}: a Redis database is a number, e.g. "
                         "'redis://127.0.0.1:6379/1'") from None
