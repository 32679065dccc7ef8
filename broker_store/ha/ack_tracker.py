"""Puts waiting for replica acks on a primary: each resolves PUT_OK or FLUSH_SLAVE_TIMEOUT, never blocking.

Pure state with an injected clock, owned by ``Quorum``. A put that ended at CommitLog offset E and
needs N copies (primary included) waits for N-1 connected replicas to ack an offset at or past E,
for at most the slave timeout. Any number of puts wait at once (pipelined): ``wait`` returns a
future at once, ``on_acks`` resolves every satisfied waiter, ``expire`` times out the late ones;
the I/O layer calls ``expire`` at ``next_deadline()`` (one timer, no sleeping).

Ordering: waiters needing the same N are resolved in end-offset order (a replica's ack covers every
byte below it, so the satisfied ones are always a prefix). Within one call, all resolutions are made
in ascending end offset, across different N too.

Shared waiters (``share_until_sealed``, set by the primary's HA service): puts with the same N made
between two ``seal()`` calls share one waiter and one future, which resolves once an ack reaches the
latest of their end offsets and times out at the first one's deadline. The service seals once per loop
turn, so a waiter holds the puts decoded together (one read of a producer connection), which are shipped
together and acked by the same replica report anyway: one future per turn instead of one per put.

Futures are ``concurrent.futures.Future`` so they fit the store's durability future (the
``DurabilityPolicy`` steps return that type); await them with ``asyncio.wrap_future``. Callers must not
cancel one when waiters are shared (puts of the same turn would see it cancelled). Contract: not
thread-safe; call every method from the one event-loop thread that runs puts and HA links.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
from bisect import bisect_right
from collections import deque

from broker_store.clock import Clock
from broker_store.store import PutStatus

AckFuture = concurrent.futures.Future[PutStatus]


class _Waiter:
    """One put waiting for acks (a plain slotted class: one is built per synchronous put)."""

    __slots__ = ("end_offset", "need_replicas", "deadline", "seq", "future", "settled")

    def __init__(self, end_offset: int, need_replicas: int, deadline: float, seq: int) -> None:
        self.end_offset = end_offset
        """CommitLog offset just past the put's last byte; an ack at or past it covers the put."""
        self.need_replicas = need_replicas
        """Replica acks required: needAck - 1."""
        self.deadline = deadline
        self.seq = seq
        self.future: AckFuture = concurrent.futures.Future()
        self.settled = False
        """Resolved by this tracker (a cancelled future is found by ``future.done()`` instead)."""


