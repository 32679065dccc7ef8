"""The clusters of ``benchmarks/replicator.py`` (also ``benchmarks/wan.py``): a name server and a broker per
cluster as real processes, their topics, the generated replicator.yaml, and the read-back of what a target
holds; the Spark side's clean-up."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker_store.client import Admin, MessageQueue
from broker_store.config import BrokerConfig, NamesrvConfig
from broker_store.deploy.launcher import ManagedProcess
from connectors.core.job_stop import mark_stopping, remove_stop_marker

PROJECT = Path(__file__).resolve().parent.parent
TOPIC_MAIN, TOPIC_WARM, TOPIC_LAT, TOPIC_FIRST = "BenchRepl", "BenchWarm", "BenchLat", "BenchFirst"
SOURCE, TARGET = "bsrc", "bdst"
TOPIC_IDLE, TOPIC_BACKLOG = "BenchIdle", "BenchBacklog"
SCALING_QUEUES = (8, 512)
"""(e): the queue counts compared side by side."""


def choose_data_root() -> Path:
    tmp = Path(tempfile.gettempdir())
    fstype = "?"
    with open("/proc/mounts") as f:
        best = ""
        for line in f:
            _, mnt, fs, *_ = line.split()
            if (str(tmp.resolve()) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best):
                best, fstype = mnt, fs
    if fstype in ("tmpfs", "ramfs"):
        root = PROJECT / "run" / f"bench-repl-{os.getpid()}"
        root.mkdir(parents=True, exist_ok=True)
        return root
    return Path(tempfile.mkdtemp(prefix="rmq-bench-repl-"))


@dataclass
class Cluster:
    name: str
    namesrv: ManagedProcess
    broker: ManagedProcess
    addr: str = ""


def start_cluster(name: str, root: Path, broker_ip: str | None = None) -> Cluster:
    """A name server and one broker on 127.0.0.1; ``broker_ip``: the address the broker advertises (routes
    then lead there, as to a broker behind NAT: ``benchmarks/wan.py`` puts a delay proxy on it)."""
    run = root / name
    run.mkdir(parents=True)
    ns = ManagedProcess("namesrv", NamesrvConfig(listen="127.0.0.1:0"), run, f"{name}-namesrv")
    cluster = Cluster(name, ns, None)  # type: ignore[arg-type]
    addr = ns.start()
    cfg = BrokerConfig(broker_name=f"{name}-a", cluster_name=name, listen="127.0.0.1:0", store_dir=run / "store",
                       namesrv_addrs=[addr], broker_ip=broker_ip)
    cluster.broker = ManagedProcess("broker", cfg, run, f"{name}-a")
    cluster.broker.start()
    cluster.addr = addr
    with Admin(addr) as admin:
        deadline = time.monotonic() + 30
        while f"{name}-a" not in admin.cluster_info().cluster_addr_table.get(name, ()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker of {name} did not register")
            time.sleep(0.1)
    return cluster


def stop_spark(queries: Sequence[Any], spark: Any) -> None:
    """A benchmark's clean-up of its Spark side: the job's stop marked, every active query stopped (a failure
    is printed, the clean-up goes on), the session stopped, the marker removed."""
    mark_stopping()
    for q in queries:
        try:
            if q.isActive:
                q.stop()
        except Exception as exc:  # noqa: BLE001 - clean-up goes on
            print(f"stopping query: {exc}", file=sys.stderr)
    if spark is not None:
        spark.stop()
    remove_stop_marker()


def stop_cluster(cluster: Cluster) -> None:
    for proc in (cluster.broker, cluster.namesrv):
        if proc is not None:
            proc.stop()


def create_topic(namesrv: str, cluster: str, topic: str, queues: int) -> list[MessageQueue]:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, queues, cluster=cluster)
        admin.wait_for_route(topic, timeout=15)
        route = admin.topic_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def total_messages(admin: Admin, queues: list[MessageQueue]) -> int:
    """Messages in ``queues``: one GET_TOPIC_STATS_INFO per topic and broker group, not one GET_MAX_OFFSET
    per queue (polled every 50 ms, 512 queues' requests cost the target broker and this process more CPU
    than the job's own sends, and skewed (e2)'s 512-queue run against itself)."""
    groups: dict[tuple[str, str], set[int]] = {}
    for mq in queues:
        groups.setdefault((mq.topic, mq.broker_name), set()).add(mq.queue_id)
    total = 0
    for (topic, broker), ids in groups.items():
        offsets = admin.topic_offsets(topic, broker)
        total += sum(offsets[i].max_offset for i in ids if i in offsets)
    return total



def link_yaml(name: str, topic: str, interval: float, work: Path, per_trigger: int, max_in_flight: int,
              max_partitions: int | None = None) -> str:
    """One link of the generated replicator.yaml (``bsrc`` -> ``bdst``, same topic name)."""
    extra = f"    max_partitions: {max_partitions}\n" if max_partitions else ""
    return f"""  - name: {name}
    source: {SOURCE}
    target: {TARGET}
    topics:
      explicit: [{{source: {topic}}}]
    trigger_interval: {interval}
    max_messages_per_trigger: {per_trigger}
    checkpoint_location: {work / 'checkpoints' / name}
    delta_location: {work / 'delta'}
    retry_backoff_ms: 100
    max_in_flight: {max_in_flight}
{extra}"""


def config_yaml(src: Cluster, dst: Cluster, links: list[str]) -> str:
    return f"""version: 1
