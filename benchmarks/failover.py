"""Fault checker for controller mode (Jepsen-style, real processes on loopback): is anything acknowledged lost,
do replicas diverge, and how long does a failover take?

    .venv/bin/python benchmarks/failover.py --faults 5                  # a short run
    .venv/bin/python benchmarks/failover.py --faults 200 --interval 4   # the target run (docs/benchmarks.md)

One run:

1. A name server with the embedded controller (heartbeat timeout ``--heartbeat-timeout-ms``, scan 200 ms) and
   one broker group of ``--replicas`` brokers in controller mode (SYNC_MASTER, ``in_sync_replicas`` 2 with no
   downgrade below it, ``--all-ack`` for allAckInSyncStateSet), each a separate process (the product launcher's
   ``ManagedProcess``), stores under a temporary directory.
2. ``--producers`` concurrent producers (send timeout 3 s, ``--attempt-timeout`` per attempt, 2 retries) send
   unique messages to one topic for the whole run; every SEND_OK is
   recorded (key, queue, offset, time). Anything else (a timeout, FLUSH_SLAVE_TIMEOUT, an error) is not
   acknowledged and may or may not be stored.
3. The nemesis, ``--faults`` times, ``--interval`` s apart: finds the group's primary (id 0 on the name server)
   and, by ``--kinds`` in turn (default ``kill,pause``): ``kill`` kill -9s it (restarted ``--down`` s later,
   same store and address); ``pause`` SIGSTOPs it for ``--pause`` s; ``both`` kill -9s it together with the
   name server and its embedded controller (apache/rocketmq#7689's shape; both restarted ``--down`` s later);
   ``catchup`` kill -9s it, waits for the controller's new primary and kill -9s that one too while the last
   replica is still catching up with it (both restarted ``--down`` s later: with unclean election off the group
   waits for the second victim, the only SyncStateSet member); ``partition`` (needs ``--lan``) cuts it off from
   the name server (its controller) and every replica for ``--pause`` s while the producers still reach it
   (apache/rocketmq#6662's two primaries), then heals; ``controller`` (needs ``--controllers 3``) kill -9s it
   together with the controllers' leader and one etcd member (all restarted ``--down`` s later). Recovery time
   of a fault: injection -> the first SEND_OK at the client of a send started after it (for ``both``,
   ``catchup`` and ``controller`` it includes ``--down``).

   ``--lan``: every process in a network namespace of its own on one private LAN (``tests/support/netns.py``,
   root needed), the producers in the root namespace. ``--controllers 3``: three standalone controllers over
   three etcd members (``make tools``) on loopback instead of the name server's embedded controller.
4. The check, after the last fault healed and the group settled: every process is stopped; each member's
   CommitLog is read from its files. *Acknowledged lost*: recorded SEND_OKs whose key is not in the final
   primary's log. *Divergent*: members whose CommitLog bytes differ from the final primary's over their
   common range. *Duplicates*: keys stored more than once in the final primary's log (a re-sent message).

The last line is exactly ``faults N, acknowledged lost L, divergent D, RTO p50 X s, p99 Y s``. Targets
(docs/benchmarks.md, "Failover"; with in_sync_replicas >= 2): L = 0 and D = 0 at N >= 200; RTO p50 <= 2 s and p99 <= 3
s. """

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.client.controller_admin import controller_metadata
from broker_store.config import BrokerConfig, ControllerConfig, NamesrvConfig
from broker_store.controller.settings import ControllerSettings
from broker_store.deploy.etcd_members import EtcdCluster
from broker_store.deploy.launcher import HOST, ManagedProcess, broker_listen_port, free_port
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import master_addr
from tests.support.log_check import commitlog_image, diverges, stored_keys
from tests.support.netns import Lan

CLUSTER, GROUP, TOPIC = "fc", "fc-a", "FaultCheck"
KINDS = ("kill", "pause", "both", "catchup", "partition", "controller")


@dataclass
class Ack:
    key: str
    queue: int
    offset: int
    started: float
    """When the send began (monotonic): a send started before a fault says nothing about recovering from it."""
    at: float


@dataclass
class Run:
    acks: list[Ack] = field(default_factory=list)
    faults: list[tuple[str, float]] = field(default_factory=list)
    """(kind, injection time) per fault."""
    sent: int = 0
    errors: Counter[str] = field(default_factory=Counter)


