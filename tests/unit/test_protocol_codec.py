"""Codec tests: golden byte vectors written from RocketMQ's published wire format, plus property
tests showing every decoder either decodes or raises ProtocolError (never anything else)."""

from __future__ import annotations

import re
import struct
import zlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.protocol import message as message_module
from broker_store.protocol.codes import LanguageCode, SerializeType
from broker_store.protocol.errors import FrameTooLargeError, ProtocolError
from broker_store.protocol.frame import (
    MAX_FRAME_SIZE,
    RemotingCommand,
    decode_frame,
    encode_frame,
    read_frame_length,
)
from broker_store.protocol.headers import (
    SEND_V2_NAMES,
    BrokerHeartbeatRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
    encode_send_v2,
)
from broker_store.protocol.message import (
    MAGIC_V1,
    STORED_HEADER_SIZE,
    STORED_OFFSETS,
    decode_properties,
    decode_stored_message,
    decode_stored_messages,
    encode_batch,
    encode_properties,
    encode_stored_message,
    host_msg_id_prefix,
    iter_batch,
    make_msg_id,
    msg_id_from_prefix,
    msg_id_prefix,
    msg_ids_from_prefix,
    parse_msg_id,
    split_batch,
    stored_record_spans,
    tags_hash_code,
    validate_topic,
)
from broker_store.protocol.route import BrokerData, QueueData, TopicRouteData, loads_rocketmq

# --- frames -----------------------------------------------------------------------------------

# GET_ROUTEINFO_BY_TOPIC as the Java client sends it: header JSON written by fastjson.
JAVA_ROUTE_REQUEST_HEADER = (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA",'
    b'"opaque":3,"serializeTypeCurrentRPC":"JSON","version":395}'
)


def java_frame(header: bytes, body: bytes = b"", serialize: int = 0) -> bytes:
    # int32 total = 4 + header + body; int32 (type << 24 | header length); header; body.
    return struct.pack(">ii", 4 + len(header) + len(body), (serialize << 24) | len(header)) + header + body


def test_decode_java_json_frame() -> None:
    frame = java_frame(JAVA_ROUTE_REQUEST_HEADER)
    assert frame[:8] == bytes.fromhex("00000087" "00000083")
    cmd = decode_frame(frame[4:])
    assert cmd.code == 105
    assert cmd.opaque == 3
    assert cmd.language is LanguageCode.JAVA
    assert cmd.version == 395
    assert cmd.ext_fields == {"topic": "TopicTest"}
    assert not cmd.is_response and not cmd.is_oneway


def test_ext_fields_numbers_and_booleans_become_java_strings() -> None:
    header = b'{"code":11,"extFields":{"queueId":3,"batch":true,"ratio":1.5,"n":null},"flag":2,"opaque":9}'
    cmd = decode_frame(java_frame(header)[4:])
    assert cmd.ext_fields == {"queueId": "3", "batch": "true", "ratio": "1.5"}
    assert cmd.is_oneway


def test_encode_json_response_golden() -> None:
    cmd = RemotingCommand(code=0, opaque=7, flag=1, remark="ok", ext_fields={"offset": "42"},
                          language=LanguageCode.JAVA, version=395, body=b"xy")
    header = (b'{"code":0,"language":"JAVA","version":395,"opaque":7,"flag":1,'
              b'"serializeTypeCurrentRPC":"JSON","remark":"ok","extFields":{"offset":"42"}}')
    assert encode_frame(cmd) == java_frame(header, b"xy")


def test_binary_rocketmq_header_golden() -> None:
    # code i16 | language u8 | version i16 | opaque i32 | flag i32 | remark len+bytes | ext len + entries
    ext = struct.pack(">h", 5) + b"topic" + struct.pack(">i", 1) + b"T"
    header = (struct.pack(">hbhii", 105, 0, 395, 11, 0) + struct.pack(">i", 2) + b"hi"
              + struct.pack(">i", len(ext)) + ext)
    frame = java_frame(header, b"", serialize=1)
    cmd = decode_frame(frame[4:])
    assert (cmd.code, cmd.opaque, cmd.remark, cmd.ext_fields) == (105, 11, "hi", {"topic": "T"})
    assert cmd.serialize_type is SerializeType.ROCKETMQ
    reply = cmd.response(0)
    reply.remark = "hi"
    reply.ext_fields = {"topic": "T"}
    reply.flag = 0
    reply.opaque = 11
    reply.code = 105
    reply.language = LanguageCode.JAVA
    assert encode_frame(reply) == frame


