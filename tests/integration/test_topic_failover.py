"""A topic created just before its primary fails, with real processes on loopback: the new primary serves it (its
route lists the topic, a pull returns the message), although the replicas' periodic metadata sync is a minute
away. The replica asks for the metadata early when it dispatches the topic's message (``broker.metadata_sync``);
what still missed the copy is adopted at the promotion (``broker.orphan_topics``). The pure rules are unit-tested
in tests/unit/test_metadata_sync_early.py and tests/unit/test_orphan_topics.py.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker_store.client import (
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    MessageQueue,
    PullStatus,
    SendStatus,
    new_message,
)
from broker_store.net.client import RemotingClient
from broker_store.protocol.errors import RocketMQError
from tests.support.controller_group import CP_HA, replicas_info, run_started, until
from tests.support.processes import GroupSpec, LocalCluster

pytestmark = pytest.mark.integration

PERIOD = {"metadata_sync_interval_ms": 60_000}
"""The replicas' periodic round: far beyond every wait below, so only an early round or the adoption can help."""


async def served(admin: AsyncAdmin, consumer: AsyncPullConsumer, mq: MessageQueue, primary: str,
                 body: bytes) -> bool:
    """The route lists ``mq``'s topic on ``primary`` and a pull from offset 0 returns ``body``."""
    try:
        route = await admin.topic_route(mq.topic)
        if not any(b.broker_name == mq.broker_name and b.master_addr == primary for b in route.broker_datas):
            return False
        result = await consumer.pull(mq, 0)
    except RocketMQError:
        return False
    return result.status is PullStatus.FOUND and [m.body for m in result.messages] == [body]


def test_a_topic_created_a_moment_before_its_primary_is_killed_is_served_by_the_new_primary(tmp_path: Path) -> None:
    group, topic = "tf-a", "JustCreated"
    cluster = LocalCluster(tmp_path, "tf", [GroupSpec(group, ({}, {}, {}))], controller={},
                           ha={**CP_HA, **PERIOD})

    async def main() -> None:
        async with AsyncAdmin(cluster.namesrv_addr) as admin, \
                AsyncPullConsumer(cluster.namesrv_addr, "tf-reader") as consumer:
            client = RemotingClient()
            try:
                async def all_in_sync() -> bool:  # every replica electable, so the new primary holds the message
                    info = await replicas_info(client, cluster.namesrv_addr, group)
                    return info is not None and len(info.in_sync) == 3
                await until(all_in_sync, "all three in the SyncStateSet")
                old = cluster.primary(group)
                created = time.monotonic()
                await admin.create_topic(topic, 2, cluster="tf")
                await admin.wait_for_route(topic, timeout=30)
                async with AsyncProducer(cluster.namesrv_addr, "tf-producer", send_timeout=5.0) as producer:
                    result = await producer.send(new_message(topic, b"acknowledged", keys="k"))
                assert result.status is SendStatus.SEND_OK, result
                await asyncio.to_thread(old.kill)
                print(f"kill -9 of the primary {time.monotonic() - created:.2f} s after the topic was created")

                async def new_primary() -> str | None:
                    found = await asyncio.to_thread(cluster.listed_primary, group)
                    return found.listen if found is not None and found is not old else None
                new = await until(new_primary, "a new primary elected")
                mq = MessageQueue(topic, group, result.message_queue.queue_id)
                await until(lambda: served(admin, consumer, mq, new, b"acknowledged"),
                            f"the new primary {new} lists and serves {topic}")
                member = next(b for b in cluster.groups[group] if b.listen == new)
                log = member.log_tail(200_000)
                how = "adopted at the promotion" if f"topic {topic} had messages" in log else "copied by an early round"
                print(f"{topic} on the new primary: {how}")
                configs = await admin.all_topic_config(new)
                assert configs[topic].read_queue_nums >= result.message_queue.queue_id + 1

                # the surviving replica follows the new primary: a topic created there reaches it with its first
                # message (an early round), not at the period a minute away
                other = next(b for b in cluster.groups[group] if b is not old and b.listen != new)
                await admin.create_topic("AfterFailover", 1, cluster="tf")
                await admin.wait_for_route("AfterFailover", timeout=30)
                async with AsyncProducer(cluster.namesrv_addr, "tf-producer", send_timeout=5.0) as producer:
                    async def sent() -> bool:  # the new primary takes writes once the replica caught up (CP)
                        try:
                            return (await producer.send(new_message("AfterFailover", b"m"))).status \
                                is SendStatus.SEND_OK
                        except RocketMQError:
                            return False
                    await until(sent, "a SEND_OK on the new primary")

                async def copied() -> bool:
                    return "AfterFailover" in await admin.all_topic_config(other.listen)
                await until(copied, f"the replica {other.listen} copied AfterFailover (an early round)", timeout=20)
            finally:
                await client.close()

    run_started(cluster, main)


def test_a_static_replica_copies_a_new_topic_when_its_first_message_arrives(tmp_path: Path) -> None:
    group, topic = "ts-a", "StaticNew"
    cluster = LocalCluster(tmp_path, "ts", [GroupSpec(group, ({"ha": {"role": "SYNC_MASTER"}}, {}))], ha=PERIOD)

    async def main() -> None:
        primary, replica = cluster.groups[group]
        async with AsyncAdmin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 3, cluster="ts")
            await admin.wait_for_route(topic, timeout=30)
            async with AsyncProducer(cluster.namesrv_addr, "ts-producer", send_timeout=5.0) as producer:
                assert (await producer.send(new_message(topic, b"m"))).status is SendStatus.SEND_OK

            async def copied() -> bool:
                return topic in await admin.all_topic_config(replica.listen)
            await until(copied, "the replica copied the topic (an early round: the period is a minute)", timeout=20)
            assert (await admin.all_topic_config(replica.listen))[topic] == \
                (await admin.all_topic_config(primary.listen))[topic]
            assert f"messages of topic {topic} arrived" in replica.log_tail(200_000)

    run_started(cluster, main)
