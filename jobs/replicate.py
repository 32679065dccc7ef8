"""Run the replication links of a replicator config as Spark Structured Streaming queries.

    spark-submit jobs/replicate.py --config conf/replicator.yaml [--link NAME ...] [--available-now]
    python jobs/replicate.py --config conf/replicator.yaml          (local[*] when no master is set)

One Spark application, one streaming query per link (queryName = link name, checkpoint = the link's
``checkpoint_location``, trigger = its ``trigger_interval``). The source and sink read everything else
from the config through their ``config`` + ``link`` options: topic selection by the link's
TopicMapper (regex / whole-cluster links re-list the source topics on every trigger), tag filter,
admission control, failure policy and the link's Delta tables. A StreamingQueryListener logs every
batch's progress; SIGTERM / SIGINT stop the queries gracefully (the running batch finishes or is
re-run from the checkpoint on the next start: at-least-once). The Prometheus endpoint of
``jobs.metrics`` serves the links' replication metrics (``metrics.port``, ``--metrics-port``). Exit
code: 0 after a clean stop or when every AvailableNow query finished, 1 when a query failed, 2 on a
configuration error (a metrics port in use included).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/replicate.py` / `python jobs/replicate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import ReplicatorConfig  # noqa: E402
from connectors.core.driver_log import LOG_DIR_ENV, LOG_LEVEL_ENV  # noqa: E402
from connectors.core.errors import ReplicatorError  # noqa: E402
from connectors.core.job_stop import STOP_MARKER_ENV  # noqa: E402
from connectors.replication.failure_policy import FailurePolicyRunner  # noqa: E402
from connectors.replication.tables import LinkTables  # noqa: E402
from connectors.replication.warmup import join_worker_warmup, start_worker_warmup  # noqa: E402
from jobs import job_logging  # noqa: E402
from jobs.progress import make_progress_listener  # noqa: E402
from jobs.query_supervisor import (  # noqa: E402
    exit_job,
    prepare_job,
    quiet_accumulator_server,
    release_arrow_threads,
    stop_on_signals,
    supervise,
)
from jobs.worker_python import bytecode_worker_environment  # noqa: E402

log = logging.getLogger("jobs.replicate")
JOB_ENVIRONMENT = (LOG_DIR_ENV, LOG_LEVEL_ENV, STOP_MARKER_ENV)
"""Variables the job sets for Spark's Python workers (``build_spark`` passes them on under spark-submit)."""
SESSION_UP = "Spark session"
"""The start of the job's log line once the Spark session is up (``benchmarks/replicator.py`` times from it)."""


