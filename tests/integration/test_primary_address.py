"""A controller-mode group with a primary address (``primary_address``), real processes on loopback: routes name the
address, not a member; after kill -9 of the primary a client keeps sending to the same address and reaches the new
primary; an operator's election moves the address, and the demoted primary no longer serves it (what a send through
it stores names the new primary as its store host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.client.controller_admin import elect_master
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.message import parse_msg_id
from broker_store.protocol.route import MASTER_ID
from tests.support.controller_group import CLUSTER, GROUP, TOPIC, Group, in_sync_ids, replicas_info, until

pytestmark = pytest.mark.integration


async def primary_member(client: RemotingClient, group: Group, not_at: str | None = None) -> str | None:
    """The own address of the member the controller names primary (None while none, or while it is ``not_at``)."""
    info = await replicas_info(client, group.addr, GROUP)
    master = None if info is None else info.master_address
    return master if master and master != not_at else None


async def stored_by(producer: AsyncProducer) -> str | None:
    """The store host of a SEND_OK (the member that appended it), None while sends fail."""
    try:
        result = await producer.send(new_message(TOPIC, b"through the primary address"))
    except RocketMQError:
        return None
    return parse_msg_id(result.offset_msg_id)[0] if result.status is SendStatus.SEND_OK else None


async def route_primary(admin: AsyncAdmin) -> str | None:
    route = await admin.topic_route(TOPIC)
    return next((b.broker_addrs.get(MASTER_ID) for b in route.broker_datas if b.broker_name == GROUP), None)


def test_clients_keep_the_primary_address_through_a_kill_and_an_election(tmp_path: Path) -> None:
    address = f"{HOST}:{free_port()}"
    group = Group(tmp_path, broker_options={"primary_address": address})

    async def scenario(admin: AsyncAdmin, client: RemotingClient, listed: str) -> None:
        assert listed == address  # the name server lists the group's address as its primary, not a member
        assert await route_primary(admin) == address
        first = await until(lambda: primary_member(client, group), "the controller names a primary")
        async with AsyncProducer(group.addr, "PrimaryAddressProducers", send_timeout=5.0) as producer:
            assert await stored_by(producer) == first

            group.by_listen(first).kill()
            second = await until(lambda: primary_member(client, group, not_at=first), "a new primary", timeout=15)
            # the same address, now served by the new primary (once a replica caught up: in_sync_replicas 2)
            assert await until(lambda: stored_by(producer), "a SEND_OK through the address", timeout=20) == second
            assert await route_primary(admin) == address
            route = await admin.topic_route(TOPIC)
            listed_addrs = next(b.broker_addrs for b in route.broker_datas if b.broker_name == GROUP)
            assert second not in listed_addrs.values()  # its replica registration was taken back at promotion

            group.by_listen(first).start()  # back as a replica (it never binds the address)
            await until(lambda: in_sync_ids(client, group, 3), "all three in the SyncStateSet again", timeout=30)
            third = next(b.listen for b in group.brokers.values() if b.listen not in (first, second))
            third_id = next(r.broker_id for r in (await replicas_info(client, group.addr, GROUP) or
                                                 pytest.fail("no controller answer")).in_sync
                            if r.broker_address == third)
            await elect_master(client, group.addr, CLUSTER, GROUP, prefer=third_id)
            await until(lambda: primary_member(client, group, not_at=second), "the preferred primary", timeout=15)

            async def by_third() -> bool:
                return await stored_by(producer) == third
            # the demoted primary closed the address (and its connections) before the new one could bind it
            await until(by_third, "sends through the address stored by the elected member", timeout=20)
            assert await route_primary(admin) == address
        log_file = group.by_listen(second).log_file
        assert log_file is not None and "closed the primary address" in log_file.read_text(errors="replace")

    group.run(scenario)
