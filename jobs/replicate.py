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
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/replicate.py` / `python jobs/replicate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import ReplicatorConfig, load_replicator_config  # noqa: E402
from connectors.core.driver_log import FILE_ONLY  # noqa: E402
from connectors.core.errors import ReplicatorError  # noqa: E402
from connectors.replication.failure_policy import FailurePolicyRunner  # noqa: E402
from connectors.replication.tables import LinkTables  # noqa: E402
from jobs import job_logging  # noqa: E402
from jobs.metrics import MetricsEndpoint, metrics_settings  # noqa: E402
from jobs.progress import make_progress_listener  # noqa: E402

log = logging.getLogger("jobs.replicate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="replicate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", action="append", default=[],
                        help="run only this link (repeatable); default: every link")
    parser.add_argument("--available-now", action="store_true",
                        help="Trigger.AvailableNow: replicate what is there now, then stop")
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
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Started by spark-submit: its JVM already runs with --master / --conf as system properties, but
        # SparkConf() reads them only once the gateway is attached; without this it is empty and the
        # local[*] default below would silently override `spark-submit --master spark://...`.
        from pyspark import SparkContext

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
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
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
    try:
        log_dir = job_logging.setup(args.log_dir, args.log_level)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    endpoint: MetricsEndpoint | None = None
    try:
        config = load_replicator_config(args.config)
        names = args.link or [link.name for link in config.links]
        for name in names:
            config.link(name)
        # bound before Spark starts: a port in use is one error line and exit 2, not a failed query
        metrics = metrics_settings(config.metrics, args.metrics_port)
        if metrics.port:
            endpoint = MetricsEndpoint(metrics, [config.link(name) for name in names])
            endpoint.start()
    except ReplicatorError as exc:
        log.error("error: %s", exc)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("%s: stopping the queries (the running batch finishes or is re-run on the next start)",
                 signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from pyspark.errors import StreamingQueryException

    spark = build_spark(checkpoint_locations=[config.link(name).checkpoint_location for name in names],
                        log_dir=log_dir)
    spark.streams.addListener(make_progress_listener())
    _quiet_accumulator_server(spark)
    failures: dict[str, str] = {}
    queries: list[Any] = []
    started_ms = int(time.time() * 1000)
    try:
        queries = [start_link(spark, args.config, config, name, available_now=args.available_now)
                   for name in names]
        while not stop.is_set() and any(q.isActive for q in queries):
            try:
                spark.streams.awaitAnyTermination(1)
            except StreamingQueryException:
                pass  # the failed query is reported below, once
            spark.streams.resetTerminated()
            for q in queries:
                if not q.isActive and q.exception() is not None and q.name not in failures:
                    _report_failure(q, log_dir, failures)
                    stop.set()
        for q in queries:
            if q.isActive:
                q.stop()
            if q.exception() is not None and q.name not in failures:
                _report_failure(q, log_dir, failures)
    except ReplicatorError as exc:
        log.error("error: %s", exc)
        return 2
    finally:
        if endpoint is not None:
            endpoint.stop()
        spark.stop()
    for q in queries:
        _log_summary(args.config, config, q, started_ms, failed=q.name in failures)
    # Arrow scanners left by the Delta reads above may keep native threads that abort the process at
    # interpreter teardown ("terminate called without an active exception", exit 134; apache/arrow#34314):
    # collect them now, while Arrow is still alive.
    gc.collect()
    return 1 if failures else 0


def _quiet_accumulator_server(spark: Any) -> None:
    """When a query or Spark stops, the JVM closes its connection to pyspark's accumulator server, whose
    handler thread may then read EOF, and socketserver prints an EOFError traceback on the console. That
    is the expected end of the connection (no update is lost: the sender has stopped): log it at DEBUG;
    any other error of that server as one WARNING line (its traceback goes to the log file)."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(_request: Any, address: Any) -> None:
        if isinstance(sys.exc_info()[1], EOFError):
            log.debug("accumulator connection from %s closed", address, exc_info=True)
        else:
            log.warning("pyspark's accumulator server failed on a connection from %s", address, exc_info=True)

    server.handle_error = handle_error


def _report_failure(query: Any, log_dir: Path, failures: dict[str, str]) -> None:
    """One console line for a failed query; its whole exception (Python and JVM stacks) in the log file."""
    error = query.exception()
    failures[query.name] = job_logging.failure_line(query.name, error, log_dir)
    log.error("%s", failures[query.name])
    log.info("link %s failed; the query's exception:\n%s", query.name, error, extra=FILE_ONLY)


def _log_summary(config_path: str, config: ReplicatorConfig, query: Any, started_ms: int, *, failed: bool) -> None:
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
    sys.exit(run())
