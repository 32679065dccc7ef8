"""Replicated controllers under container faults: three etcd members (Debian's etcd 3.4 from the image), three
standalone controllers over them, a name server and a controller-mode group of three, each in its own container
of the tier's image. While a producer writes, the controller leader or the etcd Raft leader is ``docker kill``-ed
or frozen by ``docker pause``; each test checks controller mode's promises for that fault:

- sends keep succeeding (no send fails while only a controller or an etcd member is down: brokers serve without
  controllers, only elections need them), and for a controller fault another controller takes the lead;
- a primary ``docker kill``-ed afterwards is still replaced within the RTO target;
- the faulted container back (started again, or thawed: a thawed old leader must not lead next to the new one),
  the old primary back in the SyncStateSet as a replica, and every SEND_OK key in the new primary's CommitLog.

One deployment serves the module (each test restores it and writes its own topic): starting ten containers is
the slow part.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from broker_store.client import AsyncAdmin
from broker_store.client.controller_admin import controller_metadata
from broker_store.config import ControllerConfig, NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.etcd_members import EtcdCluster, healthy
from broker_store.deploy.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.containers import ContainerProcess, assert_acked_kept, bring_back, new_primary
from tests.support.controller_group import CONTROLLER_TIMING, broker_config, master_addr, replicas_info, until
from tests.support.processes import broker_listen_port
from tests.support.send_loop import Writer

CLUSTER, GROUP = "cc", "cc-a"
ETCD_BINARY = "/usr/bin/etcd"
"""Debian's etcd-server in the image's base (``broker_store.deploy.image.BASE_PACKAGES``)."""
LEASE_TTL_S = 2
"""The controllers' leader lease: a frozen or killed leader is replaced after at most this."""
RTO_TARGET_S = 3.0
"""The failover target (benchmarks/failover.py: p99 <= 3 s), from the primary's kill to the name server
listing a new primary."""
MEMORY = "256m"


