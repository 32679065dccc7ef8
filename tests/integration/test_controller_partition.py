"""A partitioned primary in controller mode (real processes, each broker and the name server in a network
namespace of its own, ``tests/support/netns.py``).

The old primary is cut off from the name server (with the embedded controller) and from both replicas while
the test's producers (root namespace) can still reach it: the shape of apache/rocketmq#6662, two brokers
believing they are primary. The controller elects a replica of the SyncStateSet; after the cut heals the old
primary learns the new epoch, truncates what it wrote alone and follows. Then every process is stopped and
every member's CommitLog read from its files (``tests/support/log_check.py``).

- CP (in_sync_replicas 2 and no downgrade below it, no unclean election): nothing acknowledged is lost and the
  members do not diverge. The cut primary cannot acknowledge anything alone.
- AP (automatic downgrade to 1 copy, unclean election on): the group stays writable; nothing acknowledged
  before the cut is lost, the members do not diverge after healing, and the only acknowledged messages that
  may be lost are those the cut primary acknowledged alone after the cut (counted and printed).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker_store.client import AsyncAdmin, AsyncProducer, SendStatus, new_message
from broker_store.deploy.launcher import wait_in_sync
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.message import parse_msg_id
from tests.support.controller_group import (
    AP_HA,
    CP_HA,
    Members,
    broker_config,
    master_addr,
    namesrv_config,
    run_started,
    until,
)
from tests.support.log_check import commitlog_image, diverges, stored_keys
from tests.support.netns import Lan
from tests.support.processes import Broker, ClusterProcess

pytestmark: list[pytest.MarkDecorator] = [pytest.mark.integration]

CLUSTER, GROUP, TOPIC = "pc", "pc-a", "Partition"
WAIT = 30.0

_why_not = Lan.available()
if _why_not is not None:
    pytestmark = [pytest.mark.integration, pytest.mark.skip(reason=f"partition tests: {_why_not}")]


@dataclass
class Acks:
    by_key: dict[str, tuple[float, str]] = field(default_factory=dict)
    """key -> (when acknowledged, monotonic; the broker group's address that acknowledged it)."""
    errors: dict[str, int] = field(default_factory=dict)


async def produce(namesrv: str, acks: Acks, stop: asyncio.Event, task: int) -> None:
    async with AsyncProducer(namesrv, "PartitionProducers", send_timeout=3.0, attempt_timeout=1.0) as producer:
        seq = 0
        while not stop.is_set():
            key = f"p{task}-{seq}"
            seq += 1
            try:
                result = await producer.send(new_message(TOPIC, key.encode(), keys=key))
            except RocketMQError as exc:
                acks.errors[type(exc).__name__] = acks.errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.05)
                continue
            if result.status is SendStatus.SEND_OK:
                acks.by_key[key] = (time.monotonic(), parse_msg_id(result.offset_msg_id)[0])
            else:
                acks.errors[result.status.name] = acks.errors.get(result.status.name, 0) + 1


def run_partition(tmp_path: Path, *, ap: bool) -> tuple[Acks, float, str, dict[str, Broker], str]:
    """Start, write, cut the primary off, heal, stop. Returns (acks, cut time, old primary's address, members by
    name, final primary's address)."""
    with Lan() as lan:
        ns_addr = lan.add_node("namesrv")
        namesrv = ClusterProcess("namesrv", namesrv_config(f"{ns_addr}:9876", tmp_path / "controller",
                                                           enable_elect_unclean_master=ap),
                                 tmp_path, "namesrv", wrap=lan.wrap("namesrv"))
        members: dict[str, Broker] = {}
        for name in ("b1", "b2", "b3"):
            addr = lan.add_node(name)
            config = broker_config(f"{addr}:10911", namesrv.listen, tmp_path / name, cluster=CLUSTER, group=GROUP,
                                   ha=AP_HA if ap else CP_HA)
            members[name] = Broker("broker", config, tmp_path, name, wrap=lan.wrap(name))
        by_listen = {b.listen: name for name, b in members.items()}

        async def main() -> tuple[Acks, float, str, str]:
            admin = AsyncAdmin(namesrv.listen)
            await admin.start()
            try:
                old = await until(lambda: master_addr(admin, GROUP), "a primary elected")
                await admin.create_topic(TOPIC, 4, cluster=CLUSTER)
                await admin.wait_for_route(TOPIC, timeout=WAIT)
                await asyncio.to_thread(wait_in_sync, old, 2, WAIT)
                acks, stop = Acks(), asyncio.Event()
                producing = [asyncio.create_task(produce(namesrv.listen, acks, stop, i)) for i in range(2)]
                await asyncio.sleep(1.0)  # acknowledged before the cut: hundreds of messages on both copies
                victim = by_listen[old]
                lan.partition(victim, ["namesrv", *(n for n in members if n != victim)])
                cut = time.monotonic()

                async def replaced() -> str | None:
                    now = await master_addr(admin, GROUP)
                    return now if now not in (None, old) else None

                new = await until(replaced, "a new primary elected while the old one is cut off")
                await asyncio.sleep(3.0)  # writes go on: to the new primary, and (AP) to the cut one
                lan.heal()
                await asyncio.to_thread(wait_in_sync, new, 2, WAIT)  # the old primary follows again
                await asyncio.sleep(1.0)
                stop.set()
                await asyncio.gather(*producing)
                final = await master_addr(admin, GROUP)
                assert final == new, f"primary changed again after healing: {final} (new was {new})"
                return acks, cut, old, new
            finally:
                await admin.close()

        acks, cut, old, new = run_started(Members(namesrv, *members.values()), main)
        return acks, cut, old, members, new


def check_logs(acks: Acks, members: dict[str, Broker], final: str) -> tuple[set[str], int]:
    """(acknowledged keys missing from the final primary's log, members whose log diverges from it)."""
    images = {b.listen: commitlog_image(b.store_dir) for b in members.values()}
    reference = images.pop(final)
    keys = stored_keys(reference, TOPIC)
    lost = {k for k in acks.by_key if keys[k] == 0}
    return lost, sum(1 for image in images.values() if diverges(image, reference))


def test_cp_partitioned_primary_loses_nothing_acknowledged(tmp_path: Path) -> None:
    acks, cut, old, members, new = run_partition(tmp_path, ap=False)
    lost, divergent = check_logs(acks, members, new)
    after_cut = [k for k, (at, _) in acks.by_key.items() if at > cut]
    print(f"CP: acknowledged {len(acks.by_key)} ({len(after_cut)} after the cut), not acknowledged {acks.errors}, "
          f"lost {len(lost)}, divergent {divergent}")
    assert after_cut, "the new primary took no writes"
    assert not lost, f"acknowledged and lost: {sorted(lost)[:10]}"
    assert divergent == 0


def test_ap_partitioned_primary_loses_only_what_it_acknowledged_alone(tmp_path: Path) -> None:
    acks, cut, old, members, new = run_partition(tmp_path, ap=True)
    lost, divergent = check_logs(acks, members, new)
    alone = {k for k, (at, addr) in acks.by_key.items() if at > cut and addr == old}
    print(f"AP: acknowledged {len(acks.by_key)}, by the cut primary alone {len(alone)}, not acknowledged "
          f"{acks.errors}, lost {len(lost)}, divergent {divergent}")
    assert lost <= alone, f"lost beyond what the cut primary acknowledged alone: {sorted(lost - alone)[:10]}"
    assert divergent == 0
