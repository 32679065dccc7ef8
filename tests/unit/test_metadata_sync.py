"""A replica's metadata sync driven by a manual clock: each period copies the primary's topics, consumer
offsets, subscription groups and delay offsets, and nothing happens between periods.

The primary here is its real tables answering through a stand-in remoting client (no socket); the same
path with real processes is tests/integration/test_ha_broker.py
(test_replica_copies_topics_consumer_offsets_and_groups_from_its_primary)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.metadata_sync import MetadataSync
from broker_store.broker.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import ManualClock
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand

PRIMARY = "127.0.0.1:10911"


class Tables:
    """One broker's metadata tables under ``root/config``."""

    def __init__(self, root: Path, clock: ManualClock) -> None:
        self.topics = TopicConfigManager(root / "topics.json", auto_create_topic_enable=False,
                                         default_topic_queue_nums=4, clock=clock)
        self.offsets = ConsumerOffsetManager(root / "consumer_offsets.json", clock=clock)
        self.groups = SubscriptionGroupManager(root / "subscription_groups.json", clock=clock)
        for table in (self.topics, self.offsets, self.groups):
            table.load()


class PrimaryClient:
    """Answers the GET_ALL codes from the primary's tables, as its admin and offset processors do."""

    def __init__(self, primary: Tables, delay_offsets: DelayOffsetTable | None = None) -> None:
        self.primary = primary
        self.delay_offsets = delay_offsets or DelayOffsetTable(Path("/nonexistent/delayOffset.json"))
        self.asked: list[int] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        assert addr == PRIMARY
        self.asked.append(cmd.code)
        answers: dict[int, Callable[[], bytes]] = {
            RequestCode.GET_ALL_TOPIC_CONFIG: lambda: self.primary.topics.table().encode(),
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.primary.offsets.encode_wrapper,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.primary.groups.encode_wrapper,
            RequestCode.GET_ALL_DELAY_OFFSET: self.delay_offsets.encode_wrapper}
        body = answers[cmd.code]()
        return cmd.response(ResponseCode.SUCCESS, body=body)


async def settle(sync: MetadataSync, rounds: int) -> None:
    """Let the sync task run until it completed ``rounds`` rounds (no clock time passes)."""
    for _ in range(200):
        if sync.rounds >= rounds:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"round {rounds} did not complete (rounds={sync.rounds})")


def test_groups_created_and_updated_on_the_primary_reach_the_replica_within_one_period(tmp_path: Path) -> None:
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    primary.groups.update(SubscriptionGroupConfig("g1", which_broker_when_consume_slowly=1))
    primary.offsets.commit("g1", "T", 0, 7)
    client = PrimaryClient(primary)

    async def main() -> None:
        sync = MetadataSync(client, lambda: PRIMARY, replica.topics, replica.offsets, replica.groups,  # type: ignore[arg-type]
                            interval=10.0, clock=clock)
        task = asyncio.create_task(sync.run())
        try:
            await settle(sync, 1)  # the first round runs at once
            assert replica.groups.select("g1") == primary.groups.select("g1")
            assert replica.groups.data_version == primary.groups.data_version
            assert replica.offsets.query("g1", "T", 0) == 7

            primary.groups.update(SubscriptionGroupConfig("g1", retry_max_times=3, which_broker_when_consume_slowly=2))
            primary.groups.update(SubscriptionGroupConfig("g2", extra={"custom": "kept"}))
            clock.advance(9.9)
            for _ in range(50):
                await asyncio.sleep(0)
            assert sync.rounds == 1 and replica.groups.select("g2") is None  # nothing before the period ends

            clock.advance(0.1)
            await settle(sync, 2)
            updated = replica.groups.select("g1")
            assert updated is not None and (updated.retry_max_times, updated.which_broker_when_consume_slowly) == (3, 2)
            assert replica.groups.select("g2") == primary.groups.select("g2")
            on_disk = json.loads(replica.groups.path.read_text())
            assert on_disk["subscriptionGroupTable"]["g2"]["custom"] == "kept"
            assert on_disk["dataVersion"] == primary.groups.data_version.to_json()

            primary.groups.delete("g1")
            clock.advance(10.0)
            await settle(sync, 3)
            assert replica.groups.select("g1") is None
            assert client.asked[-3:] == [RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_ALL_CONSUMER_OFFSET,
                                         RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG]
        finally:
            task.cancel()

    asyncio.run(main())

    reloaded = SubscriptionGroupManager(tmp_path / "r" / "subscription_groups.json", clock=ManualClock())
    reloaded.load()  # a restarted replica starts from its last copy
    assert reloaded.select("g2") == primary.groups.select("g2") and reloaded.select("g1") is None


def test_an_unchanged_table_is_not_rewritten(tmp_path: Path) -> None:
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    primary.groups.update(SubscriptionGroupConfig("g"))
    table = {"g": SubscriptionGroupConfig("g")}
    assert replica.groups.replace_all(table, primary.groups.data_version)
    stamp = replica.groups.path.stat().st_mtime_ns
    assert not replica.groups.replace_all(table, primary.groups.data_version)
    assert replica.groups.path.stat().st_mtime_ns == stamp


def test_delay_offsets_are_copied_and_persisted_each_round(tmp_path: Path) -> None:
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    primary_delay, replica_delay = DelayOffsetTable(tmp_path / "p" / "delayOffset.json"), \
        DelayOffsetTable(tmp_path / "r" / "delayOffset.json")
    client = PrimaryClient(primary, primary_delay)
    primary_delay.update(1, 5)

    async def main() -> None:
        sync = MetadataSync(client, lambda: PRIMARY, replica.topics, replica.offsets, replica.groups,  # type: ignore[arg-type]
                            interval=10.0, clock=clock, delay_offsets=replica_delay)
        task = asyncio.create_task(sync.run())
        try:
            await settle(sync, 1)
            assert replica_delay.snapshot() == {1: 5}
            primary_delay.update(2, 9)
            clock.advance(10.0)
            await settle(sync, 2)
            assert client.asked[-1] == RequestCode.GET_ALL_DELAY_OFFSET
        finally:
            task.cancel()

    asyncio.run(main())
    reloaded = DelayOffsetTable(tmp_path / "r" / "delayOffset.json")
    reloaded.load()  # a replica restarted, or promoted, goes on from its last copy
    assert reloaded.snapshot() == {1: 5, 2: 9}
