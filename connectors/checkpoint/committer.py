"""Turn one snapshot of the source groups into target group offsets: translate, commit on the target,
record. The checkpoint connector's writer side.

Called on the Spark driver by ``connectors.checkpoint.data_source.CheckpointStreamWriter.commit`` once per
micro-batch (and by tests). For each group of the snapshot:

1. every source queue offset is translated through the link's offset map (``connectors.checkpoint.
   translation``; the link's progress from ``link_state``): exact, pending until replicated (recorded as
   ``partial``, with the end of the replicated data as its target offset, but not committed), unmapped
   (afterwards the runs below every group's offset are folded: ``OffsetTranslator.forget_below``);
2. a group with an online consumer on the target (GET_CONSUMER_LIST_BY_GROUP on the brokers of its target
   topics) is left alone: its offsets there belong to those consumers;
3. otherwise the target group's current offsets are read and every target queue whose translation is
   ahead of them is set with UPDATE_CONSUMER_OFFSET (never backwards, never for a target queue fed by a
   pending source queue);
4. one JSON message per group with committed offsets goes to ``rmq_sys_replicator_checkpoint`` on the
   target (``CHECKPOINT_MESSAGE`` below), and every source queue's outcome, and every condition of the
   snapshot, to the Delta ``checkpoints`` table (``connectors.checkpoint.tables``). A source queue whose
   target queue several source queues feed (``OffsetTranslator.feeders``) is marked there "shared: may
   re-read" (``tables.SHARED_DETAIL``, ``exact`` false) and reported as a problem of the group (``SHARED``).

A failing target request (a vanished topic, a broker down, the whole target unreachable) is recorded as
``target_error`` for the queues concerned and retried at the next checkpoint; it never fails the query. One
that failed with an ``invalid_route`` error (a dead or replaced primary: a failover) is first repeated once at
once, on the route the client then fetches anew, so the first checkpoint after an election reaches the new
primary. A
re-run batch re-translates a newer snapshot: target offsets only move forward, so nothing is undone.

Problems (``CheckpointReport.problems``: a snapshot's conditions such as an unreachable source, target errors,
checkpoint messages not produced) stand while they last: the batch's log line is a WARNING naming a problem
when it starts and an INFO naming it when it clears, and in between only counts it (the text at DEBUG).
Config sync records its refusals the same way; the rule is ``connectors.core.standing``. A problem clears
only in a checkpoint that could have seen it (``CheckpointCommitter._judged``): a target error of a group
only when the group was checkpointed again, a source-side condition only when the source was read.

``CHECKPOINT_MESSAGE``, the body produced to ``rmq_sys_replicator_checkpoint`` (JSON, UTF-8; keys = the
group, tag = the link)::

    {"version": 1, "link": "<link>", "sourceCluster": "<name>", "targetCluster": "<name>",
     "group": "<group>", "snapshotMs": <ms>, "committedMs": <ms>,
     "offsets": [{"topic": "<target topic>", "brokerName": "<b>", "queueId": <n>, "offset": <next>}, ...]}
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from broker_store.client import Admin, MessageQueue, Producer, new_message
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.link_state import LinkProgress
from connectors.checkpoint.snapshot import GroupOffset, GroupOffsetSnapshot
from connectors.checkpoint.tables import SHARED_DETAIL, CheckpointOutcome, CheckpointRow
from connectors.checkpoint.translation import (
    DEFAULT_MAX_RUNS,
    Outcome,
    Translation,
    target_offsets,
)
from connectors.core.offsets import queue_key
from connectors.core.outage import once_more_on_new_route
from connectors.core.standing import StandingConditions, Transitions
from connectors.core.sync_settings import CHECKPOINT_TOPIC

log = logging.getLogger(__name__)

CHECKPOINT_MESSAGE_VERSION = 1
NOT_PRODUCED = "not_produced"
"""The problem kind of a checkpoint message not produced to ``rmq_sys_replicator_checkpoint``."""
SHARED = "shared"
"""The problem kind of a group with source queues on shared target queues (its failover may re-read)."""

ProblemKey = tuple[str, str]
"""(kind, subject) of a problem: a ``CheckpointOutcome`` value (a condition or ``target_error``) or
``NOT_PRODUCED``, and the group, broker group, cluster or topic concerned."""


@dataclass(frozen=True)
class GroupCheckpoint:
    """What one group's checkpoint did."""

    group: str
    committed: Mapping[MessageQueue, int]
    """Target queues set this time -> their new next offset."""
    rows: tuple[CheckpointRow, ...]


