"""Unit tests of the SEND_BATCH_MESSAGE put path's column-wise code against one-message-at-a-time references.

The store's batch encoder must write exactly the records ``encode_stored_message`` writes, and the send
processor's batch preparation must give exactly what its per-message loop gave (the loop is kept below as
the reference). ``tests/integration/test_broker_server.py`` drives the same path through a real broker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_store.broker.role import RoleState
from broker_store.broker.send_processor import SendContext, SendProcessor
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import ManualClock
from broker_store.net.server import Connection
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import SEND_V2_NAMES, SendMessageRequestHeader
from broker_store.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    encode_batch,
    encode_stored_message,
    host_to_bytes,
    make_msg_id,
    split_batch,
    tags_hash_code,
)
from broker_store.protocol.properties import encode_properties, find_property
from broker_store.store import (
    MessageStore,
    PutEntry,
    PutStatus,
    StoreConfig,
    tags_code_of_properties,
    tags_codes_of_properties,
)
from broker_store.store.consume_queue import CQ_ENTRY
from broker_store.store.message_store import _says_no_wait

STORE_HOST = "10.1.2.3:10911"
BORN_HOST = "192.168.0.7:50000"
NOW = 1_700_000_000.25


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(StoreConfig(store_dir=tmp_path, commit_log_segment_size=1 << 20, retention_interval_ms=0,
                                 max_message_size=8192),
                     store_host=STORE_HOST, clock=ManualClock(wall=NOW))
    s.start()
    yield s
    s.shutdown()


def _expected_records(topic: str, queue_id: int, entries: list[PutEntry], wrote: int, queue_offset: int,
                      sys_flag: int, born_timestamp: int) -> tuple[bytes, bytes, list[str]]:
    """CommitLog bytes, ConsumeQueue entries and msg ids, one message at a time."""
    born_ip, born_port = host_to_bytes(BORN_HOST)
    store_ip, store_port = host_to_bytes(STORE_HOST)
    records, cq, ids = [], [], []
    pos = wrote
    for i, (body, props, flag, tags_code) in enumerate(entries):
        rec = encode_stored_message(topic=topic.encode(), queue_id=queue_id, queue_offset=queue_offset + i,
                                    physical_offset=pos, body=bytes(body), properties=props, flag=flag,
                                    sys_flag=sys_flag, born_timestamp=born_timestamp, born_ip=born_ip,
                                    born_port=born_port, store_timestamp=int(NOW * 1000), store_ip=store_ip,
                                    store_port=store_port)
        records.append(rec)
        cq.append(CQ_ENTRY.pack(pos, len(rec), tags_code))
        ids.append(make_msg_id(store_ip, store_port, pos))
        pos += len(rec)
    return b"".join(records), b"".join(cq), ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=80), st.integers(-(2**31), 2**31 - 1),
                          st.integers(-(2**31), 2**31 - 1), st.booleans()),
                min_size=1, max_size=40),
       st.integers(0, 7), st.integers(0, 255), st.integers(0, 2**41))
def test_batch_records_match_encode_stored_message(store: MessageStore, messages: list[Any], queue_id: int,
                                                   sys_flag: int, born_timestamp: int) -> None:
    entries: list[PutEntry] = [(memoryview(b) if as_view else b, p, f, t) for b, p, f, t, as_view in messages]
    wrote, queue_offset = store.max_physical_offset, store.get_max_offset("Batch", queue_id)
    r = store.put_messages("Batch", queue_id, entries, sys_flag=sys_flag, born_timestamp=born_timestamp,
                           born_host=BORN_HOST)
    assert r.status is PutStatus.PUT_OK and r.wrote_offset == wrote and r.queue_offset == queue_offset
    records, cq_entries, ids = _expected_records("Batch", queue_id, entries, wrote, queue_offset, sys_flag,
                                                 born_timestamp)
    assert store.read_commit_log(wrote, len(records)) == records
    assert r.end_offset == wrote + len(records) == store.max_physical_offset
    assert list(r.msg_ids) == ids and r.count == len(entries)
    cq = store._queues.queues[("Batch", queue_id)]
    assert cq.read(queue_offset, len(entries)) == cq_entries


def test_single_put_matches_encode_stored_message(store: MessageStore) -> None:
    body, properties = b"body", b"K\x01v\x02"
    entry: PutEntry = (body, properties, 7, 99)
    r = store.put_message("One", 2, body, properties, tags_code=99, flag=7, sys_flag=1, born_timestamp=5,
                          born_host=BORN_HOST, reconsume_times=0)
    records, _, ids = _expected_records("One", 2, [entry], 0, 0, 1, 5)
    assert store.read_commit_log(0, len(records)) == records and list(r.msg_ids) == ids


def test_batch_limits_name_the_first_offending_entry(store: MessageStore) -> None:
    big_props = b"p" * (MAX_PROPERTIES_LENGTH + 1)
    big_body = b"b" * 8193
    ok: PutEntry = (b"x", b"", 0, 0)
    r = store.put_messages("Lim", 0, [ok, (b"x", big_props, 0, 0), (big_body, b"", 0, 0)], born_timestamp=0,
                           born_host=BORN_HOST)
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and str(MAX_PROPERTIES_LENGTH + 1) in r.remark
    r = store.put_messages("Lim", 0, [ok, (big_body, big_props, 0, 0)], born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "8193" in r.remark
    assert store.max_physical_offset == 0  # all or nothing


# -- the send processor's batch preparation ----------------------------------------------------------


def _processor() -> SendProcessor:
    """Batch preparation touches neither the store nor the topic table."""
    return SendProcessor(SendContext(store=cast(MessageStore, None), topic_configs=cast(TopicConfigManager, None),
                                     role=RoleState(0), broker_name="b", cluster_name="c1", region_id="r",
                                     trace_on=False, max_message_size=1 << 20, max_batch_size=(1 << 20) + 65536,
                                     max_reconsume_times=16))


def _reference_entries(sp: SendProcessor, batch: list[tuple[memoryview, bytes, int]]) -> list[PutEntry] | int:
    """The per-message loop the batch path ran before it went column-wise."""
    entries: list[PutEntry] = []
    for body, raw, flag in batch:
        props = sp._with_cluster(raw)
        if len(props) > MAX_PROPERTIES_LENGTH:
            return len(props)
        entries.append((body, props, flag, tags_code_of_properties(props, tags_hash_code)))
    return entries


_PROPERTY_PIECES = st.sampled_from([
    b"", b"\x02", b"TAGS\x01", b"TAGS\x01a\x02", b"XTAGS\x01b\x02", b"CLUSTER\x01old\x02", b"XCLUSTER\x01k\x02",
    b"WAIT\x01false", b"WAIT\x01false\x02", b"XWAIT\x01false\x02", b"WAIT\x01true\x02", b"UNIQ_KEY\x01AB01\x02",
    b"K\x01v",
    b"\xff", b"\0",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.lists(_PROPERTY_PIECES, max_size=4).map(b"".join),
                          st.one_of(st.just(0), st.integers(MAX_PROPERTIES_LENGTH - 20, MAX_PROPERTIES_LENGTH))),
                min_size=1, max_size=8),
       )
def test_batch_entries_match_the_per_message_loop(messages: list[tuple[bytes, int]]) -> None:
    """``padded_to``: properties filled up to that length, around the limit once CLUSTER is added."""
    props = [raw + b"P\x01" + b"v" * (padded_to - len(raw) - 2) if padded_to else raw
             for raw, padded_to in messages]
    sp = _processor()
    batch = split_batch(encode_batch([(os.urandom(3), p, i) for i, p in enumerate(props)]))
    try:
        expected: Any = _reference_entries(sp, batch)
    except Exception as exc:  # noqa: BLE001 - the same exception must come out of both
        with pytest.raises(type(exc)):
            sp._batch_entries(batch)
        return
    got = sp._batch_entries(batch)
    if isinstance(expected, int):
        assert got == expected
    else:
        assert isinstance(got, list)
        assert [(bytes(b), p, f, t) for b, p, f, t in got] == [(bytes(b), p, f, t) for b, p, f, t in expected]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PROPERTY_PIECES, max_size=4).map(b"".join), min_size=1, max_size=8))
def test_store_sees_wait_false_as_one_message_at_a_time(props: list[bytes]) -> None:
    """The store's joined search for WAIT=false (skip the durability wait) agrees with a per-message scan."""
    expected = any(find_property(p, b"WAIT\x01false\x02") >= 0 for p in props)
    assert _says_no_wait(props) is expected


