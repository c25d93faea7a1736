"""Plain asyncio inside a call, through every entry point (``run`` is parametrized over them)."""
from __future__ import annotations

from . import checks_asyncio as checks


def test_current_task_is_a_real_task(run, config):
    outputs = run(checks.current_task, config)
    assert outputs == [checks.EXPECTED_CURRENT_TASK] * len(outputs)


def test_timeouts_and_task_groups(run, config):
    outputs = run(checks.timeouts_and_groups, config)
    assert outputs == [checks.EXPECTED_TIMEOUTS] * len(outputs)


def test_threads_executors_and_shield(run, config):
    outputs = run(checks.threads_and_shield, config)
    assert outputs == [checks.EXPECTED_THREADS] * len(outputs)


def test_event_queue_gather_semaphore(run, config):
    outputs = run(checks.primitives, config)
    assert outputs == [checks.EXPECTED_PRIMITIVES] * len(outputs)


def test_context_variables_do_not_leak_between_calls(run, config):
    # Many rows, few in flight: calls overlap on the loop AND follow one another on it (and, for
    # Spark, later tasks reuse the worker's loop), so a context shared between calls would show.
    outputs = run(checks.context_isolation, config, rows=40, capacity=3)
    assert outputs == ["before=None after=own"] * 40