def test_binary_header_refuses_values_it_cannot_carry() -> None:
    """Code and version are i16 in the binary header: a ProtocolError naming them, never a bare struct.error
    (found by benchmarks/fuzz.py building binary frames of random codes)."""
    with pytest.raises(ProtocolError, match="code 40000"):
        encode_frame(RemotingCommand(code=40000, serialize_type=SerializeType.ROCKETMQ))
    assert encode_frame(RemotingCommand(code=40000))  # the JSON header carries any int32 code


@pytest.mark.parametrize("short", [True, False])
def test_send_header_int_fields_are_java_ints(short: bool) -> None:
    """queueId, sysFlag, flag, reconsumeTimes... are Java ints: past 32 bits a ProtocolError naming the field,
    as RocketMQ's Integer.parseInt refuses them. Found by benchmarks/fuzz.py: a flag of 2**31 passed the 64-bit
    check and failed in the store's 4-byte FLAG field as a bare struct.error (SYSTEM_ERROR and a traceback).
    bornTimestamp is a long."""
    names = SEND_V2_NAMES if short else None
    base = SendMessageRequestHeader(
        producer_group="p", topic="T", default_topic="TBW102", default_topic_queue_nums=4, queue_id=1, sys_flag=0,
        born_timestamp=2**40, flag=0, properties="", reconsume_times=0, unit_mode=False, batch=False,
        max_reconsume_times=16, broker_name="b").to_ext(names)
    assert decode_send_header(base, short).born_timestamp == 2**40
    for field_name in ("defaultTopicQueueNums", "queueId", "sysFlag", "flag", "reconsumeTimes", "maxReconsumeTimes"):
        key = SEND_V2_NAMES[field_name] if short else field_name
        for bad in (2**31, -(2**31) - 1):
            with pytest.raises(ProtocolError, match=f"{field_name}.*32-bit"):
                decode_send_header({**base, key: str(bad)}, short)
        assert decode_send_header({**base, key: str(2**31 - 1)}, short)


def test_frame_length_limits() -> None:
    with pytest.raises(FrameTooLargeError):
        read_frame_length(struct.pack(">i", MAX_FRAME_SIZE + 1))
    with pytest.raises(FrameTooLargeError):
        read_frame_length(struct.pack(">i", -5))
    with pytest.raises(FrameTooLargeError):
        encode_frame(RemotingCommand(code=10, body=b"x" * MAX_FRAME_SIZE))


@pytest.mark.parametrize("payload", [
    b"", b"\x00\x00", struct.pack(">i", 100) + b"{}",  # header length beyond frame
    struct.pack(">i", 2) + b"{}",  # no code
    struct.pack(">i", 4) + b"[1]x",
    struct.pack(">i", (7 << 24) | 2) + b"{}",  # unknown serialisation
    struct.pack(">i", 13) + b'{"code":"x"}',
])
def test_bad_frames_raise_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_frame(payload)


commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    ext_fields=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=5),
    body=st.binary(max_size=200),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(max_size=20),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@given(commands)
def test_frame_round_trip(cmd: RemotingCommand) -> None:
    frame = encode_frame(cmd)
    assert read_frame_length(frame[:4]) == len(frame) - 4
    decoded = decode_frame(frame[4:])
    if cmd.serialize_type is SerializeType.ROCKETMQ and cmd.remark == "":
        decoded.remark = ""  # binary headers cannot tell "" from absent
    assert decoded == cmd


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_decode_frame_fuzz(payload: bytes) -> None:
    try:
        decode_frame(payload)
    except ProtocolError:
        pass


@settings(max_examples=300)
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=10))
def test_decode_json_header_fuzz(obj: object) -> None:
    header = orjson.dumps(obj)
    try:
        decode_frame(struct.pack(">i", len(header)) + header)
    except ProtocolError:
        pass


# --- headers ----------------------------------------------------------------------------------

def test_send_v2_short_names() -> None:
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1700000000000",
           "h": "0", "i": "TAGS\x01a\x02", "j": "0", "k": "false", "l": "16", "m": "false"}
    header = SendMessageRequestHeader.from_ext(ext, SEND_V2_NAMES)
    assert header.topic == "T" and header.queue_id == 2 and header.batch is False
    assert header.to_ext(SEND_V2_NAMES) == ext


