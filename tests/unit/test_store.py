"""Unit tests of broker_store.store: put/get, segments, filtering, status semantics, retention, flush."""

from __future__ import annotations

import asyncio
import concurrent.futures
import mmap
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_store.clock import ManualClock
from broker_store.protocol.message import (
    BLANK_MAGIC,
    decode_stored_messages,
    encode_properties,
    host_to_bytes,
    make_msg_id,
    tags_hash_code,
)
from broker_store.store import (
    FlushMode,
    GetStatus,
    MessageStore,
    PutStatus,
    StoreConfig,
    tags_code_of_properties,
)
from broker_store.store.commit_log import BLANK_RECORD
from tests.support.store_hooks import crash, flush_queues_and_checkpoint

STORE_HOST = "10.1.2.3:10911"
BORN_HOST = "192.168.0.7:50000"
SEG = 64 * 1024


def make_store(store_dir: Path, clock: ManualClock | None = None, **overrides: object) -> MessageStore:
    params: dict[str, object] = {"commit_log_segment_size": SEG, "consume_queue_segment_entries": 64,
                                 "flush_interval_ms": 50, "retention_interval_ms": 0}
    params.update(overrides)
    store = MessageStore(StoreConfig(store_dir=store_dir, **params),
                         store_host=STORE_HOST, clock=clock or ManualClock())
    store.start()
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = make_store(tmp_path)
    yield s
    s.shutdown()


def props(tags: str | None = None, **extra: str) -> bytes:
    p = dict(extra)
    if tags is not None:
        p["TAGS"] = tags
    return encode_properties(p)


def put(store: MessageStore, topic: str, queue_id: int, body: bytes, tags: str | None = None,
        **kw: int) -> int:
    r = store.put_message(topic, queue_id, body, props(tags), tags_code=tags_hash_code(tags) if tags else 0,
                          born_timestamp=kw.get("born", 1), born_host=BORN_HOST)
    assert r.status is PutStatus.PUT_OK, r
    return r.queue_offset


def pull_all(store: MessageStore, topic: str, queue_id: int, start: int = 0, batch: int = 32) -> bytes:
    out: list[bytes] = []
    offset = start
    while True:
        g = store.get_messages(topic, queue_id, offset, batch)
        if g.status is GetStatus.OFFSET_OVERFLOW_ONE:
            return b"".join(out)
        assert g.status is GetStatus.FOUND, g
        out.append(g.body)
        offset = g.next_begin_offset


# -- round trip --------------------------------------------------------------------------------------

prop_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"),
                    min_size=1, max_size=20)
message_st = st.tuples(st.binary(max_size=3000), st.dictionaries(prop_text, prop_text, max_size=4),
                       st.integers(-(2**31), 2**31 - 1))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(message_st, min_size=1, max_size=6), min_size=1, max_size=8),
       queue_id=st.integers(0, 7))