@dataclass
class CheckpointReport:
    """One checkpoint of a link: what ``CheckpointCommitter.apply`` did, for the Delta table and the log."""

    snapshot_ms: int
    groups: list[GroupCheckpoint] = field(default_factory=list)
    condition_rows: list[CheckpointRow] = field(default_factory=list)
    topic_errors: dict[str, str] = field(default_factory=dict)
    """Group -> why its checkpoint message could not be produced (the Delta rows still record the checkpoint)."""
    transitions: Transitions[ProblemKey, str] | None = None
    """What this checkpoint did to the problems standing (``CheckpointCommitter.apply``); None: not tracked."""

    @property
    def rows(self) -> list[CheckpointRow]:
        return [r for g in self.groups for r in g.rows] + self.condition_rows

    def count(self, outcome: CheckpointOutcome) -> int:
        return sum(1 for r in self.rows if r.outcome is outcome)

    def _problem_rows(self) -> list[CheckpointRow]:
        """The rows ``problems`` and ``problem_conditions`` speak of: the snapshot's conditions, then every
        target error."""
        return [*self.condition_rows,
                *(r for g in self.groups for r in g.rows if r.outcome is CheckpointOutcome.TARGET_ERROR)]

    def problems(self) -> list[str]:
        """What an operator must hear of (a WARNING): every condition of the snapshot (an unknown group, a
        source broker group that did not answer) and every distinct target error (a vanished target topic,
        the target down), one entry per (group, reason), and each checkpoint message not produced."""
        seen: dict[tuple[str, str], str] = {}
        for r in self._problem_rows():
            seen.setdefault((r.group, r.detail), f"{r.outcome.value} {r.group}: {r.detail}")
        return [*seen.values(),
                *(f"not produced to {CHECKPOINT_TOPIC}: {g}: {e}" for g, e in self.topic_errors.items()),
                *(f"{SHARED} {g}: {d}" for g, d in self.shared().items())]

    def shared(self) -> dict[str, str]:
        """Group -> the shared target queues its rows are on (``SHARED_DETAIL``), as one line."""
        queues: dict[str, set[str]] = {}
        for g in self.groups:
            for r in g.rows:
                if r.detail.startswith(SHARED_DETAIL):
                    queues.setdefault(g.group, set()).add(f"{r.target_topic}/{r.target_broker}/{r.target_queue_id}")
        return {group: f"{SHARED_DETAIL}: target queue(s) {', '.join(sorted(q))} fed by several source queues"
                for group, q in queues.items()}

    def problem_conditions(self) -> dict[ProblemKey, str]:
        """``problems`` keyed by what they are about (several details of one key joined), for the standing."""
        details: dict[ProblemKey, list[str]] = {}
        for r in self._problem_rows():
            said = details.setdefault((r.outcome.value, r.group), [])
            if r.detail not in said:
                said.append(r.detail)
        for group, error in self.topic_errors.items():
            details[(NOT_PRODUCED, group)] = [error]
        for group, detail in self.shared().items():
            details[(SHARED, group)] = [detail]
        return {key: "; ".join(said) for key, said in details.items()}

    def log_line(self) -> tuple[int, str]:
        """The checkpoint's log line (level, text): the summary; a WARNING naming each problem that started,
        an INFO naming each that cleared, else an INFO counting the problems standing (reported when they
        started). Without ``transitions``, every problem is named in a WARNING."""
        text = self.summary()
        done = self.transitions
        if done is None:
            problems = self.problems()
            return (logging.WARNING if problems else logging.INFO), text + "".join(f"; {p}" for p in problems)
        started = [f"{kind} {subject}: {detail}" for (kind, subject), detail in done.started]
        cleared = [f"{kind} {subject} (was: {detail})" for (kind, subject), detail in done.cleared]
        standing = done.unchanged + len(done.changed)
        text += "".join(f"; {p}" for p in started)
        if cleared:
            text += "; cleared: " + ", ".join(cleared)
        if standing:
            text += f" ({standing} problem(s) standing, reported when they started)"
        return (logging.WARNING if started else logging.INFO), text

    def summary(self) -> str:
        counts = {o.value: self.count(o) for o in CheckpointOutcome if self.count(o)}
        return (f"{len(self.groups)} group(s), {sum(len(g.committed) for g in self.groups)} target queue(s) moved; "
                f"{counts or 'nothing to translate'}")


