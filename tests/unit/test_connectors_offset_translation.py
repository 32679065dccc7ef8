"""connectors.checkpoint.translation: a source offset maps to the first replicated message at or after it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.checkpoint.translation import (
    OffsetTranslator,
    Outcome,
    Run,
    TargetQueueKey,
    target_offsets,
)
from connectors.core.offsets import QueueKey

SRC = QueueKey("Orders", "src-a", 0)
DST = TargetQueueKey("Orders", "dst-a", 0)


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
    a, b, c = QueueKey("A", "s", 0), QueueKey("B", "s", 0), QueueKey("C", "s", 0)
    other = TargetQueueKey("All", "d", 1)
    translator = OffsetTranslator([
        (a, Run(0, 4, DST, 0, 4, 5)), (b, Run(0, 4, DST, 5, 9, 5)), (c, Run(0, 4, other, 0, 4, 5))])
    translations = [translator.translate(a, 5, 5), translator.translate(b, 2, 5), translator.translate(c, 3, 5),
                    translator.translate(QueueKey("D", "s", 0), 7, 9)]
    result = target_offsets(translations, current={other: 4})
    assert result.commit == {DST: 5}  # min(5, 7); `other` would go back from 4 to 3
    assert [t.source for t in result.unmapped] == [QueueKey("D", "s", 0)]
    blocked = target_offsets([translator.translate(a, 5, 5), translator.translate(b, 7, 5)], current={})
    assert blocked.commit == {} and len(blocked.pending) == 1


def test_the_sinks_runs_never_span_a_skipped_source_offset() -> None:
    """What the sink records (sending.BatchSender._delivered) is what exact translation needs: a message
    skipped in between (loop guard, tag filter, failure) ends a run, across batches too."""
    from types import SimpleNamespace

    from broker_store.client import MessageQueue
    from connectors.replication.sending import Batch, BatchSender

    sender = object.__new__(BatchSender)
    sender.mappings, sender.latencies, sender.bytes, sender.delivered = [], [], 0, 0
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
