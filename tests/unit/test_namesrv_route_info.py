"""RouteInfoManager as a pure state machine: registration, routes, expiry driven by a ManualClock."""

from __future__ import annotations

from typing import TypedDict

from broker_store.clock import ManualClock
from broker_store.namesrv.route_info import BrokerKey, RouteInfoManager
from broker_store.protocol.route import TopicRouteData, loads_rocketmq
from broker_store.protocol.topic import DataVersion, TopicConfig


class _Where(TypedDict):
    """The broker-identifying keyword arguments of ``register_broker`` a test repeats."""

    cluster: str
    broker_addr: str
    broker_name: str


class _WhereWithId(_Where):
    broker_id: int


def _topics(*specs: tuple[str, int]) -> dict[str, TopicConfig]:
    return {name: TopicConfig(name, read_queue_nums=n, write_queue_nums=n, perm=6) for name, n in specs}


def _manager(timeout: float = 5.0) -> tuple[RouteInfoManager, ManualClock]:
    clock = ManualClock()
    return RouteInfoManager(default_timeout=timeout, clock=clock), clock


def test_route_json_golden_bytes_with_numeric_broker_id_keys() -> None:
    routes, _ = _manager()
    routes.register_broker(
        cluster="source",
        broker_addr="127.0.0.1:10911",
        broker_name="broker-a",
        broker_id=0,
        topic_configs=_topics(("Orders", 4)),
        data_version=DataVersion(1, 1),
    )
    routes.register_broker(
        cluster="source",
        broker_addr="127.0.0.1:10921",
        broker_name="broker-a",
        broker_id=1,
        topic_configs=_topics(("Orders", 4), ("OnlyOnReplica", 2)),
        data_version=DataVersion(1, 1),
    )
    route = routes.pickup_topic_route("Orders")
    assert route is not None
    assert route.encode() == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
        b'"brokerName":"broker-a","cluster":"source"}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    assert TopicRouteData.decode(route.encode()) == route
    # Queue data comes from the primary only.
    assert routes.pickup_topic_route("OnlyOnReplica") is None


def test_replica_registration_reports_primary() -> None:
    routes, _ = _manager()
    primary = routes.register_broker(
        cluster="c",
        broker_addr="10.0.0.1:10911",
        broker_name="b",
        broker_id=0,
        ha_server_addr="10.0.0.1:10912",
        topic_configs={},
    )
    assert primary.master_addr is None
    replica = routes.register_broker(
        cluster="c", broker_addr="10.0.0.2:10911", broker_name="b", broker_id=1, topic_configs={}
    )
    assert replica.master_addr == "10.0.0.1:10911"
    assert replica.ha_server_addr == "10.0.0.1:10912"


def test_queue_data_updates_only_when_data_version_changes() -> None:
    routes, _ = _manager()
    kw: _WhereWithId = {"cluster": "c", "broker_addr": "10.0.0.1:10911", "broker_name": "b", "broker_id": 0}
    routes.register_broker(**kw, topic_configs=_topics(("A", 4)), data_version=DataVersion(10, 1))
    routes.register_broker(**kw, topic_configs=_topics(("A", 4), ("B", 2)), data_version=DataVersion(10, 1))
    assert routes.all_topics() == ["A"]
    routes.register_broker(**kw, topic_configs=_topics(("A", 8), ("B", 2)), data_version=DataVersion(11, 2))
    assert routes.all_topics() == ["A", "B"]
    route = routes.pickup_topic_route("A")
    assert route is not None and route.queue_datas[0].write_queue_nums == 8


