"""Spark's Python worker daemon for the replicate job's tasks (``spark.python.daemon.module``, set by
``jobs.spark_session.build_spark``): pyspark's own daemon, with the modules every replication task imports loaded
once before it forks the task workers.

pyspark's daemon forks one worker per task slot and imports the worker module only after the fork, so each
new task worker of a query's first batch imports pyspark.worker, pyarrow, the Python data source machinery
and this package by itself: four processes (a source read and a sink write per task, two tasks) importing the
same modules at once on the executor's cores. Spark starts this daemon once per executor, and the forked
workers inherit its modules, so the first batch's tasks start without importing (their workers' "init" in
spark.log's "Times" lines; ``benchmarks/replicator.py`` (d), session up -> first message; figures in
``benchmarks/MEASUREMENTS.md``).

Nothing imported here may start a thread that holds state a forked child would need (pyspark.daemon imports
the worker module after the fork for that reason: a child has only the forking thread). Our modules define
things only; pyarrow's import starts jemalloc's background purge threads (``jemalloc_bg_thd`` in
/proc/<pid>/task), which jemalloc's own fork handlers make safe: it holds its locks across the fork and the
child runs without the purge thread.
"""

from __future__ import annotations

import pyspark.worker  # noqa: F401 - the task workers' main module
from pyspark.daemon import manager
from pyspark.sql.worker import plan_data_source_read, write_into_data_source  # noqa: F401 - the pickled functions

from connectors.replication import partition_writer, reader, writer  # noqa: F401 - the source's and sink's tasks

if __name__ == "__main__":
    manager()
