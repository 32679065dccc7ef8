"""Damaged broker metadata files (docs/operations.md, "Damaged files and a full disk"): consumer and delay offsets fall
back to their ``.bak`` copy with a warning naming the file and the byte, and a broker with no intact copy refuses to
start naming each file."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.clock import ManualClock
from broker_store.durable_file import backup_path
from broker_store.protocol.errors import StoreError


def flip_digit(raw: bytes) -> bytes:
    """The offset 1234 becomes 1235: still valid JSON, a different number."""
    at = raw.index(b"1234")
    return raw[:at + 3] + b"5" + raw[at + 4:]


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda raw: raw[:len(raw) // 2],
    "garbage": lambda raw: raw[:10] + b"\x00\xff" + raw[12:],
    "digit": flip_digit,
    "empty": lambda raw: b"",
}


def offsets(path: Path) -> ConsumerOffsetManager:
    mgr = ConsumerOffsetManager(path, clock=ManualClock())
    mgr.load()
    return mgr


def delays(path: Path) -> DelayOffsetTable:
    table = DelayOffsetTable(path)
    table.load()
    return table


def written_consumer_offsets(tmp_path: Path) -> Path:
    path = tmp_path / "consumer_offsets.json"
    mgr = offsets(path)
    mgr.commit("g", "T", 0, 1234)
    mgr.commit("g", "T", 1, 7)
    mgr.persist()
    return path


def written_delay_offsets(tmp_path: Path) -> Path:
    path = tmp_path / "delayOffset.json"
    table = delays(path)
    table.update(3, 1234)
    table.persist()
    return path


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_consumer_offsets_fall_back_to_the_backup(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                          damage: str) -> None:
    path = written_consumer_offsets(tmp_path)
    assert backup_path(path).read_bytes() == path.read_bytes()
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    with caplog.at_level(logging.WARNING):
        mgr = offsets(path)
    assert mgr.query_all("g", "T") == {0: 1234, 1: 7}  # the last write, nothing lost
    assert any(str(path) in r.message and str(backup_path(path)) in r.message for r in caplog.records)
    if damage in ("truncated", "garbage"):
        assert any("damaged at byte" in r.message for r in caplog.records), caplog.text


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_delay_offsets_fall_back_to_the_backup(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                       damage: str) -> None:
    path = written_delay_offsets(tmp_path)
    path.write_bytes(DAMAGE[damage](path.read_bytes()))
    with caplog.at_level(logging.WARNING):
        table = delays(path)
    assert table.snapshot() == {3: 1234}
    assert any(str(path) in r.message for r in caplog.records)


def test_no_intact_copy_refuses_to_start_naming_both_files_and_the_byte(tmp_path: Path) -> None:
    path = written_consumer_offsets(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[:40])
    backup_path(path).write_bytes(flip_digit(raw))
    with pytest.raises(StoreError) as err:
        offsets(path)
    text = str(err.value)
    assert f"{path} is damaged at byte 40" in text and f"{backup_path(path)} is damaged" in text


def test_a_missing_main_file_is_read_from_the_backup(tmp_path: Path) -> None:
    path = written_delay_offsets(tmp_path)
    path.unlink()
    assert delays(path).snapshot() == {3: 1234}


def test_files_from_before_the_checksum_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "consumer_offsets.json"
    path.write_text('{"version": 1, "offsetTable": {"T@g": {"0": 5}}}')
    assert offsets(path).query("g", "T", 0) == 5


def test_a_newer_format_is_refused_not_replaced_by_the_backup(tmp_path: Path) -> None:
    path = written_consumer_offsets(tmp_path)
    path.write_text('{"version": 2, "offsetTable": {}}')
    with pytest.raises(StoreError, match="format version 2"):
        offsets(path)
