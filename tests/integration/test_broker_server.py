"""A real name server and broker in-process on ephemeral loopback ports, driven with RemotingClient.

Each test runs its own asyncio loop (``run``) with a fresh store directory and tears everything
down, so tests are independent. Requests are built from the typed headers, the way any RocketMQ
client would send them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker_store.broker import BrokerRole, BrokerServer, run_broker
from broker_store.broker.controller_wiring import PromotionStepsFactory
from broker_store.broker.role_transition import StorePromotionSteps
from broker_store.broker.subscription_group import SubscriptionGroupConfig
from broker_store.clock import SYSTEM_CLOCK, Clock, ManualClock
from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.namesrv import NamesrvServer, run_namesrv
from broker_store.net import RemotingClient
from broker_store.protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    SEND_V2_NAMES,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    RegisterBrokerRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    TopicRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from broker_store.protocol.message import (
    StoredMessage,
    decode_properties,
    decode_stored_message,
    decode_stored_messages,
    encode_batch,
    encode_properties,
)
from broker_store.protocol.route import ClusterInfo, TopicRouteData, loads_rocketmq
from broker_store.protocol.topic import (
    DataVersion,
    TopicConfig,
    TopicConfigTable,
    encode_register_broker_body,
)
from broker_store.store import MessageStore
from broker_store.store.delay_levels import SCHEDULE_TOPIC
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

TIMEOUT = 5.0


@dataclass
class Env:
    namesrv: NamesrvServer
    broker: BrokerServer
    client: RemotingClient
    tmp: Path

    async def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        addr: str | None = None,
        timeout: float = TIMEOUT,
    ) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext_fields=ext or {}, body=body)
        return await self.client.invoke(addr or self.broker.addr, cmd, timeout)

    async def send(
        self,
        topic: str,
        body: bytes,
        props: dict[str, str] | None = None,
        *,
        queue_id: int = 0,
        code: int = RequestCode.SEND_MESSAGE_V2,
        default_queue_nums: int = 4,
        flag: int = 0,
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
    ) -> RemotingCommand:
        h = SendMessageRequestHeader(
            producer_group="pg",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=default_queue_nums,
            queue_id=queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=flag,
            properties=encode_properties(props or {}).decode(),
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume_times,
        )
        names = SEND_V2_NAMES if code != RequestCode.SEND_MESSAGE else None
        return await self.call(code, h.to_ext(names), body)

    async def pull(
        self,
        topic: str,
        offset: int = 0,
        *,
        queue_id: int = 0,
        expr: str | None = "*",
        suspend_ms: int = 0,
        commit_offset: int = 0,
        group: str = "cg",
        max_nums: int = 32,
        timeout: float = TIMEOUT,
    ) -> tuple[RemotingCommand, list[StoredMessage]]:
        flag = PULL_FLAG_SUBSCRIPTION if expr is not None else 0
        if suspend_ms:
            flag |= PULL_FLAG_SUSPEND
        if commit_offset:
            flag |= PULL_FLAG_COMMIT_OFFSET
        h = PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=flag,
            commit_offset=commit_offset,
            suspend_timeout_millis=suspend_ms,
            sub_version=0,
            subscription=expr,
        )
        resp = await self.call(RequestCode.PULL_MESSAGE, h.to_ext(), timeout=timeout)
        return resp, decode_stored_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []

    async def route(self, topic: str) -> RemotingCommand:
        return await self.call(
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            TopicRequestHeader(topic=topic).to_ext(),
            addr=self.namesrv.addr,
        )

    async def topic_table(self) -> TopicConfigTable:
        resp = await self.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert resp.code == ResponseCode.SUCCESS
        return TopicConfigTable.decode(resp.body)


def broker_config(tmp: Path, namesrv_addr: str, **overrides: Any) -> BrokerConfig:
    settings: dict[str, Any] = {
        "cluster_name": "c1",
        "broker_name": "broker-a",
        "listen": "127.0.0.1:0",
        "store_dir": tmp / "broker-a",
        "namesrv_addrs": [namesrv_addr],
        "commit_log_segment_size": 4 * 1024 * 1024,
        "max_message_size": 64 * 1024,
        "heartbeat_interval_seconds": 0.1,
        "flush_interval_ms": 50,
    }
    settings.update(overrides)
    return BrokerConfig(**settings)


def run(
    tmp: Path,
    body: Callable[[Env], Awaitable[None]],
    *,
    namesrv: dict[str, Any] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    promotion_steps: PromotionStepsFactory = StorePromotionSteps,
    **broker_overrides: Any,
) -> None:
    """Start name server + broker (on ``clock``), run ``body``, tear everything down (also on failure)."""

    async def main() -> None:
        ns = NamesrvServer(NamesrvConfig(listen="127.0.0.1:0", **(namesrv or {})))
        await ns.start()
        broker = BrokerServer(broker_config(tmp, ns.addr, **broker_overrides), clock=clock,
                              promotion_steps=promotion_steps)
        client = RemotingClient()
        try:
            await broker.start()
            await asyncio.wait_for(body(Env(ns, broker, client, tmp)), 30)
        finally:
            await client.close()
            await broker.stop()
            await ns.stop()

    asyncio.run(main())


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def _ok(resp: RemotingCommand) -> RemotingCommand:
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return resp


# -- send / pull ------------------------------------------------------------------------------------


def test_send_v1_v2_and_pull_byte_exact(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0B0C0D0000000000000001"}
        r1 = _ok(await env.send("Orders", b"first", props, code=RequestCode.SEND_MESSAGE, flag=3))
        r2 = _ok(await env.send("Orders", b"second" * 100, {"TAGS": "TagB"}))
        h1 = SendMessageResponseHeader.from_ext(r1.ext_fields)
        h2 = SendMessageResponseHeader.from_ext(r2.ext_fields)
        assert (h1.queue_id, h1.queue_offset, h2.queue_offset) == (0, 0, 1)
        assert r1.ext_fields["MSG_REGION"] == "DefaultRegion" and r1.ext_fields["TRACE_ON"] == "true"

        resp, msgs = await env.pull("Orders")
        _ok(resp)
        assert resp.ext_fields == {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": "2",
            "minOffset": "0",
            "maxOffset": "2",
        }
        assert [m.body for m in msgs] == [b"first", b"second" * 100]
        assert dict(msgs[0].properties) == {**props, "CLUSTER": "c1"}
        assert msgs[0].flag == 3 and msgs[0].queue_offset == 0 and msgs[1].queue_offset == 1
        assert [m.offset_msg_id for m in msgs] == [h1.msg_id, h2.msg_id]
        assert msgs[0].store_host == env.broker.addr
        # The pull body is the stored records, byte for byte.
        records = [env.broker.store.read_record(m.commit_log_offset) for m in msgs]
        assert resp.body == b"".join(r for r in records if r is not None)

        resp, msgs = await env.pull("Orders", 2)
        assert resp.code == ResponseCode.PULL_NOT_FOUND and msgs == []
        resp, _ = await env.pull("Orders", 7)
        assert (
            resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.ext_fields["nextBeginOffset"] == "0"
        )  # min offset 0
        resp, _ = await env.pull("Orders", 0, queue_id=3)  # existing queue, never written
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        resp, _ = await env.pull("Orders", 5, queue_id=3)
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED

    run(tmp_path, body)


def test_batch_send_and_tag_filtering(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        _ok(await env.send("Batch", b"warm-up"))
        entries = [
            (f"m{i}".encode() * 10, encode_properties({"TAGS": "ABC"[i % 3], "KEYS": str(i)}), i)
            for i in range(100)
        ]
        h = SendMessageRequestHeader(
            producer_group="pg",
            topic="Batch",
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=1,
            sys_flag=0,
            born_timestamp=1,
            flag=0,
            batch=True,
        )
        resp = _ok(
            await env.call(RequestCode.SEND_BATCH_MESSAGE, h.to_ext(SEND_V2_NAMES), encode_batch(entries))
        )
        ids = resp.ext_fields["msgId"].split(",")
        assert len(ids) == 100 and resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["queueId"] == "1"

        resp, msgs = await env.pull("Batch", queue_id=1, max_nums=200)
        assert [m.body for m in msgs] == [e[0] for e in entries]
        assert [m.flag for m in msgs] == list(range(100))
        assert [m.offset_msg_id for m in msgs] == ids
        assert [m.queue_offset for m in msgs] == list(range(100))
        assert all(m.properties["CLUSTER"] == "c1" for m in msgs)

        resp, msgs = await env.pull("Batch", queue_id=1, expr="A || C", max_nums=200)
        assert [int(m.properties["KEYS"]) for m in msgs] == [i for i in range(100) if i % 3 != 1]
        resp, msgs = await env.pull("Batch", queue_id=1, expr="Z", max_nums=200)
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and msgs == []

        # V1 header names are accepted for batches too.
        resp = _ok(await env.call(RequestCode.SEND_BATCH_MESSAGE, h.to_ext(), encode_batch(entries[:2])))
        assert resp.ext_fields["queueOffset"] == "100"

    run(tmp_path, body)


def test_batch_properties_cluster_and_limits(tmp_path: Path) -> None:
    """The batch path's CLUSTER stamping for every shape of properties, and its properties limit."""

    async def body(env: Env) -> None:
        h = SendMessageRequestHeader(
            producer_group="pg", topic="BatchProps", default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=0, sys_flag=0, born_timestamp=1, flag=0, batch=True,
        )
        ext = h.to_ext(SEND_V2_NAMES)
        shapes = [b"", b"K\x01v\x02", b"K\x01v", b"TAGS\x01T1\x02", b"XCLUSTER\x01x\x02"]
        _ok(await env.call(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(b"a", p, 0) for p in shapes])))
        # one message naming a cluster already: it gets this broker's name like the others
        named = [*shapes, b"CLUSTER\x01other\x02TAGS\x01T2\x02"]
        _ok(await env.call(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(b"b", p, 0) for p in named])))
        _, msgs = await env.pull("BatchProps", max_nums=100)
        assert [dict(m.properties) for m in msgs] == [
            {**decode_properties(p), "CLUSTER": "c1"} for p in shapes + named
        ]
        _, tagged = await env.pull("BatchProps", expr="T1 || T2", max_nums=100)
        assert [m.properties["TAGS"] for m in tagged] == ["T1", "T1", "T2"]

        # CLUSTER\x01c1\x02 (11 bytes) takes properties of 32757 bytes past the limit of 32767
        too_long = b"P\x01" + b"v" * 32754 + b"\x02"
        resp = await env.call(
            RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(b"c", b"", 0), (b"d", too_long, 0)])
        )
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "properties length 32768" in (resp.remark or "")
        assert env.broker.store.get_max_offset("BatchProps", 0) == len(shapes) + len(named)

    run(tmp_path, body)


