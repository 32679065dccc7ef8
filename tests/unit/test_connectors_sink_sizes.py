"""The sink never builds a batch the target must refuse: batches are bounded by their encoded size
(entry headers and properties included) and by the target's ``max_message_size``; a message whose entry
alone exceeds that limit goes out as one SEND_MESSAGE_V2, where the broker checks only its body. The
real-process counterpart (4 MiB bodies between two clusters at the default limit) is
tests/spark/test_max_size.py. Fakes as in test_connectors_sink_outage."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from broker_store.client import MessageQueue, SendResult
from broker_store.protocol.message import Message, encode_properties, iter_batch
from connectors.replication.forwarding import encode_entry
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.sending import Item, entry_message
from tests.unit.test_connectors_sink_outage import SOURCE, TOPIC, FakeProducer, _writer

MIB = 1024 * 1024


class RecordingProducer(FakeProducer):
    """Stores everything; remembers each send as ("batch", encoded size, entries) or ("single", body size)."""

    def __init__(self, max_message_size: int) -> None:
        super().__init__(lambda _n: None)
        self.max_message_size = max_message_size
        self.sends: list[tuple[str, int, int]] = []

    def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float) -> Future[SendResult]:
        # what the broker checks today: the whole batch body against max_message_size
        assert len(body) <= self.max_message_size, f"batch of {len(body)} bytes would be refused"
        entries = list(iter_batch(body))
        self.sends.append(("batch", len(body), len(entries)))
        return self._answer(entries, queue)

    def send_async(self, message: Message, queue: MessageQueue, *, timeout: float) -> Future[SendResult]:
        assert len(message.body) <= self.max_message_size
        self.sends.append(("single", len(message.body), 1))
        return self._answer([message], queue)


def _send_bodies(writer: PartitionWriter, sizes: list[int]) -> None:
    for offset, size in enumerate(sizes):
        body = bytes([offset % 251]) * size
        props = encode_properties({"UNIQ_KEY": f"id{offset}", "k": "v" * 40})
        item = Item(source=SOURCE, queue_offset=offset, body=body, born_ms=0, store_ms=0,
                    offset_msg_id=f"id{offset}", source_properties={}, tags=None, keys=None)
        writer._append(TOPIC, writer.placement.place(TOPIC, SOURCE), SOURCE, encode_entry(body, props, 0), size,
                       offset, 0, item)


def test_max_size_bodies_are_sent_alone_as_single_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = RecordingProducer(4 * MIB)
    writer = _writer(monkeypatch, producer, target_max_message_size=4 * MIB, batch_max_bytes=8 * MIB)
    _send_bodies(writer, [100, 4 * MIB, 4 * MIB - 64, 200, 300])
    result = writer.finish()
    assert result.failures == () and result.delivered == 5
    assert [kind for kind, _, _ in producer.sends] == ["batch", "single", "single", "batch"]
    assert [n for _, _, n in producer.sends] == [1, 1, 1, 2]
    assert [m.messages for m in result.offset_map] == [5]  # one run, offsets consecutive on the target


def test_batches_are_bounded_by_their_encoded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies that sum to the bound exactly would overflow it once headers and properties count."""
    producer = RecordingProducer(64 * 1024)
    writer = _writer(monkeypatch, producer, target_max_message_size=64 * 1024)
    _send_bodies(writer, [16 * 1024] * 8)  # 4 bodies = the limit; 4 entries exceed it
    result = writer.finish()
    assert result.delivered == 8 and result.failures == ()
    assert all(kind == "batch" and size <= 64 * 1024 for kind, size, _ in producer.sends)
    assert [n for _, _, n in producer.sends] == [3, 3, 2]


def test_batch_max_bytes_counts_encoded_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = RecordingProducer(4 * MIB)
    writer = _writer(monkeypatch, producer, batch_max_bytes=4000)
    _send_bodies(writer, [1000] * 8)
    writer.finish()
    assert all(size <= 4000 for _, size, _ in producer.sends) and sum(n for _, _, n in producer.sends) == 8


