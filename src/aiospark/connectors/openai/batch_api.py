"""Speaking an OpenAI-compatible Batch API: JSONL request files, batches, their output and error files.

No Spark and no journal here: the batch lane (docs/design.md, "Batch API lane") records what this
module submits and maps its answers back to rows.

* :func:`plan_files` -- request bodies -> JSONL files within the provider's per-file limits (the
  file formats live in :mod:`.batch_files`, re-exported here).
* :class:`BatchClient` -- ``upload`` a file, ``create`` / ``retrieve`` / ``cancel`` / ``wait`` a
  batch, read its ``results`` as ``{custom_id: body dict | BatchFailure}``: every request of the
  batch is in the result, answered, failed, or missing with the batch's status; a result line with a
  custom_id the batch does not hold, or one seen twice, is a :class:`BatchProtocolError` (never a
  silent drop).

``base_url`` is checked as the live functions check it (a query such as Azure's ``?api-version=`` goes
on every request; its values but ``api-version`` are secrets). Requests go through aiospark's HTTP seam (:mod:`aiospark.connectors.http`, pyreqwest or aiohttp),
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
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from ..clients import SHARED, config_key
from ..errors import ConnectorError, ConnectorTimeout
from ..http.choose import new_transport, resolve_transport
from ..http.response import status_error
from ..http.transport import Answer, Transport, TransportFailure
from ..redaction import Redactor
from ..secrets import Secret, resolve_secret
from .base_url import PUBLIC_QUERY, check_base_url
from .batch_files import (
    BATCH_ENDPOINTS,
    MAX_BYTES,
    MAX_REQUESTS,
    BatchFailure,
    BatchRequest,
    answer_of,
    multipart,
    plan_files,
)
from .endpoint import retry_after_of

__all__ = ["BATCH_ENDPOINTS", "MAX_BYTES", "MAX_REQUESTS", "TERMINAL", "BatchRequest", "BatchFailure", "BatchInfo",
           "BatchClient", "BatchProtocolError", "plan_files"]

#: statuses after which a batch changes no more
TERMINAL = ("completed", "failed", "expired", "cancelled")


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
        bare, hostport, query = check_base_url(base_url)
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
        # as the live functions do: every header value and every query value but api-version may be a
        # credential (Azure's 'api-key' header, Gemini's '?key=')
        secret_query = [v for k, v in query.items() if k not in PUBLIC_QUERY]
        self._redactor = Redactor(self._key, *(Secret(v) for v in (*self._headers.values(), *secret_query)
                                               if len(v) >= 4))
        self._base = quote(bare, safe=":/?#[]@!$&'()*+,;=%~")
        self._query = ("?" + urlencode(query)) if query else ""
        self._client, self._timeout, self._max_connections = client, float(timeout), max_connections
        self._name = f"BatchClient({hostport})"
        self._transport: Transport | None = None
        self._shared_key = ""

    def __repr__(self) -> str:
        return f"<{self._name} client={self._client!r} open={self._transport is not None}>"

    async def open(self) -> None:
        """Take the shared HTTP pool of this configuration (idempotent)."""
        if self._transport is not None:
            return
        library = resolve_transport(self._client)
        self._shared_key = config_key("openai-batch", library, self._base + self._query,
                                      self._key.reveal() if self._key else None,
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
            answer = await self._transport.send(method, self._base + path + self._query, body,
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
        body, content_type = multipart({"purpose": "batch"}, filename, jsonl)
        answer = await self._send("POST", "/files", body, content_type)
        try:
            return str(json.loads(answer.body)["id"])
        except (ValueError, KeyError, TypeError):
            raise ConnectorError("POST /files answered without a file id", source=self._name) from None

    def _info(self, what: str, data: Mapping[str, Any]) -> BatchInfo:
        try:
            return BatchInfo.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConnectorError(f"{what} answered something that is not a batch object (no id or status)",
                                 source=self._name) from None

    async def create(self, file_id: str, endpoint: str, metadata: Mapping[str, str] | None = None) -> BatchInfo:
        """Create a batch of the uploaded file ``file_id`` for ``endpoint`` (24 h window)."""
        if endpoint not in BATCH_ENDPOINTS:
            raise ValueError(f"endpoint must be one of {BATCH_ENDPOINTS}, got {endpoint!r}")
        body: dict[str, Any] = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}
        if metadata:
            body["metadata"] = dict(metadata)
        return self._info("POST /batches", await self._json("POST", "/batches", body))

    async def retrieve(self, batch_id: str) -> BatchInfo:
        """The batch as the provider describes it now."""
        return self._info("GET /batches/{id}", await self._json("GET", f"/batches/{quote(batch_id, safe='')}"))

    async def cancel(self, batch_id: str) -> BatchInfo:
        """Ask the provider to cancel the batch (it goes ``cancelling``, then ``cancelled``)."""
        return self._info("POST /batches/{id}/cancel",
                          await self._json("POST", f"/batches/{quote(batch_id, safe='')}/cancel"))

    async def wait(self, batch_id: str, interval: float = 1.0, timeout: float | None = None) -> BatchInfo:
        """Poll every ``interval`` seconds until the batch is terminal (``timeout``: give up with
        :class:`~aiospark.connectors.ConnectorTimeout`)."""
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval < math.inf:
            raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = await self.retrieve(batch_id)
            if info.terminal:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                raise ConnectorTimeout(f"batch {batch_id} still {info.status} after {timeout}s", source=self._name)
            await asyncio.sleep(interval)

    async def find(self, input_file_id: str, since: float | None = None) -> BatchInfo | None:
        """The batch made of ``input_file_id``, if any (``GET /batches``, newest first, paged; the
        scan stops at batches created before ``since``, a Unix time)."""
        after: str | None = None
        while True:
            path = "/batches?limit=100" + (f"&after={quote(after, safe='')}" if after else "")
            page = await self._json("GET", path)
            items = page.get("data") or []
            for item in items:
                info = self._info("GET /batches", item)
                if info.input_file_id == input_file_id:
                    return info
                if since is not None and info.created_at is not None and info.created_at < since:
                    return None
            if not page.get("has_more") or not items:
                return None
            after = str(items[-1].get("id"))

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
            custom_ids = self._input_ids(info, await self.content(info.input_file_id))
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

    def _input_ids(self, info: BatchInfo, data: bytes) -> list[str]:
        """The custom_ids of a batch's input file."""
        try:
            return [str(json.loads(line)["custom_id"]) for line in data.splitlines() if line.strip()]
        except (ValueError, KeyError, TypeError):
            raise BatchProtocolError(f"the input file {info.input_file_id} of batch {info.id} is not a file of "
                                     "request lines", source=self._name) from None

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
            out[cid] = answer_of(line, self._redactor)