def test_delay_property_shapes_on_the_send_paths(tmp_path: Path) -> None:
    """DELAY 0 or negative is stored as sent; a DELAY that is no integer is illegal; a batch asking for a delay
    in its own properties is illegal (RocketMQ's putMessages), DELAY inside its messages is stored as sent."""

    async def body(env: Env) -> None:
        for level in ("0", "-2"):
            _ok(await env.send("Shapes", level.encode(), {"DELAY": level}))
        assert env.broker.store.get_max_offset("Shapes", 0) == 2
        resp = await env.send("Shapes", b"x", {"DELAY": "soon"})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "not an integer delay level" in (resp.remark or "")
        resp = _ok(await env.send("Shapes", b"later", {"DELAY": "1"}, queue_id=3))
        assert resp.ext_fields["queueId"] == "3" and env.broker.store.get_max_offset(SCHEDULE_TOPIC, 0) == 1

        h = SendMessageRequestHeader(
            producer_group="pg", topic="Shapes", default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=1, sys_flag=0, born_timestamp=1, flag=0, batch=True, properties="DELAY\x011\x02",
        )
        entries = encode_batch([(b"a", b"DELAY\x011\x02", 0)])
        resp = await env.call(RequestCode.SEND_BATCH_MESSAGE, h.to_ext(SEND_V2_NAMES), entries)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "a batch cannot be delayed" in (resp.remark or "")
        plain = dataclasses.replace(h, properties="")
        _ok(await env.call(RequestCode.SEND_BATCH_MESSAGE, plain.to_ext(SEND_V2_NAMES), entries))
        _, (msg,) = await env.pull("Shapes", queue_id=1)
        assert msg.properties["DELAY"] == "1" and env.broker.store.get_max_offset(SCHEDULE_TOPIC, 0) == 1

    run(tmp_path, body)


