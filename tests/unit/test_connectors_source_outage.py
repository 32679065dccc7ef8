"""The outage rule shared by both ends of a link (``connectors.core.outage``) and the source side's use of
it, without a broker: a source that is down blocks pulls and the reader's admin calls with capped doubling
backoff until ``retry_timeout_ms``, then one ``SourceUnavailableError`` line naming link, cluster and
address. The clock is a fake driven by the fake sleep, so nothing waits. The real-process counterpart (a
source broker killed with -9 and restarted under a running job) is
tests/spark/test_fault_tolerance.py::test_source_broker_restart_keeps_the_job_alive."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from broker_store.client import MessageQueue, PullResult, PullStatus
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import (
    NoPermissionError,
    RequestTimeoutError,
    RocketMQError,
    ServiceNotAvailableError,
    TopicNotExistError,
    TransportError,
)
from broker_store.protocol.message import encode_stored_message
from broker_store.protocol.topic_stats import TopicOffset
from connectors.core.errors import SourceUnavailableError
from connectors.core.outage import OutagePolicy, OutageTimer, SourceOutage
from connectors.replication.planning import QueueRange
from connectors.replication.pulling import PullSettings, pull_range_raw


class FakeClock:
    """A ``broker_store.clock.ThreadClock`` whose blocking sleeps only move it (and are recorded)."""

    def __init__(self) -> None:
        self.now = 500.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def block(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, cond: threading.Condition, timeout: float) -> None:
        self.block(timeout)


POLICY = OutagePolicy(timeout_ms=30_000, backoff_ms=100, backoff_max_ms=2_000)


def _outage(clock: FakeClock, *, brokers: bool = True, policy: OutagePolicy = POLICY) -> SourceOutage:
    return SourceOutage(link="L", cluster="src", namesrv="127.0.0.1:9", policy=policy,
                        cluster_has_brokers=lambda: brokers, clock=clock)


def test_policy_doubles_up_to_the_cap_and_cuts_the_last_wait_to_the_budget() -> None:
    clock = FakeClock()
    timer = OutageTimer(POLICY, clock)
    while timer.wait() is not None:
        pass
    assert clock.sleeps[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0] and max(clock.sleeps) == 2.0
    assert sum(clock.sleeps) == pytest.approx(30.0)
    assert timer.elapsed == pytest.approx(30.0)
    timer.reset()
    assert timer.elapsed == 0.0 and timer.next_delay() == 0.1  # a new outage gets the whole budget


def test_policy_floors_a_zero_backoff() -> None:
    assert OutagePolicy(1000, 0, 0).delay(0.0, 0, 0.0) == 0.01
    assert OutagePolicy(0, 100, 100).delay(0.0, 0, 0.0) is None  # no budget: fail at once


def test_a_sliver_of_budget_left_by_float_rounding_counts_as_spent() -> None:
    """From a large clock origin, started + sleeps can land 1e-14 s short of the budget; a wait that small does
    not move such a clock, so the retry loop must end there instead of waiting without end."""
    origin = 1.0e9
    policy = OutagePolicy(timeout_ms=30_000, backoff_ms=100, backoff_max_ms=2_000)
    assert policy.delay(origin, 9, origin + 30.0 - 1e-7) is None
    assert policy.delay(origin, 9, origin + 29.9) == pytest.approx(0.1)


def test_call_rides_out_an_outage_and_counts_the_retries() -> None:
    clock = FakeClock()
    outage = _outage(clock)
    answers: list[RocketMQError | None] = [TransportError("refused"), TransportError("refused"),
                                           ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE, "no addr"),
                                           None]

    def call() -> int:
        error = answers.pop(0)
        if error is not None:
            raise error
        return 7

    assert outage.call(call, "reading the max offset") == 7
    assert clock.sleeps == [0.1, 0.2, 0.4] and outage.retries == 3


def test_call_fails_after_the_budget_with_one_line_naming_link_cluster_and_address() -> None:
    clock = FakeClock()
    outage = _outage(clock)

    def call() -> int:
        raise TransportError("cannot connect to 127.0.0.1:10911")

    with pytest.raises(SourceUnavailableError) as err:
        outage.call(call, "listing the topics")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("link L: source cluster src (namesrv 127.0.0.1:9) unavailable for 30.0s while "
                              "listing the topics: TransportError: cannot connect to 127.0.0.1:10911")
    assert err.value.retriable and isinstance(err.value.__cause__, TransportError)
    assert sum(clock.sleeps) == pytest.approx(30.0)
    copy = pickle.loads(pickle.dumps(err.value))  # crosses from a Python worker to the driver
    assert str(copy) == message and copy.cluster == "src" and copy.namesrv == "127.0.0.1:9"


def test_a_missing_route_is_an_outage_only_when_the_cluster_lists_no_broker() -> None:
    clock = FakeClock()
    missing = TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no route")
    assert _outage(clock, brokers=False).unavailable(missing)
    assert not _outage(clock, brokers=True).unavailable(missing)
    assert not _outage(clock, brokers=True).unavailable(NoPermissionError(ResponseCode.NO_PERMISSION, "denied"))

    def unreachable() -> bool:
        raise TransportError("name server down")

    down = SourceOutage(link="L", cluster="src", namesrv="n:1", policy=POLICY, cluster_has_brokers=unreachable,
                        clock=clock)
    assert down.unavailable(missing)

    def refused() -> int:
        raise NoPermissionError(ResponseCode.NO_PERMISSION, "denied")

    with pytest.raises(NoPermissionError):  # not an outage: raised at once, no wait
        _outage(clock).call(refused, "x")
    assert clock.sleeps == []


def _record(offset: int) -> bytes:
    return encode_stored_message(topic=b"T", queue_id=0, queue_offset=offset, physical_offset=offset * 200,
                                 body=b"m%d" % offset, properties=b"")


class FlakyConsumer:
    """Answers pulls of 4 records; ``fail(call_number)`` says which pulls fail and how."""

    def __init__(self, fail: Callable[[int], RocketMQError | None]) -> None:
        self.fail = fail
        self.asked: list[int] = []

    def pull_wait_budget(self) -> float:
        return 1.0

    def pull_async(self, mq: object, at: int, n: int, *, expression: str, decode: bool) -> Future[PullResult]:
        future: Future[PullResult] = Future()
        error = self.fail(len(self.asked))
        self.asked.append(at)
        if error is not None:
            future.set_exception(error)
        else:
            raw = b"".join(_record(o) for o in range(at, at + n))
            future.set_result(PullResult(PullStatus.FOUND, at + n, 0, 100, [], 0, raw=raw))
        return future


SETTINGS = PullSettings(namesrv="127.0.0.1:9", group="g", cluster="src", tags="*", pull_batch_size=4,
                        fail_on_data_loss=True, pull_timeout_ms=1000, row_format="raw", link="L", retry=POLICY,
                        pulls_in_flight=1)
"""One pull in flight, so the sequences of pulls asked below are exact; several in flight through an outage:
``test_pulls_in_flight_ride_out_an_outage_nothing_missing_nothing_twice``."""


def test_pulls_retry_the_same_offset_through_an_outage_nothing_missing_nothing_twice() -> None:
    clock = FakeClock()
    outage = _outage(clock)
    consumer = FlakyConsumer(lambda n: TransportError("connection reset") if n in (1, 2, 3) else None)
    got = list(pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 12), consumer,  # type: ignore[arg-type]
                              outage=outage))
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 3), (4, 7), (8, 11)]
    assert consumer.asked == [0, 4, 4, 4, 4, 8]
    # the first repeat goes out at once (the route may only be stale), the next ones after a backoff
    assert outage.retries == 2 and clock.sleeps == [0.1, 0.2]


def test_pulls_in_flight_ride_out_an_outage_nothing_missing_nothing_twice() -> None:
    clock = FakeClock()
    outage = _outage(clock)
    consumer = FlakyConsumer(lambda n: TransportError("connection reset") if n in (1, 4, 5) else None)
    settings = dataclasses.replace(SETTINGS, pulls_in_flight=3)
    got = list(pull_range_raw(settings, QueueRange("T", "b", 0, 0, 20), consumer,  # type: ignore[arg-type]
                              outage=outage))
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 3), (4, 7), (8, 11), (12, 15), (16, 19)]
    # 0, 4 (fails), 8 asked at once, 12 once 0 landed; 4's failure drops 8 and 12 and the window starts
    # again at 4 at once (a stale route); 4 fails again: dropped again, a backoff, then the rest
    assert consumer.asked == [0, 4, 8, 12, 4, 8, 12, 4, 8, 12, 16]
    assert outage.retries == 1 and clock.sleeps == [0.1]


def test_a_pull_that_failed_on_a_dead_primary_is_repeated_at_once_on_the_new_route() -> None:
    """A controller-mode failover: each Python worker's route still names the killed primary. One immediate
    repeat per failure run (the client fetched the route again), no outage wait, no warning; a timeout waits."""
    clock = FakeClock()
    outage = _outage(clock)
    refused = TransportError("cannot connect to 127.0.0.1:10911: Connection refused")
    consumer = FlakyConsumer(lambda n: refused if n in (1, 3) else None)
    got = list(pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 12), consumer,  # type: ignore[arg-type]
                              outage=outage))
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 3), (4, 7), (8, 11)]
    assert consumer.asked == [0, 4, 4, 8, 8] and outage.retries == 0 and clock.sleeps == []
    consumer = FlakyConsumer(lambda n: RequestTimeoutError("no answer") if n == 1 else None)
    list(pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 8), consumer, outage=outage))  # type: ignore[arg-type]
    assert consumer.asked == [0, 4, 4] and clock.sleeps == [0.1]


def test_a_pull_outage_longer_than_the_budget_fails_the_task() -> None:
    clock = FakeClock()
    outage = _outage(clock, policy=OutagePolicy(5_000, 1_000, 1_000))
    consumer = FlakyConsumer(lambda n: None if n == 0 else TransportError("cannot connect to 127.0.0.1:10911"))
    pulls = pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 12), consumer, outage=outage)  # type: ignore[arg-type]
    assert next(pulls).first_offset == 0
    with pytest.raises(SourceUnavailableError, match=r"^link L: source cluster src \(namesrv 127.0.0.1:9\) "
                                                     r"unavailable for 5.0s while pulling T/b/0 at offset 4: "):
        next(pulls)
    assert sum(clock.sleeps) == pytest.approx(5.0)


class RoutedConsumer(FlakyConsumer):
    """A ``FlakyConsumer`` whose route lists queue T/b/0 while ``listed()`` says so."""

    def __init__(self, fail: Callable[[int], RocketMQError | None], listed: Callable[[], bool]) -> None:
        super().__init__(fail)
        self.listed = listed

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue("T", "b", 0)] if self.listed() else []


def test_topic_not_exist_from_a_broker_the_route_still_lists_is_waited_out_a_deleted_topic_fails() -> None:
    """A new primary without the topic's config yet (created on the old one just before it died) catches up;
    a topic gone from the route (deleted on the source) fails the pull at once, as before."""
    clock = FakeClock()
    outage = _outage(clock)
    behind = TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist, apply first please!",
                                addr="127.0.0.1:10911")
    consumer = RoutedConsumer(lambda n: behind if n in (1, 2) else None, lambda: True)
    got = list(pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 12), consumer,  # type: ignore[arg-type]
                              outage=outage))
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 3), (4, 7), (8, 11)]
    assert consumer.asked == [0, 4, 4, 4, 8] and outage.retries == 2 and clock.sleeps == [0.1, 0.2]

    deleted = RoutedConsumer(lambda n: behind if n == 1 else None, lambda: False)
    pulls = pull_range_raw(SETTINGS, QueueRange("T", "b", 0, 0, 12), deleted, outage=outage)  # type: ignore[arg-type]
    assert next(pulls).first_offset == 0
    with pytest.raises(TopicNotExistError):
        next(pulls)
    assert deleted.asked == [0, 4] and clock.sleeps == [0.1, 0.2]


class FakeAdmin:
    """The reader's driver-side Admin: ``Orders`` has 2 queues on ``src-a``; no other topic exists.
    ``down``: calls that fail with a refused connection before answering."""

    def __init__(self, down: int = 0) -> None:
        self.down = down
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.down > 0:
            self.down -= 1
            raise TransportError("cannot connect to 127.0.0.1:10911")

    def cluster_info(self) -> SimpleNamespace:
        return SimpleNamespace(cluster_addr_table={"src": []}, broker_addr_table={"src-a": {}})

    def topic_list(self) -> list[str]:
        self._call()
        return ["Orders"]

    def topic_route(self, topic: str) -> object:
        self._call()
        if topic != "Orders":
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no route of {topic}")
        return SimpleNamespace(topic=topic)

    def max_offset(self, mq: MessageQueue) -> int:
        self._call()
        return 10 + mq.queue_id

    def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        """GET_TOPIC_STATS_INFO of the group: the same max offsets as ``max_offset``, in one call."""
        self._call()
        return {q: TopicOffset(0, 10 + q, 0) for q in (0, 1)}


def _reader(monkeypatch: pytest.MonkeyPatch, admin: FakeAdmin, clock: FakeClock, **options: str) -> Any:
    from connectors.replication import reader as reader_module

    monkeypatch.setattr(reader_module, "subscribe_queues", lambda topic, route: [
        MessageQueue(topic, "src-a", 0), MessageQueue(topic, "src-a", 1)])
    reader = reader_module.RocketMQStreamReader({"namesrv": "127.0.0.1:9", "cluster": "src", "link": "L",
                                                 "retryBackoffMs": "100", "retryBackoffMaxMs": "2000",
                                                 "retryTimeoutMs": "30000", **options})
    monkeypatch.setattr(reader._state, "admin", admin)  # a fake in the Admin's place
    reader._state.clock = clock  # before the outage is made: it takes the reader's clock
    return reader


def test_driver_admin_calls_ride_out_a_source_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    reader = _reader(monkeypatch, FakeAdmin(down=3), clock, topics="Orders")
    queues = reader.discover_queues()
    assert [q.queue_id for q in queues] == [0, 1] and clock.sleeps == [0.1, 0.2, 0.4]
    assert reader.max_offsets(queues) == {queues[0]: 10, queues[1]: 11}
    reader._state.admin = FakeAdmin(down=1000)
    with pytest.raises(SourceUnavailableError, match=r"^link L: source cluster src \(namesrv 127.0.0.1:9\) "
                                                     r"unavailable for 30.0s while reading the max offsets of "
                                                     r"topic Orders on broker group src-a: TransportError"):
        reader.max_offsets(queues[:1])


def test_a_missing_explicit_topic_is_a_rate_limited_warning(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    reader = _reader(monkeypatch, FakeAdmin(), clock, topics="Orders,Ordres")
    with caplog.at_level(logging.WARNING, logger="connectors.replication.reader"):
        for _ in range(3):
            assert len(reader.discover_queues()) == 2
        clock.now += 61
        reader.discover_queues()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0] == ("link L: source topic 'Ordres' does not exist on cluster src (namesrv 127.0.0.1:9), or "
                           "no broker holding it is up; nothing is read from it until it has a route (check the "
                           "spelling in the link's topics)")


class MeetingAdmin(FakeAdmin):
    """A ``FakeAdmin`` whose route look-ups, and whose topic list and cluster listing, each wait for one
    another at a barrier: asked one after the other they never meet (the barrier breaks after its guard)."""

    def __init__(self, *, listing: bool) -> None:
        super().__init__()
        self.routes = threading.Barrier(2, timeout=30)
        self.listings = threading.Barrier(2, timeout=30)
        self.listed = not listing

    def topic_list(self) -> list[str]:
        self.listings.wait()
        return ["Orders", "Ordres"]

    def cluster_info(self) -> SimpleNamespace:
        if not self.listed:
            self.listed = True  # later calls (the outage check of a missing route) do not wait
            self.listings.wait()
        return super().cluster_info()

    def topic_route(self, topic: str) -> object:
        self.routes.wait()
        return super().topic_route(topic)


def test_discovery_asks_its_round_trips_together_not_one_after_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """Across a WAN each admin call of a trigger is a round trip: the routes of the link's topics are asked at
    once, and so are the topic list and the cluster's names when the topics are not named."""
    reader = _reader(monkeypatch, MeetingAdmin(listing=False), FakeClock(), topics="Orders,Ordres")
    assert [(q.topic, q.queue_id) for q in reader.discover_queues()] == [("Orders", 0), ("Orders", 1)]
    reader = _reader(monkeypatch, MeetingAdmin(listing=True), FakeClock(), topicPattern="Ord.*")
    assert [(q.topic, q.queue_id) for q in reader.discover_queues()] == [("Orders", 0), ("Orders", 1)]
