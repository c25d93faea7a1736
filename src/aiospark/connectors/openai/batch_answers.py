"""The batch lane's answers, as a row's call finds them while :func:`aiospark.collect_batches` runs.

A row of the batch lane goes through the live function's own call (the same request body, the
same reading of the answer: structured outputs, ``on_error``, error rows, usage), but its answer
comes from the provider batch that answered it -- found by the row's ``custom_id``, which is its
``aiospark.idempotency_key()`` -- instead of a request. What the batches answered is in the
journal's answer files (:mod:`aiospark.spark.batch_records`), loaded once per worker on the first
call that needs them.

An answer is given only to the request it answers: each answer carries the hash of the request
body that was submitted, and a row whose body differs now (another prompt, a changed input under
the same key) has no batch answer. A row without an answer -- never submitted, changed, or failed
by the provider (its line's error, ``batch_expired``, ``batch_cancelled``, ...) -- is a
:class:`BatchRequestError` (its error row), or with ``fallback="live"`` a live request.

Example (what ``collect_batches`` does with a function ``chat``)::

    collecting = chat.with_batch_answers(BatchAnswers(AnswerFiles(store, files), fallback="live"))
    aiospark.unordered_wait(df, collecting, schema, journal=journal)
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from ...core.context import idempotency_key
from ...core.durable import NOT_AN_ANSWER
from ...core.usage import record_usage
from ..errors import ConnectorError

__all__ = ["FALLBACKS", "BatchAnswers", "BatchRequestError", "body_hash"]

#: what a row without a batch answer becomes: its error, or a live request
FALLBACKS = ("error", "live")

#: a source's key -> {custom_id: (body hash, answer JSON or None, code, message, status)}
_LOADED: dict[Any, dict[str, tuple]] = {}
_LOCK = threading.Lock()


def body_hash(body: Mapping[str, Any]) -> str:
    """The hash of a request body as sent (keys sorted: the same body, however built, one hash)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class BatchRequestError(ConnectorError):
    """A row the provider's batch did not answer (``code``: the line's error code, or
    ``batch_<status>`` / ``not_submitted`` / ``changed``).

    An error line with a 4xx status is the row's answer, as a live 400 is (``keep_errors`` keeps
    it); anything else -- expired, cancelled, a 5xx, never submitted -- says nothing of the row and
    is never recorded, so a later run asks again."""

    def __init__(self, message: str, *, code: str, status: int | None, source: str):
        super().__init__(message, source=source, retryable=False)
        self.code = code
        self.status = status
        if status is None or not 400 <= status < 500 or status in (408, 425, 429):
            setattr(self, NOT_AN_ANSWER, True)


class BatchAnswers:
    """What the batches answered (``source``: picklable, ``source()`` reads ``{custom_id: (body
    hash, answer JSON text or None, code, message, status)}`` and ``source.key`` names it) and what a
    row without an answer becomes (``fallback``: ``"error"`` or ``"live"``)."""

    def __init__(self, source: Any, fallback: str = "error"):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be 'error' (a row without a batch answer is an error row) or 'live' "
                             f"(it is sent as a live request), got {fallback!r}")
        self.source = source
        self.fallback = fallback

    def __repr__(self) -> str:
        return f"<batch answers of {self.source!r}, fallback={self.fallback!r}>"

    async def answer(self, function: Any, body: dict, estimate: int) -> dict:
        """The answer to ``body`` for the current row (inside its call)."""
        from .tokens import _prompt_estimate

        custom_id = idempotency_key()
        found = (await self._loaded()).get(custom_id)
        sent = body_hash({**function.extra_body, **body})
        if found is not None and found[0] == sent and found[1] is not None:
            answer = json.loads(found[1])
            usage = answer.get("usage")
            function._settle(estimate, usage if isinstance(usage, Mapping) else {}, _prompt_estimate(body), lane="batch")
            record_usage(batch_answers=1)
            return answer
        if found is None:
            code, message, status = "not_submitted", "this row is in no batch of the journal: run submit_batches", None
        elif found[0] != sent:
            code, message, status = ("changed", "this row's request differs from the one its batch answered (its "
                                     "input changed since submit_batches): submit it again", None)
        else:
            code, message, status = found[2], found[3], found[4]
        if self.fallback == "live":
            record_usage(batch_fallbacks=1)
            return await function._post(body, estimate)
        raise BatchRequestError(f"the provider batch gave no answer to this row: {code}: {message}",
                                code=code, status=status, source=function._name)

    async def _loaded(self) -> dict[str, tuple]:
        found = _LOADED.get(self.source.key)
        if found is None:
            found = await asyncio.to_thread(self._load)  # file reads off the worker's loop
        return found

    def _load(self) -> dict[str, tuple]:
        with _LOCK:  # one load per worker, whatever tasks ask at once
            found = _LOADED.get(self.source.key)
            if found is None:
                found = self.source()
                _LOADED.clear()  # one collect's answers at a time per worker
                _LOADED[self.source.key] = found
            return found
