"""Which target queue a source queue's messages go to, on the executor: the target queue the driver
placed a range on (``rowFormat=ranges`` with config+link: ``placement_planner``, pinned here as is), else
the link's decided placements and the same rule (``queue_placement``), kept stable while a target broker
group is missing from the route.

Executor only: one ``QueuePlacement`` per write task (``PartitionWriter``), the task's view of the link's
``LinkPlacements`` (its queue lists, the driver's pins, the decisions it made); the last full queue list of
each target topic is kept per executor process (``_seen_target_queues``), and so are the link's placements
table and its decisions (``_decided_cache``, caught up when the table has a new version).

With the link's tables (``deltaLocation`` + ``link``) a source queue without a decision gets one from
``queue_placement.LinkPlacements``, made for every undecided queue of its source topic at once, so every
task of a batch, seeing the same table and queue lists, decides alike; the new decisions go to the driver
in the commit message and the writer's ``commit`` records them before the batch's offsets. Without the
tables nothing can be remembered and the stateless rule of old applies: the n-th source queue on the
n-th target queue when the counts match, else a crc32 of (source broker, queue id).
"""

from __future__ import annotations

import logging
import threading
import zlib
from pathlib import Path

from broker_store.client import MessageQueue, Producer
from broker_store.client.route_cache import publish_queues, subscribe_queues
from broker_store.protocol.errors import RocketMQError
from connectors.core.executor import executor_admin
from connectors.replication import queue_placement
from connectors.replication.outage import TargetOutage
from connectors.replication.placement_table import PLACEMENTS, PlacementTable
from connectors.replication.queue_placement import Placement, TargetQueue
from connectors.replication.writer_options import SinkOptions

log = logging.getLogger(__name__)

_seen_lock = threading.Lock()
_seen_target_queues: dict[tuple[str, str], list[MessageQueue]] = {}
_decided_cache: dict[tuple[str, str], tuple[PlacementTable, int | None, list[Placement]]] = {}
"""(link directory, source cluster) -> (its placements table, the version read, its decisions)."""


def _decided_placements(location: str, source_cluster: str) -> list[Placement]:
    """The link's decided placements, re-read only when the table has a new version."""
    with _seen_lock:
        cached = _decided_cache.get((location, source_cluster))
        table = cached[0] if cached else PlacementTable(location, source_cluster=source_cluster)
        dt = table.open(PLACEMENTS)
        version = None if dt is None else dt.version()
        if cached is not None and cached[1] == version:
            return cached[2]
        decided = table.load()
        _decided_cache[(location, source_cluster)] = (table, version, decided)
        return decided


def _stable_queue_list(namesrv: str, topic: str, queues: list[MessageQueue]) -> list[MessageQueue]:
    """``queues`` (a target topic's writable queues now), unless they are a strict subset of the list this
    executor process saw before: then a broker group is down or not re-registered yet (the name servers
    drop it from the route), and the stateless rule (no placements table) placing on the shrunken list
    would move source queues to other target queues (it sees a count mismatch and hashes). The earlier
    list is kept instead; sends to the missing queues wait for their broker like any outage. A process
    that never saw the full list (a fresh executor during a partial outage) cannot tell, and places on
    what the route says."""
    key = (namesrv, topic)
    with _seen_lock:
        seen = _seen_target_queues.get(key)
        if seen is not None and set(queues) < set(seen):
            log.warning("target topic %s: the route lists %d of the %d queues seen before (a broker group is "
                        "down?); keeping the full list so queue placement does not change", topic, len(queues),
                        len(seen))
            return seen
        _seen_target_queues[key] = queues
        return queues


