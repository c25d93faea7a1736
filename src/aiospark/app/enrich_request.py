"""``aiospark enrich``'s request: the ``--url`` template's placeholders, and the credentials the
request carries (from the environment or a file, never from argv), kept out of every message.

A placeholder is the exact name of an input column between braces, whatever characters it holds:
``{order-id}``, ``{customer id}``, ``{a.b}``. Write a literal brace as ``{{`` or ``}}``. The
template is handed to :class:`~aiospark.connectors.http.HttpLookup` with positional placeholders
and the column names as ``key_columns``, so any column name works.

Example::

    url, names = column_template("http://h/o/{order-id}?c={customer id}")
    # ('http://h/o/{0}?c={1}', ['order-id', 'customer id'])
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

from .enrich_base import EnrichError

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
#: query parameter names whose values are credentials (as HttpLookup's repr masks them)
_SECRETISH = ("key", "token", "secret", "pass", "auth", "sig", "credential")


def column_template(url: str) -> tuple[str, list[str]]:
    """``url`` with each ``{column}`` replaced by ``{i}``, and the column names in order of first use.

    Example::

        column_template("http://h/{a}/{b}/{a}")   # ('http://h/{0}/{1}/{0}', ['a', 'b'])
    """
    names: list[str] = []
    out: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(url):
        out.append(url[pos:match.start()])
        pos = match.end()
        text = match.group(0)
        if text in ("{{", "}}"):
            out.append(text)
            continue
        if match.group(1) is None:
            raise EnrichError(f"--url {redact_url(url)!r} has a lone {text!r}: a placeholder is an input "
                              "column's name in braces, e.g. {id}; write a literal brace as '{{' or '}}'")
        name = match.group(1)
        if name == "":
            raise EnrichError(f"--url {redact_url(url)!r} has an empty placeholder '{{}}': put an input "
                              "column's name in it, e.g. {id}")
        if name not in names:
            names.append(name)
        out.append(f"{{{names.index(name)}}}")
    out.append(url[pos:])
    return "".join(out), names


def redact_url(url: str) -> str:
    """``url`` with its userinfo and the values of credential-like query parameters as ``***``.

    Example::

        redact_url("htps://bob:pw@h/x?api_key=k&q=1")   # 'htps://***@h/x?api_key=***&q=1'
    """
    from ..connectors.http.request import redact_url as redact

    return redact(url)


def url_secrets(url: str) -> list[str]:
    """The credentials written in ``url``: its user and password, and credential-like query values."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return found
    if "@" in netloc:
        userinfo = netloc.rsplit("@", 1)[0]
        user, _, password = userinfo.partition(":")
        found += [x for x in (user, unquote(user), password, unquote(password)) if x]
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if value and any(s in name.lower() for s in _SECRETISH):
            found.append(value)
    for item in parts.query.split("&"):  # the raw (percent-encoded) form too
        name, eq, value = item.partition("=")
        if eq and value and any(s in name.lower() for s in _SECRETISH):
            found.append(value)
    return found


class Scrubber:
    """Replaces every known secret in a text with ``***`` (longest first, so a secret holding
    another is replaced whole); secrets shorter than 4 characters are left alone (they would
    mask ordinary words).

    Example::

        Scrubber(["S3CRET"])("bad password S3CRET")   # 'bad password ***'
    """

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def add(self, *secrets: str) -> None:
        self.secrets = sorted({*self.secrets, *(s for s in secrets if s and len(s) >= 4)}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def _read_file(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip("\r\n")
    except OSError as exc:
        raise EnrichError(f"{what}: cannot read {path!r} ({exc.strerror or exc})") from None
    if not value.strip():
        raise EnrichError(f"{what}: {path!r} is empty")
    if "\n" in value or "\r" in value:
        raise EnrichError(f"{what}: {path!r} holds more than one line; a header value or token is one line")
    return value


def _read_env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise EnrichError(f"{what}: the environment variable {name} is not set")
    if not value.strip():
        raise EnrichError(f"{what}: the environment variable {name} is empty")
    return value


def _pair(text: str, what: str, example: str) -> tuple[str, str]:
    name, eq, where = text.partition("=")
    if not eq or not name.strip() or not where.strip():
        raise EnrichError(f"{what} takes NAME={example}, got {text!r}")
    if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        raise EnrichError(f"{what}: {name!r} is not an HTTP header name")
    return name, where


def credentials(header_env: list[str], header_file: list[str], token_env: str | None,
                token_file: str | None) -> tuple[dict[str, str], str | None]:
    """The request headers and the bearer token the options name, read now (before Spark starts).

    Example::

        credentials(["X-Api-Key=SHOP_KEY"], [], None, None)   # ({'X-Api-Key': '<$SHOP_KEY>'}, None)
    """
    headers: dict[str, str] = {}
    for text in header_env:
        name, env = _pair(text, "--header-env", "ENV_VAR")
        headers[name] = _read_env(env, f"--header-env {name}")
    for text in header_file:
        name, path = _pair(text, "--header-file", "PATH")
        headers[name] = _read_file(path, f"--header-file {name}")
    if token_env and token_file:
        raise EnrichError("give --auth-token-env or --auth-token-file, not both")
    token = (_read_env(token_env, "--auth-token-env") if token_env
             else _read_file(token_file, "--auth-token-file") if token_file else None)
    return headers, token