def test_batch_limits_are_per_body_and_per_encoded_batch(tmp_path: Path) -> None:
    """With max_message_size 64 KiB: a 64 KiB body with properties goes in a batch as it goes alone (the
    encoded batch is over 64 KiB), a 64 KiB + 1 body does not, and the encoded batch stops at 128 KiB."""

    async def body(env: Env) -> None:
        ext = SendMessageRequestHeader(
            producer_group="pg", topic="BatchSize", default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=0, sys_flag=0, born_timestamp=1, flag=0, batch=True,
        ).to_ext(SEND_V2_NAMES)
        props = encode_properties({"UNIQ_KEY": "A" * 32, "KEYS": "k" * 1000})
        full = b"f" * (64 * 1024)
        _ok(await env.call(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(full, props, 0)])))
        _ok(await env.send("BatchSize", full))  # the single send agrees
        too_long_body = encode_batch([(b"x", b"", 0), (full + b"!", b"", 0)])
        resp = await env.call(RequestCode.SEND_BATCH_MESSAGE, ext, too_long_body)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "body size 65537" in (resp.remark or "")
        resp = await env.call(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(full, props, 0)] * 2))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "encoded batch size" in (resp.remark or "")
        _, msgs = await env.pull("BatchSize", max_nums=10)
        assert [len(m.body) for m in msgs] == [64 * 1024, 64 * 1024]

    run(tmp_path, body)


def test_long_polling_wakes_on_arrival_and_times_out(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        _ok(await env.send("Poll", b"0"))
        started = time.monotonic()
        held = asyncio.ensure_future(env.pull("Poll", 1, suspend_ms=10_000, timeout=15))
        await asyncio.sleep(0.3)
        assert not held.done()
        _ok(await env.send("Poll", b"1"))
        resp, msgs = await asyncio.wait_for(held, 3)
        assert resp.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"1"]
        assert time.monotonic() - started < 3

        started = time.monotonic()
        resp, _ = await env.pull("Poll", 2, suspend_ms=300)
        elapsed = time.monotonic() - started
        assert resp.code == ResponseCode.PULL_NOT_FOUND and 0.25 < elapsed < 2.5

        # A filtered arrival does not end the hold: the pull answers when nothing matched.
        held = asyncio.ensure_future(env.pull("Poll", 2, expr="Wanted", suspend_ms=10_000, timeout=15))
        await asyncio.sleep(0.1)
        _ok(await env.send("Poll", b"2", {"TAGS": "Other"}))
        resp, msgs = await asyncio.wait_for(held, 3)
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and msgs == []

    run(tmp_path, body)


