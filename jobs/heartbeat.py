"""Run the heartbeat connector of a replicator config: produce each link's heartbeat on its source, watch
it arrive on its target, serve the metrics.

    spark-submit jobs/heartbeat.py --config conf/replicator.yaml [--link NAME ...] [--metrics-port N]
    python jobs/heartbeat.py --config conf/replicator.yaml          (local[*] when no master is set)

One Spark query (``queryName`` ``heartbeat``, checkpoint ``heartbeat.checkpoint_location``) reads the
``rmq_heartbeat`` source (one row per link per ``heartbeat.interval``) and writes it with the
``rmq_heartbeat`` sink (a message to ``rmq_sys_replicator_heartbeat`` on the link's source cluster).
The replication links carry that topic to their targets like any other (``replicate.py`` runs them);
this process's heartbeat monitor (``connectors.heartbeat.monitor_loop``) reads it on both clusters and
records each arrival in the link's Delta ``heartbeats`` table. The Prometheus endpoint
(``jobs.metrics``: heartbeat and replication metrics of the links) is bound before Spark starts, so a
port in use is one error line and exit 2. Exit codes as ``replicate.py``: 0 after a clean stop
(SIGTERM / SIGINT), 1 when the query failed, 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/heartbeat.py` / `python jobs/heartbeat.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.core.config import ReplicatorConfig
from connectors.heartbeat.data_source import DATA_SOURCE_NAME, HeartbeatDataSource
from jobs import job_logging
from jobs.query_supervisor import exit_job, prepare_job, run_job
from jobs.spark_session import APP_NAME

log = logging.getLogger("jobs.heartbeat")

QUERY_NAME = "heartbeat"
MAX_TRIGGER = 1.0
"""Seconds between two triggers at most (half the interval below 2 s): a trigger with no heartbeat due
makes no batch, so this bounds how late a heartbeat leaves, not how often one is sent."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="heartbeat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="replicator YAML (conf/replicator.yaml)")
    parser.add_argument("--link", action="append", default=[], help="only this link (repeatable); default: all")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="Prometheus port (default: metrics.port of the config; 0 = no endpoint)")
    parser.add_argument("--log-level", default="INFO", help="console level; the log files keep INFO and up")
    parser.add_argument("--log-dir", default="run/logs", help="replicator.log and spark.log go here")
    job_logging.add_rotation_arguments(parser)
    return parser.parse_args(argv)


def trigger_interval(config: ReplicatorConfig) -> str:
    """The producer query's processing-time trigger: half the heartbeat interval, at most ``MAX_TRIGGER``."""
    return f"{round(min(config.heartbeat.interval / 2, MAX_TRIGGER) * 1000)} milliseconds"


def start_heartbeat_query(spark: Any, config_path: str, config: ReplicatorConfig, links: list[str]) -> Any:
    path = str(Path(config_path).resolve())
    checkpoint = str(Path(config.heartbeat.checkpoint_location).resolve())
    frame = spark.readStream.format(DATA_SOURCE_NAME).option("config", path).option("links", ",".join(links)).load()
    query = (frame.writeStream.format(DATA_SOURCE_NAME).option("config", path).option("links", ",".join(links))
             .option("checkpointLocation", checkpoint).queryName(QUERY_NAME)
             .trigger(processingTime=trigger_interval(config)).start())
    log.info("heartbeat of link(s) %s every %g s to rmq_sys_replicator_heartbeat on their sources; checkpoint %s",
             ", ".join(links), config.heartbeat.interval, config.heartbeat.checkpoint_location)
    return query


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job = prepare_job(args, heartbeat_monitor=True)
    if isinstance(job, int):
        return job
    return run_job(job, [lambda spark: start_heartbeat_query(spark, args.config, job.config, job.names)],
                   app_name=f"{APP_NAME}-heartbeat", checkpoint_locations=[job.config.heartbeat.checkpoint_location],
                   data_sources=[HeartbeatDataSource])


if __name__ == "__main__":
    exit_job(run())