clusters:
  - name: {src.name}
    namesrv: [{src.addr}]
  - name: {dst.name}
    namesrv: [{dst.addr}]
links:
{''.join(links)}"""


def write_config(path: Path, work: Path, src: Cluster, dst: Cluster, per_trigger: int, trigger: float,
                 max_in_flight: int, max_partitions: int | None = None) -> None:
    links = [link_yaml(name, topic, interval, work, per_trigger, max_in_flight, max_partitions)
             for name, topic, interval in (("bench-warm", TOPIC_WARM, 1.0), ("bench-main", TOPIC_MAIN, 1.0),
                                           ("bench-lat", TOPIC_LAT, trigger))]
    links += [link_yaml(f"bench-backlog-{q}", f"{TOPIC_BACKLOG}{q}", 1.0, work, per_trigger, max_in_flight,
                        max_partitions) for q in SCALING_QUEUES]
    path.write_text(config_yaml(src, dst, links))



def wait_for(admin: Admin, queues: list[MessageQueue], want: int, timeout: float, query: Any) -> float:
    """Poll the target until it holds ``want`` messages; the monotonic time it first did. Every 50 ms once
    90 % are there (the time is that exact), every 250 ms before: the polls cost the target broker and this
    process CPU that the job under measurement then lacks."""
    deadline = time.monotonic() + timeout
    while True:
        have = total_messages(admin, queues)
        if have >= want:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(f"target has {have} of {want} after {timeout}s")
        if query is not None and not query.isActive and query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        time.sleep(0.05 if have >= 0.9 * want else 0.25)


def read_timestamps(namesrv: str, queues: list[MessageQueue], field: str) -> dict[str, int]:
    """UNIQ_KEY -> born/store timestamp of every message of ``queues``."""
    from broker_store.client import PullConsumer, PullStatus

    out: dict[str, int] = {}
    with PullConsumer(namesrv, "CID_BENCH_READBACK", heartbeat_interval=None) as consumer, Admin(namesrv) as admin:
        for mq in queues:
            offset, end = admin.min_offset(mq), admin.max_offset(mq)
            while offset < end:
                r = consumer.pull(mq, offset, 1024)
                if r.status is PullStatus.FOUND:
                    for m in r.messages:
                        out[m.msg_id] = getattr(m, field)
                offset = r.next_begin_offset
    return out
