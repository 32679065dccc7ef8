"""Broker metadata without sockets: topic table, consumer offsets, subscriptions, client registry,
property editing on the put path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker_store.broker.client_registry import ClientRegistry, decode_heartbeat
from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.long_polling import PullWaiters
from broker_store.broker.send_processor import born_host_of
from broker_store.broker.subscription import SubscriptionParseError, build_subscription
from broker_store.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import ManualClock
from broker_store.protocol.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from broker_store.protocol.errors import ProtocolError, StoreError
from broker_store.protocol.message import tags_hash_code
from broker_store.protocol.route import loads_rocketmq
from broker_store.protocol.topic import DEFAULT_TOPIC, DataVersion, TopicConfig, TopicConfigTable


def _topics(path: Path, *, auto: bool = True, clock: ManualClock | None = None) -> TopicConfigManager:
    return TopicConfigManager(path, auto_create_topic_enable=auto, default_topic_queue_nums=8,
                              clock=clock or ManualClock(wall=1.0))


# -- topics -----------------------------------------------------------------------------------------


def test_topic_table_persists_atomically_with_version(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    clock = ManualClock(wall=1.0)
    mgr = _topics(path, clock=clock)
    mgr.load()
    tbw = mgr.select(DEFAULT_TOPIC)
    assert tbw is not None and tbw.perm == PERM_READ | PERM_WRITE | PERM_INHERIT and tbw.write_queue_nums == 8
    v1 = mgr.data_version
    changes: list[str] = []
    mgr.change_listeners.append(lambda tc: changes.append(tc.topic_name))
    clock.set_time(2.0)
    mgr.update(TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4, perm=6))
    assert changes == ["Orders"]
    assert mgr.data_version.counter == v1.counter + 1 and mgr.data_version.timestamp == 2_000
    on_disk = json.loads(path.read_text())
    assert on_disk["version"] == 1
    assert on_disk["topicConfigTable"]["Orders"]["writeQueueNums"] == 4
    assert not path.with_name("topics.json.tmp").exists()

    again = _topics(path)
    again.load()
    assert again.select("Orders") == mgr.select("Orders")
    assert again.data_version == mgr.data_version


def test_auto_create_off_removes_tbw102_and_refuses_inheritance(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    on = _topics(path)
    on.load()
    off = _topics(path, auto=False)
    off.load()
    assert off.select(DEFAULT_TOPIC) is None
    assert off.create_in_send("New", DEFAULT_TOPIC, 4) is None


def test_create_in_send_inherits_min_queue_count_and_drops_inherit(tmp_path: Path) -> None:
    mgr = _topics(tmp_path / "topics.json")
    mgr.load()
    tc = mgr.create_in_send("New", DEFAULT_TOPIC, 4)
    assert tc is not None
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, PERM_READ | PERM_WRITE)
    big = mgr.create_in_send("Big", DEFAULT_TOPIC, 64)
    assert big is not None and big.write_queue_nums == 8
    # A template without INHERIT creates nothing.
    mgr.update(TopicConfig("Plain", perm=PERM_READ | PERM_WRITE))
    assert mgr.create_in_send("Other", "Plain", 4) is None


def test_corrupt_topic_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text("{not json")
    with pytest.raises(StoreError, match="topics.json"):
        _topics(path).load()
    path.write_text('{"version": 99}')
    with pytest.raises(StoreError, match="format version 99"):
        _topics(path).load()


def test_topic_config_json_missing_fields_take_rocketmq_defaults() -> None:
    """One reading of the TopicConfig JSON for broker, name server and admin client: an absent field is the
    Java default (16/16 queues, perm RW, SINGLE_TAG, no attributes), the table key names the topic."""
    assert TopicConfig.from_json({}, "T") == TopicConfig("T", 16, 16, PERM_READ | PERM_WRITE, "SINGLE_TAG", 0,
                                                         False, {})
    with pytest.raises(ProtocolError, match="malformed topic config T"):
        TopicConfig.from_json({"readQueueNums": "x"}, "T")


def test_topic_table_wire_json_roundtrip() -> None:
    table = TopicConfigTable({"T": TopicConfig("T", 2, 2, 6)}, data_version=DataVersion(5, 1))
    raw = table.encode()
    assert raw.startswith(
        b'{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":5},"topicConfigTable":{"T":'
    )
    assert TopicConfigTable.decode(raw) == table


# -- offsets ----------------------------------------------------------------------------------------


def test_consumer_offsets_persist_only_when_dirty(tmp_path: Path) -> None:
    path = tmp_path / "consumer_offsets.json"
    mgr = ConsumerOffsetManager(path, clock=ManualClock(wall=0.007))
    mgr.load()
    assert mgr.query("g", "T", 0) == -1
    assert not mgr.persist()
    mgr.commit("g", "T", 0, 17)
    mgr.commit("g", "T", 3, 4)
    mgr.commit("g", "T", 0, 12)  # the last commit wins, as in RocketMQ
    assert mgr.persist()
    assert not mgr.persist()
    again = ConsumerOffsetManager(path, clock=ManualClock())
    again.load()
    assert again.query_all("g", "T") == {0: 12, 3: 4}
    assert again.groups_of("T") == ["g"]
    wrapper = loads_rocketmq(again.encode_wrapper())
    assert wrapper["offsetTable"] == {"T@g": {"0": 12, "3": 4}}
    assert b"{0:12,3:4}" in again.encode_wrapper()


# -- subscription groups ----------------------------------------------------------------------------


def test_unknown_group_is_created_on_first_use_and_persisted(tmp_path: Path) -> None:
    path = tmp_path / "subscription_groups.json"
    groups = SubscriptionGroupManager(path, clock=ManualClock(wall=0.005))
    groups.load()
    created = groups.find_or_create("g1")
    assert created == SubscriptionGroupConfig(group_name="g1")  # RocketMQ's defaults
    assert (created.consume_enable, created.broker_id, created.which_broker_when_consume_slowly) == (True, 0, 1)
    assert groups.data_version.counter == 1
    assert groups.find_or_create("g1") is created and groups.data_version.counter == 1  # found, not re-created
    again = SubscriptionGroupManager(path, clock=ManualClock())
    again.load()
    assert again.select("g1") == created


def test_auto_create_off_creates_only_system_groups(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(tmp_path / "subscription_groups.json", clock=ManualClock(), auto_create=False)
    assert groups.find_or_create("plain") is None and groups.select("plain") is None
    replicator = "CID_RMQ_SYS_REPLICATOR_link"
    assert groups.find_or_create(replicator) == SubscriptionGroupConfig(group_name=replicator)
    assert groups.select(replicator) is not None
    groups.update(SubscriptionGroupConfig(group_name="plain", consume_enable=False))
    found = groups.find_or_create("plain")
    assert found is not None and not found.consume_enable


@pytest.mark.parametrize("name", ["", "bad group", "x" * 300])
def test_a_group_name_breaking_the_rules_is_never_created(tmp_path: Path, name: str) -> None:
    groups = SubscriptionGroupManager(tmp_path / "subscription_groups.json", clock=ManualClock())
    with pytest.raises(ProtocolError):
        groups.find_or_create(name)
    assert groups.select(name) is None and not (tmp_path / "subscription_groups.json").exists()


def test_a_group_created_without_store_is_not_kept(tmp_path: Path) -> None:
    """A replica's table is the primary's copy: the group is used with the defaults, nothing is written."""
    path = tmp_path / "subscription_groups.json"
    groups = SubscriptionGroupManager(path, clock=ManualClock())
    assert groups.find_or_create("g", store=False) == SubscriptionGroupConfig(group_name="g")
    assert groups.select("g") is None and groups.data_version.counter == 0 and not path.exists()


# -- subscriptions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("expr", [None, "", "*", "  *  "])
def test_subscribe_all(expr: str | None) -> None:
    sub = build_subscription("T", expr)
    assert sub.matches_all and sub.tags_codes is None


def test_tag_expression_to_hash_codes() -> None:
    sub = build_subscription("T", "TagA || TagB ||TagA|| ")
    assert sub.tags == ("TagA", "TagB")
    assert sub.tags_codes == frozenset({tags_hash_code("TagA"), tags_hash_code("TagB")})
    assert tags_hash_code("TagA") == 2_598_919  # "TagA".hashCode() in Java


def test_sql92_is_refused() -> None:
    with pytest.raises(SubscriptionParseError, match="SQL92"):
        build_subscription("T", "a > 1", "SQL92")


# -- client registry --------------------------------------------------------------------------------


def _heartbeat(client_id: str, group: str, expr: str) -> bytes:
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": "T", "subString": expr, "subVersion": 3, "expressionType": "TAG"}
                    ],
                }
            ],
            "producerDataSet": [{"groupName": "p"}],
        }
    ).encode()


def test_client_registry_heartbeat_close_and_expiry() -> None:
    clock = ManualClock()
    reg = ClientRegistry(clock=clock)
    conn_a, conn_b = object(), object()
    assert reg.heartbeat(decode_heartbeat(_heartbeat("c1", "g", "TagA")), conn_a) == ["g"]
    assert reg.heartbeat(decode_heartbeat(_heartbeat("c2", "g", "TagA || TagB")), conn_b) == []
    info = reg.consumer_group("g")
    assert info is not None and info.client_ids() == ["c1", "c2"]
    assert info.subscriptions["T"].tags == ("TagA", "TagB")
    assert reg.producer_clients("p") == ["c1", "c2"]
    reg.connection_closed(conn_a)
    assert reg.consumer_group("g").client_ids() == ["c2"]  # type: ignore[union-attr]
    clock.advance(120.0)
    assert reg.scan_expired(120.0) == []  # silent for exactly the timeout: kept
    clock.advance(0.1)
    assert sorted(reg.scan_expired(120.0)) == [("g", "c2"), ("p", "c2")]
    assert reg.consumer_group("g") is None


def test_heartbeat_without_client_id_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="clientID"):
        decode_heartbeat(b'{"consumerDataSet":[]}')


# -- put-path helpers -------------------------------------------------------------------------------


def test_born_host_is_ipv4() -> None:
    assert born_host_of("10.1.2.3:555") == "10.1.2.3:555"
    assert born_host_of("::ffff:10.1.2.3:555") == "10.1.2.3:555"
    assert born_host_of("::1:555") == "127.0.0.1:555"


def test_pull_waiters_wake_only_past_offset() -> None:
    import asyncio

    async def body() -> None:
        waiters = PullWaiters(asyncio.get_running_loop())
        low = waiters.add("T", 0, 3)
        high = waiters.add("T", 0, 10)
        other = waiters.add("T", 1, 0)
        waiters.notify("T", 0, 5)
        assert low.done() and not high.done() and not other.done()
        assert len(waiters) == 2
        waiters.discard("T", 1, other)
        waiters.wake_all()
        assert high.done() and len(waiters) == 0

    asyncio.run(body())
