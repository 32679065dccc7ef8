"""Failback: B (the forward link's target) is active, A is back as a standby; traffic moves back to A over the
reverse link (B -> A), with every selected group's position on A exact. The steps of
``python -m jobs.dr failback``, run by ``jobs.dr.operation.OperationRunner`` and journaled with the forward
link's operations. The switchover's steps (``jobs.dr.switchover``) run over the reverse link; what is new:

    preflight  the switchover's preflight over the reverse link (B and A answer, its topics and groups exist on
               A) without its lag gate: the reverse link cannot write to A while A is fenced, so what B took
               since the switchover is still to cross (the drain waits for it). Saves the permissions to give
               A's topics back: the ones the forward link's switchover saved, or the current ones plus write.
    fence      B's topics lose their write permission (the switchover's fence over the reverse link; probe).
    reopen     A's topics get their permissions back, so the reverse link can deliver (and producers moved
               back can write). ``abort`` fences them again.
    drain      the reverse link has replicated every B queue up to its max offset (the switchover's drain).
    groups     no selected group has a consumer online on B (the switchover's step).
    commit     each group's next offset on A from its offsets on B through both offset maps
               (``jobs.dr.reverse_positions``): the forward link's for A's own messages, the reverse link's
               for B's; refused while the group is online on A; set on A and read back.
    release    B's topics get their permissions back (the fence's saved ones): B is now the standby, which the
               forward link writes to, as A was before the switchover. ``abort`` fences them again.
    report     per B queue what crossed; per group and A queue the offset (exact, re-read); the forward link's
               resume check: what A holds beyond the forward link's resume point is all copies of B's
               messages, which its loop guard skips, so restarting the forward link copies nothing back. After
               a failover, the forward link's stop is lifted only when nothing A held when it was lost is
               still missing on B (``resume_forward``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from broker_store.client import PullConsumer, PullStatus
from broker_store.protocol.codes import PERM_WRITE
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.link_state import read_link_progress
from connectors.core.config import LinkConfig, ReplicatorConfig
from connectors.core.errors import ReplicatorConfigError
from connectors.core.offsets import queue_key
from connectors.replication.link_stop import STOP_FILE, read_stop, resume_link
from connectors.replication.loop_guard import chain_of
from connectors.replication.source_maxes import read_source_maxes
from jobs.dr.link_ends import LinkEnds, triple
from jobs.dr.operation import Json, OperationRecord, OperationState, Step, StepContext, StepRecord, StepRefusedError
from jobs.dr.reverse_positions import a_positions, run_map, segments
from jobs.dr.rpo import audit
from jobs.dr.switchover import KIND as SWITCHOVER
from jobs.dr.switchover import Progress, Switchover, SwitchoverSettings, refusing_client_errors

KIND = "failback"


def reverse_link_of(config: ReplicatorConfig, forward: LinkConfig, name: str | None = None) -> LinkConfig:
    """The reverse link of ``forward`` (B -> A): the one named, or the only one of the config."""
    if name is not None:
        link = config.link(name)
        if (link.source, link.target) != (forward.target, forward.source):
            raise ReplicatorConfigError(f"link {name} goes {link.source} -> {link.target}, not {forward.target} -> "
                                        f"{forward.source}: it is not the reverse of link {forward.name}")
        return link
    found = [k for k in config.links if (k.source, k.target) == (forward.target, forward.source)]
    if len(found) != 1:
        said = ", ".join(k.name for k in found) or "none"
        raise ReplicatorConfigError(f"failback of link {forward.name} needs one link {forward.target} -> "
                                    f"{forward.source} in the config (found: {said}); add one, or name it with "
                                    f"--reverse-link")
    return found[0]


@dataclass(frozen=True)
class FailbackSettings:
    switchover: SwitchoverSettings = SwitchoverSettings()
    groups: tuple[str, ...] = ()
    """Groups to move (``--group``); empty: the reverse link's selected groups with offsets on B."""


