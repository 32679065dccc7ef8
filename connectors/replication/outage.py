"""Waiting out a target cluster that cannot take writes (as opposed to one that refuses a message).

Executor only: one ``TargetOutage`` per write task, shared by queue placement (``placement``) and the
sends (``sending``); see "Target unavailable vs. message refused" in ``connectors.replication.writer``.
"""

from __future__ import annotations

import logging
import time

from broker_store.protocol.errors import RocketMQError
from connectors.core.errors import TargetUnavailableError
from connectors.core.executor import executor_admin
from connectors.replication.writer_options import SinkOptions

log = logging.getLogger(__name__)


def retriable(exc: RocketMQError) -> bool:
    """The send may succeed when repeated (a retriable error or a stale route)."""
    return bool(exc.retriable or exc.invalid_route)


sleep = time.sleep
monotonic = time.monotonic
"""Module-level so unit tests can drive the outage retries without waiting."""
_MIN_OUTAGE_BACKOFF_MS = 10
"""Floor of the outage backoff, so retryBackoffMs=0 does not spin on a refused connection."""


class TargetOutage:
    """Blocking retries while the target cluster is unavailable (see the module docstring); one per
    task, shared by queue placement and sends. Executor only."""

    def __init__(self, options: SinkOptions) -> None:
        self.o = options
        self.retries = 0
        """Attempts (sends and route look-ups) repeated because the target was unavailable."""

    def unavailable(self, error: RocketMQError) -> bool:
        """True when ``error`` says the target cannot take writes now, as opposed to refusing this
        message. Retriable errors always do; a missing route / permission only when the target's name
        servers are unreachable or list no broker at all (every broker down and expired)."""
        if error.retriable:
            return True
        if not error.invalid_route:
            return False
        try:
            info = executor_admin(self.o.namesrv, self.o.credentials).cluster_info()
        except RocketMQError:
            return True
        return not info.broker_addr_table

    def wait(self, error: RocketMQError, what: str, started: float, waits: int) -> None:
        """Sleep before retry number ``waits`` of an outage that began at ``started`` (monotonic), or
        raise ``TargetUnavailableError`` when ``retryTimeoutMs`` is spent."""
        o = self.o
        elapsed = monotonic() - started
        budget = o.retry_timeout_ms / 1000
        if elapsed >= budget:
            raise TargetUnavailableError(
                f"link {o.label}: target {o.namesrv} unavailable for {elapsed:.1f}s while sending to {what} "
                f"(retryTimeoutMs {o.retry_timeout_ms}); last error {type(error).__name__}: {error}") from error
        delay_ms = min(o.retry_backoff_max_ms,
                       max(o.retry_backoff_ms, _MIN_OUTAGE_BACKOFF_MS) * (2 ** min(waits, 30)))
        delay = min(max(delay_ms, _MIN_OUTAGE_BACKOFF_MS) / 1000, budget - elapsed)
        if waits % 10 == 0:
            log.warning("link %s: target unavailable (%s: %s) while sending to %s; retrying in %.2fs "
                        "(%.1fs of %.0fs retryTimeoutMs spent)", o.label, type(error).__name__, error, what,
                        delay, elapsed, budget)
        self.retries += 1
        sleep(delay)
