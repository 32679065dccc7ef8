"""Orphan topics at a promotion, without sockets: topics with messages but no config get one (queue count from
their highest queue id, read-write, persisted, listeners told), unless broker-internal, emptied by retention, or
deleted on the primary before this broker's last copy of its topic table; the transition adopts them while fenced,
after the ConsumeQueues are rebuilt and before the primary side starts.

The same path with real processes: tests/integration/test_topic_failover.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_store.broker.orphan_topics import adopt_orphan_topics, orphan_topic_configs
from broker_store.broker.role import BrokerRole, RoleStage, RoleState
from broker_store.broker.role_transition import RoleTransition
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import ManualClock
from broker_store.protocol.codes import PERM_READ, PERM_WRITE
from broker_store.protocol.topic import TopicConfig, TopicConfigTable
from broker_store.store import MessageStore, StoreConfig
from broker_store.store.delay_levels import SCHEDULE_TOPIC
from tests.unit.test_broker_role import Steps, settle

RW = PERM_READ | PERM_WRITE


def test_the_rule_adopts_unlisted_topics_with_messages_from_the_table_offset_on() -> None:
    queues = {"Listed": [0, 1], "New": [0, 3], "%RETRY%g": [0], "Deleted": [0], "Emptied": [2],
              SCHEDULE_TOPIC: [2, 5]}
    newest = {"New": 900, "%RETRY%g": 1000, "Deleted": 400, "Emptied": None}
    got = orphan_topic_configs(queues, {"Listed"}, newest.__getitem__, table_log_offset=800, log_end=1100)
    assert got.adopt == [TopicConfig("%RETRY%g", 1, 1, RW), TopicConfig("New", 4, 4, RW)]
    assert [topic for topic, _ in got.left] == ["Deleted", "Emptied", SCHEDULE_TOPIC]
    why = dict(got.left)
    assert "predates" in why["Deleted"] and "offset 400" in why["Deleted"]
    # unknown offset (no round since start), or one past the log end (the log was cut since): every orphan
    for mark in (None, 1200):
        again = orphan_topic_configs(queues, {"Listed"}, newest.__getitem__, table_log_offset=mark, log_end=1100)
        assert [tc.topic_name for tc in again.adopt] == ["%RETRY%g", "Deleted", "New"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    made = MessageStore(StoreConfig(store_dir=tmp_path / "store", commit_log_segment_size=64 * 1024,
                                    flush_interval_ms=50, retention_interval_ms=0),
                        store_host="10.0.0.1:10911", clock=ManualClock())
    made.start()
    yield made
    made.shutdown()


def put(store: MessageStore, topic: str, queue_id: int) -> int:
    result = store.put_message(topic, queue_id, b"m", b"", tags_code=0, born_timestamp=0, born_host="10.0.0.2:1")
    return result.wrote_offset


def test_adoption_persists_registers_and_warns_once_per_topic(store: MessageStore, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    topics = TopicConfigManager(tmp_path / "topics.json", auto_create_topic_enable=False, default_topic_queue_nums=8,
                                clock=clock)
    topics.load()
    topics.update(TopicConfig("Old", 8, 8, RW))
    changed: list[str] = []
    topics.change_listeners.append(lambda tc: changed.append(tc.topic_name))
    put(store, "Old", 0)
    put(store, "Deleted", 0)
    mark = store.max_physical_offset
    put(store, "Heartbeat", 0)
    put(store, "Heartbeat", 2)
    with caplog.at_level(logging.INFO, logger="broker_store.broker.orphan_topics"):
        adopted = adopt_orphan_topics(store, topics, mark, "broker-a")
    assert adopted == [TopicConfig("Heartbeat", 3, 3, RW)]
    assert changed == ["Heartbeat"]  # the server re-registers: routes list it
    reloaded = TopicConfigManager(tmp_path / "topics.json", auto_create_topic_enable=False,
                                  default_topic_queue_nums=8, clock=clock)
    reloaded.load()
    assert reloaded.select("Heartbeat") == TopicConfig("Heartbeat", 3, 3, RW)
    assert reloaded.select("Deleted") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "topic Heartbeat" in warnings[0] and "check its settings" in warnings[0]
    assert any("topic Deleted" in r.getMessage() and "deleted" in r.getMessage() for r in caplog.records)
    assert adopt_orphan_topics(store, topics, mark, "broker-a") == []  # nothing left to adopt


def test_the_promotion_adopts_after_the_rebuild_and_before_the_primary_side_starts() -> None:
    async def main() -> None:
        state = RoleState(1)
        steps = Steps(state)
        transition = RoleTransition(state, steps, steps,
                                    adopt_orphans=lambda: steps.calls.append(("adopt", state.stage)))
        change = asyncio.ensure_future(transition.change_role(BrokerRole.PRIMARY, epoch=2))
        for name in ("stop_following", "truncate", "epoch entry 2@4096", "rebuild"):
            await settle()
            steps.release(name)
        await settle()
        assert steps.calls[-2:] == [("adopt", RoleStage.PROMOTING), ("become PRIMARY", RoleStage.PROMOTING)]
        steps.release("become PRIMARY")
        await change
        assert state.stage is RoleStage.PRIMARY

    asyncio.run(main())


def test_a_table_copy_taken_before_the_topic_existed_adopts_it(store: MessageStore, tmp_path: Path) -> None:
    """The CI case: the replica's last copy predates the topic's creation, so its messages lie past the mark."""
    topics = TopicConfigManager(tmp_path / "topics.json", auto_create_topic_enable=False, default_topic_queue_nums=8,
                                clock=ManualClock())
    topics.load()
    topics.replace_all(TopicConfigTable({"Old": TopicConfig("Old", 4, 4, RW)}, topics.data_version))
    put(store, "Old", 0)
    mark = store.max_physical_offset
    put(store, "rmq_sys_replicator_heartbeat", 0)
    assert [tc.topic_name for tc in adopt_orphan_topics(store, topics, mark, "b")] == ["rmq_sys_replicator_heartbeat"]
    assert topics.select("rmq_sys_replicator_heartbeat") is not None
