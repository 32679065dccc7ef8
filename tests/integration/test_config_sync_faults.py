"""Config sync through broker faults, with real processes and the connector's own round (``evidence.judge`` on
the reader's memory, then ``applier.sync_round``, as ``data_source`` runs them per trigger; Spark only adds the
scheduling, tested in tests/spark/test_config_sync.py). Cases: a source broker killed (with and without a
restart), a source broker frozen past the name server's expiry, a target broker killed: no target topic is
deleted or shrunk and the change log says why; a topic deleted on a healthy source is deleted on the target
after two snapshots, and re-created with no fewer queues than it had."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_store.client import Admin
from connectors.config_sync.applier import CONFIG_CHANGES, AppliedRound, ConfigApplier, ConfigTables, sync_round
from connectors.config_sync.evidence import Memory, judge
from connectors.config_sync.state import ConfigPoller, registered_groups
from connectors.core.sync_settings import ConfigSyncSettings
from connectors.core.topic_mapping import TopicMapper
from connectors.core.topic_settings import TopicMappingConfig
from tests.support.processes import LocalCluster, local_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

EXPIRY_S = 2.0
"""The name servers' broker expiry: a killed or frozen broker leaves the listing after this."""


class Link:
    """One link's config sync driven round by round (what the reader and writer do per trigger)."""

    def __init__(self, source: LocalCluster, target: LocalCluster, tables: Path) -> None:
        self.source_admin = Admin(source.namesrv_addr, request_timeout=1.0)
        self.target_admin = Admin(target.namesrv_addr, request_timeout=1.0)
        self.poller = ConfigPoller(self.source_admin, source.name, interval=0.2)
        mapper = TopicMapper(TopicMappingConfig.model_validate({"include": [{"pattern": "Cfg.*"}]}))
        self.applier = ConfigApplier(target_admin=self.target_admin, mapper=mapper,
                                     settings=ConfigSyncSettings(propagate_deletion=True))
        self.tables = ConfigTables(tables)
        self.memory = Memory()
        self.batch = 0

    def round(self) -> AppliedRound:
        judged = judge(self.memory, self.poller.next_item(), registered_groups(self.target_admin))
        self.memory = judged.memory
        self.batch += 1
        return sync_round(self.tables, self.applier, judged.state, judged.evidence, link="l", query_id="q",
                          batch_id=self.batch)

    def rounds_for(self, seconds: float) -> list[AppliedRound]:
        out, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            out.append(self.round())
            time.sleep(0.2)
        return out

    def rows(self) -> list[dict[str, Any]]:
        return [r for r in self.tables.read(CONFIG_CHANGES).to_pylist() if r["batch_id"] > self.mark]

    def start_watch(self) -> None:
        """Rows committed from now on are what ``rows`` returns."""
        self.mark = self.batch

    def close(self) -> None:
        self.source_admin.close()
        self.target_admin.close()


