"""A journal's location as it may be shown, and as every process resolves it.

A location can carry credentials: ``s3://AKIA...:SECRET@bucket/j`` (pyarrow reads an access key
pair from the userinfo), ``redis://:password@host``, or a query parameter such as
``?secret_key=``, ``?session_token=``, ``?password=``. :class:`Location` keeps the text that
opens the store (pickled to the tasks, never printed) apart from :attr:`Location.shown`, the text
errors, logs, reprs and ``aiospark journal`` print; and :meth:`Location.scrub` /
:meth:`Location.clean` mask the credentials in any message a filesystem or client library builds
(pyarrow echoes a URI it cannot parse whole), with the project's one redaction helper
(:class:`~aiospark.connectors.redaction.Redactor`: every spelling of a secret, URL-encoded too).

A relative path is resolved once, where the ``Journal`` is made (on the driver): each Spark
process has its own working directory (a standalone cluster starts every application's
executors in a new ``work/app-...`` directory), so resolving it in each task would scatter one
journal over as many directories.

Example::

    >>> loc = Location("s3://AKIAX:s3cr3t@bucket/j?region=eu-west-1&session_token=tok")
    >>> loc.shown
    's3://***:***@bucket/j?region=eu-west-1&session_token=***'
    >>> loc.scrub("Cannot parse URI: 's3://AKIAX:s3cr3t@bucket/j'")
    "Cannot parse URI: 's3://***:***@bucket/j'"
"""
from __future__ import annotations

import os
import re
import urllib.parse

from ..connectors.redaction import Redactor
from ..connectors.secrets import Secret
from .errors import JournalStoreError

__all__ = ["Location", "redacted"]

#: query parameters whose values are credentials (matched anywhere in the name, any case)
SECRET_PARAM = re.compile(r"secret|token|passw|pwd|key|credential|signature|sig$|sas|auth", re.IGNORECASE)
REDIS_SCHEMES = ("redis", "rediss")
MASK = "***"


class Location:
    """``text``: what opens the store; ``shown``: the same with its credentials masked."""

    __slots__ = ("text", "shown", "_redactor")

    def __init__(self, location: str):
        self.text = resolve(location)
        self.shown, secrets = _split_secrets(self.text)
        self._redactor = Redactor(*(Secret(s) for s in secrets))

    @property
    def is_local(self) -> bool:
        """A path on this host's filesystem (a plain path or ``file://``)."""
        return "://" not in self.text or self.text.lower().startswith("file://")

    def scrub(self, text: str) -> str:
        """``text`` with every credential of this location masked."""
        return self._redactor.scrub(text) if self._redactor else str(text)

    def leaks(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` or anything in its cause/context chain shows a credential."""
        seen = 0
        while exc is not None and seen < 20:
            if self._redactor and self.scrub(str(exc)) != str(exc)[:65_536]:
                return True
            exc = exc.__cause__ or exc.__context__
            seen += 1
        return False

    def clean(self, exc: BaseException, what: str) -> BaseException:
        """``exc`` as it may leave the journal: itself when no credential shows in it or in its
        causes, else a ``JournalStoreError`` of its message scrubbed (no cause attached)."""
        if not self.leaks(exc):
            return exc
        return JournalStoreError(f"{what}: {type(exc).__name__}: {self.scrub(str(exc))}")

    def __repr__(self) -> str:
        return f"Location({self.shown!r})"


def resolve(location: str) -> str:
    """A plain path made absolute here (``~`` expanded); URIs as they are."""
    if "://" in location:
        return location
    return os.path.abspath(os.path.expanduser(location))


def _split_secrets(location: str) -> tuple[str, list[str]]:
    """``(location with its credentials masked, the credentials)``."""
    if "://" not in location:
        return location, []
    try:
        parts = urllib.parse.urlsplit(location)
        password, username = parts.password, parts.username
    except ValueError:  # not even a URL (a bad port): show the scheme only
        return location.split("://", 1)[0] + "://" + MASK, [location.split("://", 1)[1]]
    secrets: list[str] = []
    netloc = parts.netloc
    if password is not None:
        secrets += [password, urllib.parse.unquote(password)]
        host = netloc.rsplit("@", 1)[1]
        # a Redis user name is an account name; an object store's is an access key id
        user = (username or "") if parts.scheme.lower() in REDIS_SCHEMES else MASK
        if user == MASK and username:
            secrets += [username, urllib.parse.unquote(username)]
        netloc = f"{user}:{MASK}@{host}"
    query = []
    for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if value and SECRET_PARAM.search(name):
            secrets.append(value)
            value = MASK
        query.append(f"{urllib.parse.quote(name, safe='')}={urllib.parse.quote(value, safe='*')}")
    shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "&".join(query), ""))
    return shown, [s for s in secrets if s]


def redacted(location: str) -> str:
    """``location`` with its credentials masked (for errors, logs and reprs)."""
    return _split_secrets(location)[0]
