"""A primary frozen (SIGSTOP) in a real controller-mode group of three, past its controller's heartbeat timeout: the
controller elects another, and the sends a client queued at the frozen one are all refused on thaw with
SERVICE_NOT_AVAILABLE (retriable: clients re-route), none appended and answered FLUSH_SLAVE_TIMEOUT. The rule is
``broker.primary_lease`` (unit-tested in tests/unit/test_primary_lease.py and, with agents and a controller on a
ManualClock, in tests/unit/test_controller_agent.py).

Real processes on 127.0.0.1: a name server with the embedded controller, three brokers that send heartbeatTimeoutMills
1500 (their lease); the sends go to the old primary's address directly, as a client with a stale route would.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin
from broker_store.deploy.launcher import HOST, wait_in_sync
from broker_store.net import RemotingClient
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import SEND_V2_NAMES, SendMessageRequestHeader
from broker_store.protocol.message import encode_properties
from tests.support.controller_group import Members, broker_config, master_addr, namesrv_config, run_started, until
from tests.support.processes import Broker, ClusterProcess, broker_listen_port, free_port

pytestmark = [pytest.mark.integration]

CLUSTER, GROUP, TOPIC = "fz", "fz-a", "Frozen"
QUEUED = 20


async def send(client: RemotingClient, addr: str, key: str) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="FrozenProducers", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
        properties=encode_properties({"KEYS": key}).decode())
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext(SEND_V2_NAMES),
                          body=key.encode())
    return await client.invoke(addr, cmd, 20.0)


def test_sends_queued_at_a_frozen_primary_are_refused_on_thaw_not_timed_out(tmp_path: Path) -> None:
    namesrv = ClusterProcess("namesrv", namesrv_config(f"{HOST}:{free_port()}", tmp_path / "controller"),
                             tmp_path, "namesrv")
    members = {name: Broker("broker", broker_config(f"{HOST}:{broker_listen_port(False)}", namesrv.listen,
                                                    tmp_path / name, cluster=CLUSTER, group=GROUP,
                                                    link={"heartbeat_timeout_ms": 1500}), tmp_path, name)
               for name in ("b1", "b2", "b3")}
    by_listen = {b.listen: b for b in members.values()}

    async def main() -> None:
        admin = AsyncAdmin(namesrv.listen)
        await admin.start()
        client = RemotingClient()
        try:
            old = await until(lambda: master_addr(admin, GROUP), "a primary elected")
            await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
            await admin.wait_for_route(TOPIC, timeout=30)
            await asyncio.to_thread(wait_in_sync, old, 2, 30)
            assert (await send(client, old, "before")).code == ResponseCode.SUCCESS
            victim = by_listen[old]
            victim.pause()
            try:
                async def replaced() -> str | None:
                    now = await master_addr(admin, GROUP)
                    return now if now not in (None, old) else None

                new = await until(replaced, "another primary elected while the old one is frozen")
                queued = [asyncio.create_task(send(client, old, f"queued-{i}")) for i in range(QUEUED)]
                await asyncio.sleep(0.5)  # the requests wait in the frozen broker's socket
            finally:
                victim.resume()
            answers = await asyncio.gather(*queued)
            codes = Counter(ResponseCode(a.code).name for a in answers)
            assert codes == {"SERVICE_NOT_AVAILABLE": QUEUED}, (codes, [a.remark for a in answers][:3])

            async def new_takes_writes() -> bool:  # once a replica is in its SyncStateSet (in_sync_replicas 2)
                return (await send(client, new, "after")).code == ResponseCode.SUCCESS

            await until(new_takes_writes, "the new primary acknowledges a send")
        finally:
            await client.close()
            await admin.close()

    run_started(Members(namesrv, *members.values()), main)
