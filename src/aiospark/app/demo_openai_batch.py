"""The demo OpenAI endpoint's Files and Batches API (:mod:`aiospark.app.demo_openai`), in OpenAI's shapes.

* ``POST /v1/files`` (multipart: ``purpose=batch``, ``file`` a JSONL file) -> a file object;
  ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``, ``DELETE /v1/files/{id}``.
* ``POST /v1/batches`` ``{input_file_id, endpoint, completion_window: "24h", metadata?}`` -> a
  batch object; ``GET /v1/batches/{id}``; ``POST /v1/batches/{id}/cancel``; ``GET /v1/batches``
  (newest first, ``after`` and ``limit``).

A batch goes ``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed`` over
``batch_delay`` seconds, answering its requests in ten steps (``request_counts`` grow as it goes).
Each request line is answered by the same function that answers the live route (the
:class:`~aiospark.app.demo_openai.Endpoint`'s ``chat`` / ``embeddings``), so a batch answer equals
the live answer to the same body, usage included. A request the live route would refuse (400) goes
to the error file with that response and its ``error``; so does every ``batch_fail_every``-th line
(a 500 ``server_error``). ``batch_expire`` stops a batch halfway as ``expired``: the requests not
answered are in the error file with code ``batch_expired``. A cancelled batch keeps the answers made
before the cancel; the other requests are in neither file.

Validation fails the whole batch (``status: failed``, ``errors.data`` of ``{code, message, param,
line}``): a line that is not a JSON object (``invalid_json_line``), no or an empty ``custom_id``
(``missing_custom_id``), no request at all (``empty_file``), a ``custom_id`` seen before in the file (``duplicate_custom_id``), a
method other than POST (``invalid_method``), a ``url`` other than the batch's endpoint
(``mismatched_url``), a ``body`` that is not an object (``invalid_body``), more than
``batch_max_requests`` lines (``too_many_requests``) or ``batch_max_bytes`` bytes
(``file_too_large``). Codes other than ``duplicate_custom_id`` are the demo's own names.

``GET /stats`` adds ``batch_submitted`` (``{custom_id: times submitted in a batch that passed
validation}``) and ``batch_submitted_twice`` (how many custom_ids were submitted more than once):
tests use them to prove a client never pays for a request twice.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BatchStore", "BATCH_ENDPOINTS", "add_batch_routes", "json_object"]

#: the endpoints a batch may target -> the name of the Endpoint method answering them
BATCH_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings"}
TERMINAL = ("completed", "failed", "expired", "cancelled")
STEPS = 10           # a batch answers its requests in this many steps over batch_delay
WINDOW = 24 * 3600   # completion_window "24h" in seconds
MAX_METADATA = 16


class BatchStore:
    """Files and batches of one endpoint, in memory (touched only on its event loop).

    ``answer(name, body)`` answers one request as the live route would, or raises the live route's
    error (an exception with ``status`` and an OpenAI ``body``)."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], dict[str, Any]], error_type: type[Exception], *,
                 delay: float = 0.5, fail_every: int | None = None, expire: bool = False,
                 max_requests: int = 50_000, max_bytes: int = 200 * 1024 * 1024) -> None:
        check_options(delay, fail_every, max_requests, max_bytes)
        self.answer, self.error_type = answer, error_type
        self.delay, self.fail_every, self.expire = delay, fail_every, expire
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.cancels: set[str] = set()
        self.submitted: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):016x}"

    # -- files -----------------------------------------------------------------------------------
    def add_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        file_id = self.new_id("file-")
        self.files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                               "filename": filename, "purpose": purpose, "status": "processed",
                               "expires_at": None, "status_details": None}
        self.contents[file_id] = data
        return self.files[file_id]

    # -- batches ---------------------------------------------------------------------------------
    def create(self, input_file_id: str, endpoint: str, metadata: dict[str, str] | None) -> dict[str, Any]:
        now = int(time.time())
        batch: dict[str, Any] = {
            "id": self.new_id("batch_"), "object": "batch", "endpoint": endpoint, "errors": None,
            "input_file_id": input_file_id, "completion_window": "24h", "status": "validating",
            "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
            "expires_at": now + WINDOW, "finalizing_at": None, "completed_at": None, "failed_at": None,
            "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": metadata, "usage": None}
        self.batches[batch["id"]] = batch
        task = asyncio.get_running_loop().create_task(self._run(batch, self.contents[input_file_id]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return batch

    def cancel(self, batch: dict[str, Any]) -> None:
        if batch["status"] in ("validating", "in_progress", "finalizing"):
            batch["status"], batch["cancelling_at"] = "cancelling", int(time.time())
            self.cancels.add(batch["id"])

    def validate(self, data: bytes, endpoint: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The request lines of an input file, or the errors that fail its batch."""
        if len(data) > self.max_bytes:
            return [], [_line_error("file_too_large", f"the input file has {len(data)} bytes, more than the "
                                    f"limit of {self.max_bytes} per batch", None)]
        lines = [line for line in data.split(b"\n") if line.strip()]
        if not lines:
            return [], [_line_error("empty_file", "the input file holds no request", None)]
        if len(lines) > self.max_requests:
            return [], [_line_error("too_many_requests", f"the input file has {len(lines)} requests, more than "
                                    f"the limit of {self.max_requests} per batch", None)]
        requests: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        for number, line in enumerate(lines, 1):
            try:
                request = json.loads(line)
            except ValueError:
                request = None
            if not isinstance(request, dict):
                errors.append(_line_error("invalid_json_line", "this line is not a JSON object", number))
                continue
            custom_id = request.get("custom_id")
            if not isinstance(custom_id, str) or not custom_id:
                errors.append(_line_error("missing_custom_id", "each request needs a non-empty string custom_id",
                                          number, "custom_id"))
            elif custom_id in seen:
                errors.append(_line_error("duplicate_custom_id", "The custom_id for this request is a duplicate "
                                          "of another request. The custom_id parameter must be unique for each "
                                          "request in a batch.", number, "custom_id"))
            else:
                seen.add(custom_id)
            if request.get("method") != "POST":
                errors.append(_line_error("invalid_method", "the method must be POST", number, "method"))
            if request.get("url") != endpoint:
                errors.append(_line_error("mismatched_url", f"the url {str(request.get('url'))[:100]!r} does not "
                                          f"match the batch's endpoint {endpoint}", number, "url"))
            if not isinstance(request.get("body"), dict):
                errors.append(_line_error("invalid_body", "the body must be a JSON object", number, "body"))
            requests.append(request)
        return requests, errors[:1000]

    async def _run(self, batch: dict[str, Any], data: bytes) -> None:
        await asyncio.sleep(0)  # the create call answers 'validating' first
        requests, errors = self.validate(data, batch["endpoint"])
        now = int(time.time())
        if errors or batch["id"] in self.cancels:
            if errors:
                batch.update(status="failed", failed_at=now, errors={"object": "list", "data": errors})
            else:
                batch.update(status="cancelled", cancelled_at=now)
            return
        for request in requests:
            self.submitted[request["custom_id"]] = self.submitted.get(request["custom_id"], 0) + 1
        counts = batch["request_counts"]
        batch.update(status="in_progress", in_progress_at=now)
        counts["total"] = len(requests)
        out: list[bytes] = []
        err: list[bytes] = []
        usage = {"input_tokens": 0, "output_tokens": 0}
        step = max(1, math.ceil(len(requests) / STEPS))
        stop_at = len(requests) // 2 if self.expire else len(requests)
        done = 0
        while done < stop_at and batch["id"] not in self.cancels:
            await asyncio.sleep(self.delay / STEPS)
            if batch["id"] in self.cancels:
                break
            for index in range(done, min(done + step, stop_at)):
                line, ok = self._line(batch, requests[index], index + 1, usage)
                (out if ok else err).append(line)
                counts["completed" if ok else "failed"] += 1
            done = min(done + step, stop_at)
        status = "cancelled" if batch["id"] in self.cancels else "expired" if self.expire else "completed"
        if status == "expired":
            for request in requests[done:]:
                err.append(_result_line(self, request["custom_id"], None, "batch_expired",
                                        "This request could not be executed before the completion window expired."))
                counts["failed"] += 1
        if status == "completed":
            batch.update(status="finalizing", finalizing_at=int(time.time()))
            await asyncio.sleep(0)
        name = batch["id"]
        if out:
            batch["output_file_id"] = self.add_file(b"".join(out), f"{name}_output.jsonl", "batch_output")["id"]
        if err:
            batch["error_file_id"] = self.add_file(b"".join(err), f"{name}_error.jsonl", "batch_output")["id"]
        batch["usage"] = {"input_tokens": usage["input_tokens"], "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": usage["output_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": usage["input_tokens"] + usage["output_tokens"]}
        batch.update(status=status, **{f"{status}_at": int(time.time())})

    def _line(self, batch: dict[str, Any], request: dict[str, Any], number: int,
              usage: dict[str, int]) -> tuple[bytes, bool]:
        """One request's result line, and whether it went to the output file."""
        custom_id = request["custom_id"]
        if self.fail_every and number % self.fail_every == 0:
            body = {"error": {"message": "The server had an error processing this request (demo: "
                                         "batch_fail_every).", "type": "server_error", "param": None,
                              "code": "server_error"}}
            return _result_line(self, custom_id, {"status_code": 500, "body": body}, "server_error",
                                body["error"]["message"]), False
        try:
            answer = self.answer(BATCH_ENDPOINTS[batch["endpoint"]], request["body"])
        except self.error_type as exc:
            status, body = getattr(exc, "status", 400), getattr(exc, "body", {})
            error = body.get("error") or {}
            return _result_line(self, custom_id, {"status_code": status, "body": body},
                                error.get("code") or error.get("type") or "invalid_request_error",
                                error.get("message") or str(exc)), False
        except Exception as exc:  # a bug answering one line must not leave its batch in_progress forever
            body = {"error": {"message": f"the demo endpoint failed on this request: {type(exc).__name__}",
                              "type": "server_error", "param": None, "code": "server_error"}}
            return _result_line(self, custom_id, {"status_code": 500, "body": body}, "server_error",
                                body["error"]["message"]), False
        used = answer.get("usage") or {}
        usage["input_tokens"] += int(used.get("prompt_tokens", 0))
        usage["output_tokens"] += int(used.get("completion_tokens", 0))
        return _result_line(self, custom_id, {"status_code": 200, "body": answer}, None, None), True

    def stats(self) -> dict[str, Any]:
        return {"batch_submitted": dict(self.submitted),
                "batch_submitted_twice": sum(1 for n in self.submitted.values() if n > 1)}


def check_options(delay: float, fail_every: int | None, max_requests: int, max_bytes: int) -> None:
    """The batch options' errors, each saying what to change."""
    if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay < math.inf:
        raise ValueError(f"batch_delay must be a number of seconds >= 0, got {delay!r}")
    if fail_every is not None and (not isinstance(fail_every, int) or isinstance(fail_every, bool) or fail_every < 1):
        raise ValueError(f"batch_fail_every must be a positive integer (every Nth request fails) or None, "
                         f"got {fail_every!r}")
    for name, value in (("batch_max_requests", max_requests), ("batch_max_bytes", max_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _line_error(code: str, message: str, line: int | None, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


def _result_line(store: BatchStore, custom_id: str, response: dict[str, Any] | None, code: str | None,
                 message: str | None) -> bytes:
    if response is not None:
        response = {"status_code": response["status_code"], "request_id": store.new_id("req_"),
                    "body": response["body"]}
    error = None if code is None else {"code": code, "message": message}
    return json.dumps({"id": store.new_id("batch_req_"), "custom_id": custom_id, "response": response,
                       "error": error}).encode() + b"\n"


async def json_object(request: Any, error: Callable[..., Exception]) -> dict[str, Any]:
    """The request's body, a JSON object, or ``error(400, ...)`` saying what is wrong with it
    (every POST route of the demo endpoint reads its body so)."""
    try:
        body = json.loads(await request.read())
    except ValueError:
        raise error(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise error(400, "the request body must be a JSON object")
    return body


def add_batch_routes(app: Any, store: BatchStore, error: Callable[..., Exception]) -> None:
    """The Files and Batches routes of ``store`` on the aiohttp ``app``; ``error(status, message,
    code=..., param=...)`` makes the endpoint's OpenAI-shaped error."""
    from aiohttp import web

    def reply(body: dict[str, Any], status: int = 200) -> Any:
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    def file_of(request: Any) -> dict[str, Any]:
        found = store.files.get(request.match_info["file_id"])
        if found is None:
            raise error(404, f"No such File object: {request.match_info['file_id'][:100]}", code="not_found",
                        param="id")
        return found

    def batch_of(request: Any) -> dict[str, Any]:
        found = store.batches.get(request.match_info["batch_id"])
        if found is None:
            raise error(404, f"No batch found with id '{request.match_info['batch_id'][:100]}'.", code="not_found")
        return found

    async def upload(request: Any) -> Any:
        if not request.content_type.startswith("multipart/"):
            raise error(400, "POST /v1/files takes multipart/form-data with 'purpose' and 'file'")
        reader = await request.multipart()
        purpose, data, filename = None, None, "upload.jsonl"
        cap = 2 * store.max_bytes + 1024 * 1024  # a file over the batch limit uploads (its batch fails)
        while (part := await reader.next()) is not None:
            if part.name == "purpose":
                purpose = (await part.text()).strip()
            elif part.name == "file":
                filename = part.filename or filename
                chunks, size = [], 0
                while chunk := await part.read_chunk(1 << 20):
                    size += len(chunk)
                    if size > cap:
                        raise error(413, f"the file is larger than {cap} bytes", code="file_too_large", param="file")
                    chunks.append(chunk)
                data = b"".join(chunks)
        if purpose != "batch":
            raise error(400, f"'purpose' must be 'batch' on the demo endpoint, got {purpose!r}", param="purpose")
        if data is None:
            raise error(400, "the multipart form has no 'file' part", param="file")
        return reply(store.add_file(data, filename, purpose))

    async def get_file(request: Any) -> Any:
        return reply(file_of(request))

    async def content(request: Any) -> Any:
        found = file_of(request)
        return web.Response(body=store.contents[found["id"]], content_type="application/octet-stream")

    async def delete_file(request: Any) -> Any:
        found = file_of(request)
        del store.files[found["id"]], store.contents[found["id"]]
        return reply({"id": found["id"], "object": "file", "deleted": True})

    async def create(request: Any) -> Any:
        body = await json_object(request, error)
        file_id, endpoint, metadata = body.get("input_file_id"), body.get("endpoint"), body.get("metadata")
        if not isinstance(file_id, str) or file_id not in store.files:
            raise error(400 if not isinstance(file_id, str) else 404,
                        f"input_file_id {str(file_id)[:100]!r} is not an uploaded file", param="input_file_id")
        if store.files[file_id]["purpose"] != "batch":
            raise error(400, "the input file's purpose must be 'batch'", param="input_file_id")
        if endpoint not in BATCH_ENDPOINTS:
            raise error(400, f"endpoint must be one of {sorted(BATCH_ENDPOINTS)} on the demo endpoint, got "
                             f"{str(endpoint)[:100]!r}", param="endpoint")
        if body.get("completion_window") != "24h":
            raise error(400, "completion_window must be '24h'", param="completion_window")
        if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > MAX_METADATA or not all(
                isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
                for k, v in metadata.items())):
            raise error(400, f"metadata must be at most {MAX_METADATA} string pairs (keys <= 64, values <= 512 "
                             "characters)", param="metadata")
        return reply(store.create(file_id, endpoint, metadata))

    async def retrieve(request: Any) -> Any:
        return reply(batch_of(request))

    async def cancel(request: Any) -> Any:
        found = batch_of(request)
        if found["status"] in TERMINAL:
            raise error(409, f"Cannot cancel a batch with status '{found['status']}'.", code="batch_not_cancellable")
        store.cancel(found)
        return reply(found)

    async def listing(request: Any) -> Any:
        try:
            limit = int(request.query.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise error(400, "limit must be an integer in [1, 100]", param="limit")
        ordered = list(reversed(store.batches.values()))  # newest first, as OpenAI lists
        after = request.query.get("after")
        if after is not None:
            ids = [b["id"] for b in ordered]
            ordered = ordered[ids.index(after) + 1:] if after in ids else []
        page = ordered[:limit]
        return reply({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                      "last_id": page[-1]["id"] if page else None, "has_more": len(ordered) > limit})

    async def stop_batches(app: Any) -> None:
        for task in list(store.tasks):  # a batch in progress ends with the server, without a warning
            task.cancel()

    app.on_cleanup.append(stop_batches)
    app.router.add_post("/v1/files", upload)
    app.router.add_get("/v1/files/{file_id}", get_file)
    app.router.add_get("/v1/files/{file_id}/content", content)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
    app.router.add_post("/v1/batches", create)
    app.router.add_get("/v1/batches", listing)
    app.router.add_get("/v1/batches/{batch_id}", retrieve)
    app.router.add_post("/v1/batches/{batch_id}/cancel", cancel)
