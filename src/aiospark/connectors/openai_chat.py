"""``OpenAIChat``: a prompt (or messages) column -> ``STRING`` through ``POST {base_url}/chat/completions``.

Public name in :mod:`aiospark.connectors.openai` (see its doc for the whole picture).

Example::

    chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question", max_tokens=64)
    out = aiospark.ordered_wait(df, chat, chat.output_schema(df))
"""
from __future__ import annotations

import numbers
from typing import Any, Mapping

from ._common import Secret, check_positive
from .openai_base import OpenAIFunction, estimate_tokens

__all__ = ["OpenAIChat"]


class OpenAIChat(OpenAIFunction):
    """One chat completion per row through ``POST {base_url}/chat/completions``.

    The ``input`` column holds either a prompt (a string: sent as the user message, after
    ``system`` if given) or the whole conversation (an array of ``{role, content}`` structs/dicts,
    sent as is). The output column (``STRING``) holds the first choice's message content.

    Args:
        model, base_url, api_key, api_key_env, client, timeout, max_connections, headers,
        requests_per_minute, tokens_per_minute: as for :class:`OpenAIEmbeddings`.
        input: the prompt or messages column (``"prompt"``). output: the new column (``"answer"``).
        system: an optional system message put before every prompt.
        max_tokens, temperature: sent when given (``max_tokens`` also counts in the token estimate).
        extra_body: any other request fields, e.g. ``{"top_p": 0.9, "seed": 7}``.

    Example::

        chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question",
                          system="Answer briefly.", max_tokens=64, temperature=0)
        out = aiospark.ordered_wait(df, chat, chat.output_schema(df), retry=default_retry())
        ask = aiospark.async_udf("string")(chat)               # df.select(ask("question"))
    """

    __module__ = "aiospark.connectors.openai"  # its public home (pickles, reprs)
    _path = "/chat/completions"
    _output_type = "STRING"

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", input: str = "prompt", output: str = "answer",
                 system: str | None = None, max_tokens: int | None = None, temperature: float | None = None,
                 client: str = "aiohttp", timeout: float = 120.0, max_connections: int = 100,
                 requests_per_minute: float | None = None, tokens_per_minute: float | None = None,
                 headers: Mapping[str, str] | None = None, extra_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, api_key_env=api_key_env, input=input,
                         output=output, client=client, timeout=timeout, max_connections=max_connections,
                         requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                         headers=headers, extra_body=extra_body)
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a string (the system message) or None, got {type(system).__name__}")
        if max_tokens is not None:
            check_positive("max_tokens", max_tokens, integer=True)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
                                        or not 0 <= temperature <= 2):
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        self.system, self.max_tokens, self.temperature = system, max_tokens, temperature

    def _messages(self, value: Any) -> list[dict]:
        if isinstance(value, str):
            head = [{"role": "system", "content": self.system}] if self.system is not None else []
            return head + [{"role": "user", "content": value}]
        if isinstance(value, (list, tuple)):
            messages = []
            for m in value:
                m = m.asDict() if hasattr(m, "asDict") else m
                if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or "content" not in m:
                    raise TypeError(f"{self._name}: each message must be a {{role, content}} struct or dict, "
                                    f"got {type(m).__name__}")
                messages.append({"role": m["role"], "content": m["content"]})
            if not messages:
                raise ValueError(f"{self._name}: the messages list is empty")
            return messages
        raise TypeError(f"{self._name}: input must be a prompt string or a list of {{role, content}} "
                        f"messages (or NULL), got {type(value).__name__}")

    async def _one(self, value: Any) -> Any:
        if value is None:
            return None
        messages = self._messages(value)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        estimate = sum(estimate_tokens(str(m["content"] or "")) for m in messages) + (self.max_tokens or 0)
        answer = await self._post(body, estimate)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise self._bad_answer("the answer has no 'choices'")
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if content is not None and not isinstance(content, str):
            raise self._bad_answer(f"choices[0].message.content is a {type(content).__name__}, not a string")
        return content