def test_put_get_round_trip_is_byte_exact(batches: list[list[tuple[bytes, dict[str, str], int]]],
                                          queue_id: int) -> None:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as d:
        store = make_store(Path(d), clock, commit_log_segment_size=16 * 1024)
        expected: list[tuple[bytes, dict[str, str], int, int, int, str]] = []
        ip, port = host_to_bytes(STORE_HOST)
        for i, batch in enumerate(batches):
            clock.advance(1)
            entries = [(body, encode_properties(p), flag, 7) for body, p, flag in batch]
            if i % 2:
                r = store.put_messages("Round%Trip", queue_id, entries, born_timestamp=1000 + i,
                                       born_host=BORN_HOST)
            else:
                r = store.put_message("Round%Trip", queue_id, entries[0][0], entries[0][1], tags_code=7,
                                      flag=entries[0][2], born_timestamp=1000 + i, born_host=BORN_HOST,
                                      reconsume_times=3)
                batch = batch[:1]
            assert r.status is PutStatus.PUT_OK
            assert r.count == len(batch) and r.queue_offset == len(expected)
            records = []
            for k, (body, p, flag) in enumerate(batch):
                expected.append((body, p, flag, 1000 + i, int(clock.time() * 1000), r.msg_ids[k]))
                records.append(store.read_record(int(r.msg_ids[k][16:], 16)))
            assert r.msg_ids[0] == make_msg_id(ip, port, r.wrote_offset)
            assert sum(len(x or b"") for x in records) == r.end_offset - r.wrote_offset
        body = pull_all(store, "Round%Trip", queue_id, batch=5)
        msgs = decode_stored_messages(body)
        assert len(msgs) == len(expected)
        for q, (m, (body_, p, flag, born, stored, msg_id)) in enumerate(zip(msgs, expected, strict=True)):
            assert (m.topic, m.queue_id, m.queue_offset) == ("Round%Trip", queue_id, q)
            assert (m.body, dict(m.properties), m.flag) == (body_, p, flag)
            assert (m.born_timestamp, m.store_timestamp) == (born, stored)
            assert (m.born_host, m.store_host) == (BORN_HOST, STORE_HOST)
            assert m.offset_msg_id == msg_id
            assert store.read_record(m.commit_log_offset) == body[sum(x.store_size for x in msgs[:q]):][
                :m.store_size]
        store.shutdown()


