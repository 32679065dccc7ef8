"""TLS in RocketMQ's three modes (tls.server.mode), with real name server and broker processes on 127.0.0.1 and
certificates the tests make (``tests.support.certs``): enforcing refuses plain clients with a clear error and serves
TLS ones; permissive serves both on one port (Apache RocketMQ's C++ client in plain mode included); disabled serves
plain only; need.client.auth require refuses a client without a certificate its CA signed; the project client and
the CLI work over TLS; the replicator's reader-side clients (Admin, PullConsumer through a cluster's ``tls`` block)
read a TLS source."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.errors import RocketMQError, TlsRequiredError
from connectors.core.executor import executor_admin
from connectors.replication.planning import QueueRange
from connectors.replication.pulling import PullSettings, pull_results
from tests.support.certs import CertSet, make_test_certs
from tests.support.processes import LocalCluster, local_cluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> CertSet:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


def tls_cluster(tmp_path: Path, certs: CertSet, mode: str, need_client_auth: str = "none",
                **extra: Any) -> LocalCluster:
    """A name server and one broker both serving ``mode``; the broker registers over TLS with a client certificate
    (it passes any need.client.auth), the harness's admin calls too."""
    server = certs.server_tls(mode, need_client_auth)
    own = {"enable": mode != "disabled", "client": certs.client_tls(with_cert=True)}
    client = TlsClientSettings.model_validate(certs.client_tls(with_cert=True)) if mode != "disabled" else None
    return LocalCluster(tmp_path, f"tls-{mode}", brokers=1, namesrv={"tls": {"server": server, **own}},
                        tls={"server": server, **own}, client_tls=client, **extra)


def queues(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.topic_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def round_trip(namesrv: str, topic: str, tls: TlsClientSettings | None, count: int = 3) -> list[bytes]:
    """Create ``topic``, send ``count`` messages and pull them back, all with ``tls``."""
    with Admin(namesrv, tls=tls) as admin:
        admin.create_topic(topic, 2)
        admin.wait_for_route(topic)
        with Producer(namesrv, "tls-producer", tls=tls) as producer:
            for i in range(count):
                producer.send(new_message(topic, f"{topic}-{i}".encode()))
        bodies: list[bytes] = []
        with PullConsumer(namesrv, "tls-consumer", heartbeat_interval=None, tls=tls) as consumer:
            for mq in queues(admin, topic):
                result = consumer.pull(mq, 0, 32)
                if result.status is PullStatus.FOUND:
                    bodies += [m.body for m in result.messages]
    return sorted(bodies)


def expected(topic: str, count: int = 3) -> list[bytes]:
    return sorted(f"{topic}-{i}".encode() for i in range(count))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "broker_store", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env)