def broker_config(root: Path, name: str, listen: str, namesrv: str, controllers: list[str],
                  args: argparse.Namespace) -> BrokerConfig:
    return BrokerConfig(
        cluster_name=CLUSTER, broker_name=GROUP, listen=listen,
        store_dir=root / name, namesrv_addrs=[namesrv], enable_controller_mode=True,
        controller={"controller_addrs": controllers, "replica_info_poll_interval_ms": 500},
        fast_listen_enable=False, store={"commit_log_segment_size": 64 * 1024 * 1024},
        ha={"role": "SYNC_MASTER", "total_replicas": args.replicas, "in_sync_replicas": 2,
            "min_in_sync_replicas": 2, "all_ack_in_sync_state_set": args.all_ack,
            "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000,
            "ha_max_time_slave_not_catchup_ms": 5000, "metadata_sync_interval_ms": 1000})


class Cluster:
    """The name server, the group's brokers and, with ``--controllers 3``, the controllers and their etcd; with
    ``lan``, each broker and the name server in a namespace of its own (named as the process)."""

    def __init__(self, root: Path, args: argparse.Namespace, lan: Lan | None) -> None:
        self.lan = lan
        timing = {"heartbeat_timeout_ms": args.heartbeat_timeout_ms, "scan_interval_ms": 200}
        self.etcd: EtcdCluster | None = None
        self.controllers: list[ManagedProcess] = []
        namesrv_listen = f"{lan.add_node('namesrv')}:9876" if lan is not None else f"{HOST}:{free_port()}"
        if args.controllers:
            self.etcd = EtcdCluster(root / "etcd", 3)
            settings = ControllerSettings.model_validate(
                {**timing, "etcd": {"endpoints": self.etcd.endpoints, "lease_ttl_seconds": 2}})
            self.controllers = [
                ManagedProcess("controller", ControllerConfig(listen=f"{HOST}:{free_port()}", controller=settings),
                               root, f"controller-{i}") for i in range(args.controllers)]
            namesrv = NamesrvConfig(listen=namesrv_listen, broker_expiry_seconds=3.0)
            controller_addrs = [c.config.listen for c in self.controllers]
        else:
            namesrv = NamesrvConfig(listen=namesrv_listen, broker_expiry_seconds=3.0,
                                    controller={**timing, "state_dir": str(root / "controller")})
            controller_addrs = [namesrv_listen]
        self.namesrv = ManagedProcess("namesrv", namesrv, root, "namesrv",
                                      wrap=lan.wrap("namesrv") if lan is not None else ())
        self.brokers = []
        for i in range(1, args.replicas + 1):
            name = f"b{i}"
            listen = f"{lan.add_node(name)}:10911" if lan is not None else f"{HOST}:{broker_listen_port(False)}"
            config = broker_config(root, name, listen, namesrv_listen, controller_addrs, args)
            self.brokers.append(ManagedProcess("broker", config, root, name,
                                               wrap=lan.wrap(name) if lan is not None else ()))

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.config.listen

    def start(self) -> None:
        if self.etcd is not None:
            self.etcd.start()
        for c in self.controllers:
            c.start()
        self.namesrv.start()
        for b in self.brokers:
            b.start()

    def stop(self) -> None:
        if self.lan is not None:
            self.lan.heal()
        for p in [*self.brokers, self.namesrv, *self.controllers]:
            try:
                if p.running():
                    os.kill(p.pid, signal.SIGCONT)
                p.stop()
            except (OSError, RuntimeError):
                pass
        if self.etcd is not None:
            self.etcd.stop()

    def by_listen(self, addr: str) -> ManagedProcess | None:
        return next((b for b in self.brokers if b.config.listen == addr), None)

    async def controller_leader(self) -> ManagedProcess | None:
        """The standalone controller a live one names as leader (None if none answers)."""
        client = RemotingClient()
        try:
            for c in self.controllers:
                try:
                    leader = (await controller_metadata(client, c.config.listen)).controller_leader_id
                except RocketMQError:
                    continue
                return next((p for p in self.controllers if p.config.listen == leader), None)
            return None
        finally:
            await client.close()


