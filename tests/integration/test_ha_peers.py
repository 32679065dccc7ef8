"""The HA port and the controller accept only configured peers (docs/security.md, "Peers of the HA port and the
controller"), over real processes on loopback.

A group whose members share an HA secret (``ha.ha_secret_file``) and list each other (``ha.ha_allowed_peers``)
replicates as before, in a static group (classic link) and under the controller (epoch link); a replica
without the secret, with another secret, or from an unlisted address never gets a CommitLog byte, and the
controller answers an unlisted peer NO_PERMISSION naming ``controller.allowed_peers`` while routes stay public.
Unlisted addresses are 127.0.0.2 (Linux routes all of 127/8 to loopback). The decisions themselves are
tests/unit/test_peer_auth.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import Admin, Producer, SendStatus, new_message
from broker_store.config import BrokerConfig
from broker_store.ha.wire import encode_report
from broker_store.ha.wire_epoch import ReplicaHandshake, encode_replica_handshake
from broker_store.protocol.acl import SessionCredentials, sign
from broker_store.protocol.codes import RequestCode, ResponseCode
from broker_store.protocol.frame import RemotingCommand, decode_frame, encode_frame
from tests.integration.test_ha_broker import FAST_HA, SYNC_2_OF_2, commit_log, ha_status, max_offset
from tests.support.processes import Broker, GroupSpec, LocalCluster, broker_listen_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

UNLISTED = "127.0.0.2"


def secret_file(path: Path, secret: bytes) -> str:
    path.write_bytes(secret + b"\n")
    return str(path)


def knock(port: int, opening: bytes, *, source: str = "127.0.0.1") -> bytes:
    """Connect to an HA port from ``source``, send ``opening`` (a secretless replica's first bytes) and return
    everything the primary sent before it closed the link."""
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(opening)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def request_from(source: str, addr: str, cmd: RemotingCommand) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(encode_frame(cmd))
        head = b""
        while len(head) < 4:
            head += sock.recv(4 - len(head))
        (total,) = struct.unpack(">i", head)
        payload = b""
        while len(payload) < total:
            payload += sock.recv(total - len(payload))
        return decode_frame(payload)


@contextmanager
def intruder(cluster: LocalCluster, primary: Broker, name: str, ha: dict[str, Any]) -> Iterator[Broker]:
    """A replica process outside the cluster following ``primary``'s HA port (no name server)."""
    config = BrokerConfig(cluster_name=cluster.name, broker_name=primary.broker_name, broker_id=9,
                          listen=f"127.0.0.1:{broker_listen_port(False)}", store_dir=cluster.root / name,
                          fast_listen_enable=False,
                          store={"commit_log_segment_size": 8 * 1024 * 1024, "max_message_size": 1024 * 1024},
                          ha={**FAST_HA, "role": "SLAVE", "ha_primary_address": f"127.0.0.1:{primary.ha_port}", **ha})
    broker = Broker("broker", config, cluster.root, name)
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


def test_static_group_with_secret_and_allow_list_replicates_and_refuses_everyone_else(tmp_path: Path) -> None:
    secret = secret_file(tmp_path / "ha.secret", b"group-secret-of-the-test-0123456789")
    other = secret_file(tmp_path / "other.secret", b"some-other-secret-0123456789")
    guarded = {"ha_secret_file": secret, "ha_allowed_peers": ["127.0.0.1"]}
    spec = GroupSpec("p", ({"ha": {**SYNC_2_OF_2, **guarded}}, {"ha": guarded}))
    with LocalCluster(tmp_path, "peers", [spec], ha=FAST_HA) as cluster:  # started = the replica is in sync
        primary, replica = cluster.groups["p"]
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("T-p", 2, broker_names=["p"])
            admin.wait_for_route("T-p")
        with Producer(cluster.namesrv_addr, "peers", retry_times_when_send_failed=0) as producer, \
                intruder(cluster, primary, "no-secret", {}) as secretless, \
                intruder(cluster, primary, "wrong-secret", {"ha_secret_file": other}) as wrong:
            # 2 of 2: every SEND_OK was shipped to the configured replica over the authenticated link
            assert {producer.send(new_message("T-p", b"x" * 512)).status for _ in range(30)} == {SendStatus.SEND_OK}
            end = max_offset(primary)
            assert end > 0 and commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)

            # no CommitLog byte for a peer without the secret, from an unlisted address, or with another secret
            assert knock(primary.ha_port, encode_report(0)) == b""
            assert knock(primary.ha_port, encode_report(0), source=UNLISTED) == b""
            eventually(lambda: "closed the link" in ha_status(secretless).last_error, timeout=15,
                       what="the secretless replica refused")
            eventually(lambda: "failed the HA secret proof" in ha_status(wrong).last_error, timeout=15,
                       what="the replica with another secret refusing the primary")
            for refused in (secretless, wrong):
                status = ha_status(refused)
                assert not status.connected and status.max_offset == 0
            assert ha_status(primary).in_sync_replicas == 1  # only the configured replica is a link
            assert {producer.send(new_message("T-p", b"y" * 512)).status for _ in range(10)} == {SendStatus.SEND_OK}
        log_text = primary.log_tail(1_000_000)
        assert f"peer {UNLISTED} is not in ha.ha_allowed_peers" in log_text
        assert "no HA hello" in log_text


