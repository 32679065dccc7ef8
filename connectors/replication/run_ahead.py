"""One call run ahead of its use in a daemon thread: the replication reader's queue discovery for the next
trigger, started as soon as a trigger has planned its batch (``reader.latestOffset``).

Why. Across a WAN each trigger's ``latestOffset`` asked the source two round trips in series: the routes of the
link's topics (its queues: a topic that grew, a new topic of a pattern) and then every queue's offsets. The
offsets must be fresh (they are the batch's end); the queue list may be one trigger old, so it is fetched
between triggers and the trigger pays one round trip (``benchmarks/wan.py``; figures in
``benchmarks/MEASUREMENTS.md``). The cost: a queue or topic that appears is read one trigger later.

``take`` waits for the call started by ``start`` and returns its result, or None when none was started or it
failed (the caller then calls synchronously and meets the error itself, with its own outage budget). A daemon
thread, so a call stuck in a source outage never holds up the driver's exit. No clock, no sockets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class RunAhead(Generic[T]):
    """At most one call of ``fn`` in flight; see the module docstring. Driver-thread use only."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._name = name
        self._pending: Future[T] | None = None

    def start(self) -> None:
        """Start the call unless one is in flight or waiting to be taken."""
        if self._pending is not None:
            return
        future: Future[T] = Future()
        self._pending = future

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self._fn())
            except Exception as exc:  # noqa: BLE001 - handed to take(); the caller then calls again itself
                future.set_exception(exc)

        threading.Thread(target=run, name=self._name, daemon=True).start()

    def take(self) -> T | None:
        """The started call's result (waiting for it), or None: none started, or it failed (logged at DEBUG)."""
        future, self._pending = self._pending, None
        if future is None:
            return None
        try:
            return future.result()
        except Exception as exc:  # noqa: BLE001 - any failure: the caller calls again and meets it itself
            log.debug("%s ahead of its use failed (%s); asked again now", self._name, exc)
            return None

    def cancel(self) -> None:
        """Forget the call in flight (its thread ends on its own; its result is dropped)."""
        future, self._pending = self._pending, None
        if future is not None:
            future.cancel()
