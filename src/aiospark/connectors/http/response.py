"""What comes back to :class:`~aiospark.connectors.http.HttpLookup`: status errors and JSON rows.

A JSON object is one row, a list is many rows, ``null`` is a miss; fields are mapped to the
schema's columns (missing -> None) and converted to the declared types; ``json_path`` selects a
nested value first (an answer without that path is an error, not a miss). 429 and 5xx are retryable :class:`HttpStatusError` with ``retry_after``;
any other non-2xx is a non-retryable one. Response bodies are scrubbed before they are cut and
quoted (a cut could leave half a secret behind).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...lookup.schema import RowMapper
from ..errors import ConnectorError
from ..redaction import Redactor
from .request import composite_key_text, key_text


class HttpStatusError(ConnectorError):
    """A non-success HTTP status. ``status``; ``retryable`` (429/5xx); ``retry_after`` seconds."""

    __module__ = "aiospark.connectors.http"  # its public home; pickles made before the split still load

    def __init__(self, message: str, *, source: str = "", status: int = 0, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message, source=source, retryable=retryable)
        self.status = status
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_error(status: int, reason: str | None, retry_after_header: str | None, body: bytes,
                 request: str, redactor: Redactor, source: str, hint: str = "") -> HttpStatusError:
    """The error for a non-2xx answer to ``request`` (``"GET /path"``), quoting the scrubbed body,
    then ``hint`` (what to check)."""
    retryable = status == 429 or status >= 500
    retry_after = parse_retry_after(retry_after_header) if retryable else None
    # scrub the whole body before cutting it: a cut could leave half a secret behind
    text = redactor.scrub(body[:65_536].decode("utf-8", "replace"), limit=200).strip()
    msg = f"HTTP {status} {reason or ''} for {request}".rstrip()
    if text:
        msg += f": {text}"
    if hint:
        msg += f" ({hint})"
    return HttpStatusError(msg, source=source, status=status, retryable=retryable,
                           retry_after=retry_after)


class JsonRows:
    """Turns decoded JSON answers into rows of ``schema`` (``fields`` parsed from it)."""

    def __init__(self, schema: str, fields: Sequence[Any], json_path: str | None, source: str) -> None:
        self.schema, self._fields, self._source = schema, fields, source
        self._mapper = RowMapper(fields)
        self._path = tuple(json_path.split(".")) if json_path else ()

    def select(self, data: Any) -> Any:
        """The value at ``json_path``; ValueError when the answer has no such path (an answer of
        another shape, e.g. an error object sent with status 200, must not pass for a miss).
        An explicit ``null`` on the way is a miss (None)."""
        for i, part in enumerate(self._path):
            if data is None:
                return None
            if isinstance(data, Mapping) and part in data:
                data = data[part]
            elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            else:
                shown = ", ".join(sorted(map(str, data))[:10]) if isinstance(data, Mapping) else type(data).__name__
                raise ValueError(f"the answer has no {'.'.join(self._path[:i + 1])!r} (json_path="
                                 f"{'.'.join(self._path)!r}); found: {shown}")
        return data

    def answer(self, data: Any) -> list[dict]:
        """The rows of a single lookup's answer (``json_path`` applied); ConnectorError if unfit."""
        if data is None:  # a 404 or 204: no such row
            return []
        try:
            return self.rows(self.select(data) if self._path else data)
        except ValueError as exc:
            raise ConnectorError(str(exc), source=self._source) from None

    def rows(self, data: Any) -> list[dict]:
        mapper = self._mapper
        if data is None:
            return []
        if type(data) is dict or isinstance(data, Mapping):  # JSON objects decode to dict
            return [mapper.row(data)]
        items = data if isinstance(data, list) else [data]
        rows = []
        for item in items:
            if type(item) is dict or isinstance(item, Mapping):
                rows.append(mapper.row(item))
            elif len(self._fields) == 1 and item is not None:
                rows.append(mapper.single(item))
            elif item is not None:
                raise ConnectorError(f"expected JSON objects for schema {self.schema!r}, got "
                                     f"{type(item).__name__}", source=self._source)
        return rows

    def rows_or_error(self, data: Any) -> Any:
        """A key's rows, or its own ConnectorError (a row that does not fit the schema)."""
        try:
            return self.rows(data)
        except ConnectorError as exc:
            return exc
        except ValueError as exc:
            return ConnectorError(str(exc), source=self._source)

    def batch(self, data: Any, wanted: list[tuple[tuple, tuple]], arity: int,
              decode: Callable[[Any, list[tuple]], Mapping[tuple, Any]] | None,
              out: dict[tuple, Any]) -> None:
        """Each wanted ``(key, its JSON form)``'s rows or error from a batch answer, into ``out``."""
        if decode is not None:
            try:
                found = decode(data, [j for _, j in wanted]) or {}
            except ValueError as exc:
                raise ConnectorError(str(exc), source=self._source) from None
            for k, j in wanted:
                out[k] = self.rows_or_error(found.get(j))
            return
        results = data.get("results") if isinstance(data, Mapping) else None
        if isinstance(results, Mapping):
            for k, j in wanted:
                text = key_text(j[0]) if arity == 1 else composite_key_text(j)
                out[k] = self.rows_or_error(results.get(text))
            return
        if isinstance(results, list) and len(results) == len(wanted):
            for (k, _), r in zip(wanted, results):
                out[k] = self.rows_or_error(r)
            return
        raise ConnectorError('batch response must be {"results": {key: rows}} or {"results": [...]} '
                             "aligned with the request's keys", source=self._source)
