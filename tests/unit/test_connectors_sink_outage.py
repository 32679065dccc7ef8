"""The sink's retry rules without a broker: a target that is down blocks and retries (no failure
recorded, ``maxRetries`` not applied) until ``retryTimeoutMs``; a message the live target refuses gets
``maxRetries`` and is then recorded. The real-process counterpart (every target broker killed for
30 s under a running job) is tests/spark/test_fault_tolerance.py::test_target_outage_blocks_and_retries.

The producer and admin are fakes and the clock is driven by the fake sleep, so nothing waits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from broker_store.client import Message, MessageQueue, SendResult
from broker_store.client.records import SendStatus
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import (
    MessageIllegalError,
    RequestTimeoutError,
    RocketMQError,
    ServiceNotAvailableError,
    TopicNotExistError,
    TransportError,
)
from broker_store.protocol.message import encode_properties, iter_batch
from connectors.core.errors import TargetUnavailableError
from connectors.replication import outage, placement, sending
from connectors.replication.forwarding import encode_entry
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.records import ReplicationCommitMessage
from connectors.replication.resend_check import TailIndex
from connectors.replication.sending import Item
from connectors.replication.writer_options import SinkOptions

TOPIC = "T"
QUEUE = MessageQueue(TOPIC, "dst-a", 0)
SOURCE = MessageQueue(TOPIC, "src-a", 0)


class FakeProducer:
    """Answers each send with the next outcome of ``script`` (an exception or None = stored)."""

    def __init__(self, script: Callable[[int], RocketMQError | None]) -> None:
        self.script = script
        self.calls = 0
        self.offset = 0

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        return [QUEUE]

    def _answer(self, messages: Sequence[object], queue: MessageQueue) -> Future[SendResult]:
        future: Future[SendResult] = Future()
        error = self.script(self.calls)
        self.calls += 1
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(SendResult(SendStatus.SEND_OK, "", "", queue, self.offset))
            self.offset += len(messages)
        return future

    def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float) -> Future[SendResult]:
        return self._answer(list(iter_batch(body)), queue)

    def send_async(self, message: Message, queue: MessageQueue, *, timeout: float) -> Future[SendResult]:
        return self._answer([message], queue)


class FakeClock:
    """A ``broker_store.clock.ThreadClock`` whose blocking sleeps only move it (and are recorded)."""

    def __init__(self) -> None:
        self.now = 1000.0
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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class NoTails:
    """``target_tail.TargetTails`` for a fake target: every tail is empty (nothing was stored before); the real
    reads are tests/integration/test_sink_resend_check.py's."""

    def __init__(self, _options: object, cluster: str) -> None:
        self.cluster = cluster
        self.indexes: dict[MessageQueue, TailIndex] = {}
        self.read = 0

    def index(self, queue: MessageQueue, wanted: object, *, refresh: bool) -> TailIndex:
        return self.indexes.setdefault(queue, TailIndex.empty_at(queue, self.cluster, 0))


def _writer(monkeypatch: pytest.MonkeyPatch, producer: FakeProducer, *, clock: FakeClock | None = None,
            brokers_registered: bool = True, **options: object) -> PartitionWriter:
    table = {"dst-a": object()} if brokers_registered else {}
    admin = SimpleNamespace(cluster_info=lambda: SimpleNamespace(broker_addr_table=table))
    monkeypatch.setattr(sending, "target_producer", lambda _o: producer)
    monkeypatch.setattr(sending, "TargetTails", NoTails)  # the recovery check's reads: test_sink_resend_check
    monkeypatch.setattr(outage, "executor_admin", lambda _n, _c, _tls=None: admin)
    base = dict(namesrv="127.0.0.1:1", target_cluster="dst", source_cluster="src", max_retries=2,
                retry_backoff_ms=100, retry_timeout_ms=60_000, retry_backoff_max_ms=2_000)
    return PartitionWriter(SinkOptions(**{**base, **options}), clock or FakeClock())


def _send(writer: PartitionWriter, count: int = 3) -> ReplicationCommitMessage:
    for offset in range(count):
        body = f"m{offset}".encode()
        item = Item(source=SOURCE, queue_offset=offset, body=body, born_ms=0, store_ms=0,
                    offset_msg_id=f"id{offset}", source_properties={}, tags=None, keys=None)
        writer._append(TOPIC, writer.placement.place(TOPIC, SOURCE), SOURCE,
                       encode_entry(body, encode_properties({"UNIQ_KEY": f"id{offset}"}), 0), len(body), offset,
                       0, item)
    return writer.finish()


def _down(attempt: int) -> RocketMQError:
    return TransportError(f"connection refused (attempt {attempt})")


