"""The Batch API client (:mod:`aiospark.connectors.openai.batch_api`) against the demo endpoint's real
Files and Batches routes (:class:`DemoOpenAI`, a child process): round trips whose answers equal the
live endpoint's, the mapping of failed, expired, cancelled and failed-validation batches, the
per-file limits, protocol errors (never a silent drop), and the API key in no error or repr.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from aiospark.app.demo_openai import DemoOpenAI
from aiospark.connectors import ConnectorError, ConnectorTimeout, Secret
from aiospark.connectors.http import HttpStatusError
from aiospark.connectors.openai.batch_api import (
    BatchClient,
    BatchFailure,
    BatchInfo,
    BatchProtocolError,
    BatchRequest,
    plan_files,
)
from aiospark.connectors.openai.endpoint import open_endpoint
from aiospark.connectors.redaction import Redactor

from ._openai_support import KEY, run

CHAT, EMBED = "/v1/chat/completions", "/v1/embeddings"


def chat(i: int, **extra: Any) -> BatchRequest:
    return BatchRequest(f"row-{i}", {"model": "demo", "messages": [{"role": "user", "content": f"ticket {i}"}],
                                     **extra})


async def live_answers(base_url: str, path: str, requests: list[BatchRequest]) -> dict[str, dict]:
    """The live lane's answers to the same bodies, through the connector's own endpoint seam."""
    endpoint = await open_endpoint("auto", base_url, Secret(KEY), 60.0, 32, {}, Redactor(Secret(KEY)), "live")
    try:
        answers = await asyncio.gather(*(endpoint.post(path, r.body) for r in requests))
    finally:
        await endpoint.close()
    return {r.custom_id: a for r, a in zip(requests, answers)}


async def submit_and_wait(client: BatchClient, jsonl: bytes, endpoint: str = CHAT) -> BatchInfo:
    info = await client.create(await client.upload(jsonl), endpoint, {"job": "test"})
    assert info.status == "validating" and info.metadata == {"job": "test"}
    return await client.wait(info.id, interval=0.05, timeout=120)


@pytest.fixture(scope="module")
def endpoint():
    with DemoOpenAI(batch_delay=0.2) as running:
        yield running


@pytest.mark.parametrize("client", ["pyreqwest", "aiohttp"])
def test_a_thousand_chat_requests_round_trip_as_the_live_endpoint_answers(endpoint, client):
    requests = [chat(i) for i in range(1000)]
    requests[3] = chat(3, response_format={"type": "json_object"})
    requests = [BatchRequest(f"{client}-{r.custom_id}", r.body) for r in requests]  # one endpoint for both runs
    [jsonl] = plan_files(requests, CHAT)

    async def go() -> tuple[BatchInfo, dict[str, Any], dict[str, dict]]:
        async with BatchClient(endpoint.base_url, KEY, client=client) as batches:
            info = await submit_and_wait(batches, jsonl)
            return info, await batches.results(info), await live_answers(endpoint.base_url, "/chat/completions",
                                                                          requests)

    info, answers, live = run(go(), 180)
    assert info.status == "completed" and (info.total, info.completed, info.failed) == (1000, 1000, 0)
    assert info.created_at is not None and info.completed_at is not None and info.expires_at is not None
    assert answers == live
    assert json.loads(answers[f"{client}-row-3"]["choices"][0]["message"]["content"])["answer"]
    assert info.usage is not None
    assert info.usage["input_tokens"] == sum(a["usage"]["prompt_tokens"] for a in live.values())
    assert info.usage["output_tokens"] == sum(a["usage"]["completion_tokens"] for a in live.values())
    submitted = endpoint.stats()["batch_submitted"]
    assert [submitted[r.custom_id] for r in requests] == [1] * 1000


def test_embeddings_round_trip_over_several_files(endpoint):
    requests = [BatchRequest(f"doc-{i}", {"model": "demo", "input": [f"text {i}", f"title {i}"], "dimensions": 16})
                for i in range(250)]
    files = plan_files(requests, EMBED, max_requests=100)
    assert [len(f.splitlines()) for f in files] == [100, 100, 50]

    async def go() -> tuple[list[BatchInfo], dict[str, Any], dict[str, dict]]:
        async with BatchClient(endpoint.base_url, KEY) as batches:
            infos = [await submit_and_wait(batches, f, EMBED) for f in files]
            answers: dict[str, Any] = {}
            for info in infos:
                answers.update(await batches.results(info))
            return infos, answers, await live_answers(endpoint.base_url, "/embeddings", requests)

    infos, answers, live = run(go(), 120)
    assert [i.completed for i in infos] == [100, 100, 50] and len({i.id for i in infos}) == 3
    assert answers == live and len(answers["doc-7"]["data"][1]["embedding"]) == 16


def test_failed_requests_map_to_failures_with_their_code_and_status():
    requests = [chat(i) for i in range(8)]
    requests[1] = chat(1, messages=[])  # the live route refuses it: 400
    with DemoOpenAI(batch_delay=0.05, batch_fail_every=4) as endpoint:
        async def go() -> tuple[BatchInfo, dict[str, Any]]:
            async with BatchClient(endpoint.base_url, KEY) as batches:
                info = await submit_and_wait(batches, plan_files(requests, CHAT)[0])
                return info, await batches.results(info, [r.custom_id for r in requests])

        info, answers = run(go())
    assert (info.completed, info.failed) == (5, 3)
    failures = {cid: a for cid, a in answers.items() if isinstance(a, BatchFailure)}
    assert set(failures) == {"row-1", "row-3", "row-7"}
    assert failures["row-3"].code == "server_error" and failures["row-3"].status == 500
    assert failures["row-1"].status == 400 and failures["row-1"].code == "invalid_request_error"
    assert "messages" in failures["row-1"].message
    assert all(isinstance(answers[f"row-{i}"], dict) for i in (0, 2, 4, 5, 6))


def test_an_expired_batch_maps_what_was_not_done_to_batch_expired():
    requests = [chat(i) for i in range(10)]
    with DemoOpenAI(batch_delay=0.05, batch_expire=True) as endpoint:
        async def go() -> tuple[BatchInfo, dict[str, Any]]:
            async with BatchClient(endpoint.base_url, KEY) as batches:
                info = await submit_and_wait(batches, plan_files(requests, CHAT)[0])
                return info, await batches.results(info)  # custom_ids read from the input file

        info, answers = run(go())
    assert info.status == "expired" and len(answers) == 10
    assert all(isinstance(answers[f"row-{i}"], dict) for i in range(5))
    assert all(answers[f"row-{i}"] == BatchFailure(
        "batch_expired", "This request could not be executed before the completion window expired.", None)
        for i in range(5, 10))


def test_a_cancelled_batch_keeps_its_answers_and_reports_the_rest_missing():
    requests = [chat(i) for i in range(50)]
    with DemoOpenAI(batch_delay=20) as endpoint:  # steps of 2 s: the cancel lands between two
        async def go() -> tuple[BatchInfo, BatchInfo, dict[str, Any]]:
            async with BatchClient(endpoint.base_url, KEY) as batches:
                info = await batches.create(await batches.upload(plan_files(requests, CHAT)[0]), CHAT)
                while (await batches.retrieve(info.id)).completed == 0:
                    await asyncio.sleep(0.05)
                cancelling = await batches.cancel(info.id)
                info = await batches.wait(info.id, interval=0.05, timeout=120)
                with pytest.raises(HttpStatusError) as again:
                    await batches.cancel(info.id)
                assert again.value.status == 409 and not again.value.retryable
                return cancelling, info, await batches.results(info, [r.custom_id for r in requests])

        cancelling, info, answers = run(go())
    assert cancelling.status == "cancelling" and info.status == "cancelled"
    answered = [cid for cid, a in answers.items() if isinstance(a, dict)]
    missing = [a for a in answers.values() if isinstance(a, BatchFailure)]
    assert 0 < len(answered) == info.completed < 50 and len(answered) + len(missing) == 50
    assert all(m.code == "batch_cancelled" and "ended cancelled" in m.message and m.status is None for m in missing)


def test_a_batch_that_fails_validation_reports_every_request_with_the_reason(endpoint):
    lines = plan_files([chat(i) for i in range(3)], CHAT)[0].replace(b'"url":"/v1/chat/completions"',
                                                                     b'"url":"/v1/embeddings"', 1)

    async def go() -> tuple[BatchInfo, dict[str, Any]]:
        async with BatchClient(endpoint.base_url, KEY) as batches:
            info = await submit_and_wait(batches, lines)
            return info, await batches.results(info)

    info, answers = run(go())
    assert info.status == "failed" and info.errors[0][0] == "mismatched_url" and info.errors[0][2] == 1
    assert set(answers) == {"row-0", "row-1", "row-2"}
    assert all(a.code == "batch_failed" and "mismatched_url" in a.message for a in answers.values())


def test_unknown_or_repeated_custom_ids_in_the_results_are_errors_not_drops(endpoint):
    async def go() -> list[str]:
        async with BatchClient(endpoint.base_url, KEY) as batches:
            info = await submit_and_wait(batches, plan_files([chat(i) for i in range(4)], CHAT)[0])
            with pytest.raises(BatchProtocolError, match="'row-3' is not a request of this batch"):
                await batches.results(info, ["row-0", "row-1", "row-2"])
            output = await batches.content(info.output_file_id or "")
            twice = BatchInfo.from_json({**info.raw, "output_file_id": await batches.upload(output + output)})
            with pytest.raises(BatchProtocolError, match="'row-0' is answered twice"):
                await batches.results(twice)
            garbage = BatchInfo.from_json({**info.raw, "output_file_id": await batches.upload(b"[1, 2]\n")})
            with pytest.raises(BatchProtocolError, match="line 1 is not a batch result line"):
                await batches.results(garbage)
            no_input = BatchInfo.from_json({**info.raw, "input_file_id": await batches.upload(b"{}\n")})
            with pytest.raises(BatchProtocolError, match="is not a file of request lines"):
                await batches.results(no_input)
            empty = BatchInfo.from_json({**info.raw, "output_file_id": await batches.upload(b'{"custom_id": "row-0"}\n'),
                                         "error_file_id": None})
            answers = await batches.results(empty)
            assert answers["row-0"] == BatchFailure("no_answer", "the result line has neither a response nor an error")
            assert answers["row-1"].code == "batch_completed"  # in no file of a completed batch: reported missing
            running = BatchInfo.from_json({**info.raw, "status": "in_progress"})
            with pytest.raises(ValueError, match="results come once"):
                await batches.results(running)
            return [info.id]

    assert run(go())


def test_plan_files_keeps_each_file_within_both_limits_and_refuses_what_cannot_fit():
    requests = [chat(i) for i in range(250)]
    files = plan_files(requests, CHAT, max_requests=100)
    assert [len(f.splitlines()) for f in files] == [100, 100, 50]
    lines = [json.loads(line) for f in files for line in f.splitlines()]
    assert [(x["custom_id"], x["body"], x["method"], x["url"]) for x in lines] == \
        [(r.custom_id, r.body, "POST", CHAT) for r in requests]
    small = plan_files(requests, CHAT, max_bytes=5000)
    assert len(small) > 1 and all(len(f) <= 5000 for f in small)
    assert b"".join(small) == b"".join(files)
    with pytest.raises(ValueError, match="'row-big' is .* bytes as a JSONL line, more than max_bytes=500"):
        plan_files([chat(1), BatchRequest("row-big", {"model": "demo", "input": "x" * 600})], EMBED, max_bytes=500)
    with pytest.raises(ValueError, match="custom_id 'row-1' is given twice"):
        plan_files([chat(1), chat(2), chat(1)], CHAT)
    with pytest.raises(ValueError, match="non-empty string"):
        plan_files([BatchRequest("", {})], CHAT)
    with pytest.raises(ValueError, match="endpoint must be one of"):
        plan_files([chat(1)], "/v1/images")
    with pytest.raises(ValueError, match="max_requests must be a positive integer"):
        plan_files([chat(1)], CHAT, max_requests=0)
    with pytest.raises(TypeError, match="BatchRequest"):
        plan_files([{"custom_id": "a"}], CHAT)  # type: ignore[list-item]
    assert plan_files([], CHAT) == []


def test_the_api_key_is_in_no_error_text_nor_repr(endpoint):
    async def go() -> list[str]:
        texts = []
        async with BatchClient(endpoint.base_url, KEY) as batches:
            texts.append(repr(batches))
            with pytest.raises(HttpStatusError) as missing:  # the server quotes the id it did not find
                await batches.retrieve(KEY)
            assert missing.value.status == 404 and "***" in str(missing.value)
            texts.append(str(missing.value))
            with pytest.raises(HttpStatusError) as bad:
                await batches.create("file-" + KEY, CHAT)
            texts.append(str(bad.value))
            # the live route's error quotes the request's response_format type: the failure is scrubbed
            info = await submit_and_wait(batches, plan_files([chat(1, response_format={"type": KEY})], CHAT)[0])
            failure = (await batches.results(info))["row-1"]
            assert isinstance(failure, BatchFailure) and failure.status == 400 and "***" in failure.message
            texts += [failure.message, repr(failure), repr(info)]
        async with BatchClient(f"{endpoint.base_url}?api-version=2024-06-01&key={KEY}", None,
                               api_key_env=None) as keyed:  # Gemini-style: the key in the query
            texts.append(repr(keyed))
            info = await submit_and_wait(keyed, plan_files([chat(2)], CHAT)[0])
            assert isinstance((await keyed.results(info))["row-2"], dict)
            with pytest.raises(HttpStatusError) as missing:
                await keyed.retrieve("batch_nope")
            texts.append(str(missing.value))
        async with BatchClient(f"http://127.0.0.1:1/v1/{KEY}", KEY, timeout=10) as nowhere:
            texts.append(repr(nowhere))
            with pytest.raises(ConnectorError) as refused:
                await nowhere.retrieve("batch_x")
            assert refused.value.retryable
            texts.append(str(refused.value))
        return texts

    texts = run(go())
    assert len(texts) == 10 and not [t for t in texts if KEY in t or KEY[3:] in t]


def test_arguments_are_checked_and_a_closed_client_says_so(endpoint):
    with pytest.raises(ValueError, match="client='openai' is not supported"):
        BatchClient(endpoint.base_url, KEY, client="openai")
    with pytest.raises(ValueError, match="client must be"):
        BatchClient(endpoint.base_url, KEY, client="httpx")
    with pytest.raises(ValueError, match="base_url must be an http"):
        BatchClient("127.0.0.1:8000/v1", KEY)
    with pytest.raises(ValueError, match="timeout must be"):
        BatchClient(endpoint.base_url, KEY, timeout=0)

    async def go() -> None:
        client = BatchClient(endpoint.base_url, KEY)
        with pytest.raises(RuntimeError, match="not open"):
            await client.retrieve("batch_x")
        async with client:
            with pytest.raises(ValueError, match="endpoint must be one of"):
                await client.create("file-x", "/v1/images")
            with pytest.raises(ValueError, match="non-empty bytes"):
                await client.upload(b"")
    run(go())


def test_wait_gives_up_after_its_timeout():
    with DemoOpenAI(batch_delay=60) as endpoint:
        async def go() -> None:
            async with BatchClient(endpoint.base_url, KEY) as batches:
                info = await batches.create(await batches.upload(plan_files([chat(1)], CHAT)[0]), CHAT)
                with pytest.raises(ConnectorTimeout, match="still in_progress after 0.3s"):
                    await batches.wait(info.id, interval=0.05, timeout=0.3)
                assert (await batches.cancel(info.id)).status == "cancelling"
        run(go())
