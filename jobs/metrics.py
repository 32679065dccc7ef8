"""The jobs' Prometheus endpoint on the Spark driver: ``http://<metrics.host>:<metrics.port>/metrics``.

Started by ``jobs/run_all.py``, ``jobs/replicate.py`` and ``jobs/heartbeat.py`` (``MetricsEndpoint``, through
``jobs.query_supervisor.prepare_job``) in the job's own process; read by Prometheus and by
``python -m jobs.lag``. Where the numbers come from:

* Replication: the sink's driver commit runs in a Spark Python worker, not in the job's process, so
  nothing there can set a gauge here. The endpoint reads what that commit writes: each link's Delta
  ``metrics`` table (one row per batch, ``connectors.replication.tables``), incrementally, every
  ``FEED_INTERVAL`` seconds (only rows committed since the endpoint started; counters start at 0 with
  the process, as Prometheus counters do). The StreamingQueryListener is not used for metrics: with
  ``rowFormat=ranges`` Spark's progress counts queue ranges, not messages, and knows no latency.
* Checkpoint age and config changes pending: the checkpoint and config-sync writers commit in Spark
  Python workers too; ``ConnectorStateFeed`` reads their Delta ``checkpoints`` and ``config_changes``
  tables in the same feed loop, incrementally (a table whose Delta version has not moved is not read;
  otherwise only the files holding commits since the newest one seen). Unlike the counters these carry
  the state from before the process started (the first read takes the whole table). A table not written
  yet (or a connector disabled for the link) leaves the gauge without a value, not at 0; the checkpoint
  age is computed at scrape time from the newest complete checkpoint's snapshot time.
* Heartbeat: ``jobs/heartbeat.py`` / ``jobs/run_all.py`` hand their ``HeartbeatMonitor``; the heartbeat
  metrics are computed from it at each scrape (ages are exact at scrape time, not as of the last poll).

Metrics, every one labelled ``link`` (docs/operations.md, "Monitoring", has the same list)::

    rmq_replicator_messages_total              counter  messages written to the target
    rmq_replicator_bytes_total                 counter  body bytes written to the target
    rmq_replicator_failed_total                counter  messages failed after retries (failures table)
    rmq_replicator_skipped_total               counter  messages skipped by the loop guard
    rmq_replicator_duplicates_avoided_total    counter  messages not sent again: the target already held them
                                                        (a re-run batch, a retried task, an unanswered send;
                                                        docs/replicator.md "Duplicates")
    rmq_replicator_latency_p50_seconds         gauge    newest batch: median of target store - source born
    rmq_replicator_latency_p99_seconds         gauge    newest batch: 99th percentile of the same
    rmq_replicator_record_age_seconds          gauge    newest batch: commit time - oldest message's store time
    rmq_replicator_last_batch_timestamp_seconds gauge   commit time of the newest batch (epoch seconds)
    rmq_replicator_heartbeat_lag_seconds       gauge    newest heartbeat: target store time - source born time
    rmq_replicator_heartbeat_lag_p99_1h_seconds gauge   99th percentile of heartbeat lag, last hour
    rmq_replicator_heartbeat_age_seconds       gauge    now - born time of the newest arrived heartbeat
    rmq_replicator_heartbeat_interval_seconds  gauge    the configured interval (STALE = age > 3 intervals)
    rmq_replicator_heartbeat_startup_limit_seconds gauge how long after the job's start a link whose
                                                        heartbeats do not flow yet is starting, not stale
                                                        (heartbeat.startup_limit, at least 3 intervals)
    rmq_replicator_heartbeat_born_timestamp_seconds    gauge  newest arrived heartbeat's born time
    rmq_replicator_heartbeat_arrival_timestamp_seconds gauge  its store time on the target
    rmq_replicator_heartbeat_last_seen_timestamp_seconds gauge when the monitor read it
    rmq_replicator_link_state{state=...}       gauge    1 for the monitor's status (starting, ok, lagging,
                                                        broken, idle), 0 for the others
    rmq_replicator_checkpoint_age_seconds      gauge    now - snapshot time of the newest complete checkpoint
                                                        (the recovery point; checkpoints table)
    rmq_replicator_checkpoint_shared_queues    gauge    target queues the newest checkpoint marks "shared: may
                                                        re-read" (several source queues feed each; checkpoints
                                                        table, tables.SHARED_DETAIL); 0 when none
    rmq_replicator_config_changes_pending      gauge    config changes not applied that still stand (refused,
                                                        failed, disabled, deferred; config_changes table, each
                                                        recorded once: connectors.config_sync.standing)
    rmq_replicator_config_changes_deferred     gauge    of those, the DEFERRED ones: a broker group of either
                                                        cluster unreachable or expired, so deletions, unknown
                                                        topics and target creations wait (0 when all answer)
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from connectors.checkpoint.tables import CHECKPOINTS, SHARED_DETAIL, CheckpointTables, newest_complete_snapshot_ms
from connectors.config_sync.applier import CONFIG_CHANGES, ConfigTables, fold_pending
from connectors.config_sync.plan import ChangeStatus
from connectors.config_sync.standing import ChangeKey
from connectors.core.config import LinkConfig
from connectors.core.delta import DeltaTableSet
from connectors.core.errors import ReplicatorConfigError, ReplicatorError, TableError
from connectors.core.monitoring import MetricsSettings
from connectors.heartbeat.monitor import HeartbeatMonitor, LinkStatus
from connectors.replication.tables import METRICS, LinkTables

log = logging.getLogger("jobs.metrics")

PREFIX = "rmq_replicator_"
FEED_INTERVAL = 2.0
"""Seconds between two reads of the links' Delta metrics tables."""


