"""Per-link heartbeat state on the target: born time, arrival time, lag, last seen, and whether the link
is healthy, lagging, broken or merely idle.

Fed on the job's driver by ``connectors.heartbeat.monitor_loop`` with the heartbeats it reads on both
clusters; read by the Prometheus collector (``jobs.metrics``) at every scrape. Pure, with an injected
clock; thread-safe (the loop writes while the HTTP server reads).

Status of a link at time ``now`` (``stale_after`` = ``STALE_INTERVALS`` x interval; "age" = now - born
time of the newest heartbeat that arrived on the target, or now - monitor start before the first;
``startup_limit`` = ``heartbeat.startup_limit``, at least stale_after)::

    STARTING  age > stale_after, the monitor runs for at most startup_limit and the link has not started
              up yet: its heartbeats have not yet arrived in time (each within stale_after of its born
              time) for stale_after without a gap. Within the limit a link that started up is BROKEN or
              IDLE as below; one that has not is never stale yet, only OK, LAGGING or STARTING
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
(there is none until the heartbeat query runs, and the topic keeps those of earlier runs). A link's
start-up ends when its heartbeats flow, not with its first arrival: with 1 s heartbeats the first ones
after a start arrive late (born while its replication query was starting) and then seconds apart while
the job's queries and Python workers warm up (several intervals of lag and gaps, benchmarks/MEASUREMENTS.md).
After that, or once startup_limit has passed, only the age rules
apply: a link that never starts up is BROKEN or IDLE after startup_limit, as before after stale_after.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from broker_store.clock import ThreadClock, wall_ms
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
    in_time_since_ms: int | None = None
    """When the current run of in-time arrivals began (monitor clock): every newest heartbeat since then
    arrived within stale_after of its born time, and the age never passed stale_after in between."""
    started_up: bool = False
    """That run lasted stale_after once: the link's start-up is over for good (no STARTING any more)."""
    window: deque[tuple[int, int]] = field(default_factory=deque)
    """(last seen ms, lag ms) of the arrivals within ``LAG_WINDOW_MS``."""


class HeartbeatMonitor:
    """The heartbeat state of a set of links (see the module docstring)."""

    def __init__(self, links: Iterable[str], *, interval_ms: int, lagging_threshold_ms: int, stale_intervals: int,
                 startup_limit_ms: int, clock: ThreadClock) -> None:
        self.interval_ms = interval_ms
        self.lagging_threshold_ms = lagging_threshold_ms
        self.stale_after_ms = stale_intervals * interval_ms
        # A shorter limit cannot apply: before the first arrival the age counts from the monitor start, so a
        # link is not stale for stale_after anyway; the limit only ever lengthens that grace.
        self.startup_limit_ms = max(startup_limit_ms, self.stale_after_ms)
        """How long after the monitor start a link that has not started up is STARTING, not stale."""
        self._clock = clock
        self._started_ms = wall_ms(clock)
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
        now = wall_ms(self._clock)
        kept: list[Observed] = []
        with self._lock:
            for o in observed:
                state = self._links.get(o.heartbeat.link)
                if state is None:
                    continue
                kept.append(o)
                state.window.append((now, o.lag_ms))
                if state.newest is None or o.heartbeat.born_ms > state.newest.heartbeat.born_ms:
                    self._track_start_up(state, o, now)
                    state.newest = o
                    state.last_seen_ms = now
            for state in self._links.values():
                while state.window and state.window[0][0] < now - LAG_WINDOW_MS:
                    state.window.popleft()
        return kept

    def _track_start_up(self, state: _LinkState, newest: Observed, now: int) -> None:
        """Fold a new newest heartbeat into the link's run of in-time arrivals (``_LinkState``)."""
        if state.started_up:
            return
        in_time = now - newest.heartbeat.born_ms <= self.stale_after_ms
        # the age just before this arrival: now - born of the previous newest
        unbroken = state.newest is not None and now - state.newest.heartbeat.born_ms <= self.stale_after_ms
        if not in_time:
            state.in_time_since_ms = None
        elif state.in_time_since_ms is None or not unbroken:
            state.in_time_since_ms = now
        state.started_up = (state.in_time_since_ms is not None
                            and now - state.in_time_since_ms >= self.stale_after_ms)

    def state(self, link: str) -> LinkHeartbeat:
        """The link's state now; ``KeyError`` for a link not monitored."""
        now = wall_ms(self._clock)
        with self._lock:
            s = self._links[link]
            newest = s.newest
            lags = sorted(lag for seen, lag in s.window if seen >= now - LAG_WINDOW_MS)
            produced = s.produced_born_ms
            last_seen = s.last_seen_ms
            started_up = s.started_up
        age = now - (newest.heartbeat.born_ms if newest is not None else self._started_ms)
        lag = newest.lag_ms if newest is not None else None
        return LinkHeartbeat(
            link=link, status=self._status(now, newest, produced, age, started_up), now_ms=now,
            seq=newest.heartbeat.seq if newest else None, born_ms=newest.heartbeat.born_ms if newest else None,
            arrived_ms=newest.store_ms if newest else None, lag_ms=lag, last_seen_ms=last_seen, age_ms=age,
            lag_p99_ms=percentile(lags, 0.99), produced_born_ms=produced)

    def states(self) -> list[LinkHeartbeat]:
        return [self.state(link) for link in self._links]

    def _status(self, now: int, newest: Observed | None, produced_born_ms: int | None, age: int,
                started_up: bool) -> LinkStatus:
        if newest is not None and age <= self.stale_after_ms:
            return LinkStatus.LAGGING if newest.lag_ms > self.lagging_threshold_ms else LinkStatus.OK
        if not started_up and now - self._started_ms <= self.startup_limit_ms:
            return LinkStatus.STARTING
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
