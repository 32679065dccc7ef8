"""The config connector between two real clusters: a new source topic appears on the target with the same
queue count within two trigger intervals, queue growth follows, a subscription group is copied, a shrink is
refused and recorded in the Delta table once (never applied, pending while it stands), and with
``propagate_deletion`` a group deleted on the source is deleted on the target (a target-only group stays)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from connectors.config_sync.applier import CONFIG_CHANGES, ConfigTables
from connectors.config_sync.data_source import ConfigDataSource
from connectors.core.config import load_replicator_config
from jobs.config_sync import start_config_sync
from tests.spark.conftest import Cluster
from tests.spark.helpers import unique

pytestmark = pytest.mark.integration

INTERVAL = 2.0


def target_queues(cluster: Cluster, topic: str) -> dict[str, tuple[int, int]]:
    """Broker group -> (read, write) queue counts of ``topic`` on every primary holding it."""
    out = {}
    for broker, addr in cluster.admin.primary_addrs().items():
        config = cluster.admin.all_topic_config(addr).get(topic)
        if config is not None:
            out[broker] = (config.read_queue_nums, config.write_queue_nums)
    return out


def wait_until(predicate: Any, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_topics_and_groups_follow_the_source(spark: SparkSession, clusters: tuple[Cluster, Cluster],
                                             tmp_path: Path) -> None:
    src, dst = clusters
    prefix = unique("Cfg")
    group = unique("cfggroup")
    link = "config"
    config = tmp_path / "replicator.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": [{"name": "src", "namesrv": [src.namesrv]}, {"name": "dst", "namesrv": [dst.namesrv]}],
        "links": [{"name": link, "source": "src", "target": "dst",
                   "topics": {"include": [{"pattern": f"{prefix}_.*", "target": "DR_{topic}"}]},
                   "checkpoint_location": str(tmp_path / "checkpoints" / link),
                   "delta_location": str(tmp_path / "delta"),
                   "config_sync": {"interval": INTERVAL, "groups": {"include": [f"{group}.*"]},
                                   "propagate_deletion": True}}]}))
    spark.dataSource.register(ConfigDataSource)
    query = start_config_sync(spark, str(config), load_replicator_config(config), link)  # the job's own start
    tables = ConfigTables(tmp_path / "delta" / link)
    try:
        wait_until(lambda: query.lastProgress is not None, 60, "the first config-sync batch")
        topic = f"{prefix}_orders"
        src.create_topic(topic, 4)
        appeared = wait_until(lambda: target_queues(dst, f"DR_{topic}") == {"dst-a": (4, 4), "dst-b": (4, 4)},
                              30, "the new topic on the target")
        print(f"\nnew source topic on the target after {appeared:.2f} s (trigger interval {INTERVAL} s)")
        assert appeared <= 2 * INTERVAL

        src.admin.create_topic(topic, 8, cluster="src")
        wait_until(lambda: target_queues(dst, f"DR_{topic}") == {"dst-a": (8, 8), "dst-b": (8, 8)}, 30,
                   "queue growth on the target")

        src.admin.create_subscription_group({"groupName": group, "retryMaxTimes": 5}, cluster="src")

        def copied() -> bool:
            groups = [dst.admin.all_subscription_groups(a).get(group) for a in dst.admin.primary_addrs().values()]
            return all(g is not None and g["retryMaxTimes"] == 5 for g in groups)

        wait_until(copied, 30, "the subscription group on the target")

        src.admin.create_topic(topic, 2, cluster="src")  # the source shrinks: refused on the target

        def refused() -> bool:
            rows = tables.read(CONFIG_CHANGES).to_pylist()
            return any(r["kind"] == "shrink" and r["status"] == "refused" and r["subject"] == f"DR_{topic}"
                       for r in rows)

        wait_until(refused, 30, "the refused shrink in the Delta table")
        batch = query.lastProgress["batchId"]
        wait_until(lambda: query.lastProgress["batchId"] >= batch + 2, 30, "two more config-sync rounds")
        assert target_queues(dst, f"DR_{topic}") == {"dst-a": (8, 8), "dst-b": (8, 8)}
        shrinks = [r for r in tables.read(CONFIG_CHANGES).to_pylist() if r["kind"] == "shrink"]
        assert len(shrinks) == 1, shrinks  # recorded once, not once per round
        assert tables.pending_config_changes() == 1  # and still reported while it stands

        def groups_on_target() -> list[set[str]]:
            return [set(dst.admin.all_subscription_groups(a)) for a in dst.admin.primary_addrs().values()]

        target_only = f"{group}_target_only"  # selected by the link's pattern, but never on the source
        dst.admin.create_subscription_group({"groupName": target_only})
        src.admin.delete_subscription_group(group, cluster="src")
        wait_until(lambda: all(group not in g for g in groups_on_target()), 30,
                   "the source's group deletion on the target")
        assert all(target_only in g for g in groups_on_target())
        # the round's rows are committed after its changes were applied on the target
        wait_until(lambda: any(r["kind"] == "delete_group" and r["status"] == "applied" and r["subject"] == group
                               for r in tables.read(CONFIG_CHANGES).to_pylist()), 30,
                   "the applied group deletion in the Delta table")
    finally:
        query.stop()
    assert query.exception() is None