class MetricsPortInUseError(ReplicatorConfigError):
    """The configured metrics port is taken: the job stops before starting any query."""


class ReplicationMetrics:
    """The replication counters and gauges (see the module docstring), in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(PREFIX + name, doc, ["link"], registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(PREFIX + name, doc, ["link"], registry=registry)

        self.messages = counter("messages", "Messages written to the target")
        self.bytes = counter("bytes", "Body bytes written to the target")
        self.failed = counter("failed", "Messages that failed after retries (in the failures table)")
        self.skipped = counter("skipped", "Messages skipped by the loop guard")
        self.duplicates_avoided = counter("duplicates_avoided",
                                          "Messages not sent again because the target already held them")
        self.latency_p50 = gauge("latency_p50_seconds", "Newest batch: median of target store - source born")
        self.latency_p99 = gauge("latency_p99_seconds", "Newest batch: p99 of target store - source born")
        self.record_age = gauge("record_age_seconds", "Newest batch: commit time - oldest message's store time")
        self.last_batch = gauge("last_batch_timestamp_seconds", "Commit time of the newest batch")
        # Fed from the checkpoint and config-sync tables (ConnectorStateFeed).
        self.checkpoint_age = gauge("checkpoint_age_seconds", "Age of the newest translated checkpoint")
        self.config_pending = gauge("config_changes_pending", "Config changes not yet applied on the target")
        self.config_deferred = gauge("config_changes_deferred",
                                     "Config changes deferred: a broker group of either cluster is unreachable")
        self.checkpoint_shared = gauge("checkpoint_shared_queues",
                                       "Target queues the newest checkpoint marks shared: may re-read")

    def add_batches(self, link: str, rows: Sequence[dict[str, Any]]) -> None:
        """Fold new rows of a link's metrics table (any order) into the counters and gauges."""
        if not rows:
            return
        for column, metric in (("messages", self.messages), ("bytes", self.bytes), ("failed", self.failed),
                               ("skipped_loop", self.skipped), ("duplicates_avoided", self.duplicates_avoided)):
            total = sum(int(r.get(column) or 0) for r in rows)  # a column added later is absent from older tables
            if total:
                metric.labels(link).inc(total)
        for counter in (self.messages, self.bytes, self.failed, self.skipped, self.duplicates_avoided):
            counter.labels(link)  # every counter shows the link, even at 0
        newest = max(rows, key=lambda r: (r["committed_at"], r["batch_id"]))
        for column, gauge in (("latency_p50_ms", self.latency_p50), ("latency_p99_ms", self.latency_p99),
                              ("record_age_ms", self.record_age)):
            if newest[column] is not None:
                gauge.labels(link).set(newest[column] / 1000)
        self.last_batch.labels(link).set(newest["committed_at"].timestamp())


