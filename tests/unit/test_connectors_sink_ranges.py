"""A write task's ``rowFormat=ranges`` rows (``PartitionWriter.add_ranges``): a range's last batch goes out as
soon as the range is complete, not when the task finishes (a task of hundreds of short ranges otherwise sent
one batch per range back to back at its end), and the pull settings are built once per task, not per range.
Pulls are faked (``pull_results``), as are the target (test_connectors_sink_outage's FakeProducer); the
real-process path is tests/spark/test_replication.py and benchmarks/sink_task.py."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from broker_store.client import MessageQueue, SendResult
from broker_store.protocol.message import encode_properties, iter_batch
from connectors.core.rows import RANGES_ARROW_SCHEMA
from connectors.replication import partition_writer
from connectors.replication.forwarding import encode_entry
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.planning import QueueRange
from connectors.replication.sending import Item
from tests.unit.test_connectors_sink_outage import TOPIC, FakeProducer, _writer


class QueueRecordingProducer(FakeProducer):
    """Stores everything; remembers the target queue of each send, in order."""

    def __init__(self) -> None:
        super().__init__(lambda _n: None)
        self.sent_to: list[int] = []

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "dst-a", q) for q in range(3)]

    def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float) -> Future[SendResult]:
        self.sent_to.append(queue.queue_id)
        return self._answer(list(iter_batch(body)), queue)


def _row(queue_id: int, end: int) -> dict[str, Any]:
    return {"topic": TOPIC, "brokerName": "src-a", "queueId": queue_id, "startOffset": 0, "endOffset": end,
            "fromEarliest": False, "sourceCluster": "src", "sourceNamesrv": "127.0.0.1:2", "consumerGroup": "G",
            "tagFilter": None, "pullBatchSize": 4, "pullTimeoutMs": 1000, "failOnDataLoss": True,
            "targetTopic": TOPIC, "targetBroker": "dst-a", "targetQueueId": queue_id}


@pytest.fixture
def task(monkeypatch: pytest.MonkeyPatch) -> tuple[PartitionWriter, QueueRecordingProducer, list[tuple[str, int]]]:
    """A writer whose pulls return ``pullBatchSize`` offsets at a time and whose ``add_pull`` appends one entry
    per offset; ``events`` lists ("pull", queue id) and ("send", queue id) in the order they happened."""
    producer = QueueRecordingProducer()
    writer = _writer(monkeypatch, producer)
    events: list[tuple[str, int]] = []

    def pull_results(settings: Any, queue: QueueRange, *, decode: bool, outage: Any) -> Iterator[tuple[int, Any]]:
        for begin in range(queue.start, queue.end, settings.pull_batch_size):
            events.append(("pull", queue.queue_id))
            yield begin, SimpleNamespace(raw=b"x", next_begin_offset=min(queue.end, begin + settings.pull_batch_size))

    def add_pull(records: bytes, topic: str, broker: str, queue_id: int, cluster: str | None,
                 column_target: str | None = None, first: int = 0, stop: int = 1 << 63) -> None:
        source = MessageQueue(topic, broker, queue_id)
        target = writer.placement.place(TOPIC, source)
        for offset in range(first, min(stop, first + 4)):
            item = Item(source=source, queue_offset=offset, body=b"b", born_ms=0, store_ms=0, offset_msg_id="",
                        source_properties={}, tags=None, keys=None)
            writer._append(TOPIC, target, source, encode_entry(b"b", encode_properties({}), 0), 1, offset, 0, item)

    monkeypatch.setattr(partition_writer, "pull_results", pull_results)
    monkeypatch.setattr(writer, "add_pull", add_pull)
    real_submit = writer._submit

    def submit(batch: Any) -> None:
        events.append(("send", batch.queue.queue_id))
        real_submit(batch)

    monkeypatch.setattr(writer, "_submit", submit)
    return writer, producer, events


def test_a_complete_range_is_sent_before_the_task_finishes(
        task: tuple[PartitionWriter, QueueRecordingProducer, list[tuple[str, int]]]) -> None:
    writer, producer, events = task
    # queue 0: one pull of 3 offsets; queue 1: three pulls (0-3, 4-7, 8-9); queue 2: two pulls (0-3, 4-5)
    writer.add_ranges([pa.RecordBatch.from_pylist([_row(0, 3), _row(1, 10), _row(2, 6)], schema=RANGES_ARROW_SCHEMA)])
    assert sorted(producer.sent_to) == [0, 1, 2]  # every range's batch went out inside add_ranges
    # each batch right after its range's last pull, while other ranges were still being pulled
    assert events == [("pull", 0), ("send", 0), ("pull", 1), ("pull", 2), ("pull", 1), ("pull", 2), ("send", 2),
                      ("pull", 1), ("send", 1)]
    result = writer.finish()
    assert result.delivered == 19 and producer.sent_to == [0, 2, 1]
    assert {(m.source_queue_id, m.source_first_offset, m.source_last_offset) for m in result.offset_map} == {
        (0, 0, 2), (1, 0, 9), (2, 0, 5)}


def test_pull_settings_are_built_once_per_task(
        task: tuple[PartitionWriter, QueueRecordingProducer, list[tuple[str, int]]]) -> None:
    writer, _producer, _events = task
    rows = [_row(q, 2) for q in range(3)]
    writer.add_ranges([pa.RecordBatch.from_pylist(rows[:2], schema=RANGES_ARROW_SCHEMA),
                       pa.RecordBatch.from_pylist(rows[2:], schema=RANGES_ARROW_SCHEMA)])
    assert len(writer.source_outages) == 1  # one outage (retry counter) per task and link, not one per range
    assert writer.finish().delivered == 6
