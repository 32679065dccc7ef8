"""The streaming jobs' shared start and main loop: set up the log dir, load the config, bind the metrics
endpoint before Spark starts (``prepare_job``); then start Spark and the job's queries, stop on SIGTERM /
SIGINT, watch the queries, report a failed one in one console line, stop the others, stop Spark
(``run_job``, with ``supervise``); a query that failed for a reason of Spark's own is restarted instead
(``jobs.query_restart``).

Every entry point (``jobs/replicate.py``, ``jobs/run_all.py``, ``jobs/heartbeat.py`` and the polling
connectors' jobs through ``jobs.checkpoint.run_queries``) is ``prepare_job`` then ``run_job``, so every job
starts, stops, fails and exits the same way: a signal stops every query gracefully (the running batch
finishes or is re-run from the checkpoint on the next start); the first failed query stops the others (the
sinks' "batch aborted" lines that stop causes are INFO, ``connectors.core.job_stop``); exit code 1 when a
query failed (a full disk included: one line naming the path, ``connectors.core.disk_full``; also when it
stops the queries' start), 2 for ``prepare_job``'s refusal (a bad config, a metrics port in use) or a
configuration error found while starting the queries; the process ends through ``exit_job``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.config import ReplicatorConfig, load_replicator_config
from connectors.core.disk_full import find_disk_full
from connectors.core.driver_log import FILE_ONLY
from connectors.core.errors import ReplicatorError
from connectors.core.job_stop import mark_stopping, prepare_stop_marker, remove_stop_marker
from connectors.heartbeat.monitor_loop import HeartbeatMonitorLoop
from jobs import job_logging
from jobs.metrics import MetricsEndpoint, metrics_settings
from jobs.progress import make_progress_listener
from jobs.query_restart import QueryRestarts
from jobs.query_waves import await_first_triggers
from jobs.spark_session import SESSION_UP, build_spark, register_data_sources

log = logging.getLogger("jobs.query_supervisor")


@dataclass
class PreparedJob:
    """What a job has before Spark starts."""

    log_dir: Path
    config: ReplicatorConfig
    names: list[str]
    """The links to run: ``--link`` ones, else every link of the config."""
    endpoint: MetricsEndpoint | None
    """Bound and feeding (None with port 0); ``stop`` it at the end."""
    monitor: HeartbeatMonitorLoop | None
    """Not started yet (``start`` it once Spark is up); None unless asked for."""

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        if self.endpoint is not None:
            self.endpoint.stop()
        remove_stop_marker()


def prepare_job(args: argparse.Namespace, *, heartbeat_monitor: bool = False) -> PreparedJob | int:
    """Logging (``--log-dir``, ``--log-level``, ``--log-file-mb``, ``--log-files``), the config (``--config``,
    ``--link``) and the metrics endpoint (``--metrics-port``; with the heartbeat gauges when ``heartbeat_monitor``),
    in that order; the exit code 2 (the error logged in one line) when one of them fails."""
    try:
        log_dir = job_logging.setup(args.log_dir, args.log_level, rotation=job_logging.rotation_of(args))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    endpoint: MetricsEndpoint | None = None
    try:
        config = load_replicator_config(args.config)
        names = args.link or [link.name for link in config.links]
        links = [config.link(name) for name in names]
        monitor = HeartbeatMonitorLoop(config, names) if heartbeat_monitor else None
        # bound before Spark starts: a port in use is one error line and exit 2, not a failed query
        metrics = metrics_settings(config.metrics, args.metrics_port)
        if metrics.port:
            endpoint = MetricsEndpoint(metrics, links, monitor=None if monitor is None else monitor.monitor)
            endpoint.start()
    except ReplicatorError as exc:
        log.error("%s", exc)  # the console line is "HH:MM:SS ERROR <what>": no second "error"
        return 2
    prepare_stop_marker()  # exported before Spark starts: its Python workers inherit it
    return PreparedJob(log_dir, config, names, endpoint, monitor)


QueryStarter = Callable[[Any], Any]
"""Starts one of a job's queries on the Spark session it is given and returns it (from its checkpoint: the same
call restarts it, ``jobs.query_restart``)."""


def run_job(job: PreparedJob, starters: Sequence[QueryStarter], *, app_name: str,
            checkpoint_locations: Sequence[str], data_sources: Sequence[Any] = (), warm_up: bool = False,
            progress: bool = False, summarize: Callable[[Sequence[Any], dict[str, str]], None] | None = None,
            later: Sequence[QueryStarter] = ()) -> int:
    """Run a prepared job to its end and return its exit code: install the signal handlers, build Spark
    (``app_name``, ``checkpoint_locations`` as ``build_spark`` takes them) and register ``data_sources``;
    with ``warm_up`` start the replication task daemon meanwhile (``connectors.replication.warmup``); with
    ``progress`` log every batch's progress; start the heartbeat monitor if the job has one; start the
    queries (each of ``starters``, in order; then each of ``later`` once those ended their first trigger,
    ``jobs.query_waves``) and ``supervise`` them, restarting one that failed for a reason of
    Spark's own (``jobs.query_restart``). Then, whatever happened, stop the job's endpoint,
    monitor and stop marker, and Spark. ``summarize(queries, failures)`` runs after Spark stopped. 0 after
    a clean stop, 1 when a query failed, 2 on a ``ReplicatorError`` while starting."""
    stop = stop_on_signals()
    storage = [*checkpoint_locations, *(str(job.config.link(n).tables_location) for n in job.names)]
    spark: Any = None
    warmup: Any = None
    queries: list[Any] = []
    failures: dict[str, str] = {}
    try:
        launched = time.monotonic()
        spark = build_spark(app_name, checkpoint_locations=checkpoint_locations, log_dir=job.log_dir, register=False)
        # benchmarks/replicator.py (d) reads this line's time: "session up -> first message" starts here
        log.info("%s up in %.1f s", SESSION_UP, time.monotonic() - launched)
        if warm_up:
            from connectors.replication.warmup import start_worker_warmup

            warmup = start_worker_warmup(spark)  # overlaps the data sources' lookup and the queries' start
        register_data_sources(spark, data_sources)
        if progress:
            spark.streams.addListener(make_progress_listener())
        if job.monitor is not None:
            job.monitor.start()
        again: dict[str, Callable[[], Any]] = {}
        for wave in (starters, later):
            if not wave:
                continue
            if wave is later and not await_first_triggers(queries, stop):
                break  # stopped while the first wave started: start nothing more
            for starter in wave:
                query = starter(spark)
                queries.append(query)
                again[query.name] = functools.partial(starter, spark)
            log.info("running %d quer(ies): %s", len(queries), ", ".join(q.name for q in queries))
        failures = supervise(spark, queries, stop, job.log_dir, storage, restarts=QueryRestarts(again))
    except ReplicatorError as exc:
        log.error("%s", exc)  # the console line is "HH:MM:SS ERROR <what>": no second "error"
        return 2
    except Exception as exc:
        # a full disk while starting (Spark writes a new query's checkpoint metadata in start()): one line,
        # as when a running query meets it; anything else keeps its traceback
        found = find_disk_full(exc)
        if found is None:
            raise
        log.error("%s", job_logging.disk_full_reason(found, storage))
        log.info("the job could not start its queries:", exc_info=True, extra=FILE_ONLY)
        return 1
    finally:
        job.stop()
        if warmup is not None:
            from connectors.replication.warmup import join_worker_warmup

            join_worker_warmup(warmup)
        if spark is not None:
            spark.stop()
    if summarize is not None:
        summarize(queries, failures)
    release_arrow_threads()
    return 1 if failures else 0


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set (main thread only); the job's loop then stops its queries."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("%s: stopping the queries (the running batch finishes or is re-run on the next start)",
                 signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def supervise(spark: Any, queries: list[Any], stop: threading.Event, log_dir: Path,
              storage: Sequence[str] = (), restarts: QueryRestarts | None = None) -> dict[str, str]:
    """Wait until ``stop`` is set, every query has finished (AvailableNow) or one failed and ``restarts`` did not
    start it again (a restarted query replaces the failed one in ``queries``); then stop the active ones. Returns
    query name -> its one-line failure (logged once, the whole exception in the log file); empty after a clean
    stop. ``storage``: the job's checkpoint and Delta locations, for the line of a full disk that its error does
    not locate (``job_logging.failure_line``)."""
    from pyspark.errors import StreamingQueryException

    failures: dict[str, str] = {}
    disks: dict[str, str] = {}  # one line per full disk (``report_failure``)
    while not stop.is_set():
        for i, q in enumerate(queries):
            if not q.isActive and q.exception() is not None and q.name not in failures:
                restarted = None if restarts is None or stop.is_set() else restarts.restart(q, stop)
                if restarted is not None:
                    queries[i] = restarted
                    continue
                report_failure(q, log_dir, failures, storage, disks)
                stop.set()
        if stop.is_set() or not any(q.isActive for q in queries):
            break
        try:
            spark.streams.awaitAnyTermination(1)
        except StreamingQueryException:
            pass  # the failed query is reported at the loop's top, once
        spark.streams.resetTerminated()
    stop_queries(queries)
    for q in queries:
        if q.exception() is not None and q.name not in failures:
            report_failure(q, log_dir, failures, storage, disks)
    return failures


STOP_GRACE_S = 5.0
"""How long ``stop_queries`` waits, for all the queries together, for their running triggers to end: short enough
that the job's whole stop fits a container runtime's default stop timeout (``docker stop``: 10 s, then SIGKILL)."""
STOP_POLL_S = 0.05


def stop_queries(queries: Sequence[Any], grace_s: float = STOP_GRACE_S, clock: ThreadClock = SYSTEM_CLOCK) -> None:
    """Stop the active ``queries``, each between two of its triggers: a query whose trigger is running
    (``status["isTriggerActive"]``) is stopped once that trigger ended, or when ``grace_s`` has passed. The job is
    marked stopping first (the batches the stop cancels are aborted by it, not by a fault: INFO, not WARNING).

    Why wait: ``StreamingQuery.stop`` interrupts the query's thread. Interrupted in a batch's write, Spark aborts
    the batch on that thread (``V2TableWriteExec.writeWithV2``), and a Python sink's abort needs a Python worker
    reached over a socket channel (``PythonStreamingWrite.abort`` -> ``PythonPlannerRunner.runInPython``), which
    the pending interrupt closes (NIO: ``ClosedByInterruptException``): Spark logs "ERROR WriteToDataSourceV2Exec:
    Data source write support MicroBatchWrite[...] failed to abort." and the sink's ``abort`` never runs. A thread
    interrupted while it waits for its next trigger ends with nothing to abort. A trigger that starts between the
    status read and the stop (a few milliseconds), or one still running after ``grace_s`` (a backlog, a target
    outage), is interrupted as before: its batch is re-run from the checkpoint on the next start."""
    active = [q for q in queries if q.isActive]
    if not active:
        return
    mark_stopping()
    deadline = clock.monotonic() + grace_s
    while active:
        late = clock.monotonic() >= deadline
        for q in list(active):
            if not q.isActive:
                active.remove(q)
            elif late or not q.status.get("isTriggerActive", False):
                q.stop()
                active.remove(q)
        if active:
            clock.block(STOP_POLL_S)


def report_failure(query: Any, log_dir: Path, failures: dict[str, str], storage: Sequence[str] = (),
                   disks: dict[str, str] | None = None) -> None:
    """One console line for a failed query; its whole exception (Python and JVM stacks) in the log file.
    ``disks``: full disk (``job_logging.disk_full_key``) -> the query whose line named it. A query that fails on a
    full disk already named adds no console line (several queries writing to one disk all fail on it, and each
    line would say the same), only a line in the log file."""
    error = query.exception()
    failures[query.name] = job_logging.failure_line(query.name, error, log_dir, storage)
    found = find_disk_full(error) if disks is not None else None
    key = job_logging.disk_full_key(found, storage) if found is not None else None
    if disks is not None and key is not None and key in disks:
        log.info("link %s failed on the full disk reported for link %s: %s", query.name, disks[key],
                 failures[query.name], extra=FILE_ONLY)
    else:
        if disks is not None and key is not None:
            disks[key] = query.name
        log.error("%s", failures[query.name])
    log.info("link %s failed; the query's exception:\n%s", query.name, error, extra=FILE_ONLY)


def polling_query_location(config: ReplicatorConfig, name: str, suffix: str) -> str:
    """A link's polling query's own Spark checkpoint: beside the replication query's, ``-<suffix>``."""
    return str(Path(config.link(name).checkpoint_location + f"-{suffix}").resolve())