def translate_group(offsets: Sequence[GroupOffset], progress: LinkProgress) -> list[Translation]:
    """Each source queue offset of one group through the link's offset map."""
    return [progress.translator.translate(o.queue, o.offset, progress.replicated_next.get(o.queue))
            for o in offsets]


def outcome_rows(group: str, snapshot_ms: int, translations: Sequence[Translation],
                 current: Mapping[MessageQueue, int], committed: Mapping[MessageQueue, int],
                 errors: Mapping[MessageQueue, str],
                 shared: Mapping[MessageQueue, Collection[MessageQueue]] | None = None) -> list[CheckpointRow]:
    """One row per source queue: what became of its translation (pure; see ``CheckpointOutcome``); a row on
    a target queue of ``shared`` (-> the source queues feeding it) is marked ``SHARED_DETAIL``, inexact."""
    return mark_shared(_outcome_rows(group, snapshot_ms, translations, current, committed, errors), shared or {})


def mark_shared(rows: Sequence[CheckpointRow],
                shared: Mapping[MessageQueue, Collection[MessageQueue]]) -> list[CheckpointRow]:
    """``rows`` with those on a target queue of ``shared`` marked ``SHARED_DETAIL`` and inexact."""
    return [_shared(r, shared[key]) if (key := _target_of(r)) is not None and key in shared else r for r in rows]


def _target_of(row: CheckpointRow) -> MessageQueue | None:
    if row.target_topic is None or row.target_broker is None or row.target_queue_id is None:
        return None
    return MessageQueue(row.target_topic, row.target_broker, row.target_queue_id)


def _shared(row: CheckpointRow, feeders: Collection[MessageQueue]) -> CheckpointRow:
    names = ", ".join(sorted(queue_key(q) for q in feeders))
    said = f"{SHARED_DETAIL} (source queues {names} feed this target queue)"
    return replace(row, exact=False, detail=f"{said}; {row.detail}" if row.detail else said)


def _outcome_rows(group: str, snapshot_ms: int, translations: Sequence[Translation],
                  current: Mapping[MessageQueue, int], committed: Mapping[MessageQueue, int],
                  errors: Mapping[MessageQueue, str]) -> list[CheckpointRow]:
    blocked = {t.target for t in translations if t.outcome is Outcome.PENDING and t.target is not None}
    rows = []
    for t in translations:
        q = t.target
        base = CheckpointRow(group, CheckpointOutcome.PENDING, snapshot_ms, t.source.topic, t.source.broker_name,
                             t.source.queue_id, t.source_offset, q.topic if q else None, q.broker_name if q else None,
                             q.queue_id if q else None, t.target_offset, None, t.exact)
        if t.outcome is Outcome.UNMAPPED:
            rows.append(_with(base, CheckpointOutcome.UNMAPPED, "no message of this queue replicated yet"))
        elif t.partial:
            rows.append(_with(base, CheckpointOutcome.PARTIAL, "replication has not passed the offset yet; "
                                                               "target_offset: the end of the replicated data"))
        elif t.outcome is Outcome.PENDING:
            rows.append(_with(base, CheckpointOutcome.PENDING, "replication has not passed the offset yet"))
        elif q is None:
            raise AssertionError(f"translated without a target queue: {t}")
        elif q in errors:
            rows.append(_with(base, CheckpointOutcome.TARGET_ERROR, errors[q]))
        elif q in committed:
            rows.append(_with(base, CheckpointOutcome.COMMITTED, "", committed[q]))
        elif q in blocked:
            rows.append(_with(base, CheckpointOutcome.PENDING, "another source queue feeding this target "
                                                               "queue is pending"))
        else:
            rows.append(_with(base, CheckpointOutcome.CURRENT, f"target group at {current.get(q)}"))
    return rows