def test_a_body_over_the_target_limit_is_refused_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_store.protocol.codes import ResponseCode
    from broker_store.protocol.errors import MessageIllegalError

    producer = RecordingProducer(4 * MIB)

    def send_async(message: Message, queue: MessageQueue, *, timeout: float) -> Future[SendResult]:
        future: Future[SendResult] = Future()
        future.set_exception(MessageIllegalError(ResponseCode.MESSAGE_ILLEGAL, "body too big"))
        return future

    monkeypatch.setattr(producer, "send_async", send_async)
    writer = _writer(monkeypatch, producer, target_max_message_size=4 * MIB, retry_backoff_ms=0)
    _send_bodies(writer, [10, 4 * MIB + 1, 10])
    result = writer.finish()
    assert result.delivered == 2 and [f.queue_offset for f in result.failures] == [1]


def test_entry_message_round_trips_an_entry() -> None:
    entry = encode_entry(b"body", encode_properties({"UNIQ_KEY": "u", "TAGS": "t"}), 7)
    assert entry_message("T", entry) == Message("T", b"body", {"UNIQ_KEY": "u", "TAGS": "t"}, 7)


def test_dismissed_failures_are_a_warning_naming_link_topic_count_and_replay(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    from connectors.replication.batch_commit import warn_dismissed
    from connectors.replication.records import FailedMessage
    from connectors.replication.writer import RocketMQStreamWriter

    schema = StructType([StructField("topic", StringType()), StructField("brokerName", StringType()),
                         StructField("queueId", IntegerType()), StructField("queueOffset", LongType()),
                         StructField("body", BinaryType())])
    writer = RocketMQStreamWriter({"namesrv": "127.0.0.1:1", "targetCluster": "dst", "sourceCluster": "src",
                                   "link": "orders", "deltaLocation": str(tmp_path), "checkpointLocation":
                                   str(tmp_path / "cp")}, schema)
    failed = [FailedMessage(topic="Orders", broker_name="src-a", queue_id=0, queue_offset=i, msg_id="m",
                            target_topic="OrdersDR", body=b"x", properties={}, error="MessageIllegalError: big",
                            attempts=3, tags=None, keys=None, born_timestamp=0, store_timestamp=0)
              for i in range(3)]
    with caplog.at_level("WARNING"):
        warn_dismissed(writer.options, 7, failed, "committed")
    [record] = [r for r in caplog.records if r.levelname == "WARNING"]
    text = record.getMessage()
    for part in ("link orders batch 7", "3 message(s) of topic Orders", "OrdersDR", "MessageIllegalError: big",
                 "python -m jobs.replay_failures --config <replicator.yaml> --link orders", "failures"):
        assert part in text, text


def test_a_lower_target_limit_than_configured_still_gets_messages_that_fit_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """targetMaxMessageSize says 4 MiB, the target's real limit is 2 MiB and it checks whole batch bodies:
    a body of 2 MiB - 10 is refused as a batch of one, then sent alone."""
    from broker_store.protocol.codes import ResponseCode
    from broker_store.protocol.errors import MessageIllegalError

    producer = RecordingProducer(2 * MIB)
    accepted_batch = producer.send_encoded_batch_async

    def strict_batch(topic: str, body: bytes, queue: MessageQueue, *, timeout: float) -> Future[SendResult]:
        if len(body) > 2 * MIB:
            future: Future[SendResult] = Future()
            future.set_exception(MessageIllegalError(ResponseCode.MESSAGE_ILLEGAL, "batch body size exceeds"))
            return future
        return accepted_batch(topic, body, queue, timeout=timeout)

    monkeypatch.setattr(producer, "send_encoded_batch_async", strict_batch)
    writer = _writer(monkeypatch, producer, retry_backoff_ms=0)
    _send_bodies(writer, [10, 2 * MIB - 10, 10])
    result = writer.finish()
    assert result.failures == () and result.delivered == 3
    # the refused batch is retried after the next one went out (maxInFlight > 1; 1 keeps the order)
    assert sorted(kind for kind, _, _ in producer.sends) == ["batch", "batch", "single"]
