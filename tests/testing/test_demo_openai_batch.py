"""The demo OpenAI endpoint's Files and Batches API (:mod:`aiospark.app.demo_openai_batch`), driven by the
official SDK (``AsyncOpenAI``) and by plain HTTP: batch answers equal the live routes' answers, usage
included; failures, expiry, cancel, validation errors, limits, listing, and the per-custom_id
submission counter.

Each endpoint runs in a child process as a user starts it (:class:`DemoOpenAI`).
"""
from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from aiospark.app.demo_openai import DemoOpenAI

TERMINAL = ("completed", "failed", "expired", "cancelled")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def chat_body(i: int) -> dict[str, Any]:
    return {"model": "demo", "messages": [{"role": "user", "content": f"review number {i}"}]}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def chat_lines(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"custom_id": f"{prefix}{i}", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(i)}
            for i in range(n)]


def http(method: str, url: str, body: bytes | None = None, content_type: str = "application/json",
         raw: bool = False) -> tuple[int, Any]:
    """(status, decoded JSON, or the bytes when ``raw`` or not JSON) of a plain HTTP request."""
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": content_type} if body is not None else {})
    try:
        with _NO_PROXY.open(request, timeout=60) as response:
            status, data = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, data = exc.code, exc.read()
    if raw:
        return status, data
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def upload_http(base_url: str, data: bytes, purpose: str = "batch") -> tuple[int, Any]:
    boundary = secrets.token_hex(8)
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return http("POST", base_url + "/files", body, f"multipart/form-data; boundary={boundary}")


