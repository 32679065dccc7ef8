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
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/replicate.py` / `python jobs/replicate.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import ReplicatorConfig
from connectors.core.errors import ReplicatorError
from connectors.replication.batch_commit import aborted_on_target
from connectors.replication.failure_policy import FailurePolicyRunner
from connectors.replication.tables import LinkTables
from jobs import job_logging
from jobs.query_supervisor import QueryStarter, exit_job, prepare_job, run_job
from jobs.spark_session import APP_NAME

log = logging.getLogger("jobs.replicate")


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
    job_logging.add_rotation_arguments(parser)
    return parser.parse_args(argv)



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
    config, names = job.config, job.names
    started_ms = int(time.time() * 1000)
    def starter(name: str) -> QueryStarter:
        return lambda spark: start_link(spark, args.config, config, name, available_now=args.available_now)

    return run_job(job, [starter(name) for name in names],
                   app_name=APP_NAME, checkpoint_locations=[config.link(name).checkpoint_location for name in names],
                   warm_up=True, progress=True, summarize=summaries(args.config, config, started_ms))


def summaries(config_path: str, config: ReplicatorConfig, started_ms: int,
              ) -> Callable[[Sequence[Any], dict[str, str]], None]:
    """``run_job``'s ``summarize`` for a job that ran replication queries: ``log_summary`` of each (the
    queries named after a link), failed or not."""
    links = {link.name for link in config.links}

    def summarize(queries: Sequence[Any], failures: dict[str, str]) -> None:
        for q in queries:
            if q.name in links:
                log_summary(config_path, config, q, started_ms, failed=q.name in failures)

    return summarize


def summary_line(link: str, total: Mapping[str, int], aborted_sent: int, *, failed: bool) -> str:
    """A link's summary line: the committed batches' totals (the metrics table) and, when batches were aborted
    after their messages reached the target (a stop right after the sends), those messages too: they are on
    the target, uncommitted, and are sent again when the link resumes."""
    line = (f"link {link} {'stopped after an error' if failed else 'done'}: {total['messages']} messages "
            f"({total['bytes']} bytes) replicated in {total['batches']} committed batch(es)")
    if aborted_sent:
        line += (f" + {aborted_sent} sent to the target by batch(es) stopped before their commit (sent again "
                 f"when the link resumes)")
    return line + f", {total['skipped_loop']} skipped by the loop guard, {total['failed']} failed"


def log_summary(config_path: str, config: ReplicatorConfig, query: Any, started_ms: int, *, failed: bool) -> None:
    """The run's totals for one link, from the Delta metrics its batches committed since ``started_ms``."""
    link = config.link(query.name)
    try:
        total = LinkTables.for_link(link).totals(str(query.id), since_ms=started_ms)
    except ReplicatorError as exc:
        log.warning("link %s: no summary (%s)", link.name, exc)
        return
    line = summary_line(link.name, total, aborted_on_target(link.name), failed=failed)
    if total["failed"]:
        log.warning("%s (recorded in the failures table; replay them with: python -m jobs.replay_failures "
                    "--config %s --link %s)", line, config_path, link.name)
    else:
        log.info("%s", line)


if __name__ == "__main__":
    exit_job(run())
