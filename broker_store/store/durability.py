"""When a stored message counts as durable: the steps a put waits for before its producer is answered.

Owned by ``MessageStore`` (every put's ``PutResult.durable`` comes from ``DurabilityPolicy.durable``);
the broker's send processor only awaits that future and maps its status to a response. The store
installs a flush step for SYNC_FLUSH; replication appends its replica-ack step with ``add_step``, so
one future covers both, as RocketMQ's CommitLog.asyncPutMessage -> handleDiskFlushAndHA combines
the flush and the HA futures. A step may also refuse a put before it is appended (``admit``): the
replica-ack step answers IN_SYNC_REPLICAS_NOT_ENOUGH that way, so a refused message is not stored
(RocketMQ 5 checks the in-sync count before appending too).

Contract: steps run on the put's thread (the loop thread) and must not block; their futures may be
resolved on any thread. A message whose WAIT property is ``false`` waits for no step.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from typing import Protocol, cast

from broker_store.store.results import DurableFuture, PutStatus, resolved


class DurabilityStep(Protocol):
    """One condition a stored message must meet before the put is acknowledged."""

    name: str
    """Short name for logs, e.g. "flush" or "replica-ack"."""

    def wait(self, end_offset: int) -> DurableFuture | None:
        """None when the bytes up to ``end_offset`` already meet the step; otherwise a future resolving to
        PUT_OK or to this step's failure status (its timeout, or the store stopping/truncating)."""
        ...


class AdmissionStep(DurabilityStep, Protocol):
    """A step that can also refuse a put before the append (nothing is written then)."""

    def admit(self, max_offset: int) -> tuple[PutStatus, str] | None:
        """None to let the put in; else the status and remark to answer it with. ``max_offset`` is the
        CommitLog's max offset before the append."""
        ...


class DurabilityPolicy:
    """The ordered steps of the broker's durability policy; empty = acknowledged once written (ASYNC_FLUSH)."""

    def __init__(self, steps: Sequence[DurabilityStep] = ()) -> None:
        self._steps: tuple[DurabilityStep, ...] = ()
        self._admissions: tuple[AdmissionStep, ...] = ()
        for step in steps:
            self.add_step(step)

    @property
    def steps(self) -> tuple[DurabilityStep, ...]:
        return self._steps

    def add_step(self, step: DurabilityStep) -> None:
        """Append a step (replication adds its replica acks after the flush). Puts after this wait for it;
        a step with an ``admit`` method is also asked before each append."""
        self._steps = (*self._steps, step)
        if callable(getattr(step, "admit", None)):
            self._admissions = (*self._admissions, cast(AdmissionStep, step))

    def remove_step(self, step: DurabilityStep) -> None:
        """Drop a step (a primary becoming a replica stops waiting for replica acks). No-op if absent."""
        self._steps = tuple(s for s in self._steps if s is not step)
        self._admissions = tuple(s for s in self._admissions if s is not step)

    @property
    def admits_all(self) -> bool:
        """True when no step can refuse a put (the put path then skips ``admit``)."""
        return not self._admissions

    def admit(self, max_offset: int, wait_store_msg_ok: bool = True) -> tuple[PutStatus, str] | None:
        """Before the append: the first refusal of a step (status, remark), or None. A put that does not
        wait (WAIT=false) is never refused, as it waits for no step."""
        if not wait_store_msg_ok:
            return None
        for step in self._admissions:
            refusal = step.admit(max_offset)
            if refusal is not None:
                return refusal
        return None

    def durable(self, end_offset: int, wait_store_msg_ok: bool = True) -> DurableFuture:
        """One future for every step, started together (the flush and the replica acks run in parallel)."""
        steps = self._steps
        if not steps or not wait_store_msg_ok:
            return resolved(PutStatus.PUT_OK)
        if len(steps) == 1:  # one step (replica acks, or the flush): its future is the put's
            future = steps[0].wait(end_offset)
            return resolved(PutStatus.PUT_OK) if future is None else future
        pending = [f for f in (step.wait(end_offset) for step in steps) if f is not None]
        if not pending:
            return resolved(PutStatus.PUT_OK)
        if len(pending) == 1:
            return pending[0]
        return _all_of(pending)


def _status_of(future: DurableFuture) -> PutStatus:
    if future.cancelled() or future.exception() is not None:
        return PutStatus.UNKNOWN_ERROR
    return future.result()


def _all_of(futures: list[DurableFuture]) -> DurableFuture:
    """PUT_OK once all are PUT_OK; else the first failing status in list order (after all resolved)."""
    combined: DurableFuture = concurrent.futures.Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: DurableFuture) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        status = next((s for s in map(_status_of, futures) if s is not PutStatus.PUT_OK), PutStatus.PUT_OK)
        if not combined.done():
            try:
                combined.set_result(status)
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by the waiter meanwhile
    for f in futures:
        f.add_done_callback(one_done)
    return combined
