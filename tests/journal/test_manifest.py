"""The manifest's question (journal/manifest.py): the declared schema exactly, NOT NULLs and names."""
from __future__ import annotations

import dataclasses

from aiospark.journal import Manifest


async def fn(row):
    return row


def manifest(exact: str | None) -> Manifest:
    return Manifest.of("ordered_wait/unordered_wait", fn, "struct<id:bigint,v:string>", ["id"], ["bigint"],
                       exact_schema=exact)


def test_a_nullability_change_is_named_and_a_journal_from_before_it_keeps_its_outcomes():
    nullable, not_null = manifest("`id` bigint, `v` string"), manifest("`id` bigint NOT NULL, `v` string")
    (diff,) = not_null.differences(nullable)
    assert "NOT NULL" in diff and "(journal)" in diff, diff
    assert nullable.differences(nullable) == []
    before = dataclasses.replace(nullable, exact_schema=None)  # written by a release that did not record it
    assert Manifest.from_json(before.to_json()).exact_schema is None
    assert not_null.differences(Manifest.from_json(before.to_json())) == []
    assert before.digest == nullable.digest == not_null.digest, "the outcomes stay where they are"


def test_a_type_change_is_named_once():
    other = dataclasses.replace(manifest("`id` int"), output_schema="struct<id:int,v:string>")
    diff = other.differences(manifest("`id` bigint"))
    assert len(diff) == 1 and "output schema" in diff[0], diff