def test_expiry_removes_broker_without_heartbeat() -> None:
    routes, clock = _manager(timeout=5.0)
    routes.register_broker(
        cluster="c",
        broker_addr="10.0.0.1:10911",
        broker_name="a",
        broker_id=0,
        topic_configs=_topics(("T", 4)),
    )
    routes.register_broker(
        cluster="c",
        broker_addr="10.0.0.2:10911",
        broker_name="b",
        broker_id=0,
        topic_configs=_topics(("T", 2)),
    )
    clock.advance(4.0)
    assert routes.heartbeat(cluster="c", broker_addr="10.0.0.2:10911")
    assert routes.scan_not_active_brokers() == []
    clock.advance(1.5)  # a: 5.5 s silent, b: 1.5 s
    assert routes.scan_not_active_brokers() == [BrokerKey("c", "10.0.0.1:10911")]
    route = routes.pickup_topic_route("T")
    assert route is not None
    assert [b.broker_name for b in route.broker_datas] == ["b"]
    assert [q.broker_name for q in route.queue_datas] == ["b"]
    clock.advance(10)
    assert routes.scan_not_active_brokers() == [BrokerKey("c", "10.0.0.2:10911")]
    assert routes.pickup_topic_route("T") is None
    assert routes.cluster_info().cluster_addr_table == {}
    assert not routes.heartbeat(cluster="c", broker_addr="10.0.0.2:10911")


def test_registration_heartbeat_timeout_overrides_default() -> None:
    routes, clock = _manager(timeout=5.0)
    routes.register_broker(
        cluster="c", broker_addr="h:1", broker_name="a", broker_id=0, topic_configs={}, heartbeat_timeout=30.0
    )
    clock.advance(10)
    assert routes.scan_not_active_brokers() == []


def test_unregister_keeps_group_while_replica_remains() -> None:
    routes, _ = _manager()
    routes.register_broker(
        cluster="c", broker_addr="h:1", broker_name="a", broker_id=0, topic_configs=_topics(("T", 1))
    )
    routes.register_broker(cluster="c", broker_addr="h:2", broker_name="a", broker_id=1, topic_configs={})
    assert routes.unregister_broker(cluster="c", broker_addr="h:1", broker_name="a", broker_id=0)
    route = routes.pickup_topic_route("T")
    assert route is not None and dict(route.broker_datas[0].broker_addrs) == {1: "h:2"}
    routes.unregister_broker(cluster="c", broker_addr="h:2", broker_name="a", broker_id=1)
    assert routes.pickup_topic_route("T") is None
    assert routes.all_topics() == []


def test_address_changing_role_keeps_one_id() -> None:
    routes, _ = _manager()
    routes.register_broker(cluster="c", broker_addr="h:2", broker_name="a", broker_id=1, topic_configs={})
    routes.register_broker(cluster="c", broker_addr="h:2", broker_name="a", broker_id=0, topic_configs={})
    assert dict(routes.cluster_info().broker_addr_table["a"].broker_addrs) == {0: "h:2"}


def test_a_promoted_replica_s_topics_become_the_group_s_at_the_same_data_version() -> None:
    """Controller mode: the replica registered (id 1) while the old primary was listed; promoted, it registers
    as id 0 with the data version it had, over the old primary's entry: its topics still become the route."""
    routes, _ = _manager()
    old: _Where = {"cluster": "c", "broker_name": "b", "broker_addr": "h:1"}
    new: _Where = {"cluster": "c", "broker_name": "b", "broker_addr": "h:2"}
    routes.register_broker(**old, broker_id=0, topic_configs=_topics(("A", 4)), data_version=DataVersion(5, 1))
    routes.register_broker(**new, broker_id=1, topic_configs=_topics(("A", 4), ("B", 2)),
                           data_version=DataVersion(7, 1))
    assert routes.all_topics() == ["A"]
    routes.register_broker(**new, broker_id=0, topic_configs=_topics(("A", 4), ("B", 2)),
                           data_version=DataVersion(7, 1))
    assert routes.all_topics() == ["A", "B"]
    assert dict(routes.cluster_info().broker_addr_table["b"].broker_addrs) == {0: "h:2"}


