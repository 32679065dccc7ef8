"""Riding out a cluster that is unavailable: blocking retries with capped doubling backoff for up to a
link's ``retry_timeout_ms``, then a typed error. The one implementation of that rule for both ends of a
link: the target side (``connectors.replication.outage.TargetOutage``, executor sends and routes) and
the source side (``SourceOutage`` below: executor pulls in ``connectors.replication.pulling`` and the
reader's driver-side admin calls in ``connectors.replication.reader``).

Time is a parameter (``broker_store.clock.ThreadClock``, the one clock's thread side): unit tests drive
``OutageTimer`` with a fake clock instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.errors import RequestTimeoutError, RocketMQError
from connectors.core.errors import SourceUnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_OUTAGE_BACKOFF_MS = 10
"""Floor of the outage backoff, so retry_backoff_ms=0 does not spin on a refused connection."""
WARN_EVERY_WAITS = 10
"""An outage logs a WARNING on its first wait and on every this many waits after it."""


def once_more_on_new_route(call: Callable[[], T]) -> T:
    """``call``, repeated once at once when it fails with an ``invalid_route`` error, before any outage policy
    applies. A primary that died or was replaced (a controller-mode failover) answers that way; the client
    dropped the route on it, so the second try asks the name servers and reaches the new primary. Every
    Spark Python worker keeps its own route cache, so without this each one would fail its first request
    after a failover and wait a backoff (or a whole trigger) for nothing. Not after a timeout: the request
    may have been applied (a send stored twice) and a second one would wait as long again. Any other error,
    or a second failure, is the caller's."""
    try:
        return call()
    except RocketMQError as exc:
        if not worth_once_more(exc):
            raise
    return call()


def worth_once_more(exc: RocketMQError) -> bool:
    """The rule of ``once_more_on_new_route``: an ``invalid_route`` error that is not a timeout."""
    return exc.invalid_route and not isinstance(exc, RequestTimeoutError)



@dataclass(frozen=True)
class OutagePolicy:
    """How long and how often an unavailable cluster is retried (a link's ``RetrySettings``)."""

    timeout_ms: int
    """Total time an outage may last before the operation fails (``retry_timeout_ms``)."""
    backoff_ms: int
    """First wait (``retry_backoff_ms``), floored at ``MIN_OUTAGE_BACKOFF_MS``; doubled per wait."""
    backoff_max_ms: int
    """Cap of the doubling wait (``retry_backoff_max_ms``)."""

    def delay(self, started: float, waits: int, now: float) -> float | None:
        """Seconds to wait before retry number ``waits`` (0-based) of an outage that began at ``started``
        (monotonic seconds), or ``None`` when the budget is spent. The last wait is cut to the budget."""
        budget = self.timeout_ms / 1000
        elapsed = now - started
        if budget - elapsed < 0.001:
            # spent, or a sliver left by float rounding: a wait of ~1e-14 s would not move a clock that counts
            # from a large origin, and the caller would retry without end
            return None
        first = max(self.backoff_ms, MIN_OUTAGE_BACKOFF_MS)
        delay_ms: int = max(min(self.backoff_max_ms, first << min(waits, 30)), MIN_OUTAGE_BACKOFF_MS)
        return min(delay_ms / 1000, budget - elapsed)


class OutageTimer:
    """One retry loop's view of an outage: when it began and how many waits it took. ``wait`` sleeps
    (or returns ``None`` when the budget is spent, the caller then raises its typed error); ``reset``
    after a success, so the next outage gets the whole budget again. Not thread-safe: one per loop."""

    def __init__(self, policy: OutagePolicy, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.policy = policy
        self.clock = clock
        self.started: float | None = None
        self.waits = 0

    @property
    def elapsed(self) -> float:
        return 0.0 if self.started is None else self.clock.monotonic() - self.started

    def next_delay(self) -> float | None:
        """Seconds to wait before the next retry (counted as taken), or ``None`` when the outage has
        lasted ``policy.timeout_ms``. The first call starts the outage."""
        now = self.clock.monotonic()
        if self.started is None:
            self.started = now
        delay = self.policy.delay(self.started, self.waits, now)
        if delay is not None:
            self.waits += 1
        return delay

    def wait(self) -> float | None:
        """``next_delay`` and sleep it; returns the seconds slept (``None``: budget spent, no sleep)."""
        delay = self.next_delay()
        if delay is not None:
            self.clock.block(delay)
        return delay

    def reset(self) -> None:
        self.started = None
        self.waits = 0


class SourceOutage:
    """Blocking retries while the *source* cluster of a link is unavailable: connection refused or lost,
    timeouts, busy / not-available answers, a broker missing from the route, a name server without any
    broker. Shared by the calls of one task (executor pulls) or one reader (driver admin calls);
    ``retries`` counts every repeated call. Thread-safe counter; each ``call`` has its own timer.

    ``cluster_has_brokers``: asks the source's name servers whether any broker is registered; used for
    errors that only say the route is stale (a missing topic route while every broker is down and
    expired is an outage, while a permission error on a live cluster is not)."""

    def __init__(self, *, link: str, cluster: str, namesrv: str, policy: OutagePolicy,
                 cluster_has_brokers: Callable[[], bool], clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.link = link
        self.cluster = cluster
        self.namesrv = namesrv
        self.policy = policy
        self.clock = clock
        self._cluster_has_brokers = cluster_has_brokers
        self._lock = threading.Lock()
        self.retries = 0
        """Calls repeated because the source was unavailable."""

    def unavailable(self, error: RocketMQError) -> bool:
        """True when ``error`` says the source cannot serve now (as opposed to a request it refuses)."""
        if error.retriable:
            return True
        if not error.invalid_route:
            return False
        try:
            return not self._cluster_has_brokers()
        except RocketMQError:
            return True

    def expired(self, timer: OutageTimer, error: RocketMQError, what: str) -> SourceUnavailableError:
        """The error that ends a call after the outage outlasted the budget; one line."""
        return SourceUnavailableError(
            f"link {self.link}: source cluster {self.cluster} (namesrv {self.namesrv}) unavailable for "
            f"{timer.elapsed:.1f}s while {what}: {type(error).__name__}: {error}",
            link=self.link, cluster=self.cluster, namesrv=self.namesrv)

    def record_wait(self, timer: OutageTimer, error: RocketMQError, what: str) -> None:
        """Sleep before retrying ``what`` (or raise ``SourceUnavailableError`` when the budget is spent)."""
        delay = timer.next_delay()
        if delay is None:
            raise self.expired(timer, error, what) from error
        with self._lock:
            self.retries += 1
        if (timer.waits - 1) % WARN_EVERY_WAITS == 0:
            log.warning("link %s: source cluster %s (namesrv %s) unavailable while %s (%s: %s); retrying in "
                        "%.2fs (%.1fs of %.0fs retry_timeout_ms spent)", self.link, self.cluster, self.namesrv,
                        what, type(error).__name__, error, delay, timer.elapsed, self.policy.timeout_ms / 1000)
        timer.clock.block(delay)

    def call(self, fn: Callable[[], T], what: str) -> T:
        """``fn()``, repeated with backoff while the source is unavailable (``unavailable``); any other
        error is raised at once. ``what`` names the operation in logs and the final error."""
        timer = OutageTimer(self.policy, self.clock)
        while True:
            try:
                result = fn()
            except RocketMQError as exc:
                if not self.unavailable(exc):
                    raise
                self.record_wait(timer, exc, what)
                continue
            if timer.waits:
                log.info("link %s: source cluster %s reachable again after %.1fs (%s)", self.link, self.cluster,
                         timer.elapsed, what)
            return result
