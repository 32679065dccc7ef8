"""Damaged store files (docs/operations.md, "Damaged files and a full disk"): each case is found at start with the file
and offset named, everything intact up to the damage is recovered, and damaged bytes are never served as a message. Real
stores in tmp_path."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from broker_store.protocol.message import STORED_HEADER_SIZE, decode_stored_messages
from broker_store.store import GetStatus, MessageStore, PutStatus, recovery
from broker_store.store.checkpoint import CHECKPOINT_FILE
from broker_store.store.files import segment_name
from tests.support.store_hooks import crash
from tests.unit.test_store_recovery import SEG, Written, check_survivors, open_store, surviving, write_messages


def segment_path(d: Path, phys: int) -> Path:
    return d / "commitlog" / segment_name(phys - phys % SEG)


def flip_body_byte(d: Path, phys: int) -> None:
    """Flip one byte in the body of the record at ``phys`` (the V1 layout's BODYCRC covers it)."""
    path = segment_path(d, phys)
    raw = bytearray(path.read_bytes())
    raw[phys % SEG + STORED_HEADER_SIZE] ^= 0x5A
    path.write_bytes(bytes(raw))


def mid_segment_record(written: Written) -> tuple[int, int, str, int, int, bytes]:
    """A record in the middle of a segment that is not the last one (records follow it in its segment)."""
    last_seg = max(w[0] for w in written) // SEG
    candidates = [w for w in written if w[0] // SEG < last_seg and SEG // 4 < w[0] % SEG < SEG // 2]
    return candidates[len(candidates) // 2]


def pull_all(store: MessageStore, topic: str, queue_id: int, offset: int = 0) -> tuple[list[int], GetStatus, str]:
    """Queue offsets read from ``offset`` until a pull does not answer FOUND, and that last answer."""
    offsets: list[int] = []
    while True:
        got = store.get_messages(topic, queue_id, offset, 8)
        if got.status is not GetStatus.FOUND:
            return offsets, got.status, got.remark
        offsets.extend(m.queue_offset for m in decode_stored_messages(got.body))
        offset = got.next_begin_offset


def test_flipped_byte_below_the_checkpoint_is_reported_at_start_and_never_served(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(21), 120)
    store.shutdown()  # clean: the checkpoint covers every record, so recovery scans none of them
    phys, _, topic, queue_id, queue_offset, _ = mid_segment_record(written)
    flip_body_byte(tmp_path, phys)
    with caplog.at_level(logging.WARNING):
        store = open_store(tmp_path)
    segment = str(segment_path(tmp_path, phys))
    assert any(segment in r.message and f"offset {phys} " in r.message and "BODYCRC" in r.message
               for r in caplog.records), caplog.text
    try:
        # kept: every other record is served as before, byte for byte
        check_survivors_except(store, written, phys)
        offsets, status, remark = pull_all(store, topic, queue_id)
        assert offsets == list(range(queue_offset))
        assert status is GetStatus.MESSAGE_DAMAGED and segment in remark and f"offset {phys} " in remark
        assert store.read_record(phys) is None
        want_after = [w[4] for w in written if (w[2], w[3]) == (topic, queue_id) and w[4] > queue_offset]
        assert pull_all(store, topic, queue_id, queue_offset + 1)[0] == want_after
    finally:
        store.shutdown()


def check_survivors_except(store: MessageStore, written: Written, damaged: int) -> None:
    for phys, _, _, _, _, record in written:
        assert store.read_record(phys) == (None if phys == damaged else record)


def test_flipped_byte_past_the_checkpoint_truncates_there_and_keeps_the_prefix(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(22), 120)
    crash(store)  # no checkpoint past the start: recovery scans everything
    (tmp_path / CHECKPOINT_FILE).unlink(missing_ok=True)
    phys = mid_segment_record(written)[0]
    flip_body_byte(tmp_path, phys)
    with caplog.at_level(logging.WARNING):
        store = open_store(tmp_path)
    try:
        assert any(str(segment_path(tmp_path, phys)) in r.message and f"offset {phys} " in r.message
                   and "BODYCRC" in r.message for r in caplog.records), caplog.text
        assert store.max_physical_offset == phys
        check_survivors(store, surviving(written, phys))
    finally:
        store.shutdown()


def test_bytes_recovery_truncates_are_copied_aside_and_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(22), 120)
    crash(store)
    (tmp_path / CHECKPOINT_FILE).unlink(missing_ok=True)
    phys = mid_segment_record(written)[0]
    flip_body_byte(tmp_path, phys)
    before = {p.name: p.read_bytes() for p in (tmp_path / "commitlog").iterdir()}
    with caplog.at_level(logging.WARNING):
        store = open_store(tmp_path)
    store.shutdown()
    seg = phys - phys % SEG
    later = sorted(int(name) for name in before if int(name) > seg)
    assert later, "the test needs records in a segment after the damaged one"
    expected = {f"{segment_name(seg)}{recovery.SET_ASIDE_SUFFIX}{phys}": before[segment_name(seg)][phys - seg:]}
    expected |= {f"{segment_name(s)}{recovery.SET_ASIDE_SUFFIX}{s}": before[segment_name(s)] for s in later}
    aside = {p.name: p.read_bytes() for p in (tmp_path / "commitlog").iterdir() if recovery.SET_ASIDE_SUFFIX in p.name}
    assert aside == {name: data.rstrip(b"\0") for name, data in expected.items()}
    line = next(r.message for r in caplog.records if "truncating the" in r.message)
    assert f"cutting bytes [{phys}, " in line, line  # the cut range in the log's order, half-open
    assert all(str(tmp_path / "commitlog" / name) in line for name in expected), line
    # the copies are not segments: the store opens again with the same records and leaves them alone
    store = open_store(tmp_path)
    try:
        assert store.max_physical_offset == phys
        check_survivors(store, surviving(written, phys))
    finally:
        store.shutdown()
    assert {p.name for p in (tmp_path / "commitlog").iterdir() if recovery.SET_ASIDE_SUFFIX in p.name} == set(aside)


@pytest.mark.parametrize("cut", ["mid-entry", "earlier-segment"])
def test_truncated_consume_queue_is_reported_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                         cut: str) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(23), 200)
    store.shutdown()
    queue_dir = tmp_path / "consumequeue" / "Rc0" / "0"
    segments = sorted(queue_dir.iterdir())
    assert len(segments) >= 2, "the test needs a queue of two segments"
    victim = segments[-1] if cut == "mid-entry" else segments[0]
    size = victim.stat().st_size
    keep = size // 2 + 7  # mid-entry: 20-byte entries
    with victim.open("r+b") as f:
        f.truncate(keep)
    with caplog.at_level(logging.WARNING):
        store = open_store(tmp_path)
    try:
        assert any(str(victim) in r.message and f"byte {keep - keep % 20}" in r.message
                   for r in caplog.records), caplog.text
        check_survivors(store, written)
        r = store.put_message("Rc0", 0, b"after", b"", tags_code=0, born_timestamp=1, born_host="127.0.0.1:1")
        assert r.status is PutStatus.PUT_OK
        assert r.queue_offset == len([w for w in written if (w[2], w[3]) == ("Rc0", 0)])
    finally:
        store.shutdown()


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_damaged_checkpoint_is_named_and_everything_is_recovered(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                damage: str) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(24), 60)
    crash(store)
    path = tmp_path / CHECKPOINT_FILE
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[20] ^= 0x01
    path.write_bytes(bytes(raw) if damage == "flip" else bytes(raw[:30]) if damage == "truncate" else b"")
    with caplog.at_level(logging.WARNING):
        store = open_store(tmp_path)
    try:
        want = {"flip": "the CRC at byte 48", "truncate": "at byte 30", "empty": "at byte 0"}[damage]
        assert any(str(path) in r.message and want in r.message for r in caplog.records), caplog.text
        check_survivors(store, written)
    finally:
        store.shutdown()


def test_a_flipped_byte_older_than_the_start_verification_is_caught_when_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path)
    written = write_messages(store, random.Random(25), 120)
    store.shutdown()
    phys, _, topic, queue_id, queue_offset, _ = mid_segment_record(written)
    flip_body_byte(tmp_path, phys)
    monkeypatch.setattr(recovery, "VERIFY_BELOW_SCAN_BYTES", 0)  # a store larger than the window
    store = open_store(tmp_path)
    try:
        offsets, status, remark = pull_all(store, topic, queue_id)
        assert offsets == list(range(queue_offset))
        assert status is GetStatus.MESSAGE_DAMAGED and str(segment_path(tmp_path, phys)) in remark
        assert store.read_record(phys) is None
        check_survivors_except(store, written, phys)
    finally:
        store.shutdown()
