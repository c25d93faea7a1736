"""What a chat completion's first choice holds, and :class:`NotAnAnswer` when it holds no answer.

A 200 is not always an answer: the provider's content filter stopped it, the model refused, it was
cut off at ``max_tokens`` (a reasoning model may spend all of them before writing a word), the
model called a tool, or the choice has no message at all. Each of these is an error naming its
``reason`` (one of :data:`REASONS`) -- never a NULL, which would look like a NULL input, nor a
truncated text passing for the answer. None is retryable: the same request gets the same refusal,
and a retry pays again. The answer's ``usage`` was recorded before the error is raised (the
provider bills these answers).

Example::

    try:
        text = read_choice(answer, "POST /chat/completions", source, max_tokens=64)
    except NotAnAnswer as exc:
        print(exc.reason)          # "length"
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConnectorError

__all__ = ["REASONS", "NotAnAnswer", "read_choice"]

#: every reason a NotAnAnswer names
REASONS = ("content_filter", "refusal", "length", "tool_calls", "no_message", "no_content",
           "empty_after_reasoning")
#: finish reasons that mean the answer was cut off at max_tokens: OpenAI's "length", and
#: "max_tokens" from Anthropic-compatible servers (Anthropic's stop_reason passed through)
_CUT_OFF = ("length", "max_tokens")
#: how much of a refusal's text the error shows
_SHOWN = 200


class NotAnAnswer(ConnectorError):
    """A chat answer that is not an answer; ``reason`` says which kind (see :data:`REASONS`).

    Not retryable by default. To retry one kind anyway (say a cut-off, with a sampled model),
    give the entry point ``retry=RetryStrategy.exponential_backoff(3, 0.5, 10, exception_predicate=
    lambda e: is_retryable(e) or getattr(e, "reason", None) == "length")``.
    """

    __module__ = "aiospark.connectors.openai"

    def __init__(self, message: str, *, source: str = "", reason: str = "no_content") -> None:
        super().__init__(message, source=source, retryable=False)
        self.reason = reason


def _reasoning_tokens(answer: Mapping[str, Any], message: Mapping[str, Any]) -> int:
    """Tokens the model spent reasoning (OpenAI's ``completion_tokens_details``), or 1 when the
    message carries a reasoning text (vLLM/DeepSeek's ``reasoning_content``) but no count."""
    usage = answer.get("usage")
    details = usage.get("completion_tokens_details") if isinstance(usage, Mapping) else None
    spent = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    if isinstance(spent, int) and not isinstance(spent, bool) and spent > 0:
        return spent
    return 1 if any(message.get(k) for k in ("reasoning_content", "reasoning")) else 0


def read_choice(answer: Mapping[str, Any], request: str, source: str, max_tokens: int | None,
                empty_ok: bool = True) -> tuple[str, Mapping[str, Any]]:
    """``(content, message)`` of the first choice, or :class:`NotAnAnswer` naming why there is
    none. A ConnectorError for an answer that does not fit the API (no ``choices``). An empty
    content is an answer (``""``) unless the model spent tokens reasoning first, or
    ``empty_ok`` is False."""
    def fail(reason: str, why: str) -> NotAnAnswer:
        return NotAnAnswer(f"{request}: {why}", source=source, reason=reason)

    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ConnectorError(f"{request}: the answer has no 'choices'", source=source)
    choice = choices[0]
    finish = choice.get("finish_reason")
    message = choice.get("message")
    if finish == "content_filter":
        raise fail("content_filter", "the provider's content filter stopped the answer "
                                     "(finish_reason 'content_filter')")
    if not isinstance(message, Mapping):
        raise fail("no_message", f"the answer's first choice has no message (finish_reason {finish!r})")
    refusal = message.get("refusal")
    if refusal:
        raise fail("refusal", f"the model refused: {str(refusal)[:_SHOWN]!r}")
    if finish in ("tool_calls", "function_call") or message.get("tool_calls") or message.get("function_call"):
        raise fail("tool_calls", f"the model called a tool instead of answering (finish_reason {finish!r}): "
                                 "this connector sends no tools; remove 'tools' from extra_body")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ConnectorError(f"{request}: choices[0].message.content is a {type(content).__name__}, "
                             "not a string", source=source)
    if finish in _CUT_OFF:
        spent = _reasoning_tokens(answer, message)
        what = "max_tokens" if max_tokens is None else f"max_tokens={max_tokens}"
        extra = " (all of it spent reasoning)" if spent and not content else ""
        raise fail("length", f"the answer was cut off at {what}{extra} (finish_reason {finish!r}): "
                             "raise max_tokens")
    if content is None:
        raise fail("no_content", f"the answer has no content (finish_reason {finish!r})")
    if not content and (not empty_ok or _reasoning_tokens(answer, message)):
        if _reasoning_tokens(answer, message):
            raise fail("empty_after_reasoning", "the model reasoned but wrote no answer (empty content)")
        raise fail("no_content", f"the answer is empty (finish_reason {finish!r})")
    return content, message