class Deployment:
    """etcd-0..2, controller-0..2 over them, a name server (no embedded controller) and brokers b1..b3."""

    def __init__(self, image: str, root: Path) -> None:
        (root / "etcd").mkdir(parents=True)
        # The members' command lines, ports and data directories (under root: bind-mounted) as up would run them.
        layout = EtcdCluster(root / "etcd", 3, binary=ETCD_BINARY)
        self.etcd = {m.client_url: ContainerProcess(image, m.command, root, m.name, memory=MEMORY)
                     for m in layout.members}
        settings = ControllerSettings.model_validate(
            {**CONTROLLER_TIMING, "etcd": {"endpoints": layout.endpoints, "lease_ttl_seconds": LEASE_TTL_S}})
        self.controllers = {}
        for i in range(3):
            config = ControllerConfig(listen=f"{HOST}:{free_port()}", controller=settings)
            self.controllers[config.listen] = ContainerProcess.server(image, "controller", config, root,
                                                                      f"controller-{i}", memory=MEMORY)
        self.namesrv_addr = f"{HOST}:{free_port()}"
        self.namesrv = ContainerProcess.server(image, "namesrv", NamesrvConfig(listen=self.namesrv_addr,
                                                                               broker_expiry_seconds=3.0),
                                               root, "namesrv", memory=MEMORY)
        self.brokers = {
            name: ContainerProcess.server(image, "broker", broker_config(
                f"{HOST}:{broker_listen_port(False)}", self.namesrv_addr, root / name, cluster=CLUSTER, group=GROUP,
                controllers=list(self.controllers)), root, name, memory=MEMORY)
            for name in ("b1", "b2", "b3")}

    def all(self) -> list[ContainerProcess]:
        return [*self.etcd.values(), *self.controllers.values(), self.namesrv, *self.brokers.values()]

    def by_listen(self, addr: str) -> ContainerProcess:
        return next(b for b in self.brokers.values() if b.listen == addr)

    def start(self) -> None:
        for member in self.etcd.values():  # one member alone is never healthy: start all, then wait
            member.start(wait_ready=False)
        self.wait_etcd_healthy(list(self.etcd))
        _together([c.start for c in (*self.controllers.values(), self.namesrv)])
        _together([b.start for b in self.brokers.values()])

    def wait_etcd_healthy(self, urls: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(healthy(url) for url in urls):
            if time.monotonic() > deadline:
                raise AssertionError(f"etcd members {urls} not healthy after {timeout} s")
            time.sleep(0.2)

    def etcd_leader(self) -> str:
        """The client URL of the member Raft has as leader (asked of each running member)."""
        for url, member in self.etcd.items():
            if member.state()["Status"] != "running":
                continue
            try:
                status = requests.post(f"{url}/v3/maintenance/status", json={}, timeout=2).json()
            except (requests.RequestException, ValueError):
                continue
            if status.get("leader") and status["leader"] == status.get("header", {}).get("member_id"):
                return url
        raise AssertionError("no etcd member says it is the Raft leader")

    def remove(self) -> None:
        for proc in reversed(self.all()):
            proc.remove()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ({p.container_name}):\n{p.log_tail()}" for p in self.all())


def _together(starts: list[Callable[[], object]]) -> None:
    threads = [threading.Thread(target=start) for start in starts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.fixture(scope="module")
def deployment(tier_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    dep = Deployment(tier_image, tmp_path_factory.mktemp("controllers"))
    try:
        dep.start()
        yield dep
    finally:
        dep.remove()


async def _leaders(client: RemotingClient, controllers: list[str]) -> set[str]:
    """The leader each answering controller of ``controllers`` names (empty while none answers or knows one)."""
    named = set()
    for addr in controllers:
        try:
            meta = await asyncio.wait_for(controller_metadata(client, addr), 2.0)
        except (RocketMQError, TimeoutError):
            continue
        if meta.controller_leader_id:
            named.add(meta.controller_leader_id)
    return named


async def _one_leader(client: RemotingClient, controllers: list[str], *, besides: str | None = None) -> str:
    async def agreed() -> str | None:
        named = await _leaders(client, controllers)
        return next(iter(named)) if len(named) == 1 and besides not in named else None
    return await until(agreed, lambda: f"one controller leader among {controllers} other than {besides}",
                       timeout=30)


async def _scenario(dep: Deployment, target: str, how: str) -> tuple[float, list[str], str]:
    """Writes flowing, ``how`` (kill / pause) of the ``target`` leader (controller / etcd), writes without a
    failure, a primary killed and replaced, everything restored: (RTO s, acked keys, new primary)."""
    topic = f"Ctl-{target}-{how}"
    controllers = list(dep.controllers)
    admin, client = AsyncAdmin(dep.namesrv_addr), RemotingClient()
    await admin.start()
    try:
        leader = await _one_leader(client, controllers)
        old = await until(lambda: master_addr(admin, GROUP), "a primary listed", timeout=60)

        async def in_sync(addr: str) -> bool:
            for controller in controllers:
                info = await replicas_info(client, controller, GROUP)
                if info is not None:
                    return len(info.in_sync) == 3 and addr in {r.broker_address for r in info.in_sync}
            return False
        await until(lambda: in_sync(old), "all three in the SyncStateSet", timeout=60)
        await admin.create_topic(topic, 4, cluster=CLUSTER)
        await admin.wait_for_route(topic, timeout=30)
        writer = Writer(dep.namesrv_addr, topic)
        writer.start()
        await writer.until_acked(100)

        victim = dep.controllers[leader] if target == "controller" else dep.etcd[dep.etcd_leader()]
        failed_before = writer.failed
        await asyncio.to_thread(victim.kill if how == "kill" else victim.pause)
        await writer.until_acked(200)  # brokers serve without their controller leader / an etcd member
        survivors = [c for c in controllers if target != "controller" or c != leader]
        new_leader = await _one_leader(client, survivors, besides=leader if target == "controller" else None)
        assert writer.failed == failed_before, f"{writer.failed - failed_before} sends failed during the {how}"

        killed = dep.by_listen(old)
        started = time.monotonic()
        await asyncio.to_thread(killed.kill)

        new, rto = await new_primary(admin, GROUP, old, started)
        await writer.until_acked(100)

        await bring_back(victim, how == "pause", wait_ready=target == "controller")
        if target == "etcd":
            await asyncio.to_thread(dep.wait_etcd_healthy, list(dep.etcd))
        await asyncio.to_thread(killed.restart)
        await until(lambda: in_sync(old), f"the old primary {old} back in the SyncStateSet", timeout=60)
        await writer.until_acked(50)
        await writer.stop()
        # Every controller names one leader (``_one_leader``), and a thawed or restarted old controller leader does
        # not take it back from the new one. After an etcd fault the leadership may move on later, legitimately:
        # the leader's etcd lease (2 s) can end while etcd elects a new leader of its own (~1.7 s measured) and its
        # client fails over, so there the one agreed leader is the check.
        final_leader = await _one_leader(client, controllers)
        if target == "controller":
            assert final_leader == new_leader
        assert await master_addr(admin, GROUP) == new
        print(f"{target} {how}: controller leader {leader} -> {new_leader} (at the end {final_leader}); "
              f"then primary {old} -> {new} in "
              f"{rto:.2f} s; {len(writer.acked)} acknowledged, {writer.failed} failed sends (all at the primary's "
              f"kill)")
        return rto, writer.acked, new
    finally:
        await admin.close()
        await client.close()


@pytest.mark.parametrize(("target", "how"), [("controller", "kill"), ("controller", "pause"), ("etcd", "kill"),
                                             ("etcd", "pause")])
def test_a_controller_or_etcd_fault_then_a_primary_kill(deployment: Deployment, target: str, how: str) -> None:
    try:
        rto, acked, new = asyncio.run(_scenario(deployment, target, how))
        assert rto <= RTO_TARGET_S, f"new primary after {rto:.2f} s, target {RTO_TARGET_S} s"
        assert_acked_kept(deployment.by_listen(new), f"Ctl-{target}-{how}", acked)
    except BaseException:
        print(deployment.logs())
        raise