def test_target_down_blocks_past_max_retries_then_delivers(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    producer = FakeProducer(lambda n: _down(n) if n < 12 else None)  # 12 failures >> maxRetries=2
    result = _send(_writer(monkeypatch, producer, clock=clock))
    assert result.failures == () and result.delivered == 3
    assert result.target_unavailable_retries == 11  # the first retry went out at once (the route may be stale)
    assert result.offset_map[0].target_first_offset == 0 and result.offset_map[0].messages == 3
    # doubling backoff from retryBackoffMs, capped at retryBackoffMaxMs
    assert clock.sleeps[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0] and max(clock.sleeps) == 2.0


@pytest.mark.parametrize("error", [
    TransportError("cannot connect to 127.0.0.1:10911: Connection refused"),
    ServiceNotAvailableError(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is fenced: promotion in progress"),
])
def test_a_send_refused_by_a_dead_or_fenced_primary_goes_to_the_new_one_at_once(
        monkeypatch: pytest.MonkeyPatch, clock: FakeClock, error: RocketMQError) -> None:
    """A target failover: this worker's route names the old primary. The client dropped the route on the error,
    so the batch is sent again at once (no backoff, no outage counted) and lands on the new primary."""
    producer = FakeProducer(lambda n: error if n == 0 else None)
    result = _send(_writer(monkeypatch, producer, clock=clock))
    assert result.failures == () and result.delivered == 3 and producer.calls == 2
    assert result.target_unavailable_retries == 0 and clock.sleeps == []


def test_a_timed_out_send_waits_its_backoff(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    producer = FakeProducer(lambda n: RequestTimeoutError("no answer") if n == 0 else None)
    result = _send(_writer(monkeypatch, producer, clock=clock))
    assert result.delivered == 3 and clock.sleeps == [0.1]


def test_no_broker_registered_counts_as_unavailable(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    """Every target broker down and expired from the name servers: the route look-up says
    TOPIC_NOT_EXIST; that is an outage, not a refused message."""
    gone = TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no route")
    producer = FakeProducer(lambda n: gone if n < 6 else None)
    result = _send(_writer(monkeypatch, producer, clock=clock, brokers_registered=False))
    assert result.failures == () and result.delivered == 3 and result.target_unavailable_retries == 6


def test_refused_by_a_live_target_gets_max_retries_then_is_recorded(monkeypatch: pytest.MonkeyPatch,
                                                                    clock: FakeClock) -> None:
    missing = TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no route")
    producer = FakeProducer(lambda n: missing)
    result = _send(_writer(monkeypatch, producer, clock=clock, brokers_registered=True))
    assert result.delivered == 0 and result.target_unavailable_retries == 0
    assert [f.queue_offset for f in result.failures] == [0, 1, 2]
    assert {f.attempts for f in result.failures} == {3}  # first attempt + maxRetries=2
    illegal = FakeProducer(lambda n: MessageIllegalError(ResponseCode.MESSAGE_ILLEGAL, "too big"))
    result = _send(_writer(monkeypatch, illegal, clock=clock))
    assert len(result.failures) == 3 and all("MessageIllegal" in f.error for f in result.failures)


def test_outage_longer_than_retry_timeout_fails_the_task(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    producer = FakeProducer(_down)
    writer = _writer(monkeypatch, producer, clock=clock, retry_timeout_ms=30_000)
    # named as the source side names its cluster (its configured name, then the name servers), and the budget by
    # its YAML key as the source side's error does
    with pytest.raises(TargetUnavailableError, match=r": target cluster dst \(namesrv 127\.0\.0\.1:1\) unavailable "
                                                     r"for 30\.0s while .* \(retry_timeout_ms 30000\): ") as raised:
        _send(writer)
    assert isinstance(raised.value.__cause__, TransportError)
    assert 29.9 <= sum(clock.sleeps) <= 30.0 + 1e-6  # the last wait is cut to the budget


def test_placement_survives_a_broker_group_missing_from_the_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """While one target broker group is down (or restarted before the other), the route lists only part
    of the topic's queues; a task starting then must not move source queues to other target queues."""
    monkeypatch.setattr(placement, "_seen_target_queues", {})
    full = [MessageQueue(TOPIC, broker, q) for broker in ("dst-a", "dst-b") for q in range(4)]
    producer = FakeProducer(lambda n: None)
    monkeypatch.setattr(producer, "writable_queues", lambda topic: full)
    sources = [MessageQueue(TOPIC, broker, q) for broker in ("src-a", "src-b") for q in range(4)]
    before = [_writer(monkeypatch, producer).placement.place(TOPIC, s) for s in sources]
    monkeypatch.setattr(producer, "writable_queues", lambda topic: full[:4])  # dst-b not registered
    during = [_writer(monkeypatch, producer).placement.place(TOPIC, s) for s in sources]
    assert during == before and None not in during
    assert {q.broker_name for q in during if q is not None} == {"dst-a", "dst-b"}
    grown = [*full, MessageQueue(TOPIC, "dst-c", 0)]  # a real change of the topic is taken as is
    monkeypatch.setattr(producer, "writable_queues", lambda topic: grown)
    assert _writer(monkeypatch, producer).placement._target_queues(TOPIC) == sorted(grown)