def test_short_polling_when_long_polling_disabled(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        _ok(await env.send("Poll", b"0"))
        started = time.monotonic()
        resp, _ = await env.pull("Poll", 1, suspend_ms=10_000)
        assert resp.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - started < 2

    run(tmp_path, body, long_polling_enable=False, short_polling_time_ms=200)


# -- topics -----------------------------------------------------------------------------------------


def test_auto_create_via_tbw102_registers_route(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        assert (await env.route("Fresh")).code == ResponseCode.TOPIC_NOT_EXIST
        tbw = (await env.topic_table()).topic_configs["TBW102"]
        assert tbw.perm == 7 and tbw.write_queue_nums == 8
        _ok(await env.send("Fresh", b"x", default_queue_nums=3))
        created = (await env.topic_table()).topic_configs["Fresh"]
        assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (3, 3, 6)
        _ok(await env.send("Wide", b"x", default_queue_nums=64))
        assert (await env.topic_table()).topic_configs["Wide"].write_queue_nums == 8

        async def routed() -> bool:
            return (await env.route("Fresh")).code == ResponseCode.SUCCESS

        await eventually(routed)
        route = TopicRouteData.decode((await env.route("Fresh")).body)
        assert route.queue_datas[0].write_queue_nums == 3
        assert dict(route.broker_datas[0].broker_addrs) == {0: env.broker.addr}
        assert b'"brokerAddrs":{0:"' in (await env.route("Fresh")).body

    run(tmp_path, body)


def test_auto_create_off_and_explicit_create(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        assert "TBW102" not in (await env.topic_table()).topic_configs
        resp = await env.send("Nope", b"x")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert (
            "topic[Nope] not exist" in (resp.remark or "")
            and "auto_create_topic_enable is off" in (resp.remark or "")
        )
        h = CreateTopicRequestHeader(
            topic="Made",
            default_topic="TBW102",
            read_queue_nums=2,
            write_queue_nums=2,
            perm=6,
            topic_filter_type="SINGLE_TAG",
        )
        _ok(await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, h.to_ext()))

        async def routed() -> bool:
            return (await env.route("Made")).code == ResponseCode.SUCCESS

        await eventually(routed, timeout=2.0)  # immediate re-registration, not the 30 s period
        _ok(await env.send("Made", b"x", queue_id=1))
        resp = await env.send("Made", b"x", queue_id=2)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "request queueId[2] is illegal" in (
            resp.remark or ""
        )
        bad = CreateTopicRequestHeader(
            topic="bad topic",
            default_topic="TBW102",
            read_queue_nums=2,
            write_queue_nums=2,
            perm=6,
            topic_filter_type="SINGLE_TAG",
        )
        assert (
            await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, bad.to_ext())
        ).code == ResponseCode.SYSTEM_ERROR

    run(tmp_path, body, auto_create_topic_enable=False)


# -- validation and robustness ----------------------------------------------------------------------


def test_message_illegal_cases(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        resp = await env.send("bad topic!", b"x")
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "bad topic!" in (resp.remark or "")
        resp = await env.send("T" * 128, b"x")
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "127" in (resp.remark or "")
        resp = await env.send("Big", b"x" * (64 * 1024 + 1))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "65536" in (resp.remark or "")
        _ok(await env.send("Big", b"x" * (64 * 1024)))
        resp = await env.send("Big", b"x", {"P": "v" * 33_000})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in (resp.remark or "")
        assert "exceed" in (resp.remark or "")
        resp = await env.send("Big", b"x", queue_id=99)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "request queueId[99] is illegal" in (
            resp.remark or ""
        )
        resp = await env.send("SCHEDULE_TOPIC_XXXX", b"x")
        assert resp.code == ResponseCode.NO_PERMISSION
        # A header that does not decode: SYSTEM_ERROR naming the field, as RocketMQ does.
        resp = await env.call(RequestCode.SEND_MESSAGE, {"producerGroup": "pg"}, b"x")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "'topic'" in (resp.remark or "")
        resp = await env.call(RequestCode.PULL_MESSAGE, {"topic": "Big", "queueId": "zero"})
        assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (resp.remark or "")
        resp, _ = await env.pull("Missing")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST

    run(tmp_path, body)


def test_request_code_not_supported(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        resp = await env.call(9999)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in (resp.remark or "")
        resp = await env.call(9999, addr=env.namesrv.addr)
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in (resp.remark or "")

    run(tmp_path, body)


def test_garbage_closes_only_that_connection(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        host, port = env.broker.addr.rsplit(":", 1)
        for garbage in (struct.pack(">i", 2**30) + b"junk", struct.pack(">ii", 12, 0x00000008) + b"{{{{{{{{"):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(garbage)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 3) == b""  # closed by the broker
            writer.close()
        _ok(await env.send("StillUp", b"ok"))
        resp, msgs = await env.pull("StillUp")
        assert [m.body for m in msgs] == [b"ok"]

    run(tmp_path, body)


def test_replica_role_refuses_writes(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        resp = await env.send("T", b"x")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (resp.remark or "")

    # The primary it follows is not running: the replica keeps retrying its HA link meanwhile.
    run(tmp_path, body, broker_id=1, ha={"role": "SLAVE", "ha_primary_address": f"127.0.0.1:{free_port()}"})


def test_role_change_at_runtime_switches_writes_and_registration(tmp_path: Path) -> None:
    """BrokerServer.change_role is the one switch: writes follow it and the name server learns the new id."""

    async def body(env: Env) -> None:
        _ok(await env.send("Roles", b"as primary"))
        await env.broker.change_role(BrokerRole.REPLICA)
        resp = await env.send("Roles", b"as replica")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE

        async def registered_as(broker_id: int) -> bool:
            route = await env.route("Roles")
            return route.code == ResponseCode.SUCCESS and \
                dict(TopicRouteData.decode(route.body).broker_datas[0].broker_addrs) == {broker_id: env.broker.addr}

        await eventually(lambda: registered_as(1))
        await env.broker.change_role(BrokerRole.PRIMARY)
        _ok(await env.send("Roles", b"primary again"))
        await eventually(lambda: registered_as(0))

    run(tmp_path, body)


class GatedPromotion(StorePromotionSteps):
    """The store steps, with the epoch entry held until the test lets it go: the fenced window stays open."""

    def __init__(self, store: MessageStore) -> None:
        super().__init__(store)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.entries: list[tuple[int, int]] = []

    async def append_epoch_entry(self, epoch: int, start_offset: int) -> None:
        self.entries.append((epoch, start_offset))
        self.entered.set()
        await self.release.wait()
        await super().append_epoch_entry(epoch, start_offset)


def test_a_promotion_refuses_sends_while_fenced_and_takes_them_once_unfenced(tmp_path: Path) -> None:
    """While a promotion awaits its steps the broker answers sends SERVICE_NOT_AVAILABLE saying it is fenced,
    serves pulls and still registers as a replica; once unfenced it takes the same send and registers as 0."""
    gates: list[GatedPromotion] = []

    def gated(store: MessageStore) -> GatedPromotion:
        gates.append(GatedPromotion(store))
        return gates[-1]

    async def body(env: Env) -> None:
        _ok(await env.send("Fence", b"before"))
        await env.broker.change_role(BrokerRole.REPLICA)
        resp = await env.send("Fence", b"as replica")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "fenced" not in (resp.remark or "")

        async def registered_as(broker_id: int) -> bool:
            route = await env.route("Fence")
            return route.code == ResponseCode.SUCCESS and \
                dict(TopicRouteData.decode(route.body).broker_datas[0].broker_addrs) == {broker_id: env.broker.addr}

        await eventually(lambda: registered_as(1))
        max_offset = env.broker.store.max_physical_offset
        promotion = asyncio.ensure_future(env.broker.change_role(BrokerRole.PRIMARY, epoch=1))
        await asyncio.wait_for(gates[0].entered.wait(), TIMEOUT)
        for _ in range(3):
            resp = await env.send("Fence", b"while fenced")
            assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "broker-a is fenced while it changes role (PROMOTING, epoch 1)" in (resp.remark or "")
        resp, msgs = await env.pull("Fence")
        assert resp.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"before"]
        assert json.loads(env.broker._ha_status())["stage"] == "PROMOTING"
        assert await registered_as(1) and not promotion.done()
        assert gates[0].entries == [(1, max_offset)]  # the epoch starts where the log ends

        gates[0].release.set()
        await asyncio.wait_for(promotion, TIMEOUT)
        _ok(await env.send("Fence", b"while fenced"))
        await eventually(lambda: registered_as(0))
        resp, msgs = await env.pull("Fence")
        assert [m.body for m in msgs] == [b"before", b"while fenced"]
        status = json.loads(env.broker._ha_status())
        assert (status["stage"], status["role"], status["epoch"]) == ("PRIMARY", "PRIMARY", 1)

    run(tmp_path, body, promotion_steps=gated)


def test_controller_mode_keeps_the_assigned_id_across_a_restart_on_another_address(tmp_path: Path) -> None:
    """A controller-mode broker without brokerIdentity serves but does not register; once assigned an id it
    registers as that replica, and after a restart on a new port it registers under the same id at once."""

    async def main() -> None:
        ns = NamesrvServer(NamesrvConfig(listen="127.0.0.1:0"))
        await ns.start()
        client = RemotingClient()
        cfg = broker_config(tmp_path, ns.addr, enable_controller_mode=True)

        async def registered() -> dict[int, str]:
            cmd = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)
            info = ClusterInfo.decode(_ok(await client.invoke(ns.addr, cmd, TIMEOUT)).body)
            group = info.broker_addr_table.get("broker-a")
            return dict(group.broker_addrs) if group is not None else {}

        try:
            first = BrokerServer(cfg)
            await first.start()
            try:
                assert first.role_state.stage.value == "REPLICA" and await registered() == {}
                await first.assign_broker_id(3)
                assert (tmp_path / "broker-a" / "brokerIdentity").read_text() == "c1#broker-a#3"
                assert await registered() == {3: first.addr}
                first_addr = first.addr
            finally:
                await first.stop()
            second = BrokerServer(cfg)
            await second.start()
            try:
                assert second.addr != first_addr and second.broker_id == 3
                assert await registered() == {3: second.addr}
            finally:
                await second.stop()
        finally:
            await client.close()
            await ns.stop()

    asyncio.run(main())


def test_the_schedule_service_runs_only_while_primary_and_resumes_from_the_delay_offsets(tmp_path: Path) -> None:
    """A role change stops or starts delivery of delayed messages; a promoted broker goes on from its delay
    offsets (a replica's are its primary's, copied by the metadata sync: set by hand here)."""
    clock = ManualClock(wall=time.time())

    async def body(env: Env) -> None:
        schedule = env.broker.schedule
        assert schedule is not None
        _ok(await env.send("Promo", b"first", {"DELAY": "1"}))
        await env.broker.change_role(BrokerRole.REPLICA)
        clock.advance(5)
        await asyncio.sleep(0.3)
        assert schedule.delivered == 0 and env.broker.store.get_max_offset("Promo", 0) == 0

        await env.broker.change_role(BrokerRole.PRIMARY)  # "first" is overdue: delivered at once

        async def promo(count: int) -> bool:
            return env.broker.store.get_max_offset("Promo", 0) == count

        await eventually(lambda: promo(1))
        _ok(await env.send("Promo", b"second", {"DELAY": "1"}))
        _ok(await env.send("Promo", b"third", {"DELAY": "1"}))
        await env.broker.change_role(BrokerRole.REPLICA)
        env.broker.delay_offsets.replace_all({1: 2})  # the other primary had delivered "second" already
        await env.broker.change_role(BrokerRole.PRIMARY)
        clock.advance(1)
        await eventually(lambda: promo(2))
        _, msgs = await env.pull("Promo")
        assert [m.body for m in msgs] == [b"first", b"third"]
        ask = RemotingCommand(code=RequestCode.GET_ALL_DELAY_OFFSET)
        resp = await env.client.invoke(env.broker.addr, ask, TIMEOUT)
        assert resp.code == ResponseCode.SUCCESS and loads_rocketmq(resp.body) == {"offsetTable": {"1": 3}}
        await env.broker.change_role(BrokerRole.REPLICA)  # stopping persists the table
        on_disk = json.loads((env.tmp / "broker-a" / "config" / "delayOffset.json").read_text())
        assert on_disk.pop("crc32") > 0 and on_disk == {"version": 1, "offsetTable": {"1": 3}}

    run(tmp_path, body, clock=clock, message_delay_level="1s 2s")


async def register_fake_primary(env: Env, ha_server_addr: str) -> None:
    """REGISTER_BROKER of a broker_id 0 of the replica's group (nothing listens at its addresses)."""
    reg = RegisterBrokerRequestHeader(broker_name="broker-a", broker_addr="127.0.0.9:10911", cluster_name="c1",
                                      ha_server_addr=ha_server_addr, broker_id=0)
    table = TopicConfigTable({}, DataVersion(1, 1))
    _ok(await env.call(RequestCode.REGISTER_BROKER, reg.to_ext(), encode_register_broker_body(table),
                       addr=env.namesrv.addr))


def test_replica_follows_the_primary_ha_address_the_name_server_names(tmp_path: Path) -> None:
    """Unset ha_primary_address: the replica takes haServerAddr from its registration answer, registering
    every second while it has none, and follows a new one after the primary re-registered elsewhere."""
    first, moved = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"

    async def body(env: Env) -> None:
        replication = env.broker.replication
        assert replication is not None and replication.awaiting_primary
        await register_fake_primary(env, first)

        async def follows(addr: str) -> bool:
            client = replication.client
            return replication.primary_ha_address == addr and client is not None
        await eventually(lambda: follows(first), timeout=3.0)  # the 1 s retry, not the 30 s period
        assert not replication.awaiting_primary
        assert json.loads(replication.view().to_json())["haAddress"] == first

        await register_fake_primary(env, moved)
        assert env.broker.registration is not None
        env.broker.registration.request_register()
        await eventually(lambda: follows(moved))

    run(tmp_path, body, broker_id=1, ha={"role": "SLAVE"})


def test_configured_ha_primary_address_overrides_the_name_server(tmp_path: Path) -> None:
    configured, named = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"

    async def body(env: Env) -> None:
        replication, registration = env.broker.replication, env.broker.registration
        assert replication is not None and registration is not None
        await register_fake_primary(env, named)
        registration.request_register()

        async def answered() -> bool:
            return registration.master_ha_addr == named
        await eventually(answered)
        assert replication.primary_ha_address == configured
        assert json.loads(replication.view().to_json())["haAddress"] == configured

    run(tmp_path, body, broker_id=1, ha={"role": "SLAVE", "ha_primary_address": configured})


def test_pull_suggestions_follow_the_subscription_group_table(tmp_path: Path) -> None:
    """With slave_read_enable, a slow pull is pointed at the group's whichBrokerWhenConsumeSlowly and any other
    at its brokerId (from UPDATE_AND_CREATE_SUBSCRIPTIONGROUP); a group the table lacks gets 1 / 0."""

    async def body(env: Env) -> None:
        for i in range(20):
            _ok(await env.send("Steer", b"%03d" % i * 400))
        steered = {"groupName": "steered", "whichBrokerWhenConsumeSlowly": 3, "brokerId": 2}
        _ok(await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(steered).encode()))
        suggestions = {}
        for group in ("steered", "plain"):
            for offset in (0, 19):  # 19 messages (~8 KB) behind the end, then the last one
                resp, msgs = await env.pull("Steer", offset, group=group, max_nums=1)
                assert len(msgs) == 1
                suggestions[group, offset] = resp.ext_fields["suggestWhichBrokerId"]
        assert suggestions == {("steered", 0): "3", ("steered", 19): "2", ("plain", 0): "1", ("plain", 19): "0"}

    run(tmp_path, body, ha={"slave_read_enable": True, "memory_basis_bytes": 10_000})  # slow: > 4000 bytes behind


async def subscription_groups(env: Env) -> dict[str, Any]:
    resp = _ok(await env.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    table: dict[str, Any] = loads_rocketmq(resp.body)["subscriptionGroupTable"]
    return table


def test_pull_creates_an_unknown_group_and_refuses_a_disabled_one(tmp_path: Path) -> None:
    """auto_create_subscription_group on (the default): a pull creates its group with the defaults; a group
    whose consumeEnable is false is refused NO_PERMISSION, naming it, before the topic is even looked at."""

    async def body(env: Env) -> None:
        _ok(await env.send("Groups", b"m"))
        assert "fresh" not in await subscription_groups(env)
        resp, msgs = await env.pull("Groups", group="fresh")
        assert resp.code == ResponseCode.SUCCESS and len(msgs) == 1
        assert (await subscription_groups(env))["fresh"]["consumeEnable"] is True
        disabled = {"groupName": "off", "consumeEnable": False}
        _ok(await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(disabled).encode()))
        for topic in ("Groups", "NoSuchTopic"):
            resp, _ = await env.pull(topic, group="off")
            assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, off")
        resp, _ = await env.pull("Groups", group="")  # never persisted: the table must load again
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "cannot be created" in (resp.remark or "")
        assert "" not in await subscription_groups(env)

    run(tmp_path, body)


def test_pull_of_an_unknown_group_is_refused_when_auto_create_is_off(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        _ok(await env.send("Groups", b"m"))
        resp, _ = await env.pull("Groups", group="unknown")
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and resp.code == 26
        assert "unknown" in (resp.remark or "")
        assert "unknown" not in await subscription_groups(env)
        for group in ("CID_RMQ_SYS_REPLICATOR_link", "created"):  # a system group; an admin-created group
            if group == "created":
                _ok(await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                   body=json.dumps({"groupName": group}).encode()))
            resp, msgs = await env.pull("Groups", group=group)
            assert resp.code == ResponseCode.SUCCESS and len(msgs) == 1, (group, resp.code, resp.remark)

    run(tmp_path, body, auto_create_subscription_group=False)


def test_replica_applies_the_group_checks_to_its_copy(tmp_path: Path) -> None:
    """A replica checks the group against its copy of the primary's table; a group it may create is served
    with the defaults but not added to the copy (the next metadata sync would replace it)."""

    async def body(env: Env, *, auto_create: bool) -> None:
        topics = TopicConfigTable({"Groups": TopicConfig("Groups", 1, 1)}, DataVersion(1, 1))
        env.broker.topic_configs.replace_all(topics)
        groups = env.broker.subscription_groups
        groups.replace_all({"off": SubscriptionGroupConfig("off", consume_enable=False)}, DataVersion(1, 1))
        resp, _ = await env.pull("Groups", group="off")
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, off")
        resp, _ = await env.pull("Groups", group="unknown")
        # Past the group check a replica without slave reads sends the consumer back to the primary.
        want = ResponseCode.PULL_RETRY_IMMEDIATELY if auto_create else ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert resp.code == want, (resp.code, resp.remark)
        assert groups.select("unknown") is None and groups.data_version == DataVersion(1, 1)

    # The primary it follows is not running: the replica keeps retrying its HA link meanwhile.
    primary = f"127.0.0.1:{free_port()}"
    replica: dict[str, Any] = {"broker_id": 1, "ha": {"role": "SLAVE", "ha_primary_address": primary}}
    for auto_create in (True, False):
        run(tmp_path / str(auto_create), functools.partial(body, auto_create=auto_create),
            auto_create_subscription_group=auto_create, **replica)


def test_sync_flush_send(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        for i in range(5):
            _ok(await env.send("Durable", str(i).encode()))
        assert env.broker.store.flushed_physical_offset >= env.broker.store.max_physical_offset

    run(tmp_path, body, flush_mode="SYNC_FLUSH", flush_interval_ms=10)


# -- offsets ----------------------------------------------------------------------------------------


def test_consumer_offsets_query_update_commit_and_persist(tmp_path: Path) -> None:
    async def query(env: Env, qid: int = 0, set_zero: bool | None = None) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader(
            consumer_group="cg", topic="Off", queue_id=qid, set_zero_if_not_found=set_zero
        )
        return await env.call(RequestCode.QUERY_CONSUMER_OFFSET, h.to_ext())

    async def first(env: Env) -> None:
        for i in range(5):
            _ok(await env.send("Off", str(i).encode()))
        assert (
            OffsetResponseHeader.from_ext(_ok(await query(env)).ext_fields).offset == 0
        )  # queue starts at 0
        resp = await query(env, set_zero=False)
        assert resp.code == ResponseCode.QUERY_NOT_FOUND
        h = UpdateConsumerOffsetRequestHeader(consumer_group="cg", topic="Off", queue_id=0, commit_offset=3)
        _ok(await env.call(RequestCode.UPDATE_CONSUMER_OFFSET, h.to_ext()))
        assert OffsetResponseHeader.from_ext(_ok(await query(env)).ext_fields).offset == 3
        bad = UpdateConsumerOffsetRequestHeader(
            consumer_group="cg", topic="NoSuch", queue_id=0, commit_offset=3
        )
        assert (
            await env.call(RequestCode.UPDATE_CONSUMER_OFFSET, bad.to_ext())
        ).code == ResponseCode.TOPIC_NOT_EXIST
        await env.pull("Off", 4, commit_offset=4)
        assert OffsetResponseHeader.from_ext(_ok(await query(env)).ext_fields).offset == 4

        q = QueueRequestHeader(topic="Off", queue_id=0).to_ext()
        assert (
            OffsetResponseHeader.from_ext(
                _ok(await env.call(RequestCode.GET_MAX_OFFSET, q)).ext_fields
            ).offset
            == 5
        )
        assert (
            OffsetResponseHeader.from_ext(
                _ok(await env.call(RequestCode.GET_MIN_OFFSET, q)).ext_fields
            ).offset
            == 0
        )
        s = SearchOffsetRequestHeader(topic="Off", queue_id=0, timestamp=int(time.time() * 1000) + 60_000)
        resp = _ok(await env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, s.to_ext()))
        assert OffsetResponseHeader.from_ext(resp.ext_fields).offset == 5
        s = SearchOffsetRequestHeader(topic="Off", queue_id=0, timestamp=0)
        resp = _ok(await env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, s.to_ext()))
        assert OffsetResponseHeader.from_ext(resp.ext_fields).offset == 0
        resp = _ok(await env.call(RequestCode.GET_ALL_CONSUMER_OFFSET))
        assert b'"Off@cg":{0:4}' in resp.body

    run(tmp_path, first)

    async def after_restart(env: Env) -> None:
        assert OffsetResponseHeader.from_ext(_ok(await query(env)).ext_fields).offset == 4
        resp, msgs = await env.pull("Off", 4)
        assert [m.body for m in msgs] == [b"4"]

    run(tmp_path, after_restart)


