"""Per-link heartbeat state on the target: born time, arrival time, lag, last seen, and whether the link
is healthy, lagging, broken or merely idle.

Fed on the job's driver by ``connectors.heartbeat.monitor_loop`` with the heartbeats it reads on both
clusters; read by the Prometheus collector (``jobs.metrics``) at every scrape. Pure, with an injected
clock; thread-safe (the loop writes while the HTTP server reads).

Status of a link at time ``now`` (``stale_after`` = ``STALE_INTERVALS`` x interval; "age" = now - born
time of the newest heartbeat that arrived on the target, or now - monitor start before the first;
``startup_limit`` = ``heartbeat.startup_limit``, at least stale_after)::

    STARTING  nothing arrived yet for this link and the monitor runs for at most startup_limit
    OK        age <= stale_after and the newest heartbeat's lag <= lagging_threshold
    LAGGING   age <= stale_after and that lag > lagging_threshold
    BROKEN    age > stale_after while the source stores heartbeats of this link newer than the newest
              arrived one, the newest of them born within stale_after: the source is healthy and
              producing, the link is not carrying them (replication stopped, target down, ...)
    IDLE      age > stale_after and no heartbeat was produced on the source within stale_after: the
              heartbeat producer or the source cluster is down; the link itself may be fine

The born time is the source producer's clock, the arrival time the target broker's and "now" the
monitor's: lag and age assume clocks in sync to well under an interval (NTP).

The monitor start is the job's start: the jobs build the monitor before Spark (``jobs.query_supervisor.
prepare_job``), so STARTING covers the whole Spark start-up (session, queries, first batches), which takes
many intervals with short ones. It is the start of this process, not of the link's Spark queries or
checkpoints (those outlive a restart and appear only once Spark is up), nor the first heartbeat produced
(there is none until the heartbeat query runs, and the topic keeps those of earlier runs). Each link's
STARTING ends with its own first arrival; after that, or once startup_limit has passed, only the age
rules apply: a job that never delivers a heartbeat is BROKEN or IDLE after startup_limit, as before
after stale_after.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from connectors.heartbeat.records import Observed

LAG_WINDOW_MS = 3_600_000
"""The window of ``lag_p99_ms``: the last hour of arrivals."""


class LinkStatus(StrEnum):
    STARTING = "starting"
    OK = "ok"
    LAGGING = "lagging"
    BROKEN = "broken"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class LinkHeartbeat:
    """A link's heartbeat state at ``now_ms``."""

    link: str
    status: LinkStatus
    now_ms: int
    seq: int | None
    """Sequence number of the newest heartbeat arrived on the target."""
    born_ms: int | None
    """Its born time on the source."""
    arrived_ms: int | None
    """Its store time on the target."""
    lag_ms: int | None
    """arrived - born of that heartbeat."""
    last_seen_ms: int | None
    """When the monitor read it (monitor clock)."""
    age_ms: int
    """now - born of the newest arrived heartbeat (now - monitor start before the first)."""
    lag_p99_ms: int | None
    """99th percentile of the lags of the heartbeats arrived in the last hour."""
    produced_born_ms: int | None
    """Born time of the newest heartbeat of the link stored on the source."""


@dataclass
class _LinkState:
    newest: Observed | None = None
    last_seen_ms: int | None = None
    produced_born_ms: int | None = None
    window: deque[tuple[int, int]] = field(default_factory=deque)
    """(last seen ms, lag ms) of the arrivals within ``LAG_WINDOW_MS``."""


