"""Listing a journal folder while other tasks write into it.

pyarrow's local filesystem lists a folder in two steps: it opens the folder and, when that fails,
asks whether the folder exists. A folder another task creates between the two steps (the first
outcome of a bucket, written next door) is then reported as ``FileNotFoundError`` although
``allow_not_found`` was given. The folder did not exist when it was opened, so an empty listing
is the true answer at that instant, as it would have been a moment earlier.

Example::

    infos = listing(fs, "/j/<digest>/k=3")     # [] while the folder does not exist
"""
from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

__all__ = ["listing"]


def listing(fs: pafs.FileSystem, directory: str, recursive: bool = False) -> list[Any]:
    """The file infos under ``directory`` (``[]`` when it does not exist, even when it is being
    created this instant). A recursive listing whose subfolder vanished mid-way is taken again."""
    selector = pafs.FileSelector(directory, recursive=recursive, allow_not_found=True)
    for _ in range(3 if recursive else 1):
        try:
            return list(fs.get_file_info(selector))
        except FileNotFoundError:
            if not recursive:
                return []
    return list(fs.get_file_info(selector))
