"""The jobs' SparkSession: ``build_spark`` with the settings every replicator job runs with.

Used by every entry point through ``jobs.query_supervisor.run_job`` and by the benchmarks. ``build_spark``
chooses the master (spark-submit's, ``SPARK_MASTER``, else ``local[*]``), keeps local runs on loopback,
applies ``TUNED_SETTINGS`` (and ``LOCAL_CHECKPOINT_SETTINGS``) unless spark-submit or spark-defaults set
them, passes the job's environment to Spark's Python workers, and, when this process launches the driver
JVM, launches it in a session of its own with the bytecode worker fix (``jobs.worker_python``). A local job's
Python workers start forked from the job's fork server (``jobs.worker_zygote``), under spark-submit too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, cast

from connectors.core.driver_log import LOG_DIR_ENV, LOG_LEVEL_ENV, LOG_ROTATION_ENV
from connectors.core.job_stop import STOP_MARKER_ENV
from jobs import job_logging, jvm_archive, worker_zygote
from jobs.worker_python import bytecode_worker_environment, submitted_worker_settings

log = logging.getLogger(__name__)

JOB_ENVIRONMENT = (LOG_DIR_ENV, LOG_LEVEL_ENV, LOG_ROTATION_ENV, STOP_MARKER_ENV)
"""Variables the job sets for Spark's Python workers (``build_spark`` passes them on under spark-submit)."""
APP_NAME = "rocketmq-replicator"
"""The Spark application name of ``jobs/replicate.py`` and ``jobs/run_all.py``; the other jobs append theirs."""
SESSION_UP = "Spark session"
"""The start of the job's log line once the Spark session is up (``benchmarks/replicator.py`` times from it)."""


TUNED_SETTINGS = {
    # Rows per Arrow batch between the JVM and the sink's Python worker. The job's rowFormat=ranges rows
    # are a few dozen bytes of plan each (one per queue range) and the sink gathers a task's ranges before
    # pulling them concurrently, so one Arrow batch per row is pure overhead that grows with the ranges of a
    # batch (benchmarks/replicator.py --queue-scaling, figures in benchmarks/MEASUREMENTS.md): Spark's
    # default of 10000. rowFormat=raw (one row per pull) wants 1 row per batch, so the sink sends each pull
    # while the next is read: a raw-format comparison passes --conf spark.sql.execution.arrow.maxRecordsPerBatch=1.
    # Only Arrow transfers are affected; the replicator runs no other.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    # The driver JVM only orchestrates: with rowFormat=ranges no message passes through it. The C2 JIT
    # kept a good part of a core busy compiling for minutes into a run (every micro-batch plans and generates
    # code anew), C1 alone settles within seconds (the JVM's threads' CPU during benchmarks/replicator.py (c),
    # from /proc/<pid>/task/*/stat; figures in benchmarks/MEASUREMENTS.md). Takes effect when this
    # process launches the JVM (python jobs/replicate.py); under spark-submit pass --driver-java-options.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    # The task workers fork from a daemon that has the replication modules imported already
    # (connectors/replication/worker_daemon.py): a query's first tasks do not each import them.
    "spark.python.daemon.module": "connectors.replication.worker_daemon",
}
"""Spark settings ``build_spark`` applies unless spark-submit / spark-defaults already set them."""

LOCAL_CHECKPOINT_SETTINGS = {
    # Hadoop's local file system without its native library forks `readlink` and `chmod` for every
    # checkpoint file Spark writes through FileContext (several process spawns per micro-batch, seen with
    # strace); the FileSystem-based manager does without the readlink ones, which shortens walCommit +
    # commitOffsets of every batch (figures in benchmarks/MEASUREMENTS.md). Its rename is as atomic as
    # FileContext's on a local disk (and on
    # HDFS), which is why it is chosen only when every checkpoint is local.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
}
"""Added to ``TUNED_SETTINGS`` when every checkpoint location is on the local file system."""


IDLE_WORKER_POOL = "spark.python.factory.idleWorkerMaxPoolSize"
"""Spark keeps every Python worker it ever forked idle in a pool per worker kind (task workers, and on the
driver each data source planner and streaming runner kind), so a pool grows to the most calls that ever ran at
once and stays there: the queries of a job start together, so N queries left N idle workers of each planner
kind behind. ``idle_worker_pool`` caps each pool at what the tasks running at once hold: a task of the
replicator holds two Python workers (its data source read's and its write's), so twice the cores that run
tasks. A smaller cap evicts a task worker at every batch: its successor is forked and set up anew (~130 ms
before a batch's first message on this 2-core machine, and its clients reconnect). ``benchmarks/links.py``
measures the memory, ``benchmarks/wan.py`` the lag (figures in benchmarks/MEASUREMENTS.md)."""

