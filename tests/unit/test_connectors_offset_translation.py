"""connectors.checkpoint.translation: a source offset maps to the first replicated message at or after it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from connectors.checkpoint.translation import (
    OffsetTranslator,
    Outcome,
    Run,
    target_offsets,
)

SRC = MessageQueue("Orders", "src-a", 0)
DST = MessageQueue("Orders", "dst-a", 0)


def replicate(delivered: list[bool], target_start: int = 0, batch: int = 3) -> tuple[list[Run], dict[int, int]]:
    """Runs as the sink records them (one run per contiguous delivered stretch of a batch) and the truth:
    source offset -> target offset of each delivered message."""
    runs: list[Run] = []
    truth: dict[int, int] = {}
    target = target_start
    for start in range(0, len(delivered), batch):
        first = None
        for off in range(start, min(start + batch, len(delivered))):
            if delivered[off]:
                truth[off] = target
                if first is None:
                    first = (off, target)
                target += 1
            if first is not None and (not delivered[off] or off == min(start + batch, len(delivered)) - 1):
                last_off = off if delivered[off] else off - 1
                runs.append(Run(first[0], last_off, DST, first[1], target - 1, target - first[1]))
                first = None
    return runs, truth


@settings(max_examples=300, deadline=None)
@given(delivered=st.lists(st.booleans(), min_size=1, max_size=40), start=st.integers(0, 1000),
       batch=st.integers(1, 8))
def test_every_source_offset_translates_to_the_first_replicated_message_at_or_after_it(
        delivered: list[bool], start: int, batch: int) -> None:
    runs, truth = replicate(delivered, start, batch)
    translator = OffsetTranslator((SRC, r) for r in runs)
    replicated_next = len(delivered)
    for s in range(len(delivered) + 1):
        t = translator.translate(SRC, s, replicated_next)
        if not runs:
            assert t.outcome is Outcome.UNMAPPED
            continue
        assert t.outcome is Outcome.TRANSLATED and t.exact
        later = [truth[o] for o in sorted(truth) if o >= s]
        expected = later[0] if later else max(truth.values()) + 1
        assert t.target_offset == expected, (s, runs)


def test_gapped_run_is_conservative() -> None:
    translator = OffsetTranslator([(SRC, Run(10, 19, DST, 100, 104, 5))])  # 5 of 10 delivered, merged
    t = translator.translate(SRC, 15, 20)
    assert (t.outcome, t.target_offset, t.exact) == (Outcome.TRANSLATED, 100, False)
    assert translator.translate(SRC, 10, 20).exact


def test_pending_until_replication_passes_the_offset() -> None:
    translator = OffsetTranslator([(SRC, Run(0, 9, DST, 0, 9, 10))])
    assert translator.translate(SRC, 12, 10).outcome is Outcome.PENDING
    assert translator.translate(SRC, 12, None).outcome is Outcome.PENDING
    t = translator.translate(SRC, 12, 12)  # 10 and 11 were filtered out: nothing at/after 12 yet
    assert (t.outcome, t.target_offset) == (Outcome.TRANSLATED, 10)


def test_newest_run_wins_over_re_replicated_offsets() -> None:
    translator = OffsetTranslator()
    translator.add(SRC, Run(0, 9, DST, 0, 9, 10))
    translator.add(SRC, Run(5, 14, DST, 10, 19, 10))  # offsets reset to 5 and replicated again
    assert translator.translate(SRC, 3, 15).target_offset == 3
    assert translator.translate(SRC, 5, 15).target_offset == 10
    assert translator.translate(SRC, 9, 15).target_offset == 14
    assert translator.translate(SRC, 15, 15).target_offset == 20


def test_several_source_queues_into_one_target_queue_take_the_minimum_and_never_go_back() -> None:
    a, b, c = MessageQueue("A", "s", 0), MessageQueue("B", "s", 0), MessageQueue("C", "s", 0)
    other = MessageQueue("All", "d", 1)
    translator = OffsetTranslator([
        (a, Run(0, 4, DST, 0, 4, 5)), (b, Run(0, 4, DST, 5, 9, 5)), (c, Run(0, 4, other, 0, 4, 5))])
    translations = [translator.translate(a, 5, 5), translator.translate(b, 2, 5), translator.translate(c, 3, 5),
                    translator.translate(MessageQueue("D", "s", 0), 7, 9)]
    result = target_offsets(translations, current={other: 4})
    assert result.commit == {DST: 5}  # min(5, 7); `other` would go back from 4 to 3
    assert [t.source for t in result.unmapped] == [MessageQueue("D", "s", 0)]
    blocked = target_offsets([translator.translate(a, 5, 5), translator.translate(b, 7, 5)], current={})
    assert blocked.commit == {} and len(blocked.pending) == 1


def test_the_sinks_runs_never_span_a_skipped_source_offset() -> None:
    """What the sink records (sending.BatchSender._delivered) is what exact translation needs: a message
    skipped in between (loop guard, tag filter, failure) ends a run, across batches too."""
    from types import SimpleNamespace

    from broker_store.client import MessageQueue
    from broker_store.clock import SYSTEM_CLOCK
    from connectors.replication.sending import Batch, BatchSender

    sender = object.__new__(BatchSender)
    sender.mappings, sender.latencies, sender.bytes, sender.delivered = [], [], 0, 0
    sender.clock = SYSTEM_CLOCK
    mq = MessageQueue("Orders", "dst-a", 0)
    first = Batch("Orders", mq, entries=[b""] * 5, offsets=[0, 1, 2, 4, 5], borns=[0] * 5, runs=[(SRC, 0)])
    second = Batch("Orders", mq, entries=[b""] * 2, offsets=[6, 8], borns=[0] * 2, runs=[(SRC, 0)])
    sender._delivered(first, SimpleNamespace(message_queue=mq, queue_offset=100))  # type: ignore[arg-type]
    sender._delivered(second, SimpleNamespace(message_queue=mq, queue_offset=105))  # type: ignore[arg-type]
    spans = [(m.source_first_offset, m.source_last_offset, m.target_first_offset, m.target_last_offset, m.messages)
             for m in sender.mappings]
    assert spans == [(0, 2, 100, 102, 3), (4, 6, 103, 105, 3), (8, 8, 106, 106, 1)]
    translator = OffsetTranslator((SRC, Run(a, b, DST, c, d, n)) for a, b, c, d, n in spans)
    assert all(translator.translate(SRC, s, 9).exact for s in range(10))
    assert translator.translate(SRC, 3, 9).target_offset == 103


class ReferenceTranslator:
    """The translation rule at its plainest (every run kept, the whole list scanned per add): what the
    merged, bisected ``OffsetTranslator`` must agree with."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def add(self, run: Run) -> None:
        kept = []
        for old in self.runs:
            if old.source_last < run.source_first or old.source_first > run.source_last:
                kept.append(old)
                continue
            if old.source_first < run.source_first:  # the part only the old run covers stays
                n = run.source_first - old.source_first
                kept.append(old._replace(source_last=run.source_first - 1, target_last=old.target_first + n - 1,
                                         messages=n) if old.contiguous else
                            old._replace(source_last=run.source_first - 1, summary=True))
            if old.source_last > run.source_last:
                skip = run.source_last + 1 - old.source_first
                kept.append(old._replace(source_first=run.source_last + 1, target_first=old.target_first + skip,
                                         messages=old.messages - skip) if old.contiguous else
                            old._replace(source_first=run.source_last + 1, summary=True))
        self.runs = sorted([*kept, run], key=lambda r: r.source_first)

    def translate(self, s: int, replicated_next: int) -> tuple[Outcome, int | None, bool]:
        later = [r for r in self.runs if r.source_last >= s]
        if later:
            r = later[0]
            if s <= r.source_first:
                return Outcome.TRANSLATED, r.target_first, not r.summary
            if r.contiguous:
                return Outcome.TRANSLATED, r.target_first + s - r.source_first, True
            return Outcome.TRANSLATED, r.target_first, False
        if replicated_next < s:
            return Outcome.PENDING, None, True
        return Outcome.TRANSLATED, self.runs[-1].target_last + 1, True


