"""Create one missing target topic like its source topic(s), now: config sync's creation rule
(``plan.creation_for``) applied outside its rounds, for the replication query of a link whose config sync
runs (``jobs/run_all.py``).

Why: the replication query's first batch to a new target topic can come before config sync's next round (a
topic holding data when the job starts, a topic created on the source between two rounds), and the target's
auto-create would then make the topic with its default queue count: config sync would refuse to "shrink" it
every round, and queue-preserving placement would be decided against the wrong queue count for the life of
the link. So the replication planner (``connectors.replication.placement_planner``, driver) calls
``TargetTopicCreator.create`` before it places the first batch of a target topic the target lacks; there is
still one rule and one owner for "what a topic looks like on the target", and config sync's next round finds
the topic as it would have made it (no change, nothing pending).

The same goes for growth: source queues added to a source topic are placed by the replication planner as
soon as a batch reaches them, possibly before config sync's next round grows the target topic, and a
placement stands for the life of the link. So before it places new source queues on a target topic with
fewer writable queues than it would then have source queues, the planner calls ``TargetTopicCreator.grow``:
config sync's rule for that one topic (``plan.topic_changes_for``: the source's total spread over the
target's broker groups, never shrinking, ``max_queue_nums``), applied now, and the route waited for.

Driver only. Nothing is recorded in the ``config_changes`` table (its writer is the config-sync query); the
creation or growth is logged.
"""

from __future__ import annotations

import logging

from broker_store.client import Admin
from broker_store.protocol.codes import PERM_WRITE
from broker_store.protocol.errors import RocketMQError
from connectors.config_sync.applier import apply_change
from connectors.config_sync.plan import ChangeKind, ChangeStatus, ConfigChange, creation_for, topic_changes_for
from connectors.config_sync.state import read_cluster_state
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig

log = logging.getLogger(__name__)

ROUTE_WAIT_S = 10.0
"""How long ``create`` waits for the new topic's route on the target's name servers (the brokers register
it on creation; this bounds a slow name server)."""


class TargetTopicCreator:
    """``create(target topic)`` for one link (see the module docstring)."""

    def __init__(self, *, link: str, source_admin: Admin, source_cluster: str, target_admin: Admin,
                 topics: TopicMappingConfig, settings: ConfigSyncSettings, route_wait_s: float = ROUTE_WAIT_S) -> None:
        self.link = link
        self._source_admin = source_admin
        self._source_cluster = source_cluster
        self._target_admin = target_admin
        self._topics = topics
        self._settings = settings
        self._route_wait_s = route_wait_s

    def create(self, target_topic: str) -> ConfigChange | None:
        """Create ``target_topic`` on every target primary as config sync would, and wait for its route.
        Returns the change (APPLIED; REFUSED by the rules; FAILED with the reason), or None when no source
        topic maps to it. Raises nothing: a failure leaves the topic to the sink's auto-create as before."""
        try:
            source = read_cluster_state(self._source_admin, self._source_cluster, subscription_groups=False)
            # the target's broker groups, as config sync reads the target (every cluster of its name servers):
            # the sizing spreads the source's queues over them
            target_brokers = sorted(self._target_admin.primary_addrs(None))
        except RocketMQError as exc:
            log.info("link %s: cannot read the source or the target to create %s like the source (%s)", self.link,
                     target_topic, exc)
            return None
        mapper = TopicMapper(self._topics, reserved_names=[self._source_cluster, *source.brokers])
        change = creation_for(target_topic, source, mapper, self._settings, target_brokers)
        if change is None or change.status is not ChangeStatus.PLANNED:
            if change is not None:
                log.warning("link %s: target topic %s not created like its source: %s %s", self.link, target_topic,
                            change.status.value, change.detail)
            return change
        applied = apply_change(self._target_admin, change)
        if applied.status is ChangeStatus.APPLIED:
            try:
                self._target_admin.wait_for_route(target_topic, timeout=self._route_wait_s)
            except RocketMQError as exc:
                return applied.with_status(ChangeStatus.FAILED, f"created, but no route yet: {exc}")
            log.info("link %s: created target topic %s like source topic(s) %s (read/write queues %s/%s) before "
                     "its first replicated batch", self.link, target_topic, ", ".join(change.sources),
                     change.read_queue_nums, change.write_queue_nums)
        return applied

    def grow(self, target_topic: str) -> ConfigChange | None:
        """Grow the existing ``target_topic`` on the target as config sync would now, and wait until its route
        shows the new writable queues. Returns the change (APPLIED; REFUSED by the rules; FAILED with the
        reason), or None when the rules call for no growth (or a cluster cannot be read). Raises nothing:
        without growth the new source queues are placed on the queues there are (shared, and reported so by
        the checkpoints)."""
        try:
            source = read_cluster_state(self._source_admin, self._source_cluster, subscription_groups=False)
            target = read_cluster_state(self._target_admin, None, subscription_groups=False)
        except RocketMQError as exc:
            log.info("link %s: cannot read the source or the target to grow %s like the source (%s)", self.link,
                     target_topic, exc)
            return None
        if target.unreachable:
            # a target broker group that did not answer might hold the topic with more queues: not on a partial view
            log.info("link %s: not growing %s: target broker group(s) unreachable %s", self.link, target_topic,
                     dict(target.unreachable))
            return None
        mapper = TopicMapper(self._topics, reserved_names=[self._source_cluster, *source.brokers])
        growth = [c for c in topic_changes_for(target_topic, source, target, mapper, self._settings)
                  if c.kind in (ChangeKind.CREATE_TOPIC, ChangeKind.UPDATE_TOPIC)]
        if not growth:
            return None
        change = growth[0]
        if change.status is not ChangeStatus.PLANNED:
            log.warning("link %s: target topic %s not grown like its source: %s %s", self.link, target_topic,
                        change.status.value, change.detail)
            return change
        applied = apply_change(self._target_admin, change)
        if applied.status is ChangeStatus.APPLIED and (change.perm or 0) & PERM_WRITE:
            assert change.write_queue_nums is not None
            try:
                self._target_admin.wait_for_route(target_topic, timeout=self._route_wait_s,
                                                  min_queues=change.write_queue_nums * max(1, len(target.brokers)))
            except RocketMQError as exc:
                return applied.with_status(ChangeStatus.FAILED, f"grown, but the route does not show it yet: {exc}")
            log.info("link %s: grew target topic %s like source topic(s) %s (read/write queues %s/%s per broker "
                     "group) before placing new source queues", self.link, target_topic, ", ".join(change.sources),
                     change.read_queue_nums, change.write_queue_nums)
        return applied
