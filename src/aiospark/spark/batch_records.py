"""What the batch lane keeps in a directory journal: each uploaded request file, each batch, and
what each batch answered (:mod:`aiospark.spark.batch_lane` writes them; ``aiospark batch status``
reads them).

Layout, next to the journal's outcomes of the same question (``<digest>``)::

    <location>/<digest>/batches/upload-<file id>.json     written before the batch is created
    <location>/<digest>/batches/batch-<batch id>.json     the batch (id, file, counts, status)
    <location>/<digest>/batches/answers-<batch id>.arrow  its answers, once it ended

An upload record names every ``custom_id`` of the file and the hash of each request body, and is
written before ``POST /batches``: a run killed between the two finds the file in the record and
either adopts the batch the provider made of it or creates it then -- never a second file of the
same rows. Each file is written whole under a temporary name and moved into place, so a reader
sees a record whole or not at all.

Example::

    records = BatchRecords(store, digest)
    records.record_upload("file-1", "/v1/chat/completions", ["id-1"], ["3f2a..."])
    records.submitted()            # {'id-1'}
"""
from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["ANSWERS_SCHEMA", "AnswerFiles", "BatchRecords"]

ANSWERS_SCHEMA = pa.schema([("custom_id", pa.string()), ("hash", pa.string()), ("answer", pa.string()),
                            ("code", pa.string()), ("message", pa.string()), ("status", pa.int32())])


def _name(provider_id: str) -> str:
    """A provider's id as a file name part (quoted: an id is the provider's text, not ours)."""
    return urllib.parse.quote(provider_id, safe="")