def queues(cluster: LocalCluster, admin: Admin) -> dict[str, dict[str, tuple[int, int]]]:
    """Topic -> broker group -> (read, write) queue counts, for the Cfg topics on every registered primary."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for broker, addr in admin.primary_addrs(cluster.name).items():
        for name, config in admin.all_topic_config(addr).items():
            if name.startswith("Cfg"):
                out.setdefault(name, {})[broker] = (config.read_queue_nums, config.write_queue_nums)
    return out


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    root = tmp_path_factory.mktemp("cfgfaults")
    namesrv = {"broker_expiry_seconds": EXPIRY_S}
    # A broker the name server expired is listed again at its first heartbeat after it resumes (the answer says
    # the name server does not know it, so it registers at once), not at its next full registration (30 s).
    with local_cluster(root, "src", brokers=2, namesrv=namesrv) as src, \
            local_cluster(root, "dst", brokers=2, namesrv=namesrv) as dst:
        yield src, dst


@pytest.fixture
def link(clusters: tuple[LocalCluster, LocalCluster], tmp_path: Path) -> Iterator[Link]:
    src, dst = clusters
    for cluster in clusters:  # every member running and registered, whatever the previous test did
        for broker in cluster.brokers:
            broker.resume()
            if not broker.running():
                broker.start()
        cluster.wait_registered()
    with Admin(src.namesrv_addr) as admin:
        for name in queues(src, admin):
            admin.delete_topic(name, src.name)
        admin.create_topic("CfgOnA", 4, broker_names=["src-a"])
        admin.create_topic("CfgOnBoth", 4, cluster=src.name)
    with Admin(dst.namesrv_addr) as admin:
        for name in queues(dst, admin):
            admin.delete_topic(name, dst.name)
    link = Link(src, dst, tmp_path / "delta")
    try:
        link.rounds_for(1.0)
        with Admin(dst.namesrv_addr) as admin:  # grown on the target alone: a later shrink is refused
            admin.create_topic("CfgOnBoth", 8, cluster=dst.name)
        link.round()
        assert queues(dst, link.target_admin) == EXPECTED
        link.start_watch()
        yield link
    finally:
        link.close()


def cleared(link: Link) -> bool:
    return any(r["status"] == "cleared" and r["kind"] == "source_topic_unknown" for r in link.rows())


EXPECTED = {"CfgOnA": {"dst-a": (2, 2), "dst-b": (2, 2)}, "CfgOnBoth": {"dst-a": (8, 8), "dst-b": (8, 8)}}
"""Source queues spread over the target's groups (CfgOnA's 4 on src-a alone: 2 on each), CfgOnBoth grown to 8 on
the target alone (the source's 4 + 4 would be 4 per group: a refused shrink)."""


def assert_nothing_deleted_or_shrunk(link: Link, dst: LocalCluster) -> None:
    assert queues(dst, link.target_admin) == EXPECTED
    applied = [(r["kind"], r["subject"]) for r in link.rows() if r["status"] == "applied"]
    assert applied == [], applied


@pytest.mark.parametrize("restart", [False, True], ids=["stays-down", "restarted"])
def test_a_source_broker_killed_deletes_nothing(link: Link, clusters: tuple[LocalCluster, LocalCluster],
                                                restart: bool, caplog: pytest.LogCaptureFixture) -> None:
    src, dst = clusters
    with caplog.at_level(logging.WARNING, logger="connectors.config_sync"):
        src.primary("src-a").kill()
        link.rounds_for(EXPIRY_S + 3)  # past the name server's expiry: src-a is no longer listed
    assert_nothing_deleted_or_shrunk(link, dst)
    deferred = [r for r in link.rows() if r["status"] == "deferred"]
    assert [(r["kind"], r["subject"]) for r in deferred] == [("source_topic_unknown", "CfgOnA")]  # recorded once
    assert "broker group src-a" in deferred[0]["detail"]
    warnings = [r.getMessage() for r in caplog.records if "source_topic_unknown CfgOnA" in r.getMessage()]
    assert len(warnings) == 1, warnings  # reported when it starts, not every round
    if restart:
        src.primary("src-a").start()
        src.wait_registered()
        eventually(lambda: bool(link.round()) and cleared(link), 20, "the deferral cleared once src-a answers")
        link.rounds_for(1.0)
        assert_nothing_deleted_or_shrunk(link, dst)


def test_a_source_broker_frozen_past_expiry_deletes_nothing(link: Link, clusters: tuple[LocalCluster, LocalCluster],
                                                            ) -> None:
    src, dst = clusters
    src.primary("src-a").pause()  # SIGSTOP: first it times out, then the name server expires it
    try:
        link.rounds_for(EXPIRY_S + 3)
    finally:
        src.primary("src-a").resume()
    assert_nothing_deleted_or_shrunk(link, dst)
    assert {(r["kind"], r["subject"]) for r in link.rows() if r["status"] == "deferred"} == {
        ("source_topic_unknown", "CfgOnA")}
    src.wait_registered()
    eventually(lambda: bool(link.round()) and cleared(link), 20, "the deferral cleared once src-a answers")
    assert_nothing_deleted_or_shrunk(link, dst)


def test_a_target_broker_killed_creates_nothing_elsewhere(link: Link, clusters: tuple[LocalCluster, LocalCluster],
                                                          ) -> None:
    src, dst = clusters
    dst.primary("dst-a").kill()
    link.rounds_for(EXPIRY_S + 2)
    with Admin(src.namesrv_addr) as admin:
        admin.create_topic("CfgNew", 2, cluster=src.name)
    link.rounds_for(1.0)
    survivors = queues(dst, link.target_admin)
    assert survivors == {"CfgOnA": {"dst-b": (2, 2)}, "CfgOnBoth": {"dst-b": (8, 8)}}  # CfgNew not on dst-b alone
    rows = link.rows()
    assert [r for r in rows if r["status"] == "applied"] == []
    assert ("create_topic", "CfgNew", "deferred") in {(r["kind"], r["subject"], r["status"]) for r in rows}
    dst.primary("dst-a").start()
    dst.wait_registered()
    eventually(lambda: bool(link.round()) and "CfgNew" in queues(dst, link.target_admin), 20,
               "CfgNew created once the whole target answers")
    assert queues(dst, link.target_admin) == {**EXPECTED, "CfgNew": {"dst-a": (2, 2), "dst-b": (2, 2)}}


def test_a_topic_deleted_on_a_healthy_source_is_deleted_after_two_snapshots_and_recreated_no_smaller(
        link: Link, clusters: tuple[LocalCluster, LocalCluster], caplog: pytest.LogCaptureFixture) -> None:
    src, dst = clusters
    with Admin(src.namesrv_addr) as admin:
        admin.delete_topic("CfgOnBoth", src.name)
    first = link.round()
    assert [c for c in first.changes if c.kind.value == "delete_topic"] == []  # one snapshot proves nothing
    with caplog.at_level(logging.WARNING, logger="connectors.config_sync"):
        second = link.round()
    assert [(c.kind.value, c.subject, c.status.value) for c in second.changes] == [
        ("delete_topic", "CfgOnBoth", "applied")]
    assert any("deletes target topic CfgOnBoth (read/write queues 8/8)" in r.getMessage()
               and "src-a, src-b, all answering" in r.getMessage() for r in caplog.records)
    assert "CfgOnBoth" not in queues(dst, link.target_admin)
    with Admin(src.namesrv_addr) as admin:  # back on the source with fewer queues than the target had
        admin.create_topic("CfgOnBoth", 2, cluster=src.name)
    link.round()
    assert queues(dst, link.target_admin)["CfgOnBoth"] == {"dst-a": (8, 8), "dst-b": (8, 8)}