OTHER = MessageQueue("Orders", "dst-b", 0)

# One replication round: (reset the source position back by, deliver how many, skip how many after,
# target queue switch, target gap) -- resets re-replicate offsets already mapped, as a new query or a
# reset of the link's offsets does.
_round = st.tuples(st.integers(0, 6), st.integers(1, 6), st.integers(0, 2), st.booleans(), st.integers(0, 2))


@settings(max_examples=400, deadline=None)
@given(rounds=st.lists(_round, min_size=1, max_size=30), gapped=st.integers(0, 40))
def test_merged_runs_translate_like_every_run_kept(rounds: list[tuple[int, int, int, bool, int]],
                                                   gapped: int) -> None:
    """Runs as a link produces them (next batches, re-replicated ranges, skipped offsets, another target
    queue, old rows with gaps): merging continuations and bisecting change no translation."""
    translator, reference = OffsetTranslator(), ReferenceTranslator()
    position, target_next = {DST: 0, OTHER: 0}, 0
    source = 0
    for i, (back, n, skip, switch, gap) in enumerate(rounds):
        source = max(0, source - back)
        target = OTHER if switch else DST
        first = position[target] + gap
        messages = n if i != gapped else max(1, n - 1)  # one old-style run with a gap inside
        run = Run(source, source + n - 1, target, first, first + messages - 1, messages)
        translator.add(SRC, run)
        reference.add(run)
        position[target] = first + messages
        source += n + skip
        target_next = max(target_next, source)
    for s in range(target_next + 2):
        t = translator.translate(SRC, s, target_next)
        outcome, offset, exact = reference.translate(s, target_next)
        assert (t.outcome, t.target_offset if outcome is Outcome.TRANSLATED else None, t.exact) == \
            (outcome, offset, exact), (s, reference.runs, translator.runs(SRC))
    assert translator.size() <= len(reference.runs)


