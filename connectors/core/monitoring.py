"""Settings of the replicator's monitoring: the heartbeat every link carries and the Prometheus endpoint
the jobs serve, plus the heartbeat topic's name and shape (one owner of each).

Loaded with the rest of ``conf/replicator.yaml`` by ``connectors.core.config`` (the ``heartbeat`` and
``metrics`` sections); read on the driver by ``jobs/heartbeat.py``, ``jobs/replicate.py`` and
``jobs/lag.py``, and by ``connectors.core.topic_mapping`` (every link replicates ``HEARTBEAT_TOPIC``)::

    heartbeat:                     # optional section; these are the defaults
      interval: 10 seconds         # RIP-45's 10 s; 1 s is the smallest allowed
      lagging_threshold: 10 seconds  # heartbeat lag above this = LAGGING
      startup_limit: 120 seconds   # after the job's start, STARTING instead of STALE until heartbeats flow
      checkpoint_location: run/checkpoints/heartbeat   # the heartbeat producer query's checkpoint
    metrics:
      host: 127.0.0.1              # address the Prometheus endpoint binds to
      port: 9464                   # 0 = no endpoint
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from connectors.core.settings_base import SettingsModel, parse_duration

HEARTBEAT_TOPIC = "rmq_sys_replicator_heartbeat"
"""RIP-45's heartbeat topic. A system topic by its prefix, yet replicated by every link under its own
name (``connectors.core.topic_mapping``): its arrival on the target measures the link's whole path."""
HEARTBEAT_TOPIC_QUEUES = 1
"""Queues per broker when the heartbeat producer creates the topic on the source (it never changes an
existing topic). One is enough: a link sends one heartbeat per interval, and a single queue per
broker keeps each broker's heartbeats in order for the monitor. The replication writer auto-creates
the topic on the target with the target broker's default queue count; queue placement copies queue
ids when the counts match and spreads otherwise, which the monitor does not care about."""
DEFAULT_HEARTBEAT_INTERVAL = 10.0
MIN_HEARTBEAT_INTERVAL = 1.0
STALE_INTERVALS = 3
"""A link whose newest heartbeat on the target is older than this many intervals is STALE."""
DEFAULT_STARTUP_LIMIT = 120.0
"""Seconds after the job's start a link may take until its heartbeats flow: a Spark start
(session, Python workers, the replication and heartbeat queries' first batches) takes 20-30 s on a
2-core machine and several times that on a busy one."""
DEFAULT_METRICS_PORT = 9464


class HeartbeatSettings(SettingsModel):
    """The ``heartbeat`` section: how often each link's heartbeat is produced on its source cluster."""

    interval: float = DEFAULT_HEARTBEAT_INTERVAL
    """Seconds between two heartbeats of a link (>= 1 s); a number or ``"10 seconds"``."""
    lagging_threshold: float = DEFAULT_HEARTBEAT_INTERVAL
    """Heartbeat lag (target store time - source born time) above which a link is LAGGING."""
    startup_limit: float = DEFAULT_STARTUP_LIMIT
    """Seconds after the job's start during which a link whose heartbeats do not flow yet is STARTING, not
    stale (``connectors.heartbeat.monitor``); never less than ``stale_after`` in effect."""
    checkpoint_location: str = "run/checkpoints/heartbeat"
    """Spark checkpoint of the heartbeat producer query (``jobs/heartbeat.py``); holds its sequence."""

    @field_validator("interval", "lagging_threshold", "startup_limit", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("interval")
    @classmethod
    def _at_least_min(cls, value: float) -> float:
        if value < MIN_HEARTBEAT_INTERVAL:
            raise ValueError(f"must be >= {MIN_HEARTBEAT_INTERVAL:g} second, got {value:g}")
        return value

    @property
    def interval_ms(self) -> int:
        return round(self.interval * 1000)

    @property
    def startup_limit_ms(self) -> int:
        return round(self.startup_limit * 1000)

    @property
    def stale_after(self) -> float:
        """Seconds without a heartbeat on the target after which a link is STALE."""
        return STALE_INTERVALS * self.interval


class MetricsSettings(SettingsModel):
    """The ``metrics`` section: the Prometheus endpoint the jobs serve on the Spark driver."""

    host: str = "127.0.0.1"
    """Bind address; loopback by default (expose it deliberately)."""
    port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    """TCP port of ``/metrics``; 0 = the jobs serve no endpoint. A job started with a port in use stops
    with an error naming it (``jobs.metrics.MetricsPortInUseError``)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"
