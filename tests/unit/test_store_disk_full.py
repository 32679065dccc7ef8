"""A full disk (docs/operations.md, "Damaged files and a full disk"): the spell's state (store.disk_space) and the
store's put path under ENOSPC. The real full disk, a size-limited tmpfs under a running broker, is
tests/integration/test_disk_full.py."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from unittest import mock

from broker_store.store import GetStatus, PutStatus
from broker_store.store.disk_space import DiskFullSpell, is_disk_full
from tests.unit.test_store_recovery import check_survivors, open_store, write_messages


def test_a_spell_is_reported_once_and_its_end_once() -> None:
    spell = DiskFullSpell("/data/store")
    enospc = OSError(errno.ENOSPC, "No space left on device")
    assert spell.write_succeeded(1.0) is None and not spell.full
    remark, began = spell.write_failed(enospc, 10.0)
    assert began and spell.full and "disk full" in remark and "/data/store" in remark
    assert "No space left on device" in remark
    assert spell.write_failed(enospc, 11.0)[1] is False
    assert spell.write_failed(enospc, 12.5)[1] is False
    assert spell.write_succeeded(14.0) == (4.0, 3)
    assert not spell.full and spell.write_succeeded(15.0) is None
    assert spell.write_failed(enospc, 20.0)[1] is True  # a new spell


def test_only_no_space_and_quota_count_as_a_full_disk() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, "x")) and is_disk_full(OSError(errno.EDQUOT, "x"))
    assert not is_disk_full(OSError(errno.EIO, "x")) and not is_disk_full(OSError("short write"))


def test_puts_refused_while_the_disk_is_full_then_accepted_and_nothing_acknowledged_lost(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        written = write_messages(store, random.Random(31), 30)
        real_pwrite = os.pwrite

        def full(fd: int, data: bytes, offset: int) -> int:
            real_pwrite(fd, bytes(data[:len(data) // 2]), offset)  # a partial write first, as a filling disk does
            raise OSError(errno.ENOSPC, "No space left on device")

        end = store.max_physical_offset
        with mock.patch("broker_store.store.commit_log.os.pwrite", full):
            for _ in range(3):
                r = store.put_message("Rc0", 0, b"refused", b"", tags_code=0, born_timestamp=1,
                                      born_host="127.0.0.1:1")
                assert r.status is PutStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.remark
            assert store.max_physical_offset == end
            check_survivors(store, written)  # reads go on
            assert store.get_messages("Rc0", 0, 0, 4).status is GetStatus.FOUND
        more = write_messages(store, random.Random(32), 10)  # space is back: the next put goes in
        check_survivors(store, written + more)
    finally:
        store.shutdown()
    store = open_store(tmp_path)
    try:
        check_survivors(store, written + more)
    finally:
        store.shutdown()
