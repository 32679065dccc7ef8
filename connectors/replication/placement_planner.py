"""Queue placement decided on the driver, where a ``rowFormat=ranges`` batch is planned: every task of the
batch then agrees, and every decision is durable (the link's ``placements`` table) before any message
uses it.

Called by ``connectors.replication.reader`` on the driver: ``RangesPlacementPlanner.from_options`` when the
reader is built (a planner only for ``rowFormat=ranges`` with ``config`` + ``link``: the link names the
target cluster, the topic mapping and ``preserve_queues``), then ``place(ranges)`` in ``partitions``. The
ranges it returns are ``PlacedRange`` and carry the target queue to the sink in the range rows
(``placement_columns``: ``targetTopic`` / ``targetBroker`` / ``targetQueueId``), which sends to it as is.

Per batch: the decisions are caught up from the table (an executor may have decided one for a range the
planner could not place), the source queues without a decision for their target topic are decided by
``queue_placement.LinkPlacements`` from the source topic's and the target topic's queue lists now, and
the new ones are appended to the table and logged (once each) before ``place`` returns. A target topic
the target does not have is first created like its source topic(s) when the link's config sync runs
(``createTopicsLikeSource``: ``connectors.config_sync.creation``), so placement and config sync see the
queue count the source has, never the target's auto-create default; likewise, before new source queues are
placed on a target topic with fewer writable queues than it would then have source queues, the topic is grown
like its source first (``TargetTopicCreator.grow``), so a source topic's growth does not make its new queues
share target queues for good when config sync's round has not come yet. A target topic that still cannot be
listed (it will be auto-created, the target is down) leaves its ranges unplaced: the sink places them
(``placement.QueuePlacement``) with the same rule and the same decided placements, and the writer's commit
records what it decided.

Cost on the driver: a batch with new queues pays their decisions and one append; a batch with nothing to
decide only the table's version check (figures in ``benchmarks/MEASUREMENTS.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from broker_store.client import Admin, MessageQueue
from broker_store.client.route_cache import publish_queues, subscribe_queues
from broker_store.protocol.errors import RocketMQError, TopicNotExistError
from connectors.core.config import load_replicator_config
from connectors.core.errors import ReplicatorError
from connectors.core.options import lowered
from connectors.core.rows import COL_TARGET_BROKER, COL_TARGET_QUEUE_ID, COL_TARGET_TOPIC
from connectors.core.topic_mapping import TopicMapper
from connectors.replication.placement_table import DRIVER, PLACEMENTS, PlacementTable
from connectors.replication.planning import QueueRange
from connectors.replication.queue_placement import LinkPlacements, TargetQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacedRange(QueueRange):
    """A ``QueueRange`` whose source queue the driver placed on a target queue. Plain picklable data."""

    target_topic: str | None = None
    target_broker: str | None = None
    target_queue_id: int | None = None


def placement_columns(ranges: Sequence[QueueRange]) -> dict[str, list[Any]]:
    """The range rows' target columns (null for a range that is not a ``PlacedRange``)."""
    return {
        COL_TARGET_TOPIC: [getattr(r, "target_topic", None) for r in ranges],
        COL_TARGET_BROKER: [getattr(r, "target_broker", None) for r in ranges],
        COL_TARGET_QUEUE_ID: [getattr(r, "target_queue_id", None) for r in ranges],
    }


def log_decision(link: str, description: str, where: str) -> None:
    log.info("link %s: queue placement %s, decided on the %s; it stays for the life of the link", link,
             description, where)


