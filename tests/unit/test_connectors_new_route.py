"""A request that failed on a dead or replaced primary is asked once more at once, on the route the client then
fetches anew (``connectors.core.outage.once_more_on_new_route``), by every connector call that has no retry of
its own: the heartbeat send, the source-group mirror and the checkpoint committer's target requests (the last
in tests/unit/test_connectors_checkpoint_problems.py). The real-process case, a controller-mode failover under
``jobs/run_all.py``, is tests/spark/test_replicator_controller_failover.py."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from broker_store.client import MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import RequestTimeoutError, RocketMQError, TransportError, error_for_response
from connectors.core.outage import once_more_on_new_route
from connectors.heartbeat import writer as heartbeat_writer
from connectors.heartbeat.writer import HeartbeatStreamWriter
from connectors.replication import group_mirror


def failing(*errors: RocketMQError, result: str = "ok") -> tuple[Callable[[], str], list[int]]:
    """A call raising ``errors`` one per call, then returning ``result``; and its call count."""
    calls = [0]

    def call() -> str:
        calls[0] += 1
        if calls[0] <= len(errors):
            raise errors[calls[0] - 1]
        return result
    return call, calls


def test_a_dead_primary_is_asked_once_more_then_the_error_is_the_callers() -> None:
    call, calls = failing(TransportError("cannot connect to 127.0.0.1:10911: Connection refused"))
    assert once_more_on_new_route(call) == "ok" and calls == [2]
    fenced = error_for_response(ResponseCode.SERVICE_NOT_AVAILABLE, "broker is fenced: promotion in progress")
    call, calls = failing(fenced, TransportError("connection refused"))
    with pytest.raises(TransportError):
        once_more_on_new_route(call)
    assert calls == [2]


@pytest.mark.parametrize("error", [
    RequestTimeoutError("no answer within 3 s"),  # may have been applied: not sent twice
    error_for_response(ResponseCode.MESSAGE_ILLEGAL, "too big"),  # a refusal, not a stale route
])
def test_a_timeout_or_a_refusal_is_not_repeated(error: RocketMQError) -> None:
    call, calls = failing(error)
    with pytest.raises(type(error)):
        once_more_on_new_route(call)
    assert calls == [1]


class FakeProducer:
    def __init__(self, *errors: RocketMQError) -> None:
        self.errors = list(errors)
        self.sent: list[Any] = []

    def send(self, message: Any) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        self.sent.append(message)
        return SimpleNamespace(message_queue=MessageQueue("rmq_sys_replicator_heartbeat", "src-a", 0), queue_offset=7)


def _writer(monkeypatch: pytest.MonkeyPatch, producer: FakeProducer) -> HeartbeatStreamWriter:
    endpoints = SimpleNamespace(link="l1", tls=None, source="src", target="dst", source_namesrv="127.0.0.1:9876",
                                credentials=None)
    monkeypatch.setattr(heartbeat_writer, "ensure_heartbeat_topic", lambda e: None)
    monkeypatch.setattr(heartbeat_writer, "executor_producer", lambda *a, **k: producer)
    writer = HeartbeatStreamWriter.__new__(HeartbeatStreamWriter)
    writer.__setstate__({"options": SimpleNamespace(link=lambda name: endpoints)})
    return writer


def test_a_heartbeat_after_its_source_primary_died_is_sent_to_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer(TransportError("cannot connect to 127.0.0.1:10911: Connection refused"))
    sent = _writer(monkeypatch, producer).send("l1", 3)
    assert (sent.queue, sent.offset, sent.error) == ("rmq_sys_replicator_heartbeat/src-a/0", 7, None)
    assert len(producer.sent) == 1
    producer = FakeProducer(RequestTimeoutError("no answer"))
    sent = _writer(monkeypatch, producer).send("l1", 4)
    assert sent.queue is None and sent.error is not None and producer.sent == []


def test_the_source_group_mirror_commits_on_the_new_primary(monkeypatch: pytest.MonkeyPatch) -> None:
    commits: list[tuple[MessageQueue, int]] = []
    errors: list[RocketMQError] = [TransportError("cannot connect to 127.0.0.1:10911: Connection refused")]

    class Consumer:
        def update_consumer_offsets(self, offsets: list[tuple[MessageQueue, int]]) -> list[RocketMQError | None]:
            if errors:
                return [errors.pop(0) for _ in offsets]
            commits.extend(offsets)
            return [None] * len(offsets)

    monkeypatch.setattr(group_mirror, "executor_consumer", lambda *a, **k: Consumer())
    monkeypatch.setattr(group_mirror, "_mirrors", {})
    mirror = group_mirror.source_group_mirror("127.0.0.1:9876", "CID_test", None, label="l1")
    assert mirror._update([(MessageQueue("Orders", "src-a", 1), 42)]) == [None]
    assert commits == [(MessageQueue("Orders", "src-a", 1), 42)]