def _with(row: CheckpointRow, outcome: CheckpointOutcome, detail: str, committed: int | None = None) -> CheckpointRow:
    return CheckpointRow(row.group, outcome, row.snapshot_ms, row.source_topic, row.source_broker,
                         row.source_queue_id, row.source_offset, row.target_topic, row.target_broker,
                         row.target_queue_id, row.target_offset, committed, row.exact, detail)


class CheckpointCommitter:
    """Applies snapshots to the target cluster of one link. Driver only; not thread-safe."""

    def __init__(self, *, link: str, source_cluster: str, target_cluster: str, target_admin: Admin,
                 target_producer: Producer | None, progress: Callable[[], LinkProgress],
                 clock: ThreadClock = SYSTEM_CLOCK, max_runs_per_queue: int = DEFAULT_MAX_RUNS) -> None:
        """``progress`` brings the link's offset map and committed offsets up to date, once per ``apply``
        (``link_state.LinkProgressReader.read``: incremental, so it is kept with the committer);
        ``target_producer`` None: no checkpoint messages (``CheckpointSettings.produce_topic`` off).
        ``max_runs_per_queue``: offset-map runs the translator keeps per source queue (``forget_below``; the
        link's ``checkpoints.max_runs_per_queue``)."""
        self.link = link
        self.source_cluster = source_cluster
        self.target_cluster = target_cluster
        self._admin = target_admin
        self._producer = target_producer
        self._progress = progress
        self._clock = clock
        self._topic_ready = False
        self.max_runs_per_queue = max_runs_per_queue
        self._problems: StandingConditions[ProblemKey, str] = StandingConditions()

    def apply(self, snapshot: GroupOffsetSnapshot) -> CheckpointReport:
        """Translate and commit every group of ``snapshot``; see the module docstring. The report's
        ``transitions`` say which problems started and cleared with it."""
        report = self._apply(snapshot)
        report.transitions = self._problems.update(report.problem_conditions(),
                                                   judged=lambda key: self._judged(key, report))
        return report

    def _judged(self, key: ProblemKey, report: CheckpointReport) -> bool:
        """Could this checkpoint have seen the problem ``key``? Only then may it clear (see the module docstring)."""
        kind, subject = key
        unreachable = {r.group for r in report.condition_rows
                       if r.outcome is CheckpointOutcome.SOURCE_UNREACHABLE}
        if kind == CheckpointOutcome.TARGET_ERROR.value:
            return any(g.group == subject for g in report.groups)
        if kind == SHARED:
            return any(g.group == subject and g.rows for g in report.groups)
        if kind == NOT_PRODUCED:
            return self._producer is not None and any(g.group == subject and g.committed for g in report.groups)
        if kind == CheckpointOutcome.SOURCE_UNREACHABLE.value:
            return subject == self.source_cluster or self.source_cluster not in unreachable
        return not unreachable  # a group or topic of the source: only a whole read can tell it is gone

    def _apply(self, snapshot: GroupOffsetSnapshot) -> CheckpointReport:
        report = CheckpointReport(snapshot.taken_ms)
        for c in snapshot.conditions:
            report.condition_rows.append(CheckpointRow(c.subject, CheckpointOutcome(c.kind.value), snapshot.taken_ms,
                                                       detail=c.detail))
        if not snapshot.offsets:
            return report
        progress = self._progress()
        by_group: dict[str, list[GroupOffset]] = defaultdict(list)
        for o in snapshot.offsets:
            by_group[o.group].append(o)
        for group in sorted(by_group):
            checkpoint = self._apply_group(group, by_group[group], progress, snapshot.taken_ms)
            report.groups.append(checkpoint)
            if checkpoint.committed and self._producer is not None:
                error = self._produce(checkpoint, snapshot.taken_ms)
                if error:
                    report.topic_errors[group] = error
        # Runs below every selected group's offset are needed exactly by no one now: fold them, so the
        # translator of a long-lived link stays small (a group showing up below later re-reads, reported
        # as inexact; translation.OffsetTranslator.forget_below).
        floors: dict[MessageQueue, int] = {}
        for o in snapshot.offsets:
            floors[o.queue] = min(floors.get(o.queue, o.offset), o.offset)
        folded = progress.translator.forget_below(floors, self.max_runs_per_queue)
        if folded:
            log.debug("link %s: %d offset-map run(s) below every group folded", self.link, folded)
        return report

    def _apply_group(self, group: str, offsets: Sequence[GroupOffset], progress: LinkProgress,
                     snapshot_ms: int) -> GroupCheckpoint:
        translations = translate_group(offsets, progress)
        targets = sorted({t.target for t in translations if t.outcome is Outcome.TRANSLATED and t.target})
        shared = {q: feeders for q in {t.target for t in translations if t.target is not None}
                  if len(feeders := progress.translator.feeders(q)) > 1}
        current: dict[MessageQueue, int] = {}
        errors: dict[MessageQueue, str] = {}
        online: dict[str, list[str]] = {}
        for topic in sorted({q.topic for q in targets}):
            queues = [q for q in targets if q.topic == topic]
            try:  # per target topic: one that vanished affects only its own queues
                ids, found = once_more_on_new_route(partial(self._read_target, group, topic, queues))
            except RocketMQError as exc:
                errors.update(dict.fromkeys(queues, f"target cluster {self.target_cluster}: {exc}"))
                continue
            if ids:
                online[topic] = ids
            current.update(found)
        if online:
            detail = "; ".join(f"{topic}: {len(ids)} consumer(s) online" for topic, ids in online.items())
            rows = mark_shared([_with(r, CheckpointOutcome.GROUP_ONLINE, detail)
                                if r.outcome is CheckpointOutcome.CURRENT else r
                                for r in outcome_rows(group, snapshot_ms, translations, {}, {}, errors)], shared)
            return GroupCheckpoint(group, {}, tuple(rows))
        planned = target_offsets([t for t in translations if t.target not in errors], current)
        committed: dict[MessageQueue, int] = {}
        for q, offset in sorted(planned.commit.items()):
            try:
                once_more_on_new_route(partial(self._admin.update_consumer_offset, group, q, offset))
                committed[q] = offset
            except RocketMQError as exc:
                errors[q] = f"UPDATE_CONSUMER_OFFSET on {self.target_cluster}: {exc}"
        return GroupCheckpoint(group, committed, tuple(outcome_rows(group, snapshot_ms, translations, current,
                                                                    committed, errors, shared)))

    def _read_target(self, group: str, topic: str,
                     queues: Sequence[MessageQueue]) -> tuple[list[str], dict[MessageQueue, int]]:
        """The group's online consumers of ``topic`` on the target and, when there are none, its committed
        offsets on ``queues`` (a queue it never committed is left out)."""
        ids = self._admin.consumer_list(group, topic)
        if ids:
            return ids, {}
        current: dict[MessageQueue, int] = {}
        for q in queues:
            offset = self._admin.consumer_offset(group, q)
            if offset is not None:
                current[q] = offset
        return [], current

    def _produce(self, checkpoint: GroupCheckpoint, snapshot_ms: int) -> str | None:
        assert self._producer is not None
        body = json.dumps({
            "version": CHECKPOINT_MESSAGE_VERSION, "link": self.link, "sourceCluster": self.source_cluster,
            "targetCluster": self.target_cluster, "group": checkpoint.group, "snapshotMs": snapshot_ms,
            "committedMs": wall_ms(self._clock),
            "offsets": [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": off}
                        for q, off in sorted(checkpoint.committed.items())],
        }, sort_keys=True).encode()
        try:
            if not self._topic_ready:
                if CHECKPOINT_TOPIC not in self._admin.topic_list():
                    self._admin.create_topic(CHECKPOINT_TOPIC, 1)
                    self._admin.wait_for_route(CHECKPOINT_TOPIC, timeout=10)
                self._topic_ready = True
            self._producer.send(new_message(CHECKPOINT_TOPIC, body, tags=self.link, keys=[checkpoint.group]))
        except RocketMQError as exc:
            self._topic_ready = False  # it may have vanished (deleted on the target): check, create, next time
            # reported with the checkpoint's problems (a WARNING when it starts, not every checkpoint)
            log.debug("link %s: checkpoint of group %s not produced to %s: %s", self.link, checkpoint.group,
                      CHECKPOINT_TOPIC, exc)
            return str(exc)
        return None
