"""Early metadata-sync rounds driven by a manual clock: a message of a topic the replica's table does not list asks
the primary at once (not at the next period), at most one early round per gap, and a topic the primary does not
list either asks once until the table changes.

The primary is its real tables answering through a stand-in client (tests/unit/test_metadata_sync.py's); the same
path with real processes is tests/integration/test_topic_failover.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from broker_store.broker.metadata_sync import MetadataSync
from broker_store.broker.unknown_topics import UnknownTopicTrigger
from broker_store.clock import ManualClock
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.topic import TopicConfig
from broker_store.store.delay_levels import SCHEDULE_TOPIC
from tests.unit.test_metadata_sync import PRIMARY, PrimaryClient, Tables, settle


async def idle(sync: MetadataSync, rounds: int) -> None:
    """Let every ready task run; the sync must still have completed exactly ``rounds`` rounds."""
    for _ in range(100):
        await asyncio.sleep(0)
    assert sync.rounds == rounds


def test_the_trigger_asks_once_per_unlisted_topic_until_the_table_changes(tmp_path: Path) -> None:
    clock = ManualClock()
    replica = Tables(tmp_path, clock)
    replica.topics.update(TopicConfig("Known", 4, 4))
    trigger = UnknownTopicTrigger(replica.topics)
    assert "Known" in trigger.quiet and SCHEDULE_TOPIC in trigger.quiet
    assert not trigger.dispatched("Known")
    assert not trigger.dispatched(SCHEDULE_TOPIC)  # broker-internal: never has a config
    assert trigger.dispatched("New")
    assert "New" in trigger.quiet  # the dispatching thread stops hopping for it
    assert not trigger.dispatched("New")
    trigger.refresh()  # a round that did not change the table: still asked
    assert not trigger.dispatched("New")
    replica.topics.update(TopicConfig("Other", 1, 1))  # the table changed: one more request may go
    trigger.refresh()
    assert "New" not in trigger.quiet and "Other" in trigger.quiet
    assert trigger.dispatched("New")
    assert not trigger.dispatched("New")


def test_an_unlisted_topic_asks_for_a_round_at_once_spaced_by_the_gap(tmp_path: Path) -> None:
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    client = PrimaryClient(primary)
    log_end = [100]

    async def main() -> None:
        sync = MetadataSync(client, lambda: PRIMARY, replica.topics, replica.offsets, replica.groups,  # type: ignore[arg-type]
                            interval=10.0, clock=clock, early_round_gap=1.0, log_end=lambda: log_end[0])
        sync.arrival_listener("Before", 0, 1)  # not running yet: nothing is asked
        task = asyncio.create_task(sync.run())
        try:
            await settle(sync, 1)
            assert sync.table_log_offset == 100
            primary.topics.update(TopicConfig("Fresh", 2, 2))
            log_end[0] = 250
            clock.advance(0.4)
            sync.arrival_listener("Fresh", 1, 1)  # on the loop's thread
            await idle(sync, 1)  # not before the gap since the last round's start
            clock.advance(0.6)
            await settle(sync, 2)
            assert replica.topics.select("Fresh") == primary.topics.select("Fresh")
            assert sync.table_log_offset == 250

            # another topic, dispatched on another thread (the HA client's): one early round after the gap
            primary.topics.update(TopicConfig("Fresher", 1, 1))
            await asyncio.to_thread(sync.arrival_listener, "Fresher", 0, 1)
            await asyncio.to_thread(sync.arrival_listener, "Fresher", 0, 2)
            await idle(sync, 2)
            clock.advance(1.0)
            await settle(sync, 3)
            assert replica.topics.select("Fresher") is not None
            clock.advance(1.0)
            await idle(sync, 3)  # the second message asked nothing more

            # a topic the primary does not list (deleted meanwhile): one early round, then quiet until the period
            sync.arrival_listener("Gone", 0, 1)
            sync.arrival_listener("Gone", 0, 2)
            await settle(sync, 4)  # the gap since round 3's start has passed
            for _ in range(5):
                sync.arrival_listener("Gone", 0, 3)
                clock.advance(1.0)
                await idle(sync, 4)
            clock.advance(5.0)  # 10 s after round 4 started: the periodic round
            await settle(sync, 5)
            sync.arrival_listener("Gone", 0, 4)  # the table did not change: still nothing asked
            clock.advance(1.0)
            await idle(sync, 5)
        finally:
            task.cancel()
        sync.request_round()  # stopped: no effect, no error

    asyncio.run(main())


def test_a_cut_during_a_round_leaves_the_table_offset_unknown(tmp_path: Path) -> None:
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    gate = threading.Event()

    class SlowClient(PrimaryClient):
        async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
            while not gate.is_set():
                await asyncio.sleep(0)
            return await super().invoke(addr, cmd, timeout)

    async def main() -> None:
        sync = MetadataSync(SlowClient(primary), lambda: PRIMARY, replica.topics, replica.offsets,  # type: ignore[arg-type]
                            replica.groups, interval=10.0, clock=clock, log_end=lambda: 500)
        round_ = asyncio.create_task(sync.sync_once())
        await asyncio.sleep(0)
        sync.forget_table_log_offset()  # the HA client cut the log while the table was asked for
        gate.set()
        assert await round_
        assert sync.table_log_offset is None
        assert await sync.sync_once()
        assert sync.table_log_offset == 500

    asyncio.run(main())


def test_an_early_round_without_the_primarys_address_is_tried_again_a_gap_later(tmp_path: Path) -> None:
    """A static replica that registered before its primary learns the address from its next registration."""
    clock = ManualClock()
    primary, replica = Tables(tmp_path / "p", clock), Tables(tmp_path / "r", clock)
    primary.topics.update(TopicConfig("Fresh", 2, 2))
    addr: list[str | None] = [None]

    async def main() -> None:
        sync = MetadataSync(PrimaryClient(primary), lambda: addr[0], replica.topics, replica.offsets,  # type: ignore[arg-type]
                            replica.groups, interval=60.0, clock=clock, early_round_gap=1.0)
        task = asyncio.create_task(sync.run())
        try:
            await idle(sync, 0)  # the first round had no address
            sync.arrival_listener("Fresh", 0, 1)
            clock.advance(1.0)
            await idle(sync, 0)  # the early round had none either
            addr[0] = PRIMARY  # the registration answer named the primary
            clock.advance(1.0)
            await settle(sync, 1)
            assert replica.topics.select("Fresh") is not None
            clock.advance(1.0)
            await idle(sync, 1)  # then the period again
        finally:
            task.cancel()

    asyncio.run(main())
