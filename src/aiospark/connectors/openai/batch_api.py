"""Speaking an OpenAI-compatible Batch API: JSONL request files, batches, their output and error files.

No Spark and no journal here: the batch lane (docs/design.md, "Batch API lane") records what this
module submits and maps its answers back to rows.

* :func:`plan_files` -- request bodies -> JSONL files within the provider's per-file limits.
* :class:`BatchClient` -- ``upload`` a file, ``create`` / ``retrieve`` / ``cancel`` / ``wait`` a
  batch, read its ``results`` as ``{custom_id: body dict | BatchFailure}``: every request of the
  batch is in the result, answered, failed, or missing with the batch's status; a result line with a
  custom_id the batch does not hold, or one seen twice, is a :class:`BatchProtocolError` (never a
  silent drop).

Requests go through aiospark's HTTP seam (:mod:`aiospark.connectors.http`, pyreqwest or aiohttp),
one shared pool per configuration, with the API key as a bearer token that no repr, error or log
shows. The upload's multipart body is built here, so it goes through the same seam (the seam sends
bytes with any Content-Type). No retries here: errors say ``retryable`` and ``retry_after`` as the
live lane's do.

Example::

    files = plan_files([BatchRequest("row-1", {"model": "m", "messages": [...]})], "/v1/chat/completions")
    async with BatchClient("http://127.0.0.1:11434/v1", api_key="sk-...") as client:
        info = await client.create(await client.upload(files[0]), "/v1/chat/completions")
        info = await client.wait(info.id)
        answers = await client.results(info)   # {"row-1": {...chat completion...}}
"""
from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..http.choose import new_transport, resolve_transport
from ..http.response import status_error
from ..http.transport import Answer, Transport, TransportFailure
from ..redaction import Redactor
from ..secrets import Secret, is_credential_header, resolve_secret
from .endpoint import retry_after_of

__all__ = ["BATCH_ENDPOINTS", "TERMINAL", "BatchRequest", "BatchFailure", "BatchInfo", "BatchClient",
           "BatchProtocolError", "plan_files"]

#: the endpoints a batch of this module may target
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings")
#: statuses after which a batch changes no more
TERMINAL = ("completed", "failed", "expired", "cancelled")
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


class BatchProtocolError(ConnectorError):
    """The provider's batch files contradict the batch (an unknown or repeated custom_id, a line that
    is not a result): nothing of the batch can be trusted to map back to rows."""


@dataclass(frozen=True)
class BatchInfo:
    """A batch as the provider last described it (``raw``: the whole JSON object)."""

    id: str
    status: str
    endpoint: str
    input_file_id: str
    output_file_id: str | None
    error_file_id: str | None
    total: int
    completed: int
    failed: int
    created_at: int | None
    in_progress_at: int | None
    completed_at: int | None
    expires_at: int | None
    errors: tuple[tuple[str, str, int | None], ...]
    metadata: dict[str, str] | None
    usage: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """Whether the batch changes no more (completed, failed, expired or cancelled)."""
        return self.status in TERMINAL

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchInfo:
        """A batch object of the API -> :class:`BatchInfo` (a missing field is None or 0)."""
        counts = data.get("request_counts") or {}
        errors = (data.get("errors") or {}).get("data") or []
        return cls(id=str(data["id"]), status=str(data["status"]), endpoint=str(data.get("endpoint", "")),
                   input_file_id=str(data.get("input_file_id", "")), output_file_id=data.get("output_file_id"),
                   error_file_id=data.get("error_file_id"), total=int(counts.get("total", 0)),
                   completed=int(counts.get("completed", 0)), failed=int(counts.get("failed", 0)),
                   created_at=data.get("created_at"), in_progress_at=data.get("in_progress_at"),
                   completed_at=data.get("completed_at"), expires_at=data.get("expires_at"),
                   errors=tuple((str(e.get("code")), str(e.get("message")), e.get("line")) for e in errors),
                   metadata=data.get("metadata"), usage=data.get("usage"), raw=dict(data))


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


