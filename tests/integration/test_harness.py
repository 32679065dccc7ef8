"""The process harness itself (tests/support/processes.py): a cluster with a two-member broker group,
both members serving; stop, kill -9, SIGSTOP and restart of one member; cleanup when a test fails."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from broker_store.client import Admin
from broker_store.deploy import launcher
from broker_store.protocol.errors import TransportError
from tests.support.processes import GroupSpec, LocalCluster, broker_listen_port, failure_logs, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Group h-a: primary and one replica; group h-b: a primary alone, with an override of its own."""
    groups = [GroupSpec.replicated("h-a", 2), GroupSpec("h-b", [{"flush_mode": "SYNC_FLUSH"}])]
    with LocalCluster(tmp_path_factory.mktemp("harness"), "h", groups) as started:
        yield started


def serves(addr: str, timeout: float = 3.0) -> bool:
    try:
        with Admin(addr, request_timeout=timeout) as admin:
            admin.all_topic_config(addr)
        return True
    except TransportError:
        return False


def test_free_port_spans_are_free_and_never_handed_out_twice() -> None:
    bases = [free_port(2) for _ in range(20)]
    ports = [p for base in bases for p in (base, base + 1)]
    assert len(set(ports)) == len(ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_ports_are_drawn_below_the_kernels_ephemeral_range() -> None:
    # an outgoing connection (Spark's, a client's) can take an ephemeral port between the draw and the bind
    ephemeral = launcher._ephemeral_range()
    assert all(launcher.free_port(2) + 1 < ephemeral.start for _ in range(50))


@pytest.mark.parametrize(("ephemeral", "drawn"), [
    (range(1024, 65536), range(1024, 65535)),  # nothing outside it: every port
    (range(5000, 30000), range(30000, 65535)),  # reaching down low: above it
    (range(32768, 61000), range(10000, 32767)),  # Linux's default: below it
])
def test_ports_avoid_the_ephemeral_range_where_they_can(monkeypatch: pytest.MonkeyPatch, ephemeral: range,
                                                        drawn: range) -> None:
    monkeypatch.setattr(launcher, "_ephemeral_range", lambda: ephemeral)
    assert all(launcher.free_port(2) in drawn for _ in range(20))


def test_a_brokers_listen_port_comes_with_its_fast_and_ha_ports_free() -> None:
    for fast in (True, False):
        listen = broker_listen_port(fast_listen=fast)
        for port in ([listen - 2] if fast else []) + [listen, listen + 1]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))


def test_replica_group_members_register_under_one_name_and_all_serve(cluster: LocalCluster) -> None:
    primary, replica = cluster.groups["h-a"]
    assert (primary.broker_id, replica.broker_id) == (0, 1)
    assert primary.broker_name == replica.broker_name == "h-a"
    assert primary.store_dir != replica.store_dir and primary.store_dir.is_dir() and replica.store_dir.is_dir()
    listens = {p.listen for p in cluster.processes()}
    assert len(listens) == 4 and all(a.startswith("127.0.0.1:") for a in listens)
    assert not {f"127.0.0.1:{b.ha_port}" for b in cluster.brokers} & listens  # listen + 1 kept free for HA
    with Admin(cluster.namesrv_addr) as admin:
        table = admin.cluster_info().broker_addr_table
    assert dict(table["h-a"].broker_addrs) == {0: primary.listen, 1: replica.listen}
    assert dict(table["h-b"].broker_addrs) == {0: cluster.primary("h-b").listen}
    member_files = {b.name: yaml.safe_load(b.config_file.read_text()) for b in cluster.brokers}
    assert {name: f["store"]["flush_mode"] for name, f in member_files.items()} == {
        "h-a-0": "ASYNC_FLUSH", "h-a-1": "ASYNC_FLUSH", "h-b-0": "SYNC_FLUSH"}
    assert all(serves(b.listen) for b in cluster.brokers)


def test_kill_and_restart_one_member_at_the_same_address(cluster: LocalCluster) -> None:
    replica = cluster.groups["h-a"][1]
    pid = replica.pid
    replica.kill()
    assert not replica.running() and not serves(replica.listen)
    assert serves(cluster.primary("h-a").listen)  # the rest of the group is untouched
    replica.start()
    assert replica.pid != pid and serves(replica.listen)
    cluster.wait_registered()
    replica.restart()  # SIGTERM, then start again
    assert serves(replica.listen)


def test_paused_member_answers_nothing_until_resumed(cluster: LocalCluster) -> None:
    broker = cluster.primary("h-b")
    broker.pause()
    try:
        assert broker.running() and not serves(broker.listen, timeout=0.5)
    finally:
        broker.resume()
    assert serves(broker.listen)
    broker.pause()
    broker.stop()  # a paused member still stops cleanly (SIGCONT before the grace period)
    assert not broker.running()
    broker.start()
    cluster.wait_registered()


def test_processes_die_and_logs_stay_when_the_test_body_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="test body failed"), LocalCluster(tmp_path, "f") as started:
        processes = started.processes()
        assert "f-namesrv" in failure_logs() and str(started.brokers[0].log_file) in failure_logs()
        raise RuntimeError("test body failed")
    assert not any(p.running() for p in processes)
    assert all(p.log_file is not None and p.log_file.exists() and p.log_file.parent == tmp_path / "f"
               for p in processes)