def live(base_url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return http("POST", base_url + path, json.dumps(body).encode())


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


async def finished(client: openai.AsyncOpenAI, batch_id: str) -> Any:
    while True:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in TERMINAL:
            return batch
        await asyncio.sleep(0.02)


async def submit(client: openai.AsyncOpenAI, lines: list[Any], endpoint: str = "/v1/chat/completions") -> Any:
    file = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    return await client.batches.create(input_file_id=file.id, endpoint=endpoint, completion_window="24h")


def sdk(endpoint: DemoOpenAI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="x", max_retries=0, timeout=60)


def result_lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def run_to_the_end(endpoint: DemoOpenAI, lines: list[Any]) -> tuple[Any, bytes, bytes]:
    """Submit ``lines``, wait for the batch's end: (the batch, its output file, its error file)."""
    async def go() -> tuple[Any, bytes, bytes]:
        async with sdk(endpoint) as client:
            batch = await finished(client, (await submit(client, lines)).id)
            return (batch, (await client.files.content(batch.output_file_id)).content,
                    (await client.files.content(batch.error_file_id)).content)

    return run(go())


@pytest.fixture(scope="module")
def endpoint():
    with DemoOpenAI(batch_delay=0.2) as running:
        yield running


def test_chat_batch_through_the_sdk_answers_as_the_live_route_with_its_usage(endpoint):
    lines = chat_lines(30, "chat-")
    lines[7]["body"]["response_format"] = {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}

    async def go() -> tuple[Any, Any, bytes]:
        async with sdk(endpoint) as client:
            created = await submit(client, lines)
            batch = await finished(client, created.id)
            return created, batch, (await client.files.content(batch.output_file_id)).content

    created, batch, output = run(go())
    assert created.status == "validating" and created.completion_window == "24h"
    assert created.expires_at == created.created_at + 24 * 3600
    assert batch.status == "completed" and batch.error_file_id is None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (30, 30, 0)
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    results = result_lines(output)
    assert [r["custom_id"] for r in results] == [line["custom_id"] for line in lines]
    prompt = completion = 0
    for line, result in zip(lines, results):
        status, answer = live(endpoint.base_url, "/chat/completions", line["body"])
        assert status == 200 and result["error"] is None and result["response"]["status_code"] == 200
        assert result["response"]["body"] == answer  # the live route's function answered it
        prompt += answer["usage"]["prompt_tokens"]
        completion += answer["usage"]["completion_tokens"]
    assert json.loads(results[7]["response"]["body"]["choices"][0]["message"]["content"])["n"] is not None
    assert len({r["id"] for r in results}) == len({r["response"]["request_id"] for r in results}) == 30
    assert batch.usage.input_tokens == prompt and batch.usage.output_tokens == completion
    assert batch.usage.total_tokens == prompt + completion


def test_embeddings_batch_through_the_sdk(endpoint):
    lines = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": "demo", "input": [f"text {i}", "other"], "dimensions": 8}} for i in range(12)]

    async def go() -> tuple[Any, bytes]:
        async with sdk(endpoint) as client:
            batch = await finished(client, (await submit(client, lines, "/v1/embeddings")).id)
            return batch, (await client.files.content(batch.output_file_id)).content

    batch, output = run(go())
    assert batch.status == "completed" and batch.request_counts.completed == 12
    for line, result in zip(lines, result_lines(output), strict=True):
        assert result["response"]["body"] == live(endpoint.base_url, "/embeddings", line["body"])[1]
        assert len(result["response"]["body"]["data"][1]["embedding"]) == 8
    assert batch.usage.output_tokens == 0 and batch.usage.input_tokens > 0


def test_failed_requests_go_to_the_error_file_with_the_live_error_or_a_server_error():
    lines = chat_lines(9)
    lines[4]["body"]["messages"] = []  # the live route refuses it (400)
    with DemoOpenAI(batch_delay=0.1, batch_fail_every=3) as endpoint:
        batch, output, errors = run_to_the_end(endpoint, lines)
        refused = live(endpoint.base_url, "/chat/completions", lines[4]["body"])
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (5, 4)
    failed = {r["custom_id"]: r for r in result_lines(errors)}
    assert set(failed) == {"r2", "r4", "r5", "r8"}  # lines 3, 6, 9 (every 3rd) and the refused one
    assert {r["custom_id"] for r in result_lines(output)} == {"r0", "r1", "r3", "r6", "r7"}
    assert failed["r2"]["response"]["status_code"] == 500 and failed["r2"]["error"]["code"] == "server_error"
    assert refused[0] == 400
    assert failed["r4"]["response"] == {"status_code": 400, "request_id": failed["r4"]["response"]["request_id"],
                                        "body": refused[1]}
    assert failed["r4"]["error"] == {"code": "invalid_request_error",
                                     "message": refused[1]["error"]["message"]}


def test_an_expired_batch_puts_the_requests_not_done_in_the_error_file():
    lines = chat_lines(20)
    with DemoOpenAI(batch_delay=0.1, batch_expire=True) as endpoint:
        batch, output, errors = run_to_the_end(endpoint, lines)
    assert batch.status == "expired" and batch.expired_at is not None and batch.completed_at is None
    done, expired = result_lines(output), result_lines(errors)
    assert [r["custom_id"] for r in done + expired] == [line["custom_id"] for line in lines]  # each once
    assert len(done) == 10 and batch.request_counts.completed == 10 and batch.request_counts.failed == 10
    assert all(r["response"] is None and r["error"]["code"] == "batch_expired" for r in expired)


def test_cancel_keeps_the_answers_made_before_it():
    lines = chat_lines(100)
    with DemoOpenAI(batch_delay=20) as endpoint:  # ten steps of 2 s: the cancel lands between two
        async def go() -> tuple[Any, Any, bytes | None, Any]:
            async with sdk(endpoint) as client:
                created = await submit(client, lines)
                while (await client.batches.retrieve(created.id)).request_counts.completed == 0:
                    await asyncio.sleep(0.05)
                cancelling = await client.batches.cancel(created.id)
                batch = await finished(client, created.id)
                output = (await client.files.content(batch.output_file_id)).content if batch.output_file_id else None
                with pytest.raises(openai.ConflictError) as again:
                    await client.batches.cancel(created.id)
                return cancelling, batch, output, again.value

        cancelling, batch, output, again = run(go())
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert batch.status == "cancelled" and batch.cancelled_at is not None and batch.error_file_id is None
    assert output is not None
    done = result_lines(output)
    assert 0 < len(done) == batch.request_counts.completed < 100
    assert [r["custom_id"] for r in done] == [f"r{i}" for i in range(len(done))]
    assert "cancelled" in str(again)


@pytest.mark.parametrize("bad, code, line", [
    (b"{not json", "invalid_json_line", 2),
    ({"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(0)}, "duplicate_custom_id", 2),
    ({"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": chat_body(0)}, "mismatched_url", 2),
    ({"custom_id": "", "method": "POST", "url": "/v1/chat/completions", "body": chat_body(0)}, "missing_custom_id", 2),
    ({"custom_id": "x", "method": "GET", "url": "/v1/chat/completions", "body": chat_body(0)}, "invalid_method", 2),
    ({"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": "hi"}, "invalid_body", 2),
    (None, "empty_file", None),
])
def test_an_invalid_input_file_fails_the_batch_through_plain_http(endpoint, bad, code, line):
    lines = [chat_lines(1)[0], bad, *chat_lines(3, "ok")] if bad is not None else [b"  "]
    status, file = upload_http(endpoint.base_url, jsonl(lines))
    assert status == 200 and file["object"] == "file" and file["purpose"] == "batch"
    assert file["bytes"] == len(jsonl(lines))
    status, batch = http("POST", endpoint.base_url + "/batches", json.dumps(
        {"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
         "metadata": {"job": "t"}}).encode())
    assert status == 200 and batch["metadata"] == {"job": "t"}
    while batch["status"] not in TERMINAL:
        batch = http("GET", f"{endpoint.base_url}/batches/{batch['id']}")[1]
    assert batch["status"] == "failed" and batch["failed_at"] is not None
    assert batch["output_file_id"] is None and batch["error_file_id"] is None
    assert [(e["code"], e["line"]) for e in batch["errors"]["data"]] == [(code, line)]
    assert batch["errors"]["object"] == "list" and batch["errors"]["data"][0]["message"]


def test_limits_per_file_fail_the_batch():
    with DemoOpenAI(batch_max_requests=5, batch_max_bytes=2000) as endpoint:
        async def go(lines: list[Any]) -> Any:
            async with sdk(endpoint) as client:
                return await finished(client, (await submit(client, lines)).id)

        many, big, fits = run(go(chat_lines(6))), run(go(chat_lines(4, "x" * 600))), run(go(chat_lines(5)))
        stats = endpoint.stats()
    assert many.status == "failed" and many.errors.data[0].code == "too_many_requests"
    assert "6 requests" in many.errors.data[0].message and "5" in many.errors.data[0].message
    assert big.status == "failed" and big.errors.data[0].code == "file_too_large"
    assert fits.status == "completed" and fits.request_counts.completed == 5
    assert sum(stats["batch_submitted"].values()) == 5  # failed batches submitted nothing


def test_files_and_batch_errors_in_openai_shapes(endpoint):
    base = endpoint.base_url
    status, file = upload_http(base, jsonl(chat_lines(1)))
    assert http("GET", f"{base}/files/{file['id']}") == (200, file)
    assert http("GET", f"{base}/files/{file['id']}/content", raw=True) == (200, jsonl(chat_lines(1)))
    assert http("DELETE", f"{base}/files/{file['id']}") == (200, {"id": file["id"], "object": "file", "deleted": True})
    status, body = http("GET", f"{base}/files/{file['id']}")
    assert status == 404 and body["error"]["code"] == "not_found"
    assert upload_http(base, b"{}", purpose="fine-tune")[0] == 400
    _, file = upload_http(base, jsonl(chat_lines(1)))
    for change, param in [({"input_file_id": "file-nope"}, "input_file_id"), ({"endpoint": "/v1/images"}, "endpoint"),
                          ({"completion_window": "1h"}, "completion_window"), ({"metadata": {"k": 1}}, "metadata")]:
        request = {"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
                   **change}
        status, body = http("POST", f"{base}/batches", json.dumps(request).encode())
        assert status in (400, 404) and body["error"]["param"] == param, body
    status, body = http("GET", f"{base}/batches/batch_nope")
    assert status == 404 and body["error"]["message"]

    async def sdk_errors() -> None:
        async with sdk(endpoint) as client:
            with pytest.raises(openai.NotFoundError):
                await client.batches.retrieve("batch_nope")
            with pytest.raises(openai.BadRequestError):
                await client.batches.create(input_file_id=file["id"], endpoint="/v1/completions",
                                            completion_window="24h")
    run(sdk_errors())


def test_list_pages_newest_first_with_after_and_limit(endpoint):
    async def go() -> tuple[list[str], list[str], Any]:
        async with sdk(endpoint) as client:
            made = [(await submit(client, chat_lines(1, f"list{i}-"))).id for i in range(3)]
            first = await client.batches.list(limit=2)
            listed = [b.id async for b in client.batches.list(limit=2)]  # the SDK follows 'after'
            return made, listed, first

    made, listed, first = run(go())
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert listed[:3] == made[::-1] and len(listed) == len(set(listed))
    status, page = http("GET", f"{endpoint.base_url}/batches?limit=1&after={made[2]}")
    assert status == 200 and [b["id"] for b in page["data"]] == [made[1]] and page["has_more"]
    assert page["first_id"] == page["last_id"] == made[1]
    assert http("GET", f"{endpoint.base_url}/batches?limit=0")[0] == 400


def test_stats_count_each_custom_id_submitted():
    with DemoOpenAI(batch_delay=0.05) as endpoint:
        async def go() -> None:
            async with sdk(endpoint) as client:
                await finished(client, (await submit(client, chat_lines(4))).id)
                await finished(client, (await submit(client, chat_lines(2, "s"))).id)
                await finished(client, (await submit(client, chat_lines(1))).id)  # r0 again: paid twice

        run(go())
        stats = endpoint.stats()
    assert stats["batch_submitted"] == {"r0": 2, "r1": 1, "r2": 1, "r3": 1, "s0": 1, "s1": 1}
    assert stats["batch_submitted_twice"] == 1
    assert stats["answered"] == 0  # batch requests are not live calls


@pytest.mark.parametrize("kwargs, words", [
    ({"batch_delay": -1}, "batch_delay"), ({"batch_fail_every": 0}, "batch_fail_every"),
    ({"batch_max_requests": 0}, "batch_max_requests"), ({"batch_max_bytes": 1.5}, "batch_max_bytes"),
])
def test_batch_options_are_checked_before_the_child_starts(kwargs, words):
    with pytest.raises(ValueError, match=words):
        DemoOpenAI(**kwargs)


def test_the_command_line_refuses_a_bad_batch_flag():
    done = subprocess.run([sys.executable, "-m", "aiospark.app.demo_service", "--openai", "--batch-fail-every", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "batch_fail_every must be a positive integer" in done.stderr