class HeartbeatMonitor:
    """The heartbeat state of a set of links (see the module docstring)."""

    def __init__(self, links: Iterable[str], *, interval_ms: int, lagging_threshold_ms: int, stale_intervals: int,
                 startup_limit_ms: int, clock_ms: Callable[[], int]) -> None:
        self.interval_ms = interval_ms
        self.lagging_threshold_ms = lagging_threshold_ms
        self.stale_after_ms = stale_intervals * interval_ms
        # A shorter limit cannot apply: before the first arrival the age counts from the monitor start, so a
        # link is not stale for stale_after anyway; the limit only ever lengthens that grace.
        self.startup_limit_ms = max(startup_limit_ms, self.stale_after_ms)
        """How long after the monitor start a link without any arrival is STARTING."""
        self._clock_ms = clock_ms
        self._started_ms = clock_ms()
        self._links = {name: _LinkState() for name in links}
        self._lock = threading.Lock()

    @property
    def links(self) -> list[str]:
        return list(self._links)

    def on_produced(self, observed: Iterable[Observed]) -> None:
        """Heartbeats read on the source cluster (unknown links are ignored)."""
        with self._lock:
            for o in observed:
                state = self._links.get(o.heartbeat.link)
                if state is not None and (state.produced_born_ms is None
                                          or o.heartbeat.born_ms > state.produced_born_ms):
                    state.produced_born_ms = o.heartbeat.born_ms

    def on_arrived(self, observed: Iterable[Observed]) -> list[Observed]:
        """Heartbeats read on the target cluster; returns those of the monitored links (what the
        ``heartbeats`` table records). An arrival not newer than the newest one (late, or a second copy
        of a batch the replication re-sent: at-least-once) only joins the window: the newest keeps its
        first arrival."""
        now = self._clock_ms()
        kept: list[Observed] = []
        with self._lock:
            for o in observed:
                state = self._links.get(o.heartbeat.link)
                if state is None:
                    continue
                kept.append(o)
                state.window.append((now, o.lag_ms))
                if state.newest is None or o.heartbeat.born_ms > state.newest.heartbeat.born_ms:
                    state.newest = o
                    state.last_seen_ms = now
            for state in self._links.values():
                while state.window and state.window[0][0] < now - LAG_WINDOW_MS:
                    state.window.popleft()
        return kept

    def state(self, link: str) -> LinkHeartbeat:
        """The link's state now; ``KeyError`` for a link not monitored."""
        now = self._clock_ms()
        with self._lock:
            s = self._links[link]
            newest = s.newest
            lags = sorted(lag for seen, lag in s.window if seen >= now - LAG_WINDOW_MS)
            produced = s.produced_born_ms
            last_seen = s.last_seen_ms
        age = now - (newest.heartbeat.born_ms if newest is not None else self._started_ms)
        lag = newest.lag_ms if newest is not None else None
        return LinkHeartbeat(
            link=link, status=self._status(now, newest, produced, age), now_ms=now,
            seq=newest.heartbeat.seq if newest else None, born_ms=newest.heartbeat.born_ms if newest else None,
            arrived_ms=newest.store_ms if newest else None, lag_ms=lag, last_seen_ms=last_seen, age_ms=age,
            lag_p99_ms=percentile(lags, 0.99), produced_born_ms=produced)

    def states(self) -> list[LinkHeartbeat]:
        return [self.state(link) for link in self._links]

    def _status(self, now: int, newest: Observed | None, produced_born_ms: int | None, age: int) -> LinkStatus:
        if newest is None:
            if now - self._started_ms <= self.startup_limit_ms:
                return LinkStatus.STARTING
        elif age <= self.stale_after_ms:
            return LinkStatus.LAGGING if newest.lag_ms > self.lagging_threshold_ms else LinkStatus.OK
        arrived_born = newest.heartbeat.born_ms if newest is not None else None
        producing = produced_born_ms is not None and now - produced_born_ms <= self.stale_after_ms
        if producing and (arrived_born is None or (produced_born_ms or 0) > arrived_born):
            return LinkStatus.BROKEN
        return LinkStatus.IDLE


def percentile(sorted_values: list[int], q: float) -> int | None:
    """Nearest-rank percentile of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, -(-int(q * 1000) * len(sorted_values) // 1000))  # ceil(q * n) without float error
    return sorted_values[min(rank, len(sorted_values)) - 1]
