"""Client against a tiny fake name server and fake brokers built on RemotingServer.

The fakes implement just enough of each request to exercise the client's routing, retry and
decoding paths; tests/integration/test_client_*.py run the same paths against the real broker.
"""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import pytest

from broker_store.client import (
    Admin,
    AsyncProducer,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    SendStatus,
    UniqueIdGenerator,
    new_message,
)
from broker_store.client.route_cache import RouteCache, publish_queues, route_from_default, subscribe_queues
from broker_store.clock import ManualClock
from broker_store.deploy.launcher import free_port
from broker_store.net.client import RemotingClient
from broker_store.net.server import Connection, RemotingServer
from broker_store.protocol.codes import (
    MSG_FLAG_COMPRESSED,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from broker_store.protocol.errors import (
    ConfigError,
    MessageIllegalError,
    NoPermissionError,
    NoWritableQueueError,
    RequestTimeoutError,
    RetriableSystemError,
    ServiceNotAvailableError,
    TopicNotExistError,
    TransportError,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    SEND_V2_NAMES,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SendMessageRequestHeader,
    TopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from broker_store.protocol.message import (
    Message,
    decode_properties,
    decode_stored_message,
    decode_stored_messages,
    encode_stored_message,
    host_to_bytes,
    iter_batch,
    make_msg_id,
    tags_hash_code,
)
from broker_store.protocol.route import BrokerData, ClusterInfo, QueueData, TopicRouteData
from broker_store.protocol.topic import TopicConfig
from tests.support.clocks import ReadingClock

# -- fakes ---------------------------------------------------------------------------------------


T = TypeVar("T")


class LoopThread:
    """An event loop in a thread for the fake servers (the client has its own)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="fake-servers")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@dataclass
class QueueLog:
    """Messages of one queue, shared by a primary and its fake replicas."""

    records: list[tuple[bytes, str | None]] = field(default_factory=list)


Hook = Callable[[RemotingCommand], RemotingCommand | None]


class FakeBroker:
    def __init__(self, name: str, broker_id: int = 0,
                 store: dict[tuple[str, int], QueueLog] | None = None) -> None:
        self.name = name
        self.broker_id = broker_id
        self.store = store if store is not None else {}
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.requests: list[RemotingCommand] = []
        self.hook: Hook | None = None
        self.suggest = 0
        self.commit_log_offset = 0
        self.created_topics: list[CreateTopicRequestHeader] = []
        self.server = RemotingServer(self.handle)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def count(self, code: int) -> int:
        return sum(1 for r in self.requests if r.code == code)

    def first(self, code: int) -> RemotingCommand:
        return next(r for r in self.requests if r.code == code)

    def _append(self, topic: str, queue_id: int, body: bytes, props: bytes, flag: int,
                sys_flag: int) -> tuple[str, int]:
        qlog = self.store.setdefault((topic, queue_id), QueueLog())
        ip, port = host_to_bytes(self.addr)
        offset = len(qlog.records)
        record = encode_stored_message(topic=topic.encode(), queue_id=queue_id, queue_offset=offset,
                                       physical_offset=self.commit_log_offset, body=body, properties=props,
                                       flag=flag, sys_flag=sys_flag, store_ip=ip, store_port=port,
                                       store_timestamp=int(time.time() * 1000))
        msg_id = make_msg_id(ip, port, self.commit_log_offset)
        self.commit_log_offset += len(record)
        qlog.records.append((record, decode_properties(props).get("TAGS")))
        return msg_id, offset

    async def handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        self.requests.append(cmd)
        if self.hook is not None:
            resp = self.hook(cmd)
            if resp is not None:
                return resp
        ext = cmd.ext_fields
        if cmd.code == RequestCode.SEND_MESSAGE_V2:
            h = SendMessageRequestHeader.from_ext(ext, SEND_V2_NAMES)
            msg_id, offset = self._append(h.topic, h.queue_id, cmd.body, (h.properties or "").encode(),
                                          h.flag, h.sys_flag)
            return cmd.response(ResponseCode.SUCCESS, ext_fields={
                "msgId": msg_id, "queueId": str(h.queue_id), "queueOffset": str(offset)})
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            h = SendMessageRequestHeader.from_ext(ext, SEND_V2_NAMES)
            ids, first = [], None
            for entry in iter_batch(cmd.body):
                msg_id, offset = self._append(h.topic, h.queue_id, entry.body, entry.properties,
                                              entry.flag, 0)
                ids.append(msg_id)
                first = offset if first is None else first
            return cmd.response(ResponseCode.SUCCESS, ext_fields={
                "msgId": ",".join(ids), "queueId": str(h.queue_id), "queueOffset": str(first)})
        if cmd.code == RequestCode.PULL_MESSAGE:
            p = PullMessageRequestHeader.from_ext(ext)
            qlog = self.store.get((p.topic, p.queue_id), QueueLog())
            max_offset = len(qlog.records)
            rh = {"suggestWhichBrokerId": str(self.suggest), "minOffset": "0", "maxOffset": str(max_offset)}
            if p.queue_offset >= max_offset:
                return cmd.response(ResponseCode.PULL_NOT_FOUND,
                                    ext_fields={**rh, "nextBeginOffset": str(max_offset)})
            wanted = None
            if p.subscription and p.subscription != "*":
                # Like the real broker: filter by tag hash code only (here: the low bits collide on purpose).
                wanted = {tags_hash_code(t.strip()) & 0xF for t in p.subscription.split("||")}
            chosen = []
            end = min(max_offset, p.queue_offset + p.max_msg_nums)
            for record, tags in qlog.records[p.queue_offset:end]:
                if wanted is None or (tags is not None and tags_hash_code(tags) & 0xF in wanted):
                    chosen.append(record)
            code = ResponseCode.SUCCESS if chosen else ResponseCode.PULL_RETRY_IMMEDIATELY
            return cmd.response(code, ext_fields={**rh, "nextBeginOffset": str(end)}, body=b"".join(chosen))
        if cmd.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            u = UpdateConsumerOffsetRequestHeader.from_ext(ext)
            self.offsets[(u.consumer_group, u.topic, u.queue_id)] = u.commit_offset
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.QUERY_CONSUMER_OFFSET:
            q = QueryConsumerOffsetRequestHeader.from_ext(ext)
            found = self.offsets.get((q.consumer_group, q.topic, q.queue_id))
            if found is None:
                return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found")
            return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(found)})
        if cmd.code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET):
            q2 = QueueRequestHeader.from_ext(ext)
            n = len(self.store.get((q2.topic, q2.queue_id), QueueLog()).records)
            offset = n if cmd.code == RequestCode.GET_MAX_OFFSET else 0
            return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        if cmd.code == RequestCode.UPDATE_AND_CREATE_TOPIC:
            self.created_topics.append(CreateTopicRequestHeader.from_ext(ext))
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_ALL_TOPIC_CONFIG:
            body = {"topicConfigTable": {"t1": {"topicName": "t1", "readQueueNums": 4, "writeQueueNums": 4,
                                                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                                "order": False}},
                    "dataVersion": {"counter": 1, "timestamp": 1}}
            return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))
        if cmd.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return cmd.response(ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            ids = sorted({orjson.loads(r.body)["clientID"]
                          for r in self.requests if r.code == RequestCode.HEART_BEAT})
            if not ids:
                return cmd.response(ResponseCode.SYSTEM_ERROR, "no consumer for this group, g")
            return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"fake broker: code {cmd.code}")


class FakeNamesrv:
    def __init__(self) -> None:
        self.routes: dict[str, TopicRouteData] = {}
        self.requests: list[RemotingCommand] = []
        self.cluster: ClusterInfo | None = None
        self.server = RemotingServer(self.handle)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def route_requests(self, topic: str) -> int:
        return sum(1 for r in self.requests
                   if r.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and r.ext_fields.get("topic") == topic)

    async def handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.requests.append(cmd)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = TopicRequestHeader.from_ext(cmd.ext_fields).topic
            route = self.routes.get(topic)
            if route is None:
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info for {topic}")
            return cmd.response(ResponseCode.SUCCESS, body=route.encode())
        if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            assert self.cluster is not None
            return cmd.response(ResponseCode.SUCCESS, body=self.cluster.encode())
        if cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": sorted(self.routes)}))
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "fake namesrv")


def fail_sends(code: int, remark: str) -> Hook:
    """A broker hook answering every send with ``code``."""
    def hook(cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            return cmd.response(code, remark)
        return None
    return hook


def make_route(brokers: list[FakeBroker], queues: int = 4, perm: int = 6) -> TopicRouteData:
    groups: dict[str, dict[int, str]] = {}
    for b in brokers:
        groups.setdefault(b.name, {})[b.broker_id] = b.addr
    return TopicRouteData(
        queue_datas=tuple(QueueData(name, queues, queues, perm) for name in sorted(groups)),
        broker_datas=tuple(BrokerData("c1", name, addrs) for name, addrs in sorted(groups.items())))


class Cluster:
    def __init__(self, loop: LoopThread) -> None:
        self.loop = loop
        self.namesrv = FakeNamesrv()
        self.a = FakeBroker("broker-a")
        self.b = FakeBroker("broker-b")
        self.a1 = FakeBroker("broker-a", broker_id=1, store=self.a.store)
        self.brokers = [self.a, self.b, self.a1]
        for server in self.servers():
            loop.run(server.server.start())
        self.namesrv.routes["t"] = make_route([self.a, self.b])
        self.namesrv.routes["TBW102"] = make_route([self.a, self.b], queues=8, perm=7)
        self.namesrv.cluster = ClusterInfo(
            broker_addr_table={"broker-a": BrokerData("c1", "broker-a", {0: self.a.addr, 1: self.a1.addr}),
                               "broker-b": BrokerData("c1", "broker-b", {0: self.b.addr})},
            cluster_addr_table={"c1": ("broker-a", "broker-b")})

    def servers(self) -> list[FakeNamesrv | FakeBroker]:
        return [self.namesrv, *self.brokers]

    def stop(self) -> None:
        for server in self.servers():
            self.loop.run(server.server.stop())


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.stop()


@pytest.fixture
def cluster(loop_thread: LoopThread) -> Iterator[Cluster]:
    c = Cluster(loop_thread)
    yield c
    c.stop()


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "broker-store-client"]


# -- route decoding and queue derivation ---------------------------------------------------------


def test_route_json_with_bare_numeric_keys_decodes() -> None:
    raw = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
           b'"cluster":"src"},{"brokerAddrs":{1:"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"src"}],'
           b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,'
           b'"topicSysFlag":0,"writeQueueNums":2},{"brokerName":"broker-a","perm":6,"readQueueNums":3,'
           b'"topicSysFlag":0,"writeQueueNums":3}]}')
    route = TopicRouteData.decode(raw)
    broker_a = route.broker("broker-a")
    assert broker_a is not None and broker_a.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    # broker-b has no primary: readable but not writable.
    assert publish_queues("t", route) == [MessageQueue("t", "broker-a", i) for i in range(3)]
    assert [q.broker_name for q in subscribe_queues("t", route)] == ["broker-a"] * 3 + ["broker-b"] * 2


def test_default_route_is_capped_like_java() -> None:
    route = TopicRouteData(queue_datas=(QueueData("a", 8, 8, 7),),
                           broker_datas=(BrokerData("c", "a", {0: "x:1"}),))
    derived = route_from_default(route, 4)
    assert (derived.queue_datas[0].read_queue_nums, derived.queue_datas[0].write_queue_nums) == (4, 4)


def test_route_cache_ttl_and_invalidate(cluster: Cluster) -> None:
    clock = ManualClock()

    async def scenario() -> None:
        remoting = RemotingClient()
        cache = RouteCache(["127.0.0.1:1", cluster.namesrv.addr], remoting=remoting, ttl=30,
                           clock=clock)
        try:
            await cache.get("t")
            await cache.get("t")
            assert cluster.namesrv.route_requests("t") == 1
            clock.advance(31.0)
            await cache.get("t")
            assert cluster.namesrv.route_requests("t") == 2
            cache.invalidate("t")
            routes = await asyncio.gather(*(cache.get("t") for _ in range(5)))  # single flight
            assert cluster.namesrv.route_requests("t") == 3
            assert all(r == routes[0] for r in routes)
            with pytest.raises(TopicNotExistError):
                await cache.get("missing")
            # Producers fall back to TBW102's route, cut to 4 queues per broker group.
            route = await cache.get("missing", allow_default=True)
            assert [q.write_queue_nums for q in route.queue_datas] == [4, 4]
        finally:
            await remoting.close()

    asyncio.run(scenario())


# -- producer ------------------------------------------------------------------------------------


def test_send_sets_uniq_key_wait_and_v2_header(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr, "pg") as producer:
        result = producer.send(new_message("t", b"hello", tags="TagA", keys=["k1", "k2"]))
    assert result.status is SendStatus.SEND_OK
    req = next(r for b in (cluster.a, cluster.b) for r in b.requests if r.code == RequestCode.SEND_MESSAGE_V2)
    assert set(req.ext_fields) >= {"a", "b", "c", "d", "e", "f", "g", "h", "i", "m", "n"}
    assert req.ext_fields["a"] == "pg" and req.ext_fields["b"] == "t" and req.ext_fields["c"] == "TBW102"
    props = decode_properties(req.ext_fields["i"])
    assert props["WAIT"] == "true" and props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2"
    assert props["UNIQ_KEY"] == result.msg_id and result.msg_ids == (result.msg_id,)
    assert re.fullmatch(r"[0-9A-F]{32}", result.msg_id)
    assert re.fullmatch(r"[0-9A-F]{32}", result.offset_msg_id)
    assert result.message_queue.broker_name == req.ext_fields["n"]
    assert result.queue_offset == 0


def test_uniq_key_layout() -> None:
    month_start = int(time.mktime(time.strptime("2024-03-01", "%Y-%m-%d")) * 1000)
    now = [month_start + 123_456]
    gen = UniqueIdGenerator(ip=bytes([10, 1, 2, 3]), pid=0x12345, clock=ReadingClock(lambda: now[0]))
    first, second = gen.create(), gen.create()
    for uid in (first, second):
        assert re.fullmatch(r"[0-9A-F]{32}", uid)
        raw = bytes.fromhex(uid)
        assert raw[:4] == bytes([10, 1, 2, 3])
        assert raw[4:6] == b"\x23\x45"  # low 16 bits of the pid
        assert struct.unpack(">I", raw[10:14])[0] == 123_456
    assert first[:20] == second[:20]
    counters = [struct.unpack(">H", bytes.fromhex(uid)[14:])[0] for uid in (first, second)]
    assert counters[1] == counters[0] + 1
    # Crossing into the next month restarts the span.
    now[0] = int(time.mktime(time.strptime("2024-04-01", "%Y-%m-%d")) * 1000) + 5
    assert struct.unpack(">I", bytes.fromhex(gen.create())[10:14])[0] == 5


def test_existing_uniq_key_and_wait_are_kept(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr) as producer:
        result = producer.send(Message("t", b"x", {"UNIQ_KEY": "MINE", "WAIT": "false"}))
    assert result.msg_id == "MINE"
    req = next(r for b in (cluster.a, cluster.b) for r in b.requests if r.code == RequestCode.SEND_MESSAGE_V2)
    assert decode_properties(req.ext_fields["i"])["WAIT"] == "false"


def test_retriable_error_retries_on_another_broker_group(cluster: Cluster) -> None:
    cluster.a.hook = fail_sends(ResponseCode.SYSTEM_ERROR, "IN_SYNC_REPLICAS_NOT_ENOUGH")
    with Producer(cluster.namesrv.addr) as producer:
        results = [producer.send(new_message("t", b"m%d" % i)) for i in range(6)]
    assert all(r.message_queue.broker_name == "broker-b" for r in results)
    # Every failure on broker-a was followed by a retry on broker-b, and broker-a was then avoided.
    assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) == 1
    assert cluster.b.count(RequestCode.SEND_MESSAGE_V2) == 6


def test_non_retriable_error_is_raised_at_once(cluster: Cluster) -> None:
    for b in (cluster.a, cluster.b):
        b.hook = fail_sends(ResponseCode.MESSAGE_ILLEGAL, "bad")
    with Producer(cluster.namesrv.addr) as producer, pytest.raises(MessageIllegalError):
        producer.send(new_message("t", b"x"))
    assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) + cluster.b.count(RequestCode.SEND_MESSAGE_V2) == 1


def test_all_attempts_fail_raises_last_error(cluster: Cluster) -> None:
    for b in (cluster.a, cluster.b):
        b.hook = fail_sends(ResponseCode.SYSTEM_ERROR, "down")
    with Producer(cluster.namesrv.addr, retry_times_when_send_failed=3) as producer, \
            pytest.raises(RetriableSystemError):
        producer.send(new_message("t", b"x"))
    assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) + cluster.b.count(RequestCode.SEND_MESSAGE_V2) == 4


def test_not_durable_statuses_are_results_not_errors(cluster: Cluster) -> None:
    def slave_timeout(cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code != RequestCode.SEND_MESSAGE_V2:
            return None
        return cmd.response(ResponseCode.FLUSH_SLAVE_TIMEOUT, ext_fields={
            "msgId": "0" * 32, "queueId": "1", "queueOffset": "7"})
    cluster.a.hook = cluster.b.hook = slave_timeout
    with Producer(cluster.namesrv.addr) as producer:
        result = producer.send(new_message("t", b"x"))
    assert result.status is SendStatus.FLUSH_SLAVE_TIMEOUT and result.queue_offset == 7
    assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) + cluster.b.count(RequestCode.SEND_MESSAGE_V2) == 1


@pytest.mark.parametrize(("code", "remark"), [
    (ResponseCode.NO_PERMISSION, "not primary any more"),
    (ResponseCode.SERVICE_NOT_AVAILABLE, "broker broker-a is fenced while it changes role (DEMOTING, epoch 2)"),
])
def test_invalid_route_error_refreshes_route(cluster: Cluster, code: ResponseCode, remark: str) -> None:
    """broker-a moves (failover): the old address refuses (read only, or fenced while it is demoted); the
    client refetches the route and sends to the new primary."""
    new_a = FakeBroker("broker-a")
    cluster.loop.run(new_a.server.start())
    try:
        mq = MessageQueue("t", "broker-a", 0)
        with Producer(cluster.namesrv.addr) as producer:
            producer.send(new_message("t", b"first"), mq)
            assert cluster.namesrv.route_requests("t") == 1
            cluster.namesrv.routes["t"] = make_route([new_a, cluster.b])
            cluster.a.hook = lambda cmd: cmd.response(code, remark)
            result = producer.send(new_message("t", b"second"), mq)
        assert result.message_queue == mq
        assert new_a.count(RequestCode.SEND_MESSAGE_V2) == 1
        assert cluster.namesrv.route_requests("t") == 2
    finally:
        cluster.loop.run(new_a.server.stop())


def test_transport_error_on_dead_broker_goes_elsewhere(cluster: Cluster) -> None:
    cluster.loop.run(cluster.a.server.stop())
    with Producer(cluster.namesrv.addr) as producer:
        results = [producer.send(new_message("t", b"x")) for _ in range(4)]
    assert {r.message_queue.broker_name for r in results} == {"broker-b"}


def test_no_retry_when_everything_is_not_retriable_no_permission_pinned(cluster: Cluster) -> None:
    cluster.a.hook = lambda cmd: cmd.response(ResponseCode.NO_PERMISSION, "read only")
    with Producer(cluster.namesrv.addr, retry_times_when_send_failed=1) as producer, \
            pytest.raises(NoPermissionError):
        producer.send(new_message("t", b"x"), MessageQueue("t", "broker-a", 2))
    assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) == 2  # pinned queue: retried on the same group


def test_auto_create_uses_tbw102_route(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr) as producer:
        queues = producer.writable_queues("brand-new")
        result = producer.send(new_message("brand-new", b"x"))
    assert len(queues) == 8  # 4 per broker group (defaultTopicQueueNums), not TBW102's 8
    assert result.message_queue.queue_id < 4
    with Producer(cluster.namesrv.addr, auto_create_topic=False) as producer:
        with pytest.raises(TopicNotExistError):
            producer.send(new_message("brand-new", b"x"))


def test_client_side_validation(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr, max_message_size=10) as producer:
        with pytest.raises(MessageIllegalError, match="exceeds"):
            producer.send(new_message("t", b"x" * 11))
        with pytest.raises(MessageIllegalError, match="empty"):
            producer.send(new_message("t", b""))
        with pytest.raises(MessageIllegalError, match="characters"):
            producer.send(new_message("bad topic!", b"x"))
        with pytest.raises(MessageIllegalError, match="template"):
            producer.send(new_message("TBW102", b"x"))
        with pytest.raises(MessageIllegalError, match="separator"):
            producer.send(Message("t", b"x", {"K": "a\x01b"}))
        with pytest.raises(MessageIllegalError, match="one topic"):
            producer.send_batch([new_message("t", b"x"), new_message("u", b"y")])
    assert not cluster.a.requests and not cluster.b.requests
    with pytest.raises(ConfigError, match="send_timeout"):
        Producer(cluster.namesrv.addr, send_timeout=0)
    with pytest.raises(ConfigError, match="namesrv_addr"):
        Producer("nohostport")


def test_compression_over_threshold(cluster: Cluster) -> None:
    body = b"abc" * 1000
    with Producer(cluster.namesrv.addr, compress_over=100) as producer:
        result = producer.send(new_message("t", body), MessageQueue("t", "broker-b", 0))
    req = next(r for r in cluster.b.requests if r.code == RequestCode.SEND_MESSAGE_V2)
    assert int(req.ext_fields["f"]) & MSG_FLAG_COMPRESSED and zlib.decompress(req.body) == body
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        pulled = consumer.pull(result.message_queue, 0)
    assert pulled.messages[0].body == body


def test_send_batch_encoding_and_result(cluster: Cluster) -> None:
    msgs = [new_message("t", f"body-{i}".encode(), tags=f"T{i}") for i in range(3)]
    mq = MessageQueue("t", "broker-b", 3)
    with Producer(cluster.namesrv.addr, "pg") as producer:
        result = producer.send_batch(msgs, mq)
    req = next(r for r in cluster.b.requests if r.code == RequestCode.SEND_BATCH_MESSAGE)
    assert req.ext_fields["m"] == "true" and req.ext_fields["e"] == "3"
    entries = list(iter_batch(req.body))
    assert [e.body for e in entries] == [b"body-0", b"body-1", b"body-2"]
    uniqs = [decode_properties(e.properties)["UNIQ_KEY"] for e in entries]
    assert list(result.msg_ids) == uniqs and result.msg_id == ",".join(uniqs)
    assert all(decode_properties(e.properties)["WAIT"] == "true" for e in entries)
    assert len(result.offset_msg_ids) == 3 and result.queue_offset == 0
    assert result.message_queue == mq


def test_sync_facade_is_thread_safe(cluster: Cluster) -> None:
    producer = Producer(cluster.namesrv.addr)
    errors: list[BaseException] = []
    results: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        try:
            for i in range(25):
                r = producer.send(new_message("t", b"%d-%d" % (n, i)))
                with lock:
                    results.append(r.msg_id)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    producer.close()
    assert not errors
    assert len(results) == len(set(results)) == 200
    assert cluster.namesrv.route_requests("t") == 1  # concurrent first sends shared one route fetch
    stored = sum(len(q.records) for b in (cluster.a, cluster.b) for q in b.store.values())
    assert stored == 200


def test_send_async_future(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr) as producer:
        futures = [producer.send_async(new_message("t", b"%d" % i)) for i in range(20)]
        assert all(f.result(5).status is SendStatus.SEND_OK for f in futures)


def test_close_leaks_no_threads_and_shares_one_loop(cluster: Cluster) -> None:
    # Clients of session-scoped fixtures (the Spark tests' clusters) may hold the shared runtime already:
    # then these clients join its thread and must leave it running when they close.
    before = client_threads()
    assert len(before) <= 1
    p = Producer(cluster.namesrv.addr).start()
    c = PullConsumer(cluster.namesrv.addr, "g").start()
    a = Admin(cluster.namesrv.addr).start()
    assert len(client_threads()) == 1
    p.send(new_message("t", b"x"))
    a.topic_list()
    for client in (p, c, a):
        client.close()
        client.close()  # idempotent
    gc.collect()
    deadline = time.monotonic() + 5
    while client_threads() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client_threads() == before
    with pytest.raises(RuntimeError, match="closed"):
        p.send(new_message("t", b"x"))


def test_private_runtime_and_pickling(cluster: Cluster) -> None:
    p = Producer(cluster.namesrv.addr, "pg", send_timeout=2.0)
    clone = pickle.loads(pickle.dumps(p))  # before start: config only
    p.start()
    clone2 = pickle.loads(pickle.dumps(p))  # after start: still config only, unstarted
    assert clone._runtime is None and clone2._runtime is None and clone2.send_timeout == 2.0
    with Producer(cluster.namesrv.addr, shared_runtime=False) as private:
        assert private.send(new_message("t", b"x")).ok
        assert len(client_threads()) == 2
    p.close()
    consumer = pickle.loads(pickle.dumps(PullConsumer(cluster.namesrv.addr, "g", pull_timeout=4.0)))
    assert consumer.pull_timeout == 4.0


def test_sync_call_from_loop_thread_is_refused(cluster: Cluster) -> None:
    with Producer(cluster.namesrv.addr) as producer:
        runtime, _core = producer._ensure_started()

        async def inner() -> None:
            producer.send(new_message("t", b"x"))

        with pytest.raises(RuntimeError, match="own event loop"):
            runtime.run(inner(), 5)


def test_async_producer_api(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with AsyncProducer(cluster.namesrv.addr) as producer:
            results = await asyncio.gather(*(producer.send(new_message("t", b"%d" % i)) for i in range(10)))
            assert len({r.msg_id for r in results}) == 10
            await producer.send_oneway(new_message("t", b"oneway"))

    asyncio.run(scenario())


# -- pull consumer -------------------------------------------------------------------------------


def _fill(cluster: Cluster, mq: MessageQueue, tags: list[str | None]) -> None:
    with Producer(cluster.namesrv.addr) as producer:
        for i, tag in enumerate(tags):
            producer.send(new_message(mq.topic, b"m%d" % i, tags=tag), mq)


def test_pull_statuses_and_offsets(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-b", 1)
    _fill(cluster, mq, [None] * 5)
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        assert consumer.fetch_message_queues("t") == sorted(
            [MessageQueue("t", n, i) for n in ("broker-a", "broker-b") for i in range(4)])
        r = consumer.pull(mq, 0, max_nums=3)
        assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"m0", b"m1", b"m2"]
        assert (r.next_begin_offset, r.min_offset, r.max_offset) == (3, 0, 5)
        assert [m.queue_offset for m in r.messages] == [0, 1, 2] and r.messages[0].topic == "t"
        r = consumer.pull(mq, 5)
        assert r.status is PullStatus.NO_NEW_MSG and r.next_begin_offset == 5 and r.messages == []
        assert consumer.query_consumer_offset(mq) is None
        consumer.update_consumer_offset(mq, 3)
        assert consumer.query_consumer_offset(mq) == 3
    req = next(r for r in cluster.b.requests if r.code == RequestCode.PULL_MESSAGE)
    h = PullMessageRequestHeader.from_ext(req.ext_fields)
    assert h.consumer_group == "g" and h.sys_flag == PULL_FLAG_SUBSCRIPTION and h.expression_type == "TAG"
    assert h.subscription == "*" and h.max_msg_nums == 3


def test_long_poll_and_commit_flags(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-b", 0)
    _fill(cluster, mq, [None])
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        consumer.pull(mq, 0, suspend_timeout_ms=1000, commit_offset=0)
        with pytest.raises(ValueError, match="exceed"):
            consumer.pull(mq, 0, suspend_timeout_ms=2000, timeout=1.0)
    h = PullMessageRequestHeader.from_ext(cluster.b.first(RequestCode.PULL_MESSAGE).ext_fields)
    assert h.sys_flag == PULL_FLAG_SUBSCRIPTION | PULL_FLAG_SUSPEND | PULL_FLAG_COMMIT_OFFSET
    assert h.suspend_timeout_millis == 1000


def test_tag_refilter_on_hash_collisions(cluster: Cluster) -> None:
    # Find a tag whose hash collides with "TagA" in the fake broker's 4-bit filter.
    collide = next(t for t in (f"X{i}" for i in range(1000))
                   if tags_hash_code(t) & 0xF == tags_hash_code("TagA") & 0xF and t != "TagA")
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, ["TagA", collide, None, "TagB", "TagA"])
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        r = consumer.pull(mq, 0, expression="TagA")
        assert [m.body for m in r.messages] == [b"m0", b"m4"] and r.next_begin_offset == 5
        r = consumer.pull(mq, 0, expression="TagB || TagA")
        assert [m.body for m in r.messages] == [b"m0", b"m3", b"m4"]
        r = consumer.pull(mq, 0, expression="*")
        assert len(r.messages) == 5
        r = consumer.pull(mq, 1, max_nums=1, expression="Nope")
        assert r.status in (PullStatus.NO_MATCHED_MSG, PullStatus.FOUND) and r.messages == []
        # undecoded pulls: the same records as bytes, re-filtered the same way
        for expression, bodies in (("*", [b"m0", b"m1", b"m2", b"m3", b"m4"]), ("TagA", [b"m0", b"m4"]),
                                   ("TagB || TagA", [b"m0", b"m3", b"m4"])):
            r = consumer.pull(mq, 0, expression=expression, decode=False)
            assert r.messages == [] and r.next_begin_offset == 5
            assert [m.body for m in decode_stored_messages(r.raw)] == bodies


def test_follows_suggest_which_broker_id(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, [None] * 4)
    cluster.a.suggest = 1  # primary says: read this queue from replica 1
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        cluster.namesrv.routes["t"] = make_route([cluster.a, cluster.a1, cluster.b])
        consumer.pull(mq, 0, max_nums=1)
        assert consumer.pull_from_broker_id(mq) == 1
        r = consumer.pull(mq, 1, max_nums=1, commit_offset=1)
        assert [m.body for m in r.messages] == [b"m1"]
        assert cluster.a1.count(RequestCode.PULL_MESSAGE) == 1
        # A replica never gets the commit-offset flag (Java clears it for slaves).
        h = PullMessageRequestHeader.from_ext(cluster.a1.first(RequestCode.PULL_MESSAGE).ext_fields)
        assert not h.sys_flag & PULL_FLAG_COMMIT_OFFSET
        # The replica suggests the primary again (suggest = 0) ...
        assert consumer.pull_from_broker_id(mq) == 0
        # ... and a suggestion of an id the route lacks falls back to the primary.
        cluster.a.suggest = 5
        consumer.pull(mq, 2, max_nums=1)
        assert cluster.a.count(RequestCode.PULL_MESSAGE) == 2
        assert consumer.pull_from_broker_id(mq) == 5
        consumer.pull(mq, 3, max_nums=1)
        assert cluster.a.count(RequestCode.PULL_MESSAGE) == 3


def test_failing_replica_sends_next_pull_to_primary(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, [None] * 2)
    cluster.namesrv.routes["t"] = make_route([cluster.a, cluster.a1, cluster.b])
    cluster.a.suggest = 1
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        consumer.pull(mq, 0, max_nums=1)
        cluster.loop.run(cluster.a1.server.stop())
        with pytest.raises(TransportError):
            consumer.pull(mq, 1)
        cluster.a.suggest = 0
        assert consumer.pull(mq, 1).messages[0].body == b"m1"


def _read_disabled(cmd: RemotingCommand) -> RemotingCommand | None:
    """A replica without slave_read_enable: every pull back to the primary, unread (the real broker's answer)."""
    if cmd.code != RequestCode.PULL_MESSAGE:
        return None
    offset = PullMessageRequestHeader.from_ext(cmd.ext_fields).queue_offset
    return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY, "slave read is disabled on this broker", {
        "suggestWhichBrokerId": "0", "nextBeginOffset": str(offset), "minOffset": "0", "maxOffset": "2"})


def test_read_disabled_replica_sends_the_pull_to_the_primary_at_once(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, [None] * 2)
    cluster.namesrv.routes["t"] = make_route([cluster.a, cluster.a1, cluster.b])
    cluster.a.suggest = 1
    cluster.a1.hook = _read_disabled
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        consumer.pull(mq, 0, max_nums=1)
        cluster.a.suggest = 0
        r = consumer.pull(mq, 1)  # replica 1 first (the suggestion), then the primary in the same call
        assert [m.body for m in r.messages] == [b"m1"] and r.next_begin_offset == 2
        assert cluster.a1.count(RequestCode.PULL_MESSAGE) == 1 and consumer.pull_from_broker_id(mq) == 0


def test_read_disabled_replica_without_a_primary_in_the_route_is_a_stale_route(cluster: Cluster) -> None:
    # Right after a primary died the route may list only the replica about to be promoted: its answer
    # must not look like an empty read at the same offset (a reader would loop or give up on the queue).
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, [None] * 2)
    cluster.namesrv.routes["t"] = make_route([cluster.a1, cluster.b])
    cluster.a1.hook = _read_disabled
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        with pytest.raises(ServiceNotAvailableError, match="route names no other primary") as err:
            consumer.pull(mq, 0)
        assert err.value.retriable and err.value.invalid_route
        asked = cluster.namesrv.route_requests("t")
        cluster.namesrv.routes["t"] = make_route([cluster.a, cluster.a1, cluster.b])  # the election is over
        assert [m.body for m in consumer.pull(mq, 0).messages] == [b"m0", b"m1"]
        assert cluster.namesrv.route_requests("t") == asked + 1  # the route was dropped, then asked again


def test_primary_in_a_stale_route_answering_as_a_replica_is_a_stale_route(cluster: Cluster) -> None:
    # A demoted primary (restarted as a replica at its old address) still listed as id 0.
    mq = MessageQueue("t", "broker-a", 0)
    _fill(cluster, mq, [None] * 2)
    cluster.a.hook = _read_disabled
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=None) as consumer:
        with pytest.raises(ServiceNotAvailableError, match="broker id 0 of broker-a sends reads to the primary"):
            consumer.pull(mq, 0)
        cluster.a.hook = None
        assert [m.body for m in consumer.pull(mq, 0).messages] == [b"m0", b"m1"]


