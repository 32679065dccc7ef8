"""The replicator's consumer group on the source (CID_RMQ_SYS_REPLICATOR_<link>), mirrored from the
sink's driver commit so that admin tools show the truth: lag 0 once everything is replicated.

Called on the driver by ``RocketMQStreamWriter.commit`` after the batch's Delta offsets commit (so after
the target durably accepted the batch), with the batch's end offsets from Spark's offset log. The reader's
own ``commit(end)`` mirror cannot do this: Spark calls it only when planning the *next* batch, so the
last batch of an AvailableNow run, or the last before the link went idle or stopped, never showed.

No latency per batch: ``offer`` only hands the offsets to a background thread of this process (one per
source group), which sends UPDATE_CONSUMER_OFFSET for the queues whose offset changed since it last
succeeded, so the commit path pays only a hand-over (figures in ``benchmarks/MEASUREMENTS.md``). Offers made
while an update runs are coalesced (newest offset per queue wins). ``flush``
waits for what was offered; the writer's ``abort`` and the process's exit (``atexit``) call it, so the
last batch's offsets go out before the commit worker ends. Advisory only: the checkpoint and the Delta
offsets table are what the query resumes from, so a failed update is retried with the next offer, never
raised. Failures are a standing condition per source broker group (``connectors.core.standing``): one WARNING
when a group's updates start failing (a broker down fails every batch's update until it is back), one INFO
when they succeed again, not a line per batch.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from broker_store.client import MessageQueue, TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import RocketMQError
from connectors.core.executor import executor_consumer
from connectors.core.offsets import queue_key
from connectors.core.outage import worth_once_more
from connectors.core.standing import StandingConditions

log = logging.getLogger(__name__)

EXIT_FLUSH_TIMEOUT_S = 10.0
"""How long the process's exit waits for the last offsets to go out."""

Update = Callable[[Sequence[tuple[MessageQueue, int]]], list[RocketMQError | None]]
"""Sends queues' offsets for the group (concurrently); each one's error or None, in order."""


class SourceGroupMirror:
    """Coalescing background mirror of one source group's offsets; see the module docstring.
    Thread-safe: ``offer`` and ``flush`` may be called from any thread."""

    def __init__(self, group: str, update: Update, *, label: str = "") -> None:
        self.group = group
        self.label = label or group
        self._update = update
        self._cond = threading.Condition()
        self._pending: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}
        self._busy = False
        self._thread: threading.Thread | None = None
        self.updates = 0
        """Queue offsets sent successfully (for tests and the debug line)."""
        self._failing: StandingConditions[str, str] = StandingConditions()
        """Broker group -> the error type its updates fail with (reported when it starts and clears)."""

    def offer(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Mirror ``offsets`` (next offset per source queue) soon; returns at once."""
        with self._cond:
            self._pending.update(offsets)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"source-group-mirror-{self.group}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every offered offset was sent (or failed and was logged); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def committed(self) -> dict[MessageQueue, int]:
        """The offsets the group holds as far as this mirror knows."""
        with self._cond:
            return dict(self._committed)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending), timeout=60.0)
                if not self._pending:  # idle for a minute: the thread ends, the next offer starts one
                    self._thread = None
                    return
                offered, self._pending = self._pending, {}
                changed = [(q, n) for q, n in offered.items() if self._committed.get(q) != n]
                self._busy = True
            try:
                self._send(changed)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, changed: list[tuple[MessageQueue, int]]) -> None:
        if not changed:
            return
        errors = self._update(changed)
        failures: dict[str, tuple[MessageQueue, int, RocketMQError, int]] = {}
        with self._cond:
            for (queue, offset), error in zip(changed, errors, strict=True):
                if error is None:
                    self._committed[queue] = offset
                    self.updates += 1
                    continue
                first = failures.get(queue.broker_name)
                failures[queue.broker_name] = (first[0], first[1], first[2], first[3] + 1) if first else (
                    queue, offset, error, 1)
        tried = {queue.broker_name for queue, _ in changed}
        done = self._failing.update({broker: type(f[2]).__name__ for broker, f in failures.items()},
                                    judged=tried.__contains__)
        for broker, _ in (*done.started, *done.changed):
            queue, offset, error, count = failures[broker]
            log.warning("link %s: could not mirror offsets to source group %s on broker group %s (%d queue(s); "
                        "first: offset %d of %s): %s; retried with each batch, reported again when it clears",
                        self.label, self.group, broker, count, offset, queue_key(queue), error)
        for broker, _ in done.cleared:
            log.info("link %s: offsets mirrored to source group %s on broker group %s again", self.label,
                     self.group, broker)
        failed = sum(f[3] for f in failures.values())
        log.debug("link %s: mirrored %d queue offset(s) to source group %s (%d failed)", self.label,
                  len(changed) - failed, self.group, failed)


_mirrors_lock = threading.Lock()
_mirrors: dict[tuple[str, str, SessionCredentials | None, TlsClientSettings | None], SourceGroupMirror] = {}


def source_group_mirror(namesrv: str, group: str, credentials: SessionCredentials | None, *,
                        label: str = "", tls: TlsClientSettings | None = None) -> SourceGroupMirror:
    """The process's mirror of ``group`` on the source cluster at ``namesrv`` (driver: the Python worker
    that runs the writer's commits, reused across batches)."""
    key = (namesrv, group, credentials, tls)
    with _mirrors_lock:
        mirror = _mirrors.get(key)
        if mirror is None:
            def update(changed: Sequence[tuple[MessageQueue, int]]) -> list[RocketMQError | None]:
                consumer = executor_consumer(namesrv, group, 10_000, credentials, tls=tls)
                offsets = list(changed)
                errors = consumer.update_consumer_offsets(offsets)
                again = [i for i, error in enumerate(errors) if error is not None and worth_once_more(error)]
                if again:  # once more on the new route, as once_more_on_new_route does for one call
                    retried = consumer.update_consumer_offsets([offsets[i] for i in again])
                    for i, error in zip(again, retried, strict=True):
                        errors[i] = error
                return errors

            if not _mirrors:
                atexit.register(_flush_all)
            mirror = _mirrors[key] = SourceGroupMirror(group, update, label=label)
        return mirror


def _flush_all() -> None:
    with _mirrors_lock:
        mirrors = list(_mirrors.values())
    for mirror in mirrors:
        if not mirror.flush(EXIT_FLUSH_TIMEOUT_S):
            log.warning("source group %s: offsets not mirrored before exit", mirror.group)
