"""Where a new query starts (``RocketMQStreamReader.initialOffset``), without Spark or a broker: Spark 4 asks a
new query's reader twice for its first batch (planning its end, then running it from its start); the reader
decides once, logs once and answers the same both times, even when the source moved in between."""

from __future__ import annotations

import logging

import pytest

from broker_store.client import MessageQueue
from broker_store.protocol.topic_stats import TopicOffset
from tests.unit.test_connectors_source_outage import FakeAdmin, FakeClock, _reader


class GrowingAdmin(FakeAdmin):
    """``Orders`` whose queues grow by 5 messages between two look-ups (a producer running at start-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.offset_reads = 0

    def max_offset(self, mq: MessageQueue) -> int:
        self.offset_reads += 1
        return super().max_offset(mq) + 5 * self.offset_reads

    def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        self.offset_reads += 1
        return {q: TopicOffset(0, o.max_offset + 5 * self.offset_reads, 0)
                for q, o in super().topic_offsets(topic, broker_name).items()}

    def min_offset(self, mq: MessageQueue) -> int:
        self.offset_reads += 1
        return 0


@pytest.mark.parametrize("starting", ["latest", "earliest"])
def test_initial_offset_is_decided_and_logged_once_per_reader(monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture,
                                                               starting: str) -> None:
    admin = GrowingAdmin()
    reader = _reader(monkeypatch, admin, FakeClock(), topics="Orders", startingOffsets=starting)
    with caplog.at_level(logging.INFO, logger="connectors.replication.reader"):
        first = reader.initialOffset()
        reads = admin.offset_reads
        second = reader.initialOffset()
    assert second == first and admin.offset_reads == reads > 0  # no second look-up of the source
    lines = [r.getMessage() for r in caplog.records if "no checkpoint and no Delta resume point" in r.getMessage()]
    assert lines == [f"link L: no checkpoint and no Delta resume point; starting 2 queue(s) at startingOffsets "
                     f"{starting}"]


def test_a_fresh_reader_decides_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision belongs to one reader (one query run): a restarted query without checkpoint looks again."""
    admin = GrowingAdmin()
    first = _reader(monkeypatch, admin, FakeClock(), topics="Orders", startingOffsets="latest").initialOffset()
    reads = admin.offset_reads
    again = _reader(monkeypatch, admin, FakeClock(), topics="Orders", startingOffsets="latest").initialOffset()
    assert again != first and admin.offset_reads == 2 * reads