def test_send_v2_names_are_declared_with_the_fields() -> None:
    assert SEND_V2_NAMES == {
        "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
        "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
        "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m", "brokerName": "n"}


_SEND_HEADERS = [
    SendMessageRequestHeader(producer_group="p", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
                             queue_id=2, sys_flag=0, born_timestamp=123, flag=7, properties="TAGS\x01a\x02",
                             reconsume_times=1, max_reconsume_times=3),
    SendMessageRequestHeader(producer_group="p", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
                             queue_id=-1, sys_flag=1, born_timestamp=2**62, flag=0),
    SendMessageRequestHeader(producer_group="p", topic="T", default_topic="TBW102", default_topic_queue_nums=8,
                             queue_id=0, sys_flag=0, born_timestamp=1, flag=0, properties="", reconsume_times=0,
                             unit_mode=True, batch=False, max_reconsume_times=16, broker_name="broker-a"),
]


@pytest.mark.parametrize("header", _SEND_HEADERS)
@pytest.mark.parametrize("short", [True, False])
def test_send_header_fast_decoder_is_the_typed_decoder(header: SendMessageRequestHeader, short: bool) -> None:
    ext = header.to_ext(SEND_V2_NAMES if short else None)
    assert decode_send_header(ext, short) == header == SendMessageRequestHeader.from_ext(
        ext, SEND_V2_NAMES if short else None)


def test_send_header_fast_decoder_hands_the_unusual_to_the_typed_decoder() -> None:
    ext = _SEND_HEADERS[2].to_ext(SEND_V2_NAMES)
    assert decode_send_header({**ext, "k": "1", "m": " TRUE"}, True) == SendMessageRequestHeader.from_ext(
        {**ext, "k": "1", "m": " TRUE"}, SEND_V2_NAMES)
    bad = dict(ext)
    del bad["b"]
    with pytest.raises(ProtocolError, match="'topic'"):
        decode_send_header(bad, True)
    with pytest.raises(ProtocolError, match="queueId"):
        decode_send_header({**_SEND_HEADERS[0].to_ext(), "queueId": "x"}, False)
    with pytest.raises(ProtocolError, match="bornTimestamp.*64-bit"):
        decode_send_header({**ext, "g": str(2**63)}, True)
    with pytest.raises(ProtocolError, match="unitMode.*boolean"):
        decode_send_header({**ext, "k": "yes"}, True)


@pytest.mark.parametrize("batch", [False, True])
def test_send_v2_encoder_is_the_typed_encoder(batch: bool) -> None:
    ext = encode_send_v2("G1", "T1", "TBW102", 4, 3, 1, 1700000000000, 7, "K\x01v\x02", batch, "broker-a")
    typed = SendMessageRequestHeader(
        producer_group="G1", topic="T1", default_topic="TBW102", default_topic_queue_nums=4, queue_id=3,
        sys_flag=1, born_timestamp=1700000000000, flag=7, properties="K\x01v\x02", reconsume_times=0,
        unit_mode=False, batch=batch, broker_name="broker-a").to_ext(SEND_V2_NAMES)
    assert list(ext.items()) == list(typed.items())


def test_broker_heartbeat_forms() -> None:
    """The name server's lite heartbeat vs the controller heartbeat: the one rule both servers use."""
    lite = BrokerHeartbeatRequestHeader.from_ext({"clusterName": "c", "brokerAddr": "a:1", "brokerName": "b"})
    assert not lite.is_controller_heartbeat
    assert not BrokerHeartbeatRequestHeader("c", "a:1", "b", broker_id=0).is_controller_heartbeat
    assert not BrokerHeartbeatRequestHeader("c", "a:1", "b", max_offset=5).is_controller_heartbeat
    full = BrokerHeartbeatRequestHeader("c", "a:1", "b", broker_id=2, epoch=3, max_offset=0, confirm_offset=0)
    assert BrokerHeartbeatRequestHeader.from_ext(full.to_ext()).is_controller_heartbeat


def test_header_errors_name_the_field() -> None:
    with pytest.raises(ProtocolError, match="queueOffset"):
        PullMessageRequestHeader.from_ext({"consumerGroup": "g", "topic": "t", "queueId": "1", "queueOffset": "x",
                                           "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0",
                                           "suspendTimeoutMillis": "0", "subVersion": "0"})


# --- messages ---------------------------------------------------------------------------------

