"""The planned switchover of a link from A (its source, healthy) to B (its target): the steps of
``python -m jobs.dr switchover``, run by ``jobs.dr.operation.OperationRunner``.

    preflight  A and B answer; the link's lag is under the gate; every mapped topic and every selected group
               with offsets on A exists on B. Each refusal names the blocker.
    fence      the write permission is removed from the link's source topics on every broker group of A (the
               old permissions saved in the journal first, so ``abort`` restores them after any crash); a probe
               send to each fenced queue's broker must be refused. Not the replicator's heartbeat topic: the
               heartbeat job keeps writing its probes (no application reads them) and the heartbeat lag stays
               measurable, instead of a refused send every second.
    drain      waits until the link has committed every A queue up to its max offset (fixed now: A takes no
               writes).
    groups     waits until no selected group has a consumer online on A (GET_CONSUMER_LIST_BY_GROUP).
    commit     translates each group's final offsets on A through the link's offset map and commits them on B
               with the checkpoint connector's own committer (``connectors.checkpoint.committer``: one
               translation, never moved backwards), recorded in the link's checkpoints table; then reads them
               back from B.
    report     per queue: on A, replicated, missing (0); per group: A offset -> B offset; each step's duration;
               the delayed messages still waiting on A and until when the forward link's job must keep running
               to bring them to B (``jobs.dr.delayed``).

With ``--reverse`` two steps of ``jobs.dr.reverse_start`` make A a warm standby: ``hold`` (after preflight) stops
the reverse link B -> A while A is fenced, ``reverse`` (after commit) commits its exact start on B, gives A's
topics their permissions back for its writes and releases it.

Every step is idempotent (a re-run after a crash redoes only what is not done). Producers and consumers are
moved by the operator (their name server address); ``OPERATOR_MOVES`` says so in the output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from broker_store.client import MessageQueue, Producer, new_message
from broker_store.clock import poll
from broker_store.protocol.codes import PERM_WRITE
from broker_store.protocol.errors import RocketMQError
from broker_store.store.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, DelayLevels
from connectors.checkpoint.committer import CheckpointCommitter
from connectors.checkpoint.link_state import read_link_progress
from connectors.checkpoint.snapshot import GroupOffsetSnapshot
from connectors.checkpoint.tables import CheckpointOutcome, CheckpointTables
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.core.offsets import queue_key
from jobs.dr.delayed import keep_link_line, read_waiting
from jobs.dr.link_ends import LinkEnds, queue_of, triple
from jobs.dr.operation import Json, Step, StepContext, StepRecord, StepRefusedError
from jobs.dr.reverse_start import ReverseStandby

KIND = "switchover"
PROBE_PROPERTY = "DR_FENCE_PROBE"
"""Set on the fence's probe message (the operation id): should A ever accept one, it is recognisable."""


def operator_moves(ends: LinkEnds) -> str:
    return (f"Producers and consumers are moved by the operator: change their name server address from "
            f"{';'.join(ends.source.namesrv)} (A, {ends.source.name}) to {';'.join(ends.target.namesrv)} "
            f"(B, {ends.target.name}); this command moves neither.")


@dataclass(frozen=True)
class SwitchoverSettings:
    max_lag: int = 10_000
    """Preflight gate: messages on A the link has not replicated yet, summed over its queues. It bounds the drain
    (A refuses writes from the fence until the link has copied them): 10,000 is 10 s of a 1,000 msg/s load, a
    few seconds of a link's copying, and above what a healthy link trails by under such a load (a trigger's
    worth, plus the batch in flight)."""
    drain_timeout_s: float = 120.0
    groups_timeout_s: float = 60.0
    poll_s: float = 0.5
    delay_levels: str = DEFAULT_MESSAGE_DELAY_LEVEL
    """A's ``message_delay_level``: the due time of its waiting delayed messages (``jobs.dr.delayed``)."""


Progress = Callable[[str], None]


