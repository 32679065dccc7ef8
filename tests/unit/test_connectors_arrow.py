"""The reader's and writer's Arrow hot paths against the per-message accessors they replace."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from broker_store.client import MessageQueue, SendResult
from broker_store.client.records import SendStatus
from broker_store.protocol.message import (
    StoredMessage,
    decode_properties,
    decode_stored_messages,
    encode_properties,
    encode_stored_message,
    iter_batch,
)
from connectors.core.rows import ARROW_SCHEMA, RAW_ARROW_SCHEMA
from connectors.replication import sending
from connectors.replication.arrow_rows import messages_to_arrow
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.writer_options import SinkOptions


def _stored(i: int, props: dict[str, str]) -> StoredMessage:
    return StoredMessage(topic="T", queue_id=3, queue_offset=100 + i, commit_log_offset=(1 << 40) + 977 * i,
                         body=bytes([i % 256]) * (i + 1), properties=props, flag=i % 3, sys_flag=0,
                         born_timestamp=1_700_000_000_000 + i, born_host="10.0.0.7:5123",
                         store_timestamp=1_700_000_000_500 + i, store_host="192.168.1.20:10911",
                         reconsume_times=i % 2, prepared_tx_offset=0, body_crc=0, store_size=0)


def test_messages_to_arrow_matches_accessors() -> None:
    messages = [
        _stored(0, {}),
        _stored(1, {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "p": "v"}),
        _stored(2, {"UNIQ_KEY": "", "x": ""}),
        _stored(3, {"TAGS": "b"}),
    ]
    rb = messages_to_arrow(messages, "broker-a", "src")
    assert rb.schema == ARROW_SCHEMA
    rows = rb.to_pylist()
    for m, row in zip(messages, rows, strict=True):
        assert row == {
            "topic": m.topic, "brokerName": "broker-a", "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "body": m.body, "tags": m.tags, "keys": m.keys,
            "properties": list(m.properties.items()), "flag": m.flag,
            "bornTimestamp": datetime.fromtimestamp(m.born_timestamp / 1000, UTC),
            "storeTimestamp": datetime.fromtimestamp(m.store_timestamp / 1000, UTC),
            "bornHost": m.born_host, "reconsumeTimes": m.reconsume_times, "sourceCluster": "src",
        }


def test_messages_to_arrow_empty() -> None:
    assert messages_to_arrow([], "b", "c").num_rows == 0


def test_raw_rows_send_exactly_what_per_message_rows_send(monkeypatch: pytest.MonkeyPatch) -> None:
    """rowFormat=raw (records decoded by the sink) and the per-message Arrow rows must produce the same
    sends, offset bookkeeping and loop-guard decisions; trimming keeps whole records only."""
    props = [{}, {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "p": "v", "CLUSTER": "src"},
             {"ROCKETMQ_REPLICATOR_SOURCE": "dst"}, {"TAGS": "b", "x": ""}, {"MSG_REGION": "r", "q": "1"}]
    records = [encode_stored_message(topic=b"T", queue_id=3, queue_offset=100 + i, physical_offset=4096 * i,
                                     body=bytes([i]) * (i + 5), properties=encode_properties(p), flag=i,
                                     born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_500 + i,
                                     store_ip=b"\xc0\xa8\x01\x14", store_port=10911)
               for i, p in enumerate(props)]
    raw = b"".join(records)
    messages = decode_stored_messages(raw)
    raw_rb = pa.RecordBatch.from_arrays(
        [pa.array(["T"]), pa.array(["src-a"]), pa.array([3], pa.int32()), pa.array([100], pa.int64()),
         pa.array([104], pa.int64()), pa.array([5], pa.int32()), pa.array([raw], pa.binary()),
         pa.array(["src"])], schema=RAW_ARROW_SCHEMA)

    sent: list[list[tuple[str, bytes, dict[str, str], int]]] = []

    class Capture:
        def writable_queues(self, topic: str) -> list[MessageQueue]:
            return [MessageQueue(topic, "dst-a", q) for q in range(4)]

        def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                     timeout: float) -> Future[Any]:
            sent[-1].extend((topic, e.body, decode_properties(e.properties), e.flag) for e in iter_batch(body))
            future: Future[Any] = Future()
            future.set_result(SendResult(SendStatus.SEND_OK, "", "", queue, 0))
            return future

    monkeypatch.setattr(sending, "target_producer", lambda _o: Capture())
    options = SinkOptions(namesrv="127.0.0.1:1", target_cluster="dst", preserve_queues=False)
    results = []
    feeds: list[Callable[[PartitionWriter], object]] = [
        lambda w: w.add_record_batch(messages_to_arrow(messages, "src-a", "src")),
        lambda w: w.add_raw_batch(raw_rb)]
    for feed in feeds:
        sent.append([])
        writer = PartitionWriter(options)
        feed(writer)
        results.append(writer.finish())
    assert sent[0] == sent[1] and len(sent[0]) == 4  # the message whose chain holds dst is skipped
    arrow, raw_result = results
    assert (arrow.delivered, arrow.skipped_loop, arrow.source_next) == \
           (raw_result.delivered, raw_result.skipped_loop, raw_result.source_next) == (4, 1, {
               MessageQueue("T", "src-a", 3): 105})
    assert all("CLUSTER" not in p and "MSG_REGION" not in p for _, _, p, _ in sent[1])
    assert sent[1][0][2]["ROCKETMQ_REPLICATOR_SOURCE"] == "src"
    assert sent[1][1][2]["UNIQ_KEY"] == "ABC"
