"""The heartbeat monitor's driver thread: polls the heartbeat topic on each link's source (what was
produced) and target (what arrived), feeds ``HeartbeatMonitor`` and records arrivals in each link's
Delta ``heartbeats`` table.

Started by ``jobs/heartbeat.py`` in the job's own process, beside the producer query, so the
Prometheus gauges read the monitor directly at every scrape. It is not a Spark query: its output is
those gauges and a few rows per interval, and a streaming query would put the state in a Spark Python
worker (the gauges would then have to go through the table) and pay a trigger's fixed cost per poll.

A heartbeat counts for its link only on the clusters the link names: as produced when read on the
link's source, as arrived when read on its target. In a chain A -> B -> C the link B -> C carries the
heartbeats of A -> B to C too; those are ignored there.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Sequence

from broker_store.clock import SYSTEM_CLOCK, StopSignal, ThreadClock, wall_ms
from connectors.core.config import ReplicatorConfig
from connectors.core.errors import ClusterUnreachableError, ReplicatorError
from connectors.core.monitoring import STALE_INTERVALS
from connectors.heartbeat.monitor import HeartbeatMonitor
from connectors.heartbeat.records import Observed
from connectors.heartbeat.tables import HeartbeatTables
from connectors.heartbeat.tail import HeartbeatTail

log = logging.getLogger(__name__)

MAX_POLL_INTERVAL = 2.0
"""Seconds between two polls at most; with short heartbeat intervals, half an interval."""


class HeartbeatMonitorLoop:
    """See the module docstring. ``start`` / ``stop`` from the job's main thread. The thread waits between polls
    on ``clock`` (a ``StopSignal``), so ``stop`` ends the wait at once and a ``ManualClock`` paces the polls."""

    def __init__(self, config: ReplicatorConfig, links: Sequence[str], *,
                 clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.links = [config.link(name) for name in links]
        settings = config.heartbeat
        self.monitor = HeartbeatMonitor(links, interval_ms=settings.interval_ms,
                                        lagging_threshold_ms=round(settings.lagging_threshold * 1000),
                                        stale_intervals=STALE_INTERVALS, startup_limit_ms=settings.startup_limit_ms,
                                        clock=clock)
        self.poll_interval = min(settings.interval / 2, MAX_POLL_INTERVAL)
        self._clock = clock
        clusters = {link.source for link in self.links} | {link.target for link in self.links}
        self._tails = {name: HeartbeatTail(";".join(config.cluster(name).namesrv),
                                           credentials=config.cluster(name).credentials(),
                                           tls=config.cluster(name).tls)
                       for name in sorted(clusters)}
        self._sources = sorted({link.source for link in self.links})
        self._targets = sorted({link.target for link in self.links})
        self._tables = {link.name: HeartbeatTables.for_link(link, clock=clock) for link in self.links}
        self._run_id = f"heartbeat-monitor-{uuid.uuid4()}"
        self._poll = 0
        self._unreachable: set[str] = set()
        self._stop = StopSignal(clock)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="heartbeat-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for tail in self._tails.values():
            tail.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.sleep(self.poll_interval)

    def poll_once(self) -> None:
        """One round: produced heartbeats from the sources, arrivals from the targets, the table rows."""
        for cluster in self._sources:
            produced = self._read(cluster)
            self.monitor.on_produced(o for o in produced if o.heartbeat.source == cluster)
        arrivals: list[Observed] = []
        for cluster in self._targets:
            arrivals.extend(o for o in self._read(cluster) if o.heartbeat.target == cluster)
        kept = self.monitor.on_arrived(arrivals)
        if not kept:
            return
        seen = wall_ms(self._clock)
        per_link: dict[str, list[Observed]] = defaultdict(list)
        for o in kept:
            per_link[o.heartbeat.link].append(o)
        for link, rows in per_link.items():
            try:
                self._tables[link].record(self._run_id, self._poll, rows, seen)
            except ReplicatorError as exc:
                log.warning("link %s: %d heartbeat(s) not recorded in the heartbeats table: %s", link, len(rows), exc)
        self._poll += 1

    def _read(self, cluster: str) -> list[Observed]:
        """A cluster's new heartbeats; a cluster that does not answer is logged once until it does."""
        try:
            observed = self._tails[cluster].poll()
        except ClusterUnreachableError as exc:
            if cluster not in self._unreachable:
                self._unreachable.add(cluster)
                log.warning("heartbeat monitor: cluster %s unreachable (%s); retrying every %.1f s", cluster, exc,
                            self.poll_interval)
            return []
        if cluster in self._unreachable:
            self._unreachable.discard(cluster)
            log.info("heartbeat monitor: cluster %s reachable again", cluster)
        return observed