def refusing_client_errors(run: Callable[[StepContext], Json]) -> Callable[[StepContext], Json]:
    """``run`` with a cluster's error (unreachable, refused, timed out) turned into the step's refusal, so the
    journal records it and the command's last line says it; the step is retried by the next run."""

    def wrapped(ctx: StepContext) -> Json:
        try:
            return run(ctx)
        except RocketMQError as exc:
            raise StepRefusedError(f"step {ctx.step.name}: a cluster request failed: {exc}",
                                   "run the same command again once the cluster answers, or abort") from exc

    return wrapped


def both_answer(ends: LinkEnds, why: str) -> None:
    """Refuse the step unless A and B both answer a cluster-info request; ``why`` says why both are needed."""
    for side, name, admin in (("A", ends.source.name, ends.a), ("B", ends.target.name, ends.b)):
        try:
            admin.cluster_info()
        except RocketMQError as exc:
            raise StepRefusedError(f"cluster {name} ({side}) does not answer: {exc}",
                                   f"{why}; bring {name} back, then run again") from exc


class Switchover:
    """The steps over one link's ends. ``progress`` gets a line while a long step waits."""

    def __init__(self, ends: LinkEnds, settings: SwitchoverSettings, progress: Progress | None = None,
                 standby: ReverseStandby | None = None) -> None:
        self.ends = ends
        self.settings = settings
        self._progress = progress or (lambda line: None)
        self.standby = standby
        """With ``--reverse``: the reverse link made ready (``jobs.dr.reverse_start``)."""

    def steps(self) -> list[Step]:
        return [replace(s, run=refusing_client_errors(s.run)) for s in self._steps()]

    def _steps(self) -> list[Step]:
        steps = [
            Step("preflight", self.preflight, "check A and B answer, the lag is under the gate, topics and groups "
                                              "exist on B"),
            Step("fence", self.fence, "remove write permission from the link's topics on every A broker group; "
                                      "probe", undo=self.unfence),
            Step("drain", self.drain, "wait until the link replicated every A queue up to its max offset"),
            Step("groups", self.groups_offline, "wait until the selected groups have no consumer online on A"),
            Step("commit", self.commit, "commit each group's final translated offsets on B and verify them"),
            Step("report", self.report, "per queue and per group, what crossed"),
        ]
        standby = self.standby
        if standby is None:
            return steps
        return [steps[0],
                Step("hold", standby.hold, f"stop the reverse link {standby.name} (a job of it may run: it waits)",
                     undo=standby.unhold),
                *steps[1:-1],
                Step("reverse", self.start_reverse, f"start the reverse link {standby.name} from B's end exactly "
                                                    "(its resume point); A's topics take its writes; release it",
                     undo=self.stop_reverse),
                steps[-1]]

    def start_reverse(self, ctx: StepContext) -> Json:
        assert self.standby is not None
        return self.standby.start_reverse(ctx, ctx.results["fence"]["old_perms"], self.set_perm)

    def stop_reverse(self, record: StepRecord) -> None:
        assert self.standby is not None
        old = record.result.get("a_perms") or {}
        self.standby.stop_reverse(record, old, self.set_perm)

    # -- preflight --------------------------------------------------------------------------------------

    def preflight(self, ctx: StepContext) -> Json:
        ends = self.ends
        both_answer(ends, "a planned switchover needs both clusters up")
        queues = ends.source_queues()
        if not queues:
            raise StepRefusedError(f"link {ends.link.name} selects no topic on {ends.source.name}",
                                   "check the link's topics in the config")
        maxes = ends.max_offsets(queues)
        replicated = ends.replicated()
        behind = {q: maxes[q] - replicated.get(q, 0) for q in queues if maxes[q] > replicated.get(q, 0)}
        lag = sum(behind.values())
        if lag > self.settings.max_lag:
            worst = max(behind, key=lambda q: behind[q])
            raise StepRefusedError(
                f"replication lag {lag} message(s) is over the gate {self.settings.max_lag} (most behind: "
                f"{queue_key(worst)} by {behind[worst]})",
                "wait for the link to catch up (.venv/bin/python -m jobs.lag) or raise --max-lag, then run again")
        mapper = ends.mapper()
        targets = {q.topic: mapper.target_for(q.topic) for q in queues}
        b_topics = set(ends.b.topic_list())
        missing_topics = sorted(f"{t} (from {s})" for s, t in targets.items() if t is not None and t not in b_topics)
        if missing_topics:
            raise StepRefusedError(f"topic(s) missing on {ends.target.name}: {', '.join(missing_topics)}",
                                   "let config sync create them (or create them on B), then run again")
        snapshot = ends.group_snapshot()
        if snapshot.conditions:
            said = "; ".join(f"{c.kind.value} {c.subject}: {c.detail}" for c in snapshot.conditions)
            raise StepRefusedError(f"the groups' offsets on {ends.source.name} could not all be read: {said}",
                                   "fix that, then run again")
        groups = snapshot.groups()
        missing_groups = sorted(set(groups) - ends.b_groups())
        if missing_groups:
            raise StepRefusedError(f"group(s) missing on {ends.target.name}: {', '.join(missing_groups)}",
                                   "let config sync create them (or create them on B), then run again")
        return {"queues": sorted(triple(q) for q in queues), "lag": lag, "groups": groups,
                "topics": {s: t for s, t in sorted(targets.items()) if t is not None}}

    # -- fence ------------------------------------------------------------------------------------------

    def _topics(self, ctx: StepContext) -> list[str]:
        return sorted({str(t[0]) for t in ctx.results["preflight"]["queues"]})

    def fence(self, ctx: StepContext) -> Json:
        ends = self.ends
        old: dict[str, dict[str, int]] | None = ctx.progress.get("old_perms")
        if old is None:  # first attempt: remember the permissions before touching any
            topics = set(self._topics(ctx)) - {HEARTBEAT_TOPIC}
            old = {}
            for broker, addr in sorted(ends.a.primary_addrs(ends.source.name).items()):
                configs = ends.a.all_topic_config(addr)
                old[broker] = {t: configs[t].perm for t in sorted(topics & set(configs))}
            ctx.save({"old_perms": old})
        for broker, perms in sorted(old.items()):
            for topic, perm in sorted(perms.items()):
                self.set_perm(broker, topic, perm & ~PERM_WRITE)
        probes = {f"{topic}/{broker}": self._probe(ctx.operation.id, broker, topic)
                  for broker, perms in sorted(old.items()) for topic in sorted(perms)}
        return {"old_perms": old, "probes": probes}

    def set_perm(self, broker: str, topic: str, perm: int) -> None:
        """Set one topic's permission on one broker group's primary, keeping the rest of its config."""
        admin = self.ends.a
        addr = admin.primary_addrs(self.ends.source.name).get(broker)
        if addr is None:
            raise StepRefusedError(f"broker group {broker} of {self.ends.source.name} has no primary registered",
                                   "wait for its failover to finish, then run again")
        tc = admin.all_topic_config(addr).get(topic)
        if tc is None or tc.perm == perm:
            return
        admin.create_topic(topic, tc.read_queue_nums, perm, broker_names=[broker], order=tc.order,
                           read_queue_nums=tc.read_queue_nums, write_queue_nums=tc.write_queue_nums,
                           attributes=dict(tc.attributes) or None)

    def _probe(self, op_id: str, broker: str, topic: str) -> str:
        """Send one message to queue 0 of ``topic`` on ``broker`` of A: the refusal's text. A send that is
        accepted refuses the step (the fence does not hold)."""
        source = self.ends.source
        producer = Producer(";".join(source.namesrv), f"PID_RMQ_SYS_DR_PROBE_{self.ends.link.name}",
                            send_timeout=3.0, retry_times_when_send_failed=0, auto_create_topic=False,
                            credentials=source.credentials(), tls=source.tls)
        message = new_message(topic, b"dr fence probe", properties={PROBE_PROPERTY: op_id})
        try:
            result = producer.send(message, MessageQueue(topic, broker, 0))
        except RocketMQError as exc:
            return str(exc)
        finally:
            producer.close()
        raise StepRefusedError(f"{source.name} still took a write to {topic} on {broker} after the fence "
                               f"(probe stored at queue offset {result.queue_offset}, property {PROBE_PROPERTY})",
                               "check the broker's topic permission; abort to restore A, or run again")

    def unfence(self, record: StepRecord) -> None:
        old: Mapping[str, Mapping[str, int]] = record.result.get("old_perms") or record.progress.get("old_perms") or {}
        for broker, perms in sorted(old.items()):
            for topic, perm in sorted(perms.items()):
                self.set_perm(broker, topic, int(perm))

    # -- drain ------------------------------------------------------------------------------------------

    def drain(self, ctx: StepContext) -> Json:
        ends = self.ends
        queues = [queue_of(t) for t in ctx.results["preflight"]["queues"]]
        maxes = ends.max_offsets(queues)  # fixed: A takes no writes on these topics any more
        behind: dict[MessageQueue, int] = {}

        def replicated_all() -> Json | None:
            nonlocal behind
            replicated = ends.replicated()
            behind = {q: maxes[q] - replicated.get(q, 0) for q in queues if replicated.get(q, 0) < maxes[q]}
            if behind:
                return None
            return {"queues": [{"queue": triple(q), "on_a": maxes[q], "replicated": replicated.get(q, 0),
                                "missing": 0} for q in sorted(queues, key=queue_key)]}

        done = poll(ends.clock, replicated_all, self.settings.drain_timeout_s, self.settings.poll_s,
                    lambda: self._progress(f"drain: {sum(behind.values())} message(s) of {len(behind)} queue(s) "
                                           "still to replicate"))
        if done is not None:
            return done
        worst = ", ".join(f"{queue_key(q)}: {behind[q]}" for q in sorted(behind, key=lambda q: -behind[q])[:3])
        raise StepRefusedError(
            f"the link has not replicated {sum(behind.values())} message(s) of {len(behind)} queue(s) of A after "
            f"{self.settings.drain_timeout_s:g} s (e.g. {worst})",
            "check that the link's job runs (.venv/bin/python -m jobs.lag); run again to keep waiting, or "
            "abort to reopen A")

    # -- groups -----------------------------------------------------------------------------------------

    def groups_offline(self, ctx: StepContext) -> Json:
        ends = self.ends
        groups: list[str] = list(ctx.results["preflight"]["groups"])
        topics = self._topics(ctx)
        online: dict[str, list[str]] = {}

        def all_offline() -> Json | None:
            nonlocal online
            online = {g: ids for g in groups if (ids := ends.online(ends.a, g, topics))}
            return None if online else {"groups": groups}

        done = poll(ends.clock, all_offline, self.settings.groups_timeout_s, self.settings.poll_s,
                    lambda: self._progress(f"groups: {len(online)} group(s) still online on A: "
                                           f"{', '.join(sorted(online))}"))
        if done is not None:
            return done
        said = ", ".join(f"{g} ({len(ids)} consumer(s): {', '.join(ids[:3])})" for g, ids in online.items())
        raise StepRefusedError(f"group(s) still online on {ends.source.name} after "
                               f"{self.settings.groups_timeout_s:g} s: {said}",
                               "stop those consumers (point them at B's name server), then run again; or "
                               "abort to reopen A")

    # -- commit -----------------------------------------------------------------------------------------

    def commit(self, ctx: StepContext) -> Json:
        snapshot = self.ends.group_snapshot()
        if snapshot.conditions:
            said = "; ".join(f"{c.kind.value} {c.subject}: {c.detail}" for c in snapshot.conditions)
            raise StepRefusedError(f"the groups' offsets on A could not all be read: {said}", "fix that, run again")
        return commit_on_b(self.ends, snapshot, f"dr-{KIND}-{ctx.operation.id}", ctx.step.attempts)

    # -- report -----------------------------------------------------------------------------------------

    def report(self, ctx: StepContext) -> Json:
        durations = {s.name: s.duration_s for s in ctx.operation.steps if s.name != "report"}
        delayed = read_waiting(self.ends, DelayLevels.parse(self.settings.delay_levels)).to_json()
        report = {"queues": ctx.results["drain"]["queues"], "groups": ctx.results["commit"]["groups"],
                  "durations_s": durations, "operator": operator_moves(self.ends), "delayed": delayed,
                  "delayed_next": keep_link_line(self.ends.link.name, delayed)}
        reverse = ctx.results.get("reverse")
        if reverse is not None:
            report["reverse"] = reverse
            report["operator"] += (f" A is the warm standby: its topics take the reverse link's writes "
                                   f"({reverse['reverse_link']}), so keep the applications off A; start that link's "
                                   f"job now if it is not running (it resumes from B's end as of the switchover).")
        return report