class RangesPlacementPlanner:
    """Driver-only placement of a link's ranges (see the module docstring). Not picklable state: the reader
    keeps it out of what it ships to executors."""

    def __init__(self, *, link: str, mapper: TopicMapper, preserve: bool, table: PlacementTable,
                 source_queues: Callable[[str], list[MessageQueue]], target_queues: Callable[[str], list[TargetQueue]],
                 create_target_topic: Callable[[str], bool] | None = None,
                 grow_target_topic: Callable[[str], bool] | None = None,
                 close: Callable[[], None] = lambda: None) -> None:
        """``source_queues(topic)``: the source topic's readable queues now; ``target_queues(topic)``: the
        target topic's writable queues now (both raise ``RocketMQError`` when they cannot be listed);
        ``create_target_topic(topic)``: create a missing target topic like its source, True when it exists now
        (None: leave it to the sink's auto-create); ``grow_target_topic(topic)``: grow an existing target topic
        like its source, True when it grew (None: place on the queues there are)."""
        self.link = link
        self.mapper = mapper
        self.preserve = preserve
        self.table = table
        self._source_queues = source_queues
        self._target_queues = target_queues
        self._create_target_topic = create_target_topic
        self._grow_target_topic = grow_target_topic
        self._close = close
        self._rule = LinkPlacements()
        self._version: int | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str], *,
                     create_topics_like_source: bool = False) -> RangesPlacementPlanner | None:
        """The planner of a reader with these options, or None (not ``rowFormat=ranges`` with config+link).
        ``create_topics_like_source``: the reader's ``createTopicsLikeSource``."""
        opts = lowered(options)
        if opts.get("rowformat", "").strip().lower() != "ranges" or not opts.get("config") or not opts.get("link"):
            return None
        replicator = load_replicator_config(opts["config"])
        link = replicator.link(opts["link"])
        source, target = replicator.cluster(link.source), replicator.cluster(link.target)
        location = Path(opts.get("deltalocation") or link.delta_location) / link.name
        admins: dict[str, Admin] = {}  # created on first use: a reader that never plans opens no connection

        def admin(side: str) -> Admin:
            if side not in admins:
                cluster = source if side == "source" else target
                admins[side] = Admin(";".join(cluster.namesrv), credentials=cluster.credentials(), tls=cluster.tls)
            return admins[side]

        def source_queues(topic: str) -> list[MessageQueue]:
            return subscribe_queues(topic, admin("source").topic_route(topic))

        def target_queues(topic: str) -> list[TargetQueue]:
            return [TargetQueue(q.broker_name, q.queue_id)
                    for q in publish_queues(topic, admin("target").topic_route(topic))]

        def close() -> None:
            for client in admins.values():
                client.close()
            admins.clear()

        create_target_topic = grow_target_topic = None
        if create_topics_like_source:
            from connectors.config_sync.creation import TargetTopicCreator  # only for links whose config sync runs
            from connectors.config_sync.plan import ChangeStatus

            def creator() -> TargetTopicCreator:
                return TargetTopicCreator(link=link.name, source_admin=admin("source"), source_cluster=link.source,
                                          target_admin=admin("target"), topics=link.topics, settings=link.config_sync)

            def create_target_topic(topic: str) -> bool:
                change = creator().create(topic)
                return change is not None and change.status is ChangeStatus.APPLIED

            def grow_target_topic(topic: str) -> bool:
                change = creator().grow(topic)
                return change is not None and change.status is ChangeStatus.APPLIED

        return cls(link=link.name, mapper=TopicMapper(link.topics), preserve=link.preserve_queues,
                   table=PlacementTable(location, source_cluster=link.source), source_queues=source_queues,
                   target_queues=target_queues, create_target_topic=create_target_topic,
                   grow_target_topic=grow_target_topic, close=close)

    def close(self) -> None:
        self._close()

    def _catch_up(self) -> None:
        dt = self.table.open(PLACEMENTS)
        version = None if dt is None else dt.version()
        if version != self._version:
            self._rule = LinkPlacements(self.table.load())
            self._version = version

    def _target_topic(self, source_topic: str) -> str | None:
        try:
            return self.mapper.target_for(source_topic)
        except ReplicatorError:
            return None  # the sink records the messages as failed with the mapping error

    def _target_queues_creating(self, target_topic: str) -> list[TargetQueue]:
        """The target topic's writable queues; a topic the target lacks is created first when
        ``create_target_topic`` is given (tried again each batch while it fails: the sink's auto-create then
        takes over, as without it)."""
        try:
            return self._target_queues(target_topic)
        except TopicNotExistError:
            if self._create_target_topic is None or not self._create_target_topic(target_topic):
                raise
        return self._target_queues(target_topic)

    def place(self, ranges: Sequence[QueueRange]) -> list[QueueRange]:
        """``ranges`` with the target queue of each one's source queue (decided now if new, durable when
        this returns); ranges that cannot be placed are returned unchanged."""
        if not ranges:
            return list(ranges)
        self._catch_up()
        wanted: dict[tuple[str, str], set[MessageQueue]] = {}
        for r in ranges:
            target_topic = self._target_topic(r.topic)
            if target_topic is not None and self._rule.get(r.queue, target_topic) is None:
                wanted.setdefault((r.topic, target_topic), set()).add(r.queue)
        new = []
        for (source_topic, target_topic), sources in sorted(wanted.items()):
            try:
                source_queues = self._source_queues(source_topic)
                # every undecided queue of the source topic at once (as the sink's placement does): one durable
                # write per topic, not one per batch while queues take turns under maxMessagesPerTrigger
                sources = {q for q in sources.union(source_queues) if self._rule.get(q, target_topic) is None}
                target_queues = self._target_queues_creating(target_topic)
                already = sum(self._rule.load(target_topic).values())
                if (self._grow_target_topic is not None and len(target_queues) < already + len(sources)
                        and self._grow_target_topic(target_topic)):
                    target_queues = self._target_queues(target_topic)  # grown: one target queue per source queue
            except RocketMQError as exc:
                log.info("link %s: cannot place %s -> %s on the driver yet (%s); the sink places them", self.link,
                         source_topic, target_topic, exc)
                continue
            new.extend(self._rule.place(target_topic, sources, source_topic_queues=source_queues,
                                        target_queues=target_queues, preserve=self.preserve))
        if new:
            self.table.record(new, DRIVER)  # durable before any range that uses them leaves the driver
            self._version = -1  # re-read next time: the table's first row per queue is what stands
            for placement in new:
                log_decision(self.link, placement.describe(), "driver")
        placed: list[QueueRange] = []
        for r in ranges:
            target_topic = self._target_topic(r.topic)
            decision = None if target_topic is None else self._rule.get(r.queue, target_topic)
            if decision is None:
                placed.append(r)
                continue
            placed.append(PlacedRange(**asdict(r), target_topic=decision.target_topic,
                                      target_broker=decision.target.broker_name,
                                      target_queue_id=decision.target.queue_id))
        return placed