async def produce(run: Run, namesrv: str, stop: asyncio.Event, args: argparse.Namespace) -> None:
    async with AsyncProducer(namesrv, "FaultCheckProducers", send_timeout=3.0,
                             attempt_timeout=args.attempt_timeout) as producer:
        async def one(task: int) -> None:
            seq = 0
            while not stop.is_set():
                key = f"p{task}-{seq}"
                seq += 1
                started = time.monotonic()
                run.sent += 1
                try:
                    result = await producer.send(new_message(TOPIC, key.encode(), keys=key))
                except RocketMQError as exc:
                    run.errors[type(exc).__name__] += 1
                    await asyncio.sleep(0.05)
                    continue
                if result.status is SendStatus.SEND_OK:
                    run.acks.append(Ack(key, result.message_queue.queue_id, result.queue_offset, started,
                                        time.monotonic()))
                else:
                    run.errors[result.status.name] += 1

        await asyncio.gather(*(one(i) for i in range(args.producers)))


async def new_primary(admin: AsyncAdmin, cluster: Cluster, old: str, timeout: float = 10.0) -> ManagedProcess | None:
    """The member the name server lists as primary once it is not ``old`` any more (None after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        addr = await master_addr(admin, GROUP)
        if addr is not None and addr != old:
            return cluster.by_listen(addr)
        await asyncio.sleep(0.02)
    return None


async def nemesis(run: Run, cluster: Cluster, admin: AsyncAdmin, args: argparse.Namespace) -> None:
    kinds = args.kinds.split(",")
    for n in range(args.faults):
        await asyncio.sleep(args.interval)
        addr = await master_addr(admin, GROUP)
        victim = None if addr is None else cluster.by_listen(addr)
        if victim is None:
            print(f"fault {n + 1}: no primary registered; skipped", flush=True)
            continue
        kind = kinds[n % len(kinds)]
        # asked before the injection time is taken: a send that succeeds meanwhile says nothing of recovery
        leader = await cluster.controller_leader() if kind == "controller" else None
        run.faults.append((kind, time.monotonic()))
        if kind == "kill":
            await asyncio.to_thread(victim.kill)
            await asyncio.sleep(args.down)
            await asyncio.to_thread(victim.start)
        elif kind == "both":
            await asyncio.to_thread(victim.kill)
            await asyncio.to_thread(cluster.namesrv.kill)
            await asyncio.sleep(args.down)
            await asyncio.to_thread(cluster.namesrv.start)
            await asyncio.to_thread(victim.start)
        elif kind == "catchup":
            await asyncio.to_thread(victim.kill)
            second = await new_primary(admin, cluster, victim.config.listen)
            if second is not None:
                await asyncio.to_thread(second.kill)
            await asyncio.sleep(args.down)
            for member in (second, victim):
                if member is not None:
                    await asyncio.to_thread(member.start)
        elif kind == "partition":
            assert cluster.lan is not None
            cluster.lan.partition(victim.name, ["namesrv", *(b.name for b in cluster.brokers if b is not victim)])
            await asyncio.sleep(args.pause)
            cluster.lan.heal()
        elif kind == "controller":
            assert cluster.etcd is not None
            etcd_member = cluster.etcd.members[n % len(cluster.etcd.members)]
            for p in (victim, leader, etcd_member):
                if p is not None:
                    await asyncio.to_thread(p.kill)
            await asyncio.sleep(args.down)
            await asyncio.to_thread(cluster.etcd.start_member, etcd_member)
            if leader is not None:
                await asyncio.to_thread(leader.start)
            await asyncio.to_thread(victim.start)
        elif kind == "pause":
            os.kill(victim.pid, signal.SIGSTOP)
            await asyncio.sleep(args.pause)
            os.kill(victim.pid, signal.SIGCONT)
        else:
            raise SystemExit(f"--kinds: unknown fault kind {kind!r} ({', '.join(KINDS)})")
        print(f"fault {n + 1}/{args.faults}: {kind} {victim.name}", flush=True)


def store_dir(broker: ManagedProcess) -> Path:
    assert isinstance(broker.config, BrokerConfig)
    return broker.config.store_dir


def check(run: Run, cluster: Cluster, final_primary: str | None) -> tuple[int, int, int]:
    """(acknowledged lost, divergent members, duplicates)."""
    primary = cluster.by_listen(final_primary or "") or cluster.brokers[0]
    images = {b.name: commitlog_image(store_dir(b)) for b in cluster.brokers}
    keys = stored_keys(images[primary.name], TOPIC)
    lost = sum(1 for a in run.acks if keys[a.key] == 0)
    duplicates = sum(n - 1 for n in keys.values() if n > 1)
    reference = images.pop(primary.name)
    divergent = sum(1 for image in images.values() if diverges(image, reference))
    return lost, divergent, duplicates


async def main_async(args: argparse.Namespace, root: Path, lan: Lan | None) -> str:
    cluster = Cluster(root, args, lan)
    await asyncio.to_thread(cluster.start)
    run = Run()
    admin = AsyncAdmin(cluster.namesrv_addr)
    await admin.start()
    try:
        deadline = time.monotonic() + 60
        while await master_addr(admin, GROUP) is None:
            if time.monotonic() > deadline:
                raise SystemExit("no primary elected within 60 s")
            await asyncio.sleep(0.2)
        await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
        await admin.wait_for_route(TOPIC, timeout=30)
        stop = asyncio.Event()
        producing = asyncio.create_task(produce(run, cluster.namesrv_addr, stop, args))
        await nemesis(run, cluster, admin, args)
        await asyncio.sleep(args.settle)
        stop.set()
        await producing
        final = await master_addr(admin, GROUP)
    finally:
        await admin.close()
        await asyncio.to_thread(cluster.stop)
    lost, divergent, duplicates = check(run, cluster, final)
    rtos: list[float] = []
    by_kind: dict[str, list[float]] = {}
    for kind, at in run.faults:
        after = [a.at for a in run.acks if a.started >= at]
        if after:
            rtos.append(min(after) - at)
            by_kind.setdefault(kind, []).append(round(min(after) - at, 2))
    rtos.sort()
    p50 = statistics.median(rtos) if rtos else float("nan")
    p99 = rtos[min(len(rtos) - 1, int(len(rtos) * 0.99))] if rtos else float("nan")
    print(f"sent {run.sent}, acknowledged {len(run.acks)}, not acknowledged {dict(run.errors)}, duplicates "
          f"{duplicates}, faults injected {len(run.faults)} ({Counter(k for k, _ in run.faults)}), RTO per fault "
          f"{[round(r, 2) for r in rtos]}; by kind {by_kind}")
    return (f"faults {len(run.faults)}, acknowledged lost {lost}, divergent {divergent}, "
            f"RTO p50 {p50:.2f} s, p99 {p99:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--interval", type=float, default=4.0, help="seconds between faults")
    parser.add_argument("--kinds", default="kill,pause", help=f"comma-separated, in turn: {', '.join(KINDS)}")
    parser.add_argument("--lan", action="store_true",
                        help="every process in a network namespace of its own (root; needed by partition)")
    parser.add_argument("--controllers", type=int, choices=(0, 3), default=0,
                        help="0: the name server's embedded controller; 3: standalone controllers over etcd")
    parser.add_argument("--down", type=float, default=2.0, help="seconds a killed primary stays down")
    parser.add_argument("--pause", type=float, default=4.0, help="seconds a primary stays SIGSTOPped")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--attempt-timeout", type=float, default=1.0,
                        help="the producers' attempt_timeout (s): a frozen primary costs one attempt, not the send")
    parser.add_argument("--all-ack", action="store_true", help="all_ack_in_sync_state_set")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=1500)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of traffic after the last fault")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    kinds = args.kinds.split(",")
    if unknown := [k for k in kinds if k not in KINDS]:
        parser.error(f"--kinds: unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
    if "partition" in kinds and not args.lan:
        parser.error("--kinds partition needs --lan (the partition cuts network namespaces)")
    if "controller" in kinds and not args.controllers:
        parser.error("--kinds controller needs --controllers 3 (it kills the controllers' leader and an etcd member)")
    if args.lan and args.controllers:
        parser.error("--lan runs with the embedded controller only (etcd listens on loopback)")
    if args.lan and (why := Lan.available()) is not None:
        parser.error(f"--lan: {why}")
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        if args.lan:
            with Lan() as lan:
                line = asyncio.run(main_async(args, Path(tmp), lan))
        else:
            line = asyncio.run(main_async(args, Path(tmp), None))
    print(line)


if __name__ == "__main__":
    main()
