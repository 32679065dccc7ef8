"""A broker whose disk fills up (docs/operations.md, "Damaged files and a full disk"): its store is a size-limited tmpfs
mounted in a private mount namespace, held by a ``sleep`` the test starts (so the files outlive a broker restart) and
entered by the broker through ``nsenter``. Sends are refused SERVICE_NOT_AVAILABLE with a remark saying the disk is
full, reads go on, and once a filler file is deleted sends go in again; every acknowledged message is there, also after
a restart. The state machine and the put path under ENOSPC are tests/unit/test_store_disk_full.py; the tmpfs is
tests/support/private_tmpfs.py's. """

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus, new_message
from broker_store.config import BrokerConfig
from broker_store.deploy.launcher import HOST
from broker_store.protocol.codes import ResponseCode
from broker_store.protocol.errors import ServiceNotAvailableError
from tests.support.private_tmpfs import PrivateTmpfs, fill, private_tmpfs
from tests.support.processes import DEFAULT_BROKER_OPTIONS, Broker, LocalCluster, broker_listen_port

pytestmark = pytest.mark.integration

TMPFS_SIZE = "6m"
TOPIC = "df-topic"
BODY = bytes(range(256)) * 16  # 4 KiB


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[PrivateTmpfs]:
    with private_tmpfs(tmp_path / "store", TMPFS_SIZE) as mounted:
        yield mounted


def test_sends_refused_while_the_disk_is_full_then_resumed_and_nothing_acknowledged_lost(
        tmp_path: Path, tmpfs: PrivateTmpfs) -> None:
    mountpoint, inside = tmpfs.mountpoint, tmpfs.inside()  # the tmpfs, as the broker and as this test see it
    with LocalCluster(tmp_path, "df", []) as cluster:
        config = BrokerConfig(cluster_name="df", broker_name="df-a", listen=f"{HOST}:{broker_listen_port(False)}",
                              store_dir=mountpoint, namesrv_addrs=[cluster.namesrv_addr], broker_id=0,
                              **{**DEFAULT_BROKER_OPTIONS, "commit_log_segment_size": 1024 * 1024,
                                 "max_message_size": 64 * 1024})
        broker = Broker("broker", config, tmp_path, "df-a-0", wrap=tmpfs.nsenter_argv())
        cluster.groups["df-a"] = [broker]
        cluster.brokers.append(broker)
        broker.start()
        cluster.wait_registered()
        addr = cluster.namesrv_addr
        mq = MessageQueue(TOPIC, "df-a", 0)
        with Admin(addr) as admin, Producer(addr, "df-pg", retry_times_when_send_failed=0) as producer, \
                PullConsumer(addr, "df-cg", heartbeat_interval=None) as consumer:
            admin.create_topic(TOPIC, queue_nums=1, cluster="df")
            admin.wait_for_route(TOPIC, timeout=10)
            acked: list[bytes] = []

            def send(i: int) -> None:
                body = i.to_bytes(4, "big") + BODY
                result = producer.send(new_message(TOPIC, body), mq)
                assert result.status is SendStatus.SEND_OK and result.queue_offset == len(acked)
                acked.append(body)

            for i in range(20):
                send(i)
            fill(inside / "filler")
            refused: list[ServiceNotAvailableError] = []
            for i in range(20, 60):  # the commit log's last allocated page may still take a send or two
                try:
                    send(i)
                except ServiceNotAvailableError as exc:
                    refused.append(exc)
                    if len(refused) == 3:
                        break
            assert len(refused) == 3, "sends kept succeeding on a full disk"
            assert all(exc.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in exc.remark
                       for exc in refused), refused

            assert pulled(consumer, mq) == acked  # reads go on meanwhile

            (inside / "filler").unlink()
            for i in range(60, 80):
                send(i)
            assert pulled(consumer, mq) == acked

        broker.restart()
        cluster.wait_registered()
        with PullConsumer(addr, "df-cg2", heartbeat_interval=None) as consumer:
            assert pulled(consumer, mq) == acked
        log = (tmp_path / "df-a-0.log").read_text()
        assert "disk full" in log and "writes resumed" in log


def pulled(consumer: PullConsumer, mq: MessageQueue) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while True:
        result = consumer.pull(mq, offset, 32)
        if result.status is not PullStatus.FOUND:
            return bodies
        bodies.extend(m.body for m in result.messages)
        offset = result.next_begin_offset
