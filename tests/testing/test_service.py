"""Tests of the fault-injecting HTTP service (tests.support.service).

Real HTTP over 127.0.0.1 with aiohttp clients driven by ``asyncio.run``;
no mocks.  Timing asserts use generous bounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

import aiohttp
import psutil
import pytest
from yarl import URL

from tests.support.service import FaultService, ServiceConfig, expected_item
from tests.support.service_server import ServiceCore

pytestmark = pytest.mark.timeout(60)

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- helpers -------------------------------------------------------------------------
def item_url(base: str, key: str) -> URL:
    return URL(f"{base}/item/{quote(key, safe='')}", encoded=True)


async def fetch(session: aiohttp.ClientSession, url: Any, *, timeout: float = 10.0,
                method: str = "GET", payload: Any = None) -> tuple[int, dict[str, str], Any]:
    """(status, headers, decoded JSON body or None) of one request."""
    async with session.request(method, url, json=payload,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        raw = await resp.read()
        body = json.loads(raw) if raw else None
        return resp.status, dict(resp.headers), body


async def fetch_many(urls: list[Any], *, timeout: float = 10.0, limit: int = 100) -> list[Any]:
    """Fire all requests concurrently; results are tuples or exceptions."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as session:
        return await asyncio.gather(*(fetch(session, u, timeout=timeout) for u in urls), return_exceptions=True)


async def fetch_sequential(urls: list[Any], *, timeout: float = 10.0) -> list[Any]:
    out: list[Any] = []
    async with aiohttp.ClientSession() as session:
        for u in urls:
            try:
                out.append(await fetch(session, u, timeout=timeout))
            except Exception as exc:  # faults are expected here
                out.append(exc)
    return out


def get_json(url: str) -> Any:
    with NO_PROXY.open(url, timeout=10) as resp:
        return json.loads(resp.read())


