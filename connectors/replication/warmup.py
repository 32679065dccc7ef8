"""Warming Spark's Python workers while a replication query starts (``jobs/replicate.py``, ``jobs/run_all.py``).

A query's first batch waits for Spark to start Python processes one after another: data source creation,
the source's driver-side runner, a daemon and a worker for read planning
(``pyspark.sql.worker.plan_data_source_read``), one for write planning (``write_into_data_source``), then
the task daemon (``spark.python.daemon.module``, ``connectors.replication.worker_daemon``) and its workers.
Spark keeps a daemon per worker module for the application's life. ``start_worker_warmup`` runs one Python UDF
task on a thread of its own while the query itself starts: it starts the task daemon (which imports the
replication modules before it forks) before the query's first tasks need it. ``benchmarks/replicator.py`` (d),
session up -> first message, measures the gain (figures: ``benchmarks/MEASUREMENTS.md``).

Planning is not warmed. ``queryExecution().executedPlan()`` does not call the read planner (Spark plans a
Python scan's partitions when the RDD is built), so a read-planning warm-up only added a data source creation
and JVM planning on the busy cores; with ``toRdd()`` it reaches the planner, but about when the query needs a
planner worker itself, and a query call that finds the warm-up's worker busy forks another one that imports
everything again. A write-planning warm-up also runs a task and a commit process. Each was slower by (d).

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
