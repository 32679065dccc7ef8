"""`make demo`: start the local clusters from conf/, put a sample load through them, replicate it with
the Spark job, print what happened, and stop everything.

1. `python -m broker_store up --config conf/cluster-local.yaml` as a child (stores in a temporary dir).
2. Create `Orders` with the same queue layout on both clusters; produce messages with tags, keys and
   user properties to `source` and consume them back byte-exact.
3. Run the main job, `jobs/replicate.py`, for the `source-to-target` link of conf/replicator.yaml
   (checkpoint and Delta tables moved into the temporary dir) with Trigger.AvailableNow.
4. Verify the copy on `target` (bodies, queue ids, the replicator chain property) and print the link's
   Delta metrics.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from broker_store.client import Admin, MessageQueue, Producer, PullConsumer, PullStatus, new_message
from broker_store.config import LocalClustersConfig, load_yaml
from broker_store.protocol.message import PROPERTY_REPLICATOR_SOURCE

TOPIC = "Orders"
LINK = "source-to-target"


def start_clusters(config: Path, data_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "broker_store", "up", "--config", str(config),
                             "--data-dir", str(data_dir), "--run-dir", str(data_dir / "run")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.wait(10)
        raise SystemExit(f"local clusters did not start (exit {proc.returncode}); is something already "
                         f"listening on the ports of {config}?")
    return proc, line.split()[1:]


def queues_of(admin: Admin, topic: str) -> list[MessageQueue]:
    route = admin.wait_for_route(topic)
    return sorted(MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums))


def produce(namesrv: str, count: int) -> dict[str, bytes]:
    sent: dict[str, bytes] = {}
    started = time.monotonic()
    with Producer(namesrv, "DEMO_PRODUCER") as producer:
        for start in range(0, count, 100):
            batch = [new_message(TOPIC, os.urandom(1024), tags=("TagA", "TagB")[i % 2], keys=f"order-{i}",
                                 properties={"demo-seq": str(i)}) for i in range(start, min(count, start + 100))]
            result = producer.send_batch(batch)
            sent.update(zip(result.msg_ids, (m.body for m in batch), strict=True))
    elapsed = time.monotonic() - started
    print(f"produced {count} x 1 KiB messages to {TOPIC} on {namesrv} in {elapsed:.2f}s "
          f"({count / elapsed:.0f} msg/s, batches of 100)")
    return sent


def consume(namesrv: str, expected: dict[str, bytes], *, chain: str | None = None) -> dict[str, int]:
    """Pull every queue of TOPIC, check bodies (and the replicator chain); msgId -> queue id."""
    placed: dict[str, int] = {}
    with Admin(namesrv) as admin, PullConsumer(namesrv, "DEMO_CONSUMER") as consumer:
        for mq in queues_of(admin, TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 256)
                if result.status is not PullStatus.FOUND:
                    break
                for msg in result.messages:
                    if expected.get(msg.msg_id) != msg.body:
                        raise SystemExit(f"message {msg.msg_id} at {mq} offset {msg.queue_offset} does not match")
                    if chain is not None and msg.properties.get(PROPERTY_REPLICATOR_SOURCE) != chain:
                        raise SystemExit(f"message {msg.msg_id} on {namesrv} lacks {PROPERTY_REPLICATOR_SOURCE}")
                    placed[msg.msg_id] = mq.queue_id
                offset = result.next_begin_offset
            print(f"  {mq}: offsets [{admin.min_offset(mq)}, {admin.max_offset(mq)})")
    print(f"consumed {len(placed)} messages back from {namesrv}, every body byte-identical")
    if len(placed) != len(expected):
        raise SystemExit(f"expected {len(expected)} messages on {namesrv}, found {len(placed)}")
    return placed


def replicate(workdir: Path) -> Path:
    """Run jobs/replicate.py for LINK with AvailableNow; returns the link's Delta directory."""
    config = yaml.safe_load(Path("conf/replicator.yaml").read_text())
    for link in config["links"]:
        link["checkpoint_location"] = str(workdir / "checkpoints" / link["name"])
        link["delta_location"] = str(workdir / "delta")
    path = workdir / "replicator.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    started = time.monotonic()
    print(f"running: python jobs/replicate.py --config {path} --link {LINK} --available-now", flush=True)
    result = subprocess.run([sys.executable, "jobs/replicate.py", "--config", str(path), "--link", LINK,
                             "--available-now", "--log-level", "WARNING", "--log-dir", str(workdir / "logs")],
                            check=False)
    if result.returncode != 0:
        raise SystemExit(f"the replication job failed (exit {result.returncode})")
    print(f"replication job finished in {time.monotonic() - started:.1f}s (including Spark start-up)")
    return workdir / "delta" / LINK


def print_metrics(tables: Path) -> None:
    from deltalake import DeltaTable

    metrics = DeltaTable(str(tables / "metrics")).to_pyarrow_table().to_pylist()
    total = sum(int(m.get("messages") or 0) for m in metrics)
    print(f"Delta tables in {tables}: {len(metrics)} batch(es), {total} messages recorded in metrics")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("conf/cluster-local.yaml"))
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args(argv)
    clusters = load_yaml(args.config, LocalClustersConfig)
    with tempfile.TemporaryDirectory(prefix="rmq-demo-") as tmp:
        proc, namesrvs = start_clusters(args.config, Path(tmp))
        try:
            print("local clusters up: " + ", ".join(f"{c.name}={addr}" for c, addr in zip(clusters.clusters, namesrvs,
                                                                                          strict=True)))
            source, target = namesrvs[0], namesrvs[1]
            for namesrv in (source, target):
                with Admin(namesrv) as admin:
                    admin.create_topic(TOPIC, 4)
                    admin.wait_for_route(TOPIC)
            sent = produce(source, args.messages)
            on_source = consume(source, sent)
            tables = replicate(Path(tmp))
            on_target = consume(target, sent, chain="source")
            same_queue = sum(on_source[k] == on_target[k] for k in on_source)
            print(f"replicated {len(on_target)} of {len(sent)} messages to {target}; {same_queue} kept their "
                  f"queue id; each carries {PROPERTY_REPLICATOR_SOURCE}=source")
            print_metrics(tables)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            print(f"stopped the local clusters (exit {proc.returncode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