class QueuePlacement:
    """Source queue -> target queue for one task (see ``preserveQueues``); queue lists cached per task."""

    def __init__(self, options: SinkOptions, producer: Producer, outage: TargetOutage | None = None) -> None:
        self.options = options
        self.producer = producer
        self.outage = outage or TargetOutage(options)
        self._target: dict[str, list[MessageQueue] | None] = {}
        self._source: dict[str, list[MessageQueue] | None] = {}
        self._source_namesrv: dict[str, str] = {}
        self._positions: dict[str, dict[MessageQueue, int]] = {}
        self._placed: dict[tuple[str, MessageQueue], MessageQueue] = {}
        self._rule: queue_placement.LinkPlacements | None = None
        self._recorded = bool(options.delta_location and options.link)
        """Decisions are recorded in the link's placements table (else: the stateless rule)."""
        self.decided: list[Placement] = []
        """Decisions this task made (for the driver to record; ``ReplicationCommitMessage.placements``)."""

    def pin(self, target_topic: str, source: MessageQueue, queue: MessageQueue) -> None:
        """Use ``queue`` for ``source``'s messages to ``target_topic`` (the driver placed it)."""
        self._placed[(target_topic, source)] = queue

    def pulled_from(self, source_topic: str, namesrv: str | None) -> None:
        """Where the rows say a source topic is pulled from (``rowFormat=ranges``): its queues are counted
        there, before the sink's ``sourceNamesrv`` option (which only a job with config + link sets)."""
        if namesrv:
            self._source_namesrv.setdefault(source_topic, namesrv)

    def _target_queues(self, topic: str) -> list[MessageQueue] | None:
        """The target topic's writable queues. While the target is unavailable this waits (an unpinned
        send would break queue preservation); a topic the live target has no writable queue for is
        cached as None and its messages fail under the failure policy."""
        started: float | None = None
        waits = 0
        while topic not in self._target:
            try:
                queues = sorted(self.producer.writable_queues(topic))
                # With recorded decisions a shrunken list moves nothing (only new queues are placed on
                # it); the stateless rule needs the full list to keep its answers.
                self._target[topic] = queues if self._recorded else _stable_queue_list(self.options.namesrv,
                                                                                        topic, queues)
            except RocketMQError as exc:
                if not self.outage.unavailable(exc):
                    log.warning("no writable queue for target topic %s: %s", topic, exc)
                    self._target[topic] = None
                    break
                started = self.outage.clock.monotonic() if started is None else started
                self.outage.wait(exc, f"topic {topic} (route)", started, waits)
                waits += 1
        return self._target[topic]

    def _source_queues(self, topic: str) -> list[MessageQueue] | None:
        namesrv = self._source_namesrv.get(topic) or self.options.source_namesrv
        if namesrv is None:
            return None
        if topic not in self._source:
            try:
                admin = executor_admin(namesrv, self.options.source_credentials, self.options.source_tls)
                self._source[topic] = subscribe_queues(topic, admin.topic_route(topic))
            except RocketMQError as exc:
                log.warning("cannot list source queues of %s (placement falls back to hashing): %s", topic, exc)
                self._source[topic] = None
        return self._source[topic]

    def _source_positions(self, topic: str) -> dict[MessageQueue, int] | None:
        """Source queue -> its position in ``_source_queues(topic)`` (a dict: a task of hundreds of ranges
        looked each up in the list, quadratic in the queue count)."""
        positions = self._positions.get(topic)
        if positions is None:
            sources = self._source_queues(topic)
            if sources is None:
                return None
            positions = self._positions[topic] = {mq: i for i, mq in enumerate(sources)}
        return positions

    def forget(self, target_topic: str) -> None:
        """Drop a topic's cached "no writable queue" answer so the next ``place`` looks again."""
        if self._target.get(target_topic, ()) is None:
            del self._target[target_topic]

    def place(self, target_topic: str, source: MessageQueue) -> MessageQueue | None:
        if target_topic not in self._target:
            # Once per topic and task, also for pinned and decided queues: this fills the producer's route
            # cache before the task's first sends. Concurrent sends that all wait for a cold route may
            # reach the broker out of order (seen: a queue's 4th batch stored before its first three).
            self._target_queues(target_topic)
        placed = self._placed.get((target_topic, source))
        if placed is None:
            placed = self._place(target_topic, source)
            if placed is not None:  # None is retried per row (the topic's queues may show up)
                self._placed[(target_topic, source)] = placed
        return placed

    def _place(self, target_topic: str, source: MessageQueue) -> MessageQueue | None:
        o = self.options
        if not self._recorded or not o.delta_location or not o.link:
            targets = self._target_queues(target_topic)
            if not targets:
                return None
            return self._stateless(targets, self._source_positions(source.topic) if o.preserve_queues else None,
                                   source)
        if self._rule is None:
            self._rule = queue_placement.LinkPlacements(
                _decided_placements(str(Path(o.delta_location) / o.link), o.source_cluster or ""))
        decision = self._rule.get(source, target_topic)
        if decision is None:
            targets = self._fresh_target_queues(target_topic)
            if not targets:
                return None
            sources = self._source_queues(source.topic) if o.preserve_queues else None
            # every undecided queue of the source topic at once: the other tasks decide them alike
            topic_queues = list(sources or ()) or [source]
            new = self._rule.place(target_topic, [*topic_queues, source], source_topic_queues=topic_queues,
                                   target_queues=[TargetQueue(q.broker_name, q.queue_id) for q in targets],
                                   preserve=o.preserve_queues and sources is not None)
            self.decided.extend(new)
            decision = self._rule.get(source, target_topic)
            if decision is None:
                return None
        return MessageQueue(target_topic, decision.target.broker_name, decision.target.queue_id)

    def _fresh_target_queues(self, topic: str) -> list[MessageQueue] | None:
        """The target topic's writable queues from a fresh route (a new decision must see a target topic that
        just grew or shrank; the producer's route cache may be seconds old), else as ``_target_queues``
        (a topic without a route yet is auto-created by the first send; an outage waits)."""
        try:
            route = executor_admin(self.options.namesrv, self.options.credentials, self.options.tls).topic_route(topic)
        except RocketMQError:
            return self._target_queues(topic)
        return sorted(publish_queues(topic, route)) or self._target_queues(topic)

    @staticmethod
    def _stateless(targets: list[MessageQueue], sources: dict[MessageQueue, int] | None,
                   source: MessageQueue) -> MessageQueue:
        if sources is not None and len(sources) == len(targets):
            position = sources.get(source)
            if position is not None:
                return targets[position]
        return targets[zlib.crc32(f"{source.broker_name}/{source.queue_id}".encode()) % len(targets)]