class Failback:
    """The steps over the forward link's ends (A -> B) and the reverse link's (B -> A). ``previous``: the
    forward link's operation before this one (its switchover saved A's permissions)."""

    def __init__(self, forward: LinkEnds, reverse: LinkEnds, settings: FailbackSettings,
                 previous: OperationRecord | None = None, progress: Progress | None = None) -> None:
        self.forward = forward
        self.reverse = reverse
        self.settings = settings
        self.previous = previous
        self._progress = progress or (lambda line: None)
        # the reverse link's switchover; no lag gate (see the module docstring)
        self.over_reverse = Switchover(reverse, replace(settings.switchover, max_lag=sys.maxsize), progress)
        self.on_a = Switchover(forward, settings.switchover, progress)  # A's topic permissions

    def steps(self) -> list[Step]:
        r = self.over_reverse
        steps = [
            Step("preflight", self.preflight, "check B and A answer, the reverse link's topics and groups exist on "
                                              "A; keep the permissions A's topics get back"),
            Step("fence", r.fence, "remove write permission from the reverse link's topics on every B broker "
                                   "group; probe", undo=r.unfence),
            Step("reopen", self.reopen, "give A's topics their permissions back (start the reverse link's job "
                                        "now if it is not running)", undo=self.refence),
            Step("drain", r.drain, "wait until the reverse link replicated every B queue up to its max offset"),
            Step("groups", r.groups_offline, "wait until the selected groups have no consumer online on B"),
            Step("commit", self.commit, "set each group's offsets on A through both offset maps; read them back"),
            Step("release", self.release, "give B's topics their permissions back: B is the standby the forward "
                                          "link writes to", undo=self.refence_b),
            Step("report", self.report, "per queue and per group, what crossed; the forward link's resume check"),
        ]
        return [replace(s, run=refusing_client_errors(s.run)) for s in steps]

    # -- preflight / reopen -----------------------------------------------------------------------------

    def _a_perms_to_restore(self) -> dict[str, dict[str, int]]:
        prev = self.previous
        if (prev is not None and prev.kind == SWITCHOVER and prev.link == self.forward.link.name
                and prev.state is OperationState.DONE):
            saved = prev.step("fence").result.get("old_perms")
            if saved:
                return {b: {t: int(p) for t, p in perms.items()} for b, perms in saved.items()}
        a = self.forward.a
        topics = {q.topic for q in self.forward.source_queues()}
        out: dict[str, dict[str, int]] = {}
        for broker, addr in sorted(a.primary_addrs(self.forward.source.name).items()):
            configs = a.all_topic_config(addr)
            out[broker] = {t: configs[t].perm | PERM_WRITE for t in sorted(topics & set(configs))}
        return out

    def preflight(self, ctx: StepContext) -> Json:
        perms = ctx.progress.get("a_perms")
        if perms is None:  # first attempt: the journal still held the switchover's record when we started
            perms = self._a_perms_to_restore()
            ctx.save({"a_perms": perms})
        result = self.over_reverse.preflight(ctx)
        groups: list[str] = result["groups"]
        if self.settings.groups:
            unknown = sorted(set(self.settings.groups) - set(groups))
            if unknown:
                raise StepRefusedError(f"group(s) with no offsets on {self.reverse.source.name} on the reverse "
                                       f"link's topics: {', '.join(unknown)} (selected there: {', '.join(groups)})",
                                       "name groups that consumed on B, or select them in the reverse link's "
                                       "checkpoints.groups")
            groups = sorted(self.settings.groups)
        return {**result, "groups": groups, "a_perms": perms}

    def reopen(self, ctx: StepContext) -> Json:
        perms: Mapping[str, Mapping[str, int]] = ctx.results["preflight"]["a_perms"]
        ctx.save({"a_perms": dict(perms)})
        for broker, topics in sorted(perms.items()):
            for topic, perm in sorted(topics.items()):
                self.on_a.set_perm(broker, topic, int(perm))
        self._progress(f"A takes writes again: start link {self.reverse.link.name} now if it is not running")
        return {"a_perms": dict(perms)}

    def refence(self, record: StepRecord) -> None:
        perms: Mapping[str, Mapping[str, int]] = record.result.get("a_perms") or record.progress.get("a_perms") or {}
        for broker, topics in sorted(perms.items()):
            for topic, perm in sorted(topics.items()):
                self.on_a.set_perm(broker, topic, int(perm) & ~PERM_WRITE)

    def release(self, ctx: StepContext) -> Json:
        old: Mapping[str, Mapping[str, int]] = ctx.results["fence"]["old_perms"]
        for broker, topics in sorted(old.items()):
            for topic, perm in sorted(topics.items()):
                self.over_reverse.set_perm(broker, topic, int(perm))
        return {"b_perms": dict(old)}

    def refence_b(self, record: StepRecord) -> None:
        old: Mapping[str, Mapping[str, int]] = record.result.get("b_perms") or {}
        for broker, topics in sorted(old.items()):
            for topic, perm in sorted(topics.items()):
                self.over_reverse.set_perm(broker, topic, int(perm) & ~PERM_WRITE)

    # -- commit -----------------------------------------------------------------------------------------

    def commit(self, ctx: StepContext) -> Json:
        a = self.forward.a
        groups: list[str] = ctx.results["preflight"]["groups"]
        snapshot = self.reverse.group_snapshot()
        if snapshot.conditions:
            said = "; ".join(f"{c.kind.value} {c.subject}: {c.detail}" for c in snapshot.conditions)
            raise StepRefusedError(f"the groups' offsets on B could not all be read: {said}", "fix that, run again")
        forward = read_link_progress(self.forward.tables).translator
        reverse_progress = read_link_progress(self.reverse.tables)
        reverse = reverse_progress.translator
        segs = segments(run_map((q, forward.runs(q)) for q in forward.sources()),
                        run_map((q, reverse.runs(q)) for q in reverse.sources()))
        a_topics = sorted({s.a_queue.topic for s in segs})
        out: dict[str, list[dict[str, Any]]] = {}
        for group in groups:
            b_offsets = {o.queue: o.offset for o in snapshot.offsets if o.group == group}
            behind = [q for q, off in b_offsets.items() if reverse_progress.replicated_next.get(q, 0) < off]
            if behind:
                raise StepRefusedError(f"group {group} read messages of {queue_key(behind[0])} on B that the reverse "
                                       f"link has not replicated to A", "run again once it has (drain)")
            online = self.forward.online(a, group, a_topics)
            if online:
                raise StepRefusedError(f"group {group} already has consumer(s) online on A: {', '.join(online[:3])}",
                                       "stop them until the failback is done (they would commit over its "
                                       "offsets), then run again")
            topics = {q.topic for q in b_offsets}
            mine = [s for s in segs if s.b_queue.topic in topics]
            rows = []
            for q, pos in sorted(a_positions(mine, b_offsets).items(), key=lambda kv: queue_key(kv[0])):
                a.update_consumer_offset(group, q, pos.offset)
                on_a = a.consumer_offset(group, q)
                if on_a != pos.offset:
                    raise StepRefusedError(f"offset of {group} on {queue_key(q)} read back from A is {on_a}, not "
                                           f"{pos.offset}", "run again")
                rows.append({"a_queue": triple(q), "a_offset": pos.offset, "exact": pos.exact,
                             "re_read": pos.re_read})
            out[group] = rows
        return {"groups": out, "b_offsets": {g: sorted([*triple(o.queue), o.offset] for o in snapshot.offsets
                                                       if o.group == g) for g in groups}}

    # -- report -----------------------------------------------------------------------------------------

    def forward_resume_check(self) -> Json:
        """What A holds beyond the forward link's resume point, by origin: copies of B's messages (the loop
        guard skips them when the forward link resumes) and others (new writes on A, copied to B)."""
        ends = self.forward
        replicated = ends.replicated()
        b_name = ends.target.name
        from_b = others = 0
        consumer = PullConsumer(";".join(ends.source.namesrv), f"PID_RMQ_SYS_DR_RESUME_{ends.link.name}",
                                credentials=ends.source.credentials(), tls=ends.source.tls)
        try:
            for q in ends.source_queues():
                offset, end = replicated.get(q, 0), ends.a.max_offset(q)
                while offset < end:
                    result = consumer.pull(q, offset, min(32, end - offset))
                    if result.status is not PullStatus.FOUND or result.next_begin_offset <= offset:
                        break
                    for m in result.messages:
                        if m.queue_offset < end:
                            if b_name in chain_of(m.properties):
                                from_b += 1
                            else:
                                others += 1
                    offset = result.next_begin_offset
        finally:
            consumer.close()
        return {"from_b": from_b, "others": others}

    def resume_forward(self) -> str | None:
        """After a failover the forward link is stopped (``connectors.replication.link_stop``). Its marker is
        removed only on evidence that everything A held when it was lost has crossed since (``recover`` commits
        it to the link's tables): the failover's audit, computed again from the same records, finds nothing
        missing. None: the link was not stopped."""
        location = self.forward.link.tables_location
        stopped = read_stop(location)
        if stopped is None:
            return None
        left = audit(self.forward.replicated(), read_source_maxes(location))
        if left.missing == 0 and not left.unknown:
            resume_link(location)
            return (f"the forward link's stop (failover {stopped.operation}) is lifted: everything A held when it "
                    "was lost has crossed")
        return (f"the forward link stays stopped (failover {stopped.operation}): {left.missing} message(s) A held "
                f"when it was lost have not crossed ({len(left.unknown)} queue(s) unknown); python -m jobs.dr "
                f"recover --link {self.forward.link.name} (not --quarantine) copies and commits them, or remove "
                f"{location / STOP_FILE} to resume the link as it is")

    def report(self, ctx: StepContext) -> Json:
        durations = {s.name: s.duration_s for s in ctx.operation.steps if s.name != "report"}
        try:
            resume = self.forward_resume_check()
        except RocketMQError as exc:
            resume = {"error": str(exc)}
        ends = self.reverse
        return {"queues": ctx.results["drain"]["queues"], "groups": ctx.results["commit"]["groups"],
                "forward_resume": resume, "forward_stop": self.resume_forward(), "durations_s": durations,
                "operator": (f"Producers and consumers are moved by the operator: change their name server address "
                             f"from {';'.join(ends.source.namesrv)} (B, {ends.source.name}) to "
                             f"{';'.join(ends.target.namesrv)} (A, {ends.target.name}); then start the forward "
                             f"link's job ({self.forward.link.name}) again: it skips the {resume.get('from_b', 0)} "
                             f"copies of B's messages on A (loop guard) and copies nothing back; this command "
                             f"moves neither.")}

