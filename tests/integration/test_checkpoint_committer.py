"""The checkpoint connector's source snapshot and target commit against real broker processes (no Spark):
GET_ALL_CONSUMER_OFFSET snapshots, UPDATE_CONSUMER_OFFSET never backwards, a group online on the target left
alone, an unknown group and a vanished target topic reported instead of failing. One cluster plays both
sides (source topic ``Src*``, target topic ``Dst*``); the link's progress is given as offset-map runs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from connectors.checkpoint.committer import CheckpointCommitter
from connectors.checkpoint.link_state import LinkProgress
from connectors.checkpoint.snapshot import ConditionKind, GroupOffset, GroupOffsetPoller, GroupOffsetSnapshot
from connectors.checkpoint.tables import CheckpointOutcome
from connectors.checkpoint.translation import OffsetTranslator, Run
from connectors.core.sync_settings import CHECKPOINT_TOPIC, GroupSelection
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from tests.support.processes import GroupSpec, LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("checkpoint-cluster"), "ck", [GroupSpec("ck-a")]) as started:
        yield started


def test_snapshot_translate_commit_and_conditions(cluster: LocalCluster) -> None:
    addr = cluster.namesrv_addr
    suffix = uuid.uuid4().hex[:6]
    src, dst, gone = f"Src{suffix}", f"Dst{suffix}", f"Gone{suffix}"
    group, online_group = f"app{suffix}", f"live{suffix}"
    with Admin(addr) as admin, Producer(addr, "ck-pg") as producer:
        for topic in (src, dst, gone):
            admin.create_topic(topic, 1, cluster="ck")
            admin.wait_for_route(topic, timeout=10)
        for topic in (src, dst):
            producer.send_batch([new_message(topic, f"m{i}".encode()) for i in range(10)],
                                MessageQueue(topic, "ck-a", 0))
        sq, tq = MessageQueue(src, "ck-a", 0), MessageQueue(dst, "ck-a", 0)
        admin.update_consumer_offset(group, sq, 6)
        admin.update_consumer_offset(online_group, sq, 4)
        admin.update_consumer_offset(group, MessageQueue(gone, "ck-a", 0), 0)

        mapper = TopicMapper(TopicMappingConfig.model_validate(
            {"explicit": [{"source": src, "target": dst}, {"source": gone, "target": f"Nowhere{suffix}"}]}))
        poller = GroupOffsetPoller(admin, "ck", mapper, GroupSelection(explicit=(group, online_group, "ghost")),
                                   interval=1.0)
        snapshot = poller.next_item()
        assert {(o.group, o.queue.topic, o.offset) for o in snapshot.offsets} == {
            (group, src, 6), (online_group, src, 4), (group, gone, 0)}
        assert [(c.kind, c.subject) for c in snapshot.conditions] == [(ConditionKind.UNKNOWN_GROUP, "ghost")]

        source_q = MessageQueue(src, "ck-a", 0)
        target_q = MessageQueue(dst, "ck-a", 0)
        # offsets 1 and 3 skipped (loop guard, tag filter): three runs
        translator = OffsetTranslator([(source_q, Run(0, 0, target_q, 0, 0, 1)),
                                       (source_q, Run(2, 2, target_q, 2, 2, 1)),
                                       (source_q, Run(4, 9, target_q, 4, 9, 6)),
                                       (MessageQueue(gone, "ck-a", 0),
                                        Run(0, 0, MessageQueue(f"Nowhere{suffix}", "ck-a", 0), 0, 0, 1))])
        progress = LinkProgress(translator, {source_q: 10, MessageQueue(gone, "ck-a", 0): 1}, 2)
        committer = CheckpointCommitter(link="l", source_cluster="ck", target_cluster="ck", target_admin=admin,
                                        target_producer=producer, progress=lambda: progress)
        with PullConsumer(addr, online_group, heartbeat_interval=1.0) as live:
            live.pull(tq, 0, 1)
            live.heartbeat()
            report = committer.apply(snapshot)
        outcomes = {(r.group, r.source_topic): r.outcome for r in report.rows}
        assert outcomes == {
            (group, src): CheckpointOutcome.COMMITTED,
            (group, gone): CheckpointOutcome.TARGET_ERROR,     # the target topic does not exist
            (online_group, src): CheckpointOutcome.GROUP_ONLINE,
            ("ghost", ""): CheckpointOutcome.UNKNOWN_GROUP,
        }
        assert admin.consumer_offset(group, tq) == 6
        assert admin.consumer_offset(online_group, tq) is None
        # both groups are at 4 or later: the two runs below are folded into one summary
        assert translator.runs(source_q) == (Run(0, 2, target_q, 0, 2, 2, summary=True), Run(4, 9, target_q, 4, 9, 6))

        # never backwards: the source group rewinds, the target keeps 6
        admin.update_consumer_offset(group, sq, 2)
        again = committer.apply(poller.next_item())
        rewound = {(r.outcome, r.target_offset, r.exact) for r in again.rows
                   if r.group == group and r.source_topic == src}
        assert rewound == {(CheckpointOutcome.CURRENT, 0, False)}  # inside the summary: conservative, inexact
        assert admin.consumer_offset(group, tq) == 6
        assert admin.consumer_offset(online_group, tq) == 4  # its consumer left: now it is checkpointed

        with PullConsumer(addr, "ck-reader", heartbeat_interval=None) as reader:
            pulled = reader.pull(MessageQueue(CHECKPOINT_TOPIC, "ck-a", 0), 0, 32)
        assert pulled.status is PullStatus.FOUND
        bodies = {b["group"]: b for b in (json.loads(m.body) for m in pulled.messages)}
        assert bodies[group]["offsets"] == [{"topic": dst, "brokerName": "ck-a", "queueId": 0, "offset": 6}]
        assert bodies[group]["link"] == "l" and bodies[online_group]["offsets"][0]["offset"] == 4


def test_subscription_groups_survive_a_restart_and_topics_can_be_deleted(cluster: LocalCluster) -> None:
    """The broker requests the config connector needs: UPDATE_AND_CREATE / GET_ALL / DELETE_SUBSCRIPTIONGROUP
    (persisted) and DELETE_TOPIC_IN_BROKER + DELETE_TOPIC_IN_NAMESRV."""
    addr = cluster.namesrv_addr
    group, topic = f"sg{uuid.uuid4().hex[:6]}", f"Del{uuid.uuid4().hex[:6]}"
    with Admin(addr) as admin:
        admin.create_subscription_group({"groupName": group, "retryMaxTimes": 3, "custom": "kept"}, cluster="ck")
        admin.create_topic(topic, 2, cluster="ck")
        admin.wait_for_route(topic, timeout=10)
    cluster.primary("ck-a").restart()
    cluster.wait_registered()
    with Admin(addr) as admin:
        (broker_addr,) = admin.primary_addrs("ck").values()
        stored = admin.all_subscription_groups(broker_addr)[group]
        assert stored["retryMaxTimes"] == 3 and stored["custom"] == "kept" and stored["consumeEnable"] is True
        admin.delete_subscription_group(group, cluster="ck")
        assert group not in admin.all_subscription_groups(broker_addr)
        assert topic in admin.all_topic_config(broker_addr)
        admin.delete_topic(topic, cluster="ck")
        assert topic not in admin.all_topic_config(broker_addr)
        assert topic not in admin.topic_list()


def test_an_unreachable_source_is_a_reported_condition_not_an_error() -> None:
    with Admin("127.0.0.1:1", request_timeout=0.5) as admin:  # nothing listens on loopback port 1
        poller = GroupOffsetPoller(admin, "src", TopicMapper(TopicMappingConfig(all_topics=True)), GroupSelection(),
                                   interval=1.0)
        snapshot = poller.next_item()
    assert snapshot.offsets == () and [c.kind for c in snapshot.conditions] == [ConditionKind.SOURCE_UNREACHABLE]


def test_an_unreachable_target_is_a_reported_target_error_not_an_error() -> None:
    """The target's name server down: every translated queue is a ``target_error`` row (the checkpoint is
    recorded, not skipped), named in the WARNING's problems, and the next checkpoint simply tries again."""
    source_q = MessageQueue("Orders", "src-a", 0)
    translator = OffsetTranslator([(source_q, Run(0, 9, MessageQueue("Orders", "dst-a", 0), 0, 9, 10))])
    progress = LinkProgress(translator, {source_q: 10}, 1)
    snapshot = GroupOffsetSnapshot(1, (GroupOffset("app", source_q, 6), GroupOffset("app2", source_q, 3)))
    with Admin("127.0.0.1:1", request_timeout=0.5) as admin:  # nothing listens on loopback port 1
        committer = CheckpointCommitter(link="l", source_cluster="s", target_cluster="t", target_admin=admin,
                                        target_producer=None, progress=lambda: progress)
        reports = [committer.apply(snapshot) for _ in range(2)]
    for report in reports:
        assert [(r.group, r.outcome) for r in report.rows] == [("app", CheckpointOutcome.TARGET_ERROR),
                                                               ("app2", CheckpointOutcome.TARGET_ERROR)]
        problems = report.problems()
        assert len(problems) == 2 and all(p.startswith("target_error app") for p in problems), problems
        assert all("target cluster t: " in p and "127.0.0.1:1" in p for p in problems), problems


