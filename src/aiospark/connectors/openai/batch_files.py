"""The Batch API's file formats: request JSONL files within the per-file limits, and result lines.

Pure functions, no I/O (:mod:`.batch_api` speaks to the provider with them).

Example::

    files = plan_files([BatchRequest("row-1", {"model": "m", "input": "text"})], "/v1/embeddings")
    answer_of({"custom_id": "row-1", "response": {"status_code": 200, "body": {...}}, "error": None}, redactor)
"""
from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..redaction import Redactor

__all__ = ["BATCH_ENDPOINTS", "MAX_BYTES", "MAX_REQUESTS", "BatchFailure", "BatchRequest", "answer_of",
           "multipart", "plan_files"]

#: the endpoints a batch of this module may target
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings")
#: OpenAI's per-file limits: requests and bytes
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024


@dataclass(frozen=True)
class BatchRequest:
    """One request of a batch: ``custom_id`` (unique in the batch, e.g. a row's journal identity)
    and the JSON ``body`` the live endpoint would be sent.

    Example: ``BatchRequest("row-7", {"model": "m", "input": "text"})``"""

    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class BatchFailure:
    """A request without an answer: ``code`` and ``message`` (the provider's, or ``batch_<status>``
    for a request in neither file after the batch ended), ``status`` (the HTTP status of its
    response, None when it had none).

    Example: ``BatchFailure("batch_expired", "...", None)``"""

    code: str
    message: str
    status: int | None = None


def _line(request: BatchRequest, endpoint: str) -> bytes:
    return json.dumps({"custom_id": request.custom_id, "method": "POST", "url": endpoint, "body": request.body},
                      separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def plan_files(requests: Iterable[BatchRequest], endpoint: str, max_requests: int = MAX_REQUESTS,
               max_bytes: int = MAX_BYTES) -> list[bytes]:
    """``requests`` as JSONL files (bytes), in order, each within ``max_requests`` lines and
    ``max_bytes`` bytes.

    Raises ValueError for an endpoint not in :data:`BATCH_ENDPOINTS`, a limit below 1, an empty or
    repeated ``custom_id``, or one request longer than ``max_bytes`` (naming its custom_id).

    Example: ``len(plan_files(reqs_of_250, "/v1/embeddings", max_requests=100)) == 3``
    """
    if endpoint not in BATCH_ENDPOINTS:
        raise ValueError(f"endpoint must be one of {BATCH_ENDPOINTS}, got {endpoint!r}")
    for name, value in (("max_requests", max_requests), ("max_bytes", max_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    files: list[bytes] = []
    current: list[bytes] = []
    size = 0
    seen: set[str] = set()
    for request in requests:
        if not isinstance(request, BatchRequest):
            raise TypeError(f"plan_files takes BatchRequest objects, got {type(request).__name__}")
        cid = request.custom_id
        if not isinstance(cid, str) or not cid:
            raise ValueError(f"a custom_id must be a non-empty string, got {cid!r}")
        if cid in seen:
            raise ValueError(f"custom_id {cid[:200]!r} is given twice: each request of a batch needs its own")
        seen.add(cid)
        if not isinstance(request.body, dict):
            raise ValueError(f"the body of custom_id {cid[:200]!r} must be a dict (the JSON request body)")
        line = _line(request, endpoint)
        if len(line) > max_bytes:
            raise ValueError(f"the request of custom_id {cid[:200]!r} is {len(line)} bytes as a JSONL line, more "
                             f"than max_bytes={max_bytes}: shorten its input or send it through the live lane")
        if current and (len(current) >= max_requests or size + len(line) > max_bytes):
            files.append(b"".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line)
    if current:
        files.append(b"".join(current))
    return files


def multipart(fields: Mapping[str, str], filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body of ``fields`` and one file part ``file``; and its Content-Type."""
    boundary = "aiospark-" + secrets.token_hex(16)
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f"Content-Type: application/jsonl\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def answer_of(line: Mapping[str, Any], redactor: Redactor) -> Any:
    """A result line -> the response body (status 200, no error) or a :class:`BatchFailure`."""
    response = line.get("response") if isinstance(line.get("response"), dict) else None
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    status = response.get("status_code") if response else None
    body = response.get("body") if response else None
    if status == 200 and error is None and isinstance(body, dict):
        return body
    if error is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    if error is None and response is None:
        return BatchFailure("no_answer", "the result line has neither a response nor an error", None)
    code = str((error or {}).get("code") or (error or {}).get("type") or f"http_{status}")
    message = redactor.scrub(str((error or {}).get("message") or "the request failed without a message"), limit=1000)
    return BatchFailure(code, message, status if isinstance(status, int) else None)
