"""Replicated controllers, every one of them and every etcd member killed at once (kill -9) and restarted:
the brokers keep serving while they are all down, the group's state (master, epoch, SyncStateSet) comes back
intact from etcd, an election works afterwards, and no member's CommitLog diverges ("every
controller and etcd member killed and restarted at once"). Real processes on loopback: three etcd members,
three standalone controllers, a name server and a controller-mode group of three.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.config import ControllerConfig, NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.etcd_members import EtcdCluster, find_etcd
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.controller import ReplicasInfo
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import (
    CONTROLLER_TIMING,
    CP_HA,
    broker_config,
    master_addr,
    replicas_info,
    run_started,
    until,
)
from tests.support.log_check import commitlog_image, diverges, stored_keys
from tests.support.processes import Broker, ClusterProcess, broker_listen_port

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_etcd() is None, reason="etcd is not installed (make tools installs it)")]

CLUSTER, GROUP, TOPIC = "ar", "ar-a", "AllRestarted"


class Deployment:
    """etcd x3, controllers x3 over it, a name server and three controller-mode brokers b1..b3."""

    def __init__(self, root: Path) -> None:
        self.etcd = EtcdCluster(root / "etcd", 3)
        settings = ControllerSettings.model_validate(
            {**CONTROLLER_TIMING, "etcd": {"endpoints": self.etcd.endpoints, "lease_ttl_seconds": 2}})
        self.controllers = [
            ClusterProcess("controller", ControllerConfig(listen=f"{HOST}:{free_port()}", controller=settings),
                           root, f"controller-{i}") for i in range(3)]
        self.controller_addrs = [c.listen for c in self.controllers]
        self.namesrv = ClusterProcess("namesrv", NamesrvConfig(listen=f"{HOST}:{free_port()}",
                                                               broker_expiry_seconds=3.0), root, "namesrv")
        self.brokers = {
            name: Broker("broker", broker_config(f"{HOST}:{broker_listen_port(False)}", self.namesrv.listen,
                                                 root / name, cluster=CLUSTER, group=GROUP, ha=CP_HA,
                                                 controllers=self.controller_addrs), root, name)
            for name in ("b1", "b2", "b3")}

    def by_listen(self, addr: str) -> Broker:
        return next(b for b in self.brokers.values() if b.listen == addr)

    def start(self) -> None:
        self.etcd.start()
        for p in (*self.controllers, self.namesrv, *self.brokers.values()):
            p.start()

    def stop(self) -> None:
        for p in (*self.brokers.values(), self.namesrv, *self.controllers):
            p.kill()
        self.etcd.kill()

    def logs(self) -> str:
        procs = (*self.brokers.values(), self.namesrv, *self.controllers)
        return "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in procs) + "\n" + self.etcd.logs()


async def view(client: RemotingClient, controllers: list[str]) -> ReplicasInfo | None:
    """The group as the first answering controller has it."""
    for addr in controllers:
        info = await replicas_info(client, addr, GROUP)
        if info is not None:
            return info
    return None


async def send_ok(producer: AsyncProducer, n: int, tag: str) -> list[str]:
    keys = []
    for i in range(n):
        key = f"{tag}-{i}"
        result = await producer.send(new_message(TOPIC, key.encode(), keys=key))
        assert result.status is SendStatus.SEND_OK, result
        keys.append(key)
    return keys


async def send_until_ok(producer: AsyncProducer, key: str, timeout: float = 30.0) -> None:
    async def sent() -> bool:
        try:
            result = await producer.send(new_message(TOPIC, key.encode(), keys=key))
        except RocketMQError:
            return False
        return result.status is SendStatus.SEND_OK
    await until(sent, f"a SEND_OK of {key}", timeout=timeout)


def test_every_controller_and_etcd_member_killed_and_restarted_at_once(tmp_path: Path) -> None:
    d = Deployment(tmp_path)
    acked: list[str] = []

    async def main() -> None:
        admin, client = AsyncAdmin(d.namesrv.listen), RemotingClient()
        await admin.start()
        producer = AsyncProducer(d.namesrv.listen, send_timeout=5.0)
        await producer.start()
        try:
            await until(lambda: master_addr(admin, GROUP), "a primary elected")

            async def all_in_sync() -> ReplicasInfo | None:
                info = await view(client, d.controller_addrs)
                return info if info is not None and len(info.in_sync) == 3 else None
            before = await until(all_in_sync, "all three in the SyncStateSet")
            await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
            await admin.wait_for_route(TOPIC, timeout=10)
            acked.extend(await send_ok(producer, 40, "before"))

            # -- every controller and every etcd member killed at once: the brokers keep serving ------------------
            for c in d.controllers:
                c.kill()
            d.etcd.kill()
            await asyncio.sleep(2.5)  # past the controllers' heartbeat timeout: nothing may have reacted
            acked.extend(await send_ok(producer, 40, "all-down"))

            # -- all restarted at once: the state comes back from etcd, unchanged ---------------------------------
            for m in d.etcd.members:
                d.etcd.start_member(m)
            for c in d.controllers:
                c.start()
            d.etcd.wait_healthy()

            async def same_group() -> ReplicasInfo | None:
                info = await view(client, d.controller_addrs)
                return info if info is not None and info.master_epoch == before.master_epoch else None
            after = await until(same_group, lambda: "the controllers answering with the group's state")
            assert (after.master_broker_id, after.master_address, after.master_epoch) == (
                before.master_broker_id, before.master_address, before.master_epoch)
            assert after.sync_state_set_epoch == before.sync_state_set_epoch
            assert {r.broker_id for r in after.in_sync} == {r.broker_id for r in before.in_sync}
            acked.extend(await send_ok(producer, 20, "restarted"))

            # -- an election works: kill -9 the primary, a SyncStateSet member takes over at epoch + 1 ------------
            assert before.master_address is not None
            old = d.by_listen(before.master_address)
            old.kill()

            async def elected() -> ReplicasInfo | None:
                info = await view(client, d.controller_addrs)
                return info if info is not None and info.master_epoch == before.master_epoch + 1 else None
            new = await until(elected, "a new primary at the next epoch")
            assert new.master_broker_id != before.master_broker_id
            assert new.master_broker_id in {r.broker_id for r in before.in_sync}
            await send_until_ok(producer, "after-election")
            acked.append("after-election")
            acked.extend(await send_ok(producer, 20, "after"))

            # -- the old primary rejoins as a replica and catches up ---------------------------------------------
            old.start()

            async def rejoined() -> ReplicasInfo | None:
                info = await view(client, d.controller_addrs)
                return info if info is not None and len(info.in_sync) == 3 else None
            await until(rejoined, "the old primary back in the SyncStateSet", timeout=40)
            assert await master_addr(admin, GROUP) == new.master_address
        finally:
            await producer.close()
            await admin.close()
            await client.close()

    run_started(d, main)
    # every acknowledged message on every member; no two members' logs differ where both hold bytes
    images = {name: commitlog_image(b.store_dir) for name, b in d.brokers.items()}
    for name, image in images.items():
        keys = stored_keys(image, TOPIC)
        missing = [k for k in acked if keys[k] == 0]
        assert missing == [], f"{name} lacks {len(missing)} acknowledged message(s), e.g. {missing[:5]}"
    reference = images["b1"]
    assert not any(diverges(image, reference) for image in images.values())
