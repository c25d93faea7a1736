"""Journal(version=): a version's outcomes live next to the others, in the same location."""
from __future__ import annotations

import pytest

import aiospark


def test_a_version_is_a_folder_or_a_redis_prefix_of_the_location(tmp_path):
    assert aiospark.Journal(str(tmp_path), version=2).store.location == str(tmp_path / "v=2")
    assert aiospark.Journal(str(tmp_path)).store.location == str(tmp_path)
    s3 = aiospark.Journal("s3://bucket/j?region=eu-west-1", version="2026-11").store.location
    assert s3 == "s3://bucket/j/v=2026-11?region=eu-west-1"
    assert aiospark.Journal("redis://127.0.0.1:6379/0?prefix=p", version="b").store.prefix == "p:v=b"
    assert aiospark.Journal("redis://127.0.0.1:6379/0", version=3).store.prefix == "aiospark:journal:v=3"
    assert "version='3'" in repr(aiospark.Journal("redis://127.0.0.1:6379/0", version=3))


@pytest.mark.parametrize("bad, error", [("", ValueError), ("a/b", ValueError), ("x" * 65, ValueError),
                                        (True, TypeError), (1.5, TypeError), (["1"], TypeError)])
def test_a_bad_version_is_refused_at_definition(tmp_path, bad, error):
    with pytest.raises(error, match=r"Journal\(version=\.\.\.\)"):
        aiospark.Journal(str(tmp_path), version=bad)
