"""Controller mode through restarts, with real processes on loopback: the embedded controller's name server
killed and restarted keeps the group's state and elects again; while it is down the brokers keep serving; and
unclean election off vs on when no SyncStateSet member is alive.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import (
    AP_HA,
    CP_HA,
    GROUP,
    TOPIC,
    Group,
    in_sync_ids,
    master_addr,
    replicas_info,
    until,
)

pytestmark = pytest.mark.integration

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
