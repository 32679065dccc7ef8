"""A batch Spark re-runs after a restart (the sink had committed it to Delta, the job stopped before Spark's own
commit) is not sent again: ``planning.skip_delivered`` and the reader's first ``partitions`` of a resumed query,
without Spark or a broker."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker_store.client import MessageQueue
from connectors.core.offsets import SourceOffset
from connectors.replication.planning import QueueRange, QueueRangeGroup, skip_delivered
from connectors.replication.records import BatchMetrics
from connectors.replication.tables import LinkTables
from tests.unit.test_connectors_source_outage import FakeAdmin, FakeClock, _reader

A0, A1, B0 = MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0)


def _range(q: MessageQueue, start: int, end: int, *, new: bool = False) -> QueueRange:
    return QueueRange(q.topic, q.broker_name, q.queue_id, start, end, new)


def test_ranges_below_the_delivered_offsets_are_dropped_and_cut_ones_start_there() -> None:
    ranges = [_range(A0, 0, 10), _range(A1, 5, 15, new=True), _range(B0, 20, 30)]
    kept, removed = skip_delivered(ranges, {A0: 10, A1: 8, B0: 20})
    assert kept == [_range(A1, 8, 15, new=True), _range(B0, 20, 30)] and removed == 13
    assert skip_delivered(ranges, {}) == (ranges, 0)
    assert skip_delivered(ranges, {A0: 50}) == (ranges[1:], 10)  # a table ahead of the range drops it whole


def _commit(work: Path, offsets: dict[MessageQueue, int], batch_id: int = 7) -> None:
    """A batch the sink committed to the link's Delta tables (query ``q``)."""
    LinkTables(work / "L", source_cluster="src").commit_batch("q", batch_id, offsets, [], [],
                                                             BatchMetrics(sum(offsets.values()), 0))


def _ranges_of(partitions: object) -> list[QueueRange]:
    assert isinstance(partitions, list)
    return [r for group in partitions for r in (group.ranges if isinstance(group, QueueRangeGroup) else [group])]


def _offsets(q0: int, q1: int) -> dict[str, object]:
    return SourceOffset.of({MessageQueue("Orders", "src-a", 0): q0, MessageQueue("Orders", "src-a", 1): q1}).to_dict()


def test_the_first_batch_of_a_resumed_query_skips_what_delta_says_was_delivered(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _commit(tmp_path, {MessageQueue("Orders", "src-a", 0): 40, MessageQueue("Orders", "src-a", 1): 25})
    reader = _reader(monkeypatch, FakeAdmin(), FakeClock(), topics="Orders", deltaLocation=str(tmp_path))
    start, end = _offsets(30, 20), _offsets(40, 30)
    with caplog.at_level(logging.INFO, logger="connectors.replication.reader"):
        first = _ranges_of(reader.partitions(start, end))
    assert [(r.queue_id, r.start, r.end) for r in first] == [(1, 25, 30)]
    assert any("15 message offset(s)" in r.getMessage() for r in caplog.records)
    # later batches are planned as Spark gives them (Delta is read once per resumed query)
    again = _ranges_of(reader.partitions(start, end))
    assert sorted((r.queue_id, r.start, r.end) for r in again) == [(0, 30, 40), (1, 20, 30)]


def test_a_new_query_plans_its_first_batch_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """initialOffset ran: the query started now, nothing of its first batch can have been committed before."""
    reader = _reader(monkeypatch, FakeAdmin(), FakeClock(), topics="Orders", deltaLocation=str(tmp_path),
                     startingOffsets="latest")
    assert reader.initialOffset() == _offsets(10, 11)
    _commit(tmp_path, {MessageQueue("Orders", "src-a", 0): 15})
    ranges = _ranges_of(reader.partitions(_offsets(10, 11), _offsets(20, 21)))
    assert sorted((r.queue_id, r.start, r.end) for r in ranges) == [(0, 10, 20), (1, 11, 21)]


def test_a_reset_resume_point_is_not_taken_for_delivered_messages(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """jobs.reset_offsets appends resume points; while the checkpoint exists it wins over them, and they say
    nothing about what reached the target: only the batches' own rows count."""
    _commit(tmp_path, {MessageQueue("Orders", "src-a", 0): 32, MessageQueue("Orders", "src-a", 1): 20})
    LinkTables(tmp_path / "L", source_cluster="src").append_resume_point({MessageQueue("Orders", "src-a", 0): 40,
                                                                          MessageQueue("Orders", "src-a", 1): 30})
    assert LinkTables(tmp_path / "L", source_cluster="src").delivered_offsets() == {
        MessageQueue("Orders", "src-a", 0): 32, MessageQueue("Orders", "src-a", 1): 20}
    reader = _reader(monkeypatch, FakeAdmin(), FakeClock(), topics="Orders", deltaLocation=str(tmp_path))
    ranges = _ranges_of(reader.partitions(_offsets(30, 20), _offsets(40, 30)))
    assert sorted((r.queue_id, r.start, r.end) for r in ranges) == [(0, 32, 40), (1, 20, 30)]
