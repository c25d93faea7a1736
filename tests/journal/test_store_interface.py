"""The journal's stores behind one interface (issue 47): a directory and a real redis-server are
both a ``JournalStore``; whether a task's store is asked row by row is declared, not probed; the
Redis store lives in ``connectors/redis`` and the old module is gone."""
from __future__ import annotations

import importlib
import os

import pytest

from aiospark.journal import Journal, JournalStore, Manifest, StoreTask, TaskView
from aiospark.journal.summary import summarize
from tests.support.servers import RedisServer


async def fn(row):
    return row


def manifest():
    return Manifest.of("ordered_wait", fn, "id BIGINT", ["id"], ["bigint"])


@pytest.fixture(scope="module")
def redis_url():
    with RedisServer() as srv:
        yield srv.url


def test_a_redis_journal_is_a_store_of_connectors_redis_asked_row_by_row(redis_url):
    journal = Journal(f"{redis_url}?prefix=iface-{os.urandom(4).hex()}", key="id")
    store = journal.store
    assert isinstance(store, JournalStore) and type(store).__module__ == "aiospark.connectors.redis.journal_store"
    bound = journal.bind(manifest())
    writer = bound.open_task(0, None, "1")
    assert isinstance(writer.store_task, StoreTask) and writer.fetches_by_row
    writer.record("[1]", [{"id": 1}], None)
    writer.close()
    # another partition's task finds it, because it asks (one MGET) rather than loading up front
    reader = bound.open_task(7, None, "2")
    assert reader.known == {}
    reader.prefetch(["[1]", "[2]"])
    assert reader.recorded("[1]").results == [{"id": 1}] and reader.recorded("[2]") is None
    reader.close()
    assert summarize(store.loc.text).results == 1


def test_a_directory_journal_is_asked_per_row_by_bucket(tmp_path):
    journal = Journal(str(tmp_path / "j"), key="id")
    assert isinstance(journal.store, JournalStore)
    bound = journal.bind(manifest())
    writer = bound.open_task(0, None, "1")
    writer.record("[1]", [{"id": 1}], None)
    writer.close()
    reader = bound.open_task(0, None, "2")
    assert reader.fetches_by_row and reader.recorded("[1]") is None  # nothing loaded up front
    reader.prefetch(["[1]"])
    assert reader.recorded("[1]").results == [{"id": 1}]
    reader.close()


class _UpFront(StoreTask):
    """A store task that loaded everything, and also happens to have a ``fetch``-like helper."""

    def __init__(self):
        self.asked = []

    def load(self):
        return {"[1]": ([1], None)}

    def fetch(self, identities):  # what a getattr probe would have found and called
        self.asked.append(list(identities))
        return {i: ([0], None) for i in identities}

    def write(self, entries):
        pass

    def close(self):
        pass


class _ByRow(_UpFront):
    fetches_by_row = True


def test_prefetch_follows_the_declared_property_not_the_presence_of_a_method():
    up_front = TaskView(_UpFront(), keep_errors=False).load()
    up_front.prefetch(["[1]", "[2]"])
    assert up_front.store_task.asked == [] and up_front.recorded("[2]") is None and not up_front.fetches_by_row
    by_row = TaskView(_ByRow(), keep_errors=False).load()
    by_row.prefetch(["[1]", "[2]", "[2]"])
    assert by_row.store_task.asked == [["[2]"]] and by_row.recorded("[2]").results == [0] and by_row.fetches_by_row


def test_a_store_that_forgets_part_of_the_interface_fails_where_it_is_made():
    class NoWrite(StoreTask):
        def load(self):
            return {}

        def close(self):
            pass

    with pytest.raises(TypeError, match="write"):
        NoWrite()

    class NoDrop(JournalStore):
        kind = "x"

        @staticmethod
        def versioned(location, version):
            return location

        def check(self, manifest):
            pass

        def task(self, manifest, partition, batch, attempt):
            raise NotImplementedError

        def summarize(self, samples):
            raise NotImplementedError

    with pytest.raises(TypeError, match="drop_errors"):
        NoDrop("/tmp/x")


def test_the_journal_package_holds_no_redis_module_any_more():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("aiospark.journal.redis_store")


def test_versions_still_land_next_to_each_other(tmp_path):
    assert Journal("redis://127.0.0.1:6379/0?prefix=p", version="b").store.prefix == "p:v=b"
    assert Journal(str(tmp_path), version=2).store.loc.text == str(tmp_path / "v=2")
    with pytest.raises(ValueError, match="ftp:// is not a journal location"):
        Journal("ftp://host/j")
