"""The failback's position rule (``jobs.dr.reverse_positions``) against a simulated pair of links: messages
produced on A and on B, each side copied to the other in batches by a link whose loop guard skips what came
from the other side (runs with gaps), the offset maps as the links record them. Properties: the position
never skips a message the group has not read; it re-reads none when it says exact, and none at all in the
planned sequence (A, switchover, B, failback); it never goes down as the group reads on."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from connectors.checkpoint.translation import OffsetTranslator, Run
from jobs.dr.reverse_positions import a_positions, run_map, segments


@dataclass
class Message:
    born: str  # "A" or "B"
    a: tuple[MessageQueue, int] | None = None
    b: tuple[MessageQueue, int] | None = None


@dataclass
class World:
    a_queues: list[MessageQueue]
    b_queues: list[MessageQueue]
    queues: dict[MessageQueue, list[Message]] = field(default_factory=dict)
    next_read: dict[tuple[str, MessageQueue], int] = field(default_factory=dict)
    forward: OffsetTranslator = field(default_factory=OffsetTranslator)
    reverse: OffsetTranslator = field(default_factory=OffsetTranslator)

    def append(self, q: MessageQueue, m: Message, side: str) -> None:
        log = self.queues.setdefault(q, [])
        if side == "A":
            m.a = (q, len(log))
        else:
            m.b = (q, len(log))
        log.append(m)

    def replicate(self, link: str, batch: int) -> None:
        """One link's pass: every source queue read to its end in batches; a batch's delivered messages go
        to one target queue (source index modulo the target count) as one run."""
        sources, targets = (self.a_queues, self.b_queues) if link == "F" else (self.b_queues, self.a_queues)
        other = "B" if link == "F" else "A"
        translator = self.forward if link == "F" else self.reverse
        for i, src in enumerate(sources):
            target = targets[i % len(targets)]
            log = self.queues.setdefault(src, [])
            start = self.next_read.get((link, src), 0)
            for first in range(start, len(log), batch):
                chunk = [(off, log[off]) for off in range(first, min(first + batch, len(log)))]
                sent = [(off, m) for off, m in chunk if m.born != other]  # the loop guard
                if sent:
                    t_first = len(self.queues.setdefault(target, []))
                    for _, m in sent:
                        self.append(target, m, other)
                    translator.add(src, Run(sent[0][0], sent[-1][0], target, t_first, t_first + len(sent) - 1,
                                            len(sent)))
            self.next_read[(link, src)] = len(log)


A_QUEUES = [MessageQueue("T", "a", 0), MessageQueue("T", "a2", 1)]
B_QUEUES = [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)]

events = st.lists(st.one_of(st.tuples(st.just("A"), st.integers(0, 1), st.integers(1, 6)),
                            st.tuples(st.just("B"), st.integers(0, 1), st.integers(1, 6)),
                            st.tuples(st.sampled_from(["F", "R"]), st.integers(1, 5), st.just(0))),
                  max_size=14)


def build(plan: list[tuple[str, int, int]], na: int, nb: int) -> World:
    world = World(A_QUEUES[:na], B_QUEUES[:nb])
    for kind, x, y in plan:
        if kind in "AB":
            queues = world.a_queues if kind == "A" else world.b_queues
            for _ in range(y):
                world.append(queues[x % len(queues)], Message(kind), kind)
        else:
            world.replicate(kind, x)
    world.replicate("F", 3)
    world.replicate("R", 3)  # both links drained: every message is on both sides
    return world


def positions(world: World, b_offsets: dict[MessageQueue, int]) -> dict[MessageQueue, tuple[int, bool]]:
    segs = segments(run_map((q, world.forward.runs(q)) for q in world.forward.sources()),
                    run_map((q, world.reverse.runs(q)) for q in world.reverse.sources()))
    return {q: (p.offset, p.exact) for q, p in a_positions(segs, b_offsets).items()}


def check(world: World, b_offsets: dict[MessageQueue, int], exact_expected: bool) -> dict[MessageQueue, int]:
    got = positions(world, b_offsets)
    for q in world.a_queues:
        msgs = world.queues.get(q, [])
        if not msgs:
            continue
        offset, exact = got[q]
        for a_off, m in enumerate(msgs):
            assert m.b is not None
            was_read = m.b[1] < b_offsets.get(m.b[0], 0)
            if not was_read:
                assert a_off >= offset, f"skips unread message at {q} {a_off} (position {offset})"
            elif exact or exact_expected:
                assert a_off < offset, f"re-reads message at {q} {a_off} (position {offset})"
        if exact_expected:
            assert exact
    return {q: o for q, (o, _) in got.items()}


@settings(max_examples=300, deadline=None)
@given(events, st.integers(1, 2), st.integers(1, 2), st.data())
def test_never_skips_and_re_reads_only_when_inexact_and_is_monotone(plan: list[tuple[str, int, int]], na: int,
                                                                       nb: int, data: st.DataObject) -> None:
    world = build(plan, na, nb)
    ends = {q: len(world.queues.get(q, [])) for q in world.b_queues}
    low = {q: data.draw(st.integers(0, ends[q])) for q in world.b_queues}
    high = {q: data.draw(st.integers(low[q], ends[q])) for q in world.b_queues}
    before = check(world, low, exact_expected=False)
    after = check(world, high, exact_expected=False)
    for q, offset in before.items():
        assert after[q] >= offset


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2), st.integers(1, 2), st.integers(0, 20), st.integers(0, 20), st.integers(1, 5), st.data())
def test_the_planned_sequence_is_exact(na: int, nb: int, on_a: int, on_b: int, batch: int,
                                       data: st.DataObject) -> None:
    """Produce on A, the forward link copies it (switchover), produce on B, the reverse link copies it: any
    group position on B maps to A reading nothing twice."""
    plan = [("A", i, on_a) for i in range(na)] + [("F", batch, 0)] + [("B", i, on_b) for i in range(nb)]
    world = build(plan, na, nb)
    b_offsets = {q: data.draw(st.integers(0, len(world.queues.get(q, [])))) for q in world.b_queues}
    check(world, b_offsets, exact_expected=nb == 1 or na == nb)


def test_a_group_that_read_every_message_continues_after_the_last() -> None:
    world = build([("A", 0, 5), ("F", 2, 0), ("B", 0, 3)], 1, 1)
    b = world.b_queues[0]
    assert positions(world, {b: 8}) == {world.a_queues[0]: (8, True)}
    assert positions(world, {b: 5}) == {world.a_queues[0]: (5, True)}  # the A part read, B's copies not
    assert positions(world, {b: 2}) == {world.a_queues[0]: (2, True)}


def test_runs_with_gaps_are_refined_with_the_other_map() -> None:
    """Both sides written while both links run: the forward run skips the reverse link's copies on A (gaps
    inside it); the reverse map tells which offsets those are, so every segment is known one by one. The
    orders disagree (interleaved), so some positions re-read, counted, and none skips."""
    world = build([("A", 0, 4), ("F", 3, 0), ("B", 0, 2), ("R", 5, 0), ("A", 0, 1), ("B", 0, 1), ("R", 5, 0),
                   ("A", 0, 1), ("F", 10, 0)], 1, 1)
    assert any(not r.contiguous for r in world.forward.runs(world.a_queues[0]))
    segs = segments(run_map((q, world.forward.runs(q)) for q in world.forward.sources()),
                    run_map((q, world.reverse.runs(q)) for q in world.reverse.sources()))
    assert segs and all(s.exact for s in segs)
    b = world.b_queues[0]
    for read in range(len(world.queues[b]) + 1):
        check(world, {b: read}, exact_expected=False)
    got = a_positions(segs, {b: 7})  # read A0-3, b0-b2: b2 sits above A4 on A
    assert got[world.a_queues[0]].offset == 6 and got[world.a_queues[0]].re_read == 1
