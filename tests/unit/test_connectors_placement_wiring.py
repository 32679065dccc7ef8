"""Queue placement wired to the link: the placements table, the driver's planner for ``rowFormat=ranges``
and the executor's placement for the other formats. Decisions persist, are reloaded, never move
whatever either topic's queue count does, and new queues spread evenly. The real-process counterpart is
tests/spark/test_placement.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker_store.client import MessageQueue
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import TopicNotExistError
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from connectors.replication import placement as executor_placement
from connectors.replication.placement import QueuePlacement as ExecutorPlacement
from connectors.replication.placement_planner import PlacedRange, RangesPlacementPlanner, placement_columns
from connectors.replication.placement_table import DRIVER, PLACEMENTS, PlacementTable
from connectors.replication.planning import QueueRange
from connectors.replication.queue_placement import PRESERVED, Placement, TargetQueue
from connectors.replication.writer_options import SinkOptions


class Topics:
    """Queue lists the tests change between batches."""

    def __init__(self, source: int, target: int) -> None:
        self.source, self.target = source, target

    def source_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "src-a", i) for i in range(self.source)]

    def target_queues(self, topic: str) -> list[TargetQueue]:
        return [TargetQueue("dst-a", i) for i in range(self.target)]


def planner(tmp_path: Path, topics: Topics) -> RangesPlacementPlanner:
    mapper = TopicMapper(TopicMappingConfig.model_validate({"explicit": [{"source": "A", "target": "B"}]}))
    return RangesPlacementPlanner(link="l", mapper=mapper, preserve=True,
                                  table=PlacementTable(tmp_path / "l", source_cluster="src"),
                                  source_queues=topics.source_queues, target_queues=topics.target_queues)


def ranges(n: int) -> list[QueueRange]:
    return [QueueRange("A", "src-a", i, 0, 10) for i in range(n)]


def targets(placed: list[QueueRange]) -> dict[int, int | None]:
    return {r.queue_id: getattr(r, "target_queue_id", None) for r in placed}


def test_table_round_trip_first_row_stands(tmp_path: Path) -> None:
    table = PlacementTable(tmp_path / "l", source_cluster="src")
    q = MessageQueue("A", "src-a", 0)
    table.record([Placement(q, "B", TargetQueue("dst-a", 2), PRESERVED)], DRIVER)
    table.record([Placement(q, "B", TargetQueue("dst-a", 0), PRESERVED)], DRIVER)  # a re-made decision
    PlacementTable(tmp_path / "l", source_cluster="other").record(
        [Placement(q, "B", TargetQueue("dst-a", 1), PRESERVED)], DRIVER)
    from connectors.replication.queue_placement import LinkPlacements
    loaded = LinkPlacements(PlacementTable(tmp_path / "l", source_cluster="src").load())
    assert loaded.get(q, "B") == Placement(q, "B", TargetQueue("dst-a", 2), PRESERVED)


def test_planner_growth_shrink_and_restart_never_move_a_queue(tmp_path: Path) -> None:
    topics = Topics(source=4, target=4)
    first = targets(planner(tmp_path, topics).place(ranges(4)))
    assert first == {0: 0, 1: 1, 2: 2, 3: 3}  # equal counts: positions kept
    topics.source = 8   # the source topic grows ...
    topics.target = 3   # ... and the target topic's write queues shrink
    p = planner(tmp_path, topics)  # a restart: decisions come from the table
    grown = targets(p.place(ranges(8)))
    assert {q: grown[q] for q in range(4)} == first
    assert Counter(grown[q] for q in range(4, 8)) == Counter({0: 2, 1: 1, 2: 1})  # least loaded, 3 targets
    again = targets(planner(tmp_path, Topics(source=8, target=5)).place(ranges(8)))
    assert again == grown


def test_eight_new_source_queues_on_three_target_queues_are_spread(tmp_path: Path) -> None:
    placed = targets(planner(tmp_path, Topics(source=8, target=3)).place(ranges(8)))
    assert sorted(Counter(placed.values()).values()) == [2, 3, 3]


def test_placed_ranges_carry_the_target_and_unlistable_topics_stay_unplaced(tmp_path: Path) -> None:
    from broker_store.protocol.codes import ResponseCode
    from broker_store.protocol.errors import TopicNotExistError

    topics = Topics(source=2, target=2)
    p = planner(tmp_path, topics)

    def missing(topic: str) -> list[TargetQueue]:
        raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no route")

    p._target_queues = missing
    unplaced = p.place(ranges(2))
    assert [type(r) for r in unplaced] == [QueueRange, QueueRange]
    p._target_queues = topics.target_queues
    placed = p.place(ranges(2))
    assert all(isinstance(r, PlacedRange) for r in placed)
    columns = placement_columns([*placed, QueueRange("C", "src-a", 0, 0, 1)])
    assert columns == {"targetTopic": ["B", "B", None], "targetBroker": ["dst-a", "dst-a", None],
                       "targetQueueId": [0, 1, None]}


def test_planner_logs_each_decision_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = planner(tmp_path, Topics(source=2, target=2))
    with caplog.at_level("INFO"):
        p.place(ranges(2))
        p.place(ranges(2))
    assert len([r for r in caplog.records if "queue placement" in r.getMessage()]) == 2


def test_planner_places_every_queue_of_a_topic_with_its_first_range_in_one_write(tmp_path: Path) -> None:
    """Queues taking turns under maxMessagesPerTrigger reach the planner a few at a time: the first batch decides
    the whole topic (one Delta commit), later batches find their queues decided."""
    p = planner(tmp_path, Topics(source=6, target=6))
    table = p.table
    assert targets(p.place(ranges(2))) == {0: 0, 1: 1}
    version = table.open(PLACEMENTS).version()  # type: ignore[union-attr]
    later = [QueueRange("A", "src-a", i, 0, 10) for i in (4, 5)]
    assert targets(p.place(later)) == {4: 4, 5: 5}
    assert table.open(PLACEMENTS).version() == version  # type: ignore[union-attr]
    assert len(table.load()) == 6


class FakeProducer:
    def __init__(self, queues: int) -> None:
        self.queues = queues

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "dst-a", i) for i in range(self.queues)]


def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, source: int, target: int,
             delta: bool = True) -> ExecutorPlacement:
    route = SimpleNamespace()
    monkeypatch.setattr(executor_placement, "executor_admin", lambda _n, _c, _tls=None: SimpleNamespace(
        topic_route=lambda topic: route))
    monkeypatch.setattr(executor_placement, "subscribe_queues",
                        lambda topic, _r: [MessageQueue(topic, "src-a", i) for i in range(source)])
    monkeypatch.setattr(executor_placement, "publish_queues",
                        lambda topic, _r: [MessageQueue(topic, "dst-a", i) for i in range(target)])
    monkeypatch.setattr(executor_placement, "_seen_target_queues", {})
    extra = {"delta_location": str(tmp_path), "link": "l", "checkpoint_location": str(tmp_path / "cp")} if delta else {}
    options = SinkOptions(namesrv="127.0.0.1:1", target_cluster="dst", source_cluster="src",
                          source_namesrv="127.0.0.1:2", **extra)
    return ExecutorPlacement(options, FakeProducer(target))  # type: ignore[arg-type]


def test_executor_uses_the_decided_placements_and_decides_a_whole_topic_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = PlacementTable(tmp_path / "l", source_cluster="src")
    table.record([Placement(MessageQueue("A", "src-a", 0), "B", TargetQueue("dst-a", 3), PRESERVED)], DRIVER)
    task1 = executor(tmp_path, monkeypatch, source=8, target=3)
    assert task1.place("B", MessageQueue("A", "src-a", 0)) == MessageQueue("B", "dst-a", 3)  # not writable now: kept
    q5 = task1.place("B", MessageQueue("A", "src-a", 5))
    assert len(task1.decided) == 7  # every undecided queue of the topic, so other tasks decide alike
    task2 = executor(tmp_path, monkeypatch, source=8, target=3)
    assert task2.place("B", MessageQueue("A", "src-a", 5)) == q5
    assert [p.target for p in task2.decided] == [p.target for p in task1.decided]
    loads = Counter(p.target.queue_id for p in task1.decided)
    assert max(loads.values()) - min(loads.values()) <= 1


def test_executor_without_tables_keeps_the_stateless_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task = executor(tmp_path, monkeypatch, source=4, target=4, delta=False)
    assert [task.place("B", MessageQueue("A", "src-a", i)).queue_id for i in range(4)] == [0, 1, 2, 3]  # type: ignore[union-attr]
    assert task.decided == []


def test_planner_creates_a_missing_target_topic_before_placing_its_first_batch(tmp_path: Path) -> None:
    """With createTopicsLikeSource, a target topic the target lacks is created (config sync's rule, stubbed
    here: connectors.config_sync.creation) and the batch placed against the queues it was created with."""
    topics = Topics(source=2, target=0)
    created: list[str] = []

    def target_queues(topic: str) -> list[TargetQueue]:
        if topic not in created:
            raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no route for {topic}")
        return topics.target_queues(topic)

    def create(topic: str) -> bool:
        created.append(topic)
        topics.target = topics.source  # created like the source
        return True

    mapper = TopicMapper(TopicMappingConfig.model_validate({"explicit": [{"source": "A", "target": "B"}]}))
    placer = RangesPlacementPlanner(link="l", mapper=mapper, preserve=True,
                                    table=PlacementTable(tmp_path / "l", source_cluster="src"),
                                    source_queues=topics.source_queues, target_queues=target_queues,
                                    create_target_topic=create)
    assert targets(placer.place(ranges(2))) == {0: 0, 1: 1}  # preserved: the counts match
    assert created == ["B"]
    placer.place(ranges(2))
    assert created == ["B"]  # created once


def test_planner_without_creation_leaves_a_missing_topic_to_the_sink(tmp_path: Path) -> None:
    def target_queues(topic: str) -> list[TargetQueue]:
        raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, f"no route for {topic}")

    mapper = TopicMapper(TopicMappingConfig.model_validate({"explicit": [{"source": "A", "target": "B"}]}))
    for create in (None, lambda _topic: False):  # not asked to create, or creation refused / failed
        placer = RangesPlacementPlanner(link="l", mapper=mapper, preserve=True,
                                        table=PlacementTable(tmp_path / "l", source_cluster="src"),
                                        source_queues=Topics(2, 0).source_queues, target_queues=target_queues,
                                        create_target_topic=create)
        assert targets(placer.place(ranges(2))) == {0: None, 1: None}


def test_planner_grows_the_target_before_placing_new_source_queues(tmp_path: Path) -> None:
    """The source topic grows 4 -> 8 queues before config sync's round grew the target: the planner grows the
    target topic like the source first (stubbed: connectors.config_sync.creation.TargetTopicCreator.grow), so
    the new source queues get target queues of their own; queues already decided are not asked about again."""
    topics = Topics(source=4, target=4)
    grown: list[str] = []

    def grow(topic: str) -> bool:
        grown.append(topic)
        topics.target = topics.source
        return True

    mapper = TopicMapper(TopicMappingConfig.model_validate({"explicit": [{"source": "A", "target": "B"}]}))
    placer = RangesPlacementPlanner(link="l", mapper=mapper, preserve=True,
                                    table=PlacementTable(tmp_path / "l", source_cluster="src"),
                                    source_queues=topics.source_queues, target_queues=topics.target_queues,
                                    grow_target_topic=grow)
    assert targets(placer.place(ranges(4))) == {0: 0, 1: 1, 2: 2, 3: 3} and grown == []  # enough queues
    topics.source = 8
    placed = targets(placer.place(ranges(8)))
    assert grown == ["B"] and None not in placed.values()
    assert sorted(q for q in placed.values() if q is not None) == list(range(8))  # one target queue per source queue
    placer.place(ranges(8))
    assert grown == ["B"]


def test_planner_shares_when_the_target_cannot_grow(tmp_path: Path) -> None:
    """Growth refused or failed: the new source queues are placed on the queues there are (shared)."""
    topics = Topics(source=8, target=4)
    mapper = TopicMapper(TopicMappingConfig.model_validate({"explicit": [{"source": "A", "target": "B"}]}))
    placer = RangesPlacementPlanner(link="l", mapper=mapper, preserve=True,
                                    table=PlacementTable(tmp_path / "l", source_cluster="src"),
                                    source_queues=topics.source_queues, target_queues=topics.target_queues,
                                    grow_target_topic=lambda _topic: False)
    assert sorted(Counter(targets(placer.place(ranges(8))).values()).values()) == [2, 2, 2, 2]
