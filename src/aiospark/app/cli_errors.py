"""One line out of a failed Spark job's exception: what failed, without the JVM's stack trace.

A task that fails in Python reaches the driver as a Java exception whose text holds the worker's
Python traceback, wrapped in Spark's own messages and stack frames (hundreds of lines). The line
that matters is the last Python exception of that traceback (``aiospark.core.errors.
AsyncFunctionError: ...``), or else the first line of the message.

Example::

    short_error(RuntimeError("boom"))   # 'RuntimeError: boom'
"""
from __future__ import annotations

import re

#: a Python traceback's last line: ``module.path.ErrorName: message``
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Timeout\w*)): (.+)$")
_LIMIT = 400


def short_error(exc: BaseException) -> str:
    """``ErrorName: message`` of the exception that really failed, at most ~400 characters.

    Example::

        short_error(ValueError("x"))   # 'ValueError: x'
    """
    text = str(exc)
    lines = text.splitlines()
    python = None
    if "Traceback (most recent call last)" in text:
        tail = text[text.rindex("Traceback (most recent call last)"):].splitlines()
        for line in tail[1:]:
            if line.startswith((" ", "\t")):
                continue  # a frame or its source line
            match = _EXCEPTION_LINE.match(line.strip())
            if match:
                python = f"{match.group(1)}: {match.group(2)}"
                break
    if python is None:
        first = next((line.strip() for line in lines if line.strip()), "")
        python = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return python if len(python) <= _LIMIT else python[:_LIMIT - 3] + "..."
