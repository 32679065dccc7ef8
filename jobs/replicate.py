"""Run the replication links of a replicator config as Spark Structured Streaming queries.

    spark-submit jobs/replicate.py --config conf/replicator.yaml [--link NAME ...] [--available-now]
    python jobs/replicate.py --config conf/replicator.yaml          (local[*] when no master is set)

One Spark application, one streaming query per link (queryName = link name, checkpoint = the link's
``checkpoint_location``, trigger = its ``trigger_interval``). The source and sink read everything else
from the config through their ``config`` + ``link`` options: topic selection by the link's
TopicMapper (regex / whole-cluster links re-list the source topics on every trigger), tag filter,
admission control, failure policy and the link's Delta tables. A StreamingQueryListener logs every
batch's progress; SIGTERM / SIGINT stop the queries gracefully (the running batch finishes or is
re-run from the checkpoint on the next start: at-least-once). Exit code: 0 after a clean stop or when
every AvailableNow query finished, 1 when a query failed, 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/replicate.py` / `python jobs/replicate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import ReplicatorConfig, load_replicator_config  # noqa: E402
from connectors.core.driver_log import LOG_FORMAT  # noqa: E402
from connectors.core.errors import ReplicatorError  # noqa: E402
from connectors.replication.failure_policy import FailurePolicyRunner  # noqa: E402

log = logging.getLogger("jobs.replicate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="replicate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", action="append", default=[],
                        help="run only this link (repeatable); default: every link")
    parser.add_argument("--available-now", action="store_true",
                        help="Trigger.AvailableNow: replicate what is there now, then stop")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def make_progress_listener() -> Any:
    """A StreamingQueryListener that logs one line per batch (and query start / end)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressLogger(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's API
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            p = event.progress
            source = p.sources[0] if p.sources else None
            log.info("query %s batch %d: %d rows, %.1f rows/s in, %.1f rows/s processed, durations %s%s",
                     p.name, p.batchId, p.numInputRows, p.inputRowsPerSecond or 0.0,
                     p.processedRowsPerSecond or 0.0, dict(p.durationMs),
                     f", latest {source.latestOffset}" if source is not None and source.latestOffset else "")

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            if event.exception:
                log.error("query %s terminated with an error: %s", event.id, event.exception)
            else:
                log.info("query %s terminated", event.id)

    return ProgressLogger()


TUNED_SETTINGS = {
    # Rows per Arrow batch between the JVM and the sink's Python worker. The sink waits for a whole
    # batch before sending, so a large one (the default is 10000 rows) serialises reading and sending.
    # With rowFormat=raw (one row per pull of up to 256 messages) 1 row per batch lets the sink send each
    # pull while the next is read (256 rows: 15.1k msg/s, 1 row: 18.1k msg/s on local[2],
    # benchmarks/replicator.py --row-format raw); the job's rowFormat=ranges sends a handful of rows per
    # batch, which this does not slow. Only Arrow transfers are affected; the replicator runs no other.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
    # The driver JVM only orchestrates: with rowFormat=ranges no message passes through it. The C2 JIT
    # kept ~0.3 of a core busy compiling for minutes into a run (every micro-batch plans and generates
    # code anew), C1 alone settles within seconds: during benchmarks/replicator.py (c) the JVM's threads
    # used ~0.13 instead of ~0.42 cores (/proc/<pid>/task/*/stat over 15 s). Takes effect when this
    # process launches the JVM (python jobs/replicate.py); under spark-submit pass --driver-java-options.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}
"""Spark settings ``build_spark`` applies unless spark-submit / spark-defaults already set them."""

LOCAL_CHECKPOINT_SETTINGS = {
    # Hadoop's local file system without its native library forks `readlink` and `chmod` for every
    # checkpoint file Spark writes through FileContext (~5 process spawns per micro-batch, measured with
    # strace); the FileSystem-based manager does without the readlink ones: walCommit + commitOffsets went
    # from ~175 to ~115 ms per batch. Its rename is as atomic as FileContext's on a local disk (and on
    # HDFS), which is why it is chosen only when every checkpoint is local.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}
"""Added to ``TUNED_SETTINGS`` when every checkpoint location is on the local file system."""


def is_local_path(location: str) -> bool:
    """True for a plain path or a ``file:`` URI."""
    return location.startswith("file:") or "://" not in location


def build_spark(app_name: str = "rocketmq-replicator", master: str | None = None,
                settings: dict[str, str] | None = None, checkpoint_locations: Sequence[str] = ()) -> Any:
    """The SparkSession; ``master`` if given, else ``local[*]`` unless spark-submit / SPARK_MASTER /
    spark.master chose one. ``settings`` are Spark settings applied last (they win over the defaults here);
    ``checkpoint_locations``, the queries' checkpoints, choose ``LOCAL_CHECKPOINT_SETTINGS`` when all are
    local."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit: its JVM already runs with --master / --conf as system properties, but
        # SparkConf() reads them only once the gateway is attached; without this it is empty and the
        # local[*] default below would silently override `spark-submit --master spark://...`.
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
    conf = SparkConf()
    if master is not None:
        builder = builder.master(master)
    elif not conf.contains("spark.master") and not os.environ.get("SPARK_MASTER"):
        builder = builder.master("local[*]")
    chosen = master or conf.get("spark.master", os.environ.get("SPARK_MASTER", "local[*]"))
    if chosen.startswith("local") or "127.0.0.1" in chosen:
        # A local (or loopback standalone) run stays on loopback: otherwise Spark binds the driver to
        # the host's first non-loopback interface. Real cluster deployments choose their own addresses.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if not conf.contains("spark.driver.host"):
            builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    tuned = dict(TUNED_SETTINGS)
    if checkpoint_locations and all(is_local_path(c) for c in checkpoint_locations):
        tuned.update(LOCAL_CHECKPOINT_SETTINGS)
    for key, value in tuned.items():
        if not conf.contains(key):
            builder = builder.config(key, value)
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from connectors.replication.data_source import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    return spark


def start_link(spark: Any, config_path: str, config: ReplicatorConfig, name: str, *,
               available_now: bool = False, row_format: str = "ranges") -> Any:
    """Start one link's query; the reader and writer resolve the link from ``config_path``.
    ``row_format`` is the source's rowFormat (``ranges`` unless a benchmark compares)."""
    link = config.link(name)
    FailurePolicyRunner(link)  # a failure hook that does not import fails now, before any data moves
    path = str(Path(config_path).resolve())
    # Relative paths of the config resolve against this process's directory, not the Python workers'.
    delta = str(Path(link.delta_location).resolve())
    checkpoint = str(Path(link.checkpoint_location).resolve())
    # rowFormat=ranges: the job transforms nothing between source and sink, so the messages need not
    # cross Spark at all: the source plans each batch's queue ranges, the sink's tasks pull them and send
    # as they pull (benchmarks/replicator.py has the numbers against raw pulls and per-message rows).
    frame = (spark.readStream.format("rocketmq").option("config", path).option("link", name)
             .option("deltaLocation", delta).option("startingOffsets", link.starting_offsets)
             .option("rowFormat", row_format)
             .option("maxPartitions", str(link.max_partitions or spark.sparkContext.defaultParallelism)).load())
    writer = (frame.writeStream.format("rocketmq").option("config", path).option("link", name)
              .option("deltaLocation", delta).option("checkpointLocation", checkpoint).queryName(name))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=link.spark_trigger)
    query = writer.start()
    log.info("link %s: %s -> %s, checkpoint %s, tables %s, trigger %s", name, link.source, link.target,
             link.checkpoint_location, link.tables_location, "AvailableNow" if available_now else link.spark_trigger)
    return query


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=LOG_FORMAT)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        config = load_replicator_config(args.config)
        names = args.link or [link.name for link in config.links]
        for name in names:
            config.link(name)
    except ReplicatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping the queries", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    spark = build_spark(checkpoint_locations=[config.link(name).checkpoint_location for name in names])
    spark.streams.addListener(make_progress_listener())
    failed = False
    try:
        queries = [start_link(spark, args.config, config, name, available_now=args.available_now)
                   for name in names]
        while not stop.is_set() and any(q.isActive for q in queries):
            spark.streams.awaitAnyTermination(1)
            spark.streams.resetTerminated()
            for q in queries:
                if not q.isActive and q.exception() is not None:
                    log.error("link %s failed: %s", q.name, q.exception())
                    failed = True
                    stop.set()
        for q in queries:
            if q.isActive:
                q.stop()
            if q.exception() is not None:
                failed = True
    except ReplicatorError as exc:
        log.error("%s", exc)
        return 2
    finally:
        spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run())