def start_polling_query(spark: Any, data_source: str, config_path: str, config: ReplicatorConfig, name: str, *,
                        suffix: str, trigger: str) -> Any:
    """Start one link's polling-connector query (checkpoint, config sync): ``format(data_source)`` read and
    written with the link's ``config`` + ``link`` + ``deltaLocation`` options, named ``<link>-<suffix>``,
    checkpointed at ``polling_query_location``, triggered every ``trigger`` (``spark`` must have the data
    source registered)."""
    link = config.link(name)
    path = str(Path(config_path).resolve())
    delta = str(Path(link.delta_location).resolve())
    frame = (spark.readStream.format(data_source).option("config", path).option("link", name)
             .option("deltaLocation", delta).load())
    return (frame.writeStream.format(data_source).option("config", path).option("link", name)
            .option("deltaLocation", delta).option("checkpointLocation", polling_query_location(config, name, suffix))
            .queryName(f"{name}-{suffix}").trigger(processingTime=trigger).start())


def exit_job(code: int) -> NoReturn:
    """End a job's process with ``code`` once ``run()`` returned: exit handlers run and logs are flushed, then
    the process ends without interpreter teardown. Teardown is where native threads that Arrow's and
    deltalake's readers left behind abort the process ("terminate called without an active exception", exit
    134 after the job's summary; apache/arrow#34314), now and then even after ``release_arrow_threads``;
    nothing of the job's is left to do by then (Spark stopped, Delta committed, the summary printed)."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def release_arrow_threads() -> None:
    """Called last by ``run_job``, after a job's Delta reads (summaries, metrics feeds): Arrow scanners left by
    them may keep native threads that abort the process at interpreter teardown ("terminate called without
    an active exception", exit 134; apache/arrow#34314). Collecting them now, while Arrow is alive, joins
    them. The entry points end through ``exit_job`` and skip teardown anyway; this is for a caller that runs
    a job's ``run()`` in its own process and goes on (the tests)."""
    gc.collect()
