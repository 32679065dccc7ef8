"""Property tests over every decoder of untrusted input: each either decodes or raises ProtocolError
(never KeyError, TypeError, struct.error, UnicodeDecodeError...). The frame/message/route decoders are
covered in test_protocol_codec.py; this file covers bodies and headers the processors parse."""

from __future__ import annotations

import dataclasses

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.broker.admin_processor import parse_attributes
from broker_store.broker.client_registry import decode_heartbeat
from broker_store.broker.subscription import build_subscription
from broker_store.protocol import headers
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.route import ClusterInfo
from broker_store.protocol.topic import DataVersion, TopicConfigTable, decode_register_broker_body
from broker_store.store.checkpoint import CHECKPOINT_SIZE, Checkpoint

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
# JSON documents shaped like the real bodies, with random holes and wrong types.
heartbeat_like = st.fixed_dictionaries({}, optional={
    "clientID": json_values, "consumerDataSet": st.lists(st.fixed_dictionaries({}, optional={
        "groupName": json_values, "subscriptionDataSet": st.lists(st.fixed_dictionaries({}, optional={
            "topic": json_values, "subString": json_values, "expressionType": json_values,
            "tagsSet": json_values, "codeSet": json_values, "subVersion": json_values}), max_size=2)}), max_size=2),
    "producerDataSet": json_values})
topic_table_like = st.fixed_dictionaries({}, optional={
    "topicConfigTable": st.dictionaries(st.text(max_size=10), st.fixed_dictionaries({}, optional={
        "topicName": json_values, "readQueueNums": json_values, "writeQueueNums": json_values,
        "perm": json_values, "topicFilterType": json_values, "topicSysFlag": json_values, "order": json_values}),
        max_size=3),
    "dataVersion": json_values})
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(orjson.dumps),
    heartbeat_like.map(orjson.dumps),
    topic_table_like.map(orjson.dumps),
    topic_table_like.map(lambda t: orjson.dumps({"topicConfigSerializeWrapper": t, "filterServerList": []})),
)


def decodes_or_protocol_error(fn, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except ProtocolError:
        pass


@settings(max_examples=400)
@given(bodies)
def test_body_decoders(raw: bytes) -> None:
    for decode in (decode_heartbeat, decode_register_broker_body, TopicConfigTable.decode, DataVersion.decode,
                   ClusterInfo.decode):
        decodes_or_protocol_error(decode, raw)


HEADER_CLASSES = [c for c in vars(headers).values()
                  if isinstance(c, type) and issubclass(c, headers.Header) and c is not headers.Header]
ext_values = st.one_of(st.text(max_size=12), st.integers(-(2**70), 2**70).map(str),
                       st.sampled_from(["true", "false", "", "-1", "0", " 7", "1e3"]))


@settings(max_examples=300)
@given(st.sampled_from(HEADER_CLASSES), st.data())
def test_header_decoders(cls: type[headers.Header], data: st.DataObject) -> None:
    names = [f.metadata.get("wire") or headers._camel(f.name) for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    ext = data.draw(st.dictionaries(st.sampled_from(names) | st.text(max_size=5), ext_values, max_size=len(names) + 2))
    decodes_or_protocol_error(cls.from_ext, ext)


_SEND_BASE = headers.SendMessageRequestHeader(
    producer_group="p", topic="T", default_topic="TBW102", default_topic_queue_nums=4, queue_id=1, sys_flag=0,
    born_timestamp=1, flag=0, properties="", reconsume_times=0, unit_mode=False, batch=True,
    max_reconsume_times=16, broker_name="b")


@settings(max_examples=400)
@given(st.dictionaries(st.sampled_from([*headers.SEND_V2_NAMES.values(), *headers.SEND_V2_NAMES]), ext_values,
                       max_size=20), st.booleans(), st.booleans())
def test_send_header_fast_path_is_the_typed_decoder(changes: dict[str, str], short: bool, from_valid: bool) -> None:
    """``decode_send_header`` answers exactly what ``from_ext`` does: the same header or a ProtocolError
    (on random fields, and on a well-formed header with some fields changed)."""
    names = headers.SEND_V2_NAMES if short else None
    ext = {**_SEND_BASE.to_ext(names), **changes} if from_valid else changes
    try:
        typed: headers.SendMessageRequestHeader | ProtocolError = headers.SendMessageRequestHeader.from_ext(ext, names)
    except ProtocolError as exc:
        typed = exc
    try:
        fast: headers.SendMessageRequestHeader | ProtocolError = headers.decode_send_header(ext, short)
    except ProtocolError as exc:
        fast = exc
    assert repr(fast) == repr(typed)


@given(st.text(max_size=40), st.text(max_size=40), st.none() | st.text(max_size=6))
def test_subscription_and_attribute_parsers(expression: str, attributes: str, expression_type: str | None) -> None:
    decodes_or_protocol_error(build_subscription, "T", expression, expression_type)
    decodes_or_protocol_error(parse_attributes, attributes)


@given(st.binary(min_size=CHECKPOINT_SIZE, max_size=CHECKPOINT_SIZE) | st.binary(max_size=80))
def test_checkpoint_decoder_rejects_garbage_without_raising(raw: bytes) -> None:
    assert Checkpoint.decode(raw) is None or isinstance(Checkpoint.decode(raw), Checkpoint)
