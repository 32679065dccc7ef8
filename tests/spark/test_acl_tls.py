"""The replicator between two clusters that both enforce ACL 1.0 and serve TLS: the replication and checkpoint
queries of a link (``jobs.replicate.start_link`` and ``jobs.checkpoint.start_checkpoints``, as ``jobs/run_all.py``
starts them) in the session's SparkSession. The source name server and broker accept TLS only (client certificates
required), the target serves TLS and plain (permissive); each cluster's account comes from a ``credentials_file``
named in the YAML (docs/security.md, "ACL"). Every message reaches the target byte-exact and a source group's
checkpoint is translated onto the target, all through signed requests over TLS. (Config sync between ACL clusters is
tests/integration/test_config_sync_acl.py; two more queries here would double the test's time.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.errors import AclPermissionError, RocketMQError
from connectors.checkpoint.tables import CheckpointTables
from tests.spark.helpers import unique
from tests.spark.spark_processes import read_topic, wait_for, write_replicator_config
from tests.support.certs import CertSet, make_test_certs
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration

TEST_ADMIN = SessionCredentials("testAdmin01", "testAdminSecret")
SOURCE_REPLICATOR = SessionCredentials("replSrc01", "replicatorSourceSecret")
TARGET_REPLICATOR = SessionCredentials("replDst01", "replicatorTargetSecret")
MESSAGES = 40


def _acl_file(path: Path, replicator: SessionCredentials) -> Path:
    # the replicator's account is an admin one: config sync creates topics and groups on the target and reads
    # the source's configuration (docs/security.md, "ACL": copied by the config connector)
    path.write_text(yaml.safe_dump({"accounts": [
        {"accessKey": TEST_ADMIN.access_key, "secretKey": TEST_ADMIN.secret_key, "admin": True},
        {"accessKey": replicator.access_key, "secretKey": replicator.secret_key, "admin": True}]}))
    return path


def _cluster(root: Path, name: str, certs: CertSet, mode: str, acl_file: Path) -> LocalCluster:
    """A name server and one broker serving TLS in ``mode`` (the source's verifying client certificates), the
    broker enforcing ``acl_file`` and registering over TLS."""
    server = certs.server_tls(mode, "require" if mode == "enforcing" else "none")
    own = {"enable": True, "client": certs.client_tls(with_cert=True)}
    return LocalCluster(root, name, brokers=1, namesrv={"broker_expiry_seconds": 5.0, "tls": {"server": server, **own}},
                        tls={"server": server, **own}, acl_enable=True, acl_file=str(acl_file),
                        client_tls=TlsClientSettings.model_validate(certs.client_tls(with_cert=True)))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster, CertSet]]:
    root = tmp_path_factory.mktemp("acl-tls-clusters")
    certs = make_test_certs(root / "certs")
    with _cluster(root, "ssrc", certs, "enforcing", _acl_file(root / "src-acl.yml", SOURCE_REPLICATOR)) as src, \
            _cluster(root, "sdst", certs, "permissive", _acl_file(root / "dst-acl.yml", TARGET_REPLICATOR)) as dst:
        yield src, dst, certs


def _queues(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.wait_for_route(topic, timeout=15)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def test_replicator_under_acl_and_tls_on_both_sides(spark: SparkSession, secured: tuple[LocalCluster, LocalCluster,
                                                    CertSet], tmp_path: Path) -> None:
    from connectors.checkpoint.data_source import CheckpointDataSource
    from connectors.core.config import load_replicator_config
    from jobs.checkpoint import start_checkpoints
    from jobs.replicate import start_link

    src, dst, certs = secured
    tls = TlsClientSettings.model_validate(certs.client_tls(with_cert=True))
    topic, group = unique("Secure"), unique("GID_secure")
    with Admin(src.namesrv_addr, credentials=TEST_ADMIN, tls=tls) as admin, \
            Producer(src.namesrv_addr, "PID_secure", credentials=TEST_ADMIN, tls=tls) as producer:
        admin.create_topic(topic, 2)
        queues = _queues(admin, topic)
        for i in range(MESSAGES):  # binary bodies with every byte value, spread over both queues
            producer.send(new_message(topic, bytes([i]) + bytes(range(256)) * (i % 3) + f"#{i}".encode()),
                          queues[i % len(queues)])
        # the ACL is on: an unsigned client is refused at once (a TLS one: the port takes TLS only)
        with Producer(src.namesrv_addr, "PID_anon", tls=tls) as anonymous, pytest.raises(AclPermissionError):
            anonymous.send(new_message(topic, b"unsigned"), queues[0])
    # a source group that read half of each queue: its checkpoint is translated to the target
    with PullConsumer(src.namesrv_addr, group, heartbeat_interval=None, credentials=TEST_ADMIN, tls=tls) as consumer:
        for mq in queues:
            result = consumer.pull(mq, 0, MESSAGES // 4)
            assert result.status is PullStatus.FOUND
            consumer.update_consumer_offset(mq, result.next_begin_offset)

    # each account in a tools.yml-style file (mode 0600) named by the cluster's credentials_file. (Not
    # access_key_env here: the reader plans in a Python process the session's JVM started, with the environment
    # the JVM had when this test session began.)
    files = []
    for side, account in (("src", SOURCE_REPLICATOR), ("dst", TARGET_REPLICATOR)):
        files.append(tmp_path / f"{side}-credentials.yml")
        files[-1].write_text(f"accessKey: {account.access_key}\nsecretKey: {account.secret_key}\n")
        files[-1].chmod(0o600)
    config_path = write_replicator_config(
        tmp_path / "replicator.yaml", source=("ssrc", src.namesrv_addr), target=("sdst", dst.namesrv_addr),
        links={"l1": {"topic": topic, "trigger_interval": 0.5, "checkpoints": {"interval": 1.0}}})
    text: dict[str, Any] = yaml.safe_load(config_path.read_text())
    client_tls = certs.client_tls(with_cert=True)
    for cluster, file in zip(text["clusters"], files, strict=True):
        cluster |= {"credentials_file": str(file), "tls": client_tls}
    config_path.write_text(yaml.safe_dump(text))
    config = load_replicator_config(config_path)

    spark.dataSource.register(CheckpointDataSource)
    started = time.monotonic()
    queries = [start_link(spark, str(config_path), config, "l1", create_topics_like_source=True),
               start_checkpoints(spark, str(config_path), config, "l1")]
    delta = tmp_path / "delta" / "l1"
    tables = CheckpointTables(delta)

    def count() -> int:
        try:
            with Admin(dst.namesrv_addr, credentials=TEST_ADMIN, tls=tls) as target:
                return sum(target.max_offset(mq) for mq in _queues(target, topic))
        except RocketMQError:  # no route yet
            return 0

    def failed() -> str | None:
        return next((f"{q.name}: {q.exception()}" for q in queries if q.exception() is not None), None)

    try:
        for predicate, what in ((lambda: count() >= MESSAGES, f"the {MESSAGES} messages on the target"),
                                (lambda: tables.newest_translated_ms(group) is not None, "a translated checkpoint")):
            wait_for(lambda p=predicate: failed() is not None or p(), 90, what)  # type: ignore[misc]
            print(f"{what}: {time.monotonic() - started:.1f} s after the queries started")
            assert failed() is None, failed()
    finally:
        for query in queries:
            query.stop()
    assert failed() is None, failed()

    source = read_topic(src.namesrv_addr, queues, credentials=TEST_ADMIN, tls=tls)
    with Admin(dst.namesrv_addr, credentials=TEST_ADMIN, tls=tls) as target:
        target_queues = _queues(target, topic)
        # the checkpoint went through the target's ACL: the group's offset is the source's, queue for queue
        assert [target.consumer_offset(group, mq) for mq in target_queues] == [MESSAGES // 4] * 2
    copied = read_topic(dst.namesrv_addr, target_queues, credentials=TEST_ADMIN, tls=tls)
    assert [len(v) for v in source.values()] == [MESSAGES // 2] * 2
    for smq, tmq in zip(sorted(source), sorted(copied), strict=True):
        assert smq.queue_id == tmq.queue_id
        assert [(m.body, m.msg_id) for m in copied[tmq]] == [(m.body, m.msg_id) for m in source[smq]]
