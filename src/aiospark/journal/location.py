"""A journal's location as it may be shown, and as every process resolves it.

A location can carry credentials: ``s3://AKIA...:SECRET@bucket/j`` (pyarrow reads an access key
pair from the userinfo), ``redis://:password@host``, or a query parameter such as
``?secret_key=``, ``?session_token=``, ``?password=``. :class:`Location` keeps the text that
opens the store (pickled to the tasks, never printed) apart from :attr:`Location.shown`, the text
errors, logs, reprs and ``aiospark journal`` print; and :meth:`Location.scrub` /
:meth:`Location.clean` mask the credentials in any message a filesystem or client library builds
(pyarrow echoes a URI it cannot parse whole), with the project's one redaction helper
(:class:`~aiospark.connectors.redaction.Redactor`: every spelling of a secret, URL-encoded too).

Credentials are found the way a reader of the text would, not the way a URI parser does: in
``scheme://AKIA...:se/cr+et@bucket/j`` everything between ``://`` and the *last* ``@`` is
credentials, even when it holds a ``/``, ``?`` or ``#`` that a parser would take for the end of
the authority (so a secret written as is never shows as a "host" or a "path"). Such a location,
and any whose credentials are not valid URI userinfo, is refused where it is defined, without
echoing it: the secret must be URL-encoded (``urllib.parse.quote(secret, safe="")``) or come from
the environment. A URI holding a space, a non-ASCII or a control character is refused too, saying
how to encode it (pyarrow cannot parse it either).

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

__all__ = ["Location", "LocationError", "redacted"]

#: query parameters whose values are credentials (matched anywhere in the name, any case)
SECRET_PARAM = re.compile(r"secret|token|passw|pwd|key|credential|signature|sig$|sas|auth", re.IGNORECASE)
REDIS_SCHEMES = ("redis", "rediss")
MASK = "***"
#: what RFC 3986 allows unencoded in userinfo (unreserved, sub-delims, ":"); "%" is checked apart
USERINFO = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:%]*")
PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")


class LocationError(ValueError):
    """A journal location that cannot be used as written (the message says what to change)."""


class Location:
    """``text``: what opens the store; ``shown``: the same with its credentials masked."""

    __slots__ = ("_text", "shown", "_redactor")

    def __init__(self, location: str):
        text = resolve(location)
        _refuse_unparsable(text)
        self._text = text
        self.shown, secrets = _split_secrets(text)
        self._redactor = Redactor(*(Secret(s) for s in secrets))

    @property
    def text(self) -> str:
        """What opens the store, credentials included: never print it."""
        return self._text

    def __getstate__(self) -> tuple[str]:
        return (self._text,)

    def __setstate__(self, state: tuple[str]) -> None:
        self._text = state[0]
        self.shown, secrets = _split_secrets(self._text)
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


def _userinfo(location: str) -> tuple[str, str, str] | None:
    """``(scheme, userinfo, rest after its "@")`` of a URI with credentials, else None. The
    userinfo runs to the *last* "@": a secret written as is may hold "/", "?" or "#"."""
    scheme, sep, rest = location.partition("://")
    if not sep or "@" not in rest:
        return None
    userinfo, _, after = rest.rpartition("@")
    return scheme, userinfo, after


def _refuse_unparsable(location: str) -> None:
    """Refuse, at definition and without echoing a credential, a URI that does not parse."""
    if "://" not in location:
        return
    found = _userinfo(location)
    if found is not None:
        scheme, userinfo, after = found
        if not USERINFO.fullmatch(userinfo) or PCT.search(userinfo):
            raise LocationError(
                f"Journal({scheme + '://' + MASK + '@' + _cut(after)!r}): the credentials before '@' hold a character a URI "
                "cannot carry as is ('/', '?', '#', '@', '%' not followed by two hex digits, a space or a "
                "non-ASCII character), so the location cannot be parsed and would show part of the secret: "
                "URL-encode the access key and the secret (urllib.parse.quote(secret, safe='')), or leave them "
                "out of the location and give them through the environment (AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY, a profile or an instance role). If the '@' belongs to a path or a query "
                "value, write it as %40")
    bad = next(((i, c) for i, c in enumerate(location) if c.isspace() or not c.isprintable() or ord(c) > 126),
               None)
    if bad is None and not PCT.search(location):
        return
    shown = redacted(location)
    what = (f"holds {bad[1]!r} (position {bad[0]})" if bad is not None
            else "holds a '%' not followed by two hex digits")
    raise LocationError(
        f"Journal({shown!r}) is not a valid URI: it {what}. Percent-encode spaces, non-ASCII and control "
        "characters and a literal '%' in the path or query (urllib.parse.quote(path); ' ' is %20, '%' is %25), "
        "or pass a local directory as a plain path (no file://), which may hold any character")


def _cut(text: str) -> str:
    """The bucket/path part of ``text`` (its query dropped: it may hold credentials too)."""
    return text.split("?", 1)[0]


def _split_secrets(location: str) -> tuple[str, list[str]]:
    """``(location with its credentials masked, the credentials)``."""
    if "://" not in location:
        return location, []
    found = _userinfo(location)
    if found is not None and (not USERINFO.fullmatch(found[1]) or PCT.search(found[1])):
        # not a parsable userinfo (a secret written as is): mask all of it, and its pieces
        scheme, userinfo, after = found
        pieces = [userinfo, urllib.parse.unquote(userinfo)]
        pieces += [p for part in userinfo.split(":") for p in (part, part[-8:]) if len(p) >= 4]
        return f"{scheme}://{MASK}@{_cut(after)}", pieces
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
