"""Warming Spark's Python workers while a replication query starts (``jobs/replicate.py``, ``jobs/run_all.py``).

A query's first batch waits for Spark to start Python processes one after another: data source creation,
the source's driver-side runner, a daemon and a worker for read planning
(``pyspark.sql.worker.plan_data_source_read``), one for write planning (``write_into_data_source``), then
the task daemon (``spark.python.daemon.module``, ``connectors.replication.worker_daemon``) and its workers.
Spark keeps a daemon per worker module for the application's life. ``start_worker_warmup`` runs one Python UDF
task on a thread of its own while the query itself starts: it starts the task daemon (~0.45 s: it imports
the replication modules before it forks) before the query's first tasks need it.

Measured with benchmarks/replicator.py (d), session up -> first message, median of 3 launches: 4.12-4.16 s
without, 3.1-3.3 s with (the machine's 2 cores shared by everything).

Planning is not warmed. A read-planning warm-up (a batch read of a one-row Python data source) ran here
until 2026-11-24, but ``queryExecution().executedPlan()`` does not call the read planner (Spark plans a
Python scan's partitions when the RDD is built), so it only added a data source creation and JVM planning
on the busy cores: (d) 3.35 s (3.23-3.60) with it, 3.14 s (3.06-3.29) without, back to back, 5 launches each.
With ``toRdd()`` it does reach the planner, but ~1.7 s after the session is up (its JVM planning competes
with the query's), about when the query needs a planner worker itself: when the warm-up's worker is still
busy the query's call forks another one that imports everything again (3.57 s, 3.29-3.69). A
write-planning warm-up (an empty batch write) also runs a task and a commit process: 3.4-4.0 s in single
launches, and 3.46 s (3.14-3.73) against 3.61 s (3.50-3.68) in an earlier back-to-back comparison.

Driver only; the warm-up computes one row, writes nothing, and a failed warm-up is logged and changes nothing
but the start-up time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

WARMUPS = ("tasks",)
"""What ``start_worker_warmup`` warms, one thread each (see the module docstring)."""
JOIN_TIMEOUT_S = 10.0
"""How long ``join_worker_warmup`` waits for a warm-up still running (they take ~1-2 s)."""


def _identity(value: Any) -> Any:
    return value


def _warm_up(spark: Any, warmup: str) -> None:
    try:
        # this thread's JVM twin has no active session, which the DataFrame below needs
        type(spark)._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
        # a Python task that needs no planner worker (and no pandas, unlike mapInArrow)
        from pyspark.sql.functions import udf

        spark.range(1, numPartitions=1).select(udf(_identity, "long", useArrow=False)("id")).collect()
    except Exception as exc:  # noqa: BLE001 - an optimisation only: the query starts the workers itself
        log.info("Python worker warm-up (%s) did not run (start-up takes longer, nothing else changes): %s",
                 warmup, exc)
    else:
        log.debug("Python workers warmed up (%s)", warmup)


def start_worker_warmup(spark: Any) -> list[threading.Thread]:
    """Start each of ``WARMUPS`` on a daemon thread; call right after the session is up, before the queries
    start, and ``join_worker_warmup`` before stopping Spark."""
    threads = [threading.Thread(target=_warm_up, args=(spark, warmup), name=f"python-worker-warmup-{warmup}",
                                daemon=True) for warmup in WARMUPS]
    for thread in threads:
        thread.start()
    return threads


def join_worker_warmup(threads: Sequence[threading.Thread]) -> None:
    """Wait (``JOIN_TIMEOUT_S`` at most each) for warm-ups still running, so that stopping Spark does not
    cut one short into a logged error."""
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
