"""``python -m jobs.dr status --link NAME``: where a link stands for disaster recovery, in one table.

Per source topic: messages on A (max offsets read now), replicated (the link's committed resume point), the
lag between them, which is also the recovery point if A died now: the messages A acknowledged that B does not
hold. Beside it the same from the replication job's durable record of A's max offsets and its age: what
``failover``'s audit would report, which is all that is left to read once A is gone. Per selected group: the
age of its newest complete translated checkpoint (how far back a consumer failing over to B would resume).
Config drift: mapped topics and selected groups missing on B. The delayed messages waiting on A and until when
the forward link's job must run to bring them to B (``jobs.dr.delayed``).

When A does not answer (it is lost: the moment ``status`` matters most), the same table comes from the job's
record of A's max offsets alone (``recorded_status``): A's side is what the job last saw and when, which the
output says; B and the link's tables are read as usual.

``link_status`` and ``recorded_status`` are the pure parts (tested without clusters); ``read_status`` reads the
ends (``jobs.dr.link_ends``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow.compute as pc

from broker_store.client import MessageQueue
from broker_store.protocol.errors import RocketMQError
from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from connectors.checkpoint.tables import CHECKPOINTS, CheckpointTables, newest_complete_snapshot_ms
from connectors.core.offsets import queue_key
from connectors.core.topic_mapping import TopicMapper
from connectors.replication.source_maxes import SourceMaxes, read_source_maxes
from jobs.dr.delayed import read_waiting
from jobs.dr.link_ends import LinkEnds
from jobs.dr.rpo import audit


@dataclass(frozen=True)
class TopicLag:
    topic: str
    target: str | None
    queues: int
    on_a: int
    """Sum over the topic's queues of A's max offset (the next offset A would write)."""
    replicated: int
    """Sum of the link's committed next offsets (queues never replicated count from 0)."""

    @property
    def lag(self) -> int:
        return self.on_a - self.replicated


@dataclass(frozen=True)
class LinkStatus:
    link: str
    observed_at: float
    """Wall clock (s) when A's max offsets were read."""
    topics: tuple[TopicLag, ...]
    checkpoint_age_s: Mapping[str, float | None]
    """Selected group -> age of its newest complete translated checkpoint (None: none yet)."""
    missing_on_b: tuple[str, ...] = ()
    groups_missing_on_b: tuple[str, ...] = ()
    recorded_rpo: int | None = None
    """The same from the replication job's own record of A's max offsets (``jobs.dr.rpo``): what a failover's
    audit would say if A died now (None: no record yet)."""
    recorded_at: float | None = None
    """The oldest observation of that record (wall clock, s)."""
    a_error: str | None = None
    """A did not answer (this error): A's side is the job's record (``recorded_status``), not read now."""
    delayed: Mapping[str, Any] | None = None
    """The delayed messages waiting on A (``jobs.dr.delayed.DelayedWaiting.to_json``); None when A does not
    answer."""

    @property
    def rpo_messages(self) -> int:
        """Messages acknowledged by A that B does not hold: lost if A died at ``observed_at``."""
        return sum(t.lag for t in self.topics)

    def to_json(self) -> dict[str, Any]:
        return {"link": self.link, "observed_at": self.observed_at, "rpo_messages": self.rpo_messages,
                "topics": [{"topic": t.topic, "target": t.target, "queues": t.queues, "on_a": t.on_a,
                            "replicated": t.replicated, "lag": t.lag} for t in self.topics],
                "checkpoint_age_s": dict(self.checkpoint_age_s), "topics_missing_on_b": list(self.missing_on_b),
                "groups_missing_on_b": list(self.groups_missing_on_b), "recorded_rpo_messages": self.recorded_rpo,
                "recorded_at": self.recorded_at, "a_answered": self.a_error is None, "a_error": self.a_error,
                "delayed_waiting": None if self.delayed is None else dict(self.delayed)}


def link_status(link: str, observed_at: float, queues: Sequence[MessageQueue], maxes: Mapping[MessageQueue, int],
                replicated: Mapping[MessageQueue, int], targets: Mapping[str, str | None],
                checkpoint_ms: Mapping[str, int | None], *, missing_on_b: Sequence[str] = (),
                groups_missing_on_b: Sequence[str] = ()) -> LinkStatus:
    """The status from what was read (pure). A queue replicated past A's max offset (A lost data, or its
    queue was recreated) counts 0 lag, never negative."""
    by_topic: dict[str, list[MessageQueue]] = {}
    for q in queues:
        by_topic.setdefault(q.topic, []).append(q)
    topics = tuple(TopicLag(topic, targets.get(topic), len(qs), sum(maxes[q] for q in qs),
                            sum(min(replicated.get(q, 0), maxes[q]) for q in qs))
                   for topic, qs in sorted(by_topic.items()))
    ages = {g: None if ms is None else max(0.0, observed_at - ms / 1000) for g, ms in sorted(checkpoint_ms.items())}
    return LinkStatus(link, observed_at, topics, ages, tuple(sorted(missing_on_b)), tuple(sorted(groups_missing_on_b)))


