"""An OpenAI-compatible endpoint's ``base_url``: checked where a connector is made, and which of
its query parameters may be shown.

Azure OpenAI puts ``?api-version=...`` on the base URL, and some gateways put a key there
(``?key=...``): the query goes on every request, and every value but a public one is shown as
``***``.

Example::

    >>> check_base_url("https://host/openai/deployments/d/?api-version=2024-06-01")
    ('https://host/openai/deployments/d', 'host:443', {'api-version': '2024-06-01'})
"""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["PUBLIC_QUERY", "check_base_url"]

#: query parameters of base_url shown as they are (every other value may be a key: shown as ***)
PUBLIC_QUERY = ("api-version",)


def check_base_url(base_url: Any) -> tuple[str, str, dict[str, str]]:
    """``(base_url without its query and a trailing '/', host:port, the query's parameters)``;
    ValueError saying what to change. The query (Azure's ``?api-version=...``) goes on every
    request: ``{base_url}/chat/completions?api-version=...``."""
    if not isinstance(base_url, str) or not base_url:
        raise ValueError("base_url must be the endpoint's URL up to the API version, "
                         f"e.g. 'http://127.0.0.1:8000/v1', got {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got "
                         f"{parts.scheme + '://' if parts.scheme else ''}{parts.hostname or '...'}")
    if parts.username or parts.password:
        raise ValueError("base_url must not hold credentials: pass the key as api_key= (or set OPENAI_API_KEY)")
    if parts.fragment:
        raise ValueError("base_url must not have a fragment ('#...'): give the URL up to the "
                         "API version, e.g. 'http://127.0.0.1:8000/v1'")
    try:
        query = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)) if parts.query else {}
    except ValueError:
        raise ValueError("base_url's query string does not parse: write it as '?name=value&...', e.g. "
                         "'https://host/openai/deployments/d?api-version=2024-06-01'") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"base_url has a bad port: {parts.netloc!r}") from None
    hostport = f"{parts.hostname}:{port or (443 if parts.scheme == 'https' else 80)}"
    bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return bare.rstrip("/"), hostport, query
