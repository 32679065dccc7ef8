"""The sink's mirror of the source consumer group without a broker: offers return at once, are
coalesced while an update runs, only changed queues are sent, failures are retried with the next offer.
The real-process counterpart is tests/spark/test_source_group.py."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from broker_store.client import MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import RocketMQError, SystemBusyError
from connectors.replication.group_mirror import SourceGroupMirror

Q0, Q1 = MessageQueue("T", "a", 0), MessageQueue("T", "a", 1)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[MessageQueue, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail: set[MessageQueue] = set()
        self.lock = threading.Lock()

    def __call__(self, changed: Sequence[tuple[MessageQueue, int]]) -> list[RocketMQError | None]:
        self.entered.set()
        self.gate.wait(5)
        errors: list[RocketMQError | None] = []
        for queue, offset in changed:
            if queue in self.fail:
                errors.append(SystemBusyError(ResponseCode.SYSTEM_BUSY, "busy"))
                continue
            with self.lock:
                self.sent.append((queue, offset))
            errors.append(None)
        return errors


def test_offers_are_mirrored_and_only_changes_are_sent() -> None:
    rec = Recorder()
    mirror = SourceGroupMirror("G", rec)
    mirror.offer({Q0: 5, Q1: 7})
    assert mirror.flush(5)
    mirror.offer({Q0: 5, Q1: 9})
    assert mirror.flush(5)
    assert sorted(rec.sent) == [(Q0, 5), (Q1, 7), (Q1, 9)]
    assert mirror.committed() == {Q0: 5, Q1: 9}


def test_offers_during_an_update_are_coalesced() -> None:
    rec = Recorder()
    rec.gate.clear()
    mirror = SourceGroupMirror("G", rec)
    mirror.offer({Q0: 1})
    assert rec.entered.wait(5)
    for n in range(2, 50):  # the first update is stuck: these pile up, newest wins
        mirror.offer({Q0: n})
    rec.gate.set()
    assert mirror.flush(5)
    assert rec.sent == [(Q0, 1), (Q0, 49)]


def test_a_failed_update_is_logged_and_retried_with_the_next_offer(caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder()
    rec.fail = {Q1}
    mirror = SourceGroupMirror("G", rec, label="orders")
    with caplog.at_level("WARNING"):
        mirror.offer({Q0: 3, Q1: 4})
        assert mirror.flush(5)
    assert mirror.committed() == {Q0: 3}
    assert any("link orders" in r.getMessage() and "G" in r.getMessage() for r in caplog.records)
    rec.fail = set()
    mirror.offer({Q0: 3, Q1: 4})
    assert mirror.flush(5)
    assert mirror.committed() == {Q0: 3, Q1: 4}


def test_failures_are_reported_when_they_start_and_when_they_clear(caplog: pytest.LogCaptureFixture) -> None:
    """A source broker down fails the mirror's update of every batch: one WARNING, then one INFO when it is back,
    not a line per batch."""
    rec = Recorder()
    rec.fail = {Q0, Q1}
    mirror = SourceGroupMirror("G", rec, label="orders")
    with caplog.at_level("INFO", logger="connectors.replication.group_mirror"):
        for n in range(1, 6):  # five batches while broker group a is down
            mirror.offer({Q0: n, Q1: n})
            assert mirror.flush(5)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "broker group a (2 queue(s); first: offset 1 of" in warnings[0], warnings
        rec.fail = set()
        for n in range(6, 9):
            mirror.offer({Q0: n, Q1: n})
            assert mirror.flush(5)
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert infos == ["link orders: offsets mirrored to source group G on broker group a again"]
    assert mirror.committed() == {Q0: 8, Q1: 8}


def test_flush_times_out_while_an_update_hangs() -> None:
    rec = Recorder()
    rec.gate.clear()
    mirror = SourceGroupMirror("G", rec)
    mirror.offer({Q0: 1})
    assert not mirror.flush(0.2)
    rec.gate.set()
    assert mirror.flush(5)