# -- clients, retry ---------------------------------------------------------------------------------


def test_heartbeat_registered_subscription_and_consumer_list(tmp_path: Path) -> None:
    heartbeat = json.dumps(
        {
            "clientID": "10.0.0.1@77",
            "consumerDataSet": [
                {
                    "groupName": "cg",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": "Sub", "subString": "Keep", "subVersion": 5, "expressionType": "TAG"}
                    ],
                }
            ],
            "producerDataSet": [],
        }
    ).encode()

    async def body(env: Env) -> None:
        _ok(await env.send("Sub", b"drop", {"TAGS": "Drop"}))
        _ok(await env.send("Sub", b"keep", {"TAGS": "Keep"}))
        resp, _ = await env.pull("Sub", expr=None)
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        _ok(await env.call(RequestCode.HEART_BEAT, body=heartbeat))
        assert "%RETRY%cg" in (await env.topic_table()).topic_configs
        resp, msgs = await env.pull("Sub", expr=None)
        assert [m.body for m in msgs] == [b"keep"]
        ask = GetConsumerListByGroupRequestHeader(consumer_group="cg").to_ext()
        resp = _ok(await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ask))
        assert json.loads(resp.body) == {"consumerIdList": ["10.0.0.1@77"]}
        bye = UnregisterClientRequestHeader(client_id="10.0.0.1@77", consumer_group="cg").to_ext()
        _ok(await env.call(RequestCode.UNREGISTER_CLIENT, bye))
        resp = await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ask)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "no consumer for this group, cg" == resp.remark
        assert (await env.call(RequestCode.HEART_BEAT, body=b"{}")).code == ResponseCode.SYSTEM_ERROR

    run(tmp_path, body)


