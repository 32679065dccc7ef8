"""What a send that may repeat an earlier one still has to send: the sink's recovery check, as pure decisions.

Rule. A batch may already be (partly) on its target queue when an earlier attempt could have sent it: the
batch re-runs after a restart, Spark retries the task, or a send of it got no answer (``may_have_stored``).
Before such a send, the sink reads the target queue's tail and parses every message's position property
(``source_position``); an entry whose source position is already there is not sent again, and its offset
mapping points where the earlier copy landed (the lowest target offset holding it). Messages of another
cluster's link, or without a position (the target's own producers), are foreign: left alone and counted.

How much of the tail is read. Batches of a link commit in order and each source queue's messages are sent in
offset order, so everything an attempt of this task sent of source queue S lies after the last message of S
that an earlier, committed batch sent: a message of S (from this link's source cluster) whose source offset is
below the first offset this task sends of S. That message is the anchor: the tail is read backwards, window by
window, from the queue's end until every source queue of the batch is anchored or the queue's first offset is
reached. The anchor is the last committed target offset of the (source queue, target queue) pair, found on
the target itself: the check depends on nothing but the property (any RocketMQ target, no Delta read on
executors).

Called on executors by ``sending.BatchSender`` through ``target_tail.TargetTails`` (the I/O); this module holds
the state of what was read (``TailIndex``) and the decisions (``plan_resend``, ``may_have_stored``). No
sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from broker_store.client import MessageQueue
from broker_store.protocol.errors import (
    AclPermissionError,
    MessageIllegalError,
    NoPermissionError,
    RocketMQError,
    ServiceNotAvailableError,
    SystemBusyError,
    TlsRequiredError,
    TopicNotExistError,
)
from connectors.replication.source_position import SourcePosition

REFUSED_BEFORE_STORING: tuple[type[RocketMQError], ...] = (
    SystemBusyError, ServiceNotAvailableError, TopicNotExistError, MessageIllegalError, NoPermissionError,
    AclPermissionError, TlsRequiredError)
"""Answers a broker gives before it stores anything: a send that got one of them stored nothing."""


def may_have_stored(error: RocketMQError) -> bool:
    """Whether a send that failed with ``error`` may still have been stored: yes unless the broker answered
    with a refusal it gives before storing. No answer (timeouts, lost or refused connections) and the
    answers given after storing (flush or replica timeouts, a replica missing) all count as stored."""
    return not isinstance(error, REFUSED_BEFORE_STORING)


class TailEntry(NamedTuple):
    """One message read from a target queue's tail."""

    target_offset: int
    """Its queue offset on the target."""
    position: SourcePosition | None
    """Its parsed position property (None: it has none, or one not in the format)."""


@dataclass
class TailIndex:
    """What has been read of one target queue: the range ``[low, high)`` and, for the messages in it, where each
    of this link's source positions landed. Grows downwards (``add_older``) and upwards (``add_newer``)."""

    queue: MessageQueue
    """The target queue."""
    cluster: str
    """The link's source cluster: positions naming another cluster are foreign."""
    low: int
    high: int
    landed: dict[tuple[MessageQueue, int], int] = field(default_factory=dict)
    """(source queue, source offset) -> lowest target offset holding a copy."""
    lowest_seen: dict[MessageQueue, int] = field(default_factory=dict)
    """Per source queue of this link: the lowest source offset read in ``[low, high)`` (anchors)."""
    foreign: int = 0
    """Messages read that are not this link's: no position, or another cluster's."""

    @classmethod
    def empty_at(cls, queue: MessageQueue, cluster: str, end: int) -> TailIndex:
        """Nothing read yet, the queue's end (next offset to be written) at ``end``."""
        return cls(queue, cluster, end, end)

    def _add(self, entries: Iterable[TailEntry]) -> None:
        for entry in entries:
            position = entry.position
            if position is None or position.cluster != self.cluster:
                self.foreign += 1
                continue
            key = (position.queue, position.offset)
            known = self.landed.get(key)
            if known is None or entry.target_offset < known:
                self.landed[key] = entry.target_offset
            lowest = self.lowest_seen.get(position.queue)
            if lowest is None or position.offset < lowest:
                self.lowest_seen[position.queue] = position.offset

    def add_older(self, start: int, entries: Sequence[TailEntry]) -> None:
        """The messages of ``[start, low)`` (all of them that exist: a gap the broker skips is empty)."""
        if start >= self.low:
            return
        self._add(e for e in entries if start <= e.target_offset < self.low)
        self.low = start

    def add_newer(self, end: int, entries: Sequence[TailEntry]) -> None:
        """The messages of ``[high, end)``."""
        if end <= self.high:
            return
        self._add(e for e in entries if self.high <= e.target_offset < end)
        self.high = end

    def anchored(self, source: MessageQueue, first: int) -> bool:
        """Whether a message of ``source`` below ``first`` was read: every copy this task's attempts made of
        ``source`` from ``first`` on lies above it, inside what was read."""
        lowest = self.lowest_seen.get(source)
        return lowest is not None and lowest < first

    def needs_older(self, wanted: Mapping[MessageQueue, int], floor: int) -> bool:
        """Whether the tail must be read further down: a source queue of ``wanted`` (source queue -> first offset
        this task sends of it) is not anchored and ``low`` is above ``floor`` (the queue's first offset)."""
        return self.low > floor and not all(self.anchored(s, first) for s, first in wanted.items())


class ResendPlan(NamedTuple):
    """The decision for one batch: which of its entries to send, and where the others already are."""

    send: list[int]
    """Indices of the entries to send, in batch order."""
    landed: list[tuple[int, int]]
    """(index, target offset) of the entries already on the target queue, in batch order."""


def plan_resend(positions: Sequence[tuple[MessageQueue, int]], landed: Mapping[tuple[MessageQueue, int], int]
                ) -> ResendPlan:
    """Split a batch whose entry ``i`` has source position ``positions[i]`` (source queue, offset) into what
    to send and what is already on the target (``TailIndex.landed``)."""
    send: list[int] = []
    found: list[tuple[int, int]] = []
    for i, key in enumerate(positions):
        at = landed.get(key)
        if at is None:
            send.append(i)
        else:
            found.append((i, at))
    return ResendPlan(send, found)
