"""The config connector's rules: from the source's and the target's configuration, the changes to make on
the target. Pure: no I/O, no clock; called by ``connectors.config_sync.applier`` on the driver and tested
without brokers.

Per target topic T (the link's topic mapping; several source topics may map to one):

* wanted: per target broker group, the source topic's queues over all its broker groups spread over the
  target's groups (``connectors.config_sync.sizing``: every source queue can have a target queue of its own;
  several source topics: the largest), the permission, ``order`` flag and attributes of the first of them by
  name;
* T missing on some target broker group: ``create_topic`` (an upsert on every primary);
* T present: queue counts only grow: ``max(wanted, current)`` per count. A smaller wanted count is a
  ``REFUSED`` shrink, recorded and reported, never applied (only when the source's largest per-group count
  is smaller too: a target that gained broker groups wants fewer per group without any source queue gone);
  the growth part of the same topic still is.
  A permission or attribute difference is an ``update_topic``. The write permission is the target's own
  (``target_perm``): a topic is created writable, and its write bit is never copied, because a disaster-recovery
  switchover fences a side by taking that bit away and the other side must stay writable;
* a source broker group's count above ``ConfigSyncSettings.max_queue_nums``: refused; a spread count above
  it: capped there (the change's detail says so);
* a source topic judged deleted (``connectors.config_sync.evidence``: absent from every broker group that held
  it, all answering, in two consecutive snapshots), whose target no current or unknown source topic maps to:
  ``delete_topic`` when ``propagate_deletion``, else a ``DISABLED`` change (reported once, not applied). The
  change carries the target's queue counts and the evidence; on a partial view (a broker group of either
  cluster unreachable) it is ``DEFERRED`` and called for again next round;
* a source topic whose state is unknown (a broker group that held it does not answer or left the name
  server), whose target exists: a ``source_topic_unknown`` change, ``DEFERRED``: nothing is deleted;
* a target broker group unreachable (down, expired: the target view is partial): topic creations and updates
  are ``DEFERRED``, since the topic may exist there with other counts and placement must not change;
* a target topic re-created after config sync deleted it never has fewer queues than it had then
  (``queue_floors``).

Subscription groups (when enabled): a selected source group missing on the target, or configured
differently there: ``create_group`` / ``update_group``. A selected group seen on the source by the previous
snapshot and judged deleted (the topics' evidence), still on the target: ``delete_group`` when
``propagate_deletion``, else ``DISABLED``; one whose state is unknown: ``source_group_unknown``, ``DEFERRED``
(the topics' rule). Only groups the link copies are ever deleted: a group created on the target alone (never
on the source, or not selected) is left alone, whatever the settings. A group named in ``groups.explicit``
that the source does not have is an ``UNKNOWN_GROUP``, refused (reported, not silently ignored) while every
source broker group answered (one that did not might hold it).

``creation_for`` is the "create like the source" rule alone, for one target topic: what config sync would
create, used by the replication planner when a batch would reach a target topic config sync has not created
yet (``connectors.config_sync.creation``); ``topic_changes_for`` is the rule for one existing target topic,
used by the same planner to grow it before placing new source queues.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker_store.protocol.codes import PERM_WRITE
from connectors.config_sync.evidence import Evidence
from connectors.config_sync.sizing import size_target_topic
from connectors.config_sync.state import ClusterState, TopicState
from connectors.core.errors import TopicMappingError
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper


class ChangeKind(enum.Enum):
    CREATE_TOPIC = "create_topic"
    UPDATE_TOPIC = "update_topic"
    """Queue growth, permission or attributes of an existing topic."""
    SHRINK = "shrink"
    """A smaller queue count on the source: always refused."""
    DELETE_TOPIC = "delete_topic"
    CREATE_GROUP = "create_group"
    UPDATE_GROUP = "update_group"
    DELETE_GROUP = "delete_group"
    MAPPING = "mapping"
    """The topic mapping failed for a source topic: refused."""
    UNKNOWN_GROUP = "unknown_group"
    """A group the link's ``groups`` name explicitly is not on the source (whole view): refused, reported."""
    READ_TARGET = "read_target"
    """The target cluster could not be read: nothing was planned this round (failed, retried next round)."""
    SOURCE_TOPIC_UNKNOWN = "source_topic_unknown"
    """A source topic's state is unknown (a broker group that held it is unreachable): DEFERRED, not deleted."""
    SOURCE_GROUP_UNKNOWN = "source_group_unknown"
    """The same for a subscription group."""
    CREATE_ACCOUNT = "create_account"
    """An ACL account no target broker group holds (``connectors.config_sync.acl_sync``)."""
    UPDATE_ACCOUNT = "update_account"
    """An ACL account missing on some target broker group, or with other permissions there."""
    READ_ACL = "read_acl"
    """A cluster's ACL could not be read: no account change this round (failed, retried next round)."""