def test_enforcing_serves_tls_clients_and_the_cli_and_refuses_plain_ones(tmp_path: Path, certs: CertSet) -> None:
    tls = TlsClientSettings.model_validate(certs.client_tls())
    with tls_cluster(tmp_path, certs, "enforcing") as cluster:
        assert round_trip(cluster.namesrv_addr, "Secured", tls) == expected("Secured")
        with Admin(cluster.namesrv_addr) as plain, pytest.raises(RocketMQError, match="TLS required"):
            plain.cluster_info()
        broker = cluster.brokers[0].listen
        with Producer(cluster.namesrv_addr, "plain-producer") as plain_producer, \
                pytest.raises(TlsRequiredError, match="TLS required"):  # not retried: the same answer each time
            plain_producer.send(new_message("Secured", b"x"))
        with Admin(broker) as plain_to_broker, pytest.raises(RocketMQError, match="TLS required"):
            plain_to_broker.ha_status(broker)  # the broker's port enforces too, not only the name server's

        flags = ["-n", cluster.namesrv_addr, "--tls", "--tls-trust-cert", str(certs.ca)]
        sent = cli("produce", *flags, "-t", "Secured", "--count", "2", "--body", "from-cli", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        got = cli("consume", *flags, "-t", "Secured", "--from", "earliest", "--count", "5", "--show-body",
                  cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        assert got.stdout.count("from-cli") == 2, got.stdout
        refused = cli("topics", "-n", cluster.namesrv_addr, cwd=tmp_path)
        assert refused.returncode == 1 and "TLS required" in refused.stderr, refused.stderr
        untrusted = cli("topics", "-n", cluster.namesrv_addr, "--tls", "--tls-trust-cert", str(certs.other_ca),
                        cwd=tmp_path)
        assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr, untrusted.stderr
        missing = cli("topics", "-n", cluster.namesrv_addr, "--tls-trust-cert", str(tmp_path / "nope.pem"),
                      cwd=tmp_path)
        assert missing.returncode == 2 and "--tls-trust-cert" in missing.stderr and "nope.pem" in missing.stderr


def test_permissive_serves_tls_and_plain_clients_on_one_port(tmp_path: Path, certs: CertSet) -> None:
    tls = TlsClientSettings.model_validate(certs.client_tls())
    with tls_cluster(tmp_path, certs, "permissive") as cluster:
        assert round_trip(cluster.namesrv_addr, "OverTls", tls) == expected("OverTls")
        assert round_trip(cluster.namesrv_addr, "InPlain", None) == expected("InPlain")
        # each client reads what the other wrote: one store behind both kinds of connection
        with PullConsumer(cluster.namesrv_addr, "mixed", heartbeat_interval=None) as plain, \
                Admin(cluster.namesrv_addr, tls=tls) as admin:
            mqs = queues(admin, "OverTls")
            seen = [m.body for mq in mqs for m in plain.pull(mq, 0, 32).messages]
        assert sorted(seen) == expected("OverTls")


def test_permissive_serves_apache_rocketmqs_cpp_client_in_plain_mode(tmp_path: Path, certs: CertSet) -> None:
    pytest.importorskip("rocketmq.client", reason="the rocketmq C++ client wheel is x86_64 Linux only")
    from tests.integration.test_wire_compat import CPP_PRODUCE, run_cpp

    with tls_cluster(tmp_path, certs, "permissive") as cluster:
        sent = run_cpp(CPP_PRODUCE, cluster.namesrv_addr, "CppPlain", "5", cwd=tmp_path)
        assert [s["status"] for s in sent] == [0] * 5  # SEND_OK through a permissive name server and broker
        tls = TlsClientSettings.model_validate(certs.client_tls())
        with Admin(cluster.namesrv_addr, tls=tls) as admin, \
                PullConsumer(cluster.namesrv_addr, "cpp-reader", heartbeat_interval=None, tls=tls) as consumer:
            ids = {m.msg_id for mq in queues(admin, "CppPlain") for m in consumer.pull(mq, 0, 32).messages}
        assert {s["msg_id"] for s in sent} <= ids


def test_disabled_serves_plain_clients_only(tmp_path: Path, certs: CertSet) -> None:
    with local_cluster(tmp_path, "tls-off", brokers=1) as cluster:
        assert round_trip(cluster.namesrv_addr, "Plain", None) == expected("Plain")
        tls = TlsClientSettings.model_validate(certs.client_tls())
        with Admin(cluster.namesrv_addr, tls=tls) as admin, \
                pytest.raises(RocketMQError, match=r"TLS handshake with .* failed.*tls.server.mode disabled"):
            admin.cluster_info()
        log = cluster.namesrv.log_tail(100_000)
        assert "a TLS handshake, and tls.server.mode is disabled" in log


def test_need_client_auth_require_refuses_clients_without_a_trusted_certificate(tmp_path: Path,
                                                                               certs: CertSet) -> None:
    with tls_cluster(tmp_path, certs, "enforcing", need_client_auth="require") as cluster:
        with Admin(cluster.namesrv_addr, tls=TlsClientSettings.model_validate(certs.client_tls())) as no_cert, \
                pytest.raises(RocketMQError, match="may require a client certificate"):
            no_cert.cluster_info()
        stranger = TlsClientSettings.model_validate({"trustCertPath": certs.ca, "certPath": certs.stranger_cert,
                                                     "keyPath": certs.stranger_key})
        with Admin(cluster.namesrv_addr, tls=stranger) as wrong_ca, pytest.raises(RocketMQError):
            wrong_ca.cluster_info()
        mutual = TlsClientSettings.model_validate(certs.client_tls(with_cert=True))
        assert round_trip(cluster.namesrv_addr, "Mutual", mutual) == expected("Mutual")


def test_replicator_reader_clients_read_a_tls_source(tmp_path: Path, certs: CertSet) -> None:
    """The connectors' cluster settings (a ``tls`` block in replicator.yaml) reach the reader's Admin and its
    executor PullConsumer: a link's pulls work against an enforcing source."""
    from connectors.core.config import parse_replicator_config

    mutual = certs.client_tls(with_cert=True)
    with tls_cluster(tmp_path, certs, "enforcing", need_client_auth="require") as cluster:
        config = parse_replicator_config({
            "clusters": [{"name": "src", "namesrv": cluster.namesrv_addr, "tls": mutual},
                         {"name": "dst", "namesrv": "127.0.0.1:1"}],
            "links": [{"name": "l1", "source": "src", "target": "dst", "topics": {"explicit": [{"source": "Repl"}]},
                       "checkpoint_location": str(tmp_path / "cp"), "delta_location": str(tmp_path / "delta")}]})
        source = config.cluster("src")
        assert source.tls is not None
        round_trip(cluster.namesrv_addr, "Repl", source.tls, count=4)
        namesrv = ";".join(source.namesrv)
        admin = executor_admin(namesrv, source.credentials(), source.tls)
        assert admin.cluster_info().broker_addr_table  # the reader's outage probe goes the same way
        settings = PullSettings(namesrv=namesrv, group="CID_RMQ_SYS_REPLICATOR_l1", cluster="src", tags="*",
                                pull_batch_size=32, fail_on_data_loss=True, pull_timeout_ms=3000,
                                row_format="raw", tls=source.tls)
        bodies = []
        for mq in queues(admin, "Repl"):
            part = QueueRange(mq.topic, mq.broker_name, mq.queue_id, 0, admin.max_offset(mq))
            for _, result in pull_results(settings, part, decode=True):  # the executor's pull path
                bodies += [m.body for m in result.messages]
        assert sorted(bodies) == expected("Repl", 4)
