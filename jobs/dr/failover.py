"""The unplanned failover of a link from A (its source, lost) to B (its target): the steps of
``python -m jobs.dr failover``, run by ``jobs.dr.operation.OperationRunner``. A is never asked for anything
(it is gone); everything comes from the link's own records beside its tables.

    (gate)     before an operation starts: A must not answer (its name server or any of its primaries), unless
               ``--force``; the command refuses in one line otherwise (a planned move is ``switchover``).
    preflight  B answers; the selected groups (``--group``, default every group with a translated checkpoint,
               complete or partial: ``CheckpointOutcome.PARTIAL``, a group that read ahead of the link).
    stop       the link's stop marker is written (``connectors.replication.link_stop``: the replication job plans
               no new batch, so A coming back is not copied on unmarked), then the step waits until the link's
               committed point stops moving (a batch planned before the marker commits first).
    adopt      what a batch that never committed (hung on A's death) sent to B: found on B by the position
               property, beyond the committed point without a gap, committed to the link's tables
               (``jobs.dr.unfinished_batch``), so the audit and the groups' translation count it as replicated.
    audit      per source queue: replicated up to X (the link's committed point), A last seen at Y at time T
               (the job's record, ``connectors.replication.source_maxes``): at least Y - X acknowledged messages
               are not on B; what A acknowledged after T is unknown (``jobs.dr.rpo``).
    commit     each selected group's offsets from its newest translated checkpoint (partial ones included), an
               offset beyond what was replicated lowered to the replicated end (nothing on B is skipped, and the
               group re-reads at most what it consumed on A in the checkpoint interval), translated and committed on
               B by the checkpoint connector's committer and read back (``switchover.commit_on_b``).
    report     the audit, each group's A offset -> B offset, each step's duration, what the operator does next.

Every step is idempotent: a re-run after a crash redoes only what is not done, and the journal keeps the audit
for ``show`` and a later ``recover``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.compute as pc

from broker_store.client import MessageQueue
from broker_store.clock import poll, wall_ms
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.snapshot import GroupOffset, GroupOffsetSnapshot
from connectors.checkpoint.tables import CHECKPOINTS, CheckpointTables, newest_complete_snapshot_ms
from connectors.core.delta import epoch_ms
from connectors.core.offsets import queue_key
from connectors.replication.link_stop import LinkStop, resume_link, stop_link
from connectors.replication.source_maxes import read_source_maxes
from jobs.dr.link_ends import LinkEnds, queue_of, triple
from jobs.dr.operation import Json, Step, StepContext, StepRecord, StepRefusedError
from jobs.dr.rpo import audit
from jobs.dr.switchover import commit_on_b, operator_moves, refusing_client_errors
from jobs.dr.unfinished_batch import QUERY_PREFIX as ADOPT_QUERY_PREFIX
from jobs.dr.unfinished_batch import adopt_unfinished

KIND = "failover"


@dataclass(frozen=True)
class FailoverSettings:
    force: bool = False
    """Fail over although A answers."""
    groups: tuple[str, ...] = ()
    """The groups to move (empty: every group with a translated checkpoint)."""
    settle_s: float = 5.0
    """The link's committed point must stay unchanged this long after the stop."""
    settle_timeout_s: float = 120.0
    poll_s: float = 0.5


@dataclass(frozen=True)
class GroupStart:
    """Where one group resumes on B, before translation."""

    offsets: tuple[GroupOffset, ...]
    lowered: tuple[tuple[str, MessageQueue, int, int], ...] = field(default=())
    """(group, queue, A offset, lowered to): A offsets beyond the replicated point."""


def group_starts(checkpoints: Mapping[str, Sequence[GroupOffset]],
                 replicated: Mapping[MessageQueue, int]) -> GroupStart:
    """The offsets to translate: each group's newest checkpoint, an offset beyond the queue's replicated point
    lowered to it (its translation is the end of the replicated data on B: nothing on B skipped). Pure."""
    offsets, lowered = [], []
    for group in sorted(checkpoints):
        for o in sorted(checkpoints[group], key=lambda o: queue_key(o.queue)):
            end = replicated.get(o.queue)
            if end is not None and o.offset > end:
                lowered.append((group, o.queue, o.offset, end))
                o = o._replace(offset=end)
            offsets.append(o)
    return GroupStart(tuple(offsets), tuple(lowered))