class ChangeStatus(enum.Enum):
    PLANNED = "planned"
    """To be applied (``applier`` turns it into APPLIED or FAILED)."""
    APPLIED = "applied"
    FAILED = "failed"
    """The target refused or did not answer; planned again next round."""
    REFUSED = "refused"
    """Against the rules (shrink, too many queues, bad mapping): recorded and reported, never applied."""
    DISABLED = "disabled"
    """Deletion with ``propagate_deletion`` off: recorded and reported, not applied."""
    DEFERRED = "deferred"
    """Not decided for want of evidence (a broker group of either cluster unreachable): recorded and reported,
    called for again every round until it can be decided."""
    CLEARED = "cleared"
    """Only in the table: a not-applied change of an earlier round the rules no longer call for (the source
    grew back, a one-round deletion notice passed); ends its pending count (``connectors.config_sync.standing``)."""


@dataclass(frozen=True)
class ConfigChange:
    """One change of the target's configuration, with its status."""

    kind: ChangeKind
    subject: str
    """The target topic or group."""
    status: ChangeStatus
    sources: tuple[str, ...] = ()
    """The source topic(s) / group it comes from."""
    read_queue_nums: int | None = None
    write_queue_nums: int | None = None
    perm: int | None = None
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)
    group_config: Mapping[str, Any] | None = None
    detail: str = ""

    def with_status(self, status: ChangeStatus, detail: str) -> ConfigChange:
        return ConfigChange(self.kind, self.subject, status, self.sources, self.read_queue_nums,
                            self.write_queue_nums, self.perm, self.order, self.attributes, self.group_config, detail)


def _targets(topics: Iterable[str], mapper: TopicMapper,
             refused: list[ConfigChange]) -> dict[str, list[str]]:
    """Target topic -> its source topics (sorted)."""
    out: dict[str, list[str]] = {}
    for topic in sorted(topics):
        try:
            target = mapper.target_for(topic)
        except TopicMappingError as exc:
            refused.append(ConfigChange(ChangeKind.MAPPING, topic, ChangeStatus.REFUSED, (topic,), detail=str(exc)))
            continue
        if target is not None:
            out.setdefault(target, []).append(topic)
    return out


