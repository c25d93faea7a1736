"""``OpenAIChat``: a prompt (or messages) column -> ``STRING`` through ``POST {base_url}/chat/completions``,
or -> a ``STRUCT`` with ``response_format=`` (structured output, :mod:`.schema`).

Public name in :mod:`aiospark.connectors.openai` (see its doc for the whole picture).

Example::

    chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question", max_tokens=64)
    out = aiospark.ordered_wait(df, chat, chat.output_schema(df))
"""
from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

from ..checks import check_positive
from ..errors import ConnectorError
from ..secrets import Secret
from .answers import read_choice
from .function import OpenAIFunction, estimate_tokens

#: how much of a bad structured answer its error shows
_ANSWER_PREFIX = 200

__all__ = ["OpenAIChat"]


class OpenAIChat(OpenAIFunction):
    """One chat completion per row through ``POST {base_url}/chat/completions``.

    The ``input`` column holds either a prompt (a string: sent as the user message, after
    ``system`` if given) or the whole conversation (an array of ``{role, content}`` structs/dicts,
    sent as is). The output column (``STRING``) holds the first choice's message content.

    With ``response_format`` -- a Spark DDL string (``"label STRING NOT NULL, score INT"``), a
    ``StructType`` or a pydantic v2 model class -- the request asks for OpenAI's strict structured
    output (``{"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}``, the
    schema made from the Spark type, see :mod:`aiospark.connectors.openai.schema`) and the output
    column is that ``STRUCT`` (``response_type``): ``output_schema(df)`` reports it, and
    ``async_udf(chat.response_type)(chat)`` returns it. An answer that is not JSON of that shape
    (not JSON, a missing/extra field, a wrong type, a null for a NOT NULL field, an integer out of
    range, a value not among a field's allowed values) is a *retryable* ``ConnectorError`` showing
    the answer's first 200 characters, so ``retry=default_retry()`` asks again and
    ``on_error="row"`` keeps the row with that text. ``Literal[...]``/``Enum`` fields, or a column
    comment ``enum: a, b``, give allowed values (classification); a pydantic model's validated
    values are what the column gets.

    An answer that is not an answer -- the content filter, a refusal, a tool call, no message, a
    cut-off at ``max_tokens``, nothing after reasoning -- is a :class:`NotAnAnswer` (``reason``
    names which), on both paths, not retried; its usage is recorded.
    Types JSON cannot carry exactly (BINARY, intervals, MAP with non-string keys, ...) are refused
    here, naming the field.

    Args:
        model, base_url, api_key, api_key_env, client, timeout, max_connections, headers,
        requests_per_minute, tokens_per_minute, pace_by_headers: as for :class:`OpenAIEmbeddings`
        (``timeout`` 60 s by default, the entry points' row timeout: a longer one warns).
        input: the prompt or messages column (``"prompt"``). output: the new column (``"answer"``).
        system: an optional system message put before every prompt.
        max_tokens, temperature: sent when given (``max_tokens`` also counts in the token estimate).
        extra_body: any other request fields, e.g. ``{"top_p": 0.9, "seed": 7}``.
        response_format: the answer's fields (DDL string, ``StructType`` or pydantic model class), or None
            for a plain ``STRING`` answer. A DDL string is parsed by the active Spark session.
        price: the model's :class:`~aiospark.connectors.openai.Price` per 1M tokens, or a table
            ``{model: Price}`` holding this model: each call then records its ``cost`` (see
            :mod:`aiospark.connectors.openai.price`), and ``budget_cost()`` gives a money budget.

    Example::

        chat = OpenAIChat("llama3", base_url="http://127.0.0.1:11434/v1", input="question",
                          system="Answer briefly.", max_tokens=64, temperature=0)
        out = aiospark.ordered_wait(df, chat, chat.output_schema(df), retry=default_retry())
        ask = aiospark.async_udf("string")(chat)               # df.select(ask("question"))

        rate = OpenAIChat("llama3", base_url=..., input="review", output="verdict",
                          response_format="label STRING NOT NULL, score INT")
        out = aiospark.ordered_wait(df, rate, rate.output_schema(df), retry=default_retry())
        judge = aiospark.async_udf(rate.response_type)(rate)  # df.select(judge("review").label)
    """

    _answer_settings = OpenAIFunction._answer_settings + ("system", "max_tokens", "temperature")

    __module__ = "aiospark.connectors.openai"  # its public home (pickles, reprs)
    _path = "/chat/completions"
    _output_type = "STRING"
    _bills_output = True

    def __init__(self, model: str, *, base_url: str, api_key: str | Secret | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", input: str = "prompt", output: str = "answer",
                 system: str | None = None, max_tokens: int | None = None, temperature: float | None = None,
                 client: str = "auto", timeout: float = 60.0, max_connections: int = 100,
                 requests_per_minute: float | None = None, tokens_per_minute: float | None = None,
                 headers: Mapping[str, str] | None = None, extra_body: Mapping[str, Any] | None = None,
                 response_format: Any = None, pace_by_headers: bool = True, price: Any = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, api_key_env=api_key_env, input=input,
                         output=output, client=client, timeout=timeout, max_connections=max_connections,
                         requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                         headers=headers, extra_body=extra_body, pace_by_headers=pace_by_headers, price=price)
        if system is not None and not isinstance(system, str):
            raise TypeError(f"system must be a string (the system message) or None, got {type(system).__name__}")
        if max_tokens is not None:
            check_positive("max_tokens", max_tokens, integer=True)
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
                                        or not 0 <= temperature <= 2):
            raise ValueError(f"temperature must be a number in [0, 2] or None, got {temperature!r}")
        self.system, self.max_tokens, self.temperature = system, max_tokens, temperature
        self.response_type: Any = None  # the answer's StructType with response_format, else None
        self._response_model: Any = None
        self._response_format: dict | None = None
        if response_format is not None:
            self._structured(response_format)

    def __aiospark_fingerprint__(self) -> dict[str, Any]:
        """The settings, the ``response_format`` sent, and the code of its pydantic model (its
        validators and constraints decide the column's values, not only the JSON Schema sent)."""
        from .validated import model_classes

        return {**super().__aiospark_fingerprint__(), "response_format": self._response_format,
                "response_model": model_classes(self._response_model)}

    def _structured(self, response_format: Any) -> None:
        """Check ``response_format`` now (definition time) and build the request's field once."""
        from .response_format import response_struct
        from .schema import json_schema, schema_name

        if "response_format" in self.extra_body:
            raise ValueError("give the answer's shape as response_format=, not also in extra_body")
        self.response_type, self._response_model = response_struct(response_format)
        self._response_format = {"type": "json_schema", "json_schema": {
            "name": schema_name(self._response_model), "schema": json_schema(self.response_type), "strict": True}}
        self._schema_tokens = estimate_tokens(json.dumps(self._response_format))  # the endpoint counts it too

    def output_schema(self, df_or_schema: Any) -> Any:
        """The ``ordered_wait``/``unordered_wait`` schema: the input's columns plus the output
        column (``STRING``, or the ``response_type`` STRUCT with ``response_format``)."""
        if self.response_type is None:
            return super().output_schema(df_or_schema)
        from pyspark.sql.types import StructField, StructType

        schema = getattr(df_or_schema, "schema", df_or_schema)
        if not isinstance(schema, StructType):
            raise TypeError(f"output_schema takes a DataFrame or a StructType, got {type(df_or_schema).__name__}")
        if self.output in schema.fieldNames():
            raise ValueError(f"the input already has a column {self.output!r}: pass output= with another name")
        # nullable: a NULL input (or on_error="null") gives a NULL struct
        return StructType(list(schema.fields) + [StructField(self.output, self.response_type, True)])

    def _completion_estimate(self, completion_tokens: int | None) -> int:
        if completion_tokens is None and self.max_tokens is None:
            raise ValueError(f"{self._name}: a budget in tokens or money charges each call's estimate before it "
                             "starts, and the answer's length needs a bound: give OpenAIChat(max_tokens=...) or "
                             "budget_cost(completion_tokens=...)")
        return super()._completion_estimate(self.max_tokens if completion_tokens is None else completion_tokens)

    def _row_prompt_tokens(self, value: Any) -> float:
        # what _one's estimate counts: the messages' contents, and the schema sent
        messages = self._messages(value)
        schema = self._schema_tokens if self._response_format is not None else 0
        return float(sum(estimate_tokens(str(m["content"] or "")) for m in messages) + schema)

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

    def request_of(self, value: Any) -> tuple[dict[str, Any], int]:
        """The request body for a prompt or messages ``value`` (not NULL), and its token estimate
        (the prompt's, plus ``max_tokens`` and the schema sent): the live and the batch lane send it."""
        messages = self._messages(value)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        estimate = sum(estimate_tokens(str(m["content"] or "")) for m in messages) + (self.max_tokens or 0)
        if self._response_format is not None:
            body["response_format"] = self._response_format
            estimate += self._schema_tokens
        return body, estimate

    def value_of(self, answer: dict) -> Any:
        """The output value of an answer (a response body): its content, or the structured value."""
        content, _ = read_choice(answer, f"POST {self._path}", self._name, self.max_tokens,
                                 empty_ok=self._response_format is None)
        if self._response_format is None:
            return content
        return self._read_structured(content)

    async def _one(self, value: Any) -> Any:
        if value is None:
            return None
        body, estimate = self.request_of(value)
        return self.value_of(await self._answer(body, estimate))  # its usage is recorded, answer or not

    def _read_structured(self, content: str) -> dict:
        """The answer as the ``response_type`` value; a retryable error showing its start when it does
        not fit (a model may well answer right when asked again)."""
        from .answer_values import read_answer
        from .validated import validated

        try:
            value = read_answer(self.response_type, content)
            if self._response_model is not None:  # its own validators and constraints (Field(ge=...))
                value = validated(self._response_model, self.response_type, value)
        except Exception as exc:
            # any error while reading or validating is the answer's: a conversion error, pydantic's
            # ValidationError, or whatever a user's validator raised (KeyError, ZeroDivisionError...)
            errors = getattr(exc, "errors", None)  # pydantic's ValidationError lists where and why
            errors = errors() if callable(errors) else None
            if errors:
                why = f"{'.'.join(map(str, errors[0].get('loc', ())))}: {errors[0].get('msg')}"
            else:
                why = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            shown = content[:_ANSWER_PREFIX] + ("..." if len(content) > _ANSWER_PREFIX else "")
            raise ConnectorError(f"POST {self._path}: the answer does not fit response_format ({why}); "
                                 f"the answer: {shown!r}", source=self._name, retryable=True) from None
        return value
