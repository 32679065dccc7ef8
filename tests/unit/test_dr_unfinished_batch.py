"""The pure part of ``jobs.dr.unfinished_batch``: which copies on B beyond the link's committed point a failover
adopts, as offset-map runs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from connectors.replication.records import BatchMetrics, OffsetMapping
from connectors.replication.tables import LinkTables
from jobs.dr.unfinished_batch import Adoption, adoption, committed_target_ends, common

SOURCE = MessageQueue("Orders", "a", 1)
OTHER = MessageQueue("Orders", "a", 2)
TARGET = MessageQueue("Orders", "b", 1)
RENAMED = MessageQueue("OrdersCopy", "b", 3)


def test_the_copies_continuing_the_committed_point_are_adopted_as_one_run() -> None:
    landed = {(SOURCE, 7): 20, (SOURCE, 8): 21, (SOURCE, 9): 22, (OTHER, 8): 23}
    a = adoption(SOURCE, 8, TARGET, landed)  # 7 was committed already: not adopted again
    assert (a.adopted, a.next_offset, a.beyond_gap) == (2, 10, 0)
    [run] = a.runs
    assert (run.source_first_offset, run.source_last_offset, run.target_first_offset, run.target_last_offset,
            run.messages) == (8, 9, 21, 22, 2)
    assert (run.target_topic, run.target_broker, run.target_queue_id) == ("Orders", "b", 1)
    assert a.to_json() == {"queue": ["Orders", "a", 1], "committed": 8, "adopted": 2, "beyond_gap": 0,
                           "targets": ["Orders/b/1"]}


def test_a_run_ends_where_the_target_offsets_jump_and_a_missing_offset_ends_the_adoption() -> None:
    # 5 and 6 landed apart (another queue's message between them); 8 is missing: 9 and 10 are beyond the gap
    landed = {(SOURCE, 5): 40, (SOURCE, 6): 42, (SOURCE, 7): 43, (SOURCE, 9): 44, (SOURCE, 10): 45}
    a = adoption(SOURCE, 5, TARGET, landed)
    assert [(r.source_first_offset, r.source_last_offset, r.target_first_offset, r.messages) for r in a.runs] == [
        (5, 5, 40, 1), (6, 7, 42, 2)]
    assert (a.adopted, a.next_offset, a.beyond_gap) == (3, 8, 2)


def test_nothing_at_the_committed_point_adopts_nothing() -> None:
    a = adoption(SOURCE, 3, TARGET, {(SOURCE, 4): 0, (OTHER, 3): 1})
    assert (a.runs, a.adopted, a.next_offset, a.beyond_gap) == ((), 0, 3, 1)


def test_several_target_topics_adopt_what_all_of_them_hold() -> None:
    first = adoption(SOURCE, 0, TARGET, {(SOURCE, 0): 10, (SOURCE, 1): 11, (SOURCE, 2): 12})
    second = adoption(SOURCE, 0, RENAMED, {(SOURCE, 0): 3, (SOURCE, 1): 5})
    both = common([first, second])
    assert (both.adopted, both.next_offset, both.beyond_gap) == (2, 2, 1)  # the third copy is in one topic only
    assert sorted((r.target_topic, r.source_first_offset, r.source_last_offset) for r in both.runs) == [
        ("Orders", 0, 1), ("OrdersCopy", 0, 0), ("OrdersCopy", 1, 1)]
    assert common([first]) == first


@given(st.integers(0, 50), st.sets(st.integers(0, 80)), st.integers(0, 1000))
def test_adopted_runs_map_consecutive_source_offsets_from_the_committed_point(committed: int, offsets: set[int],
                                                                              base: int) -> None:
    landed = {(SOURCE, o): base + 2 * o - (o % 3) for o in offsets}  # increasing, with jumps
    a: Adoption = adoption(SOURCE, committed, TARGET, landed)
    covered = [o for r in a.runs for o in range(r.source_first_offset, r.source_last_offset + 1)]
    assert covered == list(range(committed, committed + a.adopted))
    assert committed + a.adopted not in offsets
    for r in a.runs:
        assert r.messages == r.source_last_offset - r.source_first_offset + 1 == \
            r.target_last_offset - r.target_first_offset + 1
        for i in range(r.messages):
            assert landed[(SOURCE, r.source_first_offset + i)] == r.target_first_offset + i
    assert a.beyond_gap == sum(1 for o in offsets if o > committed + a.adopted)


def test_the_tail_is_read_no_lower_than_what_the_link_committed_in_each_target_queue(tmp_path: Path) -> None:
    tables = LinkTables(tmp_path / "link", source_cluster="A")
    assert committed_target_ends(tables) == {}  # nothing committed yet: each tail down to its first offset
    runs = [OffsetMapping("Orders", "a", 1, 0, 9, "Orders", "b", 1, 100, 109, 10),
            OffsetMapping("Orders", "a", 2, 0, 4, "Orders", "b", 1, 110, 114, 5),
            OffsetMapping("Orders", "a", 3, 0, 2, "OrdersCopy", "b", 3, 7, 9, 3)]
    tables.commit_batch("q", 0, {SOURCE: 10, OTHER: 5}, runs[:2], [], BatchMetrics(messages=15, bytes=0))
    tables.commit_batch("q", 1, {MessageQueue("Orders", "a", 3): 3}, runs[2:], [], BatchMetrics(messages=3, bytes=0))
    assert committed_target_ends(tables) == {TARGET: 115, RENAMED: 10}
