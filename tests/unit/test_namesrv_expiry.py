"""The name server's broker expiry on a ManualClock: the scan runs every scan interval of the server's clock and
removes a broker silent past its timeout at the first scan after it, never before; a heartbeating broker stays.

No socket: the scan runs alone (``NamesrvServer.run_expiry_scan``) over the server's ``RouteInfoManager``; the
same expiry over real sockets on the real clock is in tests/integration/test_broker_server.py.
"""

from __future__ import annotations

import asyncio
import contextlib

from broker_store.clock import ManualClock
from broker_store.config import NamesrvConfig
from broker_store.namesrv.server import NamesrvServer
from broker_store.protocol.topic import TopicConfig

SCAN, EXPIRY = 10.0, 50.0
"""Long enough that a scan wrongly sleeping on real time never runs during the test."""


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _register(server: NamesrvServer, name: str, addr: str, topic: str) -> None:
    server.routes.register_broker(cluster="c", broker_addr=addr, broker_name=name, broker_id=0,
                                  topic_configs={topic: TopicConfig(topic, 4, 4, 6)})


def test_a_silent_broker_expires_at_the_first_scan_after_its_timeout() -> None:
    clock = ManualClock()
    server = NamesrvServer(NamesrvConfig(listen="127.0.0.1:0", broker_expiry_seconds=EXPIRY,
                                         scan_interval_seconds=SCAN), clock=clock)
    _register(server, "ghost", "10.0.0.1:10911", "Ghost")
    _register(server, "alive", "10.0.0.2:10911", "Orders")
    routes = server.routes

    async def main() -> None:
        scan = asyncio.create_task(server.run_expiry_scan())
        await _settle()
        try:
            for _ in range(5):  # scans at 10 .. 50 s: "ghost" silent for at most its timeout stays
                clock.advance(SCAN)
                assert routes.heartbeat(cluster="c", broker_addr="10.0.0.2:10911")
                await _settle()
                assert routes.pickup_topic_route("Ghost") is not None
            clock.advance(SCAN / 2)  # 55 s silent, but no scan is due yet
            await _settle()
            assert routes.pickup_topic_route("Ghost") is not None
            clock.advance(SCAN / 2)  # the scan at 60 s removes it, its route with it
            await _settle()
            assert routes.pickup_topic_route("Ghost") is None
            assert routes.brokers_at("10.0.0.1:10911") == [] and len(routes.brokers_at("10.0.0.2:10911")) == 1
            assert routes.pickup_topic_route("Orders") is not None
        finally:
            scan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scan

    asyncio.run(main())
