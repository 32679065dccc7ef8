"""The controller-mode HA link between in-process brokers on 127.0.0.1, role changes driven through
``BrokerServer.change_role`` (no controller): epochs shipped, the SyncStateSet formed by the primary (its own
authority here), a failover to a replica at epoch 2 while the old primary is down, and the old primary
rejoining as a replica: it cuts its unconfirmed tail at the consistent point and follows. With
in_sync_replicas 2 no acknowledged message is lost, and no store ever indexes (shows consumers) a record past
its confirm offset."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_store.broker.role import BrokerRole
from broker_store.broker.server import BrokerServer
from broker_store.config import BrokerConfig
from broker_store.ha.epoch_replica_client import EpochReplicaClient
from broker_store.protocol.controller import SyncStateSet
from broker_store.protocol.message import decode_stored_messages
from broker_store.protocol.properties import PROPERTY_WAIT, property_entry
from broker_store.store import PutStatus
from broker_store.store.epoch_cache import EpochEntry

pytestmark = pytest.mark.integration

TOPIC = "T"
HA = {"role": "SYNC_MASTER", "total_replicas": 3, "in_sync_replicas": 2, "ha_send_heartbeat_interval_ms": 200,
      "ha_housekeeping_interval_ms": 3000, "slave_timeout_ms": 3000, "ha_max_time_slave_not_catchup_ms": 3000}


def config(tmp: Path, name: str) -> BrokerConfig:
    """A controller-mode broker whose controller never answers (nothing listens on port 1): the test drives
    its role changes by hand, as the controller agent would."""
    return BrokerConfig(cluster_name="c1", broker_name="g", listen="127.0.0.1:0", store_dir=tmp / name,
                        namesrv_addrs=[], enable_controller_mode=True, controller={"controller_addrs": ["127.0.0.1:1"]},
                        ha=HA, store={"commit_log_segment_size": 4 * 1024 * 1024, "max_message_size": 64 * 1024,
                                      "flush_interval_ms": 50}, fast_listen_enable=False)


async def eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def put(broker: BrokerServer, body: bytes, *, wait: bool = True) -> PutStatus:
    props = b"" if wait else property_entry(PROPERTY_WAIT, "false")
    result = broker.store.put_message(TOPIC, 0, body, props, tags_code=0, born_timestamp=1, born_host="127.0.0.1:1")
    if result.status is not PutStatus.PUT_OK:
        return result.status
    durable = result.durable
    return durable.result() if durable.done() else await asyncio.wrap_future(durable)


def bodies(broker: BrokerServer) -> list[bytes]:
    """What consumers of queue T/0 see, in order."""
    store, out, offset = broker.store, list[bytes](), 0
    while True:
        got = store.get_messages(TOPIC, 0, offset, 64)
        if not got.count:
            return out
        out.extend(m.body for m in decode_stored_messages(got.body))
        offset = got.next_begin_offset


def shows_nothing_unconfirmed(broker: BrokerServer) -> bool:
    return broker.store.dispatched_physical_offset <= broker.store.confirm_offset


def follow(replica: BrokerServer, primary: BrokerServer) -> None:
    assert primary.replication is not None and replica.replication is not None
    replica.replication.follow_primary(primary.replication.ha_address)


def sss(broker: BrokerServer) -> frozenset[int]:
    assert broker.replication is not None and broker.replication.sync_state_set is not None
    return broker.replication.sync_state_set.members


def test_failover_and_rejoin_with_epochs(tmp_path: Path) -> None:
    async def main() -> None:
        started: list[BrokerServer] = []

        async def start(name: str, broker_id: int | None = None) -> BrokerServer:
            broker = BrokerServer(config(tmp_path, name))
            await broker.start()
            started.append(broker)
            assert broker.replication is not None
            # no controller answers here: the primary side applies its own SyncStateSet proposals
            broker.replication.sync_state_set_alterer = None
            if broker_id is not None:
                await broker.assign_broker_id(broker_id)
            return broker

        try:
            a, b, c = await start("a", 1), await start("b", 2), await start("c", 3)
            await a.change_role(BrokerRole.PRIMARY, epoch=1)
            follow(b, a)
            follow(c, a)
            await eventually(lambda: sss(a) == {1, 2, 3}, "A's SyncStateSet to take both replicas")
            acked: list[bytes] = []
            for i in range(30):
                body = f"epoch1-{i}".encode() * 20
                assert await put(a, body) is PutStatus.PUT_OK
                acked.append(body)
            await eventually(lambda: all(x.store.confirm_offset == a.store.max_physical_offset for x in (a, b, c)),
                             "every confirm offset at A's max offset")
            for x in (a, b, c):
                assert x.epoch_store is not None and x.epoch_store.epoch_cache.entries == (EpochEntry(1, 0),)
                assert bodies(x) == acked and shows_nothing_unconfirmed(x)
            confirmed_end = a.store.max_physical_offset
            # B and C started empty (shipped from A's min offset): their heartbeats ack what they hold, never 0
            # again, so A keeps their links (an ack going back closes a link) across several heartbeats.
            await asyncio.sleep(0.6)
            assert sss(a) == {1, 2, 3}, "A dropped a replica whose heartbeat acked 0 after the data it holds"
            for x in (b, c):
                assert x.replication is not None and x.replication.client is not None
                assert x.replication.client.sessions == 1, f"{x.replication.client.sessions} HA sessions"

            # A's controller becomes unreachable and the replicas lose their links: A's SyncStateSet cannot shrink,
            # so its confirm offset freezes; puts that do not wait land on A alone, unconfirmed.
            assert a.replication is not None and b.replication is not None and c.replication is not None
            never = asyncio.Event()

            async def unreachable(_members: frozenset[int], _epoch: int) -> SyncStateSet:
                await never.wait()
                raise AssertionError("unreachable")
            a.replication.sync_state_set_alterer = unreachable
            await b.replication.stop_following()
            await c.replication.stop_following()
            for i in range(5):
                assert await put(a, f"lost-{i}".encode() * 20, wait=False) is PutStatus.PUT_OK
            assert await put(a, b"needs-two") is PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH  # refused, not written
            assert a.store.max_physical_offset > confirmed_end == a.store.confirm_offset
            assert bodies(a) == acked and shows_nothing_unconfirmed(a)

            # Failover: A is down, B is promoted at epoch 2 and C follows it.
            await a.stop()
            started.remove(a)
            await b.change_role(BrokerRole.PRIMARY, epoch=2)
            assert b.epoch_store is not None
            assert b.epoch_store.epoch_cache.entries == (EpochEntry(1, 0), EpochEntry(2, confirmed_end))
            follow(c, b)
            await eventually(lambda: sss(b) == {2, 3}, "C joining B's SyncStateSet")
            for i in range(10):
                body = f"epoch2-{i}".encode() * 20
                assert await put(b, body) is PutStatus.PUT_OK
                acked.append(body)

            # A restarts (a replica in controller mode) and rejoins under B: it cuts its 5 unconfirmed records.
            a = await start("a")
            assert a.broker_id == 1 and a.role_state.epoch == 1
            follow(a, b)
            await eventually(lambda: a.store.max_physical_offset == b.store.max_physical_offset
                             and a.store.confirm_offset == b.store.confirm_offset, "A caught up with B")
            client = a.replication.client if a.replication is not None else None
            assert isinstance(client, EpochReplicaClient) and "truncating" in client.last_decision
            assert a.epoch_store is not None and a.epoch_store.epoch_cache == b.epoch_store.epoch_cache
            await eventually(lambda: sss(b) == {1, 2, 3}, "A joining B's SyncStateSet")
            end = b.store.max_physical_offset
            for x in (a, c):
                assert x.store.read_commit_log(0, end) == b.store.read_commit_log(0, end)
            for x in (a, b, c):
                assert bodies(x) == acked, "an acknowledged message was lost or an unconfirmed one survived"
                assert shows_nothing_unconfirmed(x)
        finally:
            for broker in reversed(started):
                await broker.stop()

    asyncio.run(main())