def newest_checkpoints(rows: Iterable[Mapping[str, Any]], newest_ms: Mapping[str, int | None],
                       groups: Sequence[str]) -> dict[str, list[GroupOffset]]:
    """Each group's source offsets in its newest complete checkpoint (``newest_ms``), from the checkpoints
    table's rows (condition rows, without a source queue, skipped). Pure."""
    out: dict[str, list[GroupOffset]] = {g: [] for g in groups if newest_ms.get(g) is not None}
    for r in rows:
        g = r["group"]
        if g not in out or r["source_offset"] is None or r["source_offset"] < 0 or not r["source_topic"]:
            continue
        if epoch_ms(r["snapshot_at"]) != newest_ms[g]:
            continue
        out[g].append(GroupOffset(g, MessageQueue(r["source_topic"], r["source_broker"], int(r["source_queue_id"])),
                                  int(r["source_offset"])))
    return out


def _committed_point(ends: LinkEnds) -> dict[str, int]:
    return {queue_key(q): o for q, o in ends.replicated().items()}


class Failover:
    """The steps over one link's ends. ``progress`` gets a line while a step waits."""

    def __init__(self, ends: LinkEnds, settings: FailoverSettings,
                 progress: Callable[[str], None] | None = None) -> None:
        self.ends = ends
        self.settings = settings
        self._progress = progress or (lambda line: None)

    def steps(self) -> list[Step]:
        return [replace(s, run=refusing_client_errors(s.run)) for s in [
            Step("preflight", self.preflight, "check B answers; choose the groups (newest translated checkpoints)"),
            Step("stop", self.stop, "stop the link (marker beside its tables); wait until its commits settle",
                 undo=self.unstop),
            Step("adopt", self.adopt, "what a batch that never committed sent to B: found there by the position "
                                      "property, committed to the link's tables"),
            Step("audit", self.audit, "per queue: replicated X, A last seen at Y at time T: at least Y - X lost"),
            Step("commit", self.commit, "commit each group's newest checkpoint on B (never past the replicated "
                                        "data) and verify it"),
            Step("report", self.report, "the audit, the groups' offsets, what the operator does next"),
        ]]

    # -- the gate ---------------------------------------------------------------------------------------

    def a_answers(self) -> str | None:
        """What of A answers now (None: nothing): its name server listing a primary that answers an admin
        request."""
        ends = self.ends
        try:
            primaries = ends.a.primary_addrs(ends.source.name)
        except RocketMQError:
            return None
        for broker, addr in sorted(primaries.items()):
            try:
                ends.a.all_delay_offsets(addr)
            except RocketMQError:
                continue
            return f"broker group {broker} of {ends.source.name} at {addr}"
        return None

    def gate(self) -> None:
        """Refuse a new failover while A answers (unless forced)."""
        if self.settings.force:
            return
        answering = self.a_answers()
        if answering is not None:
            raise StepRefusedError(
                f"{answering} answers: a failover is for a lost cluster",
                "for a planned move use python -m jobs.dr switchover; to fail over anyway add --force")

    # -- preflight --------------------------------------------------------------------------------------

    def preflight(self, ctx: StepContext) -> Json:
        ends = self.ends
        try:
            ends.b.cluster_info()
        except RocketMQError as exc:
            raise StepRefusedError(f"cluster {ends.target.name} (B) does not answer: {exc}",
                                   "a failover moves the link's consumers to B; bring B back, then run again") from exc
        tables = CheckpointTables(ends.link.tables_location)
        rows = tables.read(CHECKPOINTS, columns=["group", "outcome", "snapshot_at"])
        known = sorted(set(rows["group"].to_pylist()) - {None, ""})
        wanted = list(self.settings.groups) or known
        # partial checkpoints count: a group consuming close to the head of A is ahead of the link at every
        # checkpoint, and its newest complete one can be arbitrarily old (it would re-read everything since)
        newest = {g: newest_complete_snapshot_ms(rows.filter(pc.equal(rows["group"], g)), partial=True)
                  for g in wanted}
        without = sorted(g for g, ms in newest.items() if ms is None)
        if self.settings.groups and without:
            raise StepRefusedError(f"group(s) without a translated checkpoint of link {ends.link.name}: "
                                   f"{', '.join(without)}", "name only groups the link checkpoints (--group)")
        return {"groups": sorted(g for g, ms in newest.items() if ms is not None), "without_checkpoint": without,
                "checkpoint_ms": {g: ms for g, ms in sorted(newest.items()) if ms is not None},
                "forced": self.settings.force}

    # -- stop -------------------------------------------------------------------------------------------

    def stop(self, ctx: StepContext) -> Json:
        ends = self.ends
        stop_link(ends.link.tables_location, LinkStop(ctx.operation.id, f"jobs.dr failover {ctx.operation.id}",
                                                      ends.clock.time()))
        last: dict[str, int] | None = None
        since = ends.clock.monotonic()
        moved = False

        def settled() -> Json | None:
            nonlocal last, since, moved
            point = _committed_point(ends)
            now = ends.clock.monotonic()
            if point != last:
                moved = last is not None
                last, since = point, now
                return None
            return {"replicated": point} if now - since >= self.settings.settle_s else None

        def waiting() -> None:
            nonlocal moved
            if moved:  # a line when the link committed, not one per poll
                moved = False
                self._progress(f"stop: the link committed a batch; {sum((last or {}).values())} message(s) "
                               "replicated; waiting for it to settle")

        self._progress(f"stop: the link is stopped; waiting {self.settings.settle_s:g} s for a last batch to commit")
        done = poll(ends.clock, settled, self.settings.settle_timeout_s, self.settings.poll_s, waiting)
        if done is None:
            raise StepRefusedError(f"the link's committed point still moves {self.settings.settle_timeout_s:g} s "
                                   "after the stop", "check the link's job (it should log that it is stopped); "
                                                     "run again")
        return done

    def unstop(self, record: StepRecord) -> None:
        resume_link(self.ends.link.tables_location)

    # -- adopt -------------------------------------------------------------------------------------------

    def adopt(self, ctx: StepContext) -> Json:
        found = adopt_unfinished(self.ends, f"{ADOPT_QUERY_PREFIX}{ctx.operation.id}.{ctx.step.attempts}")
        adopted = [a for a in found if a.adopted or a.beyond_gap]
        if adopted:
            self._progress(f"adopt: {sum(a.adopted for a in found)} message(s) a batch sent to B without committing "
                           f"adopted into the link's committed point ({len(adopted)} queue(s))")
        return {"queues": [a.to_json() for a in adopted], "adopted": sum(a.adopted for a in found),
                "beyond_gap": sum(a.beyond_gap for a in found), "looked_at": len(found)}

    # -- audit ------------------------------------------------------------------------------------------

    def audit(self, ctx: StepContext) -> Json:
        ends = self.ends
        replicated = ends.replicated()
        record = read_source_maxes(ends.link.tables_location)
        result = audit(replicated, record).to_json()
        result["record"] = record is not None
        return result

    # -- commit -----------------------------------------------------------------------------------------

    def commit(self, ctx: StepContext) -> Json:
        ends = self.ends
        groups: list[str] = list(ctx.results["preflight"]["groups"])
        if not groups:
            return {"groups": {}, "lowered": []}
        newest: dict[str, int | None] = {g: int(ms) for g, ms in ctx.results["preflight"]["checkpoint_ms"].items()}
        rows = CheckpointTables(ends.link.tables_location).read(
            CHECKPOINTS, columns=["group", "source_topic", "source_broker", "source_queue_id", "source_offset",
                                  "snapshot_at"])
        checkpoints = newest_checkpoints(rows.to_pylist(), newest, groups)
        replicated = {queue_of(t): int(o) for t, o in _queues(ctx.results["audit"])}
        start = group_starts(checkpoints, replicated)
        taken = min((ms for ms in newest.values() if ms is not None), default=wall_ms(ends.clock))
        result = commit_on_b(ends, GroupOffsetSnapshot(taken, start.offsets), f"dr-{KIND}-{ctx.operation.id}",
                             ctx.step.attempts)
        result["lowered"] = [{"group": g, "queue": triple(q), "a_offset": a, "set_to": e}
                             for g, q, a, e in start.lowered]
        return result

    # -- report -----------------------------------------------------------------------------------------

    def report(self, ctx: StepContext) -> Json:
        durations = {s.name: s.duration_s for s in ctx.operation.steps if s.name != "report"}
        return {"audit": ctx.results["audit"], "groups": ctx.results["commit"]["groups"],
                "adopted": ctx.results["adopt"],
                "lowered": ctx.results["commit"]["lowered"],
                "without_checkpoint": ctx.results["preflight"]["without_checkpoint"],
                "durations_s": durations, "operator": operator_moves(self.ends),
                "next": f"the link stays stopped; once {self.ends.source.name} answers again, "
                        f"python -m jobs.dr recover --link {self.ends.link.name} copies what it acknowledged "
                        "beyond the replicated point; delayed messages waiting on A (its schedule, not readable now) "
                        "are delivered by A when due once it is back, into its topics beyond the replicated point: "
                        "recover copies those due by the time it runs and reports how many still wait, for a "
                        "later recover"}


def _queues(audit_json: Json) -> list[tuple[list[Any], int]]:
    """(queue triple, replicated point) of the audit's queues the link replicated."""
    return [(q["queue"], int(q["replicated"])) for q in audit_json["queues"] if q["replicated"] is not None]