def test_a_steady_link_keeps_one_run_per_queue() -> None:
    translator = OffsetTranslator()
    for batch in range(1000):
        translator.add(SRC, Run(batch * 10, batch * 10 + 9, DST, 500 + batch * 10, 509 + batch * 10, 10))
    assert translator.runs(SRC) == (Run(0, 9999, DST, 500, 10499, 10000),)
    assert translator.translate(SRC, 4321, 10000).target_offset == 4821
    translator.add(SRC, Run(9990, 10009, DST, 10500, 10519, 20))  # a range re-replicated: a discontinuity
    assert len(translator.runs(SRC)) == 2 and translator.translate(SRC, 9995, 10010).target_offset == 10505


@settings(max_examples=300, deadline=None)
@given(rounds=st.lists(_round, min_size=1, max_size=40), floor=st.integers(0, 120), max_runs=st.integers(2, 6))
def test_forgotten_runs_translate_conservatively_and_the_rest_exactly(
        rounds: list[tuple[int, int, int, bool, int]], floor: int, max_runs: int) -> None:
    """After ``forget_below``: every offset past the summaries (which end below the floor unless the cap
    folded more) translates as before; one below translates to the same target queue at or before the exact
    answer (re-reads, never skips), marked inexact when it changed."""
    translator, reference = OffsetTranslator(), OffsetTranslator()
    position, source, replicated = {DST: 0, OTHER: 0}, 0, 0
    for back, n, skip, switch, gap in rounds:
        source = max(0, source - back)
        target = OTHER if switch else DST
        run = Run(source, source + n - 1, target, position[target] + gap, position[target] + gap + n - 1, n)
        translator.add(SRC, run)
        reference.add(SRC, run)
        position[target] = run.target_last + 1
        source += n + skip
        replicated = max(replicated, source)
    before = translator.size()
    folded = translator.forget_below({SRC: floor}, max_runs)
    assert translator.size() == before - folded
    if len({r.target for r in reference.runs(SRC)}) == 1:  # (stretches on other targets are folded apart)
        assert translator.size() <= max_runs + 1
    summaries = [r for r in translator.runs(SRC) if r.summary]
    assert all(r.source_last < floor for r in summaries) or len(reference.runs(SRC)) > max_runs
    exact_from = max((r.source_last + 1 for r in summaries), default=0)
    for s in range(replicated + 2):
        got, want = translator.translate(SRC, s, replicated), reference.translate(SRC, s, replicated)
        if s >= exact_from or want.outcome is not Outcome.TRANSLATED:
            assert got == want, (s, translator.runs(SRC))
            continue
        assert got.outcome is Outcome.TRANSLATED and got.target == want.target, (s, translator.runs(SRC))
        assert got.target_offset is not None and want.target_offset is not None
        assert got.target_offset <= want.target_offset, (s, translator.runs(SRC))
        assert got == want or not got.exact


