"""``connectors.replication.run_ahead``: the next trigger's queue discovery found while a batch runs, and the
reader's ``latestOffset`` using it: one round trip fewer per trigger, a stale list found again when the offsets
request fails on it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from broker_store.client import MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import BrokerResponseError, TopicNotExistError
from connectors.core.offsets import SourceOffset
from connectors.replication.run_ahead import RunAhead
from tests.unit.test_topic_stats import QUEUES, TRUTH, StatsAdmin, _stats_reader


def test_take_returns_what_start_began_once_and_none_otherwise() -> None:
    calls: list[int] = []

    def call() -> int:
        calls.append(1)
        return len(calls)

    ahead = RunAhead(call, "t")
    assert ahead.take() is None and calls == []  # nothing started: the caller asks itself
    ahead.start()
    ahead.start()  # one in flight at most
    assert ahead.take() == 1 and ahead.take() is None
    assert calls == [1]


def test_a_failed_call_is_none_for_the_caller_to_ask_again() -> None:
    def fail() -> int:
        raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "gone")

    ahead = RunAhead(fail, "t")
    ahead.start()
    assert ahead.take() is None


def test_take_waits_for_the_call_in_flight_and_cancel_drops_it() -> None:
    release = threading.Event()
    ahead = RunAhead(lambda: release.wait(5) and 7, "t")
    ahead.start()
    threading.Timer(0.05, release.set).start()
    assert ahead.take() == 7
    ahead.start()
    ahead.cancel()
    assert ahead.take() is None


class CountingDiscovery:
    """The reader's ``discover_queues`` as a fake: the queue list it answers now; calls counted."""

    def __init__(self, queues: list[MessageQueue]) -> None:
        self.queues = queues
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> list[MessageQueue]:
        with self.lock:
            self.calls += 1
            return list(self.queues)


def test_latest_offset_plans_from_the_queues_found_while_the_last_batch_ran(monkeypatch: Any) -> None:
    admin = StatsAdmin()
    reader = _stats_reader(monkeypatch, admin)
    discovery = CountingDiscovery(list(QUEUES))
    monkeypatch.setattr(reader, "discover_queues", discovery)
    start = SourceOffset.of({q: 0 for q in QUEUES}).to_dict()
    assert SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues == TRUTH
    reader._state.discovery.take()  # the discovery started for the next trigger, awaited here
    assert discovery.calls == 2  # this trigger's own, and the one ahead of the next
    reader._state.discovery.start()
    assert SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues == TRUTH
    reader._state.discovery.take()
    assert discovery.calls == 4  # the next trigger asked nothing itself: one ahead taken, one started
    reader._state.discovery.cancel()


def test_a_list_found_ahead_that_the_offsets_request_fails_on_is_found_again(monkeypatch: Any) -> None:
    """A topic deleted between the triggers whose broker answers its stats request with an error: the trigger
    finds the queues anew and plans from them, not failing the query."""
    admin = StatsAdmin()
    reader = _stats_reader(monkeypatch, admin)
    kept = [q for q in QUEUES if q.topic == "A"]
    discovery = CountingDiscovery(kept)
    monkeypatch.setattr(reader, "discover_queues", discovery)
    stale = RunAhead(lambda: list(QUEUES), "stale")  # found before topic B went away
    reader._state.discovery = stale
    stale.start()
    admin.refuse = {("B", b): BrokerResponseError(ResponseCode.SYSTEM_ERROR, "topic B gone") for b in ("g1", "g2")}
    start = SourceOffset.of({q: 0 for q in kept}).to_dict()
    end = SourceOffset.from_dict(reader.latestOffset(start, ReadAllAvailable())).queues
    assert end == {q: TRUTH[q] for q in kept}
    assert discovery.calls >= 1  # found anew now (and once more ahead of the next trigger)
    reader._state.discovery.cancel()


def test_a_fresh_list_that_fails_raises_as_before(monkeypatch: Any) -> None:
    admin = StatsAdmin(refuse={("A", "g1"): BrokerResponseError(ResponseCode.SYSTEM_ERROR, "broken")})
    reader = _stats_reader(monkeypatch, admin)
    monkeypatch.setattr(reader, "discover_queues", CountingDiscovery(list(QUEUES)))
    with pytest.raises(BrokerResponseError, match="broken"):
        reader.latestOffset(SourceOffset.of({q: 0 for q in QUEUES}).to_dict(), ReadAllAvailable())
    reader._state.discovery.cancel()