def commit_on_b(ends: LinkEnds, snapshot: GroupOffsetSnapshot, query_id: str, batch_id: int) -> Json:
    """Translate ``snapshot``'s group offsets through the link's offset map and commit them on B with the
    checkpoint connector's own committer (one translation, never moved backwards), record them in the link's
    checkpoints table (``query_id``, ``batch_id``), then read them back from B. Refuses when a group is online on
    B, a translation is pending or B refused. The result: per group, each source queue's A offset -> B queue and
    offset. Shared by switchover's and failover's ``commit`` steps."""
    link = ends.link
    committer = CheckpointCommitter(link=link.name, source_cluster=link.source, target_cluster=link.target,
                                    target_admin=ends.b, target_producer=None,
                                    progress=lambda: read_link_progress(ends.tables), clock=ends.clock,
                                    max_runs_per_queue=link.checkpoints.max_runs_per_queue)
    report = committer.apply(snapshot)
    CheckpointTables(link.tables_location).commit_checkpoint(query_id, batch_id, report.rows)
    blocking = [r for r in report.rows if r.outcome in (CheckpointOutcome.GROUP_ONLINE, CheckpointOutcome.PENDING,
                                                        CheckpointOutcome.PARTIAL, CheckpointOutcome.TARGET_ERROR)]
    if blocking:
        said = "; ".join(sorted({f"{r.group}: {r.outcome.value} {r.detail}" for r in blocking}))
        raise StepRefusedError(f"offsets not committed on {ends.target.name}: {said}",
                               "a group online on B must be stopped there first; run again")
    wanted: dict[tuple[str, MessageQueue], int] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in report.rows:
        entry: dict[str, Any] = {"source": [r.source_topic, r.source_broker, r.source_queue_id],
                                 "a_offset": r.source_offset, "b_queue": None, "b_offset": None,
                                 "exact": r.exact, "detail": r.detail}
        groups.setdefault(r.group, []).append(entry)
        if (r.target_topic is None or r.target_broker is None or r.target_queue_id is None
                or r.target_offset is None):
            continue  # nothing of the queue replicated (unmapped): nothing to set on B
        q = MessageQueue(r.target_topic, r.target_broker, r.target_queue_id)
        entry.update(b_queue=triple(q), b_offset=r.target_offset)
        key = (r.group, q)
        wanted[key] = min(wanted.get(key, r.target_offset), r.target_offset)
    short = []
    for (group, q), offset in sorted(wanted.items(), key=lambda kv: (kv[0][0], queue_key(kv[0][1]))):
        on_b = ends.b.consumer_offset(group, q)
        if on_b is None or on_b < offset:
            short.append(f"{group} {queue_key(q)}: {on_b} < {offset}")
    if short:
        raise StepRefusedError(f"offsets read back from {ends.target.name} are behind the translation: "
                               f"{'; '.join(short[:5])}", "run again")
    return {"groups": groups}
