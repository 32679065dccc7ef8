"""Sends to one queue leave in call order while the producer's route cache is cold, without sockets.

A scripted RemotingClient stands in for the name server and the broker: it holds the route request until the
test releases it and records the order in which SEND_MESSAGE_V2 requests are written. The connection layer's
own gap is shown against a loopback RemotingServer. The same path against
real processes: tests/integration/test_client_cluster.py (``test_concurrent_sends_to_one_queue_keep_call_order``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from broker_store.client import AsyncProducer, MessageQueue, new_message
from broker_store.client.route_cache import RouteCache
from broker_store.net import client as net_client
from broker_store.net.client import RemotingClient
from broker_store.net.server import Connection, RemotingServer
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand, encode_frame
from broker_store.protocol.route import BrokerData, QueueData, TopicRouteData

NAMESRV, BROKER = "127.0.0.1:9876", "127.0.0.1:10911"
MQ = MessageQueue("T", "broker-a", 0)
ROUTE = TopicRouteData(queue_datas=(QueueData("broker-a", 4, 4, 6),),
                       broker_datas=(BrokerData("c1", "broker-a", {0: BROKER}),))


class ScriptedRemoting(RemotingClient):
    """Answers GET_ROUTEINFO_BY_TOPIC once ``route_gate`` is set (``on_route`` runs just before the answer)
    and SEND_MESSAGE_V2 at once, noting each send's body in ``sent``."""

    def __init__(self) -> None:
        super().__init__()
        self.route_gate = asyncio.Event()
        self.route_asked = asyncio.Event()
        self.route_requests = 0
        self.on_route: Callable[[], None] = lambda: None
        self.sent: list[bytes] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            assert addr == NAMESRV
            self.route_requests += 1
            self.route_asked.set()
            await self.route_gate.wait()
            self.on_route()
            return RemotingCommand(code=ResponseCode.SUCCESS, body=ROUTE.encode())
        assert addr == BROKER and cmd.code == RequestCode.SEND_MESSAGE_V2
        self.sent.append(cmd.body)
        offset = len(self.sent) - 1
        return RemotingCommand(code=ResponseCode.SUCCESS, ext_fields={
            "msgId": f"{offset:032X}", "queueId": str(MQ.queue_id), "queueOffset": str(offset)})


def _producer(remoting: ScriptedRemoting) -> AsyncProducer:
    return AsyncProducer(NAMESRV, remoting=remoting, auto_create_topic=False)


def test_sends_started_back_to_back_share_one_route_fetch_and_keep_call_order() -> None:
    async def main() -> None:
        remoting = ScriptedRemoting()
        producer = _producer(remoting)
        sends = [asyncio.create_task(producer.send(new_message("T", b"m%d" % i), MQ)) for i in range(5)]
        await remoting.route_asked.wait()  # every send has started: the first asked, the others wait for it
        assert remoting.route_requests == 1 and not remoting.sent
        remoting.route_gate.set()
        results = await asyncio.gather(*sends)
        assert remoting.sent == [b"m%d" % i for i in range(5)]
        assert [r.queue_offset for r in results] == list(range(5))
        assert remoting.route_requests == 1

    asyncio.run(main())


def test_a_send_started_as_the_route_arrives_waits_for_the_earlier_sends() -> None:
    """The route lands in the cache a few loop turns before the sends waiting for it resume: a send started
    in between finds the cache warm, and used to go out first."""

    async def main() -> None:
        remoting = ScriptedRemoting()
        producer = _producer(remoting)
        late: list[asyncio.Task[object]] = []
        remoting.on_route = lambda: late.append(asyncio.create_task(producer.send(new_message("T", b"late"), MQ)))
        first = asyncio.create_task(producer.send(new_message("T", b"first"), MQ))
        await remoting.route_asked.wait()
        remoting.route_gate.set()
        await first
        await late[0]
        assert remoting.sent == [b"first", b"late"]
        assert remoting.route_requests == 1

    asyncio.run(main())


def test_route_lookups_return_in_call_order_and_a_cancelled_one_keeps_its_place() -> None:
    async def main() -> None:
        remoting = ScriptedRemoting()
        routes = RouteCache([NAMESRV], remoting=remoting)
        returned: list[int] = []

        async def lookup(i: int) -> None:
            await routes.get("T")
            returned.append(i)

        tasks = [asyncio.create_task(lookup(i)) for i in range(4)]
        await remoting.route_asked.wait()
        tasks[1].cancel()
        late: list[asyncio.Task[None]] = []
        remoting.on_route = lambda: late.append(asyncio.create_task(lookup(4)))
        remoting.route_gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await late[0]
        assert returned == [0, 2, 3, 4] and remoting.route_requests == 1
        await routes.get("T")  # nobody waits any more: the warm path
        assert not routes._call_order.waiting("T")

    asyncio.run(main())


def test_a_request_started_as_the_connection_opens_waits_for_the_earlier_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection layer has the same gap as the route cache: a request started after the connection is
    ready but before the requests waiting for it resume used to be written first (a loopback server)."""

    async def main() -> None:
        received: list[bytes] = []

        def handle(cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
            received.append(cmd.body)
            return cmd.response(ResponseCode.SUCCESS)

        server = RemotingServer(handle)
        await server.start()
        client = RemotingClient()
        addr = f"127.0.0.1:{server.port}"
        late: list[asyncio.Task[RemotingCommand]] = []
        real_encode = encode_frame  # the function net.client calls, patched there below

        def encode_then_start_one_more(cmd: RemotingCommand) -> bytes:
            # Runs as the first request is written, the connection just published: start a request now.
            if not late:
                late.append(asyncio.create_task(client.invoke(addr, RemotingCommand(code=1, body=b"late"), 5)))
            return real_encode(cmd)

        monkeypatch.setattr(net_client, "encode_frame", encode_then_start_one_more)
        try:
            early = [asyncio.create_task(client.invoke(addr, RemotingCommand(code=1, body=b"%d" % i), 5))
                     for i in range(3)]
            await asyncio.gather(*early)
            await late[0]
            assert received == [b"0", b"1", b"2", b"late"]
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())