WORKERS_PER_TASK = 2
"""Python workers one task of a replication query holds at once: the data source read's and the write's."""


def idle_worker_pool(master: str, executor_cores: str | None) -> str | None:
    """``IDLE_WORKER_POOL`` for a job on ``master``: ``WORKERS_PER_TASK`` per task slot, a local master's slots
    being ``local[N]`` (``local[*]``: this machine's cores), another's ``spark.executor.cores`` when set. None
    (Spark's unbounded default) when neither is known."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match:
        given = match.group(1)
        slots = 1 if given is None else (os.cpu_count() or 1) if given == "*" else int(given)
    elif executor_cores and executor_cores.strip().isdigit():
        slots = int(executor_cores)
    else:
        return None
    return str(WORKERS_PER_TASK * slots)


def is_local_path(location: str) -> bool:
    """True for a plain path or a ``file:`` URI."""
    return location.startswith("file:") or "://" not in location


def choose_master(master: str | None, configured: str | None, env_master: str | None) -> str:
    """The master a session runs on: ``master`` when given, else the one spark-submit or spark-defaults
    configured, else ``SPARK_MASTER`` (``env_master``), else ``local[*]``."""
    return master or configured or env_master or "local[*]"


def build_spark(app_name: str = APP_NAME, master: str | None = None,
                settings: dict[str, str] | None = None, checkpoint_locations: Sequence[str] = (),
                log_dir: Path | None = None, register: bool = True) -> Any:
    """The SparkSession, with the replication data source registered unless ``register`` is false (the caller then
    calls ``register_data_sources``); ``master`` if given, else ``local[*]`` unless spark-submit / SPARK_MASTER /
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
    configured = conf.get("spark.master") if conf.contains("spark.master") else None
    chosen = choose_master(master, configured, os.environ.get("SPARK_MASTER"))
    if chosen != configured:
        # Set explicitly: the JVM launched below reads neither SPARK_MASTER nor our choice otherwise (spark-submit
        # knows only MASTER), and a job told spark://... would run local[*] while believing otherwise.
        options["spark.master"] = chosen
    if chosen.startswith("local") or "127.0.0.1" in chosen:
        # A local (or loopback standalone) run stays on loopback: otherwise Spark binds the driver to
        # the host's first non-loopback interface. Real cluster deployments choose their own addresses.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if not conf.contains("spark.driver.host"):
            options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    tuned = dict(TUNED_SETTINGS)
    pool = idle_worker_pool(chosen, conf.get("spark.executor.cores", None))
    if pool is not None:
        tuned[IDLE_WORKER_POOL] = pool
    java_options = "spark.driver.extraJavaOptions"
    if log_dir is not None:
        tuned[java_options] = f"{tuned[java_options]} {job_logging.spark_java_options(log_dir)}"
    launching = "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None
    archive = ""
    if launching and not conf.contains(java_options):
        # the driver JVM this process launches maps Spark's classes from the class-data archive (built in the
        # background after the first launch when missing): about half the JVM's start-up
        archive = jvm_archive.java_options_for_launch(extra_class_path=conf.get("spark.driver.extraClassPath", ""))
        if archive:
            tuned[java_options] = f"{tuned[java_options]} {archive}"
    if checkpoint_locations and all(is_local_path(c) for c in checkpoint_locations):
        tuned.update(LOCAL_CHECKPOINT_SETTINGS)
    options.update({key: value for key, value in tuned.items() if not conf.contains(key)})
    options.update(settings or {})
    if archive not in options.get(java_options, ""):
        archive = ""  # the caller's settings replaced the driver's options: no archive to check for
    # The job's environment for Spark's Python workers (log dir and level, stop marker): inherited when this
    # process launches the JVM, but under spark-submit the JVM started first, so it goes as executorEnv.
    for name in JOB_ENVIRONMENT:
        if name in os.environ:
            options.setdefault(f"spark.executorEnv.{name}", os.environ[name])
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        workers = bytecode_worker_environment(chosen, launching_jvm=SparkContext._gateway is None)
        if workers:
            workers.update(worker_zygote.environment())  # the workers' imports done once, while the JVM starts
        os.environ.update(workers)
        _launch_jvm_in_own_session(options, log_dir)
    elif SparkContext._active_spark_context is None:
        # spark-submit started the JVM; the workers of the context about to be created are still routed so
        driver_env, worker_settings = submitted_worker_settings(chosen)
        if driver_env:
            zygote = worker_zygote.environment()
            worker_settings.update({f"spark.executorEnv.{name}": value for name, value in zygote.items()})
            os.environ.update(driver_env)
            for key, value in worker_settings.items():
                options.setdefault(key, value)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if archive:
        jvm: Any = spark.sparkContext._jvm
        note = jvm_archive.check_mapped(str(jvm.System.getProperty("java.vm.info")), archive)
        if note:
            log.warning("%s", note)
    elif not launching:
        jvm_archive.java_options_for_launch(start_build=True)  # spark-submit: build one for the next launches
    quiet_accumulator_server(spark)
    if register:
        register_data_sources(spark)
    return spark


