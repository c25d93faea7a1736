"""Checks that third-party asyncio libraries work unchanged inside a call (module level: the workers
import them). Each talks only to the servers on 127.0.0.1 named in its JSON argument."""
from __future__ import annotations

import asyncio
import json


async def httpx_client(arg: str) -> str:
    """httpx (anyio underneath): a GET, and a read timeout that fires (anyio cancel scopes on the
    call's task)."""
    import httpx

    cfg = json.loads(arg)
    async with httpx.AsyncClient(base_url=cfg["http"]) as client:
        response = await client.get("/echo", params={"row": cfg["row"]})
        echoed = response.json()["query"]["row"] == str(cfg["row"])
        try:
            await client.get("/slow", params={"token": f"{cfg['run']}-httpx-read-{cfg['row']}"},
                             timeout=httpx.Timeout(30.0, read=0.1))  # only the read times out: a loaded host may be slow to write
            timed = "no-timeout"
        except httpx.ReadTimeout:
            timed = "read-timeout"
    return f"{response.status_code} echoed={echoed} {timed} closed={client.is_closed}"


async def httpx2_client(arg: str) -> str:
    """httpx2 (the openai SDK 3.x's HTTP library; anyio underneath), as :func:`httpx_client`."""
    import httpx2

    cfg = json.loads(arg)
    async with httpx2.AsyncClient(base_url=cfg["http"]) as client:
        response = await client.get("/echo", params={"row": cfg["row"]})
        echoed = response.json()["query"]["row"] == str(cfg["row"])
        try:
            await client.get("/slow", params={"token": f"{cfg['run']}-httpx2-read-{cfg['row']}"},
                             timeout=httpx2.Timeout(30.0, read=0.1))  # only the read (a WriteTimeout in CI)
            timed = "no-timeout"
        except httpx2.ReadTimeout:
            timed = "read-timeout"
    return f"{response.status_code} echoed={echoed} {timed} closed={client.is_closed}"


async def anyio_scopes(arg: str) -> str:
    """anyio's ``fail_after`` (fits / fires), a task group, ``to_thread.run_sync``, ``anyio.Event``."""
    import anyio

    seen = []
    with anyio.fail_after(30):
        await anyio.sleep(0.001)
    seen.append("fits")
    try:
        with anyio.fail_after(0.05):
            await anyio.sleep(30)
        seen.append("did-not-fire")
    except TimeoutError:
        seen.append("fired")
    results = []

    async def child(i: int) -> None:
        await anyio.sleep(0.001 * i)
        results.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(child, i)
    seen.append(f"group={sorted(results)}")
    with anyio.move_on_after(0.05) as scope:  # a task group cancelled from outside by its scope
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 30)
    seen.append("scope-cancelled" if scope.cancelled_caught else "scope-not-cancelled")
    seen.append(f"thread={await anyio.to_thread.run_sync(lambda: 6 * 7)}")
    event = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(event.wait)
        event.set()
    seen.append("event")
    return " ".join(seen)


async def tenacity_retrying(arg: str) -> str:
    """tenacity ``AsyncRetrying`` and the ``@retry`` decorator on an ``async def``."""
    from tenacity import AsyncRetrying, retry, stop_after_attempt, wait_fixed

    attempts = 0
    async for attempt in AsyncRetrying(stop=stop_after_attempt(5), wait=wait_fixed(0.001), reraise=True):
        with attempt:
            attempts += 1
            if attempts < 3:
                raise ConnectionError("flaky")
    calls = 0

    @retry(stop=stop_after_attempt(4), wait=wait_fixed(0.001), reraise=True)
    async def flaky() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls < 2:
            raise ConnectionError("flaky")
        return "done"

    return f"attempts={attempts} decorated={await flaky()} calls={calls}"


async def aiolimiter_limits(arg: str) -> str:
    """aiolimiter's ``AsyncLimiter`` admits every acquirer, a burst at once and the rest as it leaks."""
    from aiolimiter import AsyncLimiter

    limiter = AsyncLimiter(4, 0.05)  # 4 per 50 ms: 8 acquisitions take about one extra period
    admitted = 0

    async def one() -> None:
        nonlocal admitted
        async with limiter:
            admitted += 1

    await asyncio.wait_for(asyncio.gather(*(one() for _ in range(8))), 30)
    return f"admitted={admitted}"


