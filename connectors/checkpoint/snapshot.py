"""One snapshot of the source cluster's consumer-group offsets for a link: the checkpoint connector's
polling source.

``GroupOffsetPoller`` has the shape of bytewax's ``SimplePollingSource``: ``interval`` and ``next_item()``,
nothing else. It keeps no resume state: every snapshot is whole (each group's committed offsets as the
source brokers hold them now), so a re-run of a batch simply takes a newer one. Called on the Spark driver
by ``connectors.checkpoint.data_source.CheckpointStreamReader.read`` once per trigger, and by tests.

Offsets come from GET_ALL_CONSUMER_OFFSET on every broker group's primary of the source cluster (one
request per broker group, whatever the number of groups and topics); only groups the link's
``GroupSelection`` selects and topics its topic mapping replicates are kept. What cannot be read is
reported in the snapshot (``conditions``), never skipped silently: an explicit group with no offsets on
the source, a broker group that did not answer, a topic whose mapping fails.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from broker_store.client import Admin, MessageQueue
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.errors import RocketMQError
from connectors.core.errors import TopicMappingError
from connectors.core.sync_settings import GroupSelection
from connectors.core.topic_mapping import TopicMapper


class GroupOffset(NamedTuple):
    """A source group's committed offset on one source queue."""

    group: str
    queue: MessageQueue
    offset: int
    """The next offset the group would consume (RocketMQ commits next offsets)."""


class ConditionKind(enum.Enum):
    UNKNOWN_GROUP = "unknown_group"
    """An explicitly selected group has no offset on any linked topic of the source."""
    SOURCE_UNREACHABLE = "source_unreachable"
    """A source broker group did not answer; its queues are missing from this snapshot."""
    MAPPING_FAILED = "mapping_failed"
    """The link's topic mapping raised for a topic (invalid target name)."""


class Condition(NamedTuple):
    """Something a snapshot could not cover, reported with it."""

    kind: ConditionKind
    subject: str
    """The group, broker group or topic concerned."""
    detail: str


@dataclass(frozen=True)
class GroupOffsetSnapshot:
    """What ``GroupOffsetPoller.next_item`` returns."""

    taken_ms: int
    """Wall clock (ms since the epoch) when the source was read: the checkpoint's point in time."""
    offsets: tuple[GroupOffset, ...]
    conditions: tuple[Condition, ...] = ()

    def groups(self) -> list[str]:
        return sorted({o.group for o in self.offsets})


class GroupOffsetPoller:
    """Snapshots of the selected source groups' offsets on the linked topics, one per ``next_item()``."""

    def __init__(self, admin: Admin, source_cluster: str, mapper: TopicMapper, groups: GroupSelection, *,
                 interval: float, clock: ThreadClock = SYSTEM_CLOCK) -> None:
        """``admin``: a client of the source cluster; ``interval``: seconds between two calls of
        ``next_item`` (the caller's trigger; kept here so the polling shape is explicit)."""
        self.interval = interval
        self._admin = admin
        self._cluster = source_cluster
        self._mapper = mapper
        self._groups = groups
        self._clock = clock

    def next_item(self) -> GroupOffsetSnapshot:
        """Read every primary of the source cluster once. Never raises for the source: a broker group, a
        topic or the whole cluster that cannot be read becomes a ``condition`` of the snapshot (the query
        keeps running and reports it every interval)."""
        taken_ms = wall_ms(self._clock)
        conditions: list[Condition] = []
        try:
            primaries = self._admin.primary_addrs(self._cluster)
        except RocketMQError as exc:
            conditions.append(Condition(ConditionKind.SOURCE_UNREACHABLE, self._cluster,
                                        f"cannot list the source cluster's brokers: {exc}"))
            return GroupOffsetSnapshot(taken_ms, (), tuple(conditions))
        if not primaries:
            conditions.append(Condition(ConditionKind.SOURCE_UNREACHABLE, self._cluster,
                                        "no broker group of the source cluster has a primary registered"))
        offsets: list[GroupOffset] = []
        targets: dict[str, str | None] = {}
        for broker_name, addr in sorted(primaries.items()):
            try:
                table = self._admin.all_consumer_offsets(addr)
            except RocketMQError as exc:
                conditions.append(Condition(ConditionKind.SOURCE_UNREACHABLE, broker_name, f"{addr}: {exc}"))
                continue
            for (topic, group), queues in sorted(table.items()):
                if not self._groups.selects(group):
                    continue
                if topic not in targets:
                    targets[topic] = self._target(topic, conditions)
                if targets[topic] is None:
                    continue
                offsets.extend(GroupOffset(group, MessageQueue(topic, broker_name, q), off)
                               for q, off in sorted(queues.items()) if off >= 0)
        seen = {o.group for o in offsets}
        conditions.extend(Condition(ConditionKind.UNKNOWN_GROUP, g, "no committed offset on any linked topic of "
                                    "the source")
                          for g in self._groups.explicit if g not in seen)
        return GroupOffsetSnapshot(taken_ms, tuple(offsets), tuple(conditions))

    def _target(self, topic: str, conditions: list[Condition]) -> str | None:
        try:
            return self._mapper.target_for(topic)
        except TopicMappingError as exc:
            conditions.append(Condition(ConditionKind.MAPPING_FAILED, topic, str(exc)))
            return None


SNAPSHOT_SCHEMA_DDL = ("kind string, subject string, topic string, brokerName string, queueId int, "
                       "queueOffset long, takenMs long, detail string")
"""Rows of ``format("rocketmq_checkpoint")``: ``kind`` is ``snapshot``, ``offset`` (``subject`` = group) or a
``ConditionKind`` value (``subject`` = the group / broker group / topic concerned)."""


def snapshot_rows(snapshot: GroupOffsetSnapshot) -> Iterable[tuple[str, str, str, str, int, int, int, str]]:
    """The snapshot as the reader's rows (``SNAPSHOT_SCHEMA_DDL``): one ``snapshot`` row (so an empty
    snapshot still makes a batch), one ``offset`` row per group and queue, one row per condition."""
    yield ("snapshot", "", "", "", -1, -1, snapshot.taken_ms, "")
    for o in snapshot.offsets:
        yield ("offset", o.group, o.queue.topic, o.queue.broker_name, o.queue.queue_id, o.offset, snapshot.taken_ms,
               "")
    for c in snapshot.conditions:
        yield (c.kind.value, c.subject, "", "", -1, -1, snapshot.taken_ms, c.detail)


def snapshot_from_rows(rows: Iterable[tuple[str, str, str, str, int, int, int, str]]) -> GroupOffsetSnapshot:
    """The inverse of ``snapshot_rows`` (the writer's driver side rebuilds the snapshot)."""
    taken_ms = 0
    offsets: list[GroupOffset] = []
    conditions: list[Condition] = []
    for kind, subject, topic, broker, queue_id, offset, taken, detail in rows:
        taken_ms = max(taken_ms, int(taken))
        if kind == "offset":
            offsets.append(GroupOffset(subject, MessageQueue(topic, broker, int(queue_id)), int(offset)))
        elif kind != "snapshot":
            conditions.append(Condition(ConditionKind(kind), subject, detail))
    return GroupOffsetSnapshot(taken_ms, tuple(offsets), tuple(conditions))
