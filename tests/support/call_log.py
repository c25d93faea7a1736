"""A call log every Python worker of a local session can append to: one JSON line per call.

Example::

    log_call(path, ["k1"])      # in the function, on any worker
    logged(path)                # [['k1']] on the driver
"""
from __future__ import annotations

import json
import os
from typing import Any


def log_call(path: str, value: Any) -> None:
    """Append ``value`` as one JSON line (O_APPEND: whole lines from concurrent workers)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(value, default=repr) + "\n").encode())
    finally:
        os.close(fd)


def logged(path: str) -> list[Any]:
    """Every value logged at ``path`` so far, in order (nothing when the file is absent)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