_TAG_PIECES = st.sampled_from([b"TAGS\x01z\x02", b"TAGS\x01zz", b"TAGS\x01z", b"a\x02TAGS\x01\xff", b"a\x02TAGS\x01z"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(_PROPERTY_PIECES, _TAG_PIECES, st.binary(max_size=6)), max_size=5).map(b"".join),
                max_size=12))
def test_tags_codes_of_properties_match_one_at_a_time(props: list[bytes]) -> None:
    """Values are cached per batch: two different values must never share a code by mistake."""
    for batch in (props, [b"TAGS\x01zz", b"TAGS\x01z", b"K\x01TAGS\x01y\x02TAGS\x01z", b"TAGS\x01z\x02"]):
        assert tags_codes_of_properties(batch, tags_hash_code) == [tags_code_of_properties(p, tags_hash_code)
                                                                    for p in batch]


# -- the send processor's batch size limits -----------------------------------------------------------


def _send_batch(store: MessageStore, tmp_path: Path, entries: list[tuple[bytes, bytes, int]]) -> RemotingCommand:
    """SEND_BATCH_MESSAGE through a SendProcessor over a real store and topic table, no socket."""
    topics = TopicConfigManager(tmp_path / "topics.json", auto_create_topic_enable=True, default_topic_queue_nums=4,
                                clock=ManualClock())
    topics.load()
    limits = store.config
    sp = SendProcessor(SendContext(store=store, topic_configs=topics, role=RoleState(0), broker_name="b",
                                   cluster_name="c1", region_id="r", trace_on=False,
                                   max_message_size=limits.max_message_size, max_batch_size=limits.max_batch_size,
                                   max_reconsume_times=16))
    h = SendMessageRequestHeader(producer_group="pg", topic="Sized", default_topic="TBW102",
                                 default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=1, flag=0,
                                 batch=True)
    cmd = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, h.to_ext(SEND_V2_NAMES), encode_batch(entries))
    resp = sp.send_batch_message(cmd, cast(Connection, SimpleNamespace(remote_addr="127.0.0.1:5000")))
    assert isinstance(resp, RemotingCommand)
    return resp