async def sniffio_library(arg: str) -> str:
    import sniffio

    return sniffio.current_async_library()


async def aiohttp_session(arg: str) -> str:
    """aiohttp: a GET, and a ClientTimeout that fires (aiohttp's timer needs a current task)."""
    import aiohttp

    cfg = json.loads(arg)
    async with aiohttp.ClientSession(cfg["http"]) as session:
        async with session.get("/echo", params={"row": str(cfg["row"])}) as response:
            body = await response.json()
        try:
            async with session.get("/slow", params={"token": f"{cfg['run']}-aiohttp-read-{cfg['row']}"},
                                   timeout=aiohttp.ClientTimeout(total=0.1)) as slow:
                await slow.read()
            timed = "no-timeout"
        except asyncio.TimeoutError:
            timed = "timeout"
    return f"{response.status} echoed={body['query']['row'] == str(cfg['row'])} {timed} closed={session.closed}"


async def redis_asyncio(arg: str) -> str:
    """redis.asyncio against the real redis-server: SET/GET, INCR, a pipeline, a blocking pop with
    a timeout."""
    import redis.asyncio as aioredis

    cfg = json.loads(arg)
    key = f"conformance:{cfg['run']}:{cfg['row']}"
    async with aioredis.Redis.from_url(cfg["redis"], decode_responses=True) as client:
        await client.set(key, f"row-{cfg['row']}")
        value = await client.get(key)
        async with client.pipeline(transaction=True) as pipe:
            pipe.incr(f"{key}:n").incr(f"{key}:n").delete(key)
            piped = await pipe.execute()
        popped = await client.blpop([f"{key}:empty"], timeout=0.1)
    expected = f"row-{cfg['row']}"
    return f"get={value == expected} pipeline={piped} blpop={popped}"


async def asyncpg_queries(arg: str) -> str:
    """asyncpg against the real PostgreSQL: a parameterised query, a transaction, a pool, and a
    query timeout (asyncpg cancels the query server-side; the connection stays usable)."""
    import asyncpg

    cfg = json.loads(arg)
    conn = await asyncpg.connect(cfg["postgres"])
    try:
        doubled = await conn.fetchval("SELECT $1::int * 2", cfg["row"])
        async with conn.transaction():
            await conn.execute("CREATE TEMP TABLE t (v int)")
            await conn.executemany("INSERT INTO t VALUES ($1)", [(1,), (2,)])
            total = await conn.fetchval("SELECT sum(v) FROM t")
        try:
            await conn.fetchval("SELECT pg_sleep(30)", timeout=0.2)
            timed = "no-timeout"
        except asyncio.TimeoutError:
            timed = "timeout"
        after = await conn.fetchval("SELECT 1")
    finally:
        await conn.close()
    async with asyncpg.create_pool(cfg["postgres"], min_size=1, max_size=2) as pool:
        pooled = await asyncio.gather(*(pool.fetchval("SELECT $1::int", i) for i in range(3)))
    return f"doubled={doubled == 2 * cfg['row']} total={total} {timed} usable={after} pool={pooled}"


async def openai_sdk(arg: str) -> str:
    """The official OpenAI SDK against the local OpenAI-compatible server: chat + embeddings."""
    import openai

    cfg = json.loads(arg)
    async with openai.AsyncOpenAI(base_url=cfg["http"] + "/v1", api_key="test", max_retries=0) as client:
        chat = await client.chat.completions.create(
            model="conformance-chat", messages=[{"role": "user", "content": f"row {cfg['row']}"}])
        embeddings = await client.embeddings.create(model="conformance-embed", input=["ab", "abcd"])
    vectors = [[round(x, 3) for x in item.embedding] for item in embeddings.data]
    return f"{chat.choices[0].message.content} | {chat.usage.total_tokens} | {vectors}"


async def anthropic_sdk(arg: str) -> str:
    """The official Anthropic SDK against the local Anthropic-compatible server: messages.create."""
    import anthropic

    cfg = json.loads(arg)
    async with anthropic.AsyncAnthropic(base_url=cfg["http"], api_key="test", max_retries=0) as client:
        message = await client.messages.create(
            model="conformance-model", max_tokens=16, messages=[{"role": "user", "content": f"row {cfg['row']}"}])
    return f"{message.content[0].text} | {message.stop_reason} | {message.usage.output_tokens}"
