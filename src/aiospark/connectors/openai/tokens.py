"""Token estimates of the OpenAI connectors: tiktoken's count where it is installed and loaded,
else characters / 4; what ``tokens_per_minute``, the pacer, budgets and plans charge before a
request, compared afterwards with what the endpoint counted.

Example::

    await load_tokenizer()                  # once per process, off the loop (``open()`` does it)
    estimate_tokens("hello world")          # 2 with tiktoken, 3 without
"""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from typing import Any

from ..redaction import short

__all__ = ["ENCODING", "TOKENIZER_LOAD_SECONDS", "estimate_tokens", "load_tokenizer"]

log = logging.getLogger("aiospark.connectors.openai.function")  # the logger these warnings always had


#: tiktoken's encoding of OpenAI's current models, used for every model name it does not know
ENCODING = "o200k_base"
#: seconds the first open() waits for tiktoken to load its encoding (it may try to download it)
TOKENIZER_LOAD_SECONDS = 10.0
_encoder: Any = None        # tiktoken's Encoding once loaded in this process
_tokenizer_tried = False    # loaded or failed once: never tried again in this process


def estimate_tokens(text: str) -> int:
    """The tokens charged to ``tokens_per_minute`` (and to the endpoint's advertised token budget)
    for ``text`` before the request: tiktoken's count in its ``o200k_base`` encoding when the
    ``tiktoken`` package is installed and its encoding loaded (:func:`load_tokenizer`, which
    ``open()`` calls), else ``ceil(len(text) / 4)`` (OpenAI's rule of thumb for English); at least 1."""
    if _encoder is not None:
        return max(1, len(_encoder.encode(text, disallowed_special=())))
    return max(1, math.ceil(len(text) / 4))


async def load_tokenizer(seconds: float | None = None) -> bool:
    """Load tiktoken's encoding once per process, off the event loop; True if token estimates
    use it. Without ``tiktoken`` installed: False, silently. If it cannot load (tiktoken
    downloads its encoding files at first use, and caches them in ``TIKTOKEN_CACHE_DIR``: a
    machine without internet access needs that cache filled beforehand), or takes longer than
    ``seconds``: one warning in the log, and estimates stay ``characters / 4``.

    Example: ``await load_tokenizer()`` then ``estimate_tokens("hello world")  # 2``
    """
    global _encoder, _tokenizer_tried
    if _tokenizer_tried:
        return _encoder is not None
    _tokenizer_tried = True
    try:
        import tiktoken
    except ImportError:
        return False

    try:
        # a thread: the download is a blocking HTTP request with no timeout of its own
        found = await asyncio.wait_for(asyncio.to_thread(tiktoken.get_encoding, ENCODING),
                                       TOKENIZER_LOAD_SECONDS if seconds is None else seconds)
    except asyncio.TimeoutError:
        log.warning("tiktoken did not load its %s encoding within %ss; token estimates use "
                    "characters / 4 in this process", ENCODING, TOKENIZER_LOAD_SECONDS if seconds is None else seconds)
        return False
    except Exception as exc:  # any failure to load means: the fallback estimate
        # an estimate only: the request is sent either way, and this says once why it is rougher
        log.warning("tiktoken could not load its %s encoding (%s); token estimates use characters / 4 "
                    "in this process (fill TIKTOKEN_CACHE_DIR on a machine without internet access)",
                    ENCODING, short(exc, limit=200))
        return False
    _encoder = found
    return True



def _prompt_estimate(body: Mapping[str, Any]) -> int | None:
    """The estimate of the prompt alone (the texts, or the messages' contents), to compare with
    the endpoint's ``prompt_tokens``; None for a body of another shape."""
    texts = body.get("input")
    if isinstance(texts, str):
        return estimate_tokens(texts)
    if isinstance(texts, list):
        return sum(estimate_tokens(str(t)) for t in texts)
    messages = body.get("messages")
    if isinstance(messages, list):
        return sum(estimate_tokens(str(m.get("content") or "")) for m in messages if isinstance(m, Mapping))
    return None