def plan_changes(source: ClusterState, target: ClusterState, mapper: TopicMapper, settings: ConfigSyncSettings,
                 evidence: Evidence | None = None,
                 queue_floors: Mapping[str, tuple[int, int]] | None = None) -> list[ConfigChange]:
    """Every change the rules of the module docstring call for, PLANNED or already REFUSED / DISABLED /
    DEFERRED. ``evidence``: what the source snapshot proves (``evidence.judge``); ``queue_floors``: target topic ->
    (read, write) queue counts it had when config sync deleted it (``standing.queue_floors``)."""
    evidence = evidence or Evidence()
    changes: list[ConfigChange] = []
    wanted_by_target = _targets(source.topics, mapper, changes)
    for name, sources in sorted(wanted_by_target.items()):
        changes.extend(_topic_changes(name, [source.topics[s] for s in sources], target, settings,
                                      (queue_floors or {}).get(name)))
    unknown_by_target = _targets(evidence.unknown_topics, mapper, [])
    for name, sources in sorted(_targets(evidence.deleted_topics, mapper, []).items()):
        current = target.topics.get(name)
        if name in wanted_by_target or name in unknown_by_target or current is None:
            continue
        proof = "; ".join(f"source topic {s} {evidence.deleted_topics[s]}" for s in sources)
        status, detail = ((ChangeStatus.PLANNED, proof) if settings.propagate_deletion else
                          (ChangeStatus.DISABLED, f"source topic deleted; propagate_deletion is off ({proof})"))
        changes.append(ConfigChange(ChangeKind.DELETE_TOPIC, name, status, tuple(sources), current.read_queue_nums,
                                    current.write_queue_nums, detail=detail))
    for name, sources in sorted(unknown_by_target.items()):
        if name in wanted_by_target or name not in target.topics:
            continue
        changes.append(ConfigChange(ChangeKind.SOURCE_TOPIC_UNKNOWN, name, ChangeStatus.DEFERRED, tuple(sources),
                                    detail="; ".join(f"source topic {s} unknown ({evidence.unknown_topics[s]})"
                                                     for s in sources) + ": not deleted"))
    if settings.subscription_groups:
        for group, config in sorted(source.groups.items()):
            if not settings.groups.selects(group):
                continue
            current_group = target.groups.get(group)
            if current_group is None:
                changes.append(ConfigChange(ChangeKind.CREATE_GROUP, group, ChangeStatus.PLANNED, (group,),
                                            group_config=dict(config)))
            elif _canonical(current_group) != _canonical(config):
                changes.append(ConfigChange(ChangeKind.UPDATE_GROUP, group, ChangeStatus.PLANNED, (group,),
                                            group_config=dict(config)))
        for group, proof in sorted(evidence.deleted_groups.items()):
            if not settings.groups.selects(group) or group not in target.groups or group in source.groups:
                continue
            status, detail = ((ChangeStatus.PLANNED, f"source group {proof}") if settings.propagate_deletion else
                              (ChangeStatus.DISABLED, f"source group deleted; propagate_deletion is off ({proof})"))
            changes.append(ConfigChange(ChangeKind.DELETE_GROUP, group, status, (group,), detail=detail))
        for group, why in sorted(evidence.unknown_groups.items()):
            if settings.groups.selects(group) and group in target.groups and group not in source.groups:
                changes.append(ConfigChange(ChangeKind.SOURCE_GROUP_UNKNOWN, group, ChangeStatus.DEFERRED, (group,),
                                            detail=f"source group unknown ({why}): not deleted"))
        if not source.unreachable:
            changes.extend(ConfigChange(ChangeKind.UNKNOWN_GROUP, group, ChangeStatus.REFUSED, (group,),
                                        detail="named in config_sync.groups.explicit; no subscription group of "
                                               "that name on the source")
                           for group in sorted(set(settings.groups.explicit) - set(source.groups)))
    return [_deferred_on_partial_view(c, source, target) for c in changes]


def _deferred_on_partial_view(c: ConfigChange, source: ClusterState, target: ClusterState) -> ConfigChange:
    """A deletion waits for a whole view of both clusters (a broker group that did not answer might hold the
    name); a topic creation or update waits for a whole target view (the topic may exist on the missing group
    with other counts, and placement must not change under the link)."""
    if c.status is not ChangeStatus.PLANNED:
        return c
    if c.kind in (ChangeKind.DELETE_TOPIC, ChangeKind.DELETE_GROUP) and (source.unreachable or target.unreachable):
        return c.with_status(ChangeStatus.DEFERRED, f"{c.detail}; waits for every broker group to answer "
                                                    f"({_unreachable(source, target)})")
    if c.kind in (ChangeKind.CREATE_TOPIC, ChangeKind.UPDATE_TOPIC) and target.unreachable:
        return c.with_status(ChangeStatus.DEFERRED, f"waits for every target broker group to answer "
                                                    f"({_unreachable(source, target)}): the topic may be there")
    return c


def _unreachable(source: ClusterState, target: ClusterState) -> str:
    parts = [f"source {g}: {why}" for g, why in sorted(source.unreachable.items())]
    parts += [f"target {g}: {why}" for g, why in sorted(target.unreachable.items())]
    return "; ".join(parts)