def test_forget_below_folds_what_every_group_is_past() -> None:
    translator = OffsetTranslator()
    for batch in range(100):  # a message skipped after every batch: one run per batch
        translator.add(SRC, Run(batch * 11, batch * 11 + 9, DST, batch * 10, batch * 10 + 9, 10))
    assert translator.size() == 100
    assert translator.forget_below({SRC: 550}) == 49  # runs 0..49 end below 550 -> one summary
    assert translator.size() == 51
    assert translator.translate(SRC, 550, 1100).target_offset == 500  # exact above the floor
    t = translator.translate(SRC, 100, 1100)
    assert (t.target_offset, t.exact) == (0, False)  # below it: from the summary's start, re-reading
    assert translator.forget_below({}, max_runs=10) == 41 and translator.size() == 10
    assert translator.translate(SRC, 1089, 1100).target_offset == 990 and translator.runs(SRC)[-1].messages == 10


@settings(max_examples=300, deadline=None)
@given(delivered=st.lists(st.booleans(), min_size=1, max_size=40), start=st.integers(0, 1000),
       batch=st.integers(1, 8), crossed=st.integers(0, 40), ahead=st.integers(0, 10))
def test_a_group_ahead_of_the_link_gets_the_replicated_end_never_a_skip_never_past_what_it_consumed(
        delivered: list[bool], start: int, batch: int, crossed: int, ahead: int) -> None:
    """A link that has replicated the first ``crossed`` source offsets; a group at any offset, up to ``ahead``
    past them. Translated or partial, its target offset T never skips a crossed message the group has not
    consumed (every one at or after S is at T or later) and never moves past one it has not consumed (every
    message below T came from below S); partial exactly when the group is past what crossed."""
    crossed = min(crossed, len(delivered))
    runs, truth = replicate(delivered[:crossed], start, batch)
    translator = OffsetTranslator((SRC, r) for r in runs)
    for s in range(crossed + ahead + 1):
        t = translator.translate(SRC, s, crossed)
        if not runs:
            assert t.outcome is Outcome.UNMAPPED
            continue
        assert t.target_offset is not None and t.target == DST
        assert t.partial == (s > crossed) == (t.outcome is Outcome.PENDING)
        assert all(target >= t.target_offset for source, target in truth.items() if source >= s), (s, runs)
        assert all(source < s for source, target in truth.items() if target < t.target_offset), (s, runs)
        if t.partial:  # the end of the replicated data: everything that crossed is below it
            assert t.target_offset == max(truth.values()) + 1


def test_a_partial_translation_is_not_committed_and_blocks_its_target_queue() -> None:
    translator = OffsetTranslator([(SRC, Run(0, 9, DST, 100, 109, 10))])
    t = translator.translate(SRC, 15, 12)
    assert (t.outcome, t.target_offset, t.partial) == (Outcome.PENDING, 110, True)
    assert translator.translate(SRC, 15, None).partial  # the link's progress unknown: still what crossed
    assert target_offsets([t], {DST: 50}).commit == {}
