"""What a journal keeps of an OpenAI function's outputs in ``ordered_wait`` / ``unordered_wait``.

The function's output row is its input row plus one column (``output=``); a journal keeps only
that column's value, and a recorded (or shared) answer is put back onto the *current* input row.
With ``Journal(key="id")`` two rows of one key may differ in their other columns (a note, a
timestamp): each keeps its own, never the columns of the row that was called. The answer itself is
a function of the input column, so that column is always part of the journal's identity
(``journal_identity_columns``): a prompt edited under the same key is another question.

Example::

    rows = AnswerRows("answer")
    stored = rows.encode([{"id": 1, "prompt": "hi", "answer": "hello"}])   # [{'answer': 'hello'}]
    rows.rebuild({"id": 1, "prompt": "hi", "note": "b"}, stored)          # note 'b' kept
"""
from __future__ import annotations

from typing import Any

__all__ = ["AnswerRows"]


class AnswerRows:
    """Outputs stored as ``{output: value}`` and rebuilt onto the current row (picklable)."""

    def __init__(self, output: str):
        self.output = output

    def encode(self, results: list[Any]) -> list[Any]:
        out = self.output
        return [{out: r[out]} if type(r) is dict and out in r else r for r in results]

    def rebuild(self, row: dict[str, Any], stored: list[Any]) -> list[Any]:
        rebuilt: list[Any] = []
        for found in stored:
            if type(found) is dict and type(row) is dict:
                joined = row.copy()
                joined.update(found)  # a journal of an earlier release kept whole rows: the same answer
                rebuilt.append(joined)
            else:
                rebuilt.append(found)
        return rebuilt
