"""The HA link's timers on a ManualClock: heartbeats both ways, dead-link detection on both sides, the first
report's deadline and the slave timeout fire when the clock is advanced, never before, and never by waiting.

Real ``PrimaryService`` / ``ReplicaClient`` over real stores and 127.0.0.1 sockets, each facing a raw peer
the test plays by hand; the stores, the quorum and the link share one ``ManualClock``. The tests wait (with
a real-time bound) only for bytes to cross the loopback; every time-driven step is an ``advance``. The same
paths on the real clock are in test_ha_shipping.py; the decisions alone in tests/unit/test_ha_quorum.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvloop

from broker_store.clock import ManualClock
from broker_store.ha.primary_service import PrimaryService
from broker_store.ha.quorum import Quorum
from broker_store.ha.replica_client import ReplicaClient
from broker_store.ha.settings import HARole, HASettings
from broker_store.ha.wire import BatchDecoder, ReportDecoder, TransferBatch, encode_report
from broker_store.store import MessageStore, PutStatus, StoreConfig

pytestmark = pytest.mark.integration

HEARTBEAT, DEAD_AFTER, SLAVE_TIMEOUT, RECONNECT = 60.0, 300.0, 180.0, 30.0
"""Minutes, so that no timer that wrongly ran on real time could fire during a test (it would fail waiting)."""
TIMERS = {"ha_send_heartbeat_interval_ms": int(HEARTBEAT * 1000),
          "ha_housekeeping_interval_ms": int(DEAD_AFTER * 1000), "slave_timeout_ms": int(SLAVE_TIMEOUT * 1000)}


def _store(path: Path, clock: ManualClock) -> MessageStore:
    config = StoreConfig(store_dir=path, commit_log_segment_size=64 * 1024, flush_interval_ms=50,
                         retention_interval_ms=0, commit_log_warm_ahead=0)
    store = MessageStore(config, store_host="127.0.0.1:10911", clock=clock)
    store.start()
    return store


async def _replica_of(primary: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
                      tmp_path: Path, clock: ManualClock) -> tuple[asyncio.Server, MessageStore, ReplicaClient]:
    """A stand-in primary serving ``primary`` on a loopback port, and a replica's store and HA client (not started)
    following it on ``clock``'s timers."""
    server = await asyncio.start_server(primary, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = _store(tmp_path / "replica", clock)
    client = ReplicaClient(store, HASettings(role=HARole.SLAVE, ha_primary_address=f"127.0.0.1:{port}", **TIMERS),
                           clock=clock, reconnect_delay=RECONNECT)
    return server, store, client


async def _settle() -> None:
    """Let the loop run what the last ``advance`` made due (and loopback bytes already sent arrive)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _until(cond: Callable[[], bool], what: str) -> None:
    """Wait for socket I/O only (no timer of the code under test runs on real time here)."""
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.002)


class RawReplica:
    """A replica played by hand: reports what the test says, records the batches the primary sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.batches: list[TransferBatch] = []
        self.closed = False
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        decoder = BatchDecoder()
        while data := await reader.read(64 * 1024):
            self.batches.extend(decoder.feed(data))
        self.closed = True

    async def close(self) -> None:
        self._task.cancel()
        self.writer.close()


@asynccontextmanager
async def _primary(tmp: Path, clock: ManualClock, **ha: int) -> AsyncIterator[tuple[PrimaryService, Quorum]]:
    settings = HASettings(role=HARole.SYNC_MASTER, **{**TIMERS, **ha})
    store = _store(tmp / "primary", clock)
    quorum = Quorum(settings, clock)
    service = PrimaryService(store, quorum, settings, clock=clock)
    await service.start()
    try:
        yield service, quorum
    finally:
        await service.stop()
        store.shutdown()


def test_primary_heartbeats_an_idle_replica_and_drops_a_silent_one_by_its_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with _primary(tmp_path, clock, total_replicas=2, in_sync_replicas=2) as (service, quorum):
            replica = RawReplica(*await asyncio.open_connection("127.0.0.1", service.port))
            try:
                replica.writer.write(encode_report(0))  # the empty replica reports once, then goes silent
                await _until(lambda: quorum.links.alive_count == 1, "the replica's link is registered")
                connected_at = clock.monotonic()
                put = quorum.wait(100, quorum.admit(0))  # a put the silent replica never acks
                await _settle()
                assert replica.batches == []  # nothing to ship, and no heartbeat before its interval
                for beat in range(1, 5):
                    clock.advance(HEARTBEAT)
                    await _until(lambda: len(replica.batches) == beat, f"heartbeat {beat}")  # noqa: B023
                    assert replica.batches[-1] == TransferBatch(0, b"")
                    await _settle()
                    assert len(replica.batches) == beat  # one per interval
                    waited = clock.monotonic() - connected_at
                    assert put.done() is (waited >= SLAVE_TIMEOUT)
                    assert quorum.links.alive_count == 1 and not replica.closed  # silent for less than 300 s
                assert put.result(timeout=0) is PutStatus.FLUSH_SLAVE_TIMEOUT
                clock.advance(DEAD_AFTER - 4 * HEARTBEAT)  # silent for the housekeeping interval: a dead link
                await _until(lambda: replica.closed, "the primary closes the dead link")
                assert quorum.links.alive_count == 0
            finally:
                await replica.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_primary_drops_a_replica_that_never_reports_by_its_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with _primary(tmp_path, clock) as (service, quorum):
            replica = RawReplica(*await asyncio.open_connection("127.0.0.1", service.port))
            try:
                await _settle()  # accepted: the first report's deadline runs from here
                clock.advance(DEAD_AFTER - 1)
                await _settle()
                assert not replica.closed
                clock.advance(1)
                await _until(lambda: replica.closed, "the primary gives up waiting for the first report")
                assert replica.batches == [] and quorum.links.alive_count == 0
            finally:
                await replica.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_replica_heartbeats_and_reconnects_after_a_silent_primary_by_its_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        reports: list[list[int]] = []  # per connection, the offsets the replica reported

        async def mute_primary(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            session: list[int] = []
            reports.append(session)
            decoder = ReportDecoder()
            while data := await reader.read(1024):
                session.extend(decoder.feed(data))
            writer.close()

        server, store, client = await _replica_of(mute_primary, tmp_path, clock)
        try:
            await client.start()
            await _until(lambda: reports == [[0]], "the replica's first report")
            await _settle()
            assert reports == [[0]]  # no heartbeat before its interval
            for beat in range(1, 5):
                clock.advance(HEARTBEAT)
                await _until(lambda: len(reports[0]) == 1 + beat, f"heartbeat report {beat}")  # noqa: B023
                await _settle()
                assert len(reports[0]) == 1 + beat and client.connected and client.sessions == 1
            clock.advance(DEAD_AFTER - 4 * HEARTBEAT)  # nothing heard for the housekeeping interval
            await _until(lambda: not client.connected, "the replica drops the dead link")
            assert "dead link" in client.last_error
            await _settle()
            assert client.sessions == 1 and len(reports) == 1  # the reconnect waits for its delay
            clock.advance(RECONNECT)
            await _until(lambda: client.sessions == 2 and len(reports) == 2 and reports[1] == [0],
                         "the replica reconnects and reports again")
        finally:
            await client.stop()
            server.close()
            await server.wait_closed()
            store.shutdown()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_damaged_record_the_primary_sends_on_every_reconnect_is_reported_when_it_starts_and_clears(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The primary's own copy of a record is damaged: each session the replica refuses it, ends, reconnects after
    its delay and is sent it again. One WARNING for that, not one per reconnect; one INFO once it comes intact."""
    from broker_store.ha.wire import encode_batch
    from broker_store.protocol.message import STORED_HEADER_SIZE, encode_stored_message

    record = encode_stored_message(topic=b"Dmg", queue_id=0, queue_offset=0, physical_offset=0, body=b"x" * 300,
                                   properties=b"")
    damaged = bytearray(record)
    damaged[STORED_HEADER_SIZE + 5] ^= 0x5A
    intact = False

    async def main() -> None:
        clock = ManualClock()

        async def primary(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder = ReportDecoder()
            reported: list[int] = []
            while not reported and (data := await reader.read(1024)):
                reported += decoder.feed(data)
            if reported:
                writer.write(encode_batch(reported[0], record if intact else bytes(damaged)))
            while await reader.read(1024):
                pass
            writer.close()

        server, store, client = await _replica_of(primary, tmp_path, clock)
        try:
            def refusals() -> int:  # logged just before the reconnect's wait begins
                return sum("ended: refused a damaged record" in r.getMessage() for r in caplog.records)

            await client.start()
            for session in range(1, 5):
                await _until(lambda: refusals() == session, f"session {session} refuses the damaged record")  # noqa: B023
                assert client.sessions == session and "refused a damaged record" in client.last_error
                if session < 4:
                    clock.advance(RECONNECT)
            nonlocal intact
            intact = True
            clock.advance(RECONNECT)
            await _until(lambda: store.max_physical_offset == len(record), "the intact record is taken")
            await _until(lambda: any("came intact" in r.getMessage() for r in caplog.records), "the INFO")
        finally:
            await client.stop()
            server.close()
            await server.wait_closed()
            store.shutdown()

    with caplog.at_level(logging.DEBUG, logger="broker_store.ha.replica_client"):
        asyncio.run(asyncio.wait_for(main(), 60))
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "damaged" in r.getMessage()
            or "came intact" in r.getMessage()]
    assert [level for level, _ in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.DEBUG,
                                            logging.INFO], said


@pytest.mark.parametrize("loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_a_link_closed_in_the_turn_of_an_append_is_dropped_quietly_and_the_others_served(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    """A primary thawed after a freeze finds the housekeeping tick and new appends due together: the tick closes a
    silent replica's link and, before that link's reader has ended, the append ships to the parked replicas. The
    closed one is skipped (uvloop raises on a write to a closed transport: the broker's loop), the live one gets the
    batch, nothing escapes into the loop's exception handler. Ordered by the clock: the append is a timer at the
    tick's instant, armed after it, so it runs right after the tick closes the link."""
    async def main() -> None:
        errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        clock = ManualClock()
        async with _primary(tmp_path, clock, total_replicas=3, in_sync_replicas=1) as (service, quorum):
            silent = RawReplica(*await asyncio.open_connection("127.0.0.1", service.port))
            live = RawReplica(*await asyncio.open_connection("127.0.0.1", service.port))
            try:
                for count, replica in enumerate((silent, live), 1):  # the silent one first: shipped to first
                    replica.writer.write(encode_report(0))
                    await _until(lambda: quorum.links.alive_count == count, f"replica {count} registered")  # noqa: B023
                clock.advance(HEARTBEAT)
                await _until(lambda: len(live.batches) == 1 and len(silent.batches) == 1, "one heartbeat each")
                live.writer.write(encode_report(0))  # only the live replica answers: it is heard 60 s later
                await _until(lambda: max(s.last_heard for s in quorum.links.snapshot()) == clock.monotonic(),
                             "the live replica's report")
                store: MessageStore = service._log  # type: ignore[assignment]
                end: list[int] = []

                def append() -> None:  # at the instant the silent link's housekeeping ends it
                    end.append(store.put_message("Orders", 0, b"x" * 100, b"", tags_code=0,
                                                 born_timestamp=1_700_000_000_000,
                                                 born_host="127.0.0.1:5000").end_offset)

                clock.call_later(DEAD_AFTER - HEARTBEAT, append)
                clock.advance(DEAD_AFTER - HEARTBEAT)
                await _until(lambda: silent.closed, "the primary closes the silent link")
                await _until(lambda: any(b.data for b in live.batches), "the live replica gets the append")
                await _settle()
                shipped = b"".join(b.data for b in live.batches)
                assert len(shipped) == end[0] and not any(b.data for b in silent.batches)
                assert quorum.links.alive_count == 1
                assert errors == []
            finally:
                await silent.close()
                await live.close()

    with caplog.at_level(logging.INFO, logger="broker_store.ha.primary_service"):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(asyncio.wait_for(main(), 60))
    dropped = [r for r in caplog.records if "no longer shipping" in r.getMessage()]
    assert len(dropped) <= 1 and all(r.levelno == logging.INFO for r in dropped)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