def test_cluster_info_and_query_data_version() -> None:
    routes, clock = _manager()
    routes.register_broker(
        cluster="c1",
        broker_addr="h:1",
        broker_name="a",
        broker_id=0,
        topic_configs={},
        data_version=DataVersion(5, 3),
    )
    routes.register_broker(cluster="c2", broker_addr="h:2", broker_name="b", broker_id=0, topic_configs={})
    info = loads_rocketmq(routes.cluster_info().encode())
    assert info["clusterAddrTable"] == {"c1": ["a"], "c2": ["b"]}
    assert info["brokerAddrTable"]["a"]["brokerAddrs"] == {"0": "h:1"}
    assert routes.query_data_version(cluster="c1", broker_addr="h:1", data_version=DataVersion(5, 3)) == (
        False,
        DataVersion(5, 3),
    )
    assert routes.query_data_version(cluster="c1", broker_addr="h:1", data_version=DataVersion(6, 4))[0]
    assert routes.query_data_version(cluster="c1", broker_addr="h:9", data_version=DataVersion()) == (
        True,
        None,
    )
    # QUERY_DATA_VERSION refreshes liveness like a heartbeat.
    clock.advance(4)
    routes.query_data_version(cluster="c1", broker_addr="h:1", data_version=DataVersion(5, 3))
    clock.advance(4)
    assert routes.scan_not_active_brokers() == [BrokerKey("c2", "h:2")]


def test_a_stale_primary_resuming_cannot_take_id_0_back_from_its_replacement() -> None:
    """Controller mode: the primary h:1 (epoch 1) was frozen while h:2 was promoted at epoch 2. Resumed, h:1
    registers once more as id 0 before it hears of its demotion, then as a replica: h:2 stays the primary
    throughout (before, h:1 took id 0 over and then left it, and the route had no primary until h:2's next
    full registration, ~30 s)."""
    routes, _ = _manager()
    old: _Where = {"cluster": "c", "broker_name": "b", "broker_addr": "h:1"}
    new: _Where = {"cluster": "c", "broker_name": "b", "broker_addr": "h:2"}
    topics = _topics(("A", 4))
    routes.register_broker(**old, broker_id=0, topic_configs=topics, data_version=DataVersion(5, 1, 1))
    routes.register_broker(**new, broker_id=2, topic_configs=topics, data_version=DataVersion(5, 1, 1))
    routes.register_broker(**new, broker_id=0, topic_configs=topics, data_version=DataVersion(5, 1, 2))
    stale = routes.register_broker(**old, broker_id=0, topic_configs=topics, data_version=DataVersion(5, 1, 1))
    assert stale.stale_over == "h:2"
    assert dict(routes.cluster_info().broker_addr_table["b"].broker_addrs) == {0: "h:2"}
    assert routes.heartbeat(cluster="c", broker_addr="h:2")  # the new primary is still known: its heartbeats count
    routes.register_broker(**old, broker_id=1, topic_configs=topics, data_version=DataVersion(5, 1, 2))
    assert dict(routes.cluster_info().broker_addr_table["b"].broker_addrs) == {0: "h:2", 1: "h:1"}
    route = routes.pickup_topic_route("A")
    assert route is not None and route.broker_datas[0].broker_addrs[0] == "h:2"


def test_an_id_taken_at_the_same_or_a_newer_state_version_moves_as_before() -> None:
    """Static groups register at state version 0: a new process taking an id over still wins, and so does a
    newer epoch over an older one."""
    routes, _ = _manager()
    where: _WhereWithId = {"cluster": "c", "broker_name": "b", "broker_addr": "h:1", "broker_id": 0}
    routes.register_broker(**where, topic_configs={})
    taken = routes.register_broker(cluster="c", broker_name="b", broker_addr="h:2", broker_id=0, topic_configs={})
    assert taken.stale_over is None
    assert dict(routes.cluster_info().broker_addr_table["b"].broker_addrs) == {0: "h:2"}
    newer = routes.register_broker(**where, topic_configs={}, data_version=DataVersion(1, 1, 3))
    assert newer.stale_over is None
    assert dict(routes.cluster_info().broker_addr_table["b"].broker_addrs) == {0: "h:1"}
