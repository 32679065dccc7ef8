"""Warming Spark's Python workers while a replication query starts (``jobs/replicate.py``, ``jobs/run_all.py``).

A query's first batch waits for Spark to start Python processes one after another: data source creation,
the source's driver-side runner, a daemon and a worker for read planning
(``pyspark.sql.worker.plan_data_source_read``), one for write planning (``write_into_data_source``), then
the task daemon (``spark.python.daemon.module``, ``connectors.replication.worker_daemon``) and its workers.
Spark keeps a daemon per worker module for the application's life and returns each worker to an idle pool
after its call (``spark.python.worker.reuse``, the default), whatever data source or UDF made it; the next
call of the same module takes it. ``start_worker_warmup`` starts, on threads of their own, while the query
itself starts:

* ``read``: the planning of a batch read of ``WarmupDataSource``, whose ``reader`` imports this package's
  reader, so the query's read planning finds an idle worker with it imported;
* ``tasks``: one Python UDF task, which starts the task daemon (~0.45 s: it imports the replication
  modules before it forks) before the query's first tasks need it.

Measured with benchmarks/replicator.py (d), session up -> first message, median of 3 launches: 4.12-4.16 s
without, 3.1-3.3 s with (the machine's 2 cores shared by everything). Write planning is not warmed: a
batch write reaches its planning ~2.5 s after the session is up, about when the query needs it; with it,
(d) was 3.46 s (3.14-3.73) against 3.61 s (3.50-3.68) without, back to back on a busy machine: within the
noise, not worth a third thread competing for the same two cores.

Driver only; the warm-up reads one row, writes nothing, and a failed warm-up is logged and changes nothing
but the start-up time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

WARMUP_SOURCE_NAME = "rocketmq_warmup"
WARMUPS = ("read", "tasks")
"""What ``start_worker_warmup`` warms, one thread each (see the module docstring)."""
JOIN_TIMEOUT_S = 10.0
"""How long ``join_worker_warmup`` waits for a warm-up still running (they take ~1-2 s)."""


class _OneRowReader(DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield (0,)


class WarmupDataSource(DataSource):
    """``format("rocketmq_warmup")``: one partition of one row, read only."""

    @classmethod
    def name(cls) -> str:
        return WARMUP_SOURCE_NAME

    def schema(self) -> str:
        return "n int"

    def reader(self, schema: StructType) -> DataSourceReader:
        # imported here, in the read planner worker, as the query's own streamReader call imports it;
        # data source creation (schema) needs neither this nor anything else of the package
        from connectors.replication import reader  # noqa: F401

        return _OneRowReader()


def _identity(value: Any) -> Any:
    return value


def _warm_up(spark: Any, warmup: str) -> None:
    try:
        # this thread's JVM twin has no active session, and the data source is looked up in it
        type(spark)._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
        if warmup == "read":
            # planning only (the read planner runs when the scan's partitions are planned): no task takes
            # a slot the query's first tasks need
            spark.read.format(WARMUP_SOURCE_NAME).load()._jdf.queryExecution().executedPlan()
        else:
            # a Python task that needs no planner worker (and no pandas, unlike mapInArrow)
            from pyspark.sql.functions import udf

            spark.range(1, numPartitions=1).select(udf(_identity, "long", useArrow=False)("id")).collect()
    except Exception as exc:  # noqa: BLE001 - an optimisation only: the query starts the workers itself
        log.info("Python worker warm-up (%s) did not run (start-up takes longer, nothing else changes): %s",
                 warmup, exc)
    else:
        log.debug("Python workers warmed up (%s)", warmup)


def start_worker_warmup(spark: Any) -> list[threading.Thread]:
    """Register ``WarmupDataSource`` and start each of ``WARMUPS`` on a daemon thread; call right after the
    session is up, before the queries start, and ``join_worker_warmup`` before stopping Spark."""
    spark.dataSource.register(WarmupDataSource)
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