def test_client_channel_expiry_follows_the_broker_clock(tmp_path: Path) -> None:
    """The broker's client scan sleeps on its clock: advancing it past the expiry drops a silent consumer,
    with no real waiting."""
    clock = ManualClock()
    heartbeat = json.dumps({"clientID": "10.0.0.2@1", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "quiet", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "subscriptionDataSet": []}]}).encode()
    ask = GetConsumerListByGroupRequestHeader(consumer_group="quiet").to_ext()

    async def body(env: Env) -> None:
        _ok(await env.call(RequestCode.HEART_BEAT, body=heartbeat))
        clock.advance(119)
        await asyncio.sleep(0.05)
        _ok(await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ask))  # 119 s silent: still there

        async def expired() -> bool:
            clock.advance(1)
            return (await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ask)).code == ResponseCode.SYSTEM_ERROR

        await eventually(expired)
        assert clock.monotonic() - 1000 < 140  # expired at the first scan past 120 s of the broker's clock

    run(tmp_path, body, clock=clock, client_channel_expiry_seconds=120.0)


def test_consumer_send_msg_back_waits_its_delay_level_then_goes_to_the_dlq(tmp_path: Path) -> None:
    """A retry waits level 3 + reconsumeTimes in SCHEDULE_TOPIC_XXXX (10 s, then 30 s: the broker's clock is
    advanced by hand), then reaches %RETRY%<group>; past max reconsume times it goes to the DLQ at once."""
    clock = ManualClock(wall=time.time())

    async def scheduled(env: Env, level: int) -> int:
        return env.broker.store.get_max_offset(SCHEDULE_TOPIC, level - 1)

    async def retried(env: Env, offset: int) -> StoredMessage:
        async def arrived() -> bool:
            return (await env.pull("%RETRY%cg", offset))[0].code == ResponseCode.SUCCESS
        await eventually(arrived)
        _, (msg,) = await env.pull("%RETRY%cg", offset)
        return msg

    async def body(env: Env) -> None:
        _ok(await env.send("Work", b"payload", {"TAGS": "T1", "KEYS": "k"}))
        _, (orig,) = await env.pull("Work")
        back = ConsumerSendMsgBackRequestHeader(
            offset=orig.commit_log_offset,
            group="cg",
            delay_level=0,
            origin_msg_id=orig.msg_id,
            origin_topic="Work",
            max_reconsume_times=2,
        )
        _ok(await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, back.to_ext()))
        assert await scheduled(env, 3) == 1  # delayLevel 0: 3 + reconsumeTimes 0
        (entry,) = env.broker.store.get_queue_entries(SCHEDULE_TOPIC, 2, 0, 1)
        waiting = decode_stored_message(env.broker.store.read_record(entry.physical_offset) or b"")
        assert waiting.properties["REAL_TOPIC"] == "%RETRY%cg" and waiting.properties["DELAY"] == "3"
        assert entry.tags_code == waiting.store_timestamp + 10_000
        clock.advance(9.5)
        await asyncio.sleep(0.2)
        assert (await env.pull("%RETRY%cg"))[0].code != ResponseCode.SUCCESS  # not before its 10 s
        clock.advance(0.5)
        retry = await retried(env, 0)
        assert retry.body == b"payload" and retry.reconsume_times == 1 and retry.tags == "T1"
        assert retry.properties["RETRY_TOPIC"] == "Work"
        assert retry.properties["ORIGIN_MESSAGE_ID"] == orig.offset_msg_id
        assert retry.born_timestamp == orig.born_timestamp
        assert "DELAY" not in retry.properties

        again = ConsumerSendMsgBackRequestHeader(
            offset=retry.commit_log_offset, group="cg", delay_level=0, max_reconsume_times=2
        )
        _ok(await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, again.to_ext()))
        assert await scheduled(env, 4) == 1  # 3 + reconsumeTimes 1: 30 s
        clock.advance(30)
        msg = await retried(env, 1)
        assert msg.reconsume_times == 2
        third = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset, group="cg", delay_level=0, max_reconsume_times=2
        )
        _ok(await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, third.to_ext()))
        _, (dead,) = await env.pull("%DLQ%cg")
        assert dead.body == b"payload" and dead.reconsume_times == 3
        assert dead.properties["ORIGIN_MESSAGE_ID"] == orig.offset_msg_id
        assert dead.properties["RETRY_TOPIC"] == "Work"

        negative = ConsumerSendMsgBackRequestHeader(offset=orig.commit_log_offset, group="cg", delay_level=-1)
        _ok(await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, negative.to_ext()))
        _, msgs = await env.pull("%DLQ%cg", 1)
        assert [m.body for m in msgs] == [b"payload"]  # a negative level: the DLQ at once

        lost = ConsumerSendMsgBackRequestHeader(offset=10**9, group="cg", delay_level=0)
        resp = await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, lost.to_ext())
        assert resp.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (
            resp.remark or ""
        )

        # A producer resending to a retry topic past its max reconsume times lands in the DLQ.
        _ok(await env.send("%RETRY%cg", b"late", reconsume_times=5, max_reconsume_times=5))
        _, msgs = await env.pull("%DLQ%cg", 2)
        assert [m.body for m in msgs] == [b"late"]

    run(tmp_path, body, clock=clock)


