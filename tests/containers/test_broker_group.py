"""A controller-mode broker group of three and its name server (embedded controller), each in its own container
of the tier's image with a memory limit, on the host network at 127.0.0.1, through container faults: the primary
``docker kill``-ed, frozen by ``docker pause`` and thawed, and killed by its container's memory limit. Each
checks what issue 15 promises: a new primary within the RTO target, the old one back (thawed, or its container
started again) as a replica in the SyncStateSet, and nothing acknowledged lost (every SEND_OK key is in the new
primary's CommitLog, read from the store the host bind-mounted).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.launcher import HOST, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.containers import ContainerProcess
from tests.support.controller_group import broker_config, master_addr, namesrv_config, replicas_info, until
from tests.support.log_check import commitlog_image, stored_keys
from tests.support.processes import broker_listen_port

CLUSTER, GROUP, TOPIC = "ct", "ct-a", "ContainerFaults"
RTO_TARGET_S = 3.0
"""Issue 15's failover target (benchmarks/failover.py: p99 <= 3 s), from the fault to the name server listing a
new primary. A frozen primary is only noticed after the controller's heartbeat timeout (1.5 s at test timing),
which the target includes."""
BROKER_MEMORY = "256m"
"""A broker's resident set here is well under 100 MB; the limit is the operator's, with room to spare."""


class ContainerGroup:
    """The name server (embedded controller) and brokers b1..b3, each a container."""

    def __init__(self, image: str, root: Path) -> None:
        self.addr = f"{HOST}:{free_port()}"
        self.namesrv = ContainerProcess.server(image, "namesrv", namesrv_config(self.addr, root / "controller"),
                                               root, "namesrv", memory="256m")
        self.brokers = {
            name: ContainerProcess.server(image, "broker", broker_config(f"{HOST}:{broker_listen_port(False)}",
                                                                         self.addr, root / name, cluster=CLUSTER,
                                                                         group=GROUP),
                                          root, name, memory=BROKER_MEMORY)
            for name in ("b1", "b2", "b3")}

    def by_listen(self, addr: str) -> ContainerProcess:
        return next(b for b in self.brokers.values() if b.listen == addr)

    def start(self) -> None:
        self.namesrv.start()
        threads = [threading.Thread(target=b.start) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def remove(self) -> None:
        for p in (*self.brokers.values(), self.namesrv):
            p.remove()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ({p.container_name}):\n{p.log_tail()}"
                         for p in (*self.brokers.values(), self.namesrv))


@pytest.fixture
def group(tier_image: str, tmp_path: Path) -> Iterator[ContainerGroup]:
    group = ContainerGroup(tier_image, tmp_path)
    try:
        group.start()
        yield group
    except BaseException:
        print(group.logs())
        raise
    finally:
        group.remove()


class Writer:
    """A producer sending keyed messages until stopped; ``acked`` holds every key answered SEND_OK."""

    def __init__(self, namesrv: str) -> None:
        self.namesrv = namesrv
        self.acked: list[str] = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with AsyncProducer(self.namesrv, "ContainerProducers", send_timeout=3.0) as producer:
            i = 0
            while not self._stop.is_set():
                key = f"k-{i}"
                i += 1
                try:
                    result = await producer.send(new_message(TOPIC, key.encode(), keys=key))
                except RocketMQError:
                    self.failed += 1
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    self.acked.append(key)
                await asyncio.sleep(0.005)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def until_acked(self, n: int, timeout: float = 30.0) -> None:
        target = len(self.acked) + n

        async def enough() -> bool:
            assert self._task is not None
            if self._task.done():
                self._task.result()
            return len(self.acked) >= target
        await until(enough, lambda: f"{n} more SEND_OK (acked {len(self.acked)}, failed {self.failed})", timeout)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task


async def _ready(group: ContainerGroup, admin: AsyncAdmin, client: RemotingClient) -> str:
    primary = await until(lambda: master_addr(admin, GROUP), "a primary elected", timeout=60)

    async def all_in_sync() -> bool:
        info = await replicas_info(client, group.addr, GROUP)
        return info is not None and len(info.in_sync) == 3
    await until(all_in_sync, "all three in the SyncStateSet", timeout=60)
    await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
    await admin.wait_for_route(TOPIC, timeout=30)
    return primary


async def _fail_over(group: ContainerGroup, fault: str) -> tuple[float, list[str], str]:
    """Writes flowing, ``fault`` on the primary, writes again on the new one: (RTO s, acked keys, new primary)."""
    admin, client = AsyncAdmin(group.addr), RemotingClient()
    await admin.start()
    try:
        old = await _ready(group, admin, client)
        victim = group.by_listen(old)
        writer = Writer(group.addr)
        writer.start()
        await writer.until_acked(100)
        started = time.monotonic()
        if fault == "kill":
            await asyncio.to_thread(victim.kill)
        elif fault == "pause":
            await asyncio.to_thread(victim.pause)
        else:
            await asyncio.to_thread(_exceed_memory_limit, victim)
        if fault != "pause":
            state = victim.state()
            assert (state["ExitCode"], state["OOMKilled"]) == (137, fault == "memory"), state

        async def replaced() -> str | None:
            now = await master_addr(admin, GROUP)
            return now if now not in (None, old) else None
        new = await until(replaced, "a new primary", timeout=30)
        rto = time.monotonic() - started
        await writer.until_acked(100)
        if fault == "pause":
            await asyncio.to_thread(victim.unpause)
        else:
            await asyncio.to_thread(victim.restart)  # the same container again: same config, same store
        await writer.until_acked(50)  # the old primary back must not take writes of its own (it is fenced)

        async def rejoined() -> bool:
            info = await replicas_info(client, group.addr, GROUP)
            return info is not None and old in {r.broker_address for r in info.in_sync}
        await until(rejoined, f"the old primary {old} back in the SyncStateSet as a replica", timeout=60)
        await writer.stop()
        assert await master_addr(admin, GROUP) == new
        return rto, writer.acked, new
    finally:
        await admin.close()
        await client.close()


def _exceed_memory_limit(victim: ContainerProcess) -> None:
    """The container's memory use driven past its limit from inside: a process allocating and touching memory,
    with the broker (the container's PID 1) made the OOM killer's first choice so the kernel kills the broker,
    as a broker growing past its limit would be."""
    victim._docker().exec_run(
        ["sh", "-c", "echo 1000 > /proc/1/oom_score_adj && exec python3 -c "
         "'import time\nb = []\nwhile True: b.append(bytearray(b\"x\") * (1 << 20))'"], detach=True)
    victim._docker().wait(timeout=60)


def _assert_nothing_lost(group: ContainerGroup, acked: list[str], new_primary: str) -> None:
    for b in group.brokers.values():
        b.kill() if b.state()["Status"] == "running" else None
    stored = stored_keys(commitlog_image(group.by_listen(new_primary).store_dir), TOPIC)
    lost = [k for k in acked if k not in stored]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged keys missing on the new primary: {lost[:10]}"


def test_docker_kill_of_the_primary(group: ContainerGroup) -> None:
    rto, acked, new = asyncio.run(_fail_over(group, "kill"))
    print(f"docker kill: new primary after {rto:.2f} s, {len(acked)} acknowledged")
    assert rto <= RTO_TARGET_S, f"new primary after {rto:.2f} s, target {RTO_TARGET_S} s"
    _assert_nothing_lost(group, acked, new)


def test_docker_pause_and_unpause_of_the_primary(group: ContainerGroup) -> None:
    rto, acked, new = asyncio.run(_fail_over(group, "pause"))
    print(f"docker pause: new primary after {rto:.2f} s, {len(acked)} acknowledged")
    assert rto <= RTO_TARGET_S, f"new primary after {rto:.2f} s, target {RTO_TARGET_S} s"
    assert all(b.state()["Status"] == "running" for b in group.brokers.values())
    _assert_nothing_lost(group, acked, new)


def test_the_primary_killed_by_its_memory_limit(group: ContainerGroup) -> None:
    rto, acked, new = asyncio.run(_fail_over(group, "memory"))
    print(f"memory limit: new primary after {rto:.2f} s, {len(acked)} acknowledged")
    assert rto <= RTO_TARGET_S, f"new primary after {rto:.2f} s, target {RTO_TARGET_S} s"
    _assert_nothing_lost(group, acked, new)
