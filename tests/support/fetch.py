"""The HTTP ``AsyncFunction`` the Spark tests call test services with (importable by Spark workers).

Example::

    out = aiospark.unordered_wait(df, Fetch(service.url), "id LONG", retry=RETRY)
"""
from __future__ import annotations

from aiospark import AsyncFunction


class Overloaded(Exception):
    """A 429 or 5xx answer: retryable, carrying its status."""

    retryable = True

    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


class Fetch(AsyncFunction):
    """GET {url}/item/{row[key]} with one aiohttp session per worker; 429/5xx raise :class:`Overloaded`."""

    def __init__(self, url, key="id"):
        self.url, self.key = url, key

    async def open(self):
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def async_invoke(self, row):
        async with self.session.get(f"{self.url}/item/{row[self.key]}") as response:
            if response.status >= 500 or response.status == 429:
                raise Overloaded(response.status)
            response.raise_for_status()
            await response.read()
            return [{self.key: row[self.key]}]

    async def close(self):
        await self.session.close()