def recorded_status(link: str, now: float, record: SourceMaxes | None, replicated: Mapping[MessageQueue, int],
                    targets: Mapping[str, str | None], checkpoint_ms: Mapping[str, int | None], a_error: str, *,
                    missing_on_b: Sequence[str] = (), groups_missing_on_b: Sequence[str] = ()) -> LinkStatus:
    """The status with A unreachable (pure): A's queues and max offsets as the job last recorded them (queues it
    never recorded but replicated count as on A up to what was replicated), observed at the record's oldest
    observation (``now`` without a record); the recovery point is then the failover's audit. Checkpoint ages
    are at ``now``."""
    seen = dict(record.queues) if record is not None else {}
    queues = sorted(set(seen) | set(replicated), key=queue_key)
    maxes = {q: seen[q].max_offset if q in seen else replicated[q] for q in queues}
    audited = audit(replicated, record)
    observed_at = audited.oldest_observation
    status = link_status(link, now, queues, maxes, replicated, targets, checkpoint_ms, missing_on_b=missing_on_b,
                         groups_missing_on_b=groups_missing_on_b)
    return replace(status, observed_at=now if observed_at is None else observed_at,
                   recorded_rpo=None if record is None else audited.missing, recorded_at=observed_at,
                   a_error=a_error)


def newest_checkpoints(tables: CheckpointTables, groups: Sequence[str]) -> dict[str, int | None]:
    """Each group's newest translated checkpoint (snapshot ms), complete or partial (a group reading ahead of
    the link: ``CheckpointOutcome.PARTIAL``): the one a failover now would start the group from. One read of
    the table."""
    rows = tables.read(CHECKPOINTS, columns=["group", "outcome", "snapshot_at"])
    return {g: newest_complete_snapshot_ms(rows.filter(pc.equal(rows["group"], g)), partial=True)
            for g in groups}


def read_status(ends: LinkEnds, levels: DelayLevels = DEFAULT_DELAY_LEVELS) -> LinkStatus:
    """Read A, B and the link's tables now; A not answering: ``read_recorded_status``. ``levels``: A's delay
    level table (the due times of its waiting delayed messages)."""
    try:
        ends.a.cluster_info()  # fails fast (the admin's request timeout), unlike discovery's outage retries
    except RocketMQError as exc:
        return read_recorded_status(ends, str(exc))
    return replace(read_live_status(ends), delayed=read_waiting(ends, levels).to_json())


def read_recorded_status(ends: LinkEnds, a_error: str) -> LinkStatus:
    """The status from the job's record of A's max offsets and the link's tables; B read if it answers."""
    location = ends.link.tables_location
    record = read_source_maxes(location)
    replicated = ends.replicated()
    mapper = TopicMapper(ends.link.topics, reserved_names=[ends.source.name])
    topics = {q.topic for q in [*(record.queues if record is not None else ()), *replicated]}
    targets = {t: mapper.target_for(t) for t in sorted(topics)}
    tables = CheckpointTables(location)
    rows = tables.read(CHECKPOINTS, columns=["group", "source_queue_id"])
    rows = rows.filter(pc.greater_equal(rows["source_queue_id"], 0))  # not a condition row (its subject)
    groups = sorted(set(rows["group"].to_pylist()) - {None, ""})
    try:
        b_topics = set(ends.b.topic_list())
        missing = sorted({t for t in targets.values() if t is not None and t not in b_topics})
        groups_missing = sorted(set(groups) - ends.b_groups())
    except RocketMQError:
        missing, groups_missing = [], []  # B does not answer either: no drift to show
    return recorded_status(ends.link.name, ends.clock.time(), record, replicated, targets,
                           newest_checkpoints(tables, groups), a_error, missing_on_b=missing,
                           groups_missing_on_b=groups_missing)


def read_live_status(ends: LinkEnds) -> LinkStatus:
    """Read A, B and the link's tables now (A must answer: ``RocketMQError`` otherwise)."""
    queues = ends.source_queues()
    observed_at = ends.clock.time()
    maxes = ends.max_offsets(queues)
    replicated = ends.replicated()
    mapper = ends.mapper()
    targets = {q.topic: mapper.target_for(q.topic) for q in queues}
    b_topics = set(ends.b.topic_list())
    missing = [t for t in {t for t in targets.values() if t is not None} if t not in b_topics]
    groups = ends.group_snapshot().groups()
    checkpoints = newest_checkpoints(CheckpointTables(ends.link.tables_location), groups)
    groups_missing = sorted(set(groups) - ends.b_groups())
    recorded = read_source_maxes(ends.link.tables_location)
    audited = audit(replicated, recorded, topics=sorted({q.topic for q in queues}))
    status = link_status(ends.link.name, observed_at, queues, maxes, replicated, targets, checkpoints,
                         missing_on_b=missing, groups_missing_on_b=groups_missing)
    if recorded is None:
        return status
    return replace(status, recorded_rpo=audited.missing, recorded_at=audited.oldest_observation)