def creation_for(target_topic: str, source: ClusterState, mapper: TopicMapper,
                 settings: ConfigSyncSettings, target_brokers: Sequence[str] = ()) -> ConfigChange | None:
    """The ``create_topic`` change (PLANNED, or REFUSED over ``max_queue_nums``) that ``plan_changes`` makes
    for ``target_topic`` on a target that lacks it, whose broker groups are ``target_brokers`` (the sizing
    spreads the source's queues over them; none known: one group); None when no source topic maps to it."""
    sources = _targets(source.topics, mapper, []).get(target_topic)
    if not sources:
        return None
    empty = ClusterState(source.taken_ms, {}, {}, tuple(sorted(target_brokers)))
    return _topic_changes(target_topic, [source.topics[s] for s in sources], empty, settings)[0]


def topic_changes_for(target_topic: str, source: ClusterState, target: ClusterState, mapper: TopicMapper,
                      settings: ConfigSyncSettings) -> list[ConfigChange]:
    """The topic changes ``plan_changes`` makes for ``target_topic`` alone (none when no source topic maps to
    it): the replication planner grows a target topic with them before it places new source queues
    (``connectors.config_sync.creation``)."""
    sources = _targets(source.topics, mapper, []).get(target_topic)
    if not sources:
        return []
    return _topic_changes(target_topic, [source.topics[s] for s in sources], target, settings)


def target_perm(source_perm: int, current_perm: int | None) -> int:
    """The permission config sync gives a target topic: the source's bits but the write bit, which stays the
    target's own (set on a new topic). A side fenced for a switchover (``jobs.dr``) is read-only on purpose: its
    fence must not reach the side the producers move to, in either direction."""
    write = PERM_WRITE if current_perm is None else current_perm & PERM_WRITE
    return (source_perm & ~PERM_WRITE) | write


def _canonical(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _topic_changes(name: str, sources: list[TopicState], target: ClusterState,
                   settings: ConfigSyncSettings, floor: tuple[int, int] | None = None) -> list[ConfigChange]:
    first = sources[0]
    sizing = size_target_topic(sources, len(target.brokers), settings.max_queue_nums)
    read, write = sizing.read_queue_nums, sizing.write_queue_nums
    if floor is not None and name not in target.topics:  # re-created: never fewer queues than it had
        read, write = max(read, floor[0]), max(write, floor[1])
    names = tuple(s.name for s in sources)
    if sizing.refusal:
        return [ConfigChange(ChangeKind.CREATE_TOPIC, name, ChangeStatus.REFUSED, names, read, write, first.perm,
                             detail=sizing.refusal)]
    cap = sizing.describe_cap() if sizing.capped else ""
    current = target.topics.get(name)
    if current is None:
        return [ConfigChange(ChangeKind.CREATE_TOPIC, name, ChangeStatus.PLANNED, names, read, write,
                             target_perm(first.perm, None), first.order, dict(first.attributes), detail=cap)]
    out = []
    # A refused shrink is reported only when the source's own per-group counts are smaller too: a spread count
    # that fell because the target gained broker groups is not a shrink (no source queue went away).
    largest_read, largest_write = max(s.read_queue_nums for s in sources), max(s.write_queue_nums for s in sources)
    if ((read < current.read_queue_nums and largest_read < current.read_queue_nums)
            or (write < current.write_queue_nums and largest_write < current.write_queue_nums)):
        out.append(ConfigChange(ChangeKind.SHRINK, name, ChangeStatus.REFUSED, names, read, write, first.perm,
                                detail=f"source queues read/write {sizing.source_read_total}/"
                                       f"{sizing.source_write_total} want {read}/{write} per target broker group "
                                       f"({sizing.target_groups}) < target {current.read_queue_nums}/"
                                       f"{current.write_queue_nums}: queue counts are never shrunk on the target"))
    new_read, new_write = max(read, current.read_queue_nums), max(write, current.write_queue_nums)
    missing = sorted(set(target.brokers) - set(current.brokers))
    perm = target_perm(first.perm, current.perm)
    differs = (new_read != current.read_queue_nums or new_write != current.write_queue_nums
               or perm != current.perm or dict(first.attributes) != dict(current.attributes))
    if differs or missing:
        detail = "; ".join(filter(None, [f"missing on {missing}" if missing else "", cap]))
        out.append(ConfigChange(ChangeKind.CREATE_TOPIC if missing else ChangeKind.UPDATE_TOPIC, name,
                                ChangeStatus.PLANNED, names, new_read, new_write, perm, first.order,
                                dict(first.attributes), detail=detail))
    return out
