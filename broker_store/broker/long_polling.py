"""Suspended pulls waiting for new messages (RocketMQ's PullRequestHoldService, as futures).

The pull processor registers a waiter ``(topic, queue, offset)`` and awaits its future; the store's
arrival listener calls ``notify(topic, queue, new_max_offset)`` after each dispatch and wakes every
waiter whose offset is now below the queue's end. ``notify`` may run on any thread: off the loop
thread it hops onto the loop with ``call_soon_threadsafe``.

Race contract: register first, then re-read the queue's max offset; a message dispatched between
the processor's first read and the registration is then seen by that re-read.
"""

from __future__ import annotations

import asyncio
import threading


class PullWaiters:
    """Waiters keyed by (topic, queue id). Created on, and owned by, the broker's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = {}

    def add(self, topic: str, queue_id: int, offset: int) -> asyncio.Future[None]:
        """A future resolved once the queue's max offset exceeds ``offset`` (or on ``wake_all``)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.setdefault((topic, queue_id), []).append((offset, fut))
        return fut

    def discard(self, topic: str, queue_id: int, fut: asyncio.Future[None]) -> None:
        key = (topic, queue_id)
        entries = self._waiters.get(key)
        if entries is None:
            return
        remaining = [e for e in entries if e[1] is not fut]
        if remaining:
            self._waiters[key] = remaining
        else:
            del self._waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener; cheap when nobody waits on this queue."""
        if (topic, queue_id) not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(topic, queue_id, max_offset)
        else:
            self._loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        key = (topic, queue_id)
        entries = self._waiters.get(key)
        if not entries:
            return
        keep = []
        for offset, fut in entries:
            if max_offset > offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        if keep:
            self._waiters[key] = keep
        else:
            del self._waiters[key]

    def wake_all(self) -> None:
        """Release every waiter (shutdown); each re-reads the store and answers."""
        for entries in self._waiters.values():
            for _, fut in entries:
                if not fut.done():
                    fut.set_result(None)
        self._waiters.clear()

    def __len__(self) -> int:
        return sum(len(v) for v in self._waiters.values())
