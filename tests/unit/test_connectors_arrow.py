"""The reader's and writer's Arrow hot paths against the per-message accessors they replace."""

from __future__ import annotations

from datetime import UTC, datetime

from broker_store.protocol.message import StoredMessage
from connectors.source import ARROW_SCHEMA, messages_to_arrow


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
