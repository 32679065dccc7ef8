"""EpochStore on a real store in a tmp dir: the rejoin truncation and its crash-safe order, simulating a kill -9
(``tests.support.store_hooks.crash``: no final flush, no checkpoint) between every two steps, then reopening and
running the handshake's decision again: it must land on the same consistent point and the same log."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.ha.epoch_start import EpochStartAction, decide_epoch_start
from broker_store.store import MessageStore
from broker_store.store.epoch_cache import EpochCache, EpochEntry
from broker_store.store.epoch_file import EpochFile
from broker_store.store.epoch_store import EpochStore
from tests.support.store_hooks import crash
from tests.unit.test_store_confirm_offset import open_store, put, visible


class Crash(Exception):
    """Raised in place of a step: the process died right before it."""


def forked_store(d: Path) -> tuple[EpochStore, int]:
    """An old primary: epoch 1 from 0, epoch 3 from the fork point; returns the store and the fork point."""
    store = open_store(d, hold=True)
    es = EpochStore.open(store)
    es.begin_epoch(1, 0)
    put(store, "T", 0, count=5)
    fork = store.max_physical_offset
    store.set_confirm_offset(fork)
    es.begin_epoch(3, fork)
    put(store, "T", 0, count=4)
    put(store, "U", 1, count=2)
    store.set_confirm_offset(store.max_physical_offset)  # consumers saw the fork: the truncation takes it back
    return es, fork


PRIMARY = EpochCache([EpochEntry(1, 0), EpochEntry(2, 10**9)])
"""The new primary: epoch 1 ran on to 10**9 there (the old primary forked from it at epoch 3)."""


def rejoin_point(es: EpochStore, primary_max: int) -> int:
    decision = decide_epoch_start(local=es.epoch_cache, local_min=es.min_physical_offset,
                                  local_max=es.max_physical_offset, primary=PRIMARY, primary_max=primary_max)
    assert decision.action is EpochStartAction.FOLLOW
    return decision.offset


def reopen(d: Path, es: EpochStore) -> EpochStore:
    crash(es.store)
    return EpochStore.open(open_store(d, hold=True))


def test_truncate_to_cuts_log_queues_and_epochs(tmp_path: Path) -> None:
    es, fork = forked_store(tmp_path)
    hooked: list[int] = []
    es.on_truncated.append(hooked.append)
    point = rejoin_point(es, primary_max=10**9 + 500)
    assert point == fork  # epoch 1 matches; the primary's epoch 1 runs to 10**9, ours to the fork
    es.truncate_to(point)
    assert es.max_physical_offset == fork and es.confirm_offset == fork
    assert es.epoch_cache == EpochCache([EpochEntry(1, 0)])
    assert [r[2:] for r in visible(es.store)] == [("T", 0, i) for i in range(5)]
    assert hooked == [fork]
    es.store.shutdown()


@pytest.mark.parametrize("crash_before", ["epoch_file", "hooks"])
def test_a_crash_between_steps_recovers_to_the_same_point(tmp_path: Path, crash_before: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    es, fork = forked_store(tmp_path)
    point = rejoin_point(es, primary_max=10**9 + 500)

    def crash(*_args: object) -> None:
        raise Crash

    if crash_before == "epoch_file":
        monkeypatch.setattr(EpochFile, "truncate_suffix", crash)
    else:
        es.on_truncated.append(crash)
    with pytest.raises(Crash):
        es.truncate_to(point)
    monkeypatch.undo()
    es = reopen(tmp_path, es)
    assert es.max_physical_offset == fork
    assert es.epoch_cache.last_entry is not None and es.epoch_cache.last_entry.start_offset <= fork
    assert rejoin_point(es, primary_max=10**9 + 500) == point  # the next handshake agrees
    es.truncate_to(point)  # and finishing it is harmless
    assert es.epoch_cache == EpochCache([EpochEntry(1, 0)])
    assert [r[2:] for r in visible(es.store)] == [("T", 0, i) for i in range(5)]
    es.store.shutdown()


def test_a_crash_inside_the_store_truncation_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CommitLog is cut but the ConsumeQueues and checkpoint are not: recovery drops the queue entries past
    the log's end, open() drops the epoch past it."""
    es, fork = forked_store(tmp_path)
    point = rejoin_point(es, primary_max=10**9 + 500)
    queues = es.store._queues  # the crash lands between the store's own steps

    def crash(*_args: object) -> None:
        raise Crash

    monkeypatch.setattr(queues, "truncate_from_commit_log_offset", crash)
    with pytest.raises(Crash):
        es.truncate_to(point)
    monkeypatch.undo()
    es = reopen(tmp_path, es)
    assert es.max_physical_offset == fork
    assert rejoin_point(es, primary_max=10**9 + 500) == point
    assert all(r[1] <= fork for r in visible(es.store))
    es.store.shutdown()


def test_open_drops_only_entries_past_the_max_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, hold=True)
    es = EpochStore.open(store)
    es.begin_epoch(1, 0)
    put(store, "T", 0, count=2)
    end = store.max_physical_offset
    es.begin_epoch(2, end)  # a new primary that wrote nothing yet: valid, kept
    store.shutdown()
    es = EpochStore.open(open_store(tmp_path, hold=True))
    assert es.epoch_cache == EpochCache([EpochEntry(1, 0), EpochEntry(2, end)])
    es.store.shutdown()


def test_begin_epoch_replaces_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    store: MessageStore = open_store(tmp_path, hold=True)
    es = EpochStore.open(store)
    es.begin_epoch(1, 0)
    es.begin_epoch(2, 0)
    assert es.epoch_cache == EpochCache([EpochEntry(2, 0)])
    es.begin_epoch(2, 0)  # the same entry again: nothing changes
    assert es.epoch_cache == EpochCache([EpochEntry(2, 0)])
    store.shutdown()


def test_restart_at_empties_log_and_epochs(tmp_path: Path) -> None:
    es, _ = forked_store(tmp_path)
    es.restart_at(10 * 16 * 1024)
    assert (es.min_physical_offset, es.max_physical_offset) == (10 * 16 * 1024, 10 * 16 * 1024)
    assert len(es.epoch_cache) == 0 and visible(es.store) == []
    es.store.shutdown()