def test_heartbeat_and_unregister(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-b", 0)
    with PullConsumer(cluster.namesrv.addr, "g", heartbeat_interval=30.0) as consumer:
        consumer.pull(mq, 0, expression="TagA || TagB")
        deadline = time.monotonic() + 5
        while not cluster.b.count(RequestCode.HEART_BEAT) and time.monotonic() < deadline:
            time.sleep(0.01)
        hb = orjson.loads(next(r for r in cluster.b.requests if r.code == RequestCode.HEART_BEAT).body)
        assert hb["clientID"] == consumer.client_id
        data = hb["consumerDataSet"][0]
        assert data["groupName"] == "g" and data["consumeType"] == "CONSUME_ACTIVELY"
        sub = data["subscriptionDataSet"][0]
        assert sub["topic"] == "t" and sub["tagsSet"] == ["TagA", "TagB"]
        assert sub["codeSet"] == sorted([tags_hash_code("TagA"), tags_hash_code("TagB")])
        with Admin(cluster.namesrv.addr) as admin:
            assert consumer.client_id in admin.consumer_list("g", "t")
    assert cluster.b.count(RequestCode.UNREGISTER_CLIENT) == 1


# -- admin ---------------------------------------------------------------------------------------


def test_admin_metadata_and_offsets(cluster: Cluster) -> None:
    mq = MessageQueue("t", "broker-a", 2)
    _fill(cluster, mq, [None] * 3)
    with Admin(cluster.namesrv.addr) as admin:
        info = admin.cluster_info()
        assert info.cluster_addr_table["c1"] == ("broker-a", "broker-b")
        assert admin.topic_list() == ["TBW102", "t"]
        broker_b = admin.topic_route("t").broker("broker-b")
        assert broker_b is not None and broker_b.master_addr == cluster.b.addr
        with pytest.raises(TopicNotExistError):
            admin.topic_route("nope")
        assert admin.max_offset(mq) == 3 and admin.min_offset(mq) == 0
        assert admin.consumer_offset("g", mq) is None
        assert admin.consumer_list("nobody", "t") == []
        # the protocol's TopicConfig, as the broker reads it (attributes {} when there are none)
        assert admin.all_topic_config(cluster.a.addr) == {"t1": TopicConfig("t1", 4, 4, 6)}
        addrs = admin.create_topic("newtopic", queue_nums=2, cluster="c1")
        assert sorted(addrs) == sorted([cluster.a.addr, cluster.b.addr])
        created = cluster.a.created_topics[0]
        assert (created.topic, created.read_queue_nums, created.write_queue_nums) == ("newtopic", 2, 2)
        assert created.perm == 6
        assert created.default_topic == "TBW102" and created.topic_filter_type == "SINGLE_TAG"
        assert admin.create_topic("only-b", broker_names=["broker-b"]) == [cluster.b.addr]
        with pytest.raises(TopicNotExistError, match="cluster"):
            admin.create_topic("x", cluster="nocluster")
        cluster.namesrv.routes["later"] = make_route([cluster.b])
        assert admin.wait_for_route("later", timeout=2).broker_datas[0].broker_name == "broker-b"
        with pytest.raises(TransportError):
            admin.wait_for_route("never", timeout=0.3)


def test_consumer_list_after_a_primary_died_asks_the_name_server_again(cluster: Cluster) -> None:
    """The checkpoint connector asks ``consumer_list`` first: a route cached before a failover names the dead
    primary; its connection error must drop the route (as for every other broker request), or every later
    call fails on the dead address until the route's 30 s TTL runs out."""
    dead = f"127.0.0.1:{free_port()}"
    cluster.namesrv.routes["fo"] = TopicRouteData(queue_datas=(QueueData("broker-a", 4, 4, 6),),
                                                  broker_datas=(BrokerData("c1", "broker-a", {0: dead}),))
    with Admin(cluster.namesrv.addr) as admin:
        with pytest.raises(TransportError):
            admin.consumer_list("g", "fo")
        cluster.namesrv.routes["fo"] = make_route([cluster.a])  # the new primary registered
        assert admin.consumer_list("g", "fo") == []
        assert cluster.a.count(RequestCode.GET_CONSUMER_LIST_BY_GROUP) == 1


def test_namesrv_failover(cluster: Cluster) -> None:
    with Admin(["127.0.0.1:1", cluster.namesrv.addr]) as admin:
        assert "t" in admin.topic_list()
    with Admin("127.0.0.1:1;127.0.0.1:2") as admin, pytest.raises(TransportError):
        admin.topic_list()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_started_client_survives_fork(cluster: Cluster) -> None:
    """Spark forks Python workers: a client started in the parent restarts itself in the child."""
    with Producer(cluster.namesrv.addr) as producer:
        producer.send(new_message("t", b"parent"))
        pid = os.fork()
        if pid == 0:  # child: must leave through os._exit whatever happens
            code = 1
            try:
                code = 0 if producer.send(new_message("t", b"child")).ok else 2
                producer.close()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert producer.send(new_message("t", b"parent-again")).ok
    bodies = sorted(decode_stored_message(rec).body for b in (cluster.a, cluster.b)
                    for q in b.store.values() for rec, _ in q.records)
    assert bodies == [b"child", b"parent", b"parent-again"]


def test_read_only_topic_refuses_every_send_with_topic_not_exist(cluster: Cluster) -> None:
    """A route without writable queues is cached; every later send must still get a clear error, not an
    empty queue list (a Spark sink sends many batches to a read-only target topic)."""
    cluster.namesrv.routes["ro"] = make_route([cluster.a, cluster.b], perm=4)
    with Producer(cluster.namesrv.addr, auto_create_topic=False) as producer:
        for _ in range(3):
            with pytest.raises(TopicNotExistError, match="no writable queue"):
                producer.send(new_message("ro", b"x"))
            with pytest.raises(TopicNotExistError, match="no writable queue"):
                producer.send_batch([new_message("ro", b"x"), new_message("ro", b"y")])


def test_a_send_during_a_failover_waits_for_the_new_primary_route(cluster: Cluster) -> None:
    """The name server dropped the killed primary at once (its connection closed) and the new one has not
    registered yet: the route has writable queues but no master. The send asks the name server again (not the
    30 s cached route) until the primary is back, within its timeout."""
    cluster.namesrv.routes["fo"] = make_route([cluster.a1])  # broker-a listed by its replica only
    with Producer(cluster.namesrv.addr, auto_create_topic=False, send_timeout=5.0) as producer:
        timer = threading.Timer(0.5, lambda: cluster.namesrv.routes.__setitem__("fo", make_route([cluster.a])))
        timer.start()
        try:
            started = time.monotonic()
            assert producer.send(new_message("fo", b"x")).ok
            assert time.monotonic() - started >= 0.4  # it did wait for the route, not for the cache's TTL
        finally:
            timer.cancel()
    cluster.namesrv.routes["fo2"] = make_route([cluster.a1])  # no primary for longer than the send's timeout
    with Producer(cluster.namesrv.addr, auto_create_topic=False, send_timeout=0.3) as producer, \
            pytest.raises(NoWritableQueueError, match="no primary registered"):
        producer.send(new_message("fo2", b"x"))


class FrozenBroker(FakeBroker):
    """A primary that takes connections and requests but never answers (SIGSTOPped, or cut off)."""

    async def handle(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
        self.requests.append(cmd)
        await asyncio.Event().wait()
        return None


def test_attempt_timeout_leaves_a_frozen_primary_for_the_new_one(cluster: Cluster) -> None:
    """The route still names a primary that answers nothing while the controller elects another one: each
    attempt waits at most ``attempt_timeout``, asks the name server again and reaches the new primary within the
    send's budget. Without it the first attempt spends the whole budget on the frozen broker."""
    frozen = FrozenBroker("broker-a")
    cluster.loop.run(frozen.server.start())
    try:
        for topic, attempt_timeout in (("fz1", 0.3), ("fz2", None)):
            cluster.namesrv.routes[topic] = make_route([frozen])
            timer = threading.Timer(0.5, lambda t=topic: cluster.namesrv.routes.__setitem__(t, make_route([cluster.a])))
            timer.start()
            try:
                with Producer(cluster.namesrv.addr, auto_create_topic=False, send_timeout=1.5,
                              attempt_timeout=attempt_timeout) as producer:
                    if attempt_timeout is None:
                        with pytest.raises(RequestTimeoutError):
                            producer.send(new_message(topic, b"x"))
                    else:
                        result = producer.send(new_message(topic, b"x"))
                        assert result.ok and result.message_queue.broker_name == "broker-a"
            finally:
                timer.cancel()
        assert sum(1 for r in frozen.requests if r.code == RequestCode.SEND_MESSAGE_V2) >= 2
        assert cluster.a.count(RequestCode.SEND_MESSAGE_V2) == 1
    finally:
        cluster.loop.run(frozen.server.stop())
    with pytest.raises(ConfigError, match="attempt_timeout"):
        Producer(cluster.namesrv.addr, attempt_timeout=0)


def test_credentials_sign_every_request_to_name_server_and_brokers(cluster: Cluster) -> None:
    from broker_store.protocol.acl import SessionCredentials, verify

    creds = SessionCredentials("replicator", "s3cret")
    with Producer(cluster.namesrv.addr, credentials=creds) as producer:
        producer.send(new_message("t", b"x"))
        producer.send_batch([new_message("t", b"y"), new_message("t", b"z")], MessageQueue("t", "broker-a", 1))
        clone = pickle.loads(pickle.dumps(producer))  # executors get the credentials with the client
    with clone:
        clone.send(new_message("t", b"w"))
    with PullConsumer(cluster.namesrv.addr, "g", credentials=creds) as consumer:
        consumer.pull(MessageQueue("t", "broker-a", 1), 0, 8)
        consumer.update_consumer_offset(MessageQueue("t", "broker-a", 1), 2)
    with Admin(cluster.namesrv.addr, credentials=creds) as admin:
        admin.max_offset(MessageQueue("t", "broker-b", 0))
    requests = [*cluster.namesrv.requests, *cluster.a.requests, *cluster.b.requests]
    codes = {r.code for r in requests}
    assert {RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
            RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.GET_MAX_OFFSET} <= codes
    for r in requests:
        assert r.ext_fields.get("AccessKey") == "replicator", r
        assert verify(r, "s3cret"), r
    with Producer(cluster.namesrv.addr) as plain:  # no credentials: no ACL fields at all
        plain.send(new_message("t", b"x"))
    assert "Signature" not in cluster.namesrv.requests[-1].ext_fields
