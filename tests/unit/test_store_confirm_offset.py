"""The store's confirm offset (store.dispatch): checkpoint versions, following vs held, what consumers see.

A store that follows the max offset (the default, static groups) behaves as before: every put is visible
at once. A held store (controller mode) indexes only records that end at or below its confirm offset,
persists it in the checkpoint and resumes from it after a restart or a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_store.protocol.errors import ConfigError, StoreError
from broker_store.protocol.message import decode_stored_messages
from broker_store.store import MessageStore, PutStatus, StoreConfig
from broker_store.store.checkpoint import CHECKPOINT_FILE, load_checkpoint
from tests.support.store_hooks import crash
from tests.unit.test_store_checkpoint import v1_bytes

HOST = "127.0.0.1:10911"
BORN = "127.0.0.1:4000"
SEG = 16 * 1024

Record = tuple[int, int, str, int, int]  # (physical offset, end, topic, queue id, queue offset)


def open_store(d: Path, *, hold: bool = False, **kw: object) -> MessageStore:
    params: dict[str, object] = {"commit_log_segment_size": SEG, "consume_queue_segment_entries": 32,
                                 "flush_interval_ms": 60_000, "retention_interval_ms": 0,
                                 "commit_log_warm_ahead": 0}
    params.update(kw)
    store = MessageStore(StoreConfig(store_dir=d, **params), store_host=HOST,
                         hold_confirm_offset=hold)
    store.start()
    return store


def put(store: MessageStore, topic: str, queue_id: int, size: int = 200, count: int = 1) -> list[Record]:
    entries = [(bytes([i % 251]) * size, b"", 0, 0) for i in range(count)]
    r = store.put_messages(topic, queue_id, entries, born_timestamp=1, born_host=BORN)
    assert r.status is PutStatus.PUT_OK, r
    out: list[Record] = []
    for k, msg_id in enumerate(r.msg_ids):
        phys = int(msg_id[16:], 16)
        record = store.read_record(phys)
        assert record is not None
        out.append((phys, phys + len(record), topic, queue_id, r.queue_offset + k))
    return out


def visible(store: MessageStore) -> list[Record]:
    """Every record consumers can reach through the ConsumeQueues, with the queue offset it is served at."""
    out: list[Record] = []
    for topic, queue_ids in store.queues().items():
        for queue_id in queue_ids:
            offset = store.get_min_offset(topic, queue_id)
            while True:
                g = store.get_messages(topic, queue_id, offset, 64)
                if not g.count:
                    break
                for i, m in enumerate(decode_stored_messages(g.body)):
                    assert m.queue_offset == offset + i  # served where its record says it belongs
                    out.append((m.commit_log_offset, m.commit_log_offset + m.store_size, topic, queue_id,
                                m.queue_offset))
                offset = g.next_begin_offset
    return sorted(out)


def confirmed(records: list[Record], confirm: int) -> list[Record]:
    return sorted(r for r in records if r[1] <= confirm)


# -- following the max offset (static groups) -------------------------------------------------------------

def test_following_store_shows_every_put_at_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    arrived: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    records = put(store, "T", 0) + put(store, "T", 1, count=3)
    assert store.confirm_offset == store.max_physical_offset == records[-1][1]
    assert visible(store) == records and arrived == [("T", 0, 1), ("T", 1, 3)]
    store.advance_confirm_offset(0)  # no effect while following
    assert store.confirm_offset == store.max_physical_offset
    store.shutdown()
    cp = load_checkpoint(tmp_path)
    assert cp is not None and cp.confirm_offset == records[-1][1]


def test_a_version_1_store_opens_with_everything_visible(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    records = put(store, "T", 0, count=5)
    store.shutdown()
    cp = load_checkpoint(tmp_path)
    assert cp is not None
    (tmp_path / CHECKPOINT_FILE).write_bytes(v1_bytes(cp.commit_log_flushed, cp.dispatch_flushed, 0, 0))
    for hold in (False, True):  # static users, and the first start in controller mode
        store = open_store(tmp_path, hold=hold)
        assert store.confirm_offset == records[-1][1] and visible(store) == records
        store.shutdown()


# -- held (controller mode) -------------------------------------------------------------------------------

def test_held_store_indexes_only_confirmed_records(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    arrived: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    records = put(store, "T", 0) + put(store, "T", 0, count=2) + put(store, "U", 3) + put(store, "T", 0)
    assert [r[4] for r in records] == [0, 1, 2, 0, 3]  # queue offsets count the unconfirmed records
    assert store.confirm_offset == 0 and visible(store) == [] and arrived == []
    assert store.get_max_offset("T", 0) == 0 and store.queues() == {}
    store.advance_confirm_offset(records[1][1] + 10)  # mid-record: only whole records below it
    assert visible(store) == records[:2] and arrived == [("T", 0, 2)]
    store.advance_confirm_offset(records[0][1])  # never lowers
    assert store.confirm_offset == records[1][1] + 10
    store.advance_confirm_offset(1 << 40)  # clamped to the max offset
    assert store.confirm_offset == store.max_physical_offset and visible(store) == sorted(records)
    later = put(store, "T", 0)
    assert later[0][4] == 4 and visible(store) == sorted(records)
    store.shutdown()


def test_set_confirm_offset_switches_mode_and_persists(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    records = put(store, "T", 0, count=4)
    store.set_confirm_offset(records[1][1])
    assert visible(store) == records[:2]
    assert load_checkpoint(tmp_path).confirm_offset == records[1][1]  # type: ignore[union-attr]
    with pytest.raises(StoreError, match="below the indexed offset"):
        store.set_confirm_offset(records[0][1])
    store.set_confirm_offset(None)  # follow the max offset: everything, and later puts at once
    more = put(store, "T", 0)
    assert visible(store) == records + more and store.confirm_offset == store.max_physical_offset
    store.set_confirm_offset(store.max_physical_offset)  # hold again (a fenced primary)
    held = put(store, "T", 0)
    assert held[0][4] == 5 and visible(store) == records + more
    store.shutdown()


def test_held_confirm_offset_survives_restart_and_crash(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    records = put(store, "T", 0, count=6)
    store.advance_confirm_offset(records[2][1])
    store.shutdown()
    store = open_store(tmp_path, hold=True)
    assert store.confirm_offset == records[2][1] and visible(store) == records[:3]
    assert store.max_physical_offset == records[-1][1]  # unconfirmed records are kept, not dropped
    assert put(store, "T", 0)[0][4] == 6  # and counted
    store.advance_confirm_offset(records[4][1])  # not checkpointed before the crash
    crash(store)
    store = open_store(tmp_path, hold=True)
    # the visible end may step back to the last checkpoint's confirm offset, never forward
    assert store.confirm_offset == records[2][1] and visible(store) == records[:3]
    store.shutdown()
    store = open_store(tmp_path)  # opened static again: follows the max offset, all visible
    assert len(visible(store)) == 7
    store.shutdown()


def test_held_store_without_a_checkpoint_shows_nothing_unproven(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    records = put(store, "T", 0, count=3)
    store.set_confirm_offset(store.max_physical_offset)
    store.shutdown()
    (tmp_path / CHECKPOINT_FILE).unlink()
    store = open_store(tmp_path, hold=True)
    assert store.confirm_offset == 0 and visible(store) == []
    store.advance_confirm_offset(records[-1][1])
    assert visible(store) == records
    store.shutdown()


def test_read_uncommitted_serves_past_the_held_confirm_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True, read_uncommitted=True)
    records = put(store, "T", 0, count=3)
    assert store.confirm_offset == 0 and visible(store) == records
    store.advance_confirm_offset(records[0][1])
    store.shutdown()
    store = open_store(tmp_path, hold=True, read_uncommitted=True)
    assert store.confirm_offset == records[0][1] and visible(store) == records
    store.shutdown()
    with pytest.raises(ConfigError, match="read_uncommitted"):
        StoreConfig(store_dir=tmp_path, read_uncommitted="maybe")


def test_held_replica_indexes_what_its_primary_confirmed(tmp_path: Path) -> None:
    primary = open_store(tmp_path / "p")
    replica = open_store(tmp_path / "r", hold=True)
    records = put(primary, "T", 0, count=5) + put(primary, "T", 1, count=2)
    while replica.max_physical_offset < primary.max_physical_offset:
        replica.append_commit_log(replica.max_physical_offset,
                                  primary.read_commit_log(replica.max_physical_offset, 333))
    assert visible(replica) == []
    replica.advance_confirm_offset(records[3][1])
    assert visible(replica) == records[:4]
    # promoted while records past the confirm offset are unindexed: a put counts them
    assert put(replica, "T", 0)[0][4] == 5 and put(replica, "T", 1)[0][4] == 2
    replica.set_confirm_offset(replica.max_physical_offset)
    assert [r[4] for r in visible(replica) if r[3] == 0] == [0, 1, 2, 3, 4, 5]
    primary.shutdown()
    replica.shutdown()


def test_truncation_lowers_the_confirm_offset_and_recounts_queue_offsets(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    records = put(store, "T", 0, count=2) + put(store, "T", 0, count=3)
    store.advance_confirm_offset(records[3][1])
    store.truncate_commit_log(records[2][0])
    assert store.confirm_offset == records[2][0] and visible(store) == records[:2]
    assert load_checkpoint(tmp_path).confirm_offset == records[2][0]  # type: ignore[union-attr]
    assert put(store, "T", 0)[0][4] == 2
    store.truncate_commit_log(records[1][1])
    assert put(store, "T", 0)[0][4] == 2  # the unindexed record is gone with its queue offset
    store.shutdown()


def test_a_restarted_log_confirms_its_new_start(tmp_path: Path) -> None:
    primary = open_store(tmp_path / "p")
    records = [r for _ in range(12) for r in put(primary, "T", 0, size=3000)]  # past the second segment
    replica = open_store(tmp_path / "r", hold=True)
    put(replica, "T", 0, count=2)  # a log entirely below the primary's min offset after retention
    start = 2 * SEG
    replica.restart_commit_log(start)
    assert replica.confirm_offset == start == replica.min_physical_offset == replica.max_physical_offset
    while replica.max_physical_offset < primary.max_physical_offset:
        replica.append_commit_log(replica.max_physical_offset,
                                  primary.read_commit_log(replica.max_physical_offset, 5000))
    assert visible(replica) == []
    replica.advance_confirm_offset(primary.max_physical_offset)
    assert visible(replica) == [r for r in records if r[0] >= start]
    primary.shutdown()
    replica.shutdown()


# -- the rule, for any sequence of operations ---------------------------------------------------------------

Operation = tuple[str, int, int, int]
operations = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2), st.integers(1, 3), st.integers(50, 3000)),
    st.tuples(st.just("advance"), st.integers(0, 120), st.just(0), st.just(0)),  # percent of the max offset
    st.tuples(st.just("hold"), st.integers(0, 1), st.just(0), st.just(0)),
    st.tuples(st.just("restart"), st.integers(0, 1), st.just(0), st.just(0)),  # 1 = clean, 0 = crash
), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations, st.booleans())
def test_consumers_see_exactly_the_confirmed_records(tmp_path_factory: pytest.TempPathFactory,
                                                    ops: list[Operation], hold: bool) -> None:
    d = tmp_path_factory.mktemp("store")
    store = open_store(d, hold=hold)
    records: list[Record] = []
    for kind, a, b, c in ops:
        before = store.confirm_offset
        if kind == "put":
            records += put(store, "T", a, size=c, count=b)
        elif kind == "advance":
            store.advance_confirm_offset(store.max_physical_offset * a // 100)
        elif kind == "hold":
            store.set_confirm_offset(store.confirm_offset if a else None)
        else:
            if a:
                store.shutdown()
            else:
                crash(store)
            store = open_store(d, hold=hold)
        confirm = store.confirm_offset
        assert confirm <= store.max_physical_offset
        if kind == "restart" and not hold:  # built following: it follows again, whatever was held at runtime
            assert confirm == store.max_physical_offset
        elif kind == "restart":  # resumes where it was; a crash may step back (last checkpoint), never forward
            assert confirm == before if a else confirm <= before
        else:
            assert confirm >= before
        assert visible(store) == confirmed(records, confirm)
        by_queue: dict[int, list[int]] = {}
        for r in sorted(records):
            by_queue.setdefault(r[3], []).append(r[4])
        assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values())
    store.shutdown()
