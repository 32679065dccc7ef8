"""`python -m broker_store up` with replicated controllers over etcd, end to end on real processes (127.0.0.1 only):
up starts three etcd members, three controllers, a name server and a controller-mode group of three brokers from a
YAML file of its own in the test's tmp dir (free ports, small timers). Then: controller-status shows one leader,
three answering controllers and three healthy etcd members; messages are acknowledged by 2 of 3 copies; the
controller leader AND an etcd member are killed -9 (the state stays intact, another controller leads); the primary
is killed -9 and a SyncStateSet member is elected at the next epoch, serves everything acknowledged before and takes
writes; ha-status prints the SyncStateSet, epochs and confirm offsets; with every controller killed the brokers
keep serving sends and pulls. And `up` with its controllers enforcing TLS (``controllers.tls``): the group comes up,
a send works and controller-status reaches the controller with TLS (and not without). The brokers have
``restart: "no"``: the killed primary stays down (up would restart it otherwise).

Each child's pid is in ``<run>/<name>.pid`` (up writes them); up's own stderr is ``<tmp>/up.log``, the etcd
members' logs ``<run>/etcd-<i>.log``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus, new_message
from broker_store.client.controller_admin import controller_metadata, sync_state_data
from broker_store.deploy.etcd_members import INSTALL_HINT, find_etcd
from broker_store.deploy.launcher import HOST
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.controller import ReplicasInfo
from broker_store.protocol.errors import RocketMQError
from tests.support.certs import CertSet, make_test_certs
from tests.support.processes import broker_listen_port, free_port
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(find_etcd() is None, reason=f"etcd is not installed: {INSTALL_HINT}")]

GROUP, CLUSTER, TOPIC = "ha", "c", "UpFailover"


def cluster_yaml(tmp_path: Path) -> dict[str, Any]:
    """One cluster, one controller-mode group of three, three controllers over three etcd members; small timers."""
    ha = {"role": "SYNC_MASTER", "total_replicas": 3, "in_sync_replicas": 2, "min_in_sync_replicas": 2,
          "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000,
          "ha_max_time_slave_not_catchup_ms": 5000, "metadata_sync_interval_ms": 500}
    brokers = [{"broker_name": GROUP, "listen": f"{HOST}:{broker_listen_port(False)}", "store_dir": f"b{i}",
                "enable_controller_mode": True, "fast_listen_enable": False, "ha": ha, "restart": "no",
                "controller": {"replica_info_poll_interval_ms": 500},
                "store": {"commit_log_segment_size": 8 * 1024 * 1024, "max_message_size": 1024 * 1024}}
               for i in range(3)]
    return {
        "controllers": {
            "listen": [f"{HOST}:{free_port()}" for _ in range(3)],
            "etcd_data_dir": str(tmp_path / "etcd-data"),
            "controller": {"heartbeat_timeout_ms": 1500, "scan_interval_ms": 250,
                           "etcd": {"endpoints": [f"http://{HOST}:{free_port(2)}" for _ in range(3)],
                                    "lease_ttl_seconds": 2}},
        },
        "clusters": [{"name": CLUSTER, "namesrv": {"listen": f"{HOST}:{free_port()}", "broker_expiry_seconds": 3.0},
                      "brokers": brokers}],
    }


class Up:
    """The ``up`` process and the pids of its children."""

    def __init__(self, tmp_path: Path, config: dict[str, Any] | None = None) -> None:
        self.config = config if config is not None else cluster_yaml(tmp_path)
        self.config_file = tmp_path / "cluster.yaml"
        self.config_file.write_text(yaml.safe_dump(self.config))
        self.run_dir = tmp_path / "run"
        self.log = tmp_path / "up.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.namesrv = self.config["clusters"][0]["namesrv"]["listen"]
        self.controllers: list[str] = self.config["controllers"]["listen"]

    def start(self, timeout: float = 60.0) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "broker_store", "up", "--config", str(self.config_file), "--run-dir",
                 str(self.run_dir), "--data-dir", str(self.run_dir.parent / "data"), "--start-timeout", str(timeout)],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()  # READY, or "" when up gave up (it prints why)
        assert line.startswith("READY "), f"up did not start ({self.proc.poll()}):\n{self.logs()}"

    def pid(self, name: str) -> int:
        return int((self.run_dir / f"{name}.pid").read_text())

    def kill(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGKILL)

    def controller_name(self, addr: str) -> str:
        return f"controller-{self.controllers.index(addr)}"

    def broker_name(self, addr: str) -> str:
        listens = [b["listen"] for b in self.config["clusters"][0]["brokers"]]
        return f"{GROUP}.{listens.index(addr)}"

    def stop(self) -> int | None:
        """SIGTERM up (it stops its children) and its exit code; SIGKILL for what is left after 30 s."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            for pid_file in self.run_dir.glob("*.pid"):  # its children, by the pids it wrote
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            return None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    started = Up(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def cli(up: Up, *args: str, check: bool = True) -> str:
    result = subprocess.run([sys.executable, "-m", "broker_store", *args, "-n", up.namesrv, "--controller",
                             ";".join(up.controllers)], capture_output=True, timeout=60)
    assert result.returncode == 0 or not check, (result.stdout + result.stderr).decode()
    return result.stdout.decode()


def controller_view(controllers: list[str]) -> tuple[str | None, ReplicasInfo | None]:
    """The leader id a live controller names, and the group as the first answering controller holds it."""
    async def ask() -> tuple[str | None, ReplicasInfo | None]:
        client = RemotingClient()
        try:
            for addr in controllers:
                try:
                    meta = await controller_metadata(client, addr)
                    table = await sync_state_data(client, addr, [GROUP])
                except RocketMQError:
                    continue
                return meta.controller_leader_id, table.get(GROUP)
            return None, None
        finally:
            await client.close()

    return asyncio.run(ask())


def send_until_ok(producer: Producer, body: bytes, timeout: float = 30.0) -> float:
    """Seconds until a send of ``body`` is SEND_OK (retrying failures: a primary may be down)."""
    started = time.monotonic()
    while True:
        try:
            if producer.send(new_message(TOPIC, body)).status is SendStatus.SEND_OK:
                return time.monotonic() - started
        except RocketMQError:
            pass  # no primary registered yet, or the dead one still listed: the client re-routes
        assert time.monotonic() - started < timeout, f"no SEND_OK for {body!r} within {timeout} s"
        time.sleep(0.1)


def bodies(namesrv: str) -> list[bytes]:
    """Every message of TOPIC, read from the current primary queue by queue."""
    found: list[bytes] = []
    with Admin(namesrv) as admin, PullConsumer(namesrv, "up-check") as consumer:
        route = admin.topic_route(TOPIC)
        for data in route.queue_datas:
            for queue_id in range(data.read_queue_nums):
                mq, offset = MessageQueue(TOPIC, data.broker_name, queue_id), 0
                while True:
                    result = consumer.pull(mq, offset, 64)
                    if result.status is not PullStatus.FOUND:
                        break
                    found.extend(m.body for m in result.messages)
                    offset = result.next_begin_offset
    return sorted(found)


def test_up_runs_replicated_controllers_over_etcd_and_survives_losing_leaders(up: Up) -> None:
    started = time.monotonic()
    up.start()
    print(f"up ready in {time.monotonic() - started:.1f} s")
    status = json.loads(cli(up, "controller-status", "--json"))
    assert (status["listed"], status["answering"], len(status["leaders"])) == (3, 3, 1), status
    [leader] = status["leaders"]
    assert leader in up.controllers, status
    etcd = up.config["controllers"]["controller"]["etcd"]["endpoints"]
    assert {m["url"]: m["healthy"] for m in status["etcd"]} == dict.fromkeys(etcd, True), status

    # -- writes are acknowledged by 2 of 3 copies once the SyncStateSet holds every member ----------------
    with Admin(up.namesrv) as admin:
        admin.create_topic(TOPIC, 2, cluster=CLUSTER)
        admin.wait_for_route(TOPIC, timeout=10)
    before = [b"before %d" % i for i in range(20)]
    with Producer(up.namesrv) as producer:
        for body in before:
            send_until_ok(producer, body)
    seen: Any = None

    def grown() -> bool:
        nonlocal seen
        seen = controller_view(up.controllers)
        info = seen[1]
        return info is not None and len(info.in_sync) == 3
    eventually(grown, timeout=20, what=f"the SyncStateSet grew to 3 (last seen {seen})")
    _, info = seen
    assert info is not None and info.master_address is not None
    epoch, master = info.master_epoch, info.master_broker_id

    # -- the controller leader and an etcd member die together: another controller leads, state intact ----
    up.kill(up.controller_name(leader))
    up.kill("etcd-0")
    survivors = [c for c in up.controllers if c != leader]

    def new_leader() -> bool:
        nonlocal seen
        seen = controller_view(survivors)
        return seen[0] in survivors
    eventually(new_leader, timeout=20, what=f"a surviving controller leads (last seen {seen})")
    _, after = seen
    assert after is not None and (after.master_broker_id, after.master_epoch) == (master, epoch)
    assert {r.broker_id for r in after.in_sync} == {r.broker_id for r in info.in_sync}
    status = json.loads(cli(up, "controller-status", "--json"))
    assert (status["listed"], status["answering"]) == (3, 2), status
    assert [c["addr"] for c in status["controllers"] if not c["answering"]] == [leader], status
    assert {m["url"]: m["healthy"] for m in status["etcd"]} == {url: url != etcd[0] for url in etcd}, status

    # -- kill -9 the primary: a SyncStateSet member is primary at the next epoch and has every acked message --
    up.kill(up.broker_name(info.master_address))
    with Producer(up.namesrv) as producer:
        failover_s = send_until_ok(producer, b"after the primary died")
    print(f"first SEND_OK {failover_s:.2f} s after kill -9 of the primary")

    def elected() -> bool:
        nonlocal seen
        seen = controller_view(survivors)
        group = seen[1]
        return group is not None and group.master_epoch == epoch + 1
    eventually(elected, timeout=10, what=f"a new master at epoch {epoch + 1} (last seen {seen})")
    _, now = seen
    assert now is not None and now.master_broker_id != master
    assert now.master_broker_id in {r.broker_id for r in info.in_sync}
    assert bodies(up.namesrv) == sorted([*before, b"after the primary died"])

    report = json.loads(cli(up, "ha-status", "--json"))
    [view] = report["controller"]
    assert view["group"] == GROUP and view["master"] == str(now.master_broker_id), report
    assert view["masterEpoch"] == str(epoch + 1), report
    assert view["syncStateSet"] == ",".join(str(r.broker_id) for r in now.in_sync), report
    primary_row = next(m for m in report["members"] if m["id"].startswith("0 "))
    assert primary_row["id"] == f"0 (id {now.master_broker_id})" and primary_row["epoch"] == str(epoch + 1), report
    assert primary_row["epochs"].startswith("1@0,") and f",{epoch + 1}@" in primary_row["epochs"], report
    assert primary_row["confirm"] != "-", report  # confirm offset

    # -- every controller down: the brokers keep serving sends and pulls (only elections stop) ------------
    for addr in survivors:
        up.kill(up.controller_name(addr))
    down_at = time.monotonic()
    with Producer(up.namesrv) as producer:
        while time.monotonic() - down_at < 3.0:  # past the controllers' 1.5 s heartbeat timeout
            result = producer.send(new_message(TOPIC, b"no controller"))
            assert result.status is SendStatus.SEND_OK, result
            time.sleep(0.1)
    assert bodies(up.namesrv).count(b"no controller") >= 10
    assert up.stop() == 0, up.logs()


def tls_cluster_yaml(tmp_path: Path, certs: CertSet) -> dict[str, Any]:
    """One standalone controller enforcing TLS (no etcd: one controller keeps its state in a file), a name server
    and a controller-mode group of two brokers serving TLS and plain (permissive), every process dialling the
    others with TLS (``tls.enable``: brokers to the name server and the controller, the controller's role-change
    notices to the brokers)."""
    dials = {"enable": True, "client": certs.client_tls()}
    serves = {"server": certs.server_tls("permissive"), **dials}
    ha = {"role": "SYNC_MASTER", "total_replicas": 2, "in_sync_replicas": 1, "min_in_sync_replicas": 1,
          "ha_send_heartbeat_interval_ms": 500, "ha_housekeeping_interval_ms": 3000, "metadata_sync_interval_ms": 500}
    brokers = [{"broker_name": GROUP, "listen": f"{HOST}:{broker_listen_port(False)}", "store_dir": f"b{i}",
                "enable_controller_mode": True, "fast_listen_enable": False, "ha": ha, "tls": serves,
                "controller": {"replica_info_poll_interval_ms": 500}} for i in range(2)]
    return {
        "controllers": {"listen": [f"{HOST}:{free_port()}"], "tls": {"server": certs.server_tls("enforcing"), **dials},
                        "controller": {"heartbeat_timeout_ms": 1500, "scan_interval_ms": 250,
                                       "state_dir": str(tmp_path / "controller-state")}},
        "clusters": [{"name": CLUSTER, "brokers": brokers,
                      "namesrv": {"listen": f"{HOST}:{free_port()}", "broker_expiry_seconds": 3.0, "tls": serves}}],
    }


def test_up_runs_controllers_that_enforce_tls(tmp_path: Path) -> None:
    certs = make_test_certs(tmp_path / "certs")
    up = Up(tmp_path, tls_cluster_yaml(tmp_path, certs))
    try:
        up.start()
        status = json.loads(cli(up, "controller-status", "--json", "--tls", "--tls-trust-cert", str(certs.ca)))
        assert (status["listed"], status["answering"], status["leaders"]) == (1, 1, up.controllers), status
        plain = cli(up, "controller-status", "--json", check=False)  # a plain client is refused
        assert not plain or json.loads(plain)["answering"] == 0, plain
        tls = TlsClientSettings.model_validate(certs.client_tls())
        with Admin(up.namesrv, tls=tls) as admin:
            admin.create_topic(TOPIC, 1, cluster=CLUSTER)
            admin.wait_for_route(TOPIC, timeout=10)
        with Producer(up.namesrv, tls=tls) as producer:
            send_until_ok(producer, b"over tls")
        assert up.stop() == 0, up.logs()
    finally:
        up.stop()
