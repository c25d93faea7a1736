"""A failed batch is split only when a split can fix it, and a failing batch of n rows makes a
bounded number of calls (issue 44, item 2; the rule and the bound: aiospark.core.splits and
docs/design.md "Batched calls and key order").

The services are real HTTP servers on 127.0.0.1 called with aiohttp."""
import asyncio
import json
import math
import threading
from http.server import BaseHTTPRequestHandler

import aiohttp
import pytest

from aiospark.core import AsyncWaitOperator, BadInput, RetryStrategy, retry_on

from ..support.servers import free_port
from ..support.threaded_http import LoopbackHTTPServer
from ._util import Collector, run


class Service:
    """``POST /score`` with ``{"ids": [...]}``: 200 ``{"scores": [...]}``, or ``status`` for every
    request (a dead service), or 400 for a batch holding one of ``bad``. Counts requests and rows."""

    def __init__(self, status=200, bad=()):
        self.status, self.bad = status, set(bad)
        self.requests = self.rows = 0
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                ids = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["ids"]
                with service.lock:
                    service.requests += 1
                    service.rows += len(ids)
                bad = sorted(service.bad.intersection(ids))
                if service.status != 200:
                    code, body = service.status, {"error": "unavailable"}
                elif bad:
                    code, body = 400, {"error": f"bad ids {bad}"}
                else:
                    code, body = 200, {"scores": [i * 10 for i in ids]}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = LoopbackHTTPServer(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def scorer(url, *, bad_input=False):
    """A batch function calling the service with aiohttp (one session per test run)."""
    state = {}

    async def score(ids):
        session = state.get("session")
        if session is None:
            session = state["session"] = aiohttp.ClientSession()
        async with session.post(url, json={"ids": ids}) as response:
            if response.status == 400 and bad_input:
                raise BadInput(await response.text())
            response.raise_for_status()
            return (await response.json())["scores"]

    async def close():
        if "session" in state:
            await state["session"].close()

    return score, close


def bound(n, retries):
    """The documented bound: calls and rows a failing batch of n rows may cost."""
    return 2 * n - 1 + retries, n * (math.ceil(math.log2(n)) + 1) + retries * n


def run_batches(function, close, n, **kwargs):
    async def main():
        out = Collector()
        op = AsyncWaitOperator(function, out, capacity=n, batch_size=n, batch_delay=1.0, timeout=60.0,
                               on_error=lambda v, e: [f"error: {type(e).__name__}: {e}"], **kwargs)
        await op.open()
        try:
            for v in range(n):
                await op.process_element(v)
            await op.finish()
        finally:
            await op.close()
            await close()
        return out.values()

    return run(main(), guard=60.0)


RETRY3 = RetryStrategy.fixed_delay(3, 0.001)


@pytest.mark.parametrize("status", [500, 503])
def test_a_dead_service_with_three_retries_costs_four_calls_not_a_split_storm(status):
    """Issue 44: batch_size=64 and 3 retries against a service answering 5xx made 508 calls
    billing 1,792 rows; the error is retried (transient), so splitting cannot fix it."""
    with Service(status=status) as service:
        score, close = scorer(service.url)
        values = run_batches(score, close, 64, retry=RETRY3)
    assert len(values) == 64 and all(str(status) in v for v in values)
    assert (service.requests, service.rows) == (4, 4 * 64)
    calls, rows = bound(64, 3)
    assert service.requests <= calls and service.rows <= rows


def test_a_5xx_without_retries_is_the_service_s_and_one_call_for_the_whole_batch():
    """No retry strategy: a 500 is the service's state (5xx, 408 and 429 are never split)."""
    with Service(status=500) as service:
        score, close = scorer(service.url)
        values = run_batches(score, close, 64)
    assert len(values) == 64 and all("500" in v for v in values)
    assert (service.requests, service.rows) == (1, 64)


def test_a_service_refusing_every_call_alike_costs_one_probe_line_not_the_bisection_tree():
    """Every call fails with one same error that may be a row's (a 400, no retry strategy): only
    one part per level is split further (the probe) while the other waits; the probe's single
    row fails alike, so the error is every row's: 1 + 2 * log2(64) calls, about 3n rows."""
    with Service(status=400) as service:
        score, close = scorer(service.url)
        values = run_batches(score, close, 64)
    assert len(values) == 64 and all("ClientResponseError: 400" in v for v in values)
    assert service.requests == 1 + 2 * 6
    assert service.rows == 64 + 2 * (32 + 16 + 8 + 4 + 2 + 1)


def test_scattered_bad_rows_with_one_message_are_isolated_not_every_row_s():
    """Review of issue 44: 64 rows, rows 0, 16, 32, 48 refused with one same ValueError and no
    retry gave 64 error rows after 7 calls (the halves and quarters failed alike). The probe's
    part [8..15] succeeds, so the waiting parts are split too: exactly the 4 bad rows fail."""
    calls = []
    bad = {0, 16, 32, 48}

    async def refuses(ids):
        calls.append(list(ids))
        if bad.intersection(ids):
            raise ValueError("refused")
        return [i * 10 for i in ids]

    values = run_batches(refuses, _nothing, 64)
    assert [i for i, v in enumerate(values) if v == "error: ValueError: refused"] == sorted(bad)
    assert [v for i, v in enumerate(values) if i not in bad] == [i * 10 for i in range(64) if i not in bad]
    max_calls, max_rows = bound(64, 0)
    assert len(calls) <= max_calls and sum(map(len, calls)) <= max_rows


def test_parts_failing_with_different_errors_are_split_at_once():
    """Two halves with different messages: the errors depend on the rows, both halves are split."""
    calls = []

    async def each_half(ids):
        calls.append(list(ids))
        if 3 in ids or 12 in ids:
            raise ValueError(f"refused {3 if 3 in ids else 12}" if not (3 in ids and 12 in ids) else "both")
        return [i * 10 for i in ids]

    values = run_batches(each_half, _nothing, 16)
    assert [i for i, v in enumerate(values) if isinstance(v, str)] == [3, 12]
    assert values[3] == "error: ValueError: refused 3" and values[12] == "error: ValueError: refused 12"


def test_a_closed_port_fails_each_row_within_the_bound():
    port = free_port()  # nothing listens there
    score, close = scorer(f"http://127.0.0.1:{port}/score")
    calls = []

    async def counted(ids):
        calls.append(len(ids))
        return await score(ids)

    values = run_batches(counted, close, 64, retry=RETRY3)
    assert len(values) == 64 and all("ClientConnectorError" in v for v in values)
    assert len(calls) == 4  # retried (transient), never split
    max_calls, max_rows = bound(64, 3)
    assert len(calls) <= max_calls and sum(calls) <= max_rows


def test_an_error_the_retry_predicate_does_not_retry_is_split_until_the_bad_row_fails_alone():
    with Service(bad={37}) as service:
        score, close = scorer(service.url)
        values = run_batches(score, close, 64, retry=RetryStrategy.fixed_delay(3, 0.001,
                                                                               exception_predicate=retry_on(ConnectionError)))
    assert values[:37] + values[38:] == [v * 10 for v in range(64) if v != 37]
    assert values[37].startswith("error: ClientResponseError: 400")
    assert service.requests == 1 + 2 * 6  # the batch, then both halves at each of 6 levels


def test_bad_input_said_by_the_function_is_not_retried_and_is_split_under_a_retry_all_strategy():
    with Service(bad={5, 40}) as service:
        score, close = scorer(service.url, bad_input=True)
        values = run_batches(score, close, 64, retry=RETRY3)
    assert [v for i, v in enumerate(values) if i not in (5, 40)] == [v * 10 for v in range(64) if v not in (5, 40)]
    assert "BadInput" in values[5] and "bad ids [5]" in values[5]
    assert "BadInput" in values[40] and "bad ids [40]" in values[40]
    calls, rows = bound(64, 3)
    assert service.requests <= calls and service.rows <= rows


def test_an_error_retried_by_the_strategy_is_not_split_even_if_one_row_causes_it():
    """The user's retry predicate takes the error for transient: splitting is not tried (raise
    BadInput, or retry only what is transient, to have bad rows isolated)."""
    with Service(bad={5}) as service:
        score, close = scorer(service.url)
        values = run_batches(score, close, 64, retry=RETRY3)
    assert all("400" in v for v in values)
    assert service.requests == 4


class ServiceError(Exception):
    def __init__(self, message, **attrs):
        super().__init__(message)
        self.__dict__.update(attrs)


@pytest.mark.parametrize("error", [
    TimeoutError("read timed out"),
    ServiceError("rate limited", retry_after=0.001),
    ServiceError("429 Too Many Requests", status=429),
    ConnectionResetError("reset by peer"),
    ServiceError("Service Unavailable", status=503),
    ServiceError("refused by 127.0.0.1:1", retryable=True),
], ids=["timeout", "retry-after", "429", "connection", "503", "marked-retryable"])
def test_timeouts_rate_limits_and_lost_connections_are_never_split(error):
    calls = []

    async def fails(ids):
        calls.append(list(ids))
        raise error

    values = run_batches(fails, _nothing, 16)
    assert calls == [list(range(16))]
    assert len(values) == 16 and all(type(error).__name__ in v for v in values)


def test_a_spent_budget_is_never_split():
    from aiospark.core.durable import BudgetGate

    asked = []

    class Spent(BudgetGate):
        def take(self, value):
            asked.append(len(value))
            return False

    calls = []

    async def fn(ids):
        calls.append(ids)
        return ids

    values = run_batches(fn, _nothing, 16, budget=Spent())
    assert calls == [] and all("BudgetExhausted" in v for v in values)
    assert asked == [16]  # refused once for the batch: no half asks again


def test_every_row_failing_with_its_own_error_costs_exactly_the_bisection_tree():
    calls = []

    async def each_bad(ids):
        calls.append(len(ids))
        raise ValueError(f"bad {ids}")

    values = run_batches(each_bad, _nothing, 16)
    assert values == [f"error: ValueError: bad [{v}]" for v in range(16)]
    assert len(calls) == 2 * 16 - 1 and sum(calls) == 16 * (4 + 1)  # the bound, reached


def test_halves_continue_the_batch_s_retries_instead_of_starting_over():
    """A batch with a bad row and a flaky service (every first attempt of a call fails): the
    batch and its halves share the batch's 2 retries; each half does not get 2 of its own."""
    attempts = []

    async def flaky(ids):
        first = ids not in attempts
        attempts.append(list(ids))
        if first:
            raise ConnectionError("flaky")
        if 5 in ids:
            raise ValueError("bad 5")
        return [i * 10 for i in ids]

    values = run_batches(flaky, _nothing, 8, retry=RetryStrategy.fixed_delay(
        2, 0.001, exception_predicate=retry_on(ConnectionError)))
    calls = {tuple(ids) for ids in attempts}
    assert len(attempts) - len(calls) == 2  # retries, all calls of the batch together
    max_calls, max_rows = bound(8, 2)
    assert len(attempts) <= max_calls and sum(map(len, attempts)) <= max_rows
    for v, value in enumerate(values):  # each row its result, or the error its call ended with
        assert value == v * 10 or value == "error: ConnectionError: flaky" or (v == 5 and "bad 5" in value)


async def _nothing():
    pass


def test_the_split_storm_of_the_issue_is_gone_for_any_retry_count():
    for retries in (0, 1, 3, 5):
        with Service(status=503) as service:
            score, close = scorer(service.url)
            run_batches(score, close, 64, retry=RetryStrategy.fixed_delay(retries, 0.001) if retries else None)
        calls, rows = bound(64, retries)
        assert service.requests == 1 + retries <= calls and service.rows <= rows


def test_a_half_waiting_for_its_sibling_times_out_with_the_batch_instead_of_being_held():
    """The left half fails and waits for the right one to be over before it is split; the right
    one hangs past the batch's deadline: every row gets its timeout outcome, none is held."""
    async def half_hangs(ids):
        if len(ids) == 4:
            raise ValueError("the whole batch fails")
        if 0 in ids:
            raise ValueError("left half fails")
        await asyncio.sleep(30)

    values = run(_timed(half_hangs), guard=20.0)
    assert len(values) == 4 and all("AsyncTimeoutError" in v for v in values)


async def _timed(fn):
    out = Collector()
    op = AsyncWaitOperator(fn, out, capacity=4, batch_size=4, batch_delay=0.1, timeout=0.3,
                           on_error=lambda v, e: [f"error: {type(e).__name__}: {e}"])
    await op.open()
    try:
        for v in range(4):
            await op.process_element(v)
        await op.finish()
    finally:
        await op.close()
    return out.values()


def test_a_503_read_by_httpx_without_retries_is_one_call_for_the_whole_batch():
    """httpx's HTTPStatusError carries the status on its response: the service's, never split."""
    import httpx

    with Service(status=503) as service:
        client = httpx.AsyncClient()

        async def score(ids):
            response = await client.post(service.url, json={"ids": ids})
            response.raise_for_status()
            return response.json()["scores"]

        values = run_batches(score, client.aclose, 64)
    assert len(values) == 64 and all("HTTPStatusError" in v and "503" in v for v in values)
    assert (service.requests, service.rows) == (1, 64)


# -- review of issue 44, item 3: lost connections and service statuses are never split ------------

def _httpx_scorer(url):
    import httpx

    client = httpx.AsyncClient(timeout=5.0)

    async def score(ids):
        response = await client.post(url, json={"ids": ids})
        response.raise_for_status()
        return response.json()["scores"]

    return score, client.aclose


def _counted(function):
    calls = []

    async def counted(ids):
        calls.append(len(ids))
        return await function(ids)

    return counted, calls


@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
def test_a_closed_port_without_retries_is_one_call_not_a_split(library):
    """Review: httpx's ConnectError and aiohttp's ClientConnectorError with retry=None cost 7 calls
    (the batch, its halves and its quarters); a lost connection is every row's."""
    url = f"http://127.0.0.1:{free_port()}/score"  # nothing listens there
    score, close = _httpx_scorer(url) if library == "httpx" else scorer(url)
    counted, calls = _counted(score)
    values = run_batches(counted, close, 64)
    name = "ConnectError" if library == "httpx" else "ClientConnectorError"
    assert len(values) == 64 and all(name in v for v in values)
    assert calls == [64]


@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
@pytest.mark.parametrize("status", [500, 502, 504, 408, 429])
def test_service_statuses_read_by_httpx_and_aiohttp_are_never_split(library, status):
    with Service(status=status) as service:
        score, close = _httpx_scorer(service.url) if library == "httpx" else scorer(service.url)
        values = run_batches(score, close, 16)
    assert len(values) == 16 and all(str(status) in v for v in values)
    assert (service.requests, service.rows) == (1, 16)


def test_an_os_error_of_any_kind_is_never_split():
    calls = []

    async def fails(ids):
        calls.append(len(ids))
        raise OSError(101, "Network is unreachable")

    values = run_batches(fails, _nothing, 16)
    assert calls == [16] and all("OSError" in v for v in values)


def test_parts_waiting_for_the_probe_time_out_with_the_batch_instead_of_being_held():
    """Every part fails alike, so one part waits (no call) while the probe is split; the probe's
    halves hang past the deadline: the waiting rows time out too, none is held."""
    calls = []

    async def refuses_then_hangs(ids):
        calls.append(len(ids))
        if len(ids) > 2:
            raise ValueError("refused")
        await asyncio.sleep(30)

    async def main():
        out = Collector()
        op = AsyncWaitOperator(refuses_then_hangs, out, capacity=8, batch_size=8, batch_delay=0.1, timeout=0.5,
                               on_error=lambda v, e: [f"error: {type(e).__name__}"])
        await op.open()
        try:
            for v in range(8):
                await op.process_element(v)
            await op.finish()
        finally:
            await op.close()
        return out.values()

    values = run(main(), guard=20.0)
    assert values == ["error: AsyncTimeoutError"] * 8
    assert calls == [8, 4, 4, 2, 2]  # the batch, its halves, then only the probe's halves
