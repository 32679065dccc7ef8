"""Source offset JSON: canonical, round-trips, and names the bad key when it does not parse."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from connectors.core.errors import OffsetFormatError
from connectors.core.offsets import SourceOffset, parse_queue_key

topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True)
brokers = st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s)
queue_keys = st.builds(MessageQueue, topics, brokers, st.integers(0, 1023))
offsets = st.dictionaries(queue_keys, st.integers(0, 2**62), max_size=20).map(SourceOffset.of)


@given(offsets)
def test_round_trip_and_canonical(offset: SourceOffset) -> None:
    text = offset.to_json()
    assert SourceOffset.from_json(text) == offset
    assert SourceOffset.from_dict(json.loads(text)) == offset
    assert json.dumps(offset.to_dict(), separators=(",", ":")) == text   # canonical without sort_keys
    assert SourceOffset.from_json(text).to_json() == text
    assert pickle.loads(pickle.dumps(offset)) == offset


def test_document_shape() -> None:
    offset = SourceOffset.of({MessageQueue("Orders", "b-1", 10): 7, MessageQueue("Orders", "b-1", 2): 3})
    assert offset.to_json() == '{"queues":{"Orders/b-1/10":7,"Orders/b-1/2":3},"version":1}'
    assert offset.merged({MessageQueue("Orders", "b-1", 2): 9}).get(MessageQueue("Orders", "b-1", 2)) == 9
    assert parse_queue_key("T/broker/with/slash/3") == MessageQueue("T", "broker/with/slash", 3)


@pytest.mark.parametrize(("document", "needle"), [
    ({"version": 1, "queues": {"Orders/b/x": 1}}, "'Orders/b/x'"),
    ({"version": 1, "queues": {"Orders/b/01": 1}}, "'Orders/b/01'"),
    ({"version": 1, "queues": {"Orders/3": 1}}, "'Orders/3'"),
    ({"version": 1, "queues": {"Orders/b/1": -1}}, "'Orders/b/1'"),
    ({"version": 1, "queues": {"Orders/b/1": True}}, "'Orders/b/1'"),
    ({"version": 1, "queues": {"Orders/b/1": 1.5}}, "'Orders/b/1'"),
    ({"version": 2, "queues": {}}, "'version'"),
    ({"queues": {}}, "'version'"),
    ({"version": 1, "queues": [], "x": 1}, "unknown keys ['x']"),
    ({"version": 1, "queues": []}, "'queues'"),
])
def test_bad_documents_name_the_problem(document: dict[str, object], needle: str) -> None:
    with pytest.raises(OffsetFormatError) as info:
        SourceOffset.from_dict(document)
    assert needle in str(info.value)


def test_bad_json() -> None:
    with pytest.raises(OffsetFormatError, match="not valid JSON"):
        SourceOffset.from_json("{")