def test_batch_checks_each_body_like_a_single_send_and_bounds_the_encoded_batch(
        store: MessageStore, tmp_path: Path) -> None:
    """max_message_size (8192 here) is the body limit of every message; the encoded batch may take 64 KiB
    more (``StoreSettings.max_batch_size``), so a message accepted alone is accepted in a batch of one."""
    assert store.config.max_batch_size == 8192 + 65536
    props = encode_properties({"KEYS": "k" * 2000})
    ok = _send_batch(store, tmp_path, [(b"a" * 8192, props, 0)])  # encoded > 8192: refused before
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    ok = _send_batch(store, tmp_path, [(b"b" * 8000, props, 0)] * 5)  # ~50 KiB encoded, every body fits
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    too_big = _send_batch(store, tmp_path, [(b"c", b"", 0), (b"d" * 8193, b"", 0)])
    assert too_big.code == ResponseCode.MESSAGE_ILLEGAL
    assert too_big.remark == "the message is illegal: body size 8193 exceeds the limit of 8192 bytes (max_message_size)"
    too_many = _send_batch(store, tmp_path, [(b"e" * 8000, b"", 0)] * 10)  # 80 KiB encoded > 72 KiB
    assert too_many.code == ResponseCode.MESSAGE_ILLEGAL and "encoded batch size 80" in (too_many.remark or "")
    assert store.get_max_offset("Sized", 0) == 6