def test_controller_group_with_secret_elects_replicates_and_the_controller_refuses_unlisted_peers(
        tmp_path: Path) -> None:
    secret = secret_file(tmp_path / "ha.secret", b"controller-group-secret-0123456789")
    with LocalCluster(tmp_path, "cpeers", [GroupSpec("c", ({}, {}))], controller={"allowed_peers": ["127.0.0.1"]},
                      ha={"ha_secret_file": secret, "ha_allowed_peers": ["127.0.0.1"]}) as cluster:
        primary = cluster.primary("c")  # elected through the guarded controller, replica in sync over the epoch link
        replica = next(b for b in cluster.groups["c"] if b is not primary)
        with Admin(cluster.namesrv_addr) as admin:
            admin.create_topic("T-c", 2, broker_names=["c"])
            admin.wait_for_route("T-c")
        with Producer(cluster.namesrv_addr, "cpeers", retry_times_when_send_failed=0) as producer:
            assert {producer.send(new_message("T-c", b"z" * 512)).status for _ in range(20)} == {SendStatus.SEND_OK}
        eventually(lambda: max_offset(replica) == max_offset(primary), what="replica caught up")
        end = max_offset(primary)
        assert commit_log(replica.store_dir, 0, end) == commit_log(primary.store_dir, 0, end)

        # a secretless controller-mode replica's handshake gets no primary handshake (no epochs, no bytes)
        assert knock(primary.ha_port, encode_replica_handshake(ReplicaHandshake(7))) == b""

        refused = request_from(UNLISTED, cluster.namesrv_addr, RemotingCommand(code=RequestCode.GET_CONTROLLER_CONFIG))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert f"peer {UNLISTED} is not in controller.allowed_peers" in (refused.remark or "")
        listed = request_from("127.0.0.1", cluster.namesrv_addr,
                              RemotingCommand(code=RequestCode.GET_CONTROLLER_CONFIG))
        assert listed.code == ResponseCode.SUCCESS and b"controllerAllowedPeers=127.0.0.1" in listed.body
        route = request_from(UNLISTED, cluster.namesrv_addr, RemotingCommand(
            code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T-c"}))
        assert route.code == ResponseCode.SUCCESS  # the name server's routes are not the controller's to guard


def test_controller_with_an_acl_file_serves_signed_brokers_and_refuses_unsigned_requests(tmp_path: Path) -> None:
    """``controller.acl_file``: brokers sign every controller request with their ``acl_credentials_file`` account, so
    the group registers and elects; an unsigned request, or one signed with a wrong secret, is refused with ACL
    1.0's text."""
    acl_file = tmp_path / "controller_acl.yml"
    acl_file.write_text("accounts:\n  - {accessKey: brokerAK01, secretKey: brokerSK01}\n"
                        "  - {accessKey: adminAK01, secretKey: adminSK01, admin: true}\n")
    credentials = tmp_path / "broker-credentials.yml"
    credentials.write_text("accessKey: brokerAK01\nsecretKey: brokerSK01\n")
    credentials.chmod(0o600)
    with LocalCluster(tmp_path, "cacl", [GroupSpec("c", ({}, {}))], controller={"acl_file": str(acl_file)},
                      acl_credentials_file=str(credentials)) as cluster:
        cluster.primary("c")  # registered and elected through the signing-only controller

        def config_request(credentials: SessionCredentials | None) -> RemotingCommand:
            cmd = RemotingCommand(code=RequestCode.GET_CONTROLLER_CONFIG, ext_fields={"probe": "1"})
            return request_from("127.0.0.1", cluster.namesrv_addr,
                                cmd if credentials is None else sign(cmd, credentials))

        unsigned = config_request(None)
        assert unsigned.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in (unsigned.remark or "")
        forged = config_request(SessionCredentials("brokerAK01", "not-the-secret"))
        assert forged.code == ResponseCode.SYSTEM_ERROR
        assert "Check signature failed for accessKey=brokerAK01" in (forged.remark or "")
        signed = config_request(SessionCredentials("brokerAK01", "brokerSK01"))
        assert signed.code == ResponseCode.SUCCESS and b"controllerAclFile=" in signed.body

        # the admin commands sign with the account ``acl ...`` takes (--access-key, the secret from the env)
        def cli(*args: str, signed: bool) -> subprocess.CompletedProcess[str]:
            env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_STORE_ACL_")}
            extra = ["--access-key", "adminAK01"] if signed else []
            if signed:
                env["BROKER_STORE_ACL_SECRET_KEY"] = "adminSK01"
            return subprocess.run([sys.executable, "-m", "broker_store", *args, "-n", cluster.namesrv_addr, *extra],
                                  capture_output=True, text=True, timeout=60, env=env)

        status = cli("controller-status", "--json", signed=True)
        assert status.returncode == 0, status.stdout + status.stderr
        [group] = json.loads(status.stdout)["groups"]
        assert group["group"] == "c" and group["master"] != "-"
        elect = cli("elect", "-b", "c", "-c", "cacl", signed=True)
        assert elect.returncode == 0 and "unchanged: the master is alive" in elect.stdout, elect.stdout + elect.stderr
        refused = cli("controller-status", "--json", signed=False)
        assert refused.returncode == 1
        [answer] = json.loads(refused.stdout)["controllers"]
        assert not answer["answering"] and "No accessKey is configured" in answer["error"]
        refused = cli("elect", "-b", "c", "-c", "cacl", signed=False)
        assert refused.returncode == 1 and "No accessKey is configured" in refused.stderr, refused.stderr


def test_controller_signs_its_role_change_notices_and_a_broker_with_acl_acts_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``controller.acl_credentials_file``: the controller signs NOTIFY_BROKER_ROLE_CHANGED, so a broker with ACL
    and no whitelist accepts it. The brokers poll the controller once an hour here, so the replica's promotion after
    the primary dies can only come by the notice (its log names it); an unsigned notice is refused with ACL 1.0's
    text."""
    from broker_store.client.controller_admin import sync_state_data
    from broker_store.net.client import RemotingClient
    from broker_store.protocol.controller import NotifyBrokerRoleChangedRequestHeader

    # the harness's in-sync wait asks the primary unsigned, which it refuses; the controller's SyncStateSet is asked
    monkeypatch.setattr(LocalCluster, "wait_in_sync", lambda self, timeout=30.0: None)
    broker_acl = tmp_path / "broker_acl.yml"  # no globalWhiteRemoteAddresses: everything here is 127.0.0.1
    broker_acl.write_text("accounts:\n  - {accessKey: brokerAK01, secretKey: brokerSK01, admin: true}\n"
                          "  - {accessKey: controllerAK01, secretKey: controllerSK01, admin: true}\n")
    files = {}
    for who in ("broker", "controller"):
        files[who] = tmp_path / f"{who}-credentials.yml"
        files[who].write_text(f"accessKey: {who}AK01\nsecretKey: {who}SK01\n")
        files[who].chmod(0o600)
    acl: dict[str, Any] = {"acl_enable": True, "acl_file": str(broker_acl),
                           "acl_credentials_file": str(files["broker"])}
    # both members poll the controller once an hour: after the join, a role changes only by a notice
    slow_poll = {"controller": {"replica_info_poll_interval_ms": 3_600_000}}
    with LocalCluster(tmp_path, "cnotify", [GroupSpec("c", (slow_poll, slow_poll))],
                      controller={"acl_credentials_file": str(files["controller"])}, **acl) as cluster:
        eventually(lambda: cluster.listed_primary("c") is not None, timeout=20, what="a primary elected")
        first = cluster.primary("c")
        [second] = [b for b in cluster.groups["c"] if b is not first]

        def in_sync() -> bool:
            async def ask() -> int:
                client = RemotingClient()
                try:
                    info = (await sync_state_data(client, cluster.namesrv_addr, ["c"]))["c"]
                    return len(info.in_sync)
                finally:
                    await client.close()
            return asyncio.run(ask()) == 2

        eventually(in_sync, timeout=30, what="the replica in the SyncStateSet")
        first.kill()
        eventually(lambda: cluster.listed_primary("c") is second, timeout=30,
                   what=lambda: f"the replica promoted by the notice\n{second.log_tail(3000)}")
        assert f"notified by the controller: master {second.listen}" in second.log_tail(1_000_000)

        header = NotifyBrokerRoleChangedRequestHeader(second.listen, 99, 99, 2)
        unsigned = request_from("127.0.0.1", second.listen, RemotingCommand(
            code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED, ext_fields=header.to_ext()))
        assert unsigned.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in (unsigned.remark or "")