def register_data_sources(spark: Any, data_sources: Sequence[Any] = ()) -> None:
    """Register the replication data source (``format("rocketmq")``) and ``data_sources`` with ``spark``. The first
    registration in a JVM makes Spark look up the Python data sources installed as packages, in a Python worker of
    its own (~1-2 s on 2 loaded cores): ``jobs.query_supervisor.run_job`` starts its warm-up first, so the two
    start-ups overlap."""
    from connectors.replication.data_source import RocketMQDataSource

    for data_source in (RocketMQDataSource, *data_sources):
        spark.dataSource.register(data_source)


def quiet_accumulator_server(spark: Any) -> None:
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


JVM_NOTICES = (b"WARNING: Using incubator modules", b"Setting default log level",
               b"To adjust logging level use sc.setLogLevel")
"""Start-up notices of the JDK launcher and Spark that log4j does not route: kept out of the job's console."""


def _launch_jvm_in_own_session(options: dict[str, str], log_dir: Path | None = None) -> None:
    """Launch the driver JVM as SparkSession would (spark-submit with ``options`` as --conf), but in a
    session and process group of its own. A SIGTERM or Ctrl-C sent to the job's whole process group
    (systemd's default, `timeout`, a terminal) then reaches only this process, which stops the queries and
    then Spark in order; otherwise the JVM's shutdown hook stops Spark under the running queries and the
    job ends in Py4J tracebacks. The JVM still dies with this process: pyspark's gateway exits when its
    stdin, a pipe from here, closes. With ``log_dir``, the JVM's stdout and stderr come through a pipe
    (``_relay_jvm_console``): its start-up notices (``JVM_NOTICES``) go to ``<log_dir>/spark-console.log``
    (``job_logging.JVM_CONSOLE_LOG``), everything else to this process's stderr as before, since the Python
    workers the JVM forks write their log lines (the sink's batch lines among them) and tracebacks there.
    Does nothing when a JVM is already attached."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    popen_kwargs: dict[str, Any] = {"start_new_session": True}
    read_end = -1
    if log_dir is not None:
        read_end, write_end = os.pipe()
        popen_kwargs.update(stdout=write_end, stderr=write_end)
    try:
        gateway = launch_gateway(conf, popen_kwargs=popen_kwargs)  # type: ignore[no-untyped-call]
    finally:
        if log_dir is not None:
            os.close(write_end)  # the JVM holds its own copy; EOF here when the JVM and its workers are gone
    if log_dir is not None:
        notices = (Path(log_dir) / job_logging.JVM_CONSOLE_LOG).open("ab")
        threading.Thread(target=_relay_jvm_console, args=(os.fdopen(read_end, "rb"), notices, _console()),
                         name="jvm-console", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)


def _console() -> BinaryIO:
    """This process's stderr as bytes (a test's capture may have replaced ``sys.stderr`` by a text-only one)."""
    stream = getattr(sys.stderr, "buffer", None) or getattr(sys.__stderr__, "buffer", None)
    return cast(BinaryIO, stream) if stream is not None else open(os.devnull, "wb")


def _relay_jvm_console(source: BinaryIO, notices: BinaryIO, console: BinaryIO) -> None:
    """Copy the JVM's output line by line: ``JVM_NOTICES`` to ``notices``, the rest to ``console``. Reads on
    until EOF whatever a write meets (a closed console, a full disk): the JVM would block on a full pipe."""
    with source, notices:
        for line in iter(source.readline, b""):
            target = notices if line.startswith(JVM_NOTICES) else console
            with contextlib.suppress(OSError, ValueError):
                target.write(line)
                target.flush()

