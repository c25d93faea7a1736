"""HTTP: :class:`HttpLookup` (JSON rows by key) and :func:`http_client` (the same transport for your
own ``async def``), over pyreqwest when installed, else aiohttp.

The package, one module per concern:

* ``lookup.py`` -- :class:`HttpLookup`: configuration, the shared transport, batches;
* ``request.py`` / ``response.py`` -- what is sent (URLs, keys, auth headers) and how an answer is
  read (:class:`HttpStatusError`, :func:`parse_retry_after`, JSON rows);
* ``transport.py`` -- the one seam to a client library (``Transport``, ``Answer``,
  ``TransportFailure``); ``_pyreqwest.py`` and ``_aiohttp.py`` implement it and ``choose.py``
  picks one (``transport=``, ``AIOSPARK_HTTP_TRANSPORT``);
* ``client.py`` -- :class:`HttpClient`, :class:`HttpResponse`, :func:`http_client`;
* ``codec.py`` -- JSON bodies (orjson).

Example::

    from aiospark.connectors.http import HttpLookup, http_client

    items = HttpLookup("http://127.0.0.1:8080/item/{id}", "name STRING, price DOUBLE")
"""

from __future__ import annotations

from .client import HttpClient, HttpResponse, http_client
from .lookup import HttpLookup
from .response import HttpStatusError, parse_retry_after

__all__ = ["HttpClient", "HttpLookup", "HttpResponse", "HttpStatusError", "http_client", "parse_retry_after"]
