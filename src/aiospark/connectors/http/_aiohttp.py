"""The aiohttp transport: a ``ClientSession`` over a bounded ``TCPConnector`` (always installed).

Example::

    t = AiohttpTransport(headers={}, max_connections=100, timeout=10.0)
    answer = await t.send("GET", "http://127.0.0.1:8080/item/1")
    await t.close()
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from .transport import Answer, Transport, TransportFailure

__all__ = ["AiohttpTransport"]


def _proxy_env() -> bool:
    """Whether the environment names a proxy (``HTTP_PROXY``, ``https_proxy``, ``ALL_PROXY``, ...)."""
    return any(k.lower() in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")
               for k in os.environ)


class AiohttpTransport(Transport):
    """aiohttp: a ``ClientSession`` with a ``TCPConnector(limit=max_connections)``."""

    name = "aiohttp"

    def __init__(self, *, headers: Mapping[str, str], max_connections: int, timeout: float | None) -> None:
        import aiohttp
        from yarl import URL

        self._aiohttp, self._url = aiohttp, URL
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections),
            timeout=aiohttp.ClientTimeout(total=timeout), headers=dict(headers),
            # trust_env: proxies from the environment; it costs a look at os.environ per request,
            # so only when a proxy variable is set at all
            raise_for_status=False, trust_env=_proxy_env())

    async def send(self, method: str, url: str, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None) -> Answer:
        aiohttp = self._aiohttp
        try:
            # encoded=True: the URL is already percent-encoded; yarl would re-encode '%'
            async with self._session.request(method, self._url(url, encoded=True), data=body,
                                             headers=headers) as resp:
                data = await resp.read()
                return Answer(resp.status, resp.headers, data, resp.reason)
        except asyncio.TimeoutError:
            raise TransportFailure("timeout", "no response in time") from None
        except aiohttp.ClientConnectorError as exc:
            # aiohttp < 3.13.5's certificate error raises AttributeError from its os_error property
            why = getattr(getattr(exc, "os_error", None), "strerror", None) or str(exc)
            raise TransportFailure("connect", why) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportFailure("other", f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self._session.close()