def test_segment_rollover_writes_blank_records(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    sizes = []
    for i in range(300):
        r = store.put_message("Roll", i % 3, bytes([i % 256]) * (700 + i * 7 % 500), b"", tags_code=0,
                              born_timestamp=i, born_host=BORN_HOST)
        assert r.status is PutStatus.PUT_OK
        assert r.wrote_offset // SEG == (r.end_offset - 1) // SEG, "a record crossed a segment end"
        sizes.append(r.end_offset - r.wrote_offset)
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert len(names) > 3
    assert names[:2] == [f"{0:020d}", f"{SEG:020d}"]
    for name in names[:-1]:
        path = tmp_path / "commitlog" / name
        assert path.stat().st_size == SEG
        data = path.read_bytes()
        pos = 0
        while True:  # walk records to the blank
            total, magic = BLANK_RECORD.unpack_from(data, pos)
            if magic == BLANK_MAGIC:
                assert total == SEG - pos
                break
            pos += total
    total_pulled = sum(len(pull_all(store, "Roll", q)) for q in range(3))
    assert total_pulled == sum(sizes)
    store.shutdown()


def test_put_validation(store: MessageStore) -> None:
    r = store.put_message("T", 0, b"x" * (4 * 1024 * 1024 + 1), b"", tags_code=0, born_timestamp=0,
                          born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    assert str(4 * 1024 * 1024 + 1) in r.remark and str(4 * 1024 * 1024) in r.remark
    r = store.put_message("T", 0, b"x", b"a" * 32768, tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.PROPERTIES_SIZE_EXCEEDED and "32768" in r.remark
    r = store.put_message("T" * 128, 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    r = store.put_message("T", 0, b"x" * SEG, b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL and "MESSAGE_SIZE_EXCEEDED" in r.remark
    r = store.put_messages("T", 0, [(b"x" * 1000, b"", 0, 0)] * 70, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL, "a batch larger than a segment is refused whole"
    r = store.put_message("../etc", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.MESSAGE_ILLEGAL
    assert store.get_max_offset("T", 0) == 0 and store.max_physical_offset == 0


def test_put_after_shutdown_is_refused(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.shutdown()
    r = store.put_message("T", 0, b"x", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE


# -- get semantics -----------------------------------------------------------------------------------

def test_tag_filtering(store: MessageStore) -> None:
    for i in range(40):
        put(store, "Tags", 0, f"m{i}".encode(), tags="A" if i % 4 == 0 else "B")
    g = store.get_messages("Tags", 0, 0, 32, tags_codes=frozenset({tags_hash_code("A")}))
    assert g.status is GetStatus.FOUND
    assert [m.body for m in decode_stored_messages(g.body)] == [f"m{i}".encode() for i in range(0, 40, 4)]
    assert g.next_begin_offset == 40
    g = store.get_messages("Tags", 0, 0, 32, tags_codes=frozenset({tags_hash_code("C")}))
    assert g.status is GetStatus.NO_MATCHED_MESSAGE and g.count == 0 and g.body == b""
    assert g.next_begin_offset == 40, "skipped entries are consumed"
    g = store.get_messages("Tags", 0, 0, 3, tags_codes=frozenset({tags_hash_code("B")}))
    assert [m.body for m in decode_stored_messages(g.body)] == [b"m1", b"m2", b"m3"]
    assert g.next_begin_offset == 4


def test_tags_code_of_properties_matches_hash() -> None:
    assert tags_code_of_properties(props("TagA", KEYS="k"), tags_hash_code) == tags_hash_code("TagA")
    assert tags_code_of_properties(props(None, XTAGS="no"), tags_hash_code) == 0
    assert tags_code_of_properties(encode_properties({"A": "TAGS", "TAGS": "z"}), tags_hash_code) == \
        tags_hash_code("z")


def test_get_status_semantics(store: MessageStore) -> None:
    g = store.get_messages("Nope", 0, 0, 32)
    assert g.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(10):
        put(store, "S", 1, b"x" * i)
    g = store.get_messages("S", 1, 10, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 10)
    assert (g.min_offset, g.max_offset) == (0, 10)
    g = store.get_messages("S", 1, 15, 32)
    assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    g = store.get_messages("S", 1, 2, 3)
    assert (g.status, g.count, g.next_begin_offset) == (GetStatus.FOUND, 3, 5)
    last = decode_stored_messages(g.body)[-1].commit_log_offset
    assert g.max_physical_offset_lag == store.max_physical_offset - last
    rec = len(store.read_record(decode_stored_messages(g.body)[0].commit_log_offset) or b"")
    g = store.get_messages("S", 1, 0, 32, max_bytes=rec * 2)
    assert g.count == 2, "max_bytes bounds the batch"
    g = store.get_messages("S", 1, 0, 32, max_bytes=1)
    assert g.count == 1, "the first record always goes out"
    assert store.get_max_offset("S", 1) == 10 and store.get_min_offset("S", 1) == 0
    assert store.get_max_offset("S", 2) == 0
    assert store.queues() == {"S": [1]}


def test_get_crosses_consume_queue_segment_in_two_pulls(store: MessageStore) -> None:
    for i in range(100):
        put(store, "CQ", 0, str(i).encode())
    g = store.get_messages("CQ", 0, 60, 32)
    assert g.count == 4 and g.next_begin_offset == 64, "a pull stops at the ConsumeQueue segment end"
    g = store.get_messages("CQ", 0, 64, 32)
    assert [m.queue_offset for m in decode_stored_messages(g.body)] == list(range(64, 96))


def test_consume_queue_tail_is_served_from_memory_then_written_by_the_flush(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_interval_ms=60_000)  # no periodic flush during the test
    try:
        for i in range(100):  # crosses a 64-entry ConsumeQueue segment
            put(store, "TL", 0, str(i).encode())
        cq = store._queues.queues[("TL", 0)]
        cq_dir = tmp_path / "consumequeue" / "TL" / "0"
        assert not cq_dir.exists() or sum(f.stat().st_size for f in cq_dir.iterdir()) == 0, \
            "entries of plain appends stay in memory until the flush"
        msgs = decode_stored_messages(pull_all(store, "TL", 0, batch=7))
        assert [int(m.body) for m in msgs] == list(range(100))
        flush_queues_and_checkpoint(store)
        assert sum(f.stat().st_size for f in cq_dir.iterdir()) == 100 * 20
        for i in range(100, 110):  # part in the files, part in memory: one read spans both
            put(store, "TL", 0, str(i).encode())
        g = store.get_messages("TL", 0, 96, 32)
        assert [int(m.body) for m in decode_stored_messages(g.body)] == list(range(96, 110))
        store.truncate_commit_log(store._queues.queues[("TL", 0)].entry(105)[0])  # type: ignore[index]
        assert cq.max_index == 105
        assert [int(m.body) for m in decode_stored_messages(pull_all(store, "TL", 0, start=90))] == \
            list(range(90, 105))
    finally:
        store.shutdown()
    reopened = make_store(tmp_path)
    try:
        msgs = decode_stored_messages(pull_all(reopened, "TL", 0))
        assert [int(m.body) for m in msgs] == list(range(105))
    finally:
        reopened.shutdown()


def test_crash_loses_only_the_in_memory_tail_and_recovery_rebuilds_it(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_interval_ms=60_000)
    for i in range(50):
        put(store, "CR", 1, str(i).encode())
    flush_queues_and_checkpoint(store)
    for i in range(50, 80):
        put(store, "CR", 1, str(i).encode())
    crash(store)  # the 30 newest entries were only in memory; their records are in the CommitLog
    reopened = make_store(tmp_path)
    try:
        msgs = decode_stored_messages(pull_all(reopened, "CR", 1))
        assert [int(m.body) for m in msgs] == list(range(80))
    finally:
        reopened.shutdown()


def test_interleaved_queues_read_back_in_order(store: MessageStore) -> None:
    for i in range(200):
        put(store, "IL", i % 5, f"{i}".encode())
    for q in range(5):
        msgs = decode_stored_messages(pull_all(store, "IL", q, batch=7))
        assert [int(m.body) for m in msgs] == list(range(q, 200, 5))


# -- retention ---------------------------------------------------------------------------------------

def test_retention_by_age_moves_min_offset(tmp_path: Path) -> None:
    clock = ManualClock()
    store = make_store(tmp_path, clock, file_reserved_hours=0.5)
    for i in range(400):
        clock.advance(10)  # 400 messages over 4000 s
        put(store, "Ret", i % 2, b"y" * 900)
    segs_before = sorted(os.listdir(tmp_path / "commitlog"))
    assert store.delete_expired(int(clock.time() * 1000) - 4_000_000) == 0, "nothing is old enough yet"
    freed = store.delete_expired(int(clock.time() * 1000))
    segs_after = sorted(os.listdir(tmp_path / "commitlog"))
    assert freed >= (len(segs_before) - len(segs_after)) * SEG > 0
    assert store.min_physical_offset == int(segs_after[0])
    for q in range(2):
        lo = store.get_min_offset("Ret", q)
        assert lo > 0
        g = store.get_messages("Ret", q, lo - 1, 32)
        assert (g.status, g.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, lo)
        first = decode_stored_messages(store.get_messages("Ret", q, lo, 1).body)[0]
        assert first.queue_offset == lo and first.commit_log_offset >= store.min_physical_offset
        # the first remaining segment's messages are all younger than the reserve time
        assert first.store_timestamp > int(clock.time() * 1000) - 1_800_000 - SEG // 900 * 10_000
        cq_files = sorted(os.listdir(tmp_path / "consumequeue" / "Ret" / str(q)))
        assert int(cq_files[0]) // 20 <= lo < int(cq_files[0]) // 20 + 64
    assert store.get_max_offset("Ret", 0) == 200
    # everything expired: the active segment stays
    clock.advance(10**6)
    store.delete_expired()
    assert len(os.listdir(tmp_path / "commitlog")) == 1
    for q in range(2):
        assert store.get_min_offset("Ret", q) <= store.get_max_offset("Ret", q) == 200
    store.shutdown()
    store = make_store(tmp_path, clock)
    assert store.get_max_offset("Ret", 1) == 200, "max offset survives retention and restart"
    store.shutdown()


def test_retention_by_size_cap(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_commit_log_bytes=3 * SEG)
    for _ in range(600):
        put(store, "Cap", 0, b"z" * 1000)
    store.delete_expired()
    size = sum(p.stat().st_size for p in (tmp_path / "commitlog").iterdir())
    assert size <= 3 * SEG
    lo = store.get_min_offset("Cap", 0)
    assert lo > 0
    assert decode_stored_messages(store.get_messages("Cap", 0, lo, 1).body)[0].queue_offset == lo
    store.shutdown()


def test_stale_entries_below_commit_log_min_are_skipped(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_commit_log_bytes=2 * SEG)
    for _ in range(300):
        put(store, "Rm", 0, b"r" * 1000)
    store.delete_expired()
    lo = store.get_min_offset("Rm", 0)
    cq_first = int(sorted(os.listdir(tmp_path / "consumequeue" / "Rm" / "0"))[0]) // 20
    assert cq_first < lo, "the first ConsumeQueue segment still holds entries of deleted records"
    # what a pull at a stale offset inside that window would scan (get_messages itself refuses it)
    cq = store._queues.queues[("Rm", 0)]
    g = store._reader._read_queue(cq, cq_first, 4, None, 1 << 20, lo, 300)
    assert g.status is GetStatus.FOUND
    assert decode_stored_messages(g.body)[0].queue_offset == lo
    g = store._reader._read_queue(cq, cq_first, 4, frozenset({99}), 1 << 20, lo, 300)
    assert g.status is GetStatus.NO_MATCHED_MESSAGE
    store.shutdown()


# -- timestamps --------------------------------------------------------------------------------------

def test_search_offset_by_timestamp(store: MessageStore, tmp_path: Path) -> None:
    clock = ManualClock(wall=1000.0)
    s = make_store(tmp_path / "ts", clock)
    for i in range(50):
        clock.set_time(1000.0 + i * 2)  # store timestamps 1_000_000, 1_002_000, ...
        put(s, "Ts", 0, b"t")
    assert s.search_offset_by_timestamp("Ts", 0, 0) == 0
    assert s.search_offset_by_timestamp("Ts", 0, 1_000_000) == 0
    assert s.search_offset_by_timestamp("Ts", 0, 1_000_001) == 1
    assert s.search_offset_by_timestamp("Ts", 0, 1_020_000) == 10
    assert s.search_offset_by_timestamp("Ts", 0, 9_999_999) == 50
    assert s.search_offset_by_timestamp("None", 0, 5) == 0
    assert s.get_store_timestamp("Ts", 0, 7) == 1_014_000
    assert s.get_store_timestamp("Ts", 0, 50) is None
    s.shutdown()


# -- flush -------------------------------------------------------------------------------------------

def test_sync_flush_group_commit(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, flush_interval_ms=10_000)

    async def send_all() -> list[bool]:
        results = []
        for i in range(50):
            r = store.put_messages("Sync", i % 2, [(b"s" * 100, b"", 0, 0)] * 4, born_timestamp=0,
                                   born_host=BORN_HOST)
            results.append(asyncio.wrap_future(store.wait_for_flush(r.end_offset)))
        return list(await asyncio.gather(*results))

    assert all(asyncio.run(send_all()))
    assert store.flushed_physical_offset == store.max_physical_offset
    assert store.wait_for_flush(store.max_physical_offset).result(timeout=1) is True
    store.shutdown()


def test_wait_for_flush_times_out_when_the_clock_passes_the_deadline(tmp_path: Path) -> None:
    """No sleeping: the flush deadline is on the store's clock, and the test moves it."""
    clock = ManualClock()
    store = make_store(tmp_path, clock, flush_mode=FlushMode.SYNC_FLUSH, flush_timeout_ms=5000)
    put(store, "F", 0, b"f")
    waiting = store.wait_for_flush(store.max_physical_offset + 1000)  # never written: only the deadline ends it
    r = store.put_message("F", 0, b"g", b"", tags_code=0, born_timestamp=0, born_host=BORN_HOST)
    assert r.durable.result(timeout=5) is PutStatus.PUT_OK  # the flush thread runs, unconcerned by the clock
    clock.advance(4.9)
    with pytest.raises(concurrent.futures.TimeoutError):
        waiting.result(timeout=0.2)
    clock.advance(0.2)
    assert waiting.result(timeout=5) is False
    store.shutdown()


def test_async_flush_catches_up(tmp_path: Path) -> None:
    store = make_store(tmp_path, flush_interval_ms=20)
    put(store, "A", 0, b"a")
    assert store.wait_for_flush(store.max_physical_offset).result(timeout=5) is True
    store.shutdown()


# -- restart, listeners, fds -------------------------------------------------------------------------

def test_restart_keeps_everything(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for i in range(300):
        put(store, f"R{i % 3}", i % 4, os.urandom(i % 700))
    before = {(t, q): pull_all(store, t, q) for t, qs in store.queues().items() for q in qs}
    max_phys = store.max_physical_offset
    store.shutdown()
    store = make_store(tmp_path)
    assert store.max_physical_offset == max_phys
    after = {(t, q): pull_all(store, t, q) for t, qs in store.queues().items() for q in qs}
    assert after == before
    q0 = store.get_max_offset("R0", 0)
    assert put(store, "R0", 0, b"again") == q0
    store.shutdown()


def test_arrival_listener(store: MessageStore) -> None:
    seen: list[tuple[str, int, int]] = []
    store.add_arrival_listener(lambda t, q, m: seen.append((t, q, m)))
    put(store, "L", 3, b"1")
    store.put_messages("L", 3, [(b"a", b"", 0, 0)] * 3, born_timestamp=0, born_host=BORN_HOST)
    assert seen == [("L", 3, 1), ("L", 3, 4)]


def test_open_files_are_bounded(tmp_path: Path) -> None:
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.exists():
        pytest.skip("needs /proc")

    def open_in_store() -> int:
        n = 0
        for name in os.listdir(fd_dir):
            try:
                n += os.readlink(fd_dir / name).startswith(str(tmp_path))
            except OSError:
                pass  # closed meanwhile
        return n

    store = make_store(tmp_path, max_open_files=8, flush_interval_ms=60_000)
    peak = 0
    for i in range(500):
        put(store, "Fd", i % 50, b"x" * 500)
        peak = max(peak, open_in_store()) if i % 25 == 0 else peak
    for q in range(50):
        assert len(decode_stored_messages(pull_all(store, "Fd", q))) == 10
        peak = max(peak, open_in_store())
    assert 0 < peak <= 8
    store.shutdown()
    assert open_in_store() == 0


# -- replication support -----------------------------------------------------------------------------

def test_log_shipping_to_replica_and_truncation(tmp_path: Path) -> None:
    primary = make_store(tmp_path / "p")
    replica = make_store(tmp_path / "r")
    arrived: list[tuple[str, int, int]] = []
    replica.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    for i in range(250):
        put(primary, "Ship", i % 3, os.urandom(300 + i % 900), tags="T" if i % 2 else None)
    chunk = 777  # ships partial records
    while replica.max_physical_offset < primary.max_physical_offset:
        data = primary.read_commit_log(replica.max_physical_offset, chunk)
        assert data
        replica.append_commit_log(replica.max_physical_offset, data)
    assert replica.dispatched_physical_offset == primary.max_physical_offset
    for q in range(3):
        assert pull_all(replica, "Ship", q) == pull_all(primary, "Ship", q)
        g = replica.get_messages("Ship", q, 0, 32, tags_codes=frozenset({tags_hash_code("T")}))
        p = primary.get_messages("Ship", q, 0, 32, tags_codes=frozenset({tags_hash_code("T")}))
        assert g.body == p.body
    assert arrived[-1][2] == replica.get_max_offset(arrived[-1][0], arrived[-1][1])
    with pytest.raises(Exception, match="max offset"):
        replica.append_commit_log(5, b"x")
    # truncate at the record holding queue 1, offset 40
    cut = decode_stored_messages(replica.get_messages("Ship", 1, 40, 1).body)[0].commit_log_offset
    with pytest.raises(Exception, match="record boundary"):
        replica.truncate_commit_log(cut + 1)
    replica.truncate_commit_log(cut)
    assert replica.max_physical_offset == cut
    assert replica.get_max_offset("Ship", 1) == 40
    for q in range(3):
        msgs = decode_stored_messages(pull_all(replica, "Ship", q))
        assert all(m.commit_log_offset < cut for m in msgs)
    # follow again from the cut
    while replica.max_physical_offset < primary.max_physical_offset:
        replica.append_commit_log(replica.max_physical_offset,
                                  primary.read_commit_log(replica.max_physical_offset, 5000))
    for q in range(3):
        assert pull_all(replica, "Ship", q) == pull_all(primary, "Ship", q)
    replica.shutdown()
    replica = make_store(tmp_path / "r")
    for q in range(3):
        assert pull_all(replica, "Ship", q) == pull_all(primary, "Ship", q)
    replica.shutdown()
    primary.shutdown()


def resident_pages(path: Path, length: int) -> int:
    """Pages of the first ``length`` bytes of ``path`` that are in the page cache (mincore(2))."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), length, access=mmap.ACCESS_COPY) as m:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        try:
            if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(length), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del addr
    return sum(v & 1 for v in vec)


def test_segments_are_full_size_and_the_warmer_runs_ahead_of_the_writer(tmp_path: Path) -> None:
    """A segment file has its full size from its first record (the tail a hole of zeros) and the warmer
    brings the pages past the write position into the page cache; a restart finds the records' end, not
    the file's, and truncation zeroes what it cuts."""
    seg_file = tmp_path / "commitlog" / f"{0:020d}"
    clock = ManualClock()
    store = make_store(tmp_path, clock, commit_log_warm_ahead=SEG // 2)
    first = store.put_message("Warm", 0, b"a" * 100, props(), tags_code=0, born_timestamp=1, born_host=BORN_HOST)
    second = store.put_message("Warm", 0, b"b" * 100, props(), tags_code=0, born_timestamp=1, born_host=BORN_HOST)
    assert first.status is PutStatus.PUT_OK and second.status is PutStatus.PUT_OK
    assert seg_file.stat().st_size == SEG
    end = store.max_physical_offset
    deadline = time.monotonic() + 10
    while resident_pages(seg_file, end + SEG // 2) * mmap.PAGESIZE < end + SEG // 2:
        assert time.monotonic() < deadline, "the warmer did not populate the page cache ahead of the writer"
        clock.advance(0.05)  # the warmer's idle polls are on the store's clock
        time.sleep(0.02)
    store.shutdown()

    store = make_store(tmp_path)
    assert store.max_physical_offset == end and store.get_max_offset("Warm", 0) == 2
    store.truncate_commit_log(second.wrote_offset)
    assert seg_file.stat().st_size == SEG
    assert seg_file.read_bytes()[second.wrote_offset:] == bytes(SEG - second.wrote_offset)
    assert store.get_max_offset("Warm", 0) == 1
    store.shutdown()


def test_without_the_warmer_the_hole_stays_out_of_the_page_cache(tmp_path: Path) -> None:
    store = make_store(tmp_path, commit_log_warm_ahead=0)
    assert store.put_message("Cold", 0, b"c" * 100, props(), tags_code=0, born_timestamp=1,
                             born_host=BORN_HOST).status is PutStatus.PUT_OK
    time.sleep(0.2)
    seg_file = tmp_path / "commitlog" / f"{0:020d}"
    assert seg_file.stat().st_size == SEG
    assert resident_pages(seg_file, SEG) * mmap.PAGESIZE < SEG // 2
    store.shutdown()
