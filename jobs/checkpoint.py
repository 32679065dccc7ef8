"""Run the consumer-group checkpoints of a replicator config's links as Spark Structured Streaming queries.

    spark-submit jobs/checkpoint.py --config conf/replicator.yaml [--link NAME ...]
    python jobs/checkpoint.py --config conf/replicator.yaml          (local[*] when no master is set)

One query per link (queryName ``<link>-checkpoint``, checkpoint ``<checkpoint_location>-checkpoint``,
trigger = the link's ``checkpoints.interval``): ``format("rocketmq_checkpoint")`` snapshots the source
groups' offsets each trigger and its writer translates them through the link's offset map and commits them
on the target (``connectors.checkpoint``). Run it beside ``jobs/replicate.py`` (it reads the Delta tables
the replication query commits). SIGTERM / SIGINT stop the queries. Exit code: 0 after a clean stop, 1
when a query failed, 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/checkpoint.py` / `python jobs/checkpoint.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.checkpoint.data_source import DATA_SOURCE_NAME, CheckpointDataSource
from connectors.core.config import LinkConfig, ReplicatorConfig
from jobs import job_logging
from jobs.query_supervisor import (
    QueryStarter,
    exit_job,
    polling_query_location,
    prepare_job,
    run_job,
    start_polling_query,
)
from jobs.spark_session import APP_NAME

log = logging.getLogger("jobs.checkpoint")


def parse_args(argv: list[str] | None = None, prog: str = "checkpoint") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", action="append", default=[], help="only this link (repeatable); default: all")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-dir", default="run/logs")
    job_logging.add_rotation_arguments(parser)
    # no endpoint of its own: the replication and heartbeat jobs serve the links' metrics (prepare_job reads it)
    parser.set_defaults(metrics_port=0)
    return parser.parse_args(argv)


def checkpoint_query_location(config: ReplicatorConfig, name: str) -> str:
    """The checkpoint query's own Spark checkpoint: beside the replication query's."""
    return polling_query_location(config, name, "checkpoint")


def start_checkpoints(spark: Any, config_path: str, config: ReplicatorConfig, name: str) -> Any:
    """Start one link's checkpoint query (``spark`` must have ``CheckpointDataSource`` registered)."""
    link = config.link(name)
    query = start_polling_query(spark, DATA_SOURCE_NAME, config_path, config, name, suffix="checkpoint",
                                trigger=link.checkpoints.spark_trigger)
    log.info("link %s: checkpoints %s -> %s every %s, groups %s", name, link.source, link.target,
             link.checkpoints.spark_trigger, link.checkpoints.groups.model_dump(exclude_defaults=True) or "all")
    return query


def run_queries(argv: list[str] | None, *, prog: str, data_source: Any,
                location: Callable[[ReplicatorConfig, str], str],
                start: Callable[[Any, str, ReplicatorConfig, str], Any],
                enabled: Callable[[LinkConfig], bool] = lambda _link: True) -> int:
    """The shared main loop of the polling connectors' jobs (checkpoint, config sync): parse the arguments,
    prepare the job as every job does (``prepare_job``: logging, config, links, stop marker, exit 2; no
    metrics endpoint), start ``start(spark, config path, config, link)`` per link the connector is
    ``enabled`` for, run until a signal or a failed query."""
    args = parse_args(argv, prog)
    job = prepare_job(args)
    if isinstance(job, int):
        return job
    names = [name for name in job.names if enabled(job.config.link(name))]
    if not names:
        job.stop()
        log.error("%s is disabled for every link selected", prog)
        return 2
    def starter(name: str) -> QueryStarter:
        return lambda spark: start(spark, args.config, job.config, name)

    return run_job(job, [starter(name) for name in names],
                   app_name=f"{APP_NAME}-{prog}", checkpoint_locations=[location(job.config, n) for n in names],
                   data_sources=[data_source])


def run(argv: list[str] | None = None) -> int:
    return run_queries(argv, prog="checkpoint", data_source=CheckpointDataSource, location=checkpoint_query_location,
                       start=start_checkpoints, enabled=lambda link: link.checkpoints.enabled)


if __name__ == "__main__":
    exit_job(run())
