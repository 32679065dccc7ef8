"""Waiting out a target cluster that cannot take writes (as opposed to one that refuses a message).

Executor only: one ``TargetOutage`` per write task, shared by queue placement (``placement``) and the
sends (``sending``); see "Target unavailable vs. message refused" in ``connectors.replication.writer``.
"""

from __future__ import annotations

import logging

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from broker_store.protocol.errors import RequestTimeoutError, RocketMQError
from connectors.core.errors import TargetUnavailableError
from connectors.core.executor import executor_admin
from connectors.core.outage import WARN_EVERY_WAITS, OutagePolicy
from connectors.replication.writer_options import SinkOptions

log = logging.getLogger(__name__)


def retriable(exc: RocketMQError) -> bool:
    """The send may succeed when repeated (a retriable error or a stale route)."""
    return bool(exc.retriable or exc.invalid_route)


def stale_primary(exc: RocketMQError) -> bool:
    """The send failed on a primary that died or is fenced (connection refused or lost, SERVICE_NOT_AVAILABLE):
    the client dropped the route, so a send at once may reach the new primary. Not a timeout (the batch may be
    stored: it is re-sent after the backoff like any outage) nor a missing topic (a refusal on a live target)."""
    return bool(exc.retriable and exc.invalid_route and not isinstance(exc, RequestTimeoutError))


class TargetOutage:
    """Blocking retries while the target cluster is unavailable (see the module docstring); one per
    task, shared by queue placement and sends. Executor only. The backoff and the budget are the one
    rule of ``connectors.core.outage.OutagePolicy``, shared with the source side."""

    def __init__(self, options: SinkOptions, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.o = options
        self.policy = OutagePolicy(options.retry_timeout_ms, options.retry_backoff_ms, options.retry_backoff_max_ms)
        self.clock = clock
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
            info = executor_admin(self.o.namesrv, self.o.credentials, self.o.tls).cluster_info()
        except RocketMQError:
            return True
        return not info.broker_addr_table

    def wait(self, error: RocketMQError, what: str, started: float, waits: int) -> None:
        """Sleep before retry number ``waits`` of an outage that began at ``started`` (``clock``'s
        monotonic time), or raise ``TargetUnavailableError`` when ``retry_timeout_ms`` is spent. The messages
        name the cluster as the source side's do (``connectors.core.outage.SourceOutage``): its configured name,
        its name servers, and the link's setting by its YAML key (the Spark option is ``retryTimeoutMs``)."""
        o = self.o
        elapsed = self.clock.monotonic() - started
        delay = self.policy.delay(started, waits, started + elapsed)
        if delay is None:
            raise TargetUnavailableError(
                f"link {o.label}: target cluster {o.target_cluster} (namesrv {o.namesrv}) unavailable for "
                f"{elapsed:.1f}s while sending to {what} (retry_timeout_ms {o.retry_timeout_ms}): "
                f"{type(error).__name__}: {error}") from error
        if waits % WARN_EVERY_WAITS == 0:
            log.warning("link %s: target cluster %s (namesrv %s) unavailable while sending to %s (%s: %s); "
                        "retrying in %.2fs (%.1fs of %.0fs retry_timeout_ms spent)", o.label, o.target_cluster,
                        o.namesrv, what, type(error).__name__, error, delay, elapsed, o.retry_timeout_ms / 1000)
        self.retries += 1
        self.clock.block(delay)