class MetricsTableFeed:
    """New rows of one link's Delta ``metrics`` table since the feed started (driver, one thread)."""

    def __init__(self, link: LinkConfig, *, since: datetime) -> None:
        self.link = link.name
        self._tables = LinkTables.for_link(link)
        self._since = since
        self._at_since: set[tuple[str, int]] = set()
        """(query id, batch id) of the rows committed exactly at ``_since`` already returned."""

    def new_rows(self) -> list[dict[str, Any]]:
        dt = self._tables.open(METRICS)
        if dt is None:
            return []
        try:
            data = dt.to_pyarrow_dataset().to_table(
                filter=pc.field("committed_at") >= pa.scalar(self._since, pa.timestamp("us", tz="UTC")))
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read {self._tables.path(METRICS)}: {exc}") from exc
        rows = [r for r in data.to_pylist() if (r["query_id"], r["batch_id"]) not in self._at_since]
        if rows:
            newest = max(r["committed_at"] for r in rows)
            if newest > self._since:
                self._since, self._at_since = newest, set()
            self._at_since |= {(r["query_id"], r["batch_id"]) for r in rows if r["committed_at"] == newest}
        return rows


class ConnectorStateFeed:
    """One link's checkpoint and config-sync state for the gauges, read incrementally from their Delta
    tables (driver, the endpoint's feed thread; see the module docstring). ``None`` = no value yet."""

    def __init__(self, link: LinkConfig) -> None:
        self.link = link.name
        self._checkpoints = CheckpointTables(link.tables_location) if link.checkpoints.enabled else None
        self._config = ConfigTables(link.tables_location) if link.config_sync.enabled else None
        self._seen: dict[str, tuple[int, datetime]] = {}
        """Table -> (Delta version, newest ``committed_at``) of the last read."""
        self.newest_checkpoint_ms: int | None = None
        """Snapshot time of the newest complete checkpoint (``newest_complete_snapshot_ms``)."""
        self.shared_queues: int | None = None
        """Target queues the newest checkpoint read marks shared (``shared_target_queues``)."""
        self.pending_changes: int | None = None
        """Not-applied config changes standing (``applier.fold_pending`` of every row read so far)."""
        self._standing: dict[ChangeKey, str] = {}

    @property
    def deferred_changes(self) -> int | None:
        """Of ``pending_changes``, the DEFERRED ones standing (a broker group unreachable)."""
        if self.pending_changes is None:
            return None
        return sum(1 for status in self._standing.values() if status == ChangeStatus.DEFERRED.value)

    def update(self) -> None:
        """Read what was committed since the last call; ``TableError`` when a table cannot be read."""
        if self._checkpoints is not None:
            rows = self._new_rows(self._checkpoints, CHECKPOINTS, ["group", "outcome", "snapshot_at", "detail",
                                                                   "target_topic", "target_broker", "target_queue_id"])
            newest = None if rows is None else newest_complete_snapshot_ms(rows)
            if newest is not None:
                self.newest_checkpoint_ms = max(newest, self.newest_checkpoint_ms or newest)
            shared = None if rows is None else shared_target_queues(rows)
            if shared is not None:
                self.shared_queues = shared
        if self._config is not None:
            rows = self._new_rows(self._config, CONFIG_CHANGES, ["kind", "subject", "status"])
            if rows is not None:
                # the rows start at the newest round read before: folding it again changes nothing
                self.pending_changes = fold_pending(self._standing, rows)
            elif self.pending_changes is None and self._config.open(CONFIG_CHANGES) is None:
                self.pending_changes = 0  # no round has recorded anything yet: nothing stands

    def _new_rows(self, tables: DeltaTableSet, table: str, columns: list[str]) -> pa.Table | None:
        """``columns`` + ``committed_at`` of the rows committed at or after the newest commit read before
        (all rows the first time); None when the table does not exist or has no new version."""
        dt = tables.open(table)
        if dt is None:
            return None
        version = dt.version()
        seen = self._seen.get(table)
        if seen is not None and seen[0] == version:
            return None
        since = None if seen is None else pc.field("committed_at") >= pa.scalar(seen[1], pa.timestamp("us", tz="UTC"))
        try:
            rows = dt.to_pyarrow_dataset().to_table(columns=[*columns, "committed_at"], filter=since)
        except (DeltaError, OSError, pa.ArrowException) as exc:
            raise TableError(f"cannot read {tables.path(table)}: {exc}") from exc
        newest = pc.max(rows["committed_at"]).as_py() if rows.num_rows else None
        if newest is not None:
            self._seen[table] = (version, newest)
        elif seen is not None:
            self._seen[table] = (version, seen[1])
        return rows