def _multipart(fields: Mapping[str, str], filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body of ``fields`` and one file part ``file``; and its Content-Type."""
    boundary = "aiospark-" + secrets.token_hex(16)
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                 f"Content-Type: application/jsonl\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class BatchClient:
    """An OpenAI-compatible Batch API client; ``async with`` it (or ``await open()`` / ``close()``).

    Args:
        base_url: the API's base, ending in ``/v1`` (e.g. ``http://127.0.0.1:11434/v1``).
        api_key: the key (a str or :class:`~aiospark.connectors.Secret`); None reads ``api_key_env``.
        client: ``"auto"``, ``"pyreqwest"`` or ``"aiohttp"`` (the HTTP seam's transports).
        timeout: seconds for each HTTP request (an upload of a large file needs more than a poll).
        headers: extra headers on every request (e.g. ``OpenAI-Organization``).

    Example::

        async with BatchClient(base_url, api_key="sk-...") as client:
            info = await client.retrieve("batch_abc")
    """

    def __init__(self, base_url: str, api_key: str | Secret | None = None, *, client: str = "auto",
                 timeout: float = 600.0, headers: Mapping[str, str] | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", max_connections: int = 8) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL ending in /v1, got {str(base_url)[:200]!r}")
        if client == "openai":
            raise ValueError("client='openai' is not supported by BatchClient: the Batch API goes through "
                             "aiospark's HTTP seam; use client='auto', 'pyreqwest' or 'aiohttp'")
        if client not in ("auto", "pyreqwest", "aiohttp"):
            raise ValueError(f"client must be 'auto', 'pyreqwest' or 'aiohttp', got {client!r}")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not isinstance(max_connections, int) or isinstance(max_connections, bool) or max_connections < 1:
            raise ValueError(f"max_connections must be a positive integer, got {max_connections!r}")
        self._key = resolve_secret(api_key, api_key_env)
        self._headers = dict(headers or {})
        self._redactor = Redactor(self._key, *(Secret(v) for k, v in self._headers.items() if is_credential_header(k)))
        self._base = quote(base_url.rstrip("/"), safe=":/?#[]@!$&'()*+,;=%~")
        self._client, self._timeout, self._max_connections = client, float(timeout), max_connections
        self._name = f"BatchClient({self._redactor.scrub(base_url, limit=200)})"
        self._transport: Transport | None = None
        self._shared_key = ""

    def __repr__(self) -> str:
        return f"<{self._name} client={self._client!r} open={self._transport is not None}>"

    async def open(self) -> None:
        """Take the shared HTTP pool of this configuration (idempotent)."""
        if self._transport is not None:
            return
        library = resolve_transport(self._client)
        self._shared_key = config_key("openai-batch", library, self._base, self._key.reveal() if self._key else None,
                                      self._timeout, self._max_connections, sorted(self._headers.items()))
        sent = dict(self._headers)
        if self._key:
            sent["Authorization"] = f"Bearer {self._key.reveal()}"

        async def create() -> Transport:
            return await new_transport(library, headers=sent, max_connections=self._max_connections,
                                       timeout=self._timeout)

        async def close(transport: Transport) -> None:
            await transport.close()

        self._transport = await SHARED.acquire(self._shared_key, create, close)

    async def close(self) -> None:
        """Give the pool back (its last user closes it). Safe to call twice."""
        transport, self._transport = self._transport, None
        if transport is not None:
            await SHARED.release(self._shared_key)

    async def __aenter__(self) -> BatchClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _send(self, method: str, path: str, body: bytes | None = None,
                    content_type: str = "application/json") -> Answer:
        if self._transport is None:
            raise RuntimeError(f"{self._name} is not open: use 'async with' or 'await client.open()' first")
        what = self._redactor.scrub(f"{method} {path}", limit=300)  # a path may quote an id that is a secret
        try:
            answer = await self._transport.send(method, self._base + path, body,
                                                {"Content-Type": content_type} if body is not None else None)
        except TransportFailure as exc:
            if exc.kind == "timeout":
                raise ConnectorTimeout(f"no answer within {self._timeout}s to {what}", source=self._name) from None
            detail = self._redactor.scrub(exc.detail, limit=300)
            raise ConnectorError(f"{what} failed: {detail}", source=self._name, retryable=True) from None
        if not 200 <= answer.status < 300:
            error = status_error(answer.status, answer.reason, answer.header("Retry-After"), answer.body, what,
                                 self._redactor, self._name)
            if error.retryable:
                error.retry_after = retry_after_of(answer.headers)
            raise error
        return answer

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self._send(method, path, None if body is None else json.dumps(body).encode())
        try:
            data = json.loads(answer.body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ConnectorError(f"{self._redactor.scrub(method + ' ' + path, limit=300)} returned a body that is "
                                 "not a JSON object "
                                 f"({len(answer.body)} bytes)", source=self._name)
        return data

    async def upload(self, jsonl: bytes, filename: str = "batch.jsonl") -> str:
        """Upload one JSONL request file (``purpose=batch``); its file id."""
        if not isinstance(jsonl, bytes) or not jsonl:
            raise ValueError("upload takes the non-empty bytes of a JSONL file (from plan_files)")
        body, content_type = _multipart({"purpose": "batch"}, filename, jsonl)
        answer = await self._send("POST", "/files", body, content_type)
        try:
            return str(json.loads(answer.body)["id"])
        except (ValueError, KeyError, TypeError):
            raise ConnectorError("POST /files answered without a file id", source=self._name) from None

    async def create(self, file_id: str, endpoint: str, metadata: Mapping[str, str] | None = None) -> BatchInfo:
        """Create a batch of the uploaded file ``file_id`` for ``endpoint`` (24 h window)."""
        if endpoint not in BATCH_ENDPOINTS:
            raise ValueError(f"endpoint must be one of {BATCH_ENDPOINTS}, got {endpoint!r}")
        body: dict[str, Any] = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}
        if metadata:
            body["metadata"] = dict(metadata)
        return BatchInfo.from_json(await self._json("POST", "/batches", body))

    async def retrieve(self, batch_id: str) -> BatchInfo:
        """The batch as the provider describes it now."""
        return BatchInfo.from_json(await self._json("GET", f"/batches/{quote(batch_id, safe='')}"))

    async def cancel(self, batch_id: str) -> BatchInfo:
        """Ask the provider to cancel the batch (it goes ``cancelling``, then ``cancelled``)."""
        return BatchInfo.from_json(await self._json("POST", f"/batches/{quote(batch_id, safe='')}/cancel"))

    async def wait(self, batch_id: str, interval: float = 1.0, timeout: float | None = None) -> BatchInfo:
        """Poll every ``interval`` seconds until the batch is terminal (``timeout``: give up with
        :class:`~aiospark.connectors.ConnectorTimeout`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = await self.retrieve(batch_id)
            if info.terminal:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                raise ConnectorTimeout(f"batch {batch_id} still {info.status} after {timeout}s", source=self._name)
            await asyncio.sleep(interval)

    async def content(self, file_id: str) -> bytes:
        """The bytes of a file (an input, output or error file)."""
        return (await self._send("GET", f"/files/{quote(file_id, safe='')}/content")).body

    async def results(self, info: BatchInfo, custom_ids: Iterable[str] | None = None) -> dict[str, Any]:
        """``{custom_id: answer}`` for every request of the ended batch ``info``: the response body
        (a dict) for a 200, else a :class:`BatchFailure`. ``custom_ids``: the batch's requests (None:
        read from its input file). Raises :class:`BatchProtocolError` for a line of an unknown
        custom_id or one seen twice, ValueError for a batch not ended."""
        if not info.terminal:
            raise ValueError(f"batch {info.id} is {info.status}: results come once it is one of {TERMINAL}")
        if custom_ids is None:
            custom_ids = [json.loads(line)["custom_id"]
                          for line in (await self.content(info.input_file_id)).splitlines() if line.strip()]
        wanted = set(custom_ids)
        out: dict[str, Any] = {}
        for file_id in (info.output_file_id, info.error_file_id):
            if file_id:
                self._parse(info, file_id, await self.content(file_id), wanted, out)
        reason = "; ".join(f"{code}: {message}" for code, message, _ in info.errors[:3])
        for cid in wanted - out.keys():
            out[cid] = BatchFailure(f"batch_{info.status}", f"batch {info.id} ended {info.status} without an answer "
                                    f"to this request{': ' + reason if reason else ''}"[:1000], None)
        return out

    def _parse(self, info: BatchInfo, file_id: str, data: bytes, wanted: set[str], out: dict[str, Any]) -> None:
        for number, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            where = f"batch {info.id}, file {file_id}, line {number}"
            try:
                line = json.loads(raw)
                cid = line["custom_id"]
            except (ValueError, KeyError, TypeError):
                raise BatchProtocolError(f"{where} is not a batch result line", source=self._name) from None
            if cid not in wanted or cid in out:
                what = "is not a request of this batch" if cid not in wanted else "is answered twice"
                raise BatchProtocolError(self._redactor.scrub(f"{where}: custom_id {str(cid)[:200]!r} {what}"),
                                         source=self._name)
            out[cid] = _answer(line, self._redactor)


def _answer(line: Mapping[str, Any], redactor: Redactor) -> Any:
    """A result line -> the response body (status 200, no error) or a :class:`BatchFailure`."""
    response = line.get("response") if isinstance(line.get("response"), dict) else None
    error = line.get("error") if isinstance(line.get("error"), dict) else None
    status = response.get("status_code") if response else None
    body = response.get("body") if response else None
    if status == 200 and error is None and isinstance(body, dict):
        return body
    if error is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
    code = str((error or {}).get("code") or (error or {}).get("type") or f"http_{status}")
    message = redactor.scrub(str((error or {}).get("message") or "the request failed without a message"), limit=1000)
    return BatchFailure(code, message, status if isinstance(status, int) else None)
