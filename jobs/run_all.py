"""Run every connector of a replicator config's links in one Spark application: the main job.

    spark-submit jobs/run_all.py --config conf/replicator.yaml [--link NAME ...] [--available-now]
    python jobs/run_all.py --config conf/replicator.yaml          (local[*] when no master is set)

Per link: the replication query (``jobs.replicate.start_link``), the checkpoint query
(``jobs.checkpoint.start_checkpoints``) when ``checkpoints.enabled`` and the config-sync query
(``jobs.config_sync.start_config_sync``) when ``config_sync.enabled``, and then the replication query creates a
missing target topic like its source before its first batch (``createTopicsLikeSource``), so config sync's rule
decides its queue count, not the target's auto-create; for all the links together one heartbeat query
(``jobs.heartbeat.start_heartbeat_query``) and one heartbeat monitor thread; one Prometheus endpoint with every
metric of ``jobs.metrics``. The replication queries start first, the others once every replication query ended its
first trigger (at most ``jobs.query_waves.FIRST_WAVE_MAX_S`` later): a start's or restart's first replicated message
does not wait for the other queries' Python processes to start. Console, log dir, signals and exit codes are
``jobs/replicate.py``'s (``jobs.query_supervisor``): 0 after a clean stop (SIGTERM / SIGINT) or when every
AvailableNow query finished, 1 when a query failed (one line naming it; the others are stopped), 2 on a
configuration error (a metrics port in use included).

``--available-now``: the replication queries copy what the source holds when they start and stop, and the
job ends with them. The polling connectors have no backlog to drain: each of their triggers takes a fresh
snapshot of the present (a heartbeat tick, the groups' offsets, the topic configuration), so AvailableNow
would mean "one snapshot", and a heartbeat measures a link that keeps running. They are not started; run
``jobs/checkpoint.py`` / ``jobs/config_sync.py`` (or this job without the flag) for them.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `spark-submit jobs/run_all.py` / `python jobs/run_all.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.checkpoint.data_source import CheckpointDataSource
from connectors.config_sync.data_source import ConfigDataSource
from connectors.core.config import ReplicatorConfig
from connectors.heartbeat.data_source import HeartbeatDataSource
from jobs.checkpoint import checkpoint_query_location, start_checkpoints
from jobs.config_sync import config_query_location, start_config_sync
from jobs.heartbeat import start_heartbeat_query
from jobs.query_supervisor import QueryStarter, exit_job, prepare_job, run_job
from jobs.replicate import parse_args, start_link, summaries
from jobs.spark_session import APP_NAME

log = logging.getLogger("jobs.run_all")


def checkpoint_locations(config: ReplicatorConfig, names: list[str], *, available_now: bool) -> list[str]:
    """The Spark checkpoints of every query the job starts for ``names``."""
    locations = [config.link(name).checkpoint_location for name in names]
    if not available_now:
        locations.append(config.heartbeat.checkpoint_location)
        locations += [checkpoint_query_location(config, n) for n in names if config.link(n).checkpoints.enabled]
        locations += [config_query_location(config, n) for n in names if config.link(n).config_sync.enabled]
    return locations


def query_starters(config_path: str, config: ReplicatorConfig, names: list[str], *,
                   available_now: bool = False) -> tuple[list[QueryStarter], list[QueryStarter]]:
    """The queries of ``names`` (see the module docstring), each as its starter, in two waves: the replication
    queries, then the others once those ended their first trigger (``jobs.query_waves``: a restart brings
    replication back first). A link whose config sync runs replicates with ``createTopicsLikeSource``: a batch that
    would reach a target topic config sync has not created yet (the topic held data at start, or was created on the
    source between two rounds) has it created like the source first, never with the target's auto-create default
    (``connectors.config_sync.creation``)."""
    syncing = set() if available_now else {n for n in names if config.link(n).config_sync.enabled}

    def config_sync(name: str) -> QueryStarter:
        return lambda spark: start_config_sync(spark, config_path, config, name)

    def replication(name: str) -> QueryStarter:
        return lambda spark: start_link(spark, config_path, config, name, available_now=available_now,
                                        create_topics_like_source=name in syncing)

    def checkpoints(name: str) -> QueryStarter:
        return lambda spark: start_checkpoints(spark, config_path, config, name)

    later = [config_sync(n) for n in names if n in syncing]
    if not available_now:
        later.append(lambda spark: start_heartbeat_query(spark, config_path, config, names))
        later += [checkpoints(n) for n in names if config.link(n).checkpoints.enabled]
    return [replication(n) for n in names], later


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv, prog="run_all", description=__doc__.split("\n\n")[0], available_now=(
        "replicate what is there now, then stop (heartbeat, checkpoints and config sync are not started)"))
    job = prepare_job(args, heartbeat_monitor=not args.available_now)
    if isinstance(job, int):
        return job
    config, names = job.config, job.names
    started_ms = int(time.time() * 1000)

    first, later = query_starters(args.config, config, names, available_now=args.available_now)
    return run_job(job, first, later=later, app_name=APP_NAME,
                   checkpoint_locations=checkpoint_locations(config, names, available_now=args.available_now),
                   data_sources=(HeartbeatDataSource, CheckpointDataSource, ConfigDataSource), warm_up=True,
                   progress=True, summarize=summaries(args.config, config, started_ms))


if __name__ == "__main__":
    exit_job(run())
