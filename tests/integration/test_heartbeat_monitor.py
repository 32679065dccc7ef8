"""The heartbeat monitor against real brokers, without Spark: heartbeats written straight to the source
and target clusters' heartbeat topics, read back by ``HeartbeatMonitorLoop`` on a fake clock. A link whose
source keeps producing while nothing arrives is BROKEN; a link with nothing produced is IDLE; a
heartbeat counts only on the clusters its link names. (The Spark path is tests/spark/test_heartbeat.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from broker_store.client import Admin, Producer, new_message
from connectors.core.config import parse_replicator_config
from connectors.core.monitoring import HEARTBEAT_TOPIC
from connectors.heartbeat.monitor import LinkStatus
from connectors.heartbeat.monitor_loop import HeartbeatMonitorLoop
from connectors.heartbeat.records import Heartbeat
from tests.support.clocks import MillisClock
from tests.support.processes import LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    with LocalCluster(tmp_path, "msrc") as src, LocalCluster(tmp_path, "mdst") as dst:
        for cluster in (src, dst):
            with Admin(cluster.namesrv_addr) as admin:
                admin.create_topic(HEARTBEAT_TOPIC, 1)
                admin.wait_for_route(HEARTBEAT_TOPIC)
        yield src, dst


def test_broken_is_distinct_from_idle(pair: tuple[LocalCluster, LocalCluster], tmp_path: Path) -> None:
    src, dst = pair
    link = {"source": "msrc", "target": "mdst", "topics": {"all_topics": True},
            "delta_location": str(tmp_path / "delta")}
    config = parse_replicator_config({
        "clusters": [{"name": "msrc", "namesrv": src.namesrv_addr}, {"name": "mdst", "namesrv": dst.namesrv_addr}],
        "links": [{"name": "l1", "checkpoint_location": str(tmp_path / "c1"), **link},
                  {"name": "l2", "checkpoint_location": str(tmp_path / "c2"), "consumer_group": "G2", **link}],
        "heartbeat": {"interval": 1, "startup_limit": 1}})  # no start-up grace beyond 3 intervals: the age rules
    clock = MillisClock(int(time.time() * 1000))
    loop = HeartbeatMonitorLoop(config, ["l1", "l2"], clock=clock)
    with Producer(src.namesrv_addr) as on_src, Producer(dst.namesrv_addr) as on_dst:
        def beat(producer: Producer, seq: int, *, target: str = "mdst") -> None:
            hb = Heartbeat("l1", seq, clock.now_ms, "msrc", target)
            producer.send(new_message(HEARTBEAT_TOPIC, hb.encode(), tags="l1", keys=hb.keys))

        try:
            loop.poll_once()  # the tails start at the topics' ends
            assert loop.monitor.state("l1").status is LinkStatus.STARTING
            beat(on_src, 0)
            beat(on_dst, 0)  # "replicated"
            beat(on_dst, 99, target="elsewhere")  # another link's heartbeat passing through: not ours
            loop.poll_once()
            s1 = loop.monitor.state("l1")
            assert s1.status is LinkStatus.OK and s1.seq == 0 and s1.produced_born_ms == s1.born_ms, s1
            for seq in range(1, 5):  # the source keeps producing, the target gets nothing
                clock.now_ms += 1000
                beat(on_src, seq)
                loop.poll_once()
            assert loop.monitor.state("l1").status is LinkStatus.BROKEN
            assert loop.monitor.state("l2").status is LinkStatus.IDLE  # nothing produced for l2 at all
        finally:
            loop.stop()
    rows = DeltaTable(str(tmp_path / "delta" / "l1" / "heartbeats")).to_pyarrow_table().to_pylist()
    assert [(r["link"], r["seq"], r["target_cluster"]) for r in rows] == [("l1", 0, "mdst")]
