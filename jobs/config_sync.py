"""Run the configuration sync of a replicator config's links as Spark Structured Streaming queries.

    spark-submit jobs/config_sync.py --config conf/replicator.yaml [--link NAME ...]
    python jobs/config_sync.py --config conf/replicator.yaml          (local[*] when no master is set)

One query per link (queryName ``<link>-config``, checkpoint ``<checkpoint_location>-config``, trigger = the
link's ``config_sync.interval``): ``format("rocketmq_config")`` snapshots the source's topics and
subscription groups each trigger and its writer applies them on the target under the link's topic mapping
(``connectors.config_sync``). Exit code: 0 after a clean stop, 1 when a query failed, 2 on a configuration
error.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/config_sync.py` / `python jobs/config_sync.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.config_sync.data_source import DATA_SOURCE_NAME, ConfigDataSource
from connectors.core.config import ReplicatorConfig
from jobs.checkpoint import run_queries
from jobs.query_supervisor import exit_job, polling_query_location, start_polling_query

log = logging.getLogger("jobs.config_sync")


def config_query_location(config: ReplicatorConfig, name: str) -> str:
    """The config-sync query's own Spark checkpoint: beside the replication query's."""
    return polling_query_location(config, name, "config")


def start_config_sync(spark: Any, config_path: str, config: ReplicatorConfig, name: str) -> Any:
    """Start one link's config-sync query (``spark`` must have ``ConfigDataSource`` registered)."""
    link = config.link(name)
    query = start_polling_query(spark, DATA_SOURCE_NAME, config_path, config, name, suffix="config",
                                trigger=link.config_sync.spark_trigger)
    log.info("link %s: config sync %s -> %s every %s (deletion %s)", name, link.source, link.target,
             link.config_sync.spark_trigger, "propagated" if link.config_sync.propagate_deletion else "reported only")
    return query


def run(argv: list[str] | None = None) -> int:
    return run_queries(argv, prog="config_sync", data_source=ConfigDataSource, location=config_query_location,
                       start=start_config_sync, enabled=lambda link: link.config_sync.enabled)


if __name__ == "__main__":
    exit_job(run())
