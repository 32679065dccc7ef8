"""The epoch file (store.epoch_file): RocketMQ's layout, crash-safe writes, corruption and .bak fallback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_store.protocol.errors import CorruptRecordError, StoreError
from broker_store.store.epoch_cache import EpochCache, EpochEntry
from broker_store.store.epoch_file import (
    EPOCH_FILE,
    EPOCH_FILE_BACKUP,
    EpochFile,
    decode_epoch_file,
    encode_epoch_file,
    load_epoch_file,
    write_epoch_file,
)

E = EpochEntry
ROCKETMQ_EXAMPLE = b"2\n773307083\n7-7000\n8-8000\n"  # from the doc comment of RocketMQ's CheckpointFile


def test_rocketmq_layout_both_ways() -> None:
    c = EpochCache([E(7, 7000), E(8, 8000)])
    assert encode_epoch_file(c) == ROCKETMQ_EXAMPLE
    assert decode_epoch_file(ROCKETMQ_EXAMPLE) == c
    assert decode_epoch_file(ROCKETMQ_EXAMPLE.rstrip(b"\n")) == c  # no final newline
    assert encode_epoch_file(EpochCache()) == b"0\n0\n"
    assert decode_epoch_file(b"0\n0\n") == EpochCache()


def test_a_zero_checksum_is_not_checked() -> None:
    assert decode_epoch_file(b"2\n0\n7-7000\n8-8000\n") == EpochCache([E(7, 7000), E(8, 8000)])


@pytest.mark.parametrize(("raw", "problem"), [
    (b"", "count and a checksum"),
    (b"2\n", "count and a checksum"),
    (b"x\n0\n", "count and a checksum"),
    (b"3\n773307083\n7-7000\n8-8000\n", "count line says 3"),
    (b"2\n773307084\n7-7000\n8-8000\n", "checksum 773307084"),
    (b"2\n773307083\n7-7000\n8-8001\n", "checksum"),
    (b"1\n0\n7:7000\n", "not <epoch>-<startOffset>"),
    (b"1\n0\n-7-7000\n", "not <epoch>-<startOffset>"),
    (b"1\n0\n 7-7000\n", "not <epoch>-<startOffset>"),
    (b"2\n0\n8-7000\n7-8000\n", "out of order"),
    (b"2\n0\n7-7000\n8-7000\n", "out of order"),
    (b"1\n0\n\xff-1\n", "not ASCII"),
])
def test_corrupt_files_are_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecordError, match=problem):
        decode_epoch_file(raw)


def _cache_of_steps(steps: list[tuple[int, int]]) -> EpochCache:
    """Epochs and start offsets growing by the drawn steps (the first entry starts at 0)."""
    return EpochCache(E(sum(s[0] for s in steps[:i + 1]), sum(s[1] for s in steps[:i])) for i in range(len(steps)))


entries_strategy = st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 10**12)), max_size=8).map(_cache_of_steps)


@given(entries_strategy)
def test_round_trip(c: EpochCache) -> None:
    assert decode_epoch_file(encode_epoch_file(c)) == c


def test_write_then_load_writes_both_copies(tmp_path: Path) -> None:
    c = EpochCache([E(1, 0), E(3, 4096)])
    write_epoch_file(tmp_path, c)
    assert (tmp_path / EPOCH_FILE).read_bytes() == (tmp_path / EPOCH_FILE_BACKUP).read_bytes() == encode_epoch_file(c)
    assert sorted(os.listdir(tmp_path)) == [EPOCH_FILE, EPOCH_FILE_BACKUP]  # no temp file left
    assert load_epoch_file(tmp_path) == c


def test_no_files_is_an_empty_cache(tmp_path: Path) -> None:
    assert load_epoch_file(tmp_path) == EpochCache()


@pytest.mark.parametrize("damage", ["missing", "corrupt", "empty"])
def test_backup_used_when_the_main_file_is_bad(tmp_path: Path, damage: str) -> None:
    c = EpochCache([E(1, 0), E(2, 100)])
    write_epoch_file(tmp_path, c)
    main = tmp_path / EPOCH_FILE
    if damage == "missing":
        main.unlink()
    elif damage == "corrupt":
        main.write_bytes(main.read_bytes().replace(b"2-100", b"2-101"))
    else:
        main.write_bytes(b"")
    assert load_epoch_file(tmp_path) == c


def test_main_file_preferred_over_the_backup(tmp_path: Path) -> None:
    write_epoch_file(tmp_path, EpochCache([E(1, 0)]))
    (tmp_path / EPOCH_FILE_BACKUP).write_bytes(encode_epoch_file(EpochCache([E(1, 0), E(2, 9)])))
    assert load_epoch_file(tmp_path) == EpochCache([E(1, 0)])


def test_both_bad_is_an_error_not_an_empty_cache(tmp_path: Path) -> None:
    (tmp_path / EPOCH_FILE).write_bytes(b"1\n5\n1-0\n")
    with pytest.raises(CorruptRecordError, match="no valid epoch file") as info:
        load_epoch_file(tmp_path)
    assert EPOCH_FILE in str(info.value)
    (tmp_path / EPOCH_FILE_BACKUP).write_bytes(b"garbage")
    with pytest.raises(CorruptRecordError, match=r"\.bak"):
        load_epoch_file(tmp_path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries_strategy.filter(len), st.data())
def test_any_damage_to_the_main_file_falls_back_to_the_backup(tmp_path: Path, c: EpochCache,
                                                            data: st.DataObject) -> None:
    write_epoch_file(tmp_path, c)
    main = tmp_path / EPOCH_FILE
    raw = bytearray(main.read_bytes())
    if data.draw(st.booleans(), label="truncate"):
        raw = raw[:data.draw(st.integers(0, len(raw) - 2), label="keep")]  # the final newline is optional
    else:
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw[at] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[at]), label="byte")
    main.write_bytes(bytes(raw))
    assert load_epoch_file(tmp_path) == c


def test_epoch_file_persists_each_change(tmp_path: Path) -> None:
    f = EpochFile.open(tmp_path)
    assert f.cache == EpochCache()
    f.append(E(1, 0))
    f.append(E(2, 500))
    assert EpochFile.open(tmp_path).cache == EpochCache([E(1, 0), E(2, 500)])
    with pytest.raises(StoreError, match="cannot append"):
        f.append(E(2, 600))
    assert EpochFile.open(tmp_path).cache == f.cache == EpochCache([E(1, 0), E(2, 500)])
    f.truncate_suffix(500)
    f.append(E(4, 500))
    assert EpochFile.open(tmp_path).cache == EpochCache([E(1, 0), E(4, 500)])


def test_a_crash_between_the_two_writes_keeps_the_new_main_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    f = EpochFile.open(tmp_path)
    f.append(E(1, 0))
    replaced: list[Any] = []
    real_replace = os.replace

    def crash_on_backup(src: Any, dst: Any) -> None:
        if str(dst).endswith(".bak"):
            raise OSError("simulated crash")
        replaced.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_backup)  # durable_file.replace_file renames with it
    with pytest.raises(StoreError, match="simulated crash"):
        f.append(E(2, 10))
    assert f.cache == EpochCache([E(1, 0)])  # not shown before both writes succeeded
    monkeypatch.undo()
    assert load_epoch_file(tmp_path) == EpochCache([E(1, 0), E(2, 10)])  # the main file is never older
    (tmp_path / EPOCH_FILE).unlink()
    assert load_epoch_file(tmp_path) == EpochCache([E(1, 0)])  # the backup is whole, only older