# -- name server ------------------------------------------------------------------------------------


def test_namesrv_route_cluster_info_and_topic_list(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        resp = await env.route("Unknown")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.remark == "No topic route info in name server for the topic: Unknown"
        route = TopicRouteData.decode(_ok(await env.route("TBW102")).body)
        assert route.broker_datas[0].cluster == "c1" and route.queue_datas[0].perm == 7
        info = loads_rocketmq(
            _ok(await env.call(RequestCode.GET_BROKER_CLUSTER_INFO, addr=env.namesrv.addr)).body
        )
        assert info["clusterAddrTable"] == {"c1": ["broker-a"]}
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": env.broker.addr}
        topics = loads_rocketmq(
            _ok(await env.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, addr=env.namesrv.addr)).body
        )
        assert "TBW102" in topics["topicList"]

        # Clean shutdown unregisters at once.
        await env.broker.stop()
        assert (await env.route("TBW102")).code == ResponseCode.TOPIC_NOT_EXIST

    run(tmp_path, body)


def test_broker_expiry_removes_route_while_heartbeating_broker_stays(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        table = TopicConfigTable({"Ghost": TopicConfig("Ghost", 2, 2, 6)}, DataVersion(1, 1))
        reg = RegisterBrokerRequestHeader(
            broker_name="ghost",
            broker_addr="127.0.0.9:10911",
            cluster_name="c1",
            ha_server_addr="",
            broker_id=0,
        )
        _ok(
            await env.call(
                RequestCode.REGISTER_BROKER,
                reg.to_ext(),
                encode_register_broker_body(table),
                addr=env.namesrv.addr,
            )
        )
        _ok(await env.route("Ghost"))
        await asyncio.sleep(0.9)  # > broker_expiry_seconds without a heartbeat from "ghost"
        assert (await env.route("Ghost")).code == ResponseCode.TOPIC_NOT_EXIST
        _ok(await env.route("TBW102"))  # the real broker heartbeats every 0.1 s

    run(tmp_path, body, namesrv={"broker_expiry_seconds": 0.5, "scan_interval_seconds": 0.1})


def test_broker_connection_close_removes_it_at_once(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        table = TopicConfigTable({"Gone": TopicConfig("Gone", 1, 1, 6)}, DataVersion(1, 1))
        reg = RegisterBrokerRequestHeader(
            broker_name="gone",
            broker_addr="127.0.0.9:10911",
            cluster_name="c1",
            ha_server_addr="",
            broker_id=0,
        )
        other = RemotingClient()
        cmd = RemotingCommand(
            code=RequestCode.REGISTER_BROKER, ext_fields=reg.to_ext(), body=encode_register_broker_body(table)
        )
        _ok(await other.invoke(env.namesrv.addr, cmd, TIMEOUT))
        _ok(await env.route("Gone"))
        await other.close()

        async def removed() -> bool:
            return (await env.route("Gone")).code == ResponseCode.TOPIC_NOT_EXIST

        await eventually(removed, timeout=1.0)  # far below the 5 s expiry

    run(tmp_path, body)


def test_register_broker_body_checks(tmp_path: Path) -> None:
    async def body(env: Env) -> None:
        base = RegisterBrokerRequestHeader(
            broker_name="x",
            broker_addr="127.0.0.9:1",
            cluster_name="c1",
            ha_server_addr="",
            broker_id=0,
        )
        body_bytes = encode_register_broker_body(TopicConfigTable({}, DataVersion()))
        resp = await env.call(
            RequestCode.REGISTER_BROKER,
            dataclasses.replace(base, compressed=True).to_ext(),
            body_bytes,
            addr=env.namesrv.addr,
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR and "compressed" in (resp.remark or "")
        resp = await env.call(
            RequestCode.REGISTER_BROKER,
            dataclasses.replace(base, body_crc32=12345).to_ext(),
            body_bytes,
            addr=env.namesrv.addr,
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "crc32 not match"
        resp = await env.call(
            RequestCode.REGISTER_BROKER,
            base.to_ext(),
            b"{[",
            addr=env.namesrv.addr,
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR

    run(tmp_path, body)


def test_run_entry_points_serve_until_cancelled(tmp_path: Path) -> None:
    async def main() -> None:
        addrs: dict[str, str] = {}
        ns_task = asyncio.ensure_future(
            run_namesrv(NamesrvConfig(listen="127.0.0.1:0"), lambda a: addrs.__setitem__("ns", a))
        )
        await eventually(lambda: asyncio.sleep(0, "ns" in addrs))
        broker_task = asyncio.ensure_future(
            run_broker(broker_config(tmp_path, addrs["ns"]), lambda a: addrs.__setitem__("broker", a))
        )
        await eventually(lambda: asyncio.sleep(0, "broker" in addrs))
        client = RemotingClient()
        try:
            resp = await client.invoke(
                addrs["ns"],
                RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "TBW102"}),
                TIMEOUT,
            )
            assert resp.code == ResponseCode.SUCCESS
        finally:
            await client.close()
        broker_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await broker_task
        ns_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ns_task
        # The listening port is released.
        port = int(addrs["broker"].rsplit(":", 1)[1])
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0

    asyncio.run(main())