def test_a_vanished_checkpoint_topic_is_created_again(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The target deletes ``rmq_sys_replicator_checkpoint`` (no auto-create on its broker): one checkpoint
    message may be reported as not produced, the next checkpoint creates the topic again."""
    with LocalCluster(tmp_path_factory.mktemp("checkpoint-topic"), "ct", auto_create_topic_enable=False) as cluster, \
            Admin(cluster.namesrv_addr) as admin, Producer(cluster.namesrv_addr, "ct-pg") as producer:
        source_q, target_q = MessageQueue("Src", "ct-a", 0), MessageQueue("Dst", "ct-a", 0)
        admin.create_topic("Dst", 1)
        admin.wait_for_route("Dst", timeout=10)
        progress = LinkProgress(OffsetTranslator([(source_q, Run(0, 99, target_q, 0, 99, 100))]), {source_q: 100}, 1)
        committer = CheckpointCommitter(link="l", source_cluster="s", target_cluster="ct", target_admin=admin,
                                        target_producer=producer, progress=lambda: progress)

        def checkpoint(offset: int) -> dict[str, str]:
            return committer.apply(GroupOffsetSnapshot(offset, (GroupOffset("app", source_q, offset),))).topic_errors

        assert checkpoint(1) == {}
        admin.delete_topic(CHECKPOINT_TOPIC)
        errors = [checkpoint(offset) for offset in (2, 3, 4)]
        assert errors[-1] == {}, errors
        assert admin.consumer_offset("app", MessageQueue("Dst", "ct-a", 0)) == 4
        assert admin.wait_for_route(CHECKPOINT_TOPIC, 10).queue_datas
