"""Controller mode through restarts, with real processes on loopback: the embedded controller's name server
killed and restarted keeps the group's state and elects again; while it is down the brokers keep serving; and
unclean election off vs on when no SyncStateSet member is alive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import (
    AP_HA,
    CP_HA,
    broker_config,
    master_addr,
    namesrv_config,
    replicas_info,
    run_started,
    until,
)
from tests.support.processes import Broker, ClusterProcess, broker_listen_port

pytestmark = pytest.mark.integration

CLUSTER, GROUP, TOPIC = "rc", "rc-a", "Restarts"


class Group:
    """A name server with the embedded controller and three controller-mode brokers b1..b3."""

    def __init__(self, root: Path, ha: Mapping[str, Any] = CP_HA, broker_options: Mapping[str, Any] | None = None,
                 **controller: object) -> None:
        listen = f"{HOST}:{free_port()}"
        self.namesrv = ClusterProcess("namesrv", namesrv_config(listen, root / "controller", **controller), root,
                                      "namesrv")
        self.addr = listen
        self.brokers = {
            name: Broker("broker", broker_config(f"{HOST}:{broker_listen_port(False)}", listen, root / name,
                                                 cluster=CLUSTER, group=GROUP, ha=ha, **(broker_options or {})),
                          root, name)
            for name in ("b1", "b2", "b3")}

    def by_listen(self, addr: str) -> Broker:
        return next(b for b in self.brokers.values() if b.listen == addr)

    def start(self) -> None:
        self.namesrv.start()
        for b in self.brokers.values():
            b.start()

    def stop(self) -> None:
        for p in (*self.brokers.values(), self.namesrv):
            p.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in (*self.brokers.values(), self.namesrv))

    def run(self, scenario: Callable[[AsyncAdmin, RemotingClient, str], Awaitable[None]]) -> None:
        """Start the group, wait for its first primary, all three brokers in the SyncStateSet and the topic
        routed, then run ``scenario(admin, client, primary)``. Every process's log tail is printed when anything
        fails; the admin, the client and every process are gone afterwards."""
        async def main() -> None:
            admin, client = AsyncAdmin(self.addr), RemotingClient()
            await admin.start()
            try:
                primary = await until(lambda: master_addr(admin, GROUP), "a primary elected")
                await until(lambda: in_sync_ids(client, self, 3), "all three in the SyncStateSet")
                await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
                await admin.wait_for_route(TOPIC, timeout=30)
                await scenario(admin, client, primary)
            finally:
                await admin.close()
                await client.close()

        run_started(self, main)


async def in_sync_ids(client: RemotingClient, group: Group, n: int) -> set[int] | None:
    info = await replicas_info(client, group.addr, GROUP)
    ids = None if info is None else {r.broker_id for r in info.in_sync}
    return ids if ids is not None and len(ids) == n else None


async def writable(producer: AsyncProducer, timeout: float = 20.0) -> None:
    """Until a send is SEND_OK: after an election the new primary takes writes once a replica caught up with it
    (in_sync_replicas 2; IN_SYNC_REPLICAS_NOT_ENOUGH before)."""
    async def sent() -> bool:
        try:
            result = await producer.send(new_message(TOPIC, b"probe"))
        except RocketMQError:
            return False
        return result.status is SendStatus.SEND_OK
    await until(sent, "a SEND_OK after the election", timeout=timeout)


async def send_ok(producer: AsyncProducer, n: int, tag: str) -> None:
    for i in range(n):
        result = await producer.send(new_message(TOPIC, f"{tag}-{i}".encode(), keys=f"{tag}-{i}"))
        assert result.status is SendStatus.SEND_OK, result


def test_the_embedded_controller_restarted_keeps_the_group_and_elects_again(tmp_path: Path) -> None:
    # The restarted name server lists the primary again at its first heartbeat: the answer says the name server
    # does not know it, so it registers at once (before, at its next full registration: up to 30 s, 29.3 s measured).
    group = Group(tmp_path)

    async def scenario(admin: AsyncAdmin, client: RemotingClient, primary: str) -> None:
        before = await replicas_info(client, group.addr, GROUP)
        assert before is not None
        async with AsyncProducer(group.addr, "RestartProducers", send_timeout=5.0) as producer:
            await send_ok(producer, 20, "before")
            group.namesrv.kill()  # the name server and its controller: no routes, no elections
            await send_ok(producer, 20, "controller-down")  # brokers keep serving (cached route)
            group.namesrv.start()
            after = await until(lambda: replicas_info(client, group.addr, GROUP), "the controller answers")
            assert (after.master_broker_id, after.master_epoch, after.sync_state_set_epoch) == (
                before.master_broker_id, before.master_epoch, before.sync_state_set_epoch)
            assert {r.broker_id for r in after.in_sync} == {r.broker_id for r in before.in_sync}
            await until(lambda: master_addr(admin, GROUP), "the primary registered again")

            group.by_listen(primary).kill()

            async def replaced() -> str | None:
                now = await master_addr(admin, GROUP)
                return now if now not in (None, primary) else None

            await until(replaced, "a new primary after the restart", timeout=15)
            elected = await replicas_info(client, group.addr, GROUP)
            assert elected is not None and elected.master_epoch == before.master_epoch + 1
            await writable(producer)
            await send_ok(producer, 20, "after")

    group.run(scenario)


@pytest.mark.parametrize("unclean", [False, True], ids=["unclean-off", "unclean-on"])
def test_unclean_election_with_no_sync_state_set_member_alive(tmp_path: Path, unclean: bool) -> None:
    """b_out leaves the SyncStateSet (killed), then the primary and the other member die together, and b_out
    comes back alone. Off (CP): nobody is elected, the group waits; the old primary back is elected again.
    On (AP: unclean election and the downgrade to one copy): b_out is elected and takes writes alone."""
    group = Group(tmp_path, AP_HA if unclean else CP_HA, enable_elect_unclean_master=unclean)

    async def scenario(admin: AsyncAdmin, client: RemotingClient, primary: str) -> None:
        old = group.by_listen(primary)
        out, other = [b for b in group.brokers.values() if b is not old]
        out.kill()
        await until(lambda: in_sync_ids(client, group, 2), f"{out.name} removed from the SyncStateSet")
        other.kill()
        old.kill()
        out.start()
        await asyncio.sleep(4.0)  # > heartbeat timeout + scans: the controller has decided by now
        listed = await master_addr(admin, GROUP)
        info = await replicas_info(client, group.addr, GROUP)
        assert info is not None
        if not unclean:
            assert listed is None, f"elected {listed} from outside the SyncStateSet with unclean election off"
            old.start()
            back = await until(lambda: master_addr(admin, GROUP), "the old primary elected again", timeout=15)
            assert back == old.listen
        else:
            assert listed == out.listen, f"unclean election on: expected {out.listen}, name server lists {listed}"
        async with AsyncProducer(group.addr, "UncleanProducers", send_timeout=5.0) as producer:
            await writable(producer)

    group.run(scenario)