def parse_args(argv: list[str] | None = None, *, prog: str = "replicate", description: str = "",
               available_now: str = "Trigger.AvailableNow: replicate what is there now, then stop",
               ) -> argparse.Namespace:
    """The options of ``jobs/replicate.py``, shared by ``jobs/run_all.py`` (its ``prog`` and help texts)."""
    parser = argparse.ArgumentParser(prog=prog, description=description or __doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", action="append", default=[],
                        help="run only this link (repeatable); default: every link")
    parser.add_argument("--available-now", action="store_true", help=available_now)
    parser.add_argument("--log-level", default="INFO",
                        help="console level (DEBUG also shows tracebacks); the log files keep INFO and up")
    parser.add_argument("--log-dir", default="run/logs",
                        help="replicator.log (Python, with tracebacks) and spark.log (the JVM) go here")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="Prometheus port (default: metrics.port of the config; 0 = no endpoint)")
    return parser.parse_args(argv)


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
    # The task workers fork from a daemon that has the replication modules imported already
    # (connectors/replication/worker_daemon.py): a query's first tasks do not each import them.
    "spark.python.daemon.module": "connectors.replication.worker_daemon",
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
                settings: dict[str, str] | None = None, checkpoint_locations: Sequence[str] = (),
                log_dir: Path | None = None) -> Any:
    """The SparkSession; ``master`` if given, else ``local[*]`` unless spark-submit / SPARK_MASTER /
    spark.master chose one. ``settings`` are Spark settings applied last (they win over the defaults here);
    ``checkpoint_locations``, the queries' checkpoints, choose ``LOCAL_CHECKPOINT_SETTINGS`` when all are
    local; ``log_dir`` (``jobs.job_logging.setup``'s) sends the driver JVM's log4j output to its spark.log
    when this process launches the JVM (under spark-submit, pass the same -D options yourself)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit: its JVM already runs with --master / --conf as system properties, but
        # SparkConf() reads them only once the gateway is attached; without this it is empty and the
        # local[*] default below would silently override `spark-submit --master spark://...`.
        SparkContext._ensure_initialized()
    conf = SparkConf()
    options = {"spark.app.name": app_name, "spark.ui.showConsoleProgress": "false"}
    if master is not None:
        options["spark.master"] = master
    elif not conf.contains("spark.master") and not os.environ.get("SPARK_MASTER"):
        options["spark.master"] = "local[*]"
    chosen = master or conf.get("spark.master", os.environ.get("SPARK_MASTER", "local[*]"))
    if chosen.startswith("local") or "127.0.0.1" in chosen:
        # A local (or loopback standalone) run stays on loopback: otherwise Spark binds the driver to
        # the host's first non-loopback interface. Real cluster deployments choose their own addresses.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if not conf.contains("spark.driver.host"):
            options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    tuned = dict(TUNED_SETTINGS)
    if log_dir is not None:
        java_options = "spark.driver.extraJavaOptions"
        tuned[java_options] = f"{tuned[java_options]} {job_logging.spark_java_options(log_dir)}"
    if checkpoint_locations and all(is_local_path(c) for c in checkpoint_locations):
        tuned.update(LOCAL_CHECKPOINT_SETTINGS)
    options.update({key: value for key, value in tuned.items() if not conf.contains(key)})
    options.update(settings or {})
    # The job's environment for Spark's Python workers (log dir and level, stop marker): inherited when this
    # process launches the JVM, but under spark-submit the JVM started first, so it goes as executorEnv.
    for name in JOB_ENVIRONMENT:
        if name in os.environ:
            options.setdefault(f"spark.executorEnv.{name}", os.environ[name])
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        os.environ.update(bytecode_worker_environment(chosen, launching_jvm=SparkContext._gateway is None))
        _launch_jvm_in_own_session(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from connectors.replication.data_source import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    return spark


def _launch_jvm_in_own_session(options: dict[str, str]) -> None:
    """Launch the driver JVM as SparkSession would (spark-submit with ``options`` as --conf), but in a
    session and process group of its own. A SIGTERM or Ctrl-C sent to the job's whole process group
    (systemd's default, `timeout`, a terminal) then reaches only this process, which stops the queries and
    then Spark in order; otherwise the JVM's shutdown hook stops Spark under the running queries and the
    job ends in Py4J tracebacks. The JVM still dies with this process: pyspark's gateway exits when its
    stdin, a pipe from here, closes. Does nothing when a JVM is already attached."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway)


def start_link(spark: Any, config_path: str, config: ReplicatorConfig, name: str, *,
               available_now: bool = False, row_format: str = "ranges", create_topics_like_source: bool = False) -> Any:
    """Start one link's query; the reader and writer resolve the link from ``config_path``.
    ``row_format`` is the source's rowFormat (``ranges`` unless a benchmark compares);
    ``create_topics_like_source``: the reader's ``createTopicsLikeSource`` (``jobs/run_all.py`` when it runs
    the link's config sync)."""
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
             .option("createTopicsLikeSource", str(create_topics_like_source).lower())
             # the sink's commit mirrors each batch to the source group (connectors/replication/group_mirror.py);
             # the reader's own mirror trails by a batch and could move the group back
             .option("commitOffsetsToSource", "false")
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
    job = prepare_job(args)
    if isinstance(job, int):
        return job
    config, names, log_dir = job.config, job.names, job.log_dir
    stop = stop_on_signals()
    launched = time.monotonic()
    spark = build_spark(checkpoint_locations=[config.link(name).checkpoint_location for name in names],
                        log_dir=log_dir)
    # benchmarks/replicator.py (d) reads this line's time: "session up -> first message" starts here
    log.info("%s up in %.1f s", SESSION_UP, time.monotonic() - launched)
    warmup = start_worker_warmup(spark)  # overlaps the queries' start (connectors/replication/warmup.py)
    spark.streams.addListener(make_progress_listener())
    quiet_accumulator_server(spark)
    failures: dict[str, str] = {}
    queries: list[Any] = []
    started_ms = int(time.time() * 1000)
    try:
        queries = [start_link(spark, args.config, config, name, available_now=args.available_now)
                   for name in names]
        failures = supervise(spark, queries, stop, log_dir)
    except ReplicatorError as exc:
        log.error("error: %s", exc)
        return 2
    finally:
        job.stop()
        join_worker_warmup(warmup)
        spark.stop()
    for q in queries:
        log_summary(args.config, config, q, started_ms, failed=q.name in failures)
    release_arrow_threads()
    return 1 if failures else 0


def log_summary(config_path: str, config: ReplicatorConfig, query: Any, started_ms: int, *, failed: bool) -> None:
    """The run's totals for one link, from the Delta metrics its batches committed since ``started_ms``."""
    link = config.link(query.name)
    try:
        total = LinkTables.for_link(link).totals(str(query.id), since_ms=started_ms)
    except ReplicatorError as exc:
        log.warning("link %s: no summary (%s)", link.name, exc)
        return
    line = (f"link {link.name} {'stopped after an error' if failed else 'done'}: {total['messages']} messages "
            f"({total['bytes']} bytes) replicated in {total['batches']} batch(es), {total['skipped_loop']} skipped "
            f"by the loop guard, {total['failed']} failed")
    if total["failed"]:
        log.warning("%s (recorded in the failures table; replay them with: python -m jobs.replay_failures "
                    "--config %s --link %s)", line, config_path, link.name)
    else:
        log.info("%s", line)


if __name__ == "__main__":
    exit_job(run())