def test_properties_golden() -> None:
    assert encode_properties({"TAGS": "TagA", "KEYS": "k1 k2"}) == b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    assert decode_properties(b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02") == {"TAGS": "TagA", "KEYS": "k1 k2"}
    with pytest.raises(ProtocolError):
        encode_properties({"a\x01": "b"})


@pytest.mark.parametrize(("tag", "java_hash"), [
    ("TagA", 2598919), ("hello", 99162322), ("", 0), ("\u00e9", 233),
    ("polygenelubricants", -(2**31)), ("\U0001F600", 1772899),
])
def test_tags_hash_code_matches_java_string_hashcode(tag: str, java_hash: int) -> None:
    assert tags_hash_code(tag) == java_hash


def test_stored_message_golden() -> None:
    body = b"hello"
    topic = b"T"
    props = b"TAGS\x01a\x02"
    raw = encode_stored_message(topic=topic, queue_id=1, queue_offset=2, physical_offset=300, body=body,
                                properties=props, flag=5, sys_flag=0, born_timestamp=1000,
                                born_ip=bytes([127, 0, 0, 1]), born_port=4000, store_timestamp=2000,
                                store_ip=bytes([10, 0, 0, 2]), store_port=10911, reconsume_times=3,
                                prepared_tx_offset=0)
    expected = b"".join([
        struct.pack(">i", 88 + 5 + 1 + 1 + 2 + 7),  # TOTALSIZE
        struct.pack(">i", MAGIC_V1),
        struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
        struct.pack(">i", 1),  # QUEUEID
        struct.pack(">i", 5),  # FLAG
        struct.pack(">q", 2),  # QUEUEOFFSET
        struct.pack(">q", 300),  # PHYSICALOFFSET
        struct.pack(">i", 0),  # SYSFLAG
        struct.pack(">q", 1000), bytes([127, 0, 0, 1]), struct.pack(">i", 4000),
        struct.pack(">q", 2000), bytes([10, 0, 0, 2]), struct.pack(">i", 10911),
        struct.pack(">i", 3), struct.pack(">q", 0),
        struct.pack(">i", 5), body, b"\x01", topic, struct.pack(">h", len(props)), props,
    ])
    assert raw == expected
    msg = decode_stored_message(raw)
    assert (msg.topic, msg.queue_id, msg.queue_offset, msg.commit_log_offset) == ("T", 1, 2, 300)
    assert msg.born_host == "127.0.0.1:4000" and msg.store_host == "10.0.0.2:10911"
    assert msg.tags == "a" and msg.reconsume_times == 3 and msg.flag == 5
    assert msg.offset_msg_id == "0A00000200002A9F000000000000012C"
    assert msg.msg_id == msg.offset_msg_id


def test_compressed_body_is_inflated() -> None:
    raw = encode_stored_message(topic=b"T", queue_id=0, queue_offset=0, physical_offset=0,
                                body=zlib.compress(b"x" * 100), properties=b"", sys_flag=1)
    assert decode_stored_message(raw).body == b"x" * 100
    assert decode_stored_message(raw, decompress=False).body == zlib.compress(b"x" * 100)


def test_stored_layout_table_in_the_docstring_is_the_declared_one() -> None:
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([A-Z_]+)\b", message_module.__doc__ or "", re.MULTILINE)
    documented = {name: int(offset) for offset, _size, name in rows}
    declared = {name: offset for name, offset in STORED_OFFSETS.items() if not name.endswith("_PORT")}
    assert documented == declared
    assert STORED_HEADER_SIZE == 88


def test_msg_id_parts_compose_the_one_definition() -> None:
    ip, port = bytes([10, 0, 0, 2]), 10911
    assert make_msg_id(ip, port, 300) == "0A00000200002A9F000000000000012C"  # the layout, written out
    prefix = msg_id_prefix(ip, port)
    assert prefix == host_msg_id_prefix("10.0.0.2:10911") == "0A00000200002A9F"
    offsets = [0, 300, 2**40 + 7, 2**63 - 1]
    assert [msg_id_from_prefix(prefix, o) for o in offsets] == [make_msg_id(ip, port, o) for o in offsets]
    assert msg_ids_from_prefix(prefix, offsets) == tuple(make_msg_id(ip, port, o) for o in offsets)
    assert msg_ids_from_prefix(prefix, []) == ()
    assert make_msg_id(ip, port, 2**63 - 1).endswith("7FFFFFFFFFFFFFFF")


def test_msg_id_round_trip() -> None:
    msg_id = make_msg_id(bytes([192, 168, 0, 1]), 10911, 123456789)
    assert len(msg_id) == 32
    assert parse_msg_id(msg_id) == ("192.168.0.1:10911", 123456789)
    with pytest.raises(ProtocolError):
        parse_msg_id("zz")


@pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "t/1", "中文"])
def test_illegal_topics(topic: str) -> None:
    with pytest.raises(ProtocolError):
        validate_topic(topic)


