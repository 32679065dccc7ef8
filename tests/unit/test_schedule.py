"""Scheduled delivery without sockets: the delay level table, the delay offset file and wire formats, the
schedule's decisions on a hand-advanced clock, the send-side placement, and the schedule service over a real
MessageStore. ``tests/integration/test_delay_messages.py`` drives the same paths through broker processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.delayed_send import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    DelayedSend,
    batch_delay_refusal,
    send_back_level,
)
from broker_store.broker.schedule import (
    RETRY_AFTER_FAILURE_MS,
    DelaySchedule,
    ScheduleService,
    delivery_of,
)
from broker_store.clock import ManualClock
from broker_store.config import BrokerConfig
from broker_store.protocol.codes import MSG_FLAG_TRANSACTION_COMMIT, MSG_FLAG_TRANSACTION_PREPARED
from broker_store.protocol.delay_offset import decode_delay_offsets
from broker_store.protocol.errors import ProtocolError, StoreError
from broker_store.protocol.message import (
    decode_stored_message,
    decode_stored_messages,
    encode_stored_message,
    tags_hash_code,
)
from broker_store.protocol.properties import decode_properties, encode_properties
from broker_store.protocol.route import loads_rocketmq
from broker_store.store import MessageStore, QueueEntry, StoreConfig, tags_code_of_properties
from broker_store.store.delay_levels import (
    DEFAULT_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    DelayLevels,
    requested_level,
    schedule_tags_code,
)
from tests.support.store_hooks import crash

NOW = 1_700_000_000.0
NOW_MS = int(NOW * 1000)
TWO_LEVELS = DelayLevels.parse("1s 2s")

# -- the level table --------------------------------------------------------------------------------


def test_default_levels_are_rocketmqs_eighteen() -> None:
    levels = DEFAULT_DELAY_LEVELS
    assert levels.max_level == 18
    assert [levels.delay_ms(n) for n in (1, 2, 3, 4, 5, 14, 15, 17, 18)] == [
        1000, 5000, 10_000, 30_000, 60_000, 600_000, 1_200_000, 3_600_000, 7_200_000]
    assert levels.cap(99) == 18 and levels.cap(3) == 3
    assert levels.deliver_timestamp(3, 5_000) == 15_000
    assert levels.delay_ms(19) == 1000  # a level outside the table: RocketMQ's 1 s fallback
    assert DelayLevels.parse("2d 0s").delays_ms == (172_800_000, 0)


@pytest.mark.parametrize("bad", ["", "1s  2s", "1x", "s", "-1s", "1.5s", " 1s", "1S"])
def test_a_bad_level_string_is_refused_naming_the_item_and_the_format(bad: str) -> None:
    with pytest.raises(ValueError, match="expected delays separated by single spaces"):
        DelayLevels.parse(bad)


def test_the_broker_setting_is_validated_when_loaded(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"message_delay_level[\s\S]*item 2 \('2w'\)"):
        BrokerConfig(broker_name="b", store_dir=tmp_path, message_delay_level="1s 2w")
    cfg = BrokerConfig(broker_name="b", store_dir=tmp_path, message_delay_level="1s 2s")
    assert cfg.delay_levels() == TWO_LEVELS
    assert BrokerConfig(broker_name="b", store_dir=tmp_path).delay_levels() == DEFAULT_DELAY_LEVELS


def test_requested_level_and_the_schedule_tags_code() -> None:
    assert requested_level(b"TAGS\x01a\x02") is None
    assert requested_level(b"TAGS\x01a\x02DELAY\x013\x02") == 3
    assert requested_level(b"XDELAY\x019\x02") is None  # another property's name ending in DELAY
    with pytest.raises(ValueError, match="not an integer delay level"):
        requested_level(b"DELAY\x01soon\x02")
    assert schedule_tags_code(b"DELAY\x012\x02", 10_000, TWO_LEVELS) == 12_000
    assert schedule_tags_code(b"DELAY\x0199\x02", 10_000, TWO_LEVELS) == 12_000  # capped at the last level
    assert schedule_tags_code(b"DELAY\x010\x02", 10_000, TWO_LEVELS) == 0
    assert schedule_tags_code(b"DELAY\x01x\x02", 10_000, TWO_LEVELS) == 0


# -- delay offsets: file and wire --------------------------------------------------------------------


def test_delay_offsets_round_trip_through_the_file_and_the_wire(tmp_path: Path) -> None:
    path = tmp_path / "config" / "delayOffset.json"
    table = DelayOffsetTable(path)
    table.load()  # no file yet
    assert table.offset(1) == 0 and not table.persist()
    table.update(1, 17)
    table.update(3, 4)
    assert table.persist() and not table.persist()
    stored = json.loads(path.read_text())
    assert stored.pop("crc32") > 0 and stored == {"version": 1, "offsetTable": {"1": 17, "3": 4}}
    again = DelayOffsetTable(path)
    again.load()
    assert again.snapshot() == {1: 17, 3: 4}

    wire = table.encode_wrapper()
    assert wire == b'{"offsetTable":{1:17,3:4}}'  # fastjson's bare numeric keys, as RocketMQ answers
    assert decode_delay_offsets(loads_rocketmq(wire), "p") == {1: 17, 3: 4}
    with pytest.raises(ProtocolError, match="GET_ALL_DELAY_OFFSET from p"):
        decode_delay_offsets({"offsetTable": {"0": 1}}, "p")
    assert not again.replace_all({1: 17, 3: 4}) and again.replace_all({1: 18})
    assert again.persist() and json.loads(path.read_text())["offsetTable"] == {"1": 18}

    path.write_text('{"version": 1, "offsetTable": {"1": "x"}}')
    fallen_back = DelayOffsetTable(path)
    fallen_back.load()  # the .bak holds the last write (broker_store.durable_file)
    assert fallen_back.snapshot() == {1: 18}
    path.with_name(path.name + ".bak").write_text('{"version": 1, "offsetTable": {"1": "x"}}')
    with pytest.raises(StoreError, match="malformed delay offset table"):
        DelayOffsetTable(path).load()


# -- the schedule's decisions ------------------------------------------------------------------------


def _entry(queue_offset: int, deliver_ms: int) -> QueueEntry:
    return QueueEntry(queue_offset, 1000 * queue_offset, 100, deliver_ms)


def test_only_the_leading_run_of_due_entries_is_delivered(tmp_path: Path) -> None:
    schedule = DelaySchedule(TWO_LEVELS, DelayOffsetTable(tmp_path / "d.json"))
    entries = [_entry(0, NOW_MS - 5), _entry(1, NOW_MS), _entry(2, NOW_MS + 700), _entry(3, NOW_MS - 1)]
    step = schedule.step(1, entries, NOW_MS)
    assert step.due == entries[:2] and step.next_due_ms == NOW_MS + 700
    for entry in step.due:
        schedule.delivered(1, entry)
    assert schedule.offsets.offset(1) == 2 and schedule.offsets.offset(2) == 0
    step = schedule.step(1, entries[2:], NOW_MS + 699)
    assert step.due == [] and step.next_due_ms == NOW_MS + 700
    step = schedule.step(1, entries[2:], NOW_MS + 700)
    assert step.due == entries[2:] and step.next_due_ms is None


def test_a_delivery_time_beyond_the_levels_delay_counts_as_now(tmp_path: Path) -> None:
    """The clock went back (or the entry's time is garbage): RocketMQ delivers rather than wait for it."""
    schedule = DelaySchedule(TWO_LEVELS, DelayOffsetTable(tmp_path / "d.json"))
    far = _entry(0, NOW_MS + 60_000)
    assert schedule.step(2, [far], NOW_MS).due == [far]
    near = _entry(0, NOW_MS + 2_000)  # exactly the level's delay ahead: waits
    assert schedule.step(2, [near], NOW_MS).due == []


def test_a_failed_put_rests_the_level_and_keeps_its_offset(tmp_path: Path) -> None:
    schedule = DelaySchedule(TWO_LEVELS, DelayOffsetTable(tmp_path / "d.json"))
    schedule.delivered(1, _entry(4, 0))
    schedule.failed(1, NOW_MS)
    assert schedule.offsets.offset(1) == 5
    assert schedule.resting(1, NOW_MS + RETRY_AFTER_FAILURE_MS - 1) and not schedule.resting(2, NOW_MS)
    assert not schedule.resting(1, NOW_MS + RETRY_AFTER_FAILURE_MS)


def test_an_offset_outside_its_queue_is_moved_into_it(tmp_path: Path) -> None:
    offsets = DelayOffsetTable(tmp_path / "d.json")
    schedule = DelaySchedule(TWO_LEVELS, offsets)
    offsets.update(1, 3)
    assert schedule.start_offset(1, 10, 20) == 10 and offsets.offset(1) == 10  # retention removed 3..9
    offsets.update(2, 50)
    assert schedule.start_offset(2, 0, 20) == 20  # a promoted replica's copy ahead of its own queue
    assert schedule.start_offset(1, 0, 20) == 10


# -- the send side -------------------------------------------------------------------------------------


def test_a_delayed_message_is_placed_in_its_levels_schedule_queue() -> None:
    send = DelayedSend(TWO_LEVELS)
    props = encode_properties({"TAGS": "t", "KEYS": "k", "DELAY": "2"})
    placed = send.place("Orders", 5, props, 0)
    assert placed.topic == SCHEDULE_TOPIC and placed.queue_id == 1
    assert decode_properties(placed.properties) == {"TAGS": "t", "KEYS": "k", "DELAY": "2",
                                                    PROPERTY_REAL_TOPIC: "Orders", PROPERTY_REAL_QUEUE_ID: "5"}
    capped = send.place("Orders", 0, encode_properties({"DELAY": "9"}), MSG_FLAG_TRANSACTION_COMMIT)
    assert capped.queue_id == 1 and decode_properties(capped.properties)["DELAY"] == "2"
    for level in ("0", "-1"):
        kept = encode_properties({"DELAY": level})
        assert send.place("Orders", 1, kept, 0) == ("Orders", 1, kept)
    prepared = encode_properties({"DELAY": "1"})
    assert send.place("Orders", 1, prepared, MSG_FLAG_TRANSACTION_PREPARED) == ("Orders", 1, prepared)
    with pytest.raises(ValueError, match="not an integer"):
        send.place("Orders", 1, b"DELAY\x01x\x02", 0)


def test_send_back_levels_and_batches() -> None:
    assert send_back_level(0, 0) == 3 and send_back_level(0, 4) == 7 and send_back_level(2, 9) == 2
    assert batch_delay_refusal("") is None and batch_delay_refusal("DELAY\x010\x02") is None
    assert "cannot be delayed" in (batch_delay_refusal("DELAY\x011\x02") or "")
    assert "not an integer" in (batch_delay_refusal("DELAY\x01x\x02") or "")


def test_delivery_clears_delay_and_keeps_the_rest() -> None:
    props = {"TAGS": "t", "KEYS": "k", "UNIQ_KEY": "U1", "DELAY": "1", "WAIT": "true", "custom": "v",
             PROPERTY_REAL_TOPIC: "Orders", PROPERTY_REAL_QUEUE_ID: "3"}
    msg = decode_stored_message(_record(props))
    target = delivery_of(msg)
    assert (target.topic, target.queue_id) == ("Orders", 3)
    assert decode_properties(target.properties) == {**{k: v for k, v in props.items() if k != "DELAY"},
                                                    "WAIT": "false"}
    with pytest.raises(ValueError, match="name no topic"):
        delivery_of(decode_stored_message(_record({"DELAY": "1"})))
    with pytest.raises(ValueError, match="RMQ_SYS_TRANS_HALF_TOPIC"):
        delivery_of(decode_stored_message(_record({PROPERTY_REAL_TOPIC: "RMQ_SYS_TRANS_HALF_TOPIC",
                                                   PROPERTY_REAL_QUEUE_ID: "0"})))


def _record(props: dict[str, str]) -> bytes:
    return encode_stored_message(topic=SCHEDULE_TOPIC.encode(), queue_id=0, queue_offset=0, physical_offset=0,
                                 body=b"b", properties=encode_properties(props))


# -- the service over a real store ---------------------------------------------------------------------


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(wall=NOW)


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[MessageStore]:
    s = _store(tmp_path, clock)
    s.start()
    yield s
    s.shutdown()


def _store(tmp_path: Path, clock: ManualClock) -> MessageStore:
    return MessageStore(StoreConfig(store_dir=tmp_path, commit_log_segment_size=1 << 20, retention_interval_ms=0),
                        store_host="127.0.0.1:10911", clock=clock, delay_levels=TWO_LEVELS)


def _put_delayed(store: MessageStore, topic: str, queue_id: int, props: dict[str, str], body: bytes) -> None:
    placed = DelayedSend(TWO_LEVELS).place(topic, queue_id, encode_properties(props), 0)
    result = store.put_message(placed.topic, placed.queue_id, body, placed.properties,
                               tags_code=tags_code_of_properties(placed.properties, tags_hash_code),
                               born_timestamp=NOW_MS - 1, born_host="127.0.0.1:5000", reconsume_times=2)
    assert result.status.name == "PUT_OK"


def test_a_schedule_entrys_tags_code_is_its_delivery_time_also_when_rebuilt(tmp_path: Path,
                                                                              clock: ManualClock) -> None:
    store = _store(tmp_path, clock)
    store.start()
    _put_delayed(store, "Orders", 0, {"DELAY": "2"}, b"x")
    entries = store.get_queue_entries(SCHEDULE_TOPIC, 1, 0, 10)
    assert [e.tags_code for e in entries] == [NOW_MS + 2000]
    crash(store)  # the ConsumeQueue is rebuilt from the CommitLog
    (tmp_path / "checkpoint").unlink(missing_ok=True)
    for cq_file in (tmp_path / "consumequeue").rglob("0*"):
        cq_file.unlink()
    again = _store(tmp_path, clock)
    again.start()
    try:
        assert again.get_queue_entries(SCHEDULE_TOPIC, 1, 0, 10) == entries
    finally:
        again.shutdown()


def test_the_service_delivers_each_level_when_due_and_not_before(tmp_path: Path, store: MessageStore,
                                                                 clock: ManualClock) -> None:
    offsets = DelayOffsetTable(tmp_path / "config" / "delayOffset.json")
    service = ScheduleService(store, DelaySchedule(TWO_LEVELS, offsets), clock=clock)
    props = {"TAGS": "tag-a", "KEYS": "k1 k2", "UNIQ_KEY": "C0FFEE", "custom": "v", "DELAY": "1"}
    _put_delayed(store, "Orders", 2, props, b"one")
    _put_delayed(store, "Orders", 2, {**props, "DELAY": "2"}, b"two")
    assert service.run_once() == 0
    clock.advance(0.999)
    assert service.run_once() == 0 and store.get_max_offset("Orders", 2) == 0
    clock.advance(0.001)
    assert service.run_once() == 1 and offsets.offset(1) == 1 and offsets.offset(2) == 0
    assert service.run_once() == 0  # nothing new: the level's offset is at its queue's end
    clock.advance(1.0)
    assert service.run_once() == 1 and offsets.offset(2) == 1
    got = store.get_messages("Orders", 2, 0, 10)
    delivered = decode_stored_messages(got.body)
    assert [m.body for m in delivered] == [b"one", b"two"]
    first = delivered[0]
    assert first.topic == "Orders" and first.queue_id == 2 and first.reconsume_times == 2
    assert first.born_timestamp == NOW_MS - 1 and first.born_host == "127.0.0.1:5000"
    assert first.store_timestamp == NOW_MS + 1000
    assert "DELAY" not in first.properties
    assert {k: first.properties[k] for k in ("TAGS", "KEYS", "UNIQ_KEY", "custom", "REAL_TOPIC", "REAL_QID",
                                             "WAIT")} == {"TAGS": "tag-a", "KEYS": "k1 k2", "UNIQ_KEY": "C0FFEE",
                                                          "custom": "v", "REAL_TOPIC": "Orders", "REAL_QID": "2",
                                                          "WAIT": "false"}
    scheduled = decode_stored_messages(store.get_messages(SCHEDULE_TOPIC, 0, 0, 1).body)[0]
    assert first.offset_msg_id != scheduled.offset_msg_id  # a new message id; the client's UNIQ_KEY is kept
    assert store.get_queue_entries("Orders", 2, 0, 1)[0].tags_code == tags_hash_code("tag-a")


def test_an_undeliverable_entry_is_skipped(tmp_path: Path, store: MessageStore, clock: ManualClock) -> None:
    offsets = DelayOffsetTable(tmp_path / "d.json")
    service = ScheduleService(store, DelaySchedule(TWO_LEVELS, offsets), clock=clock)
    store.put_message(SCHEDULE_TOPIC, 0, b"orphan", encode_properties({"DELAY": "1"}), tags_code=0,
                      born_timestamp=1, born_host="127.0.0.1:1")
    _put_delayed(store, "Orders", 0, {"DELAY": "1"}, b"ok")
    clock.advance(1.0)
    assert service.run_once() == 1 and offsets.offset(1) == 2
    assert decode_stored_messages(store.get_messages("Orders", 0, 0, 5).body)[0].body == b"ok"


def test_a_failed_put_keeps_the_entry_for_later(tmp_path: Path, store: MessageStore, clock: ManualClock) -> None:
    offsets = DelayOffsetTable(tmp_path / "d.json")
    service = ScheduleService(store, DelaySchedule(TWO_LEVELS, offsets), clock=clock)
    _put_delayed(store, "Orders", 0, {"DELAY": "1"}, b"later")
    clock.advance(1.0)
    store.config = store.config.model_copy(update={"max_message_size": 1})  # the next put fails
    assert service.run_once() == 0 and offsets.offset(1) == 0
    store.config = store.config.model_copy(update={"max_message_size": 4 * 1024 * 1024})
    assert service.run_once() == 0  # resting
    clock.advance(RETRY_AFTER_FAILURE_MS / 1000)
    assert service.run_once() == 1 and offsets.offset(1) == 1
