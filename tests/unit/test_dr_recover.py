"""The pure parts of ``jobs.dr.recover``: the divergent range of a queue, the read-back of offset-map runs, and
the recovery property on a forwarded entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import BATCH_HEADER, MAX_PROPERTIES_LENGTH
from broker_store.protocol.properties import PROPERTY_REPLICATOR_RECOVERY, decode_properties
from connectors.replication.forwarding import encode_entry, entry_body_length, with_entry_property
from connectors.replication.records import OffsetMapping
from connectors.replication.source_position import format_position
from jobs.dr.recover import check_runs, mapping_from_json, mapping_to_json, plan_queue, quarantine_topic

SOURCE = MessageQueue("Orders", "a", 1)
TARGET = MessageQueue("Orders", "b", 2)


@given(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000))
def test_the_divergent_range_is_what_a_holds_beyond_the_replicated_point(replicated: int, first: int,
                                                                          end: int) -> None:
    first = min(first, end)
    plan = plan_queue(replicated, first, end)
    if end <= replicated:
        assert plan.divergent == 0 and plan.lost_to_retention == 0
        return
    assert plan.end == end
    assert plan.start == max(replicated, first)
    # every offset in [replicated, end) is either recovered or counted as removed by retention
    assert plan.divergent + plan.lost_to_retention == end - replicated


def run(source_first: int, target_first: int, n: int) -> OffsetMapping:
    return OffsetMapping(SOURCE.topic, SOURCE.broker_name, SOURCE.queue_id, source_first, source_first + n - 1,
                         TARGET.topic, TARGET.broker_name, TARGET.queue_id, target_first, target_first + n - 1, n)


def reader(stored: Mapping[int, str | None]) -> Callable[[MessageQueue, int, int], Mapping[int, str | None]]:
    def read(queue: MessageQueue, first: int, last: int) -> Mapping[int, str | None]:
        assert queue == TARGET
        return {o: p for o, p in stored.items() if first <= o <= last}
    return read


def test_check_runs_counts_each_offset_holding_its_position() -> None:
    stored = {10 + i: format_position("src", SOURCE, 5 + i) for i in range(4)}
    assert check_runs(SOURCE, "src", [run(5, 10, 4)], reader(stored)) == (4, [])


def test_check_runs_names_a_missing_or_wrong_message() -> None:
    stored = {10: format_position("src", SOURCE, 5), 12: format_position("other", SOURCE, 7)}
    verified, problems = check_runs(SOURCE, "src", [run(5, 10, 3)], reader(stored))
    assert verified == 1
    assert len(problems) == 2 and "Orders/b/2@11" in problems[0] and "Orders/a/1@6" in problems[0]


def test_offset_mappings_round_trip_through_the_journal() -> None:
    m = run(5, 10, 3)
    assert mapping_from_json(mapping_to_json(m)) == m


def test_quarantine_topic_names() -> None:
    assert quarantine_topic("Orders") == "Orders_DR_RECOVERED"


def test_the_recovery_property_is_appended_and_the_rest_kept_byte_exact() -> None:
    entry = encode_entry(b"\x00body\xff", b"KEYS\x01k\x02", 7)
    marked = with_entry_property(entry, PROPERTY_REPLICATOR_RECOVERY, "op1")
    assert entry_body_length(marked) == 6
    assert marked[BATCH_HEADER.size:BATCH_HEADER.size + 6] == b"\x00body\xff"
    assert marked[12:16] == entry[12:16]  # flag
    props = decode_properties(marked[BATCH_HEADER.size + 6 + 2:])
    assert props == {"KEYS": "k", PROPERTY_REPLICATOR_RECOVERY: "op1"}
    assert int.from_bytes(marked[:4], "big") == len(marked)


def test_a_recovery_property_past_the_limit_is_refused() -> None:
    entry = encode_entry(b"b", b"X\x01" + b"v" * (MAX_PROPERTIES_LENGTH - 4) + b"\x02", 0)
    with pytest.raises(ProtocolError):
        with_entry_property(entry, PROPERTY_REPLICATOR_RECOVERY, "op1")