prop_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"),
                    max_size=20)


@given(st.dictionaries(prop_text.filter(bool), prop_text, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@given(st.lists(st.tuples(st.binary(max_size=300), st.dictionaries(prop_text.filter(bool), prop_text, max_size=4),
                          st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=10))
def test_stored_and_batch_round_trip(entries: list[tuple[bytes, dict[str, str], int]]) -> None:
    records = []
    pos = 0
    for i, (body, props, flag) in enumerate(entries):
        rec = encode_stored_message(topic=b"Topic_1", queue_id=i % 4, queue_offset=i, physical_offset=pos,
                                    body=body, properties=encode_properties(props), flag=flag)
        records.append(rec)
        pos += len(rec)
    decoded = decode_stored_messages(b"".join(records))
    starts = [sum(map(len, records[:k])) for k in range(len(records))]
    assert stored_record_spans(b"".join(records)) == [(i, start, start + len(rec))
                                                      for i, (start, rec) in enumerate(zip(starts, records,
                                                                                           strict=True))]
    assert [(m.body, dict(m.properties), m.flag, m.commit_log_offset) for m in decoded] == [
        (b, p, f, off) for (b, p, f), off in zip(entries, [sum(map(len, records[:k])) for k in range(len(records))],
                                                  strict=True)]
    batch = encode_batch([(b, encode_properties(p), f) for b, p, f in entries])
    assert [(e.body, decode_properties(e.properties), e.flag) for e in iter_batch(batch)] == entries
    assert [(bytes(b), decode_properties(p), f) for b, p, f in split_batch(batch)] == entries


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_stored_and_batch_decoders_fuzz(data: bytes) -> None:
    for decode in (decode_stored_messages, lambda b: list(iter_batch(b)), stored_record_spans):
        try:
            decode(data)
        except ProtocolError:
            pass
    try:
        expected = [(bytes(e.body), e.properties, e.flag) for e in iter_batch(data)]
    except ProtocolError:
        with pytest.raises(ProtocolError):
            split_batch(data)
    else:
        assert [(bytes(b), p, f) for b, p, f in split_batch(data)] == expected


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=200), st.integers(0, 199), st.integers(0, 255))
def test_corrupted_stored_message_never_escapes(body: bytes, where: int, value: int) -> None:
    raw = bytearray(encode_stored_message(topic=b"T", queue_id=0, queue_offset=0, physical_offset=0, body=body,
                                          properties=b"K\x01v\x02"))
    raw[where % len(raw)] = value
    try:
        decode_stored_messages(bytes(raw))
    except ProtocolError:
        pass


# --- route data -------------------------------------------------------------------------------

def test_route_json_uses_bare_numeric_broker_ids() -> None:
    addrs = {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}
    route = TopicRouteData(queue_datas=(QueueData("broker-a", 4, 4, 6),),
                           broker_datas=(BrokerData("source", "broker-a", addrs),))
    assert route.encode() == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a",'
        b'"cluster":"source"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
    assert TopicRouteData.decode(route.encode()) == route


def test_route_json_from_real_cluster_shape() -> None:
    # As an Apache RocketMQ name server answers (fastjson, bare numeric keys, extra fields).
    raw = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.1.1.1:10911"},"brokerName":"b","cluster":"DefaultCluster",'
           b'"enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,'
           b'"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}')
    route = TopicRouteData.decode(raw)
    assert route.broker("b") is not None and route.broker("b").master_addr == "10.1.1.1:10911"  # type: ignore[union-attr]


def test_loads_rocketmq_keeps_strings_intact() -> None:
    assert loads_rocketmq(b'{"k":"{1:2}","m":{7:"a,3:b"}}') == {"k": "{1:2}", "m": {"7": "a,3:b"}}


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_route_decoder_fuzz(data: bytes) -> None:
    try:
        TopicRouteData.decode(data)
    except ProtocolError:
        pass
