"""The sink's recovery check as pure decisions (connectors.replication.resend_check) and the position property it
reads (connectors.replication.source_position): property tests against the plain truth of what a tail holds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_store.client import MessageQueue
from broker_store.protocol.errors import (
    FlushSlaveTimeoutError,
    MessageIllegalError,
    RequestTimeoutError,
    RetriableSystemError,
    SystemBusyError,
    TransportError,
)
from connectors.core.spark_checkpoint import batches_sent_before
from connectors.replication.resend_check import TailEntry, TailIndex, may_have_stored, plan_resend
from connectors.replication.source_position import SourcePosition, format_position, parse_position

TARGET = MessageQueue("T", "dst-b", 1)
QUEUES = [MessageQueue("Orders", "broker-a", 0), MessageQueue("Orders", "broker-a", 1),
          MessageQueue("Other", "b/with/slashes", 0)]

clusters = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True)
topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,10}", fullmatch=True)
brokers = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(clusters, topics, brokers, st.integers(0, 1 << 20), st.integers(0, (1 << 63) - 1))
def test_a_position_reads_back_as_written(cluster: str, topic: str, broker: str, queue_id: int, offset: int) -> None:
    queue = MessageQueue(topic, broker, queue_id)
    assert parse_position(format_position(cluster, queue, offset)) == SourcePosition(cluster, queue, offset)


def test_values_not_in_the_format_name_no_position() -> None:
    for value in (None, "", "src", "src/T/b/1", "src/T/b/x/1", "src/T/b/1/-3", "/T/b/1/2", "src//b/1/2",
                  "src/T//1/2", "src/T/b/1/²"):
        assert parse_position(value) is None, value
    assert parse_position("src/T/a/b/1/2") == SourcePosition("src", MessageQueue("T", "a/b", 1), 2)


def test_only_answers_given_before_storing_mean_nothing_was_stored() -> None:
    assert not may_have_stored(SystemBusyError(2, "busy"))
    assert not may_have_stored(MessageIllegalError(13, "too big"))
    for unknown in (RequestTimeoutError("no answer"), TransportError("reset"), FlushSlaveTimeoutError(12, "slow"),
                    RetriableSystemError(1, "in sync replicas not enough")):
        assert may_have_stored(unknown), unknown


def entry(target_offset: int, cluster: str | None, queue: MessageQueue, offset: int) -> TailEntry:
    return TailEntry(target_offset, None if cluster is None else SourcePosition(cluster, queue, offset))


# A target queue's history: earlier committed batches of this link (source offsets below FIRST), then what earlier
# attempts of this task stored (any subset of the task's positions, some twice, in any order), with foreign
# messages (the target's own producers, another cluster's link) anywhere.
FIRST = {QUEUES[0]: 100, QUEUES[1]: 50}
task_positions = st.lists(st.tuples(st.sampled_from(QUEUES[:2]), st.integers(0, 40)), max_size=40)
foreign = st.one_of(st.none(), st.just("other"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(QUEUES[:2]), st.integers(0, 49)), min_size=0, max_size=10),
       task_positions, st.lists(foreign, max_size=10), st.randoms(use_true_random=False),
       st.integers(1, 7), task_positions)
def test_reading_down_to_the_anchors_finds_every_copy_an_earlier_attempt_stored(
        committed: list[tuple[MessageQueue, int]], stored: list[tuple[MessageQueue, int]],
        strangers: list[str | None], rnd: random.Random, window: int, batch: list[tuple[MessageQueue, int]]) -> None:
    history: list[tuple[str | None, MessageQueue, int]] = [("src", q, FIRST[q] - 1 - o) for q, o in sorted(committed)]
    attempt = [("src", q, FIRST[q] + o) for q, o in stored]
    rnd.shuffle(attempt)
    tail: list[tuple[str | None, MessageQueue, int]] = [*attempt]
    for s in strangers:
        tail.insert(rnd.randint(0, len(tail)), (s, QUEUES[2], 7))
    log = history + tail
    base = 1000
    entries = [entry(base + i, c, q, o) for i, (c, q, o) in enumerate(log)]
    end, floor = base + len(log), base
    index = TailIndex.empty_at(TARGET, "src", end)
    wanted = {q: FIRST[q] for q, _ in batch} or {QUEUES[0]: FIRST[QUEUES[0]]}
    while index.needs_older(wanted, floor):
        start = max(floor, index.low - window)
        index.add_older(start, [e for e in entries if start <= e.target_offset < index.low])
    # every copy the attempt stored of a wanted queue was read, at its lowest target offset
    truth: dict[tuple[MessageQueue, int], int] = {}
    for e in entries:
        if e.position is not None and e.position.cluster == "src":
            truth.setdefault((e.position.queue, e.position.offset), e.target_offset)
    positions = [(q, FIRST[q] + o) for q, o in batch]
    plan = plan_resend(positions, index.landed)
    assert sorted([i for i, _ in plan.landed] + plan.send) == list(range(len(positions)))
    for i, at in plan.landed:
        assert truth[positions[i]] == at
    for i in plan.send:
        assert positions[i] not in truth
    # the tail is read down to the newest committed copy of each wanted queue (its anchor), and at most one window
    # past the lowest of them; without an anchor, down to the queue's first offset
    anchors = [max((base + i for i, (c, q, _) in enumerate(history) if q == w), default=floor) for w in wanted]
    assert floor <= index.low <= min(anchors) and (index.low == floor or index.low > min(anchors) - window)
    assert index.foreign == sum(1 for e in entries if index.low <= e.target_offset < end and (
        e.position is None or e.position.cluster != "src"))


def test_a_refresh_reads_what_was_stored_since() -> None:
    index = TailIndex.empty_at(TARGET, "src", 10)
    index.add_older(5, [entry(o, "src", QUEUES[0], o) for o in range(5, 10)])
    index.add_newer(13, [entry(o, "src", QUEUES[0], o) for o in range(8, 13)])  # the overlap is not counted twice
    assert (index.low, index.high) == (5, 13)
    assert index.landed == {(QUEUES[0], o): o for o in range(5, 13)}
    index.add_newer(12, [entry(12, None, QUEUES[0], 0)])  # not past high: nothing
    assert index.foreign == 0


def test_a_copy_stored_twice_maps_to_the_first() -> None:
    index = TailIndex.empty_at(TARGET, "src", 4)
    index.add_older(0, [entry(0, "src", QUEUES[0], 100), entry(1, "src", QUEUES[0], 101),
                        entry(2, "src", QUEUES[0], 100), entry(3, "other", QUEUES[0], 101)])
    assert plan_resend([(QUEUES[0], 100), (QUEUES[0], 101), (QUEUES[0], 102)], index.landed) == ([2], [(0, 0), (1, 1)])
    assert index.foreign == 1


def test_the_batch_a_restart_re_runs_is_the_one_whose_write_was_planned_before(tmp_path: Path) -> None:
    """Spark builds the writer when it plans each batch's write: a batch planned for the first time was not sent
    before; planned again under the same id (a restart), it may have been."""
    checkpoint = tmp_path / "ck"
    assert batches_sent_before(str(checkpoint), False) == frozenset()  # a new query: nothing sent before
    assert batches_sent_before(str(checkpoint), True) == {0}  # its offsets resume from the link's tables
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text("v1\n")
    assert batches_sent_before(str(checkpoint), False) == frozenset()  # batch 0 planned
    assert batches_sent_before(str(checkpoint), True) == {0}  # a fresh checkpoint resuming from the tables
    for batch in (0, 1):
        (checkpoint / "commits" / str(batch)).write_text("v1\n")
        (checkpoint / "offsets" / str(batch + 1)).write_text("v1\n")
        assert batches_sent_before(f"file:{checkpoint}", True) == frozenset()  # planned once: steady state
    assert batches_sent_before(str(checkpoint), True) == {2}  # batch 2 planned again: a restart re-runs it
    assert sorted(p.name for p in (checkpoint / "rocketmq_sink_attempts").iterdir()) == ["2"]  # older marks go
    (checkpoint / "commits" / "2").write_text("v1\n")
    assert batches_sent_before(str(checkpoint), True) == frozenset()
    assert batches_sent_before("s3://bucket/ck", True) == frozenset()  # unreadable here: only task retries


def test_a_task_may_run_again_when_spark_retries_it_or_its_batch_was_planned_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    from connectors.replication.partition_writer import BATCH_ID_PROPERTY, may_run_again

    class Context:
        def __init__(self, attempt: int, batch: str | None) -> None:
            self.attempt, self.batch = attempt, batch

        def attemptNumber(self) -> int:
            return self.attempt

        def getLocalProperty(self, key: str) -> str | None:
            return self.batch if key == BATCH_ID_PROPERTY else None

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: None))
    assert not may_run_again({3})  # not in a Spark task
    for attempt, batch, expected in ((0, "3", True), (0, "4", False), (1, "4", True), (0, None, False)):
        context = Context(attempt, batch)
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls, c=context: c))
        assert may_run_again({3}) is expected, (attempt, batch)
