"""The garbage-collector policy of the worker loop: a raised gen-0 threshold while partitions run."""
from __future__ import annotations

import asyncio
import gc

import pytest

from aiospark import AsyncWaitOperator
from aiospark.runtime import run_partition
from aiospark.runtime.gc_policy import DEFAULT_THRESHOLD, ENV, GcPolicy, threshold_from_env
from aiospark.runtime.worker_loop import WorkerLoop


@pytest.fixture
def default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def test_raised_while_active_and_restored_after_the_last_exit(default_thresholds):
    policy = GcPolicy(50_000)
    policy.enter()
    assert gc.get_threshold() == (50_000, 10, 10)
    policy.enter()  # a second partition on the same worker
    policy.exit()
    assert gc.get_threshold() == (50_000, 10, 10)
    policy.exit()
    assert gc.get_threshold() == (700, 10, 10)
    policy.exit()  # unbalanced exit: ignored
    assert gc.get_threshold() == (700, 10, 10) and policy.active == 0


def test_leaves_alone_a_threshold_already_higher_or_a_disabled_collector(default_thresholds):
    gc.set_threshold(100_000, 5, 5)
    policy = GcPolicy(50_000)
    policy.enter()
    assert gc.get_threshold() == (100_000, 5, 5)
    policy.exit()
    assert gc.get_threshold() == (100_000, 5, 5)

    gc.set_threshold(700, 10, 10)
    gc.disable()
    try:
        policy.enter()
        assert gc.get_threshold() == (700, 10, 10)
        policy.exit()
    finally:
        gc.enable()


def test_a_change_made_by_someone_else_meanwhile_is_kept(default_thresholds):
    policy = GcPolicy(50_000)
    policy.enter()
    gc.set_threshold(2_000, 10, 10)  # e.g. the user's own code
    policy.exit()
    assert gc.get_threshold() == (2_000, 10, 10)


def test_zero_leaves_the_collector_alone(default_thresholds):
    policy = GcPolicy(0)
    policy.enter()
    assert gc.get_threshold() == (700, 10, 10)
    policy.exit()


@pytest.mark.parametrize("raw, expected", [("", DEFAULT_THRESHOLD), ("0", 0), (" 20000 ", 20_000)])
def test_threshold_from_env(monkeypatch, raw, expected):
    monkeypatch.setenv(ENV, raw)
    assert threshold_from_env() == expected


@pytest.mark.parametrize("raw", ["-1", "lots", "1e5"])
def test_bad_env_value_says_what_to_change(monkeypatch, raw):
    monkeypatch.setenv(ENV, raw)
    with pytest.raises(ValueError, match=f"{ENV} must be an int >= 0"):
        threshold_from_env()


def test_in_force_exactly_while_a_partition_runs(default_thresholds, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    wl = WorkerLoop()
    seen = []

    async def probe(x):
        await asyncio.sleep(0)
        seen.append(gc.get_threshold()[0])
        return x

    async def make_operator(output):
        return AsyncWaitOperator(probe, output, capacity=4, manage_lifecycle=False, values=True)

    try:
        out = [v for batch in run_partition(iter([[1, 2, 3]]), make_operator, capacity=4, loop=wl) for v in batch]
        assert out == [1, 2, 3]
        assert seen == [DEFAULT_THRESHOLD] * 3
        assert gc.get_threshold() == (700, 10, 10) and wl.gc.active == 0
    finally:
        wl.shutdown()