def shared_target_queues(rows: pa.Table) -> int | None:
    """Distinct target queues marked ``SHARED_DETAIL`` in the newest checkpoint of ``rows`` (columns
    ``snapshot_at``, ``detail``, ``target_topic``, ``target_broker``, ``target_queue_id``) that has a target
    queue at all; None when none has (only conditions, e.g. the source unreachable: the count stands)."""
    entries = list(zip(rows["snapshot_at"].to_pylist(), rows["detail"].to_pylist(), rows["target_topic"].to_pylist(),
                       rows["target_broker"].to_pylist(), rows["target_queue_id"].to_pylist(), strict=True))
    newest = max((e[0] for e in entries if e[0] is not None and e[2] is not None), default=None)
    if newest is None:
        return None
    return len({(topic, broker, queue) for snapshot, detail, topic, broker, queue in entries
                if snapshot == newest and (detail or "").startswith(SHARED_DETAIL)})


class HeartbeatCollector(Collector):
    """The heartbeat gauges, computed from ``HeartbeatMonitor`` at each scrape."""

    def __init__(self, monitor: HeartbeatMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[Metric]:
        def family(name: str, doc: str, labels: Sequence[str] = ("link",)) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, labels=list(labels))

        lag = family("heartbeat_lag_seconds", "Newest heartbeat: target store time - source born time")
        p99 = family("heartbeat_lag_p99_1h_seconds", "99th percentile of heartbeat lag over the last hour")
        age = family("heartbeat_age_seconds", "Now - born time of the newest heartbeat arrived on the target")
        interval = family("heartbeat_interval_seconds", "Configured heartbeat interval")
        startup = family("heartbeat_startup_limit_seconds",
                         "How long after the job's start a link whose heartbeats do not flow yet is starting")
        born = family("heartbeat_born_timestamp_seconds", "Born time of the newest arrived heartbeat")
        arrived = family("heartbeat_arrival_timestamp_seconds", "Target store time of the newest arrived heartbeat")
        seen = family("heartbeat_last_seen_timestamp_seconds", "When the monitor read the newest heartbeat")
        state = family("link_state", "1 for the link's heartbeat status, 0 for the others", ("link", "state"))
        for s in self.monitor.states():
            age.add_metric([s.link], s.age_ms / 1000)
            interval.add_metric([s.link], self.monitor.interval_ms / 1000)
            startup.add_metric([s.link], self.monitor.startup_limit_ms / 1000)
            for value, fam in ((s.lag_ms, lag), (s.lag_p99_ms, p99), (s.born_ms, born), (s.arrived_ms, arrived),
                               (s.last_seen_ms, seen)):
                if value is not None:
                    fam.add_metric([s.link], value / 1000)
            for status in LinkStatus:
                state.add_metric([s.link, status.value], 1.0 if s.status is status else 0.0)
        yield from (lag, p99, age, interval, startup, born, arrived, seen, state)


