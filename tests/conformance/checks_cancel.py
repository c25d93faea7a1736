"""Calls that never finish on their own: the operator's timeout must cancel them the asyncio way,
so ``except CancelledError`` / ``finally`` run and the libraries close their connections.

Each writes a marker file ``<dir>/<token>`` from its cleanup code (Spark workers are processes on
this machine, so the test reads the files) and holds ``GET /slow?token=<token>`` open, so the test
server sees whether the connection was closed.
"""
from __future__ import annotations

import asyncio
import json
import os

# Imported here, not inside the calls: a Spark worker imports this module when it unpickles the
# function, before the operator's timeout clock starts, so even a first call on a busy machine reaches
# the server long before the timeout (an import inside the call could eat the whole timeout).
import aiohttp
import anyio
import httpx

try:  # the openai SDK 3.x's HTTP library: Python 3.11+ only
    import httpx2
except ImportError:  # pragma: no cover - the py3.10 leg
    httpx2 = None


def token_for(cfg: dict, kind: str) -> str:
    return f"{cfg['run']}-{kind}-{cfg['row']}"


def _mark(cfg: dict, kind: str, text: str) -> None:
    path = os.path.join(cfg["dir"], token_for(cfg, kind))
    # Append: a second cleanup run (or a finally without a cancel) shows up as a second line.
    with open(path, "a") as f:
        f.write(text + "\n")


async def hang_in_httpx(arg: str) -> str:
    cfg = json.loads(arg)
    client = httpx.AsyncClient(base_url=cfg["http"], timeout=600)
    seen = "no-cancel"
    try:
        async with client:
            await client.get("/slow", params={"token": token_for(cfg, "httpx")})
        return "finished"  # the server holds /slow far longer than the operator timeout
    except asyncio.CancelledError:
        seen = "cancelled"
        raise
    finally:
        _mark(cfg, "httpx", f"{seen} closed={client.is_closed}")


async def hang_in_httpx2(arg: str) -> str:
    cfg = json.loads(arg)
    client = httpx2.AsyncClient(base_url=cfg["http"], timeout=600)
    seen = "no-cancel"
    try:
        async with client:
            await client.get("/slow", params={"token": token_for(cfg, "httpx2")})
        return "finished"
    except asyncio.CancelledError:
        seen = "cancelled"
        raise
    finally:
        _mark(cfg, "httpx2", f"{seen} closed={client.is_closed}")


async def hang_in_aiohttp(arg: str) -> str:
    cfg = json.loads(arg)
    session = aiohttp.ClientSession(cfg["http"])
    seen = "no-cancel"
    try:
        async with session:
            async with session.get("/slow", params={"token": token_for(cfg, "aiohttp")}) as response:
                await response.read()
        return "finished"
    except asyncio.CancelledError:
        seen = "cancelled"
        raise
    finally:
        _mark(cfg, "aiohttp", f"{seen} closed={session.closed}")


async def hang_in_task_group(arg: str) -> str:
    """The cancel must also reach children: an anyio task group's child holding an httpx request."""
    cfg = json.loads(arg)

    async def child() -> None:
        client = httpx.AsyncClient(base_url=cfg["http"], timeout=600)
        seen = "no-cancel"
        try:
            async with client:
                await client.get("/slow", params={"token": token_for(cfg, "taskgroup")})
        except asyncio.CancelledError:
            seen = "cancelled"
            raise
        finally:
            _mark(cfg, "taskgroup", f"child {seen} closed={client.is_closed}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(child)
    return "finished"