class BatchRecords:
    """The batch records of one question of a directory journal (``store``: its
    :class:`~aiospark.journal.directory.DirectoryStore`; ``digest``: the manifest's)."""

    def __init__(self, store: Any, digest: str):
        self.store = store
        self.digest = digest

    @property
    def folder(self) -> str:
        return f"{self.store.fs[1]}/{self.digest}/batches"

    def _write(self, name: str, data: bytes) -> None:
        fs = self.store.fs[0]

        def write() -> None:
            fs.create_dir(self.folder, recursive=True)
            temporary = f"{self.folder}/.{name}.{uuid.uuid4().hex}.tmp"
            with fs.open_output_stream(temporary) as f:
                f.write(data)
            fs.move(temporary, f"{self.folder}/{name}")

        self.store.guarded(f"cannot write the batch record {name}", write)

    def _read_json(self, prefix: str) -> list[dict[str, Any]]:
        fs = self.store.fs[0]

        def read() -> list[dict[str, Any]]:
            selector = pafs.FileSelector(self.folder, allow_not_found=True)
            out = []
            for info in fs.get_file_info(selector):
                if info.type == pafs.FileType.File and info.base_name.startswith(prefix) \
                        and info.base_name.endswith(".json"):
                    with fs.open_input_stream(info.path) as f:
                        out.append(json.loads(f.read().decode()))
            return out

        return self.store.guarded("cannot read its batch records", read)

    # ---------------------------------------------------------------- uploads
    def record_upload(self, file_id: str, endpoint: str, custom_ids: Sequence[str], hashes: Sequence[str],
                      task: str | None = None, units: Sequence[float] = ()) -> None:
        """The file ``file_id`` holds these requests (before any batch is made of it); ``task`` and
        ``units``: the budget reservation of the file and each request's part of it."""
        record = {"file_id": file_id, "endpoint": endpoint, "custom_ids": list(custom_ids),
                  "hashes": list(hashes), "task": task, "units": list(units), "at": time.time()}
        self._write(f"upload-{_name(file_id)}.json", json.dumps(record).encode())

    def uploads(self) -> list[dict[str, Any]]:
        """Every upload record, oldest first."""
        return sorted(self._read_json("upload-"), key=lambda r: r["at"])

    def submitted(self) -> set[str]:
        """The custom_ids in an uploaded file (in a batch, or about to be): never submitted again --
        except those of a batch the provider ``failed`` whole (its validation: nothing of it ran
        nor was billed), which may go into a new file."""
        failed = {file_id for file_id, batch in self.batches().items() if batch["status"] == "failed"}
        return {cid for record in self.uploads() if record["file_id"] not in failed for cid in record["custom_ids"]}

    # ---------------------------------------------------------------- batches
    def record_batch(self, file_id: str, info: Any, answers: str | None = None) -> dict[str, Any]:
        """The batch ``info`` (a :class:`~aiospark.connectors.openai.batch_api.BatchInfo`) made of
        ``file_id``, as the provider last described it; ``answers``: its answer file, once read."""
        record = {"batch_id": info.id, "file_id": file_id, "endpoint": info.endpoint, "status": info.status,
                  "total": info.total, "completed": info.completed, "failed": info.failed,
                  "created_at": info.created_at, "usage": info.usage, "answers": answers, "at": time.time()}
        self._write(f"batch-{_name(info.id)}.json", json.dumps(record).encode())
        return record

    def batches(self) -> dict[str, dict[str, Any]]:
        """``{file_id: batch record}``."""
        return {r["file_id"]: r for r in self._read_json("batch-")}

    # ---------------------------------------------------------------- answers
    def write_answers(self, batch_id: str, results: Mapping[str, Any], hashes: Mapping[str, str]) -> str:
        """Write a batch's answers (``{custom_id: body dict | BatchFailure}``, with the hash of each
        request sent); the file's name."""
        rows: dict[str, list[Any]] = {name: [] for name in ANSWERS_SCHEMA.names}
        for cid, found in results.items():
            rows["custom_id"].append(cid)
            rows["hash"].append(hashes.get(cid, ""))
            if isinstance(found, Mapping):
                rows["answer"].append(json.dumps(found, separators=(",", ":"), ensure_ascii=False))
                rows["code"].append(None)
                rows["message"].append(None)
                rows["status"].append(None)
            else:
                rows["answer"].append(None)
                rows["code"].append(found.code)
                rows["message"].append(found.message)
                rows["status"].append(found.status)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, ANSWERS_SCHEMA) as writer:
            writer.write_batch(pa.RecordBatch.from_pydict(rows, schema=ANSWERS_SCHEMA))
        name = f"answers-{_name(batch_id)}.arrow"
        self._write(name, sink.getvalue().to_pybytes())
        return name

    def answer_files(self) -> AnswerFiles:
        """The answer files of every ended batch, as the collect's tasks read them."""
        names = sorted(r["answers"] for r in self.batches().values() if r.get("answers"))
        return AnswerFiles(self.store, [f"{self.folder}/{n}" for n in names])


class AnswerFiles:
    """The source of :class:`~aiospark.connectors.openai.batch_answers.BatchAnswers` (picklable):
    ``()`` reads ``{custom_id: (hash, answer JSON, code, message, status)}`` from the files."""

    def __init__(self, store: Any, paths: Iterable[str]):
        self.store = store
        self.paths = tuple(paths)
        self.key = (store.shown, self.paths)

    def __repr__(self) -> str:
        return f"{len(self.paths)} answer file(s) in {self.store.shown}"

    def __call__(self) -> dict[str, tuple]:
        fs = self.store.fs[0]

        def read() -> dict[str, tuple]:
            out: dict[str, tuple] = {}
            for path in self.paths:
                with fs.open_input_file(path) as f:
                    table = pa.ipc.open_file(f).read_all()
                columns = [table.column(n).to_pylist() for n in ANSWERS_SCHEMA.names]
                for cid, *rest in zip(*columns):
                    kept = out.get(cid)
                    if kept is None or kept[1] is None:  # an answer wins over another batch's failure
                        out[cid] = tuple(rest)
            return out

        return self.store.guarded("cannot read its batch answers", read)
