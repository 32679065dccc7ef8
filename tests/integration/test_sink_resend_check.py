"""The sink's recovery check against a real target broker (connectors.replication.resend_check, target_tail): a send
whose answer is lost after the target stored it is not repeated, with and without the target's own producer
writing into the same queue meanwhile; a re-run task sends only what its earlier run did not; a task whose sends
are all answered reads nothing. The source side is stored records handed to ``add_pull`` (what a pull returns);
the producer is the real one, with the answer of chosen sends replaced by a timeout after the broker stored them
(the real-process path of the whole job: tests/spark/test_fault_tolerance.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from broker_store.client import (
    Admin,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    SendResult,
    StoredMessage,
    new_message,
)
from broker_store.protocol.errors import RequestTimeoutError
from broker_store.protocol.message import encode_properties, encode_stored_message
from connectors.replication.partition_writer import PartitionWriter
from connectors.replication.source_position import POSITION_PROPERTY, format_position, parse_position
from connectors.replication.writer_options import SinkOptions
from tests.support.processes import GroupSpec, LocalCluster

pytestmark = pytest.mark.integration

SOURCE_TOPIC = "ResendSrc"
SOURCE = MessageQueue(SOURCE_TOPIC, "src-a", 0)
_topics = itertools.count()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("resend-target"), "rs", [GroupSpec("rs-a")]) as started:
        yield started


def _topic(target: LocalCluster) -> str:
    topic = f"Resend{next(_topics)}"
    with Admin(target.namesrv_addr) as admin:
        admin.create_topic(topic, 1, cluster="rs")
    return topic


def _records(first: int, count: int) -> bytes:
    return b"".join(encode_stored_message(
        topic=SOURCE_TOPIC.encode(), queue_id=0, queue_offset=o, physical_offset=100 * o, body=f"m{o}".encode(),
        properties=encode_properties({"UNIQ_KEY": f"U{o:04d}"}), born_timestamp=1, store_timestamp=2,
        store_ip=b"\x7f\0\0\x01", store_port=1) for o in range(first, first + count))


def _writer(target: LocalCluster, topic: str) -> PartitionWriter:
    return PartitionWriter(SinkOptions(namesrv=target.namesrv_addr, target_cluster="rs", source_cluster="src",
                                       topic=topic, batch_max_messages=4, max_retries=2, retry_backoff_ms=10))


class AnswerLost:
    """The real producer, except that the answers of the sends numbered in ``lose`` (0 = the first) are replaced by
    a timeout once the broker stored them; ``meanwhile`` runs after each lost answer (a foreign writer)."""

    def __init__(self, producer: Producer, lose: set[int],
                 meanwhile: Callable[[MessageQueue], None] | None = None) -> None:
        self.producer = producer
        self.lose = lose
        self.sends = 0
        self.meanwhile = meanwhile

    def __getattr__(self, name: str) -> object:
        return getattr(self.producer, name)

    def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float) -> Future[SendResult]:
        n, self.sends = self.sends, self.sends + 1
        future = self.producer.send_encoded_batch_async(topic, body, queue, timeout=timeout)
        if n not in self.lose:
            return future
        future.result(timeout)  # stored on the target
        if self.meanwhile is not None:
            self.meanwhile(queue)
        lost: Future[SendResult] = Future()
        lost.set_exception(RequestTimeoutError("answer lost (the broker stored the batch)"))
        return lost


def _read(target: LocalCluster, queue: MessageQueue) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    with PullConsumer(target.namesrv_addr, "resend-reader", heartbeat_interval=None) as consumer:
        offset = 0
        while True:
            result = consumer.pull(queue, offset, 32)
            if result.status is not PullStatus.FOUND:
                return out
            out.extend(result.messages)
            offset = result.next_begin_offset


def _positions(messages: list[StoredMessage]) -> list[int]:
    return [p.offset for m in messages if (p := parse_position(m.properties.get(POSITION_PROPERTY))) is not None]


def test_a_lost_answer_is_not_sent_twice(target: LocalCluster) -> None:
    topic = _topic(target)
    writer = _writer(target, topic)
    writer.producer = AnswerLost(writer.producer, {1})  # type: ignore[assignment]
    writer.add_pull(_records(0, 10), SOURCE_TOPIC, "src-a", 0, "src")
    report = writer.finish()
    queue = MessageQueue(topic, "rs-a", 0)
    stored = _read(target, queue)
    assert _positions(stored) == list(range(10))
    assert [m.properties[POSITION_PROPERTY] for m in stored] == [format_position("src", SOURCE, o) for o in range(10)]
    assert (report.duplicates_avoided, report.delivered, report.foreign_in_tail) == (4, 6, 0)
    mapped = {row.source_first_offset + k: row.target_first_offset + k for row in report.offset_map
              for k in range(row.messages)}
    assert mapped == {m.queue_offset: m.queue_offset for m in stored} and len(mapped) == 10


def test_a_lost_answer_with_the_targets_own_producer_writing_meanwhile(target: LocalCluster) -> None:
    topic = _topic(target)
    writer = _writer(target, topic)
    lost_at: list[MessageQueue] = []
    with Producer(target.namesrv_addr, "foreign-pg") as foreign:

        def meanwhile(queue: MessageQueue) -> None:  # between a stored send and its retry: the target's own messages
            lost_at.append(queue)
            foreign.send(new_message(topic, b"own", keys="own"), queue)
            foreign.send(new_message(topic, b"other-link", properties={POSITION_PROPERTY: "elsewhere/T/b/0/3"}), queue)

        writer.producer = AnswerLost(writer.producer, {0, 2}, meanwhile)  # type: ignore[assignment]
        writer.add_pull(_records(0, 8), SOURCE_TOPIC, "src-a", 0, "src")
        writer.add_pull(_records(8, 4), SOURCE_TOPIC, "src-a", 0, "src")
        report = writer.finish()
    stored = _read(target, MessageQueue(topic, "rs-a", 0))
    assert sorted(_positions([m for m in stored if m.body.startswith(b"m")])) == list(range(12))
    assert len(stored) == 12 + 2 * len(lost_at)
    assert sum(m.body == b"own" for m in stored) == sum(m.body == b"other-link" for m in stored) == len(lost_at) > 0
    assert report.duplicates_avoided == 8 and report.foreign_in_tail >= 2
    mapped = {row.source_first_offset + k: row.target_first_offset + k for row in report.offset_map
              for k in range(row.messages)}
    assert {o: stored[at].body for o, at in mapped.items()} == {o: f"m{o}".encode() for o in range(12)}


def test_a_re_run_task_sends_only_what_its_earlier_run_did_not_and_a_first_run_reads_nothing(
        target: LocalCluster, tmp_path: Path) -> None:
    topic = _topic(target)
    first = _writer(target, topic)
    first.add_pull(_records(0, 6), SOURCE_TOPIC, "src-a", 0, "src")
    done = first.finish()
    assert (done.tail_read, done.duplicates_avoided) == (0, 0)  # the steady state reads nothing
    again = _writer(target, topic)
    again.check_all = True
    again.add_pull(_records(0, 10), SOURCE_TOPIC, "src-a", 0, "src")
    report = again.finish()
    stored = _read(target, MessageQueue(topic, "rs-a", 0))
    assert _positions(stored) == list(range(10))
    assert (report.duplicates_avoided, report.delivered) == (6, 4)
    mapped = {row.source_first_offset + k: row.target_first_offset + k for row in report.offset_map
              for k in range(row.messages)}
    assert mapped == {o: o for o in range(10)}
