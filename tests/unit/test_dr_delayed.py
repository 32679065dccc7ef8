"""The hand-over rule of delayed messages waiting on A (jobs/dr/delayed.py): the due time from A's levels, the
level on B never earlier than what remains, the properties B's broker needs, the marker and the loop chain.
What B's broker then does with the due time is tested in tests/unit/test_schedule.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_store.protocol.message import StoredMessage
from broker_store.protocol.properties import encode_properties
from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels, schedule_tags_code
from jobs.dr.delayed import WaitingEntry, due_ms, handover_message

STORED_MS = 1_700_000_000_000


def waiting(level: int, properties: dict[str, str], *, stored_ms: int = STORED_MS) -> WaitingEntry:
    msg = StoredMessage(topic="SCHEDULE_TOPIC_XXXX", queue_id=level - 1, queue_offset=7, commit_log_offset=0,
                        body=b"later", properties=properties, flag=3, sys_flag=0, born_timestamp=0,
                        born_host="127.0.0.1:1", store_timestamp=stored_ms, store_host="127.0.0.1:10911",
                        reconsume_times=0, prepared_tx_offset=0, body_crc=0, store_size=0)
    return WaitingEntry("src-a", level, msg)


def test_a_waiting_entry_is_handed_over_with_its_due_time_and_a_level_not_earlier() -> None:
    entry = waiting(4, {"REAL_TOPIC": "Orders", "REAL_QID": "2", "DELAY": "4", "UNIQ_KEY": "u1", "KEYS": "k",
                        "WAIT": "true"})
    assert due_ms(entry, DEFAULT_DELAY_LEVELS) == STORED_MS + 30_000  # level 4: 30 s
    out = handover_message(entry, "OrdersDR", source_cluster="A", a_levels=DEFAULT_DELAY_LEVELS,
                           b_levels=DEFAULT_DELAY_LEVELS, now_ms=STORED_MS + 12_000)
    assert out.due_ms == STORED_MS + 30_000 and out.level == 4 and not out.early  # 18 s left: level 4 (30 s)
    props = dict(out.message.properties)
    assert out.message.topic == "OrdersDR" and out.message.body == b"later" and out.message.flag == 3
    assert props == {"DELAY": str(out.level), "UNIQ_KEY": "u1", "KEYS": "k",
                     "ROCKETMQ_REPLICATOR_DUE_MS": str(STORED_MS + 30_000),
                     "ROCKETMQ_REPLICATOR_DELAYED": "A/src-a/4/7", "ROCKETMQ_REPLICATOR_SOURCE": "A"}


def test_an_entry_already_due_goes_at_the_first_level_and_is_due_at_once_on_our_brokers() -> None:
    entry = waiting(1, {"REAL_TOPIC": "Orders", "REAL_QID": "0", "DELAY": "1"})
    out = handover_message(entry, "Orders", source_cluster="A", a_levels=DEFAULT_DELAY_LEVELS,
                           b_levels=DEFAULT_DELAY_LEVELS, now_ms=STORED_MS + 60_000)
    assert out.level == 1 and not out.early
    stored_on_b = STORED_MS + 60_000
    props = encode_properties(dict(out.message.properties))
    assert schedule_tags_code(props, stored_on_b, DEFAULT_DELAY_LEVELS) == STORED_MS + 1000  # past: due at once


def test_a_shorter_table_on_b_is_reported_early() -> None:
    entry = waiting(18, {"REAL_TOPIC": "Orders", "REAL_QID": "0", "DELAY": "18"})  # 2 h on A
    out = handover_message(entry, "Orders", source_cluster="A", a_levels=DEFAULT_DELAY_LEVELS,
                           b_levels=DelayLevels.parse("1s 5s"), now_ms=STORED_MS)
    assert out.level == 2 and out.early


def test_an_entry_without_a_real_topic_is_refused() -> None:
    with pytest.raises(ValueError, match="A/src-a/3/7 names no REAL_TOPIC"):
        handover_message(waiting(3, {"DELAY": "3"}), "Orders", source_cluster="A", a_levels=DEFAULT_DELAY_LEVELS,
                         b_levels=DEFAULT_DELAY_LEVELS, now_ms=STORED_MS)


@given(level=st.integers(1, 18), elapsed=st.integers(0, 8_000_000))
def test_never_delivered_on_b_before_its_due_time_on_a(level: int, elapsed: int) -> None:
    """Property: whatever the level and the time of the hand-over, B (ours, or an Apache broker that ignores
    the due time) is due no earlier than A was, and ours exactly then (at once when it is already past)."""
    entry = waiting(level, {"REAL_TOPIC": "Orders", "REAL_QID": "0", "DELAY": str(level)})
    now = STORED_MS + elapsed
    out = handover_message(entry, "Orders", source_cluster="A", a_levels=DEFAULT_DELAY_LEVELS,
                           b_levels=DEFAULT_DELAY_LEVELS, now_ms=now)
    props = encode_properties(dict(out.message.properties))
    ours = schedule_tags_code(props, now, DEFAULT_DELAY_LEVELS)
    apache = DEFAULT_DELAY_LEVELS.deliver_timestamp(out.level, now)
    assert not out.early
    assert apache >= out.due_ms
    assert ours == out.due_ms
