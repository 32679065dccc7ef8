"""``python -m jobs.dr switchover --reverse``: the reverse link B -> A made ready during the switchover, so that A
is a warm standby at its end and a later failback does not wait for the reverse link's job to start and catch
up. Two steps of the switchover (``jobs.dr.switchover``), over the reverse link's ends:

    hold     before the fence: the reverse link is stopped (``connectors.replication.link_stop``), so a reverse
             job already running (started early to have its JVM warm) plans nothing while A's topics are fenced
             and no message born on B could be delivered. The marker it replaces, if any, is saved for ``abort``.
    reverse  after the commit (the groups have left A, their offsets are on B): per B queue of the reverse link,
             its exact start (``reverse_starts``) committed as the reverse link's Delta resume point (query id
             ``dr-switchover-<id>``, once); A's topics get the permissions the fence saved (A takes the reverse
             link's writes, as B took the forward link's); the stop is lifted. A held reverse job starts its next
             batch there (the reader's floor, ``link_stop``); one started later resumes there.

The start rule (``reverse_starts``, pure): from the reverse link's resume point (or B's first offset when it has
none), skip exactly the leading stretch of B offsets that hold the forward link's copies of A's messages (its
offset map says which: the loop guard would skip each of them anyway); stop at the first other message (born on
B: a producer already moved) or B's end. So nothing born on B is skipped, and no copy of A's is read again: the
reverse link's offset map then starts where the failback's position rule (``jobs.dr.reverse_positions``)
expects it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from broker_store.client import MessageQueue
from broker_store.protocol.codes import PERM_WRITE
from connectors.checkpoint.link_state import read_link_progress
from connectors.checkpoint.translation import Run
from connectors.core.offsets import queue_key
from connectors.replication.batch_commit import batch_metrics
from connectors.replication.link_stop import LinkStop, read_stop, resume_link, stop_link
from jobs.dr.link_ends import LinkEnds, queue_of, triple
from jobs.dr.operation import Json, StepContext, StepRecord

Span = tuple[int, int]
"""Inclusive offset range."""
SetPerm = Callable[[str, str, int], None]
"""Sets one topic's permission on one broker group of A (``Switchover.set_perm``)."""


class ReverseStart(NamedTuple):
    """Where the reverse link starts on one B queue."""

    queue: MessageQueue
    start: int
    resume: int
    """The reverse link's resume point before (or B's first offset when it had none)."""
    end: int
    """B's max offset when the start was decided."""

    @property
    def skipped(self) -> int:
        """Copies of A's messages the reverse link does not read."""
        return self.start - self.resume


def copy_spans(forward_runs: Iterable[Run]) -> dict[MessageQueue, list[Span]]:
    """Per B queue, the sorted offset spans the forward link's copies fill wholly: a run's target span when it
    holds as many messages as offsets (a summary run with fewer may have messages born on B inside: left out)."""
    spans: dict[MessageQueue, list[Span]] = {}
    for r in forward_runs:
        if r.messages == r.target_last - r.target_first + 1:
            spans.setdefault(r.target, []).append((r.target_first, r.target_last))
    return {q: sorted(s) for q, s in spans.items()}


def reverse_starts(queues: Sequence[MessageQueue], resume: Mapping[MessageQueue, int],
                   b_min: Mapping[MessageQueue, int], b_max: Mapping[MessageQueue, int],
                   copies: Mapping[MessageQueue, Sequence[Span]]) -> list[ReverseStart]:
    """The reverse link's start per B queue (module docstring): from ``resume`` (else ``b_min``) past the leading
    forward copies (``copies``), at most ``b_max``; never below ``resume``. Pure."""
    out = []
    for q in sorted(queues, key=queue_key):
        begin = resume.get(q, b_min.get(q, 0))
        at = begin
        for first, last in copies.get(q, ()):
            if first > at:
                break
            at = max(at, last + 1)
        out.append(ReverseStart(q, max(begin, min(at, b_max.get(q, at))), begin, b_max.get(q, at)))
    return out


class ReverseStandby:
    """The ``hold`` and ``reverse`` steps of a switchover of ``forward`` (A -> B) with its reverse link."""

    def __init__(self, forward: LinkEnds, reverse: LinkEnds) -> None:
        self.forward = forward
        self.reverse = reverse

    @property
    def name(self) -> str:
        return self.reverse.link.name

    def _reason(self, op_id: str) -> str:
        return f"jobs.dr switchover {op_id} of link {self.forward.link.name}: held until A is the standby"

    def hold(self, ctx: StepContext) -> Json:
        location = self.reverse.link.tables_location
        if "previous" not in ctx.progress:  # first attempt: what to put back on abort
            before = read_stop(location)
            ctx.save({"previous": None if before is None else vars(before), "reverse_link": self.name})
        stop_link(location, LinkStop(ctx.operation.id, self._reason(ctx.operation.id), self.forward.clock.time()))
        return {"reverse_link": self.name, "previous": ctx.progress["previous"]}

    def unhold(self, record: StepRecord) -> None:
        location = self.reverse.link.tables_location
        previous = record.result.get("previous", record.progress.get("previous"))
        if previous is None:
            resume_link(location)
        else:
            stop_link(location, LinkStop(str(previous["operation"]), str(previous["reason"]),
                                         float(previous["stopped_at"])))

    def starts(self) -> list[ReverseStart]:
        """The reverse link's exact start per B queue now (B must answer)."""
        reverse = self.reverse
        queues = reverse.source_queues()
        b_min = {q: reverse.a.min_offset(q) for q in queues}
        b_max = reverse.max_offsets(queues)
        translator = read_link_progress(self.forward.tables).translator
        copies = copy_spans(r for q in translator.sources() for r in translator.runs(q))
        return reverse_starts(queues, reverse.replicated(), b_min, b_max, copies)

    def start_reverse(self, ctx: StepContext, a_perms: Mapping[str, Mapping[str, int]],
                      set_a_perm: SetPerm) -> Json:
        saved = ctx.progress.get("starts")
        if saved is None:  # decided once: after the release the reverse link moves on
            saved = [{"queue": triple(s.queue), "start": s.start, "resume": s.resume, "end": s.end}
                     for s in self.starts()]
            ctx.save({"starts": saved})
        starts = {queue_of(s["queue"]): int(s["start"]) for s in saved}
        now_ms = int(self.forward.clock.time() * 1000)
        self.reverse.tables.commit_batch(f"dr-switchover-{ctx.operation.id}", 0, starts, [], [],
                                         batch_metrics([], 0, now_ms))
        for broker, perms in sorted(a_perms.items()):
            for topic, perm in sorted(perms.items()):
                set_a_perm(broker, topic, int(perm))
        resume_link(self.reverse.link.tables_location)
        return {"reverse_link": self.name, "queues": saved, "a_perms": {b: dict(p) for b, p in a_perms.items()},
                "skipped": sum(int(s["start"]) - int(s["resume"]) for s in saved)}

    def stop_reverse(self, record: StepRecord, a_perms: Mapping[str, Mapping[str, int]], set_a_perm: SetPerm) -> None:
        """``abort``: the reverse link held again, A's topics fenced again (the fence's undo then reopens them)."""
        stop_link(self.reverse.link.tables_location, LinkStop("abort", "jobs.dr abort of a switchover",
                                                              self.forward.clock.time()))
        for broker, perms in sorted(a_perms.items()):
            for topic, perm in sorted(perms.items()):
                set_a_perm(broker, topic, int(perm) & ~PERM_WRITE)