def url_outcome(url: str) -> str:
    """Status of one urllib GET (no retries, fresh connection) as a string, or "reset"."""
    try:
        with NO_PROXY.open(url, timeout=10) as resp:
            return str(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return str(exc.code)
    except (ConnectionError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        assert isinstance(reason, ConnectionError), exc
        return "reset"


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


# -- latency and payloads ------------------------------------------------------------
def test_item_latency_and_payload() -> None:
    with FaultService(ServiceConfig(latency=0.15)) as svc:
        assert svc.url.startswith("http://127.0.0.1:")

        async def run() -> list[float]:
            took = []
            async with aiohttp.ClientSession() as session:
                for key in ("a", "b", "c"):
                    t0 = time.monotonic()
                    status, headers, body = await fetch(session, item_url(svc.url, key))
                    took.append(time.monotonic() - t0)
                    assert status == 200 and headers["Content-Type"] == "application/json"
                    assert body == expected_item(key) == {"key": key, "value": body["value"], "name": f"item-{key}"}
            return took

        took = asyncio.run(run())
        assert all(0.14 <= t < 1.5 for t in took), took
        stats = svc.stats()
        assert (stats["requests"], stats["ok"], stats["item_requests"]) == (3, 3, 3)
        assert stats["key_hits"] == {"a": 1, "b": 1, "c": 1}
        assert stats["statuses"] == {"200": 3}


def test_latency_distributions_and_slow_fraction() -> None:
    cases = [
        (ServiceConfig(latency=0.1, latency_dist="uniform", jitter=0.05, seed=3), 0.045, 1.5),
        (ServiceConfig(latency=0.05, latency_dist="lognormal", sigma=0.3, seed=3), 0.0, 2.0),
        (ServiceConfig(latency=0.0, slow_fraction=1.0, slow_latency=0.3), 0.29, 2.0),
    ]
    for config, low, high in cases:
        with FaultService(config) as svc:
            async def run() -> list[float]:
                took = []
                async with aiohttp.ClientSession() as session:
                    for i in range(4):
                        t0 = time.monotonic()
                        status, _, _ = await fetch(session, item_url(svc.url, f"k{i}"))
                        assert status == 200
                        took.append(time.monotonic() - t0)
                return took

            took = asyncio.run(run())
            assert all(low <= t < high for t in took), (config, took)
    # lognormal draws: median ~ latency, long right tail
    core = ServiceCore(ServiceConfig(latency=0.02, latency_dist="lognormal", sigma=1.0, seed=1))
    draws = sorted(core._latency(core.config) for _ in range(2001))
    assert 0.015 < draws[1000] < 0.027 and draws[0] < draws[-1] / 10


@pytest.mark.parametrize("key", [
    "a/b", "a%2Fb", "100%", 'quo"te', "it's", "sp ace", "plus+sign", "ü日本🙂",
    "?q=1&x=#frag", "a\\b", "..", "tab\tnl\n", "semi;colon,comma",
])
def test_special_keys_echoed_literally(key: str) -> None:
    with FaultService(ServiceConfig(latency=0.0)) as svc:
        [(status, _, body)] = asyncio.run(fetch_many([item_url(svc.url, key)]))
        assert status == 200
        assert body == expected_item(key)
        assert svc.stats()["key_hits"] == {key: 1}


def test_unencoded_slash_is_part_of_the_key() -> None:
    with FaultService(ServiceConfig(latency=0.0)) as svc:
        assert get_json(svc.url + "/item/a/b")["key"] == "a/b"
        assert get_json(svc.url + "/item/a%2Fb")["key"] == "a/b"
        assert get_json(svc.url + "/item/x?ignored=1")["key"] == "x"
        assert svc.stats()["key_hits"] == {"a/b": 2, "x": 1}


def test_batch_and_echo() -> None:
    keys = ["k1", "a/b", "ü", "k1"]
    with FaultService(ServiceConfig(latency=0.2)) as svc:
        async def run() -> tuple[Any, Any, float, Any]:
            async with aiohttp.ClientSession() as session:
                t0 = time.monotonic()
                batch = await fetch(session, f"{svc.url}/batch", method="POST", payload={"keys": keys})
                took = time.monotonic() - t0
                bad = await fetch(session, f"{svc.url}/batch", method="POST", payload={"nokeys": 1})
                echo = await fetch(session, f"{svc.url}/echo?a=1&b=x%20y&a=2&c=%C3%BC")
                return batch, bad, took, echo

        batch, bad, took, echo = asyncio.run(run())
        assert batch[0] == 200
        assert batch[2] == {"results": {k: expected_item(k) for k in keys}}
        assert 0.19 <= took < 1.5  # one latency for the whole batch
        assert bad[0] == 400 and "keys" in bad[2]["error"]
        assert echo[0] == 200
        assert echo[2] == {"query": {"a": "1", "b": "x y", "c": "ü"},
                           "items": [["a", "1"], ["b", "x y"], ["a", "2"], ["c", "ü"]]}
        stats = svc.stats()
        assert (stats["batch_requests"], stats["batch_keys"], stats["echo_requests"]) == (1, 4, 1)
        assert (stats["requests"], stats["ok"], stats["bad_requests"]) == (2, 2, 1)
        assert stats["key_hits"] == {"k1": 2, "a/b": 1, "ü": 1}


def test_routing_errors_are_not_counted() -> None:
    with FaultService(ServiceConfig(latency=0.0, error_rate=1.0)) as svc:
        assert url_outcome(svc.url + "/nope") == "404"
        assert url_outcome(svc.url + "/item/") == "404"
        req = urllib.request.Request(svc.url + "/item/x", data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            NO_PROXY.open(req, timeout=10)
        assert err.value.code == 405
        err.value.close()
        assert url_outcome(svc.url + "/health") == "200"
        stats = svc.stats()
        assert stats["requests"] == 0 and stats["errors_5xx"] == 0 and stats["key_hits"] == {}


def test_load_helper_reports_throughput() -> None:
    from tests.support.service_load import measure_throughput

    report = measure_throughput(ServiceConfig(latency=0.01), concurrency=20, seconds=0.5, warmup=0.2)
    assert report["statuses"].keys() == {"200"}
    assert report["server_requests"] == report["statuses"]["200"] > 20
    assert report["client_requests_per_second"] > 0 and report["server_cpu_seconds"] > 0
    assert report["peak_in_flight"] > 1 and report["peak_in_flight"] <= 20


# -- faults -------------------------------------------------------------------------------
def test_error_rate_gives_only_5xx_and_stats_stay_clean() -> None:
    with FaultService(ServiceConfig(latency=0.0, error_rate=1.0, seed=5)) as svc:
        results = asyncio.run(fetch_sequential([item_url(svc.url, f"k{i}") for i in range(40)]))
        statuses = [r[0] for r in results]
        assert set(statuses) == {500, 503}
        stats = svc.stats()
        assert stats["errors_5xx"] == 40 and stats["ok"] == 0
        assert stats["statuses"] == {"500": statuses.count(500), "503": statuses.count(503)}
        # control endpoints are never faulted
        assert get_json(svc.url + "/stats")["errors_5xx"] == 40
        assert get_json(svc.control_url + "/stats")["errors_5xx"] == 40


def test_hang_times_out_client_and_is_counted() -> None:
    with FaultService(ServiceConfig(latency=0.0, hang_rate=1.0)) as svc:
        t0 = time.monotonic()
        [result] = asyncio.run(fetch_many([item_url(svc.url, "h")], timeout=0.2))
        assert isinstance(result, asyncio.TimeoutError), result
        assert time.monotonic() - t0 < 10.0  # the 0.2 s client timeout ended it (the request hangs forever)
        stats = svc.stats()
        assert stats["hangs"] == 1 and stats["ok"] == 0 and stats["statuses"] == {}
        # once the client gives up, the hung request is released
        svc.wait_for(lambda s: s["in_flight"] == 0 and s["connections_open"] == 0)


def test_reset_closes_connection_without_response() -> None:
    with FaultService(ServiceConfig(latency=0.0, reset_rate=1.0)) as svc:
        # urllib never retries; aiohttp would silently retry an idempotent GET once,
        # so the aiohttp check uses POST /batch.
        assert [url_outcome(svc.url + f"/item/r{i}") for i in range(3)] == ["reset"] * 3

        async def batch() -> Any:
            async with aiohttp.ClientSession() as session:
                return await fetch(session, f"{svc.url}/batch", method="POST", payload={"keys": ["a"]})

        with pytest.raises(aiohttp.ClientConnectionError):
            asyncio.run(batch())
        stats = svc.stats()
        assert stats["resets"] == 4 and stats["ok"] == 0 and stats["statuses"] == {}


def test_slow_body_sends_headers_then_dribbles() -> None:
    with FaultService(ServiceConfig(latency=0.0, slow_body_rate=1.0, slow_body_seconds=0.6)) as svc:
        async def run() -> tuple[float, float, int, Any]:
            async with aiohttp.ClientSession() as session:
                t0 = time.monotonic()
                async with session.get(item_url(svc.url, "slow")) as resp:
                    headers_at = time.monotonic() - t0
                    body = await resp.read()
                    return headers_at, time.monotonic() - t0, resp.status, json.loads(body)

        headers_at, total, status, body = asyncio.run(run())
        assert status == 200 and body == expected_item("slow")
        assert total >= 0.5
        assert total - headers_at >= 0.3  # the body kept coming after the headers
        assert svc.stats()["slow_bodies"] == 1


def test_rate_429_with_retry_after() -> None:
    # a latency far above any scheduling delay, so "answered before the latency" holds under load
    with FaultService(ServiceConfig(latency=10.0, rate_429=1.0, retry_after=2)) as svc:
        t0 = time.monotonic()
        [(status, headers, body)] = asyncio.run(fetch_many([item_url(svc.url, "x")]))
        assert status == 429 and headers["Retry-After"] == "2" and body["retry_after"] == 2
        assert time.monotonic() - t0 < 5.0  # answered at once, long before the 10 s latency
        assert svc.stats()["rate_limited_429"] == 1
        svc.update(retry_after=0.5)
        [(status, headers, _)] = asyncio.run(fetch_many([item_url(svc.url, "y")]))
        assert status == 429 and headers["Retry-After"] == "0.5"


def test_burst_429_pattern() -> None:
    with FaultService(ServiceConfig(latency=0.0, burst_429=(5, 2))) as svc:
        results = asyncio.run(fetch_sequential([item_url(svc.url, f"k{i}") for i in range(10)]))
        assert [r[0] for r in results] == [200, 200, 200, 429, 429] * 2
        assert svc.stats()["rate_limited_429"] == 4


def _mix(seed: int) -> tuple[list[str], dict[str, Any]]:
    config = ServiceConfig(latency=0.0, error_rate=0.25, reset_rate=0.2, rate_429=0.2, seed=seed)
    with FaultService(config) as svc:
        outcomes = [url_outcome(svc.url + f"/item/k{i}") for i in range(40)]
        stats = svc.stats()
        svc.update(seed=seed)  # re-seeding restarts the draws
        assert [url_outcome(svc.url + f"/item/k{i}") for i in range(40)] == outcomes
        return outcomes, stats


def test_seeded_fault_mix_is_reproducible() -> None:
    first, stats = _mix(42)
    second, _ = _mix(42)
    other, _ = _mix(43)
    assert first == second
    assert first != other
    assert {"200", "429", "500", "503", "reset"} <= set(first)
    assert stats["requests"] == 40
    assert stats["ok"] + stats["errors_5xx"] + stats["rate_limited_429"] + stats["resets"] == 40
    assert stats["resets"] == first.count("reset")
    assert stats["rate_limited_429"] == first.count("429")
    assert stats["ok"] == first.count("200")


# -- concurrency and connections --------------------------------------------------------
def test_peak_concurrency_counted() -> None:
    with FaultService(ServiceConfig(latency=0.6)) as svc:
        async def run() -> tuple[list[Any], dict[str, Any]]:
            requests = asyncio.ensure_future(fetch_many([item_url(svc.url, f"c{i}") for i in range(25)]))
            # read the counters from another thread while the requests are in flight
            mid = await asyncio.to_thread(svc.wait_for, lambda s: s["in_flight"] == 25)
            return await requests, mid

        results, mid = asyncio.run(run())
        assert all(r[0] == 200 for r in results), results
        assert mid["requests"] == 25 and mid["ok"] == 0 and mid["connections_open"] == 25
        stats = svc.stats()
        assert stats["peak_in_flight"] == 25 and stats["in_flight"] == 0
        assert stats["peak_connections"] == 25 and stats["connections_total"] == 25
        svc.wait_for(lambda s: s["connections_open"] == 0)
        svc.reset_stats()
        stats = svc.stats()
        assert (stats["requests"], stats["peak_in_flight"], stats["peak_connections"], stats["key_hits"]) == (0, 0, 0, {})


@pytest.mark.parametrize("overload_status", [503, 429])
def test_max_concurrency_enforced(overload_status: int) -> None:
    config = ServiceConfig(latency=0.6, max_concurrency=5, overload_status=overload_status)
    with FaultService(config) as svc:
        results = asyncio.run(fetch_many([item_url(svc.url, f"m{i}") for i in range(12)]))
        statuses = sorted(r[0] for r in results)
        assert statuses == [200] * 5 + [overload_status] * 7
        if overload_status == 429:
            assert all(r[1]["Retry-After"] == "1" for r in results if r[0] == 429)
        stats = svc.stats()
        assert stats["peak_in_flight"] == 5 and stats["overload_rejections"] == 7 and stats["ok"] == 5
        key = "errors_5xx" if overload_status == 503 else "rate_limited_429"
        assert stats[key] == 7


def test_open_connections_tracked() -> None:
    with FaultService(ServiceConfig(latency=0.0)) as svc:
        socks = [socket.create_connection(("127.0.0.1", svc.port)) for _ in range(3)]
        try:
            svc.wait_for(lambda s: s["connections_open"] == 3)
        finally:
            for s in socks:
                s.close()
        stats = svc.wait_for(lambda s: s["connections_open"] == 0)
        assert stats["peak_connections"] == 3 and stats["connections_total"] == 3 and stats["requests"] == 0


def test_arrival_timestamps() -> None:
    with FaultService(ServiceConfig(latency=0.0)) as svc:
        t0 = time.monotonic()
        asyncio.run(fetch_many([item_url(svc.url, f"a{i}") for i in range(20)]))
        t1 = time.monotonic()
        arrivals = svc.arrivals()
        assert len(arrivals) == 20 and arrivals == sorted(arrivals)
        assert t0 <= arrivals[0] and arrivals[-1] <= t1


# -- runtime changes and lifecycle ------------------------------------------------------------
def test_update_at_runtime_and_invalid_updates() -> None:
    with FaultService(ServiceConfig(latency=0.0, error_rate=1.0)) as svc:
        assert asyncio.run(fetch_many([item_url(svc.url, "u")]))[0][0] in (500, 503)
        new = svc.update(error_rate=0.0)
        assert new.error_rate == 0.0 and svc.config == new
        assert asyncio.run(fetch_many([item_url(svc.url, "u")]))[0][0] == 200
        with pytest.raises(ValueError, match="error_rate"):
            svc.update(error_rate=2.0)
        with pytest.raises(ValueError, match="port"):
            svc.update(port=12345)
        with pytest.raises(TypeError, match="bogus"):
            svc.update(bogus=1)
        assert svc.config.error_rate == 0.0
        assert get_json(svc.url + "/config")["error_rate"] == 0.0


def test_stop_does_not_hang_with_hung_requests() -> None:
    svc = FaultService(ServiceConfig(latency=0.0, hang_rate=1.0)).start()
    port = svc.port

    async def run() -> tuple[list[Any], float]:
        tasks = asyncio.gather(fetch_many([item_url(svc.url, f"h{i}") for i in range(10)], timeout=20.0))
        await asyncio.to_thread(svc.wait_for, lambda s: s["hangs"] == 10)
        t0 = time.monotonic()
        await asyncio.to_thread(svc.stop)
        took = time.monotonic() - t0
        [results] = await tasks
        return results, took

    results, took = asyncio.run(run())
    assert took < 10.0  # the clients wait 20 s: stop() closed their connections instead
    assert all(isinstance(r, aiohttp.ClientError) for r in results), results
    assert port_closed(port)
    svc.stop()  # idempotent


def test_process_mode() -> None:
    config = ServiceConfig(latency=0.01, hang_rate=0.0)
    with FaultService(config, process=True) as svc:
        child = psutil.Process(svc.pid)
        assert child.exe() == psutil.Process().exe() and child.cmdline()[0] == sys.executable
        assert child.pid != os.getpid()
        results = asyncio.run(fetch_many([item_url(svc.url, f"p{i}") for i in range(5)]))
        assert all(r[0] == 200 and r[2] == expected_item(f"p{i}") for i, r in enumerate(results))
        for _ in range(3):
            stats = svc.stats()  # over HTTP to the control port: not counted as connections
        assert stats["requests"] == 5 and stats["ok"] == 5 and stats["connections_total"] == 5
        svc.update(error_rate=1.0)
        assert asyncio.run(fetch_many([item_url(svc.url, "e")]))[0][0] in (500, 503)
        with pytest.raises(ValueError, match="error_rate"):
            svc.update(error_rate=-1)
        svc.reset_stats()
        assert svc.stats()["requests"] == 0
        svc.update(error_rate=0.0, hang_rate=1.0)
        port = svc.port
        [hung] = asyncio.run(fetch_many([item_url(svc.url, "h")], timeout=0.3))
        assert isinstance(hung, asyncio.TimeoutError)
        assert svc.stats()["hangs"] == 1
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 15.0  # generous: a loaded machine; a leaked child would never end
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    assert port_closed(port)


def test_cli_prints_url_and_serves_until_killed() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.service", "--latency", "0", "--error-rate", "1", "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        url = proc.stdout.readline().decode().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:")
        with pytest.raises(urllib.error.HTTPError) as err:
            NO_PROXY.open(url + "/item/x", timeout=10)
        assert err.value.code in (500, 503)
        err.value.close()
        assert get_json(url + "/stats")["errors_5xx"] == 1
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    bad = subprocess.run([sys.executable, "-m", "tests.support.service", "--host", "0.0.0.0"],
                         capture_output=True, timeout=30)
    assert bad.returncode != 0 and b"127.0.0.1" in bad.stderr


# -- configuration validation -----------------------------------------------------------------
@pytest.mark.parametrize("changes, field", [
    ({"host": "0.0.0.0"}, "host"),
    ({"host": "localhost"}, "host"),
    ({"host": "10.0.0.1"}, "host"),
    ({"error_rate": 1.5}, "error_rate"),
    ({"hang_rate": -0.1}, "hang_rate"),
    ({"rate_429": float("nan")}, "rate_429"),
    ({"latency": -0.01}, "latency"),
    ({"latency": float("inf")}, "latency"),
    ({"slow_latency": -1}, "slow_latency"),
    ({"error_rate": 0.6, "reset_rate": 0.6}, "sum"),
    ({"latency_dist": "gauss"}, "latency_dist"),
    ({"latency_dist": "uniform", "latency": 0.01, "jitter": 0.02}, "jitter"),
    ({"burst_429": (0, 1)}, "burst_429"),
    ({"burst_429": (5, 6)}, "burst_429"),
    ({"max_concurrency": 0}, "max_concurrency"),
    ({"overload_status": 500}, "overload_status"),
    ({"port": 70000}, "port"),
    ({"seed": "x"}, "seed"),
])
def test_invalid_config_rejected(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ServiceConfig(**changes)


def test_config_roundtrip() -> None:
    config = ServiceConfig(latency=0.03, burst_429=[10, 2], max_concurrency=8, seed=9)  # type: ignore[arg-type]
    assert config.burst_429 == (10, 2)
    assert ServiceConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(TypeError, match="nope"):
        ServiceConfig.from_dict({"nope": 1})
    with pytest.raises(RuntimeError, match="not started"):
        _ = FaultService(config).url