class AckTracker:
    """Pending puts grouped by how many replica acks they need, each group in end-offset order."""

    def __init__(self, clock: Clock, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"slave timeout must be > 0 seconds, got {timeout}")
        self._clock = clock
        self._timeout = timeout
        self._groups: dict[int, deque[_Waiter]] = {}
        self._deadlines: list[tuple[float, int, _Waiter]] = []
        self._seq = itertools.count()
        self._pending = 0
        self._open: dict[int, _Waiter] = {}
        self.share_until_sealed = False
        """Puts between two ``seal()`` calls share a waiter (see the module docstring); off by default."""

    @property
    def pending(self) -> int:
        """Waiters still pending (one per put, or per sealed group of puts when shared; cancelled ones
        included until they are swept)."""
        return self._pending

    def seal(self) -> None:
        """Later puts start new waiters (with ``share_until_sealed``; the HA service calls it each loop turn)."""
        if self._open:
            self._open.clear()

    def wait(self, end_offset: int, need_acks: int, ack_offsets: list[int]) -> AckFuture:
        """A future for a put ending at ``end_offset`` that needs ``need_acks`` copies, primary included.

        ``ack_offsets`` are the connected replicas' current acks (``ReplicaLinks.ack_offsets()``): a put
        already covered resolves at once. ``need_acks`` <= 1 needs no replica and is PUT_OK at once.
        """
        need_replicas = max(need_acks - 1, 0)
        if _covered(need_replicas, ack_offsets) >= end_offset:
            return _put_ok()
        if self.share_until_sealed:
            shared = self._open.get(need_replicas)
            group = self._groups.get(need_replicas)
            if (shared is not None and not shared.settled and shared.end_offset <= end_offset
                    and group and group[-1] is shared):
                shared.end_offset = end_offset  # still the group's last waiter: the order holds
                return shared.future
        waiter = _Waiter(end_offset, need_replicas, self._clock.monotonic() + self._timeout, next(self._seq))
        if self.share_until_sealed:
            self._open[need_replicas] = waiter
        group = self._groups.setdefault(waiter.need_replicas, deque())
        if not group or group[-1].end_offset <= end_offset:
            group.append(waiter)
        else:  # an out-of-order put (not expected from one writer): keep the group sorted anyway
            group.insert(bisect_right([w.end_offset for w in group], end_offset), waiter)
        heapq.heappush(self._deadlines, (waiter.deadline, waiter.seq, waiter))
        self._pending += 1
        return waiter.future

    def on_acks(self, ack_offsets: list[int]) -> int:
        """Resolve PUT_OK every waiter the replicas' current acks cover; returns how many resolved."""
        done: list[_Waiter] = []
        for need, group in self._groups.items():
            covered = _covered(need, ack_offsets)
            while group and group[0].end_offset <= covered:
                done.append(group.popleft())
        # One group is already in end-offset order; several are merged by _resolve's sort.
        resolved = self._resolve(done, PutStatus.PUT_OK, ordered=len(self._groups) <= 1)
        self._drop_resolved_deadlines()
        return resolved

    def expire(self) -> int:
        """Resolve FLUSH_SLAVE_TIMEOUT every waiter whose deadline has passed; returns how many."""
        now = self._clock.monotonic()
        late: list[_Waiter] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            waiter = heapq.heappop(self._deadlines)[2]
            if not waiter.future.done():
                late.append(waiter)
        if late:
            gone = set(map(id, late))
            for need, group in self._groups.items():
                self._groups[need] = deque(w for w in group if id(w) not in gone)
        return self._resolve(late, PutStatus.FLUSH_SLAVE_TIMEOUT)

    def next_deadline(self) -> float | None:
        """Clock time of the earliest pending deadline (None when nothing waits)."""
        self._drop_resolved_deadlines()
        return self._deadlines[0][0] if self._deadlines else None

    def _drop_resolved_deadlines(self) -> None:
        # Acks resolve the oldest puts first, so resolved ones leave from the heap's front; without this
        # the heap would hold every put acked since the last timer tick (seconds of puts).
        deadlines = self._deadlines
        while deadlines and (deadlines[0][2].settled or deadlines[0][2].future.done()):
            heapq.heappop(deadlines)  # resolved or cancelled meanwhile

    def fail_all(self, status: PutStatus) -> int:
        """Resolve every waiter with ``status`` (shutdown, or a role change away from primary)."""
        everyone = [w for group in self._groups.values() for w in group]
        self._groups.clear()
        self._open.clear()
        self._deadlines.clear()
        return self._resolve(everyone, status)

    def _resolve(self, waiters: list[_Waiter], status: PutStatus, ordered: bool = False) -> int:
        if not ordered:
            waiters.sort(key=lambda w: (w.end_offset, w.seq))
        resolved = 0
        for waiter in waiters:
            self._pending -= 1
            waiter.settled = True
            # A waiter whose future the caller cancelled is simply dropped.
            if waiter.future.set_running_or_notify_cancel():
                waiter.future.set_result(status)
                resolved += 1
        return resolved


def _put_ok() -> AckFuture:
    future: AckFuture = concurrent.futures.Future()
    future.set_result(PutStatus.PUT_OK)
    return future


def _covered(need_replicas: int, ack_offsets: list[int]) -> int:
    """Highest offset at least ``need_replicas`` of the acks reach (acks sorted highest first)."""
    if need_replicas <= 0:
        return 2**63 - 1
    if need_replicas > len(ack_offsets):
        return -1
    return ack_offsets[need_replicas - 1]
