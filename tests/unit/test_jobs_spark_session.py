"""``jobs.spark_session``'s choice of Spark's idle Python worker pool size, without Spark."""

from __future__ import annotations

import os

import pytest

from jobs.spark_session import idle_worker_pool


@pytest.mark.parametrize(("master", "executor_cores", "expected"), [
    ("local[2]", None, "2"),
    ("local[8]", None, "8"),
    ("local[3, 2]", None, "3"),  # local[N, maxFailures]
    ("local", None, "2"),        # one slot, but never below 2
    ("local[*]", None, str(max(2, os.cpu_count() or 1))),
    ("spark://10.0.0.5:7077", "6", "6"),
    ("yarn", None, None),        # unknown: Spark's unbounded default stays
    ("yarn", "not-a-number", None),
])
def test_the_pool_is_the_task_slots_of_an_executor(master: str, executor_cores: str | None,
                                                   expected: str | None) -> None:
    assert idle_worker_pool(master, executor_cores) == expected