def metrics_settings(settings: MetricsSettings, port: int | None) -> MetricsSettings:
    """``settings`` with the port a job's ``--metrics-port`` gave (None: the config's)."""
    return settings if port is None else settings.model_copy(update={"port": port})


def serve(settings: MetricsSettings, registry: CollectorRegistry, *, where: str = "metrics.port") -> Any:
    """Serve ``registry`` at ``settings``; ``MetricsPortInUseError`` naming the port when it is taken."""
    try:
        server, _thread = start_http_server(settings.port, settings.host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsPortInUseError(
                f"port {settings.port} on {settings.host} is already in use; stop what holds it or choose another "
                f"port (0 = no endpoint)", field=where) from exc
        raise ReplicatorConfigError(f"cannot serve metrics on {settings.host}:{settings.port}: {exc.strerror or exc}",
                                    field=where) from exc
    return server


class MetricsEndpoint:
    """The endpoint of one job: replication metrics of ``links`` (from their Delta tables) and, given a
    monitor, the heartbeat metrics. ``start`` binds the port first (raising before any thread starts)."""

    def __init__(self, settings: MetricsSettings, links: Iterable[LinkConfig], *,
                 monitor: HeartbeatMonitor | None = None, feed_interval: float = FEED_INTERVAL,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.settings = settings
        self.registry = CollectorRegistry()
        self.replication = ReplicationMetrics(self.registry)
        if monitor is not None:
            self.registry.register(HeartbeatCollector(monitor))
        started = now()
        links = list(links)
        self._feeds = [MetricsTableFeed(link, since=started) for link in links]
        self._state_feeds = [ConnectorStateFeed(link) for link in links
                             if link.checkpoints.enabled or link.config_sync.enabled]
        self._now = now
        for feed in self._feeds:
            for counter in (self.replication.messages, self.replication.bytes, self.replication.failed,
                            self.replication.skipped):
                counter.labels(feed.link)  # every link shows, at 0 before its first batch
        self._feed_interval = feed_interval
        self._server: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()

    def start(self) -> None:
        self._server = serve(self.settings, self.registry)
        log.info("metrics at %s", self.settings.url)
        self._thread = threading.Thread(target=self._run, name="metrics-feed", daemon=True)
        self._thread.start()

    def feed_once(self) -> None:
        for feed in self._feeds:
            try:
                rows = feed.new_rows()
            except ReplicatorError as exc:
                if feed.link not in self._failing:
                    self._failing.add(feed.link)
                    log.warning("link %s: metrics table not readable (%s); retrying", feed.link, exc)
                continue
            self._failing.discard(feed.link)
            self.replication.add_batches(feed.link, rows)
        for state in self._state_feeds:
            try:
                state.update()
            except ReplicatorError as exc:
                if state.link + "/state" not in self._failing:
                    self._failing.add(state.link + "/state")
                    log.warning("link %s: checkpoint / config-sync table not readable (%s); retrying", state.link, exc)
                continue
            self._failing.discard(state.link + "/state")
            self._set_state_gauges(state)

    def _set_state_gauges(self, state: ConnectorStateFeed) -> None:
        if state.newest_checkpoint_ms is not None:
            newest_s = state.newest_checkpoint_ms / 1000
            # computed at each scrape, so the age is exact then, not as of the last read
            self.replication.checkpoint_age.labels(state.link).set_function(
                lambda: max(0.0, self._now().timestamp() - newest_s))
        if state.pending_changes is not None:
            self.replication.config_pending.labels(state.link).set(state.pending_changes)
            self.replication.config_deferred.labels(state.link).set(state.deferred_changes or 0)
        if state.shared_queues is not None:
            self.replication.checkpoint_shared.labels(state.link).set(state.shared_queues)

    def _run(self) -> None:
        while not self._stop.wait(self._feed_interval):
            self.feed_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
