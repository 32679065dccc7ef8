"""CommitLog shipping between two real MessageStores in one process over 127.0.0.1 sockets.

PrimaryService and ReplicaClient around real stores: byte-identical logs at the same physical offsets,
live streaming, reconnect and resume, far-behind catch-up, dead links, quorum acks over the wire,
RESTART below the primary's min offset and DIVERGED. The decisions themselves are unit-tested without
sockets (test_ha_quorum.py, test_ha_replica_start.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_store.clock import SYSTEM_CLOCK
from broker_store.ha.primary_service import PrimaryService
from broker_store.ha.quorum import Quorum
from broker_store.ha.replica_client import ReplicaClient
from broker_store.ha.settings import HARole, HASettings
from broker_store.ha.wire import encode_report
from broker_store.store import MessageStore, PutStatus, StoreConfig

pytestmark = pytest.mark.integration

SEG = 64 * 1024
HOST = "127.0.0.1:10911"
FAST = {"ha_send_heartbeat_interval_ms": 100, "ha_housekeeping_interval_ms": 600, "slave_timeout_ms": 1000}


def _store(path: Path, seg: int = SEG, **extra: Any) -> MessageStore:
    config = StoreConfig(store_dir=path, commit_log_segment_size=seg, flush_interval_ms=50,
                         retention_interval_ms=0, commit_log_warm_ahead=0, **extra)
    store = MessageStore(config, store_host=HOST)
    store.start()
    return store


def _put(store: MessageStore, count: int, size: int = 1000, topic: str = "Orders") -> int:
    end = 0
    for i in range(count):
        body = bytes([i % 251]) * (size - i % 7)
        result = store.put_message(topic, i % 4, body, b"KEYS\x01k%d\x02" % i, tags_code=0,
                                   born_timestamp=1_700_000_000_000 + i, born_host="127.0.0.1:5000")
        end = result.end_offset
    return end


def _log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    while start + len(out) < end:
        chunk = store.read_commit_log(start + len(out), end - start - len(out))
        assert chunk, f"no bytes at {start + len(out)}"
        out += chunk
    return bytes(out)


def _assert_identical(primary: MessageStore, replica: MessageStore, start: int | None = None) -> None:
    begin = primary.min_physical_offset if start is None else start
    assert replica.max_physical_offset == primary.max_physical_offset
    assert _log_bytes(replica, begin, replica.max_physical_offset) == \
        _log_bytes(primary, begin, primary.max_physical_offset)


async def _until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


class Group:
    """One primary store with its HA service, and one replica store with its client."""

    def __init__(self, tmp: Path, primary_options: dict[str, Any] | None = None, **ha: Any) -> None:
        self.primary = _store(tmp / "primary", **(primary_options or {}))
        self.replica = _store(tmp / "replica")
        self.settings = HASettings(role=HARole.SYNC_MASTER, **{**FAST, **ha})
        self.quorum = Quorum(self.settings, SYSTEM_CLOCK)
        self.service = PrimaryService(self.primary, self.quorum, self.settings, clock=SYSTEM_CLOCK)
        self.primary.add_arrival_listener(lambda *_: self.service.notify_appended())
        self.client: ReplicaClient | None = None

    async def start(self) -> None:
        await self.service.start()
        await self.start_client()

    async def start_client(self) -> None:
        replica_settings = HASettings(role=HARole.SLAVE, ha_primary_address=f"127.0.0.1:{self.service.port}",
                                      **FAST)
        self.client = ReplicaClient(self.replica, replica_settings, clock=SYSTEM_CLOCK, reconnect_delay=0.05)
        await self.client.start()

    async def caught_up(self, timeout: float = 20.0) -> None:
        await _until(lambda: self.replica.max_physical_offset == self.primary.max_physical_offset, timeout)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.stop()
        await self.service.stop()
        self.replica.shutdown()
        self.primary.shutdown()


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_shipped_log_is_byte_identical_and_streams_live(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        try:
            _put(group.primary, 300)                  # ~5 segments of 64 KiB before the replica connects
            await group.start()
            await group.caught_up()
            _assert_identical(group.primary, group.replica, start=0)
            for _ in range(20):                        # live: small puts woken by the arrival listener
                _put(group.primary, 3, size=200)
                await group.caught_up()
            _assert_identical(group.primary, group.replica, start=0)
            for q in range(4):                         # the replica built its own ConsumeQueues
                assert group.replica.get_max_offset("Orders", q) == group.primary.get_max_offset("Orders", q)
        finally:
            await group.close()
    _run(main())


def test_reconnect_resumes_from_the_replica_offset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="broker_store.ha")

    async def main() -> None:
        group = Group(tmp_path)
        try:
            _put(group.primary, 100)
            await group.start()
            await group.caught_up()
            assert group.client is not None
            await group.client.stop()                  # replica goes away; primary moves on
            resume_at = group.replica.max_physical_offset
            _put(group.primary, 100)
            await group.start_client()
            await group.caught_up()
            _assert_identical(group.primary, group.replica, start=0)
            assert f"following from {resume_at} " in caplog.text
            port = group.service.port                  # primary's HA service restarts on the same port
            await group.service.stop()
            _put(group.primary, 50)
            group.service = PrimaryService(group.primary, group.quorum, group.settings, port=port,
                                           clock=SYSTEM_CLOCK)
            await group.service.start()
            await group.caught_up()
            assert group.client.sessions >= 2 and group.client.diverged is None
            _assert_identical(group.primary, group.replica, start=0)
        finally:
            await group.close()
    _run(main())


def test_far_behind_replica_catches_up(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        group.primary.shutdown()
        group.replica.shutdown()
        group.primary = _store(tmp_path / "primary-big", seg=4 * 1024 * 1024)
        group.replica = _store(tmp_path / "replica-big", seg=4 * 1024 * 1024)
        group.service = PrimaryService(group.primary, group.quorum, group.settings, clock=SYSTEM_CLOCK)
        try:
            began = time.monotonic()
            _put(group.primary, 32 * 1024, size=1024)  # ~33 MiB backlog
            backlog = group.primary.max_physical_offset
            write_rate = backlog / (time.monotonic() - began)
            lags: list[float] = []

            async def ticker() -> None:  # the loop must keep serving other work while the stream ships
                while True:
                    before = time.monotonic()
                    await asyncio.sleep(0.001)
                    lags.append(time.monotonic() - before - 0.001)

            began = time.monotonic()
            tick = asyncio.create_task(ticker())
            await group.start()
            await group.caught_up(timeout=50)
            took = time.monotonic() - began
            tick.cancel()
            assert len(lags) > 5 and max(lags) < 0.2, (len(lags), max(lags))
            print(f"catch-up: {backlog / 2**20:.1f} MiB in {took:.2f} s = {backlog / 2**20 / took:.1f} MiB/s; "
                  f"primary put_message rate {write_rate / 2**20:.1f} MiB/s; ratio {backlog / took / write_rate:.2f}; "
                  f"loop lag max {max(lags) * 1000:.1f} ms over {len(lags)} turns")
            _assert_identical(group.primary, group.replica, start=0)
        finally:
            await group.close()
    _run(main())


def test_quorum_acks_over_the_wire_and_dead_links(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path, total_replicas=2, in_sync_replicas=2)
        try:
            await group.start()
            await _until(lambda: group.quorum.links.alive_count == 1 and group.quorum.links.ack_offsets()[0] >= 0)
            futures = []
            for _ in range(50):                        # pipelined: all wait at once
                decision = group.quorum.admit(group.primary.max_physical_offset)
                assert decision.need_acks == 2 and not decision.refused
                end = _put(group.primary, 1, size=300)
                futures.append(asyncio.wrap_future(group.quorum.wait(end, decision)))
            assert await asyncio.gather(*futures) == [PutStatus.PUT_OK] * 50
            _assert_identical(group.primary, group.replica, start=0)
            assert group.client is not None
            await group.client.stop()                  # the link closes: its acks stop counting at once
            await _until(lambda: group.quorum.links.alive_count == 0)
            assert group.quorum.admit(group.primary.max_physical_offset).refused
            # A replica that connects, reports, then goes silent is dropped after the housekeeping interval.
            with socket.create_connection(("127.0.0.1", group.service.port)) as silent:
                silent.sendall(encode_report(group.replica.max_physical_offset))
                await _until(lambda: group.quorum.links.alive_count == 1)
                decision = group.quorum.admit(group.primary.max_physical_offset)
                end = _put(group.primary, 1)
                began = time.monotonic()
                assert await asyncio.wrap_future(group.quorum.wait(end, decision)) is \
                    PutStatus.FLUSH_SLAVE_TIMEOUT
                assert 0.9 < time.monotonic() - began < 2.0
                await _until(lambda: group.quorum.links.alive_count == 0, timeout=3)
        finally:
            await group.close()
    _run(main())


def test_every_put_ok_is_on_the_replica_when_the_primary_stops_under_load(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path, total_replicas=2, in_sync_replicas=2)
        try:
            await group.start()
            await _until(lambda: group.quorum.links.alive_count == 1 and group.quorum.links.ack_offsets()[0] >= 0)
            acked: list[int] = []
            pending: set[asyncio.Future[PutStatus]] = set()

            def record_if_ok(end: int) -> Callable[[asyncio.Future[PutStatus]], None]:
                def record(f: asyncio.Future[PutStatus]) -> None:
                    if f.result() is PutStatus.PUT_OK:
                        acked.append(end)
                return record

            async def producer() -> None:
                while True:
                    decision = group.quorum.admit(group.primary.max_physical_offset)
                    if decision.refused:
                        return
                    end = _put(group.primary, 1, size=500)
                    future = asyncio.wrap_future(group.quorum.wait(end, decision))
                    pending.add(future)
                    future.add_done_callback(record_if_ok(end))
                    if len(pending) >= 32:             # 32 puts in flight
                        done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                        pending.difference_update(done)
                    await asyncio.sleep(0)

            task = asyncio.create_task(producer())
            await _until(lambda: len(acked) >= 2000)
            await group.service.stop()                 # the primary's HA side dies mid-stream
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            replica_max = group.replica.max_physical_offset
            assert max(acked) <= replica_max < group.primary.max_physical_offset + 1
            assert _log_bytes(group.replica, 0, replica_max) == _log_bytes(group.primary, 0, replica_max)
        finally:
            await group.close()
    _run(main())


def test_idle_link_stays_up_on_heartbeats(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        try:
            await group.start()
            await _until(lambda: group.quorum.links.alive_count == 1)
            await asyncio.sleep(3 * FAST["ha_housekeeping_interval_ms"] / 1000)  # idle for 3 dead-link timeouts
            assert group.client is not None and group.client.sessions == 1 and group.client.connected
            assert group.quorum.links.alive_count == 1
        finally:
            await group.close()
    _run(main())


def test_replica_detects_a_silent_primary_and_reconnects(tmp_path: Path) -> None:
    async def main() -> None:
        accepted = []

        async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)
            await reader.read(8)

        server = await asyncio.start_server(mute, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        replica = _store(tmp_path / "replica")
        client = ReplicaClient(replica, HASettings(role=HARole.SLAVE, ha_primary_address=f"127.0.0.1:{port}",
                                                   **FAST), clock=SYSTEM_CLOCK, reconnect_delay=0.05)
        try:
            began = time.monotonic()
            await client.start()
            await _until(lambda: client.sessions >= 2, timeout=5)
            assert "dead link" in client.last_error
            assert time.monotonic() - began < 2.0
        finally:
            await client.stop()
            for w in accepted:
                w.close()
            server.close()
            replica.shutdown()
    _run(main())


def test_replica_entirely_below_the_primary_min_restarts_there(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path, primary_options={"max_commit_log_bytes": 3 * SEG})  # retention keeps ~3 segments
        try:
            _put(group.replica, 5)                     # an old, short log
            _put(group.primary, 400)                   # ~7 segments
            assert group.primary.delete_expired() > 0
            p_min = group.primary.min_physical_offset
            assert p_min > group.replica.max_physical_offset
            await group.start()
            await group.caught_up()
            assert group.replica.min_physical_offset == p_min
            _assert_identical(group.primary, group.replica)
        finally:
            await group.close()
    _run(main())


def test_replica_ahead_of_the_primary_refuses_and_keeps_its_log(tmp_path: Path) -> None:
    async def main() -> None:
        group = Group(tmp_path)
        try:
            _put(group.primary, 10)
            _put(group.replica, 20)
            before = _log_bytes(group.replica, 0, group.replica.max_physical_offset)
            await group.start()
            assert group.client is not None
            await _until(lambda: group.client is not None and group.client.diverged is not None, timeout=5)
            assert "past the primary's end" in str(group.client.diverged)
            assert _log_bytes(group.replica, 0, group.replica.max_physical_offset) == before
            assert group.quorum.links.alive_count == 0
        finally:
            await group.close()
    _run(main())
