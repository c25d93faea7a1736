"""``aiospark enrich``'s OUTPUT: never where the input is, and replaced only when this tool wrote it.

* OUTPUT that is the input, lies inside it, or contains it is refused, comparing real paths
  (``os.path.realpath``: symlinks, ``.`` and ``..`` resolved) for local paths before Spark starts,
  and qualified Hadoop paths for remote ones once Spark is up.
* Every output directory gets a marker file, :data:`MARKER` (a name starting with ``_``, which
  Spark's readers skip, as they skip ``_SUCCESS``). ``--overwrite`` replaces only a directory
  holding it, and only when it is the JSON this tool writes (:func:`marker_problem`: its fields
  and their types); a file, a symbolic link, any other directory, or a directory with an empty or
  foreign marker is refused, whatever it holds, and nothing is deleted.

Example::

    check_output("in.csv", "out.json", overwrite=False)   # raises EnrichError when OUTPUT is unsafe
"""
from __future__ import annotations

import json
import os
import re
import time

from .enrich_base import EnrichError, is_local, local_path

#: the file every output directory of ``aiospark enrich`` holds (``--overwrite`` needs it)
MARKER = "_AIOSPARK_ENRICH"


def marker_text(input_path: str) -> str:
    """What the marker file says: which tool wrote the directory, from what, when."""
    from .. import __version__

    return json.dumps({"written_by": f"aiospark {__version__} enrich", "input": input_path,
                       "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n"


_WRITTEN_BY = re.compile(r"aiospark \S+ enrich")
_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_MARKER_MAX = 64 * 1024  # ours is ~200 bytes plus the input's path


def marker_problem(text: str | None) -> str | None:
    """Why ``text`` (a marker file's content, ``None`` when absent) is not a marker this tool wrote;
    ``None`` when it is: a JSON object with exactly ``written_by`` ("aiospark <version> enrich"),
    ``input`` (a non-empty string) and ``at`` (a UTC time, ``YYYY-MM-DDTHH:MM:SSZ``).

    Example::

        marker_problem("{}")   # 'it is not the JSON aiospark enrich writes (fields ...)'
    """
    if text is None:
        return "it is missing"
    if not text.strip():
        return "it is empty"
    try:
        data = json.loads(text)
    except ValueError:
        return "it is not JSON"
    if not isinstance(data, dict) or set(data) != {"written_by", "input", "at"}:
        return "it is not the JSON aiospark enrich writes (fields written_by, input, at)"
    if not isinstance(data["written_by"], str) or not _WRITTEN_BY.fullmatch(data["written_by"]):
        return f"its written_by is {data['written_by']!r}, not 'aiospark <version> enrich'"
    if not isinstance(data["input"], str) or not data["input"]:
        return "its input is not a path"
    if not isinstance(data["at"], str) or not _AT.fullmatch(data["at"]):
        return "its at is not a UTC time"
    return None


def _read_marker(directory: str) -> str | None:
    path = os.path.join(directory, MARKER)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MARKER_MAX + 1)
    except OSError:
        return None
    if len(raw) > _MARKER_MAX:
        return "x"  # not ours: far too long
    return raw.decode("utf-8", errors="replace")


def refuse_marker(output_path: str, text: str | None) -> None:
    """Raise :class:`EnrichError` unless ``text`` is a marker this tool wrote (``--overwrite``)."""
    why = marker_problem(text)
    if why is None:
        return
    where = f"{output_path.rstrip('/')}/{MARKER}"
    if text is None:
        raise EnrichError(f"the output {output_path!r} is a directory aiospark enrich did not write (no {MARKER} "
                          f"file in it): --overwrite replaces only its own output; choose another path, or "
                          "remove it yourself")
    raise EnrichError(f"the output {output_path!r} is not a directory aiospark enrich wrote: its marker file "
                      f"{where!r} is not one this tool writes ({why}); --overwrite replaces only its own output, "
                      "and nothing was deleted: choose another path, or remove it yourself")


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(local_path(path)))


def _related(a: str, b: str) -> bool:
    """``a`` is ``b``, or one lies inside the other."""
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep) or b.startswith(a.rstrip(os.sep) + os.sep)


def check_paths(input_path: str, output_path: str) -> None:
    """Refuse an OUTPUT that is the input, lies inside it or contains it (local paths, real paths)."""
    if is_local(input_path) and is_local(output_path):
        real_in, real_out = _real(input_path), _real(output_path)
        if _related(real_in, real_out):
            raise EnrichError(f"OUTPUT {output_path!r} {_relation(real_in, real_out)} the INPUT {input_path!r} "
                              f"(real paths {real_out!r} and {real_in!r}): write the enriched data somewhere else")
    elif output_path.rstrip("/") == input_path.rstrip("/"):
        raise EnrichError("OUTPUT is the INPUT: write the enriched data somewhere else")


def _relation(real_in: str, real_out: str) -> str:
    if real_in == real_out:
        return "is"
    return "contains" if real_in.startswith(real_out.rstrip(os.sep) + os.sep) else "lies inside"


def check_overwrite(output_path: str, overwrite: bool) -> None:
    """A local OUTPUT that exists: refused without ``overwrite``; with it, refused unless it is a
    directory (not a symbolic link) this tool wrote."""
    if not is_local(output_path):
        return
    path = local_path(output_path)
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise EnrichError(f"the output {output_path!r} exists: pass --overwrite to replace it (it is replaced "
                          "only once the new output is complete), or choose another path")
    if os.path.islink(path):
        raise EnrichError(f"the output {output_path!r} is a symbolic link: --overwrite replaces only a directory "
                          "aiospark enrich wrote; give the real path, or another one")
    if not os.path.isdir(path):
        raise EnrichError(f"the output {output_path!r} is a file aiospark enrich did not write (no {MARKER} "
                          f"file in it): --overwrite replaces only its own output; choose another path, or "
                          "remove it yourself")
    refuse_marker(output_path, _read_marker(path))


def check_remote(files: object, input_path: str, output_path: str, overwrite: bool) -> None:
    """The same checks for paths Spark's filesystems resolve (``files``: enrich's ``_Files``)."""
    real_in, real_out = files.qualified(input_path), files.qualified(output_path)  # type: ignore[attr-defined]
    if _related(real_in, real_out):
        raise EnrichError(f"OUTPUT {output_path!r} {_relation(real_in, real_out)} the INPUT {input_path!r} "
                          f"({real_out} and {real_in}): write the enriched data somewhere else")
    if files.exists(output_path):  # type: ignore[attr-defined]
        if not overwrite:
            raise EnrichError(f"the output {output_path!r} exists: pass --overwrite to replace it")
        marker = output_path.rstrip("/") + "/" + MARKER
        text = files.read_text(marker, _MARKER_MAX) if files.exists(marker) else None  # type: ignore[attr-defined]
        refuse_marker(output_path, text)


def check_journal(location: str, input_path: str, output_path: str) -> None:
    """Refuse a local journal that is, holds, or lies inside the input or OUTPUT: ``--overwrite``
    would delete the record of what was paid for, or the job would read its own journal."""
    if "://" in location and not location.startswith("file:"):
        return
    real = _real(location)
    for what, path in (("the INPUT", input_path), ("OUTPUT", output_path)):
        if is_local(path) and _related(real, _real(path)):
            raise EnrichError(f"--journal {location!r} {_relation(_real(path), real)} {what} {path!r}: keep the "
                              "journal in a directory of its own, outside both")
