"""Replica groups of real broker processes on loopback: quorum writes, shipping, failures, catch-up.

Every broker is a separate process started by the harness (tests/support/processes.py); replicas follow
their group's primary over its HA port. The decisions themselves (needAck, acks, expiry, where a
replica starts) are unit-tested without sockets in test_ha_*.py.
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_store.cli import main as cli
from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, SendStatus, new_message
from broker_store.net import RemotingClient
from broker_store.protocol.codes import PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND, RequestCode, ResponseCode
from broker_store.protocol.errors import RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.ha_status import HAStatus
from broker_store.protocol.headers import PullMessageRequestHeader
from broker_store.protocol.message import STORED_HEADER_SIZE
from tests.support.processes import Broker, GroupSpec, LocalCluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SEGMENT = 8 * 1024 * 1024  # the harness's commit_log_segment_size
FAST_HA = {"ha_send_heartbeat_interval_ms": 200, "ha_housekeeping_interval_ms": 3000, "slave_timeout_ms": 1000,
           "metadata_sync_interval_ms": 300}
SYNC_2_OF_2 = {"role": "SYNC_MASTER", "total_replicas": 2, "in_sync_replicas": 2}
SYNC_2_OF_2_HA = {"ha": SYNC_2_OF_2}


def _primary(ha: dict[str, Any], replicas: int) -> tuple[dict[str, Any], ...]:
    return ({"ha": ha},) + tuple({} for _ in range(replicas))


def ha_status(broker: Broker) -> HAStatus:
    with Admin(broker.listen) as admin:
        return admin.ha_status(broker.listen)


def max_offset(broker: Broker) -> int:
    return int(ha_status(broker).max_offset)


def commit_log(store_dir: Path, start: int, end: int) -> bytes:
    """CommitLog bytes [start, end) read from the segment files on disk."""
    out = bytearray()
    pos = start
    while pos < end:
        seg = pos - pos % SEGMENT
        with open(store_dir / "commitlog" / f"{seg:020d}", "rb") as f:
            f.seek(pos - seg)
            chunk = f.read(min(end, seg + SEGMENT) - pos)
        assert chunk, f"no bytes at {pos} in {store_dir}"
        out += chunk
        pos += len(chunk)
    return bytes(out)


def caught_up(primary: Broker, *replicas: Broker) -> Callable[[], bool]:
    def check() -> bool:
        target = max_offset(primary)
        return all(max_offset(r) == target for r in replicas)
    return check


def send(producer: Producer, topic: str, body: bytes = b"x" * 512) -> SendStatus | str:
    """The send's status, or the error's text when the broker refused it."""
    try:
        return producer.send(new_message(topic, body)).status
    except RocketMQError as exc:
        return str(exc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """s: SYNC_MASTER 2/2 without downgrade; d / n: SYNC_MASTER 3 / 2 / min 1 with / without downgrade."""
    quorum_3 = {"role": "SYNC_MASTER", "total_replicas": 3, "in_sync_replicas": 2, "min_in_sync_replicas": 1}
    groups = [GroupSpec("s", _primary(SYNC_2_OF_2, 1)),
              GroupSpec("d", _primary({**quorum_3, "enable_auto_in_sync_replicas": True}, 2)),
              GroupSpec("n", _primary(quorum_3, 2))]
    with LocalCluster(tmp_path_factory.mktemp("ha"), "ha", groups, ha=FAST_HA) as started:
        with Admin(started.namesrv_addr) as admin:
            for group in started.groups:
                admin.create_topic(f"T-{group}", 4, broker_names=[group])
                admin.wait_for_route(f"T-{group}")
        yield started


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer(cluster.namesrv_addr, "ha-test", retry_times_when_send_failed=0, send_timeout=5.0) as p:
        yield p


def test_sync_master_2_of_2_ships_byte_identical_log_at_the_same_offsets(cluster: LocalCluster,
                                                                          producer: Producer) -> None:
    primary, replica = cluster.groups["s"]
    results = [producer.send(new_message("T-s", bytes([i]) * (100 + i))) for i in range(200)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    # 2 of 2: each SEND_OK was acknowledged by the replica before it was answered.
    end = max_offset(primary)
    assert max_offset(replica) >= end
    assert commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)
    status = ha_status(primary)
    assert status.is_primary and status.in_sync_replicas == 1
    assert status.links[0].slave_ack_offset == end
    assert ha_status(replica).connected


def test_ha_status_command_lists_members_roles_offsets_and_in_sync_state(
        cluster: LocalCluster, producer: Producer, capsys: pytest.CaptureFixture[str]) -> None:
    assert send(producer, "T-s") is SendStatus.SEND_OK
    primary, replica = cluster.groups["s"]
    eventually(caught_up(primary, replica), what="replica caught up")
    assert cli.main(["ha-status", "-n", cluster.namesrv_addr, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["controller"] == []  # static groups: no controller view
    by_member = {(m["group"], m["id"]): m for m in report["members"]}
    assert set(by_member) == {(g, str(i)) for g, members in cluster.groups.items() for i in range(len(members))}
    end = str(max_offset(primary))
    columns = ["addr", "role", "min", "max", "confirm", "behind", "in_sync", "epoch", "epochs", "ha"]
    assert [by_member["s", "0"][c] for c in columns] == [
        primary.listen, "SYNC_MASTER/PRIMARY", "0", end, end, "0", "1 replica(s) in sync", "-", "-",
        f"127.0.0.1:{primary.ha_port}"]
    assert [by_member["s", "1"][c] for c in columns] == [
        replica.listen, "SLAVE/REPLICA", "0", end, end, "0", "yes", "-", "-", f"follows 127.0.0.1:{primary.ha_port}"]
    assert cli.main(["ha-status", "-n", cluster.namesrv_addr]) == 0  # for people: a table, columns aligned
    header, _rule, *rows = capsys.readouterr().out.splitlines()
    assert "\t" not in header and header.split()[:6] == ["cluster", "group", "id", "addr", "role", "min"]
    assert any(row.split()[1:4] == ["s", "1", replica.listen] for row in rows)


def test_replica_copies_topics_consumer_offsets_and_groups_from_its_primary(cluster: LocalCluster) -> None:
    primary, replica = cluster.groups["s"]
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic("T-meta", 3, broker_names=["s"])
        eventually(lambda: "T-meta" in admin.all_topic_config(replica.listen), what="topic copied")
        assert admin.all_topic_config(replica.listen)["T-meta"] == admin.all_topic_config(primary.listen)["T-meta"]
    with PullConsumer(cluster.namesrv_addr, "meta-group") as consumer:
        consumer.update_consumer_offset(MessageQueue("T-meta", "s", 2), 42)
    offsets_file = replica.store_dir / "config" / "consumer_offsets.json"
    eventually(lambda: offsets_file.exists() and '"T-meta@meta-group"' in offsets_file.read_text(),
               what="consumer offset copied and persisted")
    assert json.loads(offsets_file.read_text())["offsetTable"]["T-meta@meta-group"] == {"2": 42}
    assert json.loads((replica.store_dir / "config" / "topics.json").read_text())["topicConfigTable"]["T-meta"]
    period = FAST_HA["metadata_sync_interval_ms"] / 1000
    with Admin(cluster.namesrv_addr) as admin:
        for retries in (16, 5):  # created, then updated: each reaches the replica within a few periods
            admin.create_subscription_group({"groupName": "meta-sub", "whichBrokerWhenConsumeSlowly": 1,
                                             "retryMaxTimes": retries})

            def copied(want: int = retries) -> bool:
                return admin.all_subscription_groups(replica.listen).get("meta-sub", {}).get("retryMaxTimes") == want

            eventually(copied, timeout=10 * period, what="subscription group copied")
            assert admin.all_subscription_groups(replica.listen)["meta-sub"] == \
                admin.all_subscription_groups(primary.listen)["meta-sub"]
    stored = json.loads((replica.store_dir / "config" / "subscription_groups.json").read_text())
    assert stored["subscriptionGroupTable"]["meta-sub"]["retryMaxTimes"] == 5


def test_paused_replica_times_out_then_missing_replica_refuses_before_append(cluster: LocalCluster,
                                                                            producer: Producer) -> None:
    primary, replica = cluster.groups["s"]
    assert send(producer, "T-s") is SendStatus.SEND_OK
    replica.pause()  # connected but silent: counted alive until the housekeeping interval passes
    try:
        assert send(producer, "T-s") is SendStatus.FLUSH_SLAVE_TIMEOUT
        eventually(lambda: ha_status(primary).links == (), what="dead link dropped")
        before = max_offset(primary)
        refused = send(producer, "T-s")
        assert isinstance(refused, str) and "IN_SYNC_REPLICAS_NOT_ENOUGH" in refused
        assert max_offset(primary) == before  # refused before the append: nothing stored
    finally:
        replica.resume()
    eventually(lambda: ha_status(primary).in_sync_replicas == 1, what="replica back in sync")
    assert send(producer, "T-s") is SendStatus.SEND_OK


def test_three_replicas_keep_writing_without_replicas_only_with_downgrade(cluster: LocalCluster,
                                                                          producer: Producer) -> None:
    for group in ("d", "n"):
        assert send(producer, f"T-{group}") is SendStatus.SEND_OK
        for replica in cluster.groups[group][1:]:
            replica.kill()
    eventually(lambda: all(ha_status(cluster.primary(g)).links == () for g in ("d", "n")),
               what="links of killed replicas closed")
    assert send(producer, "T-d") is SendStatus.SEND_OK  # needAck clamped down to min_in_sync_replicas 1
    refused = send(producer, "T-n")
    assert isinstance(refused, str) and "IN_SYNC_REPLICAS_NOT_ENOUGH" in refused


def test_replicas_restarted_far_behind_catch_up_byte_identical(cluster: LocalCluster, producer: Producer) -> None:
    primary, *replicas = cluster.groups["d"]
    for replica in replicas:
        if replica.running():
            replica.kill()
    body = b"b" * 4000
    for _ in range(45):
        producer.send_batch([new_message("T-d", body) for _ in range(60)])
    end = max_offset(primary)
    assert end > SEGMENT  # the backlog spans segments
    for replica in replicas:
        replica.start()
    eventually(caught_up(primary, *replicas), what="replicas caught up")
    for replica in replicas:
        assert commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)
    assert ha_status(primary).in_sync_replicas == 2


def test_kill_9_of_the_primary_under_sync_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, "k", [GroupSpec("k", _primary(SYNC_2_OF_2, 1))], ha=FAST_HA) as cluster:
        primary, replica = cluster.groups["k"]
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("T-k", 4, broker_names=["k"])
            admin.wait_for_route("T-k")
        acked: list[int] = []
        stop = threading.Event()

        def load(worker: int) -> None:
            with Producer(cluster.namesrv_addr, f"kill-{worker}", retry_times_when_send_failed=0,
                          shared_runtime=False) as p:
                i = 0
                while not stop.is_set():
                    try:
                        result = p.send(new_message("T-k", f"{worker}-{i}".encode() * 20))
                    except RocketMQError:
                        return
                    if result.status is SendStatus.SEND_OK:
                        acked.append(int(result.offset_msg_id[16:], 16))
                    i += 1

        workers = [threading.Thread(target=load, args=(w,)) for w in range(8)]
        for w in workers:
            w.start()
        eventually(lambda: len(acked) > 300, what="load running")
        primary.kill()
        stop.set()
        for w in workers:
            w.join(30)
        replica_end = max_offset(replica)
        assert acked and max(acked) < replica_end
        primary_log = commit_log(primary.store_dir, 0, replica_end)  # the killed process's page cache
        replica_log = commit_log(replica.store_dir, 0, replica_end)
        assert replica_log == primary_log
        for offset in acked:  # each acknowledged record lies whole inside the replica's log
            (size,) = struct.unpack_from(">i", replica_log, offset)
            assert size >= STORED_HEADER_SIZE and offset + size <= replica_end


def test_replica_without_a_configured_primary_follows_the_one_the_name_server_names(tmp_path: Path) -> None:
    learns = {"ha": {"ha_primary_address": None}}  # as in conf/cluster-replicas.yaml: no HA address configured
    with LocalCluster(tmp_path, "lrn", [GroupSpec("l", (SYNC_2_OF_2_HA, learns))], ha=FAST_HA) as cluster:
        primary, replica = cluster.groups["l"]
        assert replica.config.ha.ha_primary_address is None
        primary_ha = f"127.0.0.1:{primary.ha_port}"
        status = ha_status(replica)  # the cluster started: the replica is in sync, so it found its primary
        assert status.ha_address == primary_ha and status.connected
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("T-l", 2, broker_names=["l"])
            admin.wait_for_route("T-l")
        with Producer(cluster.namesrv_addr, "learn", retry_times_when_send_failed=0) as producer:
            assert {send(producer, "T-l") for _ in range(20)} == {SendStatus.SEND_OK}  # 2 of 2: shipped
            end = max_offset(primary)
            assert commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)

            # Started while no primary is registered, the replica knows nobody to follow; it registers
            # again every second and follows the primary once that has registered.
            primary.stop()
            replica.restart()
            assert ha_status(replica).ha_address == ""
            primary.restart()
            eventually(lambda: ha_status(replica).connected, timeout=15,
                       what="replica following the restarted primary")
            assert ha_status(replica).ha_address == primary_ha
            eventually(lambda: ha_status(primary).in_sync_replicas == 1, what="replica in sync")
            assert {send(producer, "T-l") for _ in range(20)} == {SendStatus.SEND_OK}
            end = max_offset(primary)
            assert commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)


def test_replica_without_slave_read_sends_pulls_back_to_the_primary(cluster: LocalCluster) -> None:
    _, replica = cluster.groups["s"]
    with Admin(replica.listen) as admin:
        eventually(lambda: "T-s" in admin.all_topic_config(replica.listen), what="topic on replica")
    header = PullMessageRequestHeader(consumer_group="g", topic="T-s", queue_id=0, queue_offset=0, max_msg_nums=8,
                                      sys_flag=PULL_FLAG_SUBSCRIPTION | PULL_FLAG_SUSPEND, commit_offset=0,
                                      suspend_timeout_millis=5000, sub_version=0, subscription="*",
                                      expression_type="TAG")

    async def pull() -> RemotingCommand:
        client = RemotingClient()
        try:
            cmd = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=header.to_ext())
            return await client.invoke(replica.listen, cmd, 3.0)
        finally:
            await client.close()

    started = time.monotonic()
    resp = asyncio.run(pull())
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["suggestWhichBrokerId"] == "0"
    assert time.monotonic() - started < 2.0  # answered at once, not held


def test_slow_consumer_is_redirected_to_the_replica_and_back(tmp_path: Path) -> None:
    reads = {"ha": {"slave_read_enable": True, "memory_basis_bytes": 10_000}}  # slow = > 4000 bytes behind
    with LocalCluster(tmp_path, "rd", [GroupSpec("r", (reads, reads))], ha=FAST_HA) as cluster:
        primary, replica = cluster.groups["r"]
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("T-r", 1, broker_names=["r"])
            admin.wait_for_route("T-r")
            with Producer(cluster.namesrv_addr, "reads") as producer:
                for i in range(50):
                    producer.send(new_message("T-r", b"%04d" % i * 250))
            eventually(caught_up(primary, replica), what="replica caught up")
            eventually(lambda: "T-r" in admin.all_topic_config(replica.listen), what="topic on replica")
        mq = MessageQueue("T-r", "r", 0)
        with PullConsumer(cluster.namesrv_addr, "slow-group") as consumer:
            first = consumer.pull(mq, 0, 4)
            assert len(first.messages) == 4 and first.suggest_which_broker_id == 1
            assert consumer.pull_from_broker_id(mq) == 1
            primary.pause()  # from now on only the replica can answer
            try:
                second = consumer.pull(mq, first.next_begin_offset, 4)
                assert [m.body[:4] for m in second.messages] == [b"0004", b"0005", b"0006", b"0007"]
                assert second.suggest_which_broker_id == 1
                tail = consumer.pull(mq, 48, 32)  # near the end: in memory again, back to the group's broker 0
                assert [m.body[:4] for m in tail.messages] == [b"0048", b"0049"]
                assert tail.suggest_which_broker_id == 0 and consumer.pull_from_broker_id(mq) == 0
            finally:
                primary.resume()
